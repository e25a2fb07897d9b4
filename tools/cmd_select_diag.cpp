// `spattn select-diag`: why MOMO's online block selection keeps or loses attention mass on a
// problem (a --qkv dump of real attention, or a generated workload). For every query row the
// fused pass samples (rows gamma-1, 2 gamma-1, ...; --row-step thins them) it computes the
// exact block scores S(j) (Eq. 3, natural log, scale included) of the row's candidate blocks
// (causal, less the query block's forced sink and local blocks, as BlockSelectObserver pushes
// them), in the order the fused pass delivers them (ascending j), and then:
//   - the mass each selector's choice captures against the row's exact top-k (Fig. 2e per row;
//     forced blocks counted on both sides), for each --k;
//   - why: the drift of S along the row (correlation with j, and where the true top-k sit),
//     the shape against the Gaussian Eq. (5) assumes (skewness, excess kurtosis, and how many
//     blocks exceed the threshold that even the row's final m and sigma give), when the
//     estimate runs out of slots, and the estimate on the same blocks in a shuffled order;
//   - the union and trim of Algorithm 2 against the query block's top-k_trim by the mass of its
//     sampled rows (the trim's own loss, with exact per-row selection);
//   - with --study (issue 27's last misses; every sampled row and gamma option ignored): per
//     128-row query block, its own top-k candidates by its mean row mass against the top-k of
//     rules built from exact shares of a few of its rows (0, 31, 63, 95, 127), of the last rows
//     of the blocks around it, and of the pooled query (mean_pool's estimate), each rule's loss
//     in points of the block's mass; and where the last row's misses sit;
//   - with --trace FILE, one row's blocks as they arrive: S(j), the estimate's m, sigma and
//     threshold s_th(j), whether it took the block, and the row's true k-th score.
// The scores are computed by plain loops (this is a diagnostic, not a kernel).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <functional>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cli.hpp"
#include "core/threading.hpp"
#include "masks/top_k.hpp"
#include "spattn/coverage.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/method.hpp"
#include "spattn/metrics.hpp"
#include "spattn/select.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn::cli {
namespace {

struct DiagOptions {
  ProblemOptions problem;
  std::vector<int> ks = {16, 32, 64, 128};
  int k_exact = 8;
  int64_t gamma = 16, chi = 128, beta = 64, sink = 1, local = 3, row_step = 1;
  std::string trace;
  int64_t trace_head = 0, trace_row = -1;  // -1: the last sampled row
  int trace_k = 128;
  // --recall SPEC (repeatable): run each method once and compare its attention recall with the
  // oracle block top-k at matched density (instead of the selector tables); see run_recall.
  std::vector<std::string> recall;
  bool study = false;
};

// The oracle block top-k of one geometry from the block mass grids (one full attention pass per
// head, computed once): the mask of topk blocks per query block (the blocks oracle_topk_mask
// picks) and its sparsity, counted entry by entry, so a density can be matched by bisection
// without running attention again.
struct OracleGrids {
  int64_t block_q;
  std::vector<BlockMassGrid> g;  // per q head
  BlockMask mask(int64_t topk) const {
    const BlockMassGrid& g0 = g[0];
    BlockMask m(int64_t(g.size()), g0.q_len, g0.kv_len, block_q, g0.block_k, true);
    const int64_t nq = m.n_qb(), nk = m.n_kb();
    for (size_t h = 0; h < g.size(); ++h)
      for (int64_t qb = 0; qb < nq; ++qb) {
        for (int64_t kb :
             masks::top_indices(&g[h].mass[size_t(qb * nk)], m.causal_blocks(qb), topk))
          m.blocks.push_back(int32_t(kb));
        m.offsets[size_t(int64_t(h) * nq + qb + 1)] = int64_t(m.blocks.size());
      }
    return m;
  }
  double sparsity(int64_t topk) const {
    const BlockMask m = mask(topk);
    int64_t entries = 0, causal = 0;
    for (int64_t i = 0; i < m.q_len; ++i) causal += causal_limit(i, m.q_len, m.kv_len, true);
    for (int64_t h = 0; h < m.heads; ++h)
      for (int64_t qb = 0; qb < m.n_qb(); ++qb)
        for (int32_t kb : m.row(h, qb))
          for (int64_t i = qb * block_q; i < std::min(m.q_len, (qb + 1) * block_q); ++i) {
            const int64_t lim = causal_limit(i, m.q_len, m.kv_len, true);
            entries += std::clamp<int64_t>(lim - int64_t(kb) * m.block_k, 0, m.block_k);
          }
    return 1.0 - double(entries) / double(causal * m.heads);
  }
  // The topk whose sparsity is closest to target (sparsity falls as topk grows).
  int64_t match(double target) const {
    int64_t lo = 1, hi = g[0].n_kb;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (sparsity(mid) <= target)
        hi = mid;
      else
        lo = mid + 1;
    }
    if (lo > 1 && std::abs(sparsity(lo - 1) - target) < std::abs(sparsity(lo) - target)) --lo;
    return lo;
  }
};

// One sampled row: its candidate blocks' scores in arrival order, the forced blocks' mass and
// the row's LSE over every causal key.
struct Row {
  int64_t head = 0, row = 0;
  std::vector<int32_t> block;
  std::vector<float> score;
  double lse = 0, forced_mass = 0;  // forced_mass: sum of exp(S - lse) over forced blocks
};

double mass_of(const Row& r, const std::vector<BlockScore>& sel) {
  double m = r.forced_mass;
  for (const BlockScore& b : sel) m += std::exp(double(b.score) - r.lse);
  return m;
}

template <class Sel>
std::vector<BlockScore> run_selector(Sel& s, const Row& r, const std::vector<size_t>& order) {
  for (size_t i : order) s.push(r.block[i], r.score[i]);
  return s.result();
}

struct Acc {
  double sum = 0;
  int64_t n = 0;
  void add(double x) { sum += x, ++n; }
  double mean() const { return n ? sum / double(n) : std::nan(""); }
};

