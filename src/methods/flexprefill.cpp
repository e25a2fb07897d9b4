// flexprefill: context-aware block-sparse prefill ("FlexPrefill: A Context-Aware Sparse
// Attention Mechanism for Efficient Long-Sequence Inference", Lai et al., ICLR 2025). The whole
// method is this file.
//
// Per q head, from the last B queries (the paper's q_hat, Sec. 3.2, Algorithm 1):
//  - A_hat = their causal softmax against every key (MInference's estimate, as vertical_slash
//    makes it, here on the flash kernel's score micro-kernels); vertical[j] = A_hat's mean over
//    the rows at key j, slash[o] its mean along the diagonal o = p - j.
//  - the estimated block distribution a_bar[b] = vertical summed over key block b (sums to 1);
//    the pooled one a_hat[b] = softmax_b(scale * mean(q_hat) . mean(keys of block b)).
//  - d = sqrt(JSD(a_bar, a_hat)) (natural log, so d lies in [0, sqrt(ln 2)]). d < tau: the
//    pooled estimate is trustworthy for this head and it takes the query-aware pattern; else
//    vertical-slash (Sec. 3.2, "Query-Aware Sparse Pattern Determination").
// Vertical-slash (Algorithm 2): key blocks by their vertical mass and diagonal bands of B
// offsets ([cB, (c+1)B)) by their slash mass, each kept in descending mass (ties: the smaller
// index) until gamma of the last queries' mass; block 0 (the sink) and band 0 (the diagonal)
// always, counted first. The cover is counted in blocks, so the kept blocks hold at least gamma
// of the estimate (the authors' code counts lines and divides by B, which can keep less). Each
// query block then keeps the kept columns' blocks it can see and every key block a kept band
// crosses for its rows.
// Query-aware (Algorithm 3): A_pool[m][n] = softmax_n(scale * mean(Q block m) . mean(K block n))
// over the causal blocks, each row summing to 1; the paper flattens the whole map and keeps its
// largest entries until gamma of the total (qa=head, default); qa=block keeps each query
// block's own largest until gamma of its row. Blocks already kept count first.
// Minimum budget (min_budget tokens, as the paper's code counts it: ceil(min_budget / B)
// blocks): every head keeps at least that many vertical blocks and slash bands, the
// query-aware heads too (their vertical-slash part is only this floor). Sink and diagonal
// blocks are always kept.
//
// Defaults as the paper's language-model runs: gamma = 0.9, tau = 0.1, B = 128, min_budget =
// 1024. `topp=` is gamma's other name, the mass budget every block-selecting method takes.
// Beyond the paper, gamma's place can take the other two budgets (masks/block_budget.hpp says
// when to use which), each in every list gamma fills: `topk=K`, the K candidates of largest
// mass beside the forced ones (vertical blocks, slash bands; a query-aware head's K largest
// pooled blocks per query block), the count topp is judged against at equal density; and
// `min_share=T`, every candidate whose share of its distribution (a_bar, the bands' slash
// mass, its query block's pooled row) is at least T, one threshold across blocks. The floor
// applies to both; with them a query-aware head's pooled map is read per query block (a count
// or a share per row), so `qa` goes with gamma only.
// Every product (last queries x keys, pooled x pooled) runs on kernels/long_row_scores in f32.
// On CUDA tensors every step runs on the device, the same rules (src/cuda/flexprefill.cu; the
// last queries' scores there are tensor-core products of the bf16 or f16 inputs).
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "core/threading.hpp"
#include "kernels/exp_row.hpp"
#include "kernels/long_row_scores.hpp"
#include "masks/block_closure.hpp"
#include "methods/block_mask_method.hpp"
#include "methods/fraction.hpp"
#include "methods/registry.hpp"
#include "spattn/attention.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

// Adds to `keep` the candidates (not yet kept) of largest mass (ties: the smaller index) while
// the kept mass is below `need` or fewer than `floor` are kept; `kept` and `count` hold what is
// kept already and are updated.
void take_by_mass(const std::vector<double>& mass, std::vector<uint8_t>& keep, double need,
                  int64_t floor, double& kept, int64_t& count) {
  std::vector<int64_t> order;
  for (size_t i = 0; i < mass.size(); ++i)
    if (!keep[i]) order.push_back(int64_t(i));
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return mass[size_t(a)] != mass[size_t(b)] ? mass[size_t(a)] > mass[size_t(b)] : a < b;
  });
  for (size_t i = 0; i < order.size() && (kept < need || count < floor); ++i) {
    keep[size_t(order[i])] = 1;
    kept += mass[size_t(order[i])];
    ++count;
  }
}

