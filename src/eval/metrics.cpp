// Metrics that judge a sparse method against exact attention. Everything is accumulated in
// double; reductions run in a fixed order so results do not depend on thread scheduling.
#include "spattn/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "core/threading.hpp"
#include "spattn/error.hpp"
#include "spattn/weight_sums.hpp"

namespace spattn {

namespace {

// Running OutputError over rows given in double.
//   rel_l2      = sqrt(sum (a - b)^2) / sqrt(sum b^2) over all elements (0 when both are 0,
//                 +inf when only the reference is all zero)
//   cosine      = a.b / (|a| |b|) per row; a row where both are zero counts 1, a row where
//                 exactly one is zero counts 0
//   max_abs     = max |a - b|
class ErrorAccumulator {
 public:
  void add_row(const double* a, const double* b, int64_t d) {
    double dot = 0, na = 0, nb = 0;
    for (int64_t c = 0; c < d; ++c) {
      const double diff = a[c] - b[c];
      err2_ += diff * diff;
      max_abs_ = std::max(max_abs_, std::abs(diff));
      dot += a[c] * b[c];
      na += a[c] * a[c];
      nb += b[c] * b[c];
    }
    ref2_ += nb;
    double cosine;
    if (na == 0 && nb == 0)
      cosine = 1;
    else if (na == 0 || nb == 0)
      cosine = 0;
    else
      cosine = dot / (std::sqrt(na) * std::sqrt(nb));
    cos_min_ = std::min(cos_min_, cosine);
    cos_sum_ += cosine;
    ++rows_;
  }
  OutputError finish() const {
    OutputError e;
    if (ref2_ > 0)
      e.rel_l2 = std::sqrt(err2_) / std::sqrt(ref2_);
    else
      e.rel_l2 = err2_ > 0 ? std::numeric_limits<double>::infinity() : 0.0;
    e.cosine_min = rows_ ? cos_min_ : 1.0;
    e.cosine_mean = rows_ ? cos_sum_ / double(rows_) : 1.0;
    e.max_abs = max_abs_;
    return e;
  }

 private:
  double err2_ = 0, ref2_ = 0, max_abs_ = 0, cos_min_ = 1, cos_sum_ = 0;
  int64_t rows_ = 0;
};

void read_row(const TensorView& t, int64_t h, int64_t s, std::vector<double>& row) {
  row.resize(size_t(t.dim));
  for (int64_t c = 0; c < t.dim; ++c) row[size_t(c)] = t.get(h, s, c);
}

void check_qk(const TensorView& q, const TensorView& k, const char* what) {
  SPATTN_CHECK(q.heads > 0 && k.heads > 0, what, ": heads must be > 0");
  SPATTN_CHECK(q.dim == k.dim, what, ": q.dim ", q.dim, " != k.dim ", k.dim);
  SPATTN_CHECK(q.heads % k.heads == 0, what, ": q heads ", q.heads,
               " must be a multiple of kv heads ", k.heads);
  SPATTN_CHECK(q.data && k.data, what, ": null data pointer");
}

// Scaled scores s_j = scale * q_i . k_j of one row over its visible keys, and their
// log-sum-exp (-inf when no key is visible).
struct RowScores {
  std::vector<double> s;
  double lse = -std::numeric_limits<double>::infinity();
};
void row_scores(const TensorView& q, const TensorView& k, int64_t h, int64_t i, double scale,
                bool causal, RowScores& out) {
  const int64_t d = q.dim, kh = h / (q.heads / k.heads);
  const int64_t visible = causal_limit(i, q.seq, k.seq, causal);
  std::vector<double> qi;
  read_row(q, h, i, qi);
  out.s.resize(size_t(visible));
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < visible; ++j) {
    double acc = 0;
    for (int64_t c = 0; c < d; ++c) acc += qi[size_t(c)] * double(k.get(kh, j, c));
    out.s[size_t(j)] = acc * scale;
    m = std::max(m, out.s[size_t(j)]);
  }
  double l = 0;
  for (int64_t j = 0; j < visible; ++j) l += std::exp(out.s[size_t(j)] - m);
  out.lse = visible > 0 ? m + std::log(l) : -std::numeric_limits<double>::infinity();
}

}  // namespace

OutputError compare_outputs(const TensorView& out, const TensorView& ref) {
  SPATTN_CHECK(out.heads == ref.heads && out.seq == ref.seq && out.dim == ref.dim,
               "compare_outputs: shapes differ: ", out.shape_str(), " vs ", ref.shape_str());
  ErrorAccumulator acc;
  std::vector<double> a, b;
  for (int64_t h = 0; h < out.heads; ++h)
    for (int64_t s = 0; s < out.seq; ++s) {
      read_row(out, h, s, a);
      read_row(ref, h, s, b);
      acc.add_row(a.data(), b.data(), out.dim);
    }
  return acc.finish();
}

