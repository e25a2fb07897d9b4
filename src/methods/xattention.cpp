// xattention: block-sparse prefill with antidiagonal scoring ("XAttention: Block Sparse
// Attention with Antidiagonal Scoring", Xu et al. 2025). The whole method is this file.
//
// Sec. 2.1 (importance prediction): inside each S x S sub-block of the attention matrix, the
// sum along one antidiagonal, q[gS + S-1-t] . k[jS + t] for t < S, stands for the sub-block:
// every query row and every key column of it is touched once, so a vertical line or a slash
// through the sub-block cannot be missed, as the pooled scores of mean_pool can miss them. The
// S query rows of group g, reversed, side by side, and the S keys of group j, side by side, make
// two vectors of S * dim values; their dot product is the antidiagonal sum. One product of the
// [L/S, S dim] matrices reads 1/S of the entries dense attention computes (the paper's reshape,
// its Algorithm 1); the keys' matrix is the key rows themselves, the queries' is a copy.
// Sec. 2.2 (threshold block selection): per strided query row, the softmax of the antidiagonal
// averages (sum / S, times the softmax scale) over its causally visible key groups; a block's
// importance is the sum of those probabilities over its (B/S) x (B/S) sub-blocks. Per query
// block the sink block (keys 0..B-1) and the diagonal blocks (those holding the block's own
// positions) are kept, their importance counted first, then the other blocks in descending
// importance (ties: the smaller index) until the kept importance reaches tau of the row's
// total. A strided pair (g, j) is visible when some entry of its sub-block is (the first key
// of group j at or before the last query of group g), as the paper's reshaped causal mask.
//
// Defaults as the paper's language-model runs (its code's xattn_estimate): stride S = 8, tau =
// 0.9, blocks of B = 128 queries and keys. `topp=P` is accepted as another name for tau, the
// mass budget every block-selecting method takes. `dot=bf16` (default; the paper's kernels run
// in bf16 too) computes the estimate's products from bf16-rounded q and k with vdpbf16ps where
// the CPU has AVX512_BF16 (f32 elsewhere), `dot=f32` in f32; both on the flash kernel's score
// micro-kernels (kernels/long_row_scores.hpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/threading.hpp"
#include "kernels/exp_row.hpp"
#include "kernels/long_row_scores.hpp"
#include "masks/block_closure.hpp"
#include "methods/block_mask_method.hpp"
#include "methods/registry.hpp"
#include "spattn/attention.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

// Strided query rows per work item: one single-threaded product each, so the estimate is
// deterministic at any thread count and its scores (rows x key groups) stay a few MB at 32K.
constexpr int64_t kRowsPerItem = 128;

class XAttention final : public BlockMaskMethod {
 public:
  explicit XAttention(const MethodSpec& spec) {
    ParamReader r(spec);
    stride_ = r.get_int("stride", 8, 1, 1024);
    SPATTN_CHECK(!(r.has("tau") && r.has("topp")),
                 "xattention: give tau or topp (the same mass budget), not both");
    const char* key = r.has("topp") ? "topp" : "tau";
    tau_ = r.get_double(key, 0.9, -HUGE_VAL, HUGE_VAL);
    SPATTN_CHECK(tau_ > 0 && tau_ <= 1, "xattention: ", key, "=", tau_, " outside (0, 1]");
    block_q_ = r.get_int("block_q", 128, 1, 1 << 20);
    block_k_ = r.get_int("block_k", 128, 1, 1 << 20);
    SPATTN_CHECK(block_q_ % stride_ == 0 && block_k_ % stride_ == 0, "xattention: stride=", stride_,
                 " must divide block_q=", block_q_, " and block_k=", block_k_,
                 " (an antidiagonal's S x S sub-block lies in one block)");
    const std::string dot = r.get_string("dot", "bf16");
    SPATTN_CHECK(dot == "bf16" || dot == "f32", "xattention: dot='", dot, "' must be bf16 or f32");
    dot_bf16_ = dot == "bf16";
    r.finish();
  }
  std::string name() const override { return "xattention"; }

  MethodReport run_host(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    MethodReport r = BlockMaskMethod::run_host(q, k, v, out, opt, lse);
    r.extras["stride"] = double(stride_);
    r.extras["tau"] = tau_;
    r.extras["dot_bf16"] = dot_bf16_ && kernels::long_row_bf16_supported() ? 1.0 : 0.0;
    return r;
  }