// What a list spends: gamma of its mass (the paper's), a count beside what it holds, or a
// share threshold.
struct Budget {
  enum Kind { mass, count, share } kind = mass;
  double value = 0.9;  // gamma, the count or the threshold
};

// Tops `keep` up by the budget, what `keep` holds already counting first (toward the mass), then
// by mass (take_by_mass) until at least `floor` entries are kept.
void top_up(const std::vector<double>& mass, std::vector<uint8_t>& keep, const Budget& b,
            int64_t floor) {
  double kept = 0, total = 0;
  int64_t count = 0;
  for (size_t i = 0; i < mass.size(); ++i) {
    total += mass[i];
    if (keep[i]) kept += mass[i], ++count;
  }
  if (b.kind == Budget::count) {
    take_by_mass(mass, keep, 0.0, count + int64_t(b.value), kept, count);
  } else if (b.kind == Budget::share) {
    for (size_t i = 0; i < mass.size(); ++i)
      if (!keep[i] && mass[i] >= b.value * total) keep[i] = 1, kept += mass[i], ++count;
  } else {
    take_by_mass(mass, keep, b.value * total, 0, kept, count);
  }
  take_by_mass(mass, keep, 0.0, floor, kept, count);
}

// Keeps forced entries, then the rest by the budget (vertical-slash heads) and at least
// `floor` entries in all.
std::vector<uint8_t> cover(const std::vector<double>& mass, const std::vector<int64_t>& forced,
                           const Budget& b, int64_t floor) {
  std::vector<uint8_t> keep(mass.size(), 0);
  for (int64_t f : forced)
    if (f < int64_t(mass.size())) keep[size_t(f)] = 1;
  top_up(mass, keep, b, floor);
  return keep;
}

// sqrt of the Jensen-Shannon divergence of two distributions (natural log; 0 log 0 = 0).
double js_distance(const std::vector<double>& p, const std::vector<double>& q) {
  double s = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double m = 0.5 * (p[i] + q[i]);
    if (p[i] > 0) s += 0.5 * p[i] * std::log(p[i] / m);
    if (q[i] > 0) s += 0.5 * q[i] * std::log(q[i] / m);
  }
  return std::sqrt(std::max(0.0, s));
}

// Softmax of n float scores into out (double), over x[0..n).
void softmax(const float* x, int64_t n, std::vector<double>& out) {
  out.resize(size_t(n));
  if (n == 0) return;
  const float mx = *std::max_element(x, x + n);
  const double inv = 1.0 / kernels::exp_row_f64(x, n, double(mx), out.data());
  for (double& e : out) e *= inv;
}

// Head rows as f32 [n][w] (w >= dim, zero-padded): pooled means of `block` rows, then `extra`
// rows appended by the caller.
std::vector<float> padded(const std::vector<float>& rows, int64_t n, int64_t d, int64_t w,
                          int64_t extra) {
  std::vector<float> out(size_t((n + extra) * w), 0.0f);
  for (int64_t r = 0; r < n; ++r) std::copy_n(&rows[size_t(r * d)], d, &out[size_t(r * w)]);
  return out;
}

struct HeadChoice {
  double js = 0;
  bool query_aware = false;
  int64_t vertical = 0, slash = 0;  // key blocks and diagonal bands kept
};

class FlexPrefill final : public BlockMaskMethod {
 public:
  explicit FlexPrefill(const MethodSpec& spec) {
    ParamReader r(spec);
    SPATTN_CHECK(!(r.has("gamma") && r.has("topp")),
                 "flexprefill: give gamma or topp (the same mass budget), not both");
    SPATTN_CHECK(
        int(r.has("gamma") || r.has("topp")) + int(r.has("topk")) + int(r.has("min_share")) <= 1,
        "flexprefill: give one budget: gamma (topp, a mass), topk (a count) or "
        "min_share (a threshold)");
    const char* key = r.has("topp") ? "topp" : "gamma";
    gamma_ = get_fraction(r, spec.name, key, 0.9, Fraction::up_to_one);
    budget_.value = gamma_;
    if (r.has("topk")) {
      budget_.kind = Budget::count;
      budget_.value = double(r.get_int("topk", 0, 0, int64_t(1) << 40));
    } else if (r.has("min_share")) {
      budget_.kind = Budget::share;
      budget_.value = get_fraction(r, spec.name, "min_share", 0.5, Fraction::below_one);
    }
    SPATTN_CHECK(budget_.kind == Budget::mass || !r.has("qa"),
                 "flexprefill: qa goes with gamma (topp); topk and min_share read the pooled map "
                 "per query block");
    tau_ = r.get_double("tau", 0.1, -HUGE_VAL, HUGE_VAL);
    SPATTN_CHECK(tau_ >= 0 && tau_ <= 1, "flexprefill: tau=", tau_, " outside [0, 1]");
    block_q_ = block_k_ = r.get_int("block", 128, 1, 1 << 20);
    min_budget_ = r.get_int("min_budget", 1024, 0, int64_t(1) << 40);
    const std::string qa = r.get_string("qa", "head");
    SPATTN_CHECK(qa == "head" || qa == "block", "flexprefill: qa='", qa,
                 "' must be head (the paper's flattened map) or block (per query block)");
    qa_per_block_ = qa == "block";
    r.finish();
  }
  std::string name() const override { return "flexprefill"; }

