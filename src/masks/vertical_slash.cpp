// MInference's vertical-slash pattern (Jiang et al. 2024; the MMInference paper appendix C.3): estimate
// from the last queries which key columns (vertical lines) and diagonals (slash lines) carry
// the attention, then compute only those with attention_vertical_slash.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "core/threading.hpp"
#include "core/blas.hpp"
#include "kernels/exp_row.hpp"
#include "masks/block_closure.hpp"
#include "masks/top_k.hpp"
#include "masks/vertical_slash_estimate.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"

namespace spattn {

namespace {

// Row s of head h as f32 into dst (a row copy where the storage is f32 and contiguous: the
// estimate reads every key of the head, and an element-wise get cost more than its sgemm).
void load_row(const TensorView& t, int64_t h, int64_t s, float* dst) {
  if (t.dtype == DType::f32 && t.stride_dim == 1) {
    std::memcpy(dst, t.ptr(h, s), size_t(t.dim) * sizeof(float));
    return;
  }
  if (t.dtype == DType::bf16 && t.stride_dim == 1) {  // a loop the compiler vectorises
    const uint16_t* src = static_cast<const uint16_t*>(t.ptr(h, s));
    for (int64_t c = 0; c < t.dim; ++c) dst[c] = bf16_to_f32(src[c]);
    return;
  }
  for (int64_t c = 0; c < t.dim; ++c) dst[c] = t.get(h, s, c);
}
// Rows [first, first + n) of head h as a contiguous f32 [n, d] matrix.
void load_rows(const TensorView& t, int64_t h, int64_t first, int64_t n, std::vector<float>& out) {
  out.resize(size_t(n * t.dim));
  for (int64_t s = 0; s < n; ++s) load_row(t, h, first + s, &out[size_t(s * t.dim)]);
}
// Rows `rows` of head h, likewise.
void gather_rows(const TensorView& t, int64_t h, const std::vector<int64_t>& rows,
                 std::vector<float>& out) {
  out.resize(rows.size() * size_t(t.dim));
  for (size_t s = 0; s < rows.size(); ++s) load_row(t, h, rows[s], &out[s * size_t(t.dim)]);
}

}  // namespace

void check_vertical_slash_config(const VerticalSlashConfig& c) {
  SPATTN_CHECK(c.vertical_size >= 0, "vertical_slash: vertical must be >= 0, got ",
               c.vertical_size);
  SPATTN_CHECK(c.slash_size >= 1, "vertical_slash: slash must be >= 1 (the main diagonal), got ",
               c.slash_size);
  SPATTN_CHECK(c.last_q >= 1, "vertical_slash: last_q must be >= 1, got ", c.last_q);
  SPATTN_CHECK(c.sink >= 0, "vertical_slash: sink must be >= 0, got ", c.sink);
  SPATTN_CHECK(c.local >= 1, "vertical_slash: local must be >= 1 (each row sees itself), got ",
               c.local);
  SPATTN_CHECK(c.tile_rows >= 1 && c.tile_rows <= 128,
               "vertical_slash: tile_rows must be in [1, 128], got ", c.tile_rows);
}

namespace masks {

// Per q head, with the estimate rows r (q rows, positions p_r) and the candidate keys j (all
// keys, or `keys`):
//   A_hat[r][j] = softmax_j(scale q_r . k_j) over the candidates j <= p_r
//   vertical[j] = sum_r A_hat[r][j],   slash[o] = sum_r A_hat[r][p_r - o]
// The QK^T product is one sgemm per head; softmax and sums are in double. Columns are chosen
// among the candidates, `forced` ones first; diagonals 0..local-1 are forced.
AHatEstimator::AHatEstimator(const TensorView& q, const TensorView& k,
                             const std::vector<int64_t>* keys, const AttnOptions& opt)
    : q_(q),
      k_(k),
      keys_(keys),
      scale_(softmax_scale(opt, q.dim)),
      threads_(resolve_threads(opt.threads)) {}

void AHatEstimator::head(
    int64_t h, const std::vector<int64_t>& est_rows,
    const std::function<void(int64_t, const double*, double, int64_t)>& visit) {
  heads(h, 1, est_rows,
        [&](int64_t, int64_t p, const double* e, double l, int64_t vis) { visit(p, e, l, vis); });
}

void AHatEstimator::heads(
    int64_t h0, int64_t count, const std::vector<int64_t>& est_rows,
    const std::function<void(int64_t, int64_t, const double*, double, int64_t)>& visit) {
  const int64_t lk = k_.seq, d = q_.dim, n = int64_t(est_rows.size());
  const int64_t nk = keys_ ? int64_t(keys_->size()) : lk;
  s_.resize(size_t(std::max<int64_t>(count, int64_t(s_.size()))));
  e_.resize(s_.size());
  {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t h = h0 + i, kvh = h / (q_.heads / k_.heads);
      // f32 rows with unit dim stride go to sgemm where they are (ldb = the row stride): a
      // copy of every key costs several ms at 32K.
      const bool in_place =
          !keys_ && k_.dtype == DType::f32 && k_.stride_dim == 1 && k_.stride_seq >= d;
      const float* kp = in_place ? static_cast<const float*>(k_.ptr(kvh, 0)) : kf_.data();
      const int64_t ldk = in_place ? k_.stride_seq : d;
      if (!in_place && kvh != loaded_kvh_) {
        if (keys_)
          gather_rows(k_, kvh, *keys_, kf_);
        else
          load_rows(k_, kvh, 0, lk, kf_);
        loaded_kvh_ = kvh;
        kp = kf_.data();
      }
      gather_rows(q_, h, est_rows, qf_);
      std::vector<float>& s = s_[size_t(i)];
      s.resize(size_t(n * nk));
      e_[size_t(i)].resize(size_t(nk));
      if (n > 0 && nk > 0)
        blas::sgemm(true, n, nk, d, scale_, qf_.data(), d, kp, ldk, 0.0f, s.data(), nk, threads_);
    }
  }
  parallel_for(count, std::min<int>(threads_, int(count)), [&](int64_t i, int) {
    const std::vector<float>& s = s_[size_t(i)];
    std::vector<double>& e = e_[size_t(i)];
    for (int64_t r = 0; r < n; ++r) {
      const int64_t p = query_position(est_rows[size_t(r)], q_.seq, lk);
      // Candidates the row sees: a prefix, since candidate positions ascend.
      const int64_t vis =
          keys_ ? int64_t(std::upper_bound(keys_->begin(), keys_->end(), p) - keys_->begin())
                : p + 1;
      if (vis <= 0) continue;
      const float* row = &s[size_t(r * nk)];
      const double m = *std::max_element(row, row + vis);
      visit(i, p, e.data(), kernels::exp_row_f64(row, vis, m, e.data()), vis);
    }
  });
}

VerticalSlashIndex estimate_vertical_slash(const TensorView& q, const TensorView& k,
                                           const VerticalSlashConfig& c, const AttnOptions& opt,
                                           const std::vector<int64_t>& est_rows,
                                           const std::vector<int64_t>* keys,
                                           const std::vector<int64_t>& forced) {
  const int64_t lk = k.seq;
  const int64_t nk = keys ? int64_t(keys->size()) : lk;
  const int64_t n_cols = std::min(nk, std::max(c.vertical_size, int64_t(forced.size())));
  const int64_t n_diag = std::min(lk, std::max(c.slash_size, std::min(c.local, lk)));
  const auto key_pos = [&](int64_t i) { return keys ? (*keys)[size_t(i)] : i; };

  VerticalSlashIndex x;
  x.heads = q.heads;
  x.tile_rows = c.tile_rows;
  x.columns.resize(size_t(q.heads));
  x.offsets.resize(size_t(q.heads));
  AHatEstimator est(q, k, keys, opt);
  // Heads in batches of one per thread (their softmax in parallel, each head's sums in the
  // order of one thread, as before).
  const int64_t batch = std::min<int64_t>(q.heads, est.threads());
  std::vector<std::vector<double>> vertical(static_cast<size_t>(batch)),
      slash(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) {
    vertical[size_t(i)].resize(size_t(nk));
    slash[size_t(i)].resize(size_t(lk));
  }
  for (int64_t h0 = 0; h0 < q.heads; h0 += batch) {
    const int64_t count = std::min(batch, q.heads - h0);
    for (int64_t i = 0; i < count; ++i) {
      std::fill(vertical[size_t(i)].begin(), vertical[size_t(i)].end(), 0.0);
      std::fill(slash[size_t(i)].begin(), slash[size_t(i)].end(), 0.0);
    }
    est.heads(h0, count, est_rows,
              [&](int64_t i, int64_t p, const double* e, double l, int64_t vis) {
                double* __restrict vert = vertical[size_t(i)].data();
                double* __restrict sl = slash[size_t(i)].data();
                if (!keys) {  // key j at position j: a loop the compiler vectorises (the same bits)
                  for (int64_t j = 0; j < vis; ++j) {
                    const double a = e[j] / l;
                    vert[j] += a;
                    sl[p - j] += a;
                  }
                  return;
                }
                for (int64_t j = 0; j < vis; ++j) {
                  vert[j] += e[j] / l;
                  sl[p - key_pos(j)] += e[j] / l;
                }
              });
    const double inf = std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < count; ++i) {
      std::vector<double>& vert = vertical[size_t(i)];
      std::vector<double>& sl = slash[size_t(i)];
      for (int64_t f : forced) vert[size_t(f)] = inf;
      std::fill(sl.begin(), sl.begin() + std::min(c.local, lk), inf);
      std::vector<int64_t> cols = top_indices(vert.data(), nk, n_cols);
      for (int64_t& j : cols) j = key_pos(j);
      x.columns[size_t(h0 + i)] = std::move(cols);
      x.offsets[size_t(h0 + i)] = top_indices(sl.data(), lk, n_diag);
    }
  }
  return x;
}

}  // namespace masks

