// MInference's vertical-slash estimate on the device (the host's is
// src/masks/vertical_slash.cpp's estimate_vertical_slash, which this mirrors; "MInference 1.0",
// section 3.2, as MMInference appendix C.3 restates it): the last last_q queries' causal softmax
// against every key, A_hat, summed per key column (vertical[j] = sum_r A_hat[r][j]) and per
// diagonal (slash[o] = sum_r A_hat[r][p_r - o]); the first `sink` columns and the diagonals
// 0..local-1 forced; the largest vertical_size columns and slash_size diagonals per head (ties
// to the smaller index: CUB's radix sort is stable), read back ascending.
//
// ahat_sums_kernel: a block per q head, four warps of 16 estimate rows, 64-key tiles on tensor
// cores (score_tile.cuh), two passes (each row's max and sum of exponentials, then its
// probabilities). A tile's probabilities meet in shared memory, where one thread per column and
// one per diagonal sums them over the rows in row order and adds the sum to the head's arrays,
// which no other block writes: deterministic.
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda/check.cuh"
#include "cuda/inputs.hpp"
#include "cuda/score_tile.cuh"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"

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
  double* vertical;  // [Hq][kv_len], zeroed
  double* slash;     // [Hq][kv_len], zeroed
};

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
  double* vertical = p.vertical + int64_t(h) * p.kv_len;
  double* slash = p.slash + int64_t(h) * p.kv_len;
  const int first = p.q_len - p.n_rows;  // the estimate's first query row

  for (int c0 = 0; c0 < p.n_rows; c0 += kRows) {
    const int nrows = min(kRows, p.n_rows - c0);
    __syncthreads();  // the previous rows' reads are done
    stage_rows<T, D, kRows, kThreads>(sQ, gQ, p.q_s, [&](int r) -> long long {
      return r < nrows ? (long long)(first + c0 + r) : -1;
    });
    const int r_lo = warp * 16 + gid, r_hi = r_lo + 8;
    const long long row0 = p.off + first + c0;  // the position of the pass's row 0
    const int vis_lo = r_lo < nrows ? int(min((long long)p.kv_len, row0 + r_lo + 1)) : 0;
    const int vis_hi = r_hi < nrows ? int(min((long long)p.kv_len, row0 + r_hi + 1)) : 0;
    const int cols = int(min((long long)p.kv_len, row0 + nrows));
    float m_lo = -INFINITY, m_hi = -INFINITY;
    double l_lo = 0.0, l_hi = 0.0;

    for (int pass = 0; pass < 2; ++pass) {
      for (int j0 = 0; j0 < cols; j0 += kCols) {
        __syncthreads();  // the previous tile's reads (K and sP) are done
        stage_rows<T, D, kCols, kThreads>(sK, gK, p.k_s, [&](int r) -> long long {
          const long long j = (long long)j0 + r;
          return j < p.kv_len ? j : -1;
        });
        __syncthreads();
        float acc[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
        warp_scores<T, D>(acc, sQ, sK, warp, lane);
        // acc[nt][i]: row r_lo (i < 2) or r_hi, key j0 + nt * 8 + 2 tig + (i & 1).
        auto col = [&](int nt, int i) { return nt * 8 + 2 * tig + (i & 1); };
        if (pass == 0) {
          // Each row's running max and sum of exponentials, over the quad that holds it.
          float t_lo = -INFINITY, t_hi = -INFINITY;
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              acc[nt][i] *= p.scale;
              if (i < 2 && j0 + col(nt, i) < vis_lo) t_lo = fmaxf(t_lo, acc[nt][i]);
              if (i >= 2 && j0 + col(nt, i) < vis_hi) t_hi = fmaxf(t_hi, acc[nt][i]);
            }
          for (int o = 1; o < 4; o <<= 1) {
            t_lo = fmaxf(t_lo, __shfl_xor_sync(0xffffffffu, t_lo, o));
            t_hi = fmaxf(t_hi, __shfl_xor_sync(0xffffffffu, t_hi, o));
          }
          const float n_lo = fmaxf(m_lo, t_lo), n_hi = fmaxf(m_hi, t_hi);
          double e_lo = 0.0, e_hi = 0.0;
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int j = j0 + col(nt, i);
              if (i < 2 && j < vis_lo) e_lo += exp(double(acc[nt][i]) - double(n_lo));
              if (i >= 2 && j < vis_hi) e_hi += exp(double(acc[nt][i]) - double(n_hi));
            }
          for (int o = 1; o < 4; o <<= 1) {
            e_lo += __shfl_xor_sync(0xffffffffu, e_lo, o);
            e_hi += __shfl_xor_sync(0xffffffffu, e_hi, o);
          }
          // A row that saw nothing yet keeps m -inf and l 0 (no exp of -inf - -inf).
          if (n_lo != -INFINITY) {
            l_lo = (m_lo == -INFINITY ? 0.0 : l_lo * exp(double(m_lo) - double(n_lo))) + e_lo;
            m_lo = n_lo;
          }
          if (n_hi != -INFINITY) {
            l_hi = (m_hi == -INFINITY ? 0.0 : l_hi * exp(double(m_hi) - double(n_hi))) + e_hi;
            m_hi = n_hi;
          }
          continue;
        }
        // The probabilities e / l (the host's a), 0 where a row does not see the key.
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const bool lo = i < 2;
            const int c = col(nt, i);
            const double a = j0 + c < (lo ? vis_lo : vis_hi)
                                 ? exp(double(acc[nt][i] * p.scale) - double(lo ? m_lo : m_hi)) /
                                       (lo ? l_lo : l_hi)
                                 : 0.0;
            sP[(lo ? r_lo : r_hi) * kPStride + c] = a;
          }
        __syncthreads();
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

// The forced entries +inf (columns [0, sink), diagonals [0, local)) and every entry's index,
// for the sort; one thread an entry of the [Hq][kv_len] arrays.
__global__ void force_kernel(double* vertical, double* slash, int* vidx, int* sidx, int64_t n,
                             int kv_len, int sink, int local) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int j = int(i % kv_len);
    if (j < sink) vertical[i] = INFINITY;
    if (j < local) slash[i] = INFINITY;
    vidx[i] = sidx[i] = j;
  }
}