std::vector<int64_t> sample_rows(int64_t q_len, int64_t max_rows) {
  SPATTN_CHECK(q_len >= 0, "sample_rows: q_len must be >= 0, got ", q_len);
  SPATTN_CHECK(max_rows >= 1, "sample_rows: max_rows must be >= 1, got ", max_rows);
  std::vector<int64_t> rows;
  if (q_len <= max_rows) {
    for (int64_t i = 0; i < q_len; ++i) rows.push_back(i);
    return rows;
  }
  if (max_rows == 1) return {q_len - 1};  // the last row: the one decode cares about
  // Row r_k = round(k (q_len - 1) / (max_rows - 1)): strictly increasing because
  // q_len > max_rows, first 0 and last q_len - 1.
  for (int64_t k = 0; k < max_rows; ++k)
    rows.push_back((2 * k * (q_len - 1) + (max_rows - 1)) / (2 * (max_rows - 1)));
  return rows;
}

// The exact output row o_i = sum_j softmax(s)_j v_j, in double: the same conventions as
// attention_reference (bottom-right causal, GQA h -> h / (Hq/Hkv), scale 0 -> 1/sqrt(d)).
OutputError sampled_output_error(const TensorView& out, const TensorView& q, const TensorView& k,
                                 const TensorView& v, const AttnOptions& opt, int64_t max_rows) {
  check_qk(q, k, "sampled_output_error");
  SPATTN_CHECK(v.heads == k.heads && v.seq == k.seq && v.dim == k.dim, "sampled_output_error: v ",
               v.shape_str(), " must match k ", k.shape_str());
  SPATTN_CHECK(out.heads == q.heads && out.seq == q.seq && out.dim == q.dim,
               "sampled_output_error: out ", out.shape_str(), " must match q ", q.shape_str());
  const std::vector<int64_t> rows = sample_rows(q.seq, max_rows);
  const int64_t n = q.heads * int64_t(rows.size()), d = q.dim;
  const double scale = softmax_scale(opt, d);
  std::vector<double> ref(size_t(n * d), 0.0);
  parallel_for(n, resolve_threads(opt.threads), [&](int64_t item, int) {
    const int64_t h = item / int64_t(rows.size()), i = rows[size_t(item % int64_t(rows.size()))];
    const int64_t kh = h / (q.heads / k.heads);
    RowScores rs;
    row_scores(q, k, h, i, scale, opt.causal, rs);
    double* o = &ref[size_t(item * d)];
    for (size_t j = 0; j < rs.s.size(); ++j) {
      const double p = std::exp(rs.s[j] - rs.lse);
      for (int64_t c = 0; c < d; ++c) o[c] += p * double(v.get(kh, int64_t(j), c));
    }
  });
  ErrorAccumulator acc;
  std::vector<double> a;
  for (int64_t item = 0; item < n; ++item) {
    const int64_t h = item / int64_t(rows.size()), i = rows[size_t(item % int64_t(rows.size()))];
    read_row(out, h, i, a);
    acc.add_row(a.data(), &ref[size_t(item * d)], d);
  }
  return acc.finish();
}

// Recall of row i: sum over covered visible keys of exp(s_j - lse) (the softmax mass the
// method computed), in double. Rows that see no key are not evaluated.
Recall attention_recall(const TensorView& q, const TensorView& k, const Coverage& cov,
                        const AttnOptions& opt, int64_t max_rows) {
  check_qk(q, k, "attention_recall");
  const std::vector<int64_t> rows = sample_rows(q.seq, max_rows);
  const int64_t per_head = int64_t(rows.size()), n = q.heads * per_head;
  const double scale = softmax_scale(opt, q.dim);
  const double kSkipped = -1;  // marks rows with no visible key
  std::vector<double> recall(size_t(n), kSkipped);
  parallel_for(n, resolve_threads(opt.threads), [&](int64_t item, int) {
    const int64_t h = item / per_head, i = rows[size_t(item % per_head)];
    RowScores rs;
    row_scores(q, k, h, i, scale, opt.causal, rs);
    if (rs.s.empty()) return;
    std::vector<KeyRange> ranges;
    cov.row_ranges(h, i, ranges);
    const int64_t visible = int64_t(rs.s.size());
    double mass = 0;
    int64_t prev_end = 0;
    for (const KeyRange& r : ranges) {
      SPATTN_CHECK(r.begin >= prev_end && r.begin <= r.end && r.end <= k.seq,
                   "attention_recall: coverage ranges of head ", h, " row ", i,
                   " must be sorted, disjoint and inside [0, ", k.seq, "), got [", r.begin, ", ",
                   r.end, ")");
      prev_end = r.end;
      for (int64_t j = r.begin; j < std::min(r.end, visible); ++j)
        mass += std::exp(rs.s[size_t(j)] - rs.lse);
    }
    recall[size_t(item)] = std::min(mass, 1.0);
  });
  Recall r;
  r.mean = 0;
  for (double x : recall) {
    if (x == kSkipped) continue;
    r.mean += x;
    r.worst = std::min(r.worst, x);
    ++r.rows;
  }
  r.mean = r.rows ? r.mean / double(r.rows) : 1.0;
  return r;
}

