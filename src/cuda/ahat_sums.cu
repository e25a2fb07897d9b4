// A_hat's sums on the device: the last n_rows queries' causal softmax against every key,
// summed per key column (vertical[j] = sum_r A_hat[r][j]) and per diagonal (slash[o] = sum_r
// A_hat[r][p_r - o]), over a window of keys; the estimate MInference's vertical-slash
// (vertical_slash.cu, src/masks/vertical_slash.cpp's AHatEstimator) and MMInference's grid
// search (grid.cu, src/masks/grid.cpp's grid_estimate) read.
//
// ahat_sums_kernel: a block per q head, four warps of 16 estimate rows, 64-key tiles on tensor
// cores (score_tile.cuh), two passes (each row's max and sum of exponentials over every key it
// sees, then its probabilities). A tile's probabilities meet in shared memory, where one thread
// per column and one per diagonal sums them over the rows in row order and adds the sum to the
// head's arrays, which no other block writes: deterministic. With listed rows or keys (a
// boundary piece's: AHatLists) a tile's diagonals are not the tile's own, so its rows add to
// them one row at a time, in row order, each row's columns on distinct diagonals.
#include "cuda/ahat_sums.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/check.cuh"
#include "cuda/score_tile.cuh"
#include "spattn/error.hpp"

namespace spattn::cuda {
namespace {

constexpr int kThreads = 128;  // four warps
constexpr int kRows = 64;      // estimate rows a pass: 16 a warp
constexpr int kCols = 64;      // keys a tile
constexpr int kPStride = kCols + 1;

struct AHatParams {
  const void* q;
  const void* k;
  int64_t q_h, q_s, k_h, k_s;
  int group, q_len, kv_len, n_rows;
  long long off;  // the position of query row 0
  float scale;
  int key_lo, band_blocks;  // the keys summed: AHatWindow's
  const int* rows;          // AHatLists': null or the n_rows query rows
  const int* keys;          // null or the n_keys candidates' positions
  int n_keys;               // kv_len without keys
  double* vertical;         // [Hq][n_keys], zeroed
  double* slash;            // [Hq][kv_len], zeroed
};

// The candidates a row at position pos sees: keys at or before it.
__device__ __forceinline__ int visible(const AHatParams& p, long long pos) {
  if (!p.keys) return int(min((long long)p.kv_len, pos + 1));
  int lo = 0, hi = p.n_keys;  // the first candidate past pos
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (p.keys[mid] <= pos)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads) ahat_sums_kernel(const AHatParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + kRows * (D + 8);
  double* sP = reinterpret_cast<double*>(sK + kCols * (D + 8));  // [kRows][kPStride]
  const int h = blockIdx.x, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int gid = lane / 4, tig = lane % 4;
  const T* gQ = static_cast<const T*>(p.q) + int64_t(h) * p.q_h;
  const T* gK = static_cast<const T*>(p.k) + int64_t(h / p.group) * p.k_h;
  double* vertical = p.vertical + int64_t(h) * p.n_keys;
  double* slash = p.slash + int64_t(h) * p.kv_len;
  const int first = p.q_len - p.n_rows;  // the estimate's first query row, without a list
  const bool listed = p.rows || p.keys;
  auto row_of = [&](int e) -> int { return p.rows ? p.rows[e] : first + e; };
  auto key_pos = [&](int j) -> int { return p.keys ? p.keys[j] : j; };

  for (int c0 = 0; c0 < p.n_rows; c0 += kRows) {
    const int nrows = min(kRows, p.n_rows - c0);
    __syncthreads();  // the previous rows' reads are done
    stage_rows<T, D, kRows, kThreads>(sQ, gQ, p.q_s, [&](int r) -> long long {
      return r < nrows ? (long long)row_of(c0 + r) : -1;
    });
    const int r_lo = warp * 16 + gid, r_hi = r_lo + 8;
    const long long row0 = p.off + first + c0;  // the position of the pass's row 0, unlisted
    const long long pos_lo = p.off + row_of(c0 + min(r_lo, nrows - 1));
    const long long pos_hi = p.off + row_of(c0 + min(r_hi, nrows - 1));
    const int vis_lo = r_lo < nrows ? visible(p, pos_lo) : 0;
    const int vis_hi = r_hi < nrows ? visible(p, pos_hi) : 0;
    const int cols = visible(p, p.off + row_of(c0 + nrows - 1));  // the rows ascend
    // Keys at or past a row's band are not summed (the grid's window): its tile minus
    // band_blocks, in 64-key tiles.
    const long long band_lo = max(0ll, (pos_lo / 64 - p.band_blocks) * 64);
    const long long band_hi = max(0ll, (pos_hi / 64 - p.band_blocks) * 64);
    float m_lo = -INFINITY, m_hi = -INFINITY;
    double l_lo = 0.0, l_hi = 0.0;

    for (int pass = 0; pass < 2; ++pass) {
      for (int j0 = 0; j0 < cols; j0 += kCols) {
        float acc[8][4];  // scaled scores (the previous tile's reads done first)
        key_tile_scores_of<T, D, kThreads>(
            acc, sQ, sK, gK, p.k_s,
            [&](int c) -> long long {
              const int j = j0 + c;
              return j < p.n_keys ? key_pos(j) : -1;
            },
            p.scale, warp, lane);
        // acc[nt][i]: row r_lo (i < 2) or r_hi, key j0 + nt * 8 + 2 tig + (i & 1).
        auto col = [&](int nt, int i) { return nt * 8 + 2 * tig + (i & 1); };
        if (pass == 0) {
          // Each row's running max and sum of exponentials.
          fold_max_sum(acc, j0, vis_lo, vis_hi, m_lo, m_hi, l_lo, l_hi);
          continue;
        }
        // The probabilities e / l (the host's a), 0 where a row does not see the key.
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const bool lo = i < 2;
            const int c = col(nt, i);
            const int j = j0 + c;
            const double a =
                j < (lo ? vis_lo : vis_hi) && j >= p.key_lo &&
                        (p.band_blocks < 0 || j < (lo ? band_lo : band_hi))
                    ? exp(double(acc[nt][i]) - double(lo ? m_lo : m_hi)) / (lo ? l_lo : l_hi)
                    : 0.0;
            sP[(lo ? r_lo : r_hi) * kPStride + c] = a;
          }
        __syncthreads();
        if (listed) {
          // Column c sums rows 0.. in order; each row adds its columns to their diagonals, row
          // after row (two rows may meet one diagonal in two columns).
          if (tid < kCols && j0 + tid < p.n_keys) {
            double sum = 0.0;
            for (int r = 0; r < nrows; ++r) sum += sP[r * kPStride + tid];
            if (sum != 0.0) vertical[j0 + tid] += sum;
          }
          for (int r = 0; r < nrows; ++r) {
            const double a = tid < kCols ? sP[r * kPStride + tid] : 0.0;
            if (a != 0.0) slash[p.off + row_of(c0 + r) - key_pos(j0 + tid)] += a;
            __syncthreads();
          }
          continue;
        }
        // Column c sums rows 0.. in order; diagonal u (offset row0 - j0 + u - 63, entries
        // (r, r - u + 63)) likewise.
        for (int job = tid; job < kCols + 2 * kRows - 1; job += kThreads) {
          double sum = 0.0;
          long long at;
          if (job < kCols) {
            for (int r = 0; r < nrows; ++r) sum += sP[r * kPStride + job];
            at = (long long)j0 + job;
            if (at < p.kv_len && sum != 0.0) vertical[at] += sum;
          } else {
            const int u = job - kCols;
            for (int r = max(0, u - (kCols - 1)); r < min(nrows, u + 1); ++r)
              sum += sP[r * kPStride + (r - u + kCols - 1)];
            at = row0 - j0 + u - (kCols - 1);
            if (at >= 0 && at < p.kv_len && sum != 0.0) slash[at] += sum;
          }
        }
      }
    }
  }
}

template <class T, int D>
void launch_ahat(const AHatParams& p, unsigned heads, cudaStream_t s) {
  const size_t smem =
      size_t((kRows + kCols) * (D + 8)) * sizeof(T) + size_t(kRows * kPStride) * sizeof(double);
  check(cudaFuncSetAttribute(ahat_sums_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(smem)),
        "cudaFuncSetAttribute");
  ahat_sums_kernel<T, D><<<heads, kThreads, smem, s>>>(p);
}

}  // namespace