 protected:
  BlockMask build_mask(const TensorView& q, const TensorView& k, const TensorView&,
                       const AttnOptions& opt) const override {
    SPATTN_CHECK(q.heads > 0 && k.heads > 0 && q.heads % k.heads == 0 && q.dim == k.dim,
                 "xattention: bad shapes q ", q.shape_str(), ", k ", k.shape_str());
    BlockMask m(q.heads, q.seq, k.seq, block_q_, block_k_, opt.causal);
    const int64_t S = stride_, d = q.dim, w = S * d, group = q.heads / k.heads;
    const int64_t gq = (q.seq + S - 1) / S, gk = (k.seq + S - 1) / S;  // strided rows, keys
    const int64_t nq = m.n_qb(), nk = m.n_kb(), rq = block_q_ / S, rk = block_k_ / S;
    const int64_t off = query_position(0, q.seq, k.seq);
    const float alpha = softmax_scale(opt, d) / float(S);  // the antidiagonal's mean, scaled
    const int threads = resolve_threads(opt.threads);

    // Key groups side by side per kv head, zero past the last key (as the paper pads), packed
    // into the score micro-kernels' tiles.
    std::vector<kernels::LongRowKeys> keys(static_cast<size_t>(k.heads));
    parallel_for(k.heads, threads, [&](int64_t h, int) {
      std::vector<float> kr(size_t(gk * w), 0.0f);
      for (int64_t s = 0; s < k.seq; ++s)
        kernels::copy_row_f32(k, h, s, &kr[size_t((s / S) * w + (s % S) * d)]);
      keys[size_t(h)] = kernels::pack_long_row_keys(kr.data(), gk, w, dot_bf16_);
    });

    // Key groups strided row g sees: those starting at or before its last query's position.
    auto visible = [&](int64_t g) -> int64_t {
      if (!opt.causal) return gk;
      const int64_t p = off + std::min(g * S + S - 1, q.seq - 1);
      return p < 0 ? 0 : std::min(gk, p / S + 1);
    };

    // Items: (q head, run of query blocks), the longest (last, under causal) first.
    const int64_t bpi = std::max<int64_t>(1, kRowsPerItem / rq), chunks = (nq + bpi - 1) / bpi;
    struct Scratch {
      std::vector<float> qr, sc;
      std::vector<double> e, bs;
    };
    const int n_threads = std::max(1, threads);
    std::vector<Scratch> scratch(static_cast<size_t>(n_threads));
    std::vector<std::vector<int32_t>> lists(static_cast<size_t>(q.heads * nq));
    parallel_for(q.heads * chunks, threads, [&](int64_t item, int t) {
      Scratch& x = scratch[size_t(t)];
      const int64_t c = opt.causal ? chunks - 1 - item / q.heads : item / q.heads;
      const int64_t h = item % q.heads, kh = h / group;
      const int64_t qb0 = c * bpi, qb1 = std::min(nq, qb0 + bpi);
      const int64_t g0 = qb0 * rq, g1 = std::min(gq, qb1 * rq), rows = g1 - g0;
      const int64_t cols = visible(g1 - 1);  // visibility grows with g
      x.qr.assign(size_t(rows * w), 0.0f);
      for (int64_t g = g0; g < g1; ++g)
        for (int64_t t2 = 0; t2 < S; ++t2) {
          const int64_t s = g * S + S - 1 - t2;  // the antidiagonal: rows reversed
          if (s < q.seq) kernels::copy_row_f32(q, h, s, &x.qr[size_t((g - g0) * w + t2 * d)]);
        }
      x.bs.assign(size_t((qb1 - qb0) * nk), 0.0);
      if (cols > 0) {
        x.sc.resize(size_t(rows * cols));
        x.e.resize(size_t(cols));
        kernels::long_row_scores(x.qr.data(), rows, keys[size_t(kh)], cols, alpha, x.sc.data(),
                                 cols);
        for (int64_t g = g0; g < g1; ++g) {
          const int64_t n = visible(g);
          if (n == 0) continue;
          const float* row = &x.sc[size_t((g - g0) * cols)];
          const float mx = *std::max_element(row, row + n);
          const double inv = 1.0 / kernels::exp_row_f64(row, n, double(mx), x.e.data());
          double* bs = &x.bs[size_t((g / rq - qb0) * nk)];
          for (int64_t kb = 0; kb * rk < n; ++kb) {
            double acc = 0;
            for (int64_t j = kb * rk; j < std::min(n, (kb + 1) * rk); ++j) acc += x.e[size_t(j)];
            bs[kb] += acc * inv;
          }
        }
      }
      std::vector<uint8_t> keep(static_cast<size_t>(nk));
      std::vector<int64_t> order;
      for (int64_t qb = qb0; qb < qb1; ++qb) {
        const double* bs = &x.bs[size_t((qb - qb0) * nk)];
        const int64_t limit = m.causal_blocks(qb);
        const int64_t p0 = off + qb * block_q_, p1 = off + std::min((qb + 1) * block_q_, q.seq) - 1;
        std::fill(keep.begin(), keep.end(), 0);
        if (limit > 0) keep[0] = 1;                                       // the sink
        masks::mark_blocks(p0, std::min(p1 + 1, k.seq), block_k_, keep);  // the diagonal
        double total = 0, kept = 0;
        order.clear();
        for (int64_t kb = 0; kb < limit; ++kb) {
          total += bs[kb];
          if (keep[size_t(kb)])
            kept += bs[kb];
          else
            order.push_back(kb);
        }
        std::sort(order.begin(), order.end(),
                  [&](int64_t a, int64_t b) { return bs[a] != bs[b] ? bs[a] > bs[b] : a < b; });
        const double need = tau_ * total;
        for (size_t i = 0; i < order.size() && kept < need; ++i) {
          keep[size_t(order[i])] = 1;
          kept += bs[order[i]];
        }
        auto& list = lists[size_t(h * nq + qb)];
        for (int64_t kb = 0; kb < limit; ++kb)
          if (keep[size_t(kb)]) list.push_back(int32_t(kb));
      }
    });
    return BlockMask::from_lists(q.heads, q.seq, k.seq, block_q_, block_k_, opt.causal, lists);
  }

 private:
  int64_t stride_ = 8;
  double tau_ = 0.9;
  bool dot_bf16_ = true;
};

}  // namespace

std::unique_ptr<Method> make_xattention(const MethodSpec& spec) {
  return std::make_unique<XAttention>(spec);
}

}  // namespace spattn