// Exact block scores of the sampled rows of one head (plain loops, double sums).
// Row i's scaled scores q_i . k_j * scale over its causal keys j < lim, into s; returns their max.
double row_scores(const float* q, const float* K, int64_t lim, int64_t d, float scale,
                  std::vector<double>& s) {
  s.assign(size_t(lim), 0.0);
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < lim; ++j) {
    float acc = 0;
    for (int64_t c = 0; c < d; ++c) acc += q[c] * K[j * d + c];
    mx = std::max(mx, s[size_t(j)] = double(acc) * scale);
  }
  return mx;
}

std::vector<Row> score_rows(const Problem& p, const DiagOptions& o, int64_t h,
                            const std::vector<int64_t>& rows) {
  const int64_t L = p.q.seq(), Lkv = p.k.seq(), d = p.q.dim();
  const int64_t group = p.q.heads() / p.k.heads();
  const float scale = softmax_scale(p.opt, d);
  const float* K = p.k.data_as<float>() + (h / group) * Lkv * d;
  std::vector<Row> out(rows.size());
  parallel_for(int64_t(rows.size()), p.opt.threads, [&](int64_t ri, int) {
    const int64_t i = rows[size_t(ri)];
    const float* q = p.q.data_as<float>() + (h * L + i) * d;
    const int64_t lim = causal_limit(i, L, Lkv, true);
    const int64_t nb = (lim + o.beta - 1) / o.beta;
    std::vector<double> s;
    const double mx = row_scores(q, K, lim, d, scale, s);
    std::vector<double> bs(static_cast<size_t>(nb));
    double tot = 0;
    for (int64_t b = 0; b < nb; ++b) {
      double e = 0;
      for (int64_t j = b * o.beta; j < std::min(lim, (b + 1) * o.beta); ++j)
        e += std::exp(s[size_t(j)] - mx);
      tot += e;
      bs[size_t(b)] = std::log(e) + mx;
    }
    Row& r = out[size_t(ri)];
    r.head = h, r.row = i;
    r.lse = std::log(tot) + mx;
    // The query block's forced blocks, as momo computes them (Lkv == L: prefill).
    const int64_t qb = i / o.chi;
    const int64_t qb_last = std::min(L, (qb + 1) * o.chi) - 1;
    const int64_t causal_end = (causal_limit(qb_last, L, Lkv, true) + o.beta - 1) / o.beta;
    const int64_t sink_end = std::min(o.sink, causal_end);
    const int64_t local_begin = std::max<int64_t>(0, causal_end - o.local);
    for (int64_t b = 0; b < nb; ++b) {
      if (b < sink_end || b >= local_begin) {
        r.forced_mass += std::exp(bs[size_t(b)] - r.lse);
      } else {
        r.block.push_back(int32_t(b));
        r.score.push_back(float(bs[size_t(b)]));
      }
    }
  });
  return out;
}

struct RowShape {
  double corr = 0, skew = 0, kurt = 0;
};
RowShape shape_of(const Row& r) {
  const size_t n = r.score.size();
  double m = 0, mj = 0;
  for (size_t i = 0; i < n; ++i) m += r.score[i], mj += double(i);
  m /= double(n), mj /= double(n);
  double m2 = 0, m3 = 0, m4 = 0, cj = 0, vj = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = r.score[i] - m, y = double(i) - mj;
    m2 += x * x, m3 += x * x * x, m4 += x * x * x * x, cj += x * y, vj += y * y;
  }
  m2 /= double(n), m3 /= double(n), m4 /= double(n);
  RowShape s;
  s.corr = m2 > 0 && vj > 0 ? cj / std::sqrt(m2 * double(n) * vj) : 0;
  s.skew = m2 > 0 ? m3 / std::pow(m2, 1.5) : 0;
  s.kurt = m2 > 0 ? m4 / (m2 * m2) - 3 : 0;
  return s;
}

void write_trace(const Row& r, const DiagOptions& o) {
  std::FILE* f = std::fopen(o.trace.c_str(), "w");
  SPATTN_CHECK(f, "--trace: cannot write '", o.trace, "'");
  const int k = o.trace_k;
  const int64_t n = int64_t(r.score.size());
  SPATTN_CHECK(n > 0, "--trace-row ", r.row,
               " has no candidate block (every causal block is "
               "forced)");
  std::vector<float> sorted(r.score);
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  const float kth = sorted[size_t(std::min<int64_t>(k, n) - 1)];
  // The estimate of Eqs. (5)-(6) replayed step by step beside the real selector, which decides.
  EstimatedTopK est(k, n);
  double m = 0, m2 = 0;
  int64_t cnt = 0, taken = 0;
  fmt::print(f, "# head {} row {} k {} candidates {} true_kth {:.4f} lse {:.4f}\n", r.head, r.row,
             k, n, kth, r.lse);
  fmt::print(f, "j\tblock\tS\tm\tsigma\ts_th\ttaken\tin_true_topk\n");
  for (int64_t j = 0; j < n; ++j) {
    const int slots = k - int(taken);
    const int64_t remaining = n - j;
    const double sigma = cnt >= 2 ? std::sqrt(m2 / double(cnt - 1)) : 0;
    double th = std::nan("");
    if (slots > 0 && slots < remaining && cnt > 0)
      th =
          std::sqrt(2.0) * sigma * erfinv(float(1.0 - 2.0 * double(slots) / double(remaining))) + m;
    const int before = est.size();
    est.push(r.block[size_t(j)], r.score[size_t(j)]);
    const bool took = est.size() > before;
    taken += took;
    fmt::print(f, "{}\t{}\t{:.4f}\t{:.4f}\t{:.4f}\t{:.4f}\t{}\t{}\n", j, r.block[size_t(j)],
               r.score[size_t(j)], m, sigma, th, int(took), int(r.score[size_t(j)] >= kth));
    ++cnt;
    const double dlt = r.score[size_t(j)] - m;
    m += dlt / double(cnt);
    m2 += dlt * (r.score[size_t(j)] - m);
  }
  std::fclose(f);
}