void ahat_sums(const TensorView& q, const TensorView& k, const AttnOptions& opt, int64_t n_rows,
               const AHatWindow& window, double* vertical, double* slash, cudaStream_t s,
               const AHatLists& lists) {
  SPATTN_CHECK(n_rows >= 1 && n_rows <= q.seq && q.seq <= k.seq && window.key_lo >= 0,
               "cuda ahat_sums: ", n_rows, " rows of q ", q.shape_str(), ", k ", k.shape_str());
  AHatParams p{};
  p.q = q.data, p.k = k.data;
  p.q_h = q.stride_head, p.q_s = q.stride_seq, p.k_h = k.stride_head, p.k_s = k.stride_seq;
  p.group = int(q.heads / k.heads), p.q_len = int(q.seq), p.kv_len = int(k.seq);
  p.n_rows = int(n_rows);
  p.off = (long long)query_position(0, q.seq, k.seq);
  p.scale = softmax_scale(opt, q.dim);
  p.key_lo = int(window.key_lo), p.band_blocks = int(window.band_blocks);
  SPATTN_CHECK(!(lists.rows || lists.keys) || (window.key_lo == 0 && window.band_blocks < 0),
               "cuda ahat_sums: listed rows or keys take the default window");
  SPATTN_CHECK(!lists.keys || (lists.n_keys >= 1 && lists.n_keys <= k.seq),
               "cuda ahat_sums: ", lists.n_keys, " listed keys of ", k.seq);
  p.rows = lists.rows, p.keys = lists.keys;
  p.n_keys = int(lists.keys ? lists.n_keys : k.seq);
  p.vertical = vertical, p.slash = slash;
  const unsigned heads = unsigned(q.heads);
  if (q.dtype == DType::bf16)
    q.dim == 128 ? launch_ahat<__nv_bfloat16, 128>(p, heads, s)
                 : launch_ahat<__nv_bfloat16, 64>(p, heads, s);
  else
    q.dim == 128 ? launch_ahat<__half, 128>(p, heads, s) : launch_ahat<__half, 64>(p, heads, s);
  check(cudaGetLastError(), "ahat_sums_kernel launch");
}

}  // namespace spattn::cuda