 protected:
  bool run_device_estimate(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const AttnOptions& opt, float* lse,
                           cuda::BlockSelectResult& result) const override {
    cuda::FlexPrefillGpuPlan p;
    p.block = block_q_, p.min_budget = min_budget_, p.tau = tau_, p.qa_per_block = qa_per_block_;
    if (budget_.kind == Budget::count)
      p.budget = {int64_t(budget_.value), 0, 0};
    else if (budget_.kind == Budget::share)
      p.budget = {0, 0, budget_.value};
    else
      p.budget = {0, gamma_, 0};
    cuda::flexprefill_attention(q, k, v, out, p, opt, lse, result, opt.stream);
    report_params(result.per_head, result.extras);
    return true;
  }

  BlockMask build_mask(const TensorView& q, const TensorView& k, const TensorView& v,
                       const AttnOptions& opt) const override {
    MethodReport unused;
    return build_mask_reported(q, k, v, opt, unused);
  }

  BlockMask build_mask_reported(const TensorView& q, const TensorView& k, const TensorView&,
                                const AttnOptions& opt, MethodReport& report) const override {
    SPATTN_CHECK(opt.causal, "flexprefill: needs causal attention");
    SPATTN_CHECK(q.heads > 0 && k.heads > 0 && q.heads % k.heads == 0 && q.dim == k.dim &&
                     q.seq > 0 && q.seq <= k.seq,
                 "flexprefill: bad shapes q ", q.shape_str(), ", k ", k.shape_str());
    const int64_t B = block_q_, d = q.dim, w = d + (d % 2), group = q.heads / k.heads;
    const int64_t lk = k.seq, n_hat = std::min(B, q.seq), off = query_position(0, q.seq, lk);
    const BlockMask geo(q.heads, q.seq, lk, B, B, true);
    const int64_t nq = geo.n_qb(), nk = geo.n_kb();  // nk: pooled key blocks
    const int64_t floor = (min_budget_ + B - 1) / B;
    const float scale = softmax_scale(opt, d);
    const int threads = resolve_threads(opt.threads);

    // Keys and pooled keys per kv head, packed once for the score micro-kernels (f32: the
    // estimate picks the pattern, and a near-tie there is worth no rounding).
    std::vector<kernels::LongRowKeys> keys(static_cast<size_t>(k.heads)),
        pooled_k(static_cast<size_t>(k.heads));
    parallel_for(k.heads, threads, [&](int64_t h, int) {
      std::vector<float> kr(static_cast<size_t>(lk * w), 0.0f);
      for (int64_t j = 0; j < lk; ++j) kernels::copy_row_f32(k, h, j, &kr[size_t(j * w)]);
      keys[size_t(h)] = kernels::pack_long_row_keys(kr.data(), lk, w, false);
      const std::vector<float> kp = padded(mean_pool_rows(k, h, B), nk, d, w, 0);
      pooled_k[size_t(h)] = kernels::pack_long_row_keys(kp.data(), nk, w, false);
    });

    // Per q head, single-threaded (the result does not depend on the thread count): the last
    // queries' softmax (MInference's A_hat) summed per key (vertical) and per diagonal (slash),
    // then the head's choice and lists.
    struct Scratch {
      std::vector<float> qr, sc;
      std::vector<double> e, vertical, slash;
    };
    std::vector<Scratch> scratch(static_cast<size_t>(std::max(1, threads)));
    std::vector<HeadChoice> choice(static_cast<size_t>(q.heads));
    std::vector<std::vector<int32_t>> lists(static_cast<size_t>(q.heads * nq));
    parallel_for(q.heads, threads, [&](int64_t h, int t) {
      Scratch& x = scratch[size_t(t)];
      x.qr.assign(size_t(n_hat * w), 0.0f);
      for (int64_t r = 0; r < n_hat; ++r)
        kernels::copy_row_f32(q, h, q.seq - n_hat + r, &x.qr[size_t(r * w)]);
      x.sc.resize(size_t(n_hat * lk));
      x.e.resize(size_t(lk));
      x.vertical.assign(size_t(lk), 0.0);
      x.slash.assign(size_t(lk), 0.0);
      kernels::long_row_scores(x.qr.data(), n_hat, keys[size_t(h / group)], lk, scale, x.sc.data(),
                               lk);
      for (int64_t r = 0; r < n_hat; ++r) {
        const int64_t p = off + q.seq - n_hat + r, vis = std::min(lk, p + 1);
        const float* row = &x.sc[size_t(r * lk)];
        const float mx = *std::max_element(row, row + vis);
        const double inv =
            1.0 / (kernels::exp_row_f64(row, vis, double(mx), x.e.data()) * double(n_hat));
        double* __restrict vert = x.vertical.data();
        double* __restrict sl = x.slash.data();
        for (int64_t j = 0; j < vis; ++j) {
          vert[j] += x.e[size_t(j)] * inv;
          sl[p - j] += x.e[size_t(j)] * inv;
        }
      }
      choice[size_t(h)] = select_head(q, h, pooled_k[size_t(h / group)], x.vertical, x.slash, geo,
                                      off, floor, scale, &lists[size_t(h * nq)]);
    });

    std::vector<double>& js = report.per_head["js_distance"];
    std::vector<double>& qa = report.per_head["query_aware"];
    std::vector<double>& nv = report.per_head["vertical_blocks"];
    std::vector<double>& ns = report.per_head["slash_bands"];
    for (const HeadChoice& c : choice) {
      js.push_back(c.js);
      qa.push_back(c.query_aware ? 1.0 : 0.0);
      nv.push_back(double(c.vertical));
      ns.push_back(double(c.slash));
    }
    report_params(report.per_head, report.extras);
    return BlockMask::from_lists(q.heads, q.seq, lk, B, B, true, lists);
  }