// Row shares exp(S(b) - LSE_row) of every causal 64-key block of the given rows of head h.
std::vector<std::vector<double>> row_block_shares(const Problem& p, int64_t h,
                                                  const std::vector<int64_t>& rows) {
  const int64_t L = p.q.seq(), Lkv = p.k.seq(), d = p.q.dim();
  const int64_t group = p.q.heads() / p.k.heads();
  const float scale = softmax_scale(p.opt, d);
  const float* K = p.k.data_as<float>() + (h / group) * Lkv * d;
  std::vector<std::vector<double>> out(rows.size());
  parallel_for(int64_t(rows.size()), p.opt.threads, [&](int64_t ri, int) {
    const int64_t i = rows[size_t(ri)];
    const float* q = p.q.data_as<float>() + (h * L + i) * d;
    const int64_t lim = causal_limit(i, L, Lkv, true);
    std::vector<double> s;
    const double mx = row_scores(q, K, lim, d, scale, s);
    double tot = 0;
    std::vector<double>& b = out[size_t(ri)];
    b.assign(size_t((lim + 63) / 64), 0.0);
    for (int64_t j = 0; j < lim; ++j) {
      const double e = std::exp(s[size_t(j)] - mx);
      b[size_t(j / 64)] += e, tot += e;
    }
    for (double& x : b) x /= tot;
  });
  return out;
}

// --recall: each method run once; its recall (mean over every row of the softmax mass its
// coverage holds) and the oracle's at matched density, both exact over all rows and computed
// from the block mass grids: a block mask's rows hold sum over its blocks of the grid's mass
// (the grid is the mean over the query block's rows). momo's sampled rows see every key: their
// share of the grid is taken out, row by row from their exact block shares, and 1 put in.
// Methods other than block masks at a grid's geometry (64 or 128 query rows, 64 keys), with or
// without momo's dense sampled rows (rows gamma - 1, 2 gamma - 1, ... and the last, gamma the
// stride momo reports in its extras, else --gamma), are
// refused.
std::string rep_name(const std::string& spec) { return make_method(spec)->name(); }

void run_recall(const Problem& p, const DiagOptions& o) {
  const int64_t H = p.q.heads(), L = p.q.seq(), d = p.q.dim();
  Tensor out(DType::f32, H, L, d);
  fmt::print("recall at matched density: {} ({} heads, {} rows); recall exact over every row\n",
             p.source, H, L);
  fmt::print("{:<60} {:>9} {:>8}\n", "method", "sparsity", "recall");
  std::vector<OracleGrids> grids;
  for (int64_t bq : {int64_t(64), int64_t(128)}) {
    OracleGrids og{bq, {}};
    for (int64_t h = 0; h < H; ++h) og.g.push_back(block_mass(p.q, p.k, p.v, h, bq, 64, p.opt));
    grids.push_back(std::move(og));
  }
  // Mean over every row of the grid mass a mask's blocks hold.
  auto mask_recall = [&](const OracleGrids& og, const BlockMask& m) {
    double sum = 0;
    for (int64_t h = 0; h < H; ++h) {
      const BlockMassGrid& g = og.g[size_t(h)];
      for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
        const int64_t rows = std::min(L, (qb + 1) * og.block_q) - qb * og.block_q;
        double held = 0;
        for (int32_t kb : m.row(h, qb)) held += g.mass[size_t(qb * g.n_kb + kb)];
        sum += double(rows) * held;
      }
    }
    return sum;
  };
  // Per gamma: per head, per sampled row, the row's block shares.
  std::map<int64_t, std::vector<std::vector<std::vector<double>>>> shares_by_gamma;
  auto line = [&](const std::string& name, double sp, double recall) {
    fmt::print("{:<60} {:>8.2f}% {:>8.4f}\n", name, 100 * sp, recall);
    std::fflush(stdout);
  };
  for (const std::string& spec : o.recall) {
    const MethodReport rep = make_method(spec)->run(p.q, p.k, p.v, out, p.opt);
    SPATTN_CHECK(rep.mask && rep.mask->block_k == 64 &&
                     (rep.mask->block_q == 64 || rep.mask->block_q == 128),
                 "--recall: ", spec, " has no block mask of 64 or 128 query rows by 64 keys");
    const BlockMask& m = *rep.mask;
    const OracleGrids& og = grids[m.block_q == 64 ? 0 : 1];
    // momo reports the stride it ran with (gamma=auto picks it per run); else --gamma.
    const int64_t gamma = rep.extras.count("gamma") ? int64_t(rep.extras.at("gamma")) : o.gamma;
    const std::vector<int64_t> sampled = strided_rows(L, gamma);
    auto& shares = shares_by_gamma[gamma];
    // What the sampled rows (dense in momo) add over a mask's share of them.
    auto sampled_gain = [&](const BlockMask& bm) {
      if (shares.empty())
        for (int64_t h = 0; h < H; ++h) shares.push_back(row_block_shares(p, h, sampled));
      double gain = 0;
      for (int64_t h = 0; h < H; ++h)
        for (size_t ri = 0; ri < sampled.size(); ++ri) {
          const int64_t r = sampled[ri];
          const std::vector<double>& sh = shares[size_t(h)][ri];
          double held = 0;
          for (int32_t kb : bm.row(h, r / bm.block_q))
            if (size_t(kb) < sh.size()) held += sh[size_t(kb)];  // later blocks: past the row
          gain += 1.0 - held;
        }
      return gain;
    };
    double sum = mask_recall(og, m);
    // momo's sampled rows see every key (checked row by row).
    const bool dense_sampled = rep_name(spec) == "momo";
    if (dense_sampled) {
      std::vector<KeyRange> kr;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t r : sampled) {
          kr.clear();
          rep.coverage->row_ranges(h, r, kr);
          SPATTN_CHECK(kr.size() == 1 && kr[0].begin == 0 && kr[0].end == r + 1, "--recall: ", spec,
                       " does not attend densely at sampled row ", r, " (gamma ", gamma, ")");
        }
      sum += sampled_gain(m);
    }
    const double sp = rep.stats.sparsity();
    line(dense_sampled ? fmt::format("{} (gamma {})", spec, gamma) : spec, sp, sum / double(H * L));
    for (const OracleGrids& g : grids) {
      const int64_t t = g.match(sp);
      line(fmt::format("  oracle_topk:topk={},block_q={}", t, g.block_q), g.sparsity(t),
           mask_recall(g, g.mask(t)) / double(H * L));
    }
    if (dense_sampled && rep.extras.count("k_dense")) {
      // The same structure with perfect selection: momo's dense sampled rows, and for the
      // block-sparse pass the oracle's mask at momo's geometry with the density the fused pass
      // leaves (the selection's ceiling at this density).
      const double fused = rep.extras.at("k_dense") * double(L) / (double(L) * double(L + 1) / 2);
      const int64_t t = og.match(sp + fused);
      const BlockMask bm = og.mask(t);
      line(fmt::format("  ceiling: dense sampled rows + oracle topk={},block_q={}", t, og.block_q),
           og.sparsity(t) - fused, (mask_recall(og, bm) + sampled_gain(bm)) / double(H * L));
    }
  }
}