// MInference's estimate: the last min(last_q, q_len) rows against every key, the first `sink`
// columns forced.
VerticalSlashIndex vertical_slash_index(const TensorView& q, const TensorView& k,
                                        const VerticalSlashConfig& c, const AttnOptions& opt) {
  check_vertical_slash_config(c);
  SPATTN_CHECK(opt.causal, "vertical_slash: needs causal attention");
  SPATTN_CHECK(q.heads > 0 && k.heads > 0 && q.heads % k.heads == 0 && q.dim == k.dim &&
                   q.seq > 0 && q.seq <= k.seq,
               "vertical_slash: bad shapes q ", q.shape_str(), ", k ", k.shape_str());
  const int64_t n = std::min(c.last_q, q.seq);
  std::vector<int64_t> est_rows(static_cast<size_t>(n)),
      forced(static_cast<size_t>(std::min(c.sink, k.seq)));
  std::iota(est_rows.begin(), est_rows.end(), q.seq - n);
  std::iota(forced.begin(), forced.end(), 0);
  return masks::estimate_vertical_slash(q, k, c, opt, est_rows, nullptr, forced);
}

// Tile rows p0..p1 see the diagonal ranges [p0 - o, p1 - o] and the columns <= p1. Heads in
// parallel, each into its own rows; they are joined in head order.
BlockMask vertical_slash_block_mask(const VerticalSlashIndex& x, int64_t q_len, int64_t kv_len,
                                    int64_t block_k, int threads) {
  SPATTN_CHECK(int64_t(x.columns.size()) == x.heads && int64_t(x.offsets.size()) == x.heads,
               "vertical_slash_block_mask: index has ", x.columns.size(), " column lists and ",
               x.offsets.size(), " offset lists for ", x.heads, " heads");
  BlockMask m(x.heads, q_len, kv_len, x.tile_rows, block_k, /*causal=*/true);
  const int64_t off = query_position(0, q_len, kv_len), n_kb = m.n_kb(), n_qb = m.n_qb();
  std::vector<std::vector<int32_t>> head_blocks(static_cast<size_t>(x.heads));
  std::vector<std::vector<int64_t>> head_counts(static_cast<size_t>(x.heads));
  const int workers =
      int(std::min<int64_t>(resolve_threads(threads), std::max<int64_t>(x.heads, 1)));
  parallel_for(x.heads, workers, [&](int64_t h, int) {
    // keep[qb][kb]: some row of query block qb computes a key of block kb. A tile of listed
    // rows (x.rows) may touch several query blocks and a block several tiles; without a list,
    // tile t is query block t, and its blocks go straight to the rows.
    std::vector<uint8_t> keep(x.rows ? static_cast<size_t>(n_qb * n_kb) : 0),
        tile_keep(static_cast<size_t>(n_kb));
    std::vector<int32_t>& blocks = head_blocks[size_t(h)];
    std::vector<int64_t>& counts = head_counts[size_t(h)];
    counts.assign(size_t(n_qb), 0);
    // Offsets largest first (their ranges' starts ascend), so overlapping diagonals (most are
    // within a tile of the next) mark their blocks once as one range, not once each.
    std::vector<int64_t> offsets = x.offsets[size_t(h)];
    std::sort(offsets.begin(), offsets.end(), std::greater<>());
    std::vector<std::pair<int64_t, int64_t>> col_blocks;  // (block, its first column), ascending
    {
      std::vector<int64_t> cols = x.columns[size_t(h)];
      std::sort(cols.begin(), cols.end());
      for (int64_t col : cols)
        if (col >= 0 && col < n_kb * block_k &&
            (col_blocks.empty() || col / block_k != col_blocks.back().first))
          col_blocks.push_back({col / block_k, col});
    }
    for (int64_t t = 0; t < x.num_tiles(q_len); ++t) {
      const auto [r0, r1] = x.tile_span(t, q_len);
      const int64_t p0 = off + r0, p1 = off + r1;
      std::fill(tile_keep.begin(), tile_keep.end(), 0);
      for (size_t i = 0; i < offsets.size();) {
        const int64_t begin = p0 - offsets[i];
        int64_t end = p1 - offsets[i] + 1;
        for (++i; i < offsets.size() && p0 - offsets[i] <= end; ++i)
          end = std::max(end, p1 - offsets[i] + 1);
        masks::mark_blocks(begin, end, block_k, tile_keep);
      }
      for (const auto& [kb, first] : col_blocks) {
        if (first > p1) break;
        tile_keep[size_t(kb)] = 1;
      }
      if (!x.rows) {
        const size_t before = blocks.size();
        for (int64_t kb = 0; kb < n_kb; ++kb)
          if (tile_keep[size_t(kb)]) blocks.push_back(int32_t(kb));
        counts[size_t(t)] = int64_t(blocks.size() - before);
        continue;
      }
      const int64_t a = t * x.tile_rows,
                    b = std::min(x.num_tiles(q_len) * x.tile_rows, a + x.tile_rows);
      // Each query block's rows of this tile, as a group: they see the tile's blocks up to
      // their last row's position (every range starts at or before the tile's first row, so
      // cutting there is exact where the main diagonal is kept, as vertical_slash_index does).
      const int64_t listed = std::min<int64_t>(b, int64_t(x.rows->size()));
      for (int64_t i = a; i < listed;) {
        const int64_t qb = (*x.rows)[size_t(i)] / x.tile_rows;
        int64_t j = i;
        while (j + 1 < listed && (*x.rows)[size_t(j + 1)] / x.tile_rows == qb) ++j;
        const int64_t kb_end = std::min(n_kb, (off + (*x.rows)[size_t(j)]) / block_k + 1);
        uint8_t* row = &keep[size_t(qb * n_kb)];
        for (int64_t kb = 0; kb < kb_end; ++kb) row[kb] |= tile_keep[size_t(kb)];
        i = j + 1;
      }
    }
    if (!x.rows) return;
    for (int64_t qb = 0; qb < n_qb; ++qb) {
      const size_t before = blocks.size();
      for (int64_t kb = 0; kb < n_kb; ++kb)
        if (keep[size_t(qb * n_kb + kb)]) blocks.push_back(int32_t(kb));
      counts[size_t(qb)] = int64_t(blocks.size() - before);
    }
  });
  for (int64_t h = 0; h < x.heads; ++h) {
    const auto& blocks = head_blocks[size_t(h)];
    m.blocks.insert(m.blocks.end(), blocks.begin(), blocks.end());
    for (int64_t qb = 0; qb < n_qb; ++qb)
      m.offsets[size_t(h * n_qb + qb + 1)] =
          m.offsets[size_t(h * n_qb + qb)] + head_counts[size_t(h)][size_t(qb)];
  }
  return m;
}

}  // namespace spattn