// The first `keep` indices of each head's sorted segment, ascending, on the host.
std::vector<std::vector<int64_t>> first_of_segments(const DeviceBuffer<int>& sorted, int64_t heads,
                                                    int64_t len, int64_t keep, cudaStream_t s) {
  std::vector<int> host(size_t(heads * keep));
  if (keep > 0)
    check(cudaMemcpy2DAsync(host.data(), size_t(keep) * sizeof(int), sorted.get(),
                            size_t(len) * sizeof(int), size_t(keep) * sizeof(int), size_t(heads),
                            cudaMemcpyDeviceToHost, s),
          "cudaMemcpy2DAsync");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) {
    out[size_t(h)].assign(host.begin() + h * keep, host.begin() + (h + 1) * keep);
    std::sort(out[size_t(h)].begin(), out[size_t(h)].end());
  }
  return out;
}

}  // namespace

VerticalSlashIndex vertical_slash_index(const TensorView& q, const TensorView& k,
                                        const VerticalSlashConfig& c, const AttnOptions& opt,
                                        void* stream) {
  const char* who = "cuda vertical_slash_index";
  check_vertical_slash_config(c);
  SPATTN_CHECK(opt.causal, "vertical_slash: needs causal attention");
  check_qkv_out(q, k, k, q, nullptr, true, who);  // q and k alone: k as v, q as out
  SPATTN_CHECK(q.seq > 0 && int64_t(q.heads) * k.seq < (int64_t(1) << 31), who,
               ": q heads x kv_len must be below 2^31 and q_len positive");
  const cudaStream_t s = stream_of(stream, opt);
  const int64_t hq = q.heads, lk = k.seq, n = int64_t(q.heads) * lk;
  DeviceBuffer<double> vertical, slash, vsorted, ssorted;
  DeviceBuffer<int> vidx, sidx, vidx_sorted, sidx_sorted, seg;
  vertical.alloc(size_t(n), s), slash.alloc(size_t(n), s);
  AHatParams p{};
  p.q = q.data, p.k = k.data;
  p.q_h = q.stride_head, p.q_s = q.stride_seq, p.k_h = k.stride_head, p.k_s = k.stride_seq;
  p.group = int(hq / k.heads), p.q_len = int(q.seq), p.kv_len = int(lk);
  p.n_rows = int(std::min(c.last_q, q.seq));
  p.off = (long long)query_position(0, q.seq, lk);
  p.scale = softmax_scale(opt, q.dim);
  p.vertical = vertical.get(), p.slash = slash.get();
  if (q.dtype == DType::bf16)
    q.dim == 128 ? launch_ahat<__nv_bfloat16, 128>(p, unsigned(hq), s)
                 : launch_ahat<__nv_bfloat16, 64>(p, unsigned(hq), s);
  else
    q.dim == 128 ? launch_ahat<__half, 128>(p, unsigned(hq), s)
                 : launch_ahat<__half, 64>(p, unsigned(hq), s);
  check(cudaGetLastError(), "ahat_sums_kernel launch");

  const int64_t sink = std::min(c.sink, lk), local = std::min(c.local, lk);
  vidx.alloc(size_t(n), s), sidx.alloc(size_t(n), s);
  force_kernel<<<unsigned(std::min<int64_t>((n + 255) / 256, 4096)), 256, 0, s>>>(
      vertical.get(), slash.get(), vidx.get(), sidx.get(), n, int(lk), int(sink), int(local));
  check(cudaGetLastError(), "force_kernel launch");
  std::vector<int> offsets(size_t(hq) + 1);
  for (int64_t h = 0; h <= hq; ++h) offsets[size_t(h)] = int(h * lk);
  seg.upload(offsets, s);
  vsorted.alloc(size_t(n), s), ssorted.alloc(size_t(n), s);
  vidx_sorted.alloc(size_t(n), s), sidx_sorted.alloc(size_t(n), s);
  size_t temp_bytes = 0;
  auto sort = [&](void* temp, const DeviceBuffer<double>& keys, DeviceBuffer<double>& keys_out,
                  const DeviceBuffer<int>& idx, DeviceBuffer<int>& idx_out) {
    check(cub::DeviceSegmentedRadixSort::SortPairsDescending(
              temp, temp_bytes, keys.get(), keys_out.get(), idx.get(), idx_out.get(), int(n),
              int(hq), seg.get(), seg.get() + 1, 0, 64, s),
          "cub SortPairsDescending");
  };
  sort(nullptr, vertical, vsorted, vidx, vidx_sorted);  // the scratch's size
  DeviceBuffer<unsigned char> temp;
  temp.alloc(std::max<size_t>(temp_bytes, 1), s);
  sort(temp.get(), vertical, vsorted, vidx, vidx_sorted);
  sort(temp.get(), slash, ssorted, sidx, sidx_sorted);

  VerticalSlashIndex x;
  x.heads = hq;
  x.tile_rows = c.tile_rows;
  const int64_t n_cols = std::min(lk, std::max(c.vertical_size, sink));
  const int64_t n_diag = std::min(lk, std::max(c.slash_size, local));
  x.columns = first_of_segments(vidx_sorted, hq, lk, n_cols, s);
  x.offsets = first_of_segments(sidx_sorted, hq, lk, n_diag, s);
  return x;
}

}  // namespace spattn::cuda
