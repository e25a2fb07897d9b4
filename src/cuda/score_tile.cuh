// The steps every estimate kernel that scores rows against keys on tensor cores repeats
// (antidiagonal.cu, flexprefill.cu, ahat_sums.cu): staging rows of q or k into a padded shared
// tile, one warp's 16 rows of scores against a 64-key tile (mma.sync m16n8k16, f32
// accumulators), and the first pass of a two-pass softmax over them.
#pragma once
#include <cstdint>

#include "cuda/ptx.cuh"

namespace spattn::cuda {

// Rows [0, kN) of a [kN][D] tile (row stride D + 8 elements: conflict-free fragment reads)
// from global rows src_row(i) (negative: zeros), 16 bytes a copy, by kThreadsN threads.
template <class T, int D, int kN, int kThreadsN, class RowOf>
__device__ __forceinline__ void stage_rows(T* s, const T* g, int64_t stride, RowOf src_row) {
  constexpr int kChunks = D / 8;
  for (int e = threadIdx.x; e < kN * kChunks; e += kThreadsN) {
    const int r = e / kChunks, c = (e % kChunks) * 8;
    const long long row = src_row(r);
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (row >= 0) v = *reinterpret_cast<const uint4*>(g + row * stride + c);
    *reinterpret_cast<uint4*>(s + r * (D + 8) + c) = v;
  }
}

// acc[nt][i] += the dot product of sQ's row warp * 16 + lane / 4 (+ 8 for i >= 2) and sK's row
// nt * 8 + 2 (lane % 4) + (i & 1), over D; both tiles as stage_rows leaves them.
template <class T, int D>
__device__ __forceinline__ void warp_scores(float (&acc)[8][4], const T* sQ, const T* sK, int warp,
                                            int lane) {
  const int gid = lane / 4, tig = lane % 4;
  const T* qa = sQ + (warp * 16 + gid) * (D + 8) + 2 * tig;
#pragma unroll
  for (int kk = 0; kk < D; kk += 16) {
    uint32_t a[4];
    a[0] = *reinterpret_cast<const uint32_t*>(qa + kk);
    a[1] = *reinterpret_cast<const uint32_t*>(qa + 8 * (D + 8) + kk);
    a[2] = *reinterpret_cast<const uint32_t*>(qa + kk + 8);
    a[3] = *reinterpret_cast<const uint32_t*>(qa + 8 * (D + 8) + kk + 8);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const T* kb = sK + (nt * 8 + gid) * (D + 8) + 2 * tig + kk;
      ptx::mma_16816<T>(acc[nt], a, *reinterpret_cast<const uint32_t*>(kb),
                        *reinterpret_cast<const uint32_t*>(kb + 8));
    }
  }
}

// The warp's 16 rows of sQ against the 64 keys gK's rows key_row(c) (row stride k_s; negative:
// zeros), times scale, into acc: the K tile staged by every thread of the block (two barriers,
// the first keeping the previous tile's reads safe).
template <class T, int D, int kThreadsN, class KeyRow>
__device__ __forceinline__ void key_tile_scores_of(float (&acc)[8][4], const T* sQ, T* sK,
                                                   const T* gK, int64_t k_s, KeyRow key_row,
                                                   float scale, int warp, int lane) {
  __syncthreads();
  stage_rows<T, D, 64, kThreadsN>(sK, gK, k_s, key_row);
  __syncthreads();
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
  warp_scores<T, D>(acc, sQ, sK, warp, lane);
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] *= scale;
}

// key_tile_scores_of over keys [j0, j0 + 64) (keys past kv_len staged as zeros).
template <class T, int D, int kThreadsN>
__device__ __forceinline__ void key_tile_scores(float (&acc)[8][4], const T* sQ, T* sK, const T* gK,
                                                int64_t k_s, int j0, int kv_len, float scale,
                                                int warp, int lane) {
  key_tile_scores_of<T, D, kThreadsN>(
      acc, sQ, sK, gK, k_s,
      [&](int r) -> long long {
        const long long j = (long long)j0 + r;
        return j < kv_len ? j : -1;
      },
      scale, warp, lane);
}

// Pass one of a two-pass softmax over a warp's 16 x 64 score tile (warp_scores' layout, acc
// scaled already): each of the lane's two rows (i < 2: its row gid, else gid + 8) folds the
// columns it sees (j0 + column < vis) into its running max m (f32) and sum of exponentials l
// (double, sum exp(s - m)), reduced over the quad that holds the row. A row that saw nothing
// yet keeps m -inf and l 0 (no exp of -inf - -inf).
__device__ __forceinline__ void fold_max_sum(const float (&acc)[8][4], int j0, int vis_lo,
                                             int vis_hi, float& m_lo, float& m_hi, double& l_lo,
                                             double& l_hi) {
  const int tig = (threadIdx.x % 32) % 4;
  auto col = [&](int nt, int i) { return j0 + nt * 8 + 2 * tig + (i & 1); };
  float t_lo = -INFINITY, t_hi = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (i < 2 && col(nt, i) < vis_lo) t_lo = fmaxf(t_lo, acc[nt][i]);
      if (i >= 2 && col(nt, i) < vis_hi) t_hi = fmaxf(t_hi, acc[nt][i]);
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
      if (i < 2 && col(nt, i) < vis_lo) e_lo += exp(double(acc[nt][i]) - double(n_lo));
      if (i >= 2 && col(nt, i) < vis_hi) e_hi += exp(double(acc[nt][i]) - double(n_hi));
    }
  for (int o = 1; o < 4; o <<= 1) {
    e_lo += __shfl_xor_sync(0xffffffffu, e_lo, o);
    e_hi += __shfl_xor_sync(0xffffffffu, e_hi, o);
  }
  if (n_lo != -INFINITY) {
    l_lo = (m_lo == -INFINITY ? 0.0 : l_lo * exp(double(m_lo) - double(n_lo))) + e_lo;
    m_lo = n_lo;
  }
  if (n_hi != -INFINITY) {
    l_hi = (m_hi == -INFINITY ? 0.0 : l_hi * exp(double(m_hi) - double(n_hi))) + e_hi;
    m_hi = n_hi;
  }
}

}  // namespace spattn::cuda