 private:
  // The budget and parameters, and how many heads took the query-aware pattern: the same
  // report from both devices.
  void report_params(const std::map<std::string, std::vector<double>>& per_head,
                     std::map<std::string, double>& extras) const {
    const auto qa = per_head.find("query_aware");
    extras["query_aware_heads"] =
        qa == per_head.end() ? 0.0 : std::accumulate(qa->second.begin(), qa->second.end(), 0.0);
    if (budget_.kind == Budget::count)
      extras["topk"] = budget_.value;
    else if (budget_.kind == Budget::share)
      extras["min_share"] = budget_.value;
    else
      extras["gamma"] = gamma_;
    extras["tau"] = tau_;
    extras["block"] = double(block_q_);
    extras["min_budget"] = double(min_budget_);
  }

  // One head: the pattern choice and its per-query-block lists (lists[qb], qb < n_qb).
  HeadChoice select_head(const TensorView& q, int64_t h, const kernels::LongRowKeys& pk,
                         const std::vector<double>& vertical, const std::vector<double>& slash,
                         const BlockMask& geo, int64_t off, int64_t floor, float scale,
                         std::vector<int32_t>* lists) const {
    const int64_t B = block_q_, d = q.dim, w = pk.w, nq = geo.n_qb(), nk = geo.n_kb();
    const int64_t lk = geo.kv_len, n_hat = std::min(B, q.seq);
    // Pooled queries per query block, and the estimate rows' mean as the last row.
    std::vector<float> qp = padded(mean_pool_rows(q, h, B), nq, d, w, 1);
    {
      std::vector<double> acc(static_cast<size_t>(d), 0.0);
      for (int64_t s = q.seq - n_hat; s < q.seq; ++s)
        for (int64_t c = 0; c < d; ++c) acc[size_t(c)] += q.get(h, s, c);
      for (int64_t c = 0; c < d; ++c)
        qp[size_t(nq * w + c)] = float(acc[size_t(c)] / double(n_hat));
    }
    std::vector<float> sc(static_cast<size_t>((nq + 1) * nk));
    kernels::long_row_scores(qp.data(), nq + 1, pk, nk, scale, sc.data(), nk);

    // The estimated and the pooled block distributions of the last queries (every key block
    // is visible to the last row).
    std::vector<double> a_bar(static_cast<size_t>(nk), 0.0), s_band(static_cast<size_t>(nk), 0.0),
        a_hat;
    for (int64_t j = 0; j < lk; ++j) {
      a_bar[size_t(j / B)] += vertical[size_t(j)];
      s_band[size_t(j / B)] += slash[size_t(j)];
    }
    softmax(&sc[size_t(nq * nk)], nk, a_hat);
    HeadChoice c;
    c.js = js_distance(a_bar, a_hat);
    c.query_aware = c.js < tau_;

    // Vertical blocks and slash bands: the budget (gamma of the estimate) for a vertical-slash
    // head, only the floor for a query-aware one.
    const Budget g = c.query_aware ? Budget{Budget::mass, 0.0} : budget_;
    const std::vector<uint8_t> vkeep = cover(a_bar, {0}, g, floor);
    const std::vector<uint8_t> skeep = cover(s_band, {0}, g, floor);
    c.vertical = std::count(vkeep.begin(), vkeep.end(), 1);
    c.slash = std::count(skeep.begin(), skeep.end(), 1);
    std::vector<std::vector<uint8_t>> keep(static_cast<size_t>(nq));
    for (int64_t qb = 0; qb < nq; ++qb) {
      std::vector<uint8_t>& kp = keep[size_t(qb)];
      kp.assign(size_t(nk), 0);
      const int64_t limit = geo.causal_blocks(qb);
      const int64_t p0 = off + qb * B, p1 = off + std::min((qb + 1) * B, q.seq) - 1;
      if (limit > 0) kp[0] = 1;                             // the sink
      masks::mark_blocks(p0, std::min(p1 + 1, lk), B, kp);  // the diagonal
      for (int64_t b = 0; b < limit; ++b)
        if (vkeep[size_t(b)]) kp[size_t(b)] = 1;
      for (int64_t cb = 0; cb < nk; ++cb)
        if (skeep[size_t(cb)]) masks::mark_blocks(p0 - (cb + 1) * B + 1, p1 - cb * B + 1, B, kp);
      std::fill(kp.begin() + limit, kp.end(), 0);
    }

    if (c.query_aware) {
      // Each query block's pooled softmax over its causal blocks.
      std::vector<std::vector<double>> pm(static_cast<size_t>(nq));
      for (int64_t qb = 0; qb < nq; ++qb)
        softmax(&sc[size_t(qb * nk)], geo.causal_blocks(qb), pm[size_t(qb)]);
      if (qa_per_block_ || budget_.kind != Budget::mass) {
        for (int64_t qb = 0; qb < nq; ++qb) {
          const std::vector<double>& m = pm[size_t(qb)];
          std::vector<uint8_t> kp(keep[size_t(qb)].begin(),
                                  keep[size_t(qb)].begin() + int64_t(m.size()));
          top_up(m, kp, budget_, 0);
          std::copy(kp.begin(), kp.end(), keep[size_t(qb)].begin());
        }
      } else {
        // The whole map flattened (index qb * nk + kb), every row's mass 1.
        std::vector<double> flat(static_cast<size_t>(nq * nk), 0.0);
        std::vector<uint8_t> fk(static_cast<size_t>(nq * nk), 1);  // non-causal: never taken
        for (int64_t qb = 0; qb < nq; ++qb)
          for (size_t b = 0; b < pm[size_t(qb)].size(); ++b) {
            const size_t i = size_t(qb * nk) + b;
            flat[i] = pm[size_t(qb)][b];
            fk[i] = keep[size_t(qb)][b];
          }
        top_up(flat, fk, budget_, 0);
        for (int64_t qb = 0; qb < nq; ++qb)
          for (size_t b = 0; b < pm[size_t(qb)].size(); ++b)
            keep[size_t(qb)][b] = fk[size_t(qb * nk) + b];
      }
    }
    for (int64_t qb = 0; qb < nq; ++qb)
      for (int64_t kb = 0; kb < nk; ++kb)
        if (keep[size_t(qb)][size_t(kb)]) lists[qb].push_back(int32_t(kb));
    return c;
  }

  double gamma_ = 0.9;
  Budget budget_;  // gamma's mass, or topk's count, or min_share's threshold
  double tau_ = 0.1;
  int64_t min_budget_ = 1024;
  bool qa_per_block_ = false;
};

}  // namespace

std::unique_ptr<Method> make_flexprefill(const MethodSpec& spec) {
  return std::make_unique<FlexPrefill>(spec);
}

}  // namespace spattn