// --study K: which candidate blocks a query block's rows need that its sampled row does not pick
// (issue 27's last misses). Per head and 128-row query block, against the block's own top-k by
// its mean row mass (the grid), the grid mass each rule's top-k holds (candidates only: the sink
// and local blocks are forced on both sides). Rules score the candidates from exact per-row
// block shares of a few rows of the block. Plain loops; a diagnostic.
void run_study(const Problem& p, const DiagOptions& o) {
  const int64_t H = p.q.heads(), L = p.q.seq();
  const int64_t chi = 128;
  const int64_t nqb = (L + chi - 1) / chi;
  std::vector<std::string> names;
  std::map<std::string, std::vector<Acc>> held;  // per k
  std::vector<std::array<double, 6>> miss_by_dist(o.ks.size());
  std::vector<double> oracle_tot(o.ks.size(), 0.0);
  const std::vector<int> offs = {0, 31, 63, 95, 127};
  for (int64_t h = 0; h < H; ++h) {
    const BlockMassGrid g = block_mass(p.q, p.k, p.v, h, chi, 64, p.opt);
    std::vector<int64_t> rows;
    for (int64_t qb = 0; qb < nqb; ++qb)
      for (int off : offs) rows.push_back(std::min(L - 1, qb * chi + off));
    const auto sh = row_block_shares(p, h, rows);
    std::vector<double> kmean;  // per key block, its mean key
    for (int64_t qb = 1; qb < nqb - 1; ++qb) {
      const int64_t ce = g.causal_blocks(qb), sink_end = std::min<int64_t>(1, ce),
                    lb = std::max<int64_t>(0, ce - 3);
      std::vector<int32_t> cand;
      for (int64_t j = sink_end; j < lb; ++j) cand.push_back(int32_t(j));
      if (cand.empty()) continue;
      const float* gm = &g.mass[size_t(qb * g.n_kb)];
      auto S = [&](int oi, int64_t j) {
        const auto& v = sh[size_t(qb * int64_t(offs.size()) + oi)];
        return size_t(j) < v.size() ? v[size_t(j)] : 0.0;
      };
      // Row 127 of query block qb + dq (the sampled row at gamma = chi).
      auto N = [&](int64_t dq, int64_t j) {
        const auto& v = sh[size_t((qb + dq) * int64_t(offs.size()) + 4)];
        return size_t(j) < v.size() ? v[size_t(j)] : 0.0;
      };
      // Mean-pool estimate: the mean query of each sub-block of `sub` rows against each key
      // block's mean key, softmaxed over the causal blocks, averaged over the sub-blocks.
      auto mpool = [&](int64_t sub) {
        std::vector<double> out(size_t(ce), 0.0);
        const int64_t d = p.q.dim(), group = H / p.k.heads();
        const float* Q = p.q.data_as<float>() + h * L * d;
        const float* K = p.k.data_as<float>() + (h / group) * L * d;
        if (kmean.empty()) {
          kmean.assign(size_t(g.n_kb * d), 0.0);
          for (int64_t t = 0; t < L; ++t)
            for (int64_t c = 0; c < d; ++c) kmean[size_t((t / 64) * d + c)] += K[t * d + c] / 64.0;
        }
        const int64_t nsub = chi / sub;
        for (int64_t sb = 0; sb < nsub; ++sb) {
          std::vector<double> qm(size_t(d), 0.0);
          std::vector<double> e(static_cast<size_t>(ce));
          for (int64_t i = qb * chi + sb * sub; i < qb * chi + (sb + 1) * sub; ++i)
            for (int64_t c = 0; c < d; ++c) qm[size_t(c)] += Q[i * d + c] / double(sub);
          double mx = -1e300;
          for (int64_t j = 0; j < ce; ++j) {
            double acc = 0;
            for (int64_t c = 0; c < d; ++c) acc += qm[size_t(c)] * kmean[size_t(j * d + c)];
            mx = std::max(mx, e[size_t(j)] = acc * softmax_scale(p.opt, d));
          }
          double tot = 0;
          for (double& x : e) tot += (x = std::exp(x - mx));
          for (int64_t j = 0; j < ce; ++j) out[size_t(j)] += e[size_t(j)] / tot / double(nsub);
        }
        return out;
      };
      const std::vector<double> mp = mpool(128), mp64 = mpool(64), mp32 = mpool(32);
      // Variants of the pooled estimate (the block's mean query q against the keys): mode 0 key
      // sub-blocks of 16 (mean key of each, log-sum-exp'd into the block); 1 every key exactly
      // (the key pooling's own loss); 2 the second-order (Gaussian) term of the score's spread
      // over the block's keys and rows, diagonal: exp(q.k + s^2/2 sum_c (q_c^2 vk_c + k_c^2 vq_c
      // + vq_c vk_c)); 3 that with the key spread only (q_c^2 vk_c).
      auto mpvar = [&](int mode) {
        const int64_t d = p.q.dim(), group = H / p.k.heads();
        const float* Q = p.q.data_as<float>() + h * L * d;
        const float* K = p.k.data_as<float>() + (h / group) * L * d;
        const double sc = softmax_scale(p.opt, d);
        std::vector<double> qm(size_t(d), 0.0), vq(size_t(d), 0.0);
        for (int64_t i = qb * chi; i < (qb + 1) * chi; ++i)
          for (int64_t c = 0; c < d; ++c) qm[size_t(c)] += Q[i * d + c] / double(chi);
        for (int64_t i = qb * chi; i < (qb + 1) * chi; ++i)
          for (int64_t c = 0; c < d; ++c) {
            const double x = Q[i * d + c] - qm[size_t(c)];
            vq[size_t(c)] += x * x / double(chi);
          }
        std::vector<double> e(static_cast<size_t>(ce), 0.0);
        double mx = -1e300;
        for (int64_t j = 0; j < ce; ++j) {
          if (mode == 0 || mode == 1) {
            const int64_t sub = mode == 0 ? 16 : 1;
            std::vector<double> ls;
            for (int64_t t0 = j * 64; t0 < (j + 1) * 64; t0 += sub) {
              double acc = 0;
              for (int64_t c = 0; c < d; ++c) {
                double km = 0;
                for (int64_t t = t0; t < t0 + sub; ++t) km += K[t * d + c];
                acc += qm[size_t(c)] * km / double(sub);
              }
              ls.push_back(acc * sc);
            }
            double m2 = -1e300;
            for (double x : ls) m2 = std::max(m2, x);
            double z = 0;
            for (double x : ls) z += std::exp(x - m2);
            e[size_t(j)] = m2 + std::log(z / double(ls.size()));
          } else {
            double acc = 0, var = 0;
            for (int64_t c = 0; c < d; ++c) {
              double km = 0, kv = 0;
              for (int64_t t = j * 64; t < (j + 1) * 64; ++t) km += K[t * d + c] / 64.0;
              for (int64_t t = j * 64; t < (j + 1) * 64; ++t)
                kv += (K[t * d + c] - km) * (K[t * d + c] - km) / 64.0;
              acc += qm[size_t(c)] * km;
              var += qm[size_t(c)] * qm[size_t(c)] * kv;
              if (mode == 2) var += km * km * vq[size_t(c)] + vq[size_t(c)] * kv;
            }
            e[size_t(j)] = acc * sc + 0.5 * sc * sc * var;
          }
          mx = std::max(mx, e[size_t(j)]);
        }
        double tot = 0;
        for (double& x : e) tot += (x = std::exp(x - mx));
        for (double& x : e) x /= tot;
        return e;
      };
      const std::vector<double> mpk16 = mpvar(0), mpxk = mpvar(1), mpv = mpvar(2), mpvk = mpvar(3);
      // Window-normalised shares of row oi over its last W blocks (a row that sees only them).
      auto Sw = [&](int oi, int64_t j, int64_t W) {
        const auto& v = sh[size_t(qb * int64_t(offs.size()) + oi)];
        const int64_t n = int64_t(v.size()), from = std::max<int64_t>(0, n - W);
        if (j < from || j >= n) return 0.0;
        double t = 0;
        for (int64_t x = from; x < n; ++x) t += v[size_t(x)];
        return v[size_t(j)] / t;
      };
      std::vector<double> rank_row(size_t(ce), 1e9), rank_mp(size_t(ce), 1e9);
      {
        std::vector<int32_t> ids = cand;
        std::sort(ids.begin(), ids.end(), [&](int32_t x, int32_t y) { return S(4, x) > S(4, y); });
        for (size_t i = 0; i < ids.size(); ++i) rank_row[size_t(ids[i])] = double(i);
        std::sort(ids.begin(), ids.end(),
                  [&](int32_t x, int32_t y) { return mp[size_t(x)] > mp[size_t(y)]; });
        for (size_t i = 0; i < ids.size(); ++i) rank_mp[size_t(ids[i])] = double(i);
      }
      double kth = 0;
      size_t keep_now = 0;
      // Row 127 of qb + dq, clipped at its own k-th share among this block's candidates.
      auto clipN = [&](int64_t dq, int64_t j) {
        std::vector<double> v;
        for (int32_t c : cand) v.push_back(N(dq, c));
        std::sort(v.rbegin(), v.rend());
        return std::max(N(dq, j) - v[keep_now - 1], 0.0);
      };
      std::vector<std::pair<std::string, std::function<double(int64_t)>>> rules = {
          {"row127", [&](int64_t j) { return S(4, j); }},
          {"row63", [&](int64_t j) { return S(2, j); }},
          {"row0", [&](int64_t j) { return S(0, j); }},
          {"pool63+127", [&](int64_t j) { return S(2, j) + S(4, j); }},
          {"pool0+127", [&](int64_t j) { return S(0, j) + S(4, j); }},
          {"pool4", [&](int64_t j) { return S(1, j) + S(2, j) + S(3, j) + S(4, j); }},
          {"pool5", [&](int64_t j) { return S(0, j) + S(1, j) + S(2, j) + S(3, j) + S(4, j); }},
          {"127+w16x3",
           [&](int64_t j) {
             return S(4, j) + Sw(0, j, 16) + Sw(1, j, 16) + Sw(2, j, 16) + Sw(3, j, 16);
           }},
          {"127+w32x4",
           [&](int64_t j) {
             return S(4, j) + Sw(0, j, 32) + Sw(1, j, 32) + Sw(2, j, 32) + Sw(3, j, 32);
           }},
          {"127smooth",
           [&](int64_t j) { return 0.25 * S(4, j) + 0.5 * S(4, j + 1) + 0.25 * S(4, j + 2); }},
          {"127+smooth",
           [&](int64_t j) {
             return S(4, j) + 0.25 * S(4, j) + 0.5 * S(4, j + 1) + 0.25 * S(4, j + 2);
           }},
          {"127max3",
           [&](int64_t j) {
             return std::max({S(4, j), S(4, j + 1), S(4, j + 2)});
           }},
          {"above+own", [&](int64_t j) { return N(-1, j) + S(4, j); }},
          {"own+below", [&](int64_t j) { return N(1, j) + S(4, j); }},
          {"above+own+below", [&](int64_t j) { return N(-1, j) + S(4, j) + N(1, j); }},
          {"a2+a+own+b",
           [&](int64_t j) { return (qb > 1 ? N(-2, j) : 0.0) + N(-1, j) + S(4, j) + N(1, j); }},
          {"a+own+b+b2",
           [&](int64_t j) {
             return N(-1, j) + S(4, j) + N(1, j) + (qb + 2 < nqb ? N(2, j) : 0.0);
           }},
          {"meanpool", [&](int64_t j) { return mp[size_t(j)]; }},
          {"own+meanpool", [&](int64_t j) { return S(4, j) + mp[size_t(j)]; }},
          {"topk+mp", [&](int64_t j) { return (S(4, j) >= kth ? S(4, j) : 0.0) + mp[size_t(j)]; }},
          {"clip+mp", [&](int64_t j) { return std::max(S(4, j) - kth, 0.0) + mp[size_t(j)]; }},
          {"mp64", [&](int64_t j) { return mp64[size_t(j)]; }},
          {"mp32", [&](int64_t j) { return mp32[size_t(j)]; }},
          {"clip+mp64", [&](int64_t j) { return std::max(S(4, j) - kth, 0.0) + mp64[size_t(j)]; }},
          {"clip+mp32", [&](int64_t j) { return std::max(S(4, j) - kth, 0.0) + mp32[size_t(j)]; }},
          {"aob clip+mp",
           [&](int64_t j) {
             return (clipN(-1, j) + std::max(S(4, j) - kth, 0.0) + clipN(1, j)) / 3 + mp[size_t(j)];
           }},
          {"ao clip+mp",
           [&](int64_t j) {
             return (clipN(-1, j) + std::max(S(4, j) - kth, 0.0)) / 2 + mp[size_t(j)];
           }},
          {"aob sumclip+mp",
           [&](int64_t j) {
             return (clipN(-1, j) + std::max(S(4, j) - kth, 0.0) + clipN(1, j)) + mp[size_t(j)];
           }},
          {"mpk16", [&](int64_t j) { return mpk16[size_t(j)]; }},
          {"mpxk", [&](int64_t j) { return mpxk[size_t(j)]; }},
          {"mpv", [&](int64_t j) { return mpv[size_t(j)]; }},
          {"mpvk", [&](int64_t j) { return mpvk[size_t(j)]; }},
          {"clip+mpk16",
           [&](int64_t j) { return std::max(S(4, j) - kth, 0.0) + mpk16[size_t(j)]; }},
          {"clip+mpv", [&](int64_t j) { return std::max(S(4, j) - kth, 0.0) + mpv[size_t(j)]; }},
          {"clip+mpvk", [&](int64_t j) { return std::max(S(4, j) - kth, 0.0) + mpvk[size_t(j)]; }},
          {"ao clip+mpv",
           [&](int64_t j) {
             return (clipN(-1, j) + std::max(S(4, j) - kth, 0.0)) / 2 + mpv[size_t(j)];
           }},
          {"ao clip+mpk16",
           [&](int64_t j) {
             return (clipN(-1, j) + std::max(S(4, j) - kth, 0.0)) / 2 + mpk16[size_t(j)];
           }},
          {"own+2mp", [&](int64_t j) { return S(4, j) + 2 * mp[size_t(j)]; }},
          {"own+4mp", [&](int64_t j) { return S(4, j) + 4 * mp[size_t(j)]; }},
          {"sqrt", [&](int64_t j) { return std::sqrt(S(4, j) * mp[size_t(j)]); }},
          {"rrf",
           [&](int64_t j) {
             return 1.0 / (10 + rank_row[size_t(j)]) + 1.0 / (10 + rank_mp[size_t(j)]);
           }},
      };
      for (size_t ki = 0; ki < o.ks.size(); ++ki) {
        const size_t keep = std::min(cand.size(), size_t(o.ks[ki]));
        {
          std::vector<double> v;
          for (int32_t j : cand) v.push_back(S(4, j));
          std::sort(v.rbegin(), v.rend());
          kth = v[keep - 1];
          keep_now = keep;
        }
        auto topk = [&](const std::function<double(int64_t)>& key) {
          std::vector<int32_t> ids = cand;
          std::vector<double> v(size_t(ce), 0.0);
          for (int32_t j : ids) v[size_t(j)] = key(j);
          std::partial_sort(
              ids.begin(), ids.begin() + ptrdiff_t(keep), ids.end(), [&](int32_t x, int32_t y) {
                return v[size_t(x)] > v[size_t(y)] || (v[size_t(x)] == v[size_t(y)] && x < y);
              });
          ids.resize(keep);
          return ids;
        };
        const auto orc = topk([&](int64_t j) { return double(gm[j]); });
        double om = 0;
        for (int32_t j : orc) om += gm[j];
        oracle_tot[ki] += om;
        held["oracle"].resize(o.ks.size());
        held["oracle"][ki].add(om);
        for (auto& [n, f] : rules) {
          if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
          const auto sel = topk(f);
          double m = 0;
          for (int32_t j : sel) m += gm[j];
          held[n].resize(o.ks.size());
          held[n][ki].add(m);
          if (n == "row127") {
            std::vector<char> in(size_t(ce), 0);
            for (int32_t j : sel) in[size_t(j)] = 1;
            for (int32_t j : orc)
              if (!in[size_t(j)]) {
                const int64_t dist = lb - 1 - j;  // 0: just below the local window
                const int bkt = dist < 4    ? 0
                                : dist < 8  ? 1
                                : dist < 16 ? 2
                                : dist < 32 ? 3
                                : dist < 64 ? 4
                                            : 5;
                miss_by_dist[ki][size_t(bkt)] += gm[j];
              }
            for (int32_t j : sel) {
              bool o2 = false;
              for (int32_t x : orc) o2 |= x == j;
              if (!o2) {
                const int64_t dist = lb - 1 - j;
                const int bkt = dist < 4    ? 0
                                : dist < 8  ? 1
                                : dist < 16 ? 2
                                : dist < 32 ? 3
                                : dist < 64 ? 4
                                            : 5;
                miss_by_dist[ki][size_t(bkt)] -= gm[j];
              }
            }
          }
        }
      }
    }
  }
  fmt::print(
      "study: {} ({} heads); candidate mass held per query block (mean), oracle top-k "
      "by the block's mean mass, then each rule's gap to it in points\n",
      p.source, H);
  for (size_t ki = 0; ki < o.ks.size(); ++ki) {
    const double om = held["oracle"][ki].mean();
    fmt::print("k={} oracle {:.4f}:", o.ks[ki], om);
    for (const auto& n : names) fmt::print(" {} {:.2f}", n, 100 * (om - held[n][ki].mean()));
    fmt::print(
        "\n  row127's net loss by distance below the local window (blocks 0-3,4-7,8-15,16-31,32-63,64+):");
    const double nq = double(held["oracle"][ki].n);
    for (double x : miss_by_dist[ki]) fmt::print(" {:.2f}", 100 * x / nq);
    fmt::print("\n");
  }
}

