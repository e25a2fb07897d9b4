// The antidiagonal estimate (antidiagonal_mass.hpp). The S query rows of group g, reversed,
// side by side, and the S keys of group j, side by side, make two vectors of S * dim values;
// their dot product is the antidiagonal sum. One product of the [L/S, S dim] matrices reads
// 1/S of the entries dense attention computes (the paper's reshape, its Algorithm 1); the keys'
// matrix is the key rows themselves, the queries' is a copy. A strided pair (g, j) is visible
// when some entry of its sub-block is (the first key of group j at or before the last query of
// group g), as the paper's reshaped causal mask.
#include "masks/antidiagonal_mass.hpp"

#include <algorithm>
#include <vector>

#include "core/threading.hpp"
#include "kernels/exp_row.hpp"
#include "kernels/long_row_scores.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/error.hpp"

namespace spattn::masks {
namespace {

// Strided query rows per work item: one single-threaded product each, so the estimate is
// deterministic at any thread count and its scores (rows x key groups) stay a few MB at 32K.
constexpr int64_t kRowsPerItem = 128;

}  // namespace

void antidiagonal_block_mass(const TensorView& q, const TensorView& k, const AttnOptions& opt,
                             const AntidiagonalConfig& c, const BlockMassUse& use) {
  SPATTN_CHECK(q.heads > 0 && k.heads > 0 && q.heads % k.heads == 0 && q.dim == k.dim,
               "antidiagonal estimate: bad shapes q ", q.shape_str(), ", k ", k.shape_str());
  SPATTN_CHECK(c.stride >= 1 && c.block_q % c.stride == 0 && c.block_k % c.stride == 0,
               "antidiagonal estimate: stride=", c.stride, " must divide block_q=", c.block_q,
               " and block_k=", c.block_k,
               " (an antidiagonal's S x S sub-block lies in one block)");
  const BlockMask geo(q.heads, q.seq, k.seq, c.block_q, c.block_k, opt.causal);
  const int64_t S = c.stride, d = q.dim, w = S * d, group = q.heads / k.heads;
  const int64_t gq = (q.seq + S - 1) / S, gk = (k.seq + S - 1) / S;  // strided rows, keys
  const int64_t nq = geo.n_qb(), nk = geo.n_kb(), rq = c.block_q / S, rk = c.block_k / S;
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
    keys[size_t(h)] = kernels::pack_long_row_keys(kr.data(), gk, w, c.dot_bf16);
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
    std::vector<double> e, bs, rm;  // rm: strided rows x key blocks, with c.rows
  };
  const int n_threads = std::max(1, threads);
  std::vector<Scratch> scratch(static_cast<size_t>(n_threads));
  parallel_for(q.heads * chunks, threads, [&](int64_t item, int t) {
    Scratch& x = scratch[size_t(t)];
    const int64_t ci = opt.causal ? chunks - 1 - item / q.heads : item / q.heads;
    const int64_t h = item % q.heads, kh = h / group;
    const int64_t qb0 = ci * bpi, qb1 = std::min(nq, qb0 + bpi);
    const int64_t g0 = qb0 * rq, g1 = std::min(gq, qb1 * rq), rows = g1 - g0;
    const int64_t cols = visible(g1 - 1);  // visibility grows with g
    x.qr.assign(size_t(rows * w), 0.0f);
    for (int64_t g = g0; g < g1; ++g)
      for (int64_t t2 = 0; t2 < S; ++t2) {
        const int64_t s = g * S + S - 1 - t2;  // the antidiagonal: rows reversed
        if (s < q.seq) kernels::copy_row_f32(q, h, s, &x.qr[size_t((g - g0) * w + t2 * d)]);
      }
    x.bs.assign(size_t((qb1 - qb0) * nk), 0.0);
    if (c.rows) x.rm.assign(size_t(rows * nk), 0.0);
    if (cols > 0) {
      x.sc.resize(size_t(rows * cols));
      x.e.resize(size_t(cols));
      kernels::long_row_scores(x.qr.data(), rows, keys[size_t(kh)], cols, alpha, x.sc.data(), cols);
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t n = visible(g);
        if (n == 0) continue;
        const float* row = &x.sc[size_t((g - g0) * cols)];
        const float mx = *std::max_element(row, row + n);
        const double inv = 1.0 / kernels::exp_row_f64(row, n, double(mx), x.e.data());
        double* bs = &x.bs[size_t((g / rq - qb0) * nk)];
        double* rm = c.rows ? &x.rm[size_t((g - g0) * nk)] : nullptr;
        for (int64_t kb = 0; kb * rk < n; ++kb) {
          double acc = 0;
          for (int64_t j = kb * rk; j < std::min(n, (kb + 1) * rk); ++j) acc += x.e[size_t(j)];
          bs[kb] += acc * inv;
          if (rm) rm[kb] = acc * inv;
        }
      }
    }
    for (int64_t qb = qb0; qb < qb1; ++qb) {
      RowMasses rm;
      if (c.rows) {
        const int64_t r0 = qb * rq - g0;  // the block's first strided row in this item
        rm = {&x.rm[size_t(r0 * nk)], std::min(rq, rows - r0), nk};
      }
      use(h, qb, &x.bs[size_t((qb - qb0) * nk)], rm);
    }
  });
}

}  // namespace spattn::masks