int64_t BlockMassGrid::causal_blocks(int64_t qb) const {
  SPATTN_CHECK(qb >= 0 && qb < n_qb, "causal_blocks: query block ", qb, " outside [0, ", n_qb, ")");
  if (!causal) return n_kb;
  const int64_t last_row = std::min((qb + 1) * block_q, q_len) - 1;
  const int64_t visible = causal_limit(last_row, q_len, kv_len, true);
  return (visible + block_k - 1) / block_k;
}

// mass[qb][kb] = (1 / R_qb) sum over rows i of query block qb that see at least one key of
//   sum over keys j of key block kb of softmax_i(j)  =  exp(LSE_i(block kb) - LSE_i),
// R_qb the number of such rows. Two passes: the kernel's final LSE per row first, then
// attention_weight_sums, which sums the normalised weights per block through the P hook.
BlockMassGrid block_mass(const TensorView& q, const TensorView& k, const TensorView& v,
                         int64_t q_head, int64_t block_q, int64_t block_k, const AttnOptions& opt) {
  check_qk(q, k, "block_mass");
  SPATTN_CHECK(q_head >= 0 && q_head < q.heads, "block_mass: q_head ", q_head, " outside [0, ",
               q.heads, ")");
  SPATTN_CHECK(block_q >= 1 && block_q <= (int64_t(1) << 18),
               "block_mass: block_q must be in [1, 262144], got ", block_q);
  SPATTN_CHECK(block_k >= kKeyBlock && block_k % kKeyBlock == 0,
               "block_mass: block_k must be a positive multiple of ", kKeyBlock, ", got ", block_k);
  BlockMassGrid g;
  g.block_q = block_q;
  g.block_k = block_k;
  g.q_len = q.seq;
  g.kv_len = k.seq;
  g.causal = opt.causal;
  g.n_qb = (q.seq + block_q - 1) / block_q;
  g.n_kb = (k.seq + block_k - 1) / block_k;
  g.mass.assign(size_t(g.n_qb * g.n_kb), 0.0f);

  const int64_t kh = q_head / (q.heads / k.heads);
  const TensorView q1 = q.head_range(q_head, 1), k1 = k.head_range(kh, 1), v1 = v.head_range(kh, 1);
  Tensor out(DType::f32, 1, q.seq, q.dim);
  std::vector<float> lse(size_t(q.seq));
  attention_dense(q1, k1, v1, out, opt, lse.data());
  WeightSums sums;
  sums.want_columns = false;
  sums.want_blocks = true;
  sums.block_q = block_q;
  sums.block_k = block_k;
  attention_weight_sums(q1, k1, v1, lse.data(), sums, opt);

  for (int64_t qb = 0; qb < g.n_qb; ++qb) {
    int64_t rows = 0;
    for (int64_t i = qb * block_q; i < std::min((qb + 1) * block_q, q.seq); ++i)
      rows += causal_limit(i, q.seq, k.seq, opt.causal) > 0;
    if (rows == 0) continue;
    for (int64_t kb = 0; kb < g.n_kb; ++kb)
      g.mass[size_t(qb * g.n_kb + kb)] = float(sums.block[size_t(qb * g.n_kb + kb)] / double(rows));
  }
  return g;
}

namespace {

// Mean over query blocks with at least one causal key block of the mass held by that row's
// k(qb) largest cells.
double mean_topk_mass(const BlockMassGrid& g, const std::function<int64_t(int64_t)>& k_of) {
  SPATTN_CHECK(int64_t(g.mass.size()) == g.n_qb * g.n_kb, "BlockMassGrid: mass has ", g.mass.size(),
               " cells, expected ", g.n_qb * g.n_kb);
  double total = 0;
  int64_t blocks = 0;
  std::vector<float> row;
  for (int64_t qb = 0; qb < g.n_qb; ++qb) {
    if (g.causal_blocks(qb) == 0) continue;
    const int64_t k = std::min(k_of(qb), g.n_kb);
    row.assign(g.mass.begin() + qb * g.n_kb, g.mass.begin() + (qb + 1) * g.n_kb);
    std::partial_sort(row.begin(), row.begin() + k, row.end(), std::greater<float>());
    double held = 0;
    for (int64_t i = 0; i < k; ++i) held += row[size_t(i)];
    total += held;
    ++blocks;
  }
  return blocks ? total / double(blocks) : 1.0;
}

}  // namespace

// k(qb) = max(1, ceil(f * causal_blocks(qb))); the product is nudged down by 1e-9 so a budget
// like 0.05 * 20 gives exactly 1 block despite binary rounding.
double oracle_topk_mass(const BlockMassGrid& g, double budget_fraction) {
  SPATTN_CHECK(budget_fraction >= 0 && budget_fraction <= 1,
               "oracle_topk_mass: budget_fraction must be in [0, 1], got ", budget_fraction);
  return mean_topk_mass(g, [&](int64_t qb) {
    const double want = std::ceil(budget_fraction * double(g.causal_blocks(qb)) - 1e-9);
    return std::max<int64_t>(1, int64_t(want));
  });
}

double oracle_topk_mass_k(const BlockMassGrid& g, int64_t k) {
  SPATTN_CHECK(k >= 1, "oracle_topk_mass_k: k must be >= 1, got ", k);
  return mean_topk_mass(g, [&](int64_t) { return k; });
}

}  // namespace spattn