void run_diag(const DiagOptions& o) {
  SPATTN_CHECK(o.chi % o.gamma == 0, "--chi must be a multiple of --gamma");
  SPATTN_CHECK(o.beta % 64 == 0, "--beta must be a multiple of 64");
  SPATTN_CHECK(o.row_step >= 1, "--row-step must be >= 1");
  for (int k : o.ks) SPATTN_CHECK(k >= 1, "--k values must be >= 1, got ", k);
  SPATTN_CHECK(o.k_exact >= 0, "--k-exact must be >= 0 (the hybrid keeps min(k_exact, k) exact)");
  ProblemOptions po = o.problem;
  po.dtype = "f32";
  const Problem p = load_problem(po);
  SPATTN_CHECK(p.q.seq() == p.k.seq(), "select-diag needs a prefill problem (q rows = k rows)");
  SPATTN_CHECK(o.trace.empty() || (o.trace_head >= 0 && o.trace_head < p.q.heads()),
               "--trace-head must be in [0, ", p.q.heads(), ")");
  SPATTN_CHECK(o.trace_k >= 1, "--trace-k must be >= 1");
  if (!o.recall.empty()) return run_recall(p, o);
  if (o.study) return run_study(p, o);
  const int64_t L = p.q.seq(), H = p.q.heads();
  std::vector<int64_t> all = strided_rows(L, o.gamma), rows;
  for (size_t i = 0; i < all.size(); i += size_t(o.row_step)) rows.push_back(all[i]);
  if (rows.back() != all.back()) rows.push_back(all.back());
  Progress progress("select-diag");

  const std::vector<std::string> names = {"exact", "hybrid", "estimate", "estimate_shuffled",
                                          "gauss_final_stats"};
  std::vector<std::vector<Acc>> ratio(o.ks.size(), std::vector<Acc>(names.size()));
  // Per k, over rows with at least 2k candidates (room to choose): the shape of S and where
  // the true top-k sit, and when the estimate filled its slots.
  struct Why {
    Acc corr, skew, kurt, top_last_quarter, fill_at, final_over_k;
  };
  std::vector<Why> why(o.ks.size());
  std::vector<Acc> trim_ratio(o.ks.size()), trim_ratio_norm(o.ks.size());
  std::mt19937_64 rng(1);
  for (int64_t h = 0; h < H; ++h) {
    progress.update(fmt::format("head {} of {}", h + 1, H));
    const std::vector<Row> rs = score_rows(p, o, h, rows);
    if (!o.trace.empty() && h == o.trace_head) {
      const Row* t = &rs.back();
      for (const Row& r : rs)
        if (r.row == o.trace_row) t = &r;
      write_trace(*t, o);
    }
    for (const Row& r : rs) {
      const int64_t n = int64_t(r.score.size());
      std::vector<size_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), size_t(0));
      const RowShape shape = n >= 2 ? shape_of(r) : RowShape{};
      std::vector<size_t> shuffled = order;
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      for (size_t ki = 0; ki < o.ks.size(); ++ki) {
        const int k = o.ks[ki];
        if (n <= k) continue;  // every selector keeps every block
        ExactTopK ex(k);
        const auto best = run_selector(ex, r, order);
        const double ref = mass_of(r, best);
        HybridTopK hy(k, std::min(o.k_exact, k), n);
        EstimatedTopK es(k, n), es2(k, n);
        ratio[ki][0].add(1.0);
        ratio[ki][1].add(mass_of(r, run_selector(hy, r, order)) / ref);
        const auto est = run_selector(es, r, order);
        ratio[ki][2].add(mass_of(r, est) / ref);
        ratio[ki][3].add(mass_of(r, run_selector(es2, r, shuffled)) / ref);
        // The Gaussian threshold with the row's final m and sigma (no drift, no order): the
        // blocks above m + sqrt(2) sigma erfinv(1 - 2k/n), the first k of them kept.
        double m = 0, m2 = 0;
        for (float x : r.score) m += x;
        m /= double(n);
        for (float x : r.score) m2 += (x - m) * (x - m);
        const double sd = std::sqrt(m2 / double(n - 1));
        const double th =
            m + std::sqrt(2.0) * sd * erfinv(float(1.0 - 2.0 * double(k) / double(n)));
        std::vector<BlockScore> g;
        int64_t above = 0;
        for (int64_t j = 0; j < n; ++j)
          if (r.score[size_t(j)] > th) {
            ++above;
            if (int64_t(g.size()) < k) g.push_back({r.block[size_t(j)], r.score[size_t(j)]});
          }
        ratio[ki][4].add(mass_of(r, g) / ref);
        if (n >= 2 * k) {
          Why& w = why[ki];
          w.corr.add(shape.corr), w.skew.add(shape.skew), w.kurt.add(shape.kurt);
          w.final_over_k.add(double(above) / double(k));
          // Where the true top-k sit, and when the estimate's slots ran out.
          int64_t last_q = 0;
          const float kth = best.back().score;
          for (int64_t j = 3 * n / 4; j < n; ++j) last_q += r.score[size_t(j)] >= kth;
          w.top_last_quarter.add(double(last_q) / double(k));
          int64_t at = n;
          if (int64_t(est.size()) == k) {
            int32_t last_block = 0;
            for (const BlockScore& b : est) last_block = std::max(last_block, b.block);
            at = std::find(r.block.begin(), r.block.end(), last_block) - r.block.begin() + 1;
          }
          w.fill_at.add(double(at) / double(n));
        }
      }
    }
    // Union and trim (Algorithm 2) over the exact per-row choices, against the query block's
    // top-k_trim by its sampled rows' summed row-normalised mass.
    for (size_t ki = 0; ki < o.ks.size(); ++ki) {
      const int k = o.ks[ki];
      for (size_t a = 0; a < rs.size();) {
        const int64_t qb = rs[a].row / o.chi;
        size_t e = a;
        while (e < rs.size() && rs[e].row / o.chi == qb) ++e;
        int64_t nb = 0;
        for (size_t i = a; i < e; ++i)
          for (int32_t b : rs[i].block) nb = std::max<int64_t>(nb, b + 1);
        std::vector<double> mass(size_t(nb), 0.0), sum_s(size_t(nb), 0.0), sum_p(size_t(nb), 0.0);
        std::vector<int> cnt(size_t(nb), 0);
        for (size_t i = a; i < e; ++i) {
          const Row& r = rs[i];
          for (size_t j = 0; j < r.block.size(); ++j)
            mass[size_t(r.block[j])] += std::exp(double(r.score[j]) - r.lse);
          ExactTopK ex(k);
          std::vector<size_t> order(r.block.size());
          std::iota(order.begin(), order.end(), size_t(0));
          for (const BlockScore& b : run_selector(ex, r, order)) {
            sum_s[size_t(b.block)] += b.score;
            sum_p[size_t(b.block)] += std::exp(double(b.score) - r.lse);
            ++cnt[size_t(b.block)];
          }
        }
        auto top_mass = [&](auto key) {
          std::vector<int32_t> ids;
          for (int32_t b = 0; b < nb; ++b)
            if (cnt[size_t(b)] > 0 || key == nullptr) ids.push_back(b);
          std::vector<double> v(static_cast<size_t>(nb));
          for (int32_t b : ids) v[size_t(b)] = key ? key(b) : mass[size_t(b)];
          const size_t keep = std::min<size_t>(ids.size(), size_t(k));
          std::partial_sort(
              ids.begin(), ids.begin() + ptrdiff_t(keep), ids.end(), [&](int32_t x, int32_t y) {
                return v[size_t(x)] > v[size_t(y)] || (v[size_t(x)] == v[size_t(y)] && x < y);
              });
          double got = 0;
          for (size_t i = 0; i < keep; ++i) got += mass[size_t(ids[i])];
          return got;
        };
        double forced = 0;
        for (size_t i = a; i < e; ++i) forced += rs[i].forced_mass;
        const double oracle = forced + top_mass(static_cast<double (*)(int32_t)>(nullptr));
        std::function<double(int32_t)> mean_s = [&](int32_t b) {
          return sum_s[size_t(b)] / cnt[size_t(b)];
        };
        std::function<double(int32_t)> sum_norm = [&](int32_t b) { return sum_p[size_t(b)]; };
        if (oracle > 0) {
          trim_ratio[ki].add((forced + top_mass(mean_s)) / oracle);
          trim_ratio_norm[ki].add((forced + top_mass(sum_norm)) / oracle);
        }
        a = e;
      }
    }
  }
  progress.done();

  fmt::print(
      "select-diag: {} ({} heads, {} rows, {} sampled rows per head), gamma {} chi {} "
      "beta {}, k_exact {}\n",
      p.source, H, L, rows.size(), o.gamma, o.chi, o.beta, o.k_exact);
  fmt::print(
      "per-row mass captured / exact top-k's (forced blocks on both sides; rows with more "
      "candidates than k):\n");
  fmt::print("{:>6}", "k");
  for (const auto& n : names) fmt::print(" {:>18}", n);
  fmt::print(" {:>12} {:>12}\n", "trim_mean_S", "trim_sum_p");
  for (size_t ki = 0; ki < o.ks.size(); ++ki) {
    fmt::print("{:>6}", o.ks[ki]);
    for (const Acc& a : ratio[ki]) fmt::print(" {:>18.4f}", a.mean());
    fmt::print(" {:>12.4f} {:>12.4f}\n", trim_ratio[ki].mean(), trim_ratio_norm[ki].mean());
  }
  fmt::print(
      "why, per k over rows with >= 2k candidates: corr(S, arrival index); skewness and "
      "excess kurtosis of S; share of the true top-k in the last quarter of the row (0.25 "
      "without drift); blocks above the Gaussian threshold of the row's final m, sigma, per "
      "k (1 if Gaussian); where the estimate's slots filled (1: never):\n");
  fmt::print("{:>6} {:>8} {:>8} {:>8} {:>8} {:>12} {:>10} {:>10}\n", "k", "rows", "corr", "skew",
             "kurt", "top_last_q", "above/k", "full_at");
  for (size_t ki = 0; ki < o.ks.size(); ++ki) {
    const Why& w = why[ki];
    fmt::print("{:>6} {:>8} {:>8.3f} {:>8.3f} {:>8.3f} {:>12.3f} {:>10.3f} {:>10.3f}\n", o.ks[ki],
               w.corr.n, w.corr.mean(), w.skew.mean(), w.kurt.mean(), w.top_last_quarter.mean(),
               w.final_over_k.mean(), w.fill_at.mean());
  }
}

}  // namespace

