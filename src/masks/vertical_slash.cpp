// MInference's vertical-slash pattern (Jiang et al. 2024; the MMInference paper appendix C.3): estimate
// from the last queries which key columns (vertical lines) and diagonals (slash lines) carry
// the attention, then compute only those with attention_vertical_slash.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/threading.hpp"
#include "core/blas_threads.hpp"
#include "masks/block_closure.hpp"
#include "masks/top_k.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"

namespace spattn {

namespace {

// Rows [first, first + n) of head h as a contiguous f32 [n, d] matrix.
void load_rows(const TensorView& t, int64_t h, int64_t first, int64_t n, std::vector<float>& out) {
  out.resize(size_t(n * t.dim));
  for (int64_t s = 0; s < n; ++s)
    for (int64_t c = 0; c < t.dim; ++c) out[size_t(s * t.dim + c)] = t.get(h, first + s, c);
}

}  // namespace

void check_vertical_slash_config(const VerticalSlashConfig& c) {
  SPATTN_CHECK(c.vertical_size >= 0, "vertical_slash: vertical must be >= 0, got ", c.vertical_size);
  SPATTN_CHECK(c.slash_size >= 1, "vertical_slash: slash must be >= 1 (the main diagonal), got ",
               c.slash_size);
  SPATTN_CHECK(c.last_q >= 1, "vertical_slash: last_q must be >= 1, got ", c.last_q);
  SPATTN_CHECK(c.sink >= 0, "vertical_slash: sink must be >= 0, got ", c.sink);
  SPATTN_CHECK(c.local >= 1, "vertical_slash: local must be >= 1 (each row sees itself), got ",
               c.local);
  SPATTN_CHECK(c.tile_rows >= 1 && c.tile_rows <= 128,
               "vertical_slash: tile_rows must be in [1, 128], got ", c.tile_rows);
}

// Per q head, with n = min(last_q, q_len) estimate rows at positions p_r = kv_len - n + r:
//   A_hat[r][j] = softmax_j(scale q_r . k_j) over j <= p_r
//   vertical[j] = sum_r A_hat[r][j],   slash[o] = sum_r A_hat[r][p_r - o]
// The QK^T product is one sgemm per head; softmax and sums are in double.
VerticalSlashIndex vertical_slash_index(const TensorView& q, const TensorView& k,
                                        const VerticalSlashConfig& c, const AttnOptions& opt) {
  check_vertical_slash_config(c);
  SPATTN_CHECK(opt.causal, "vertical_slash: needs causal attention");
  SPATTN_CHECK(q.heads > 0 && k.heads > 0 && q.heads % k.heads == 0 && q.dim == k.dim &&
                   q.seq > 0 && q.seq <= k.seq,
               "vertical_slash: bad shapes q ", q.shape_str(), ", k ", k.shape_str());
  const int64_t lk = k.seq, d = q.dim, n = std::min(c.last_q, q.seq), group = q.heads / k.heads;
  const float scale = softmax_scale(opt, d);
  const int64_t n_cols = std::min(lk, std::max(c.vertical_size, std::min(c.sink, lk)));
  const int64_t n_diag = std::min(lk, std::max(c.slash_size, std::min(c.local, lk)));

  VerticalSlashIndex x;
  x.heads = q.heads;
  x.tile_rows = c.tile_rows;
  x.columns.resize(size_t(q.heads));
  x.offsets.resize(size_t(q.heads));
  BlasThreads blas(resolve_threads(opt.threads));
  std::vector<float> kf, qf, s(size_t(n * lk));
  std::vector<double> vertical(static_cast<size_t>(lk)), slash(static_cast<size_t>(lk)), e(static_cast<size_t>(lk));
  for (int64_t h = 0; h < q.heads; ++h) {
    if (h % group == 0) load_rows(k, h / group, 0, lk, kf);
    load_rows(q, h, q.seq - n, n, qf);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(lk), int(d), scale, qf.data(),
                int(d), kf.data(), int(d), 0.0f, s.data(), int(lk));
    std::fill(vertical.begin(), vertical.end(), 0.0);
    std::fill(slash.begin(), slash.end(), 0.0);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t p = lk - n + r;
      const float* row = &s[size_t(r * lk)];
      const double m = *std::max_element(row, row + p + 1);
      double l = 0;
      for (int64_t j = 0; j <= p; ++j) l += e[size_t(j)] = std::exp(double(row[j]) - m);
      for (int64_t j = 0; j <= p; ++j) {
        vertical[size_t(j)] += e[size_t(j)] / l;
        slash[size_t(p - j)] += e[size_t(j)] / l;
      }
    }
    const double inf = std::numeric_limits<double>::infinity();
    std::fill(vertical.begin(), vertical.begin() + std::min(c.sink, lk), inf);
    std::fill(slash.begin(), slash.begin() + std::min(c.local, lk), inf);
    x.columns[size_t(h)] = masks::top_indices(vertical.data(), lk, n_cols);
    x.offsets[size_t(h)] = masks::top_indices(slash.data(), lk, n_diag);
  }
  return x;
}

// Tile rows p0..p1 see the diagonal ranges [p0 - o, p1 - o] and the columns <= p1.
BlockMask vertical_slash_block_mask(const VerticalSlashIndex& x, int64_t q_len, int64_t kv_len,
                                    int64_t block_k) {
  SPATTN_CHECK(int64_t(x.columns.size()) == x.heads && int64_t(x.offsets.size()) == x.heads,
               "vertical_slash_block_mask: index has ", x.columns.size(), " column lists and ",
               x.offsets.size(), " offset lists for ", x.heads, " heads");
  BlockMask m(x.heads, q_len, kv_len, x.tile_rows, block_k, /*causal=*/true);
  const int64_t off = query_position(0, q_len, kv_len);
  std::vector<uint8_t> keep(static_cast<size_t>(m.n_kb()));
  for (int64_t h = 0; h < x.heads; ++h)
    for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
      const int64_t p0 = off + qb * x.tile_rows, p1 = off + std::min((qb + 1) * x.tile_rows, q_len) - 1;
      std::fill(keep.begin(), keep.end(), 0);
      for (int64_t o : x.offsets[size_t(h)]) masks::mark_blocks(p0 - o, p1 - o + 1, block_k, keep);
      for (int64_t col : x.columns[size_t(h)])
        if (col <= p1) masks::mark_blocks(col, col + 1, block_k, keep);
      for (int64_t kb = 0; kb < m.n_kb(); ++kb)
        if (keep[size_t(kb)]) m.blocks.push_back(int32_t(kb));
      m.offsets[size_t(h * m.n_qb() + qb + 1)] = int64_t(m.blocks.size());
    }
  return m;
}

}  // namespace spattn
