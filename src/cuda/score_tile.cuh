// The two steps every estimate kernel that scores rows against keys on tensor cores repeats
// (antidiagonal.cu, flexprefill.cu): staging rows of q or k into a padded shared tile, and one
// warp's 16 rows of scores against a 64-key tile (mma.sync m16n8k16, f32 accumulators).
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

}  // namespace spattn::cuda