void add_select_diag_command(CLI::App& root) {
  auto o = std::make_shared<DiagOptions>();
  CLI::App* cmd = root.add_subcommand(
      "select-diag", "why MOMO's online top-k selectors keep or lose mass on a problem");
  add_problem_options(*cmd, o->problem);
  cmd->add_option("--k", o->ks, "blocks per row to evaluate: a,b,...")->delimiter(',');
  cmd->add_option("--k-exact", o->k_exact, "hybrid's exact slots")->capture_default_str();
  cmd->add_option("--gamma", o->gamma, "query stride of the fused pass")->capture_default_str();
  cmd->add_option("--chi", o->chi, "query rows per block")->capture_default_str();
  cmd->add_option("--beta", o->beta, "keys per block")->capture_default_str();
  cmd->add_option("--row-step", o->row_step, "use every N-th sampled row")->capture_default_str();
  cmd->add_option("--trace", o->trace, "write one row's arrival trace (TSV) here");
  cmd->add_option("--trace-head", o->trace_head, "head of the traced row")->capture_default_str();
  cmd->add_option("--trace-row", o->trace_row, "traced row, a sampled one (else: the last sampled)")
      ->capture_default_str();
  cmd->add_option("--trace-k", o->trace_k, "k of the traced estimate")->capture_default_str();
  cmd->add_option("--recall", o->recall,
                  "method spec to compare with the oracle block top-k (64- and 128-row query "
                  "blocks) at matched density (repeatable; replaces the selector tables)")
      ->allow_extra_args(false);
  cmd->add_flag("--study", o->study,
                "which blocks the rows of a query block need that its last row does not pick");
  cmd->callback([o] { run_diag(*o); });
}

}  // namespace spattn::cli
