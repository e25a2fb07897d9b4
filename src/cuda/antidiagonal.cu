// The antidiagonal estimate on the device (antidiagonal.hpp), as the host's
// masks/antidiagonal_mass.cpp: the S query rows of strided row g, reversed, against the S keys
// of key group j, side by side, give the antidiagonal sum of their S x S sub-block (one product
// reading 1/S of what dense attention reads: the paper's reshape, its Algorithm 1); per strided
// row the softmax of those sums (times scale / S) over the key groups it sees (the first key of
// group j at or before its last query position), and per block the sum of the probabilities of
// its sub-blocks.
//
// One thread block of four warps per run of query blocks (as many as fill 64 strided rows; a
// query block of more rows takes its rows 64 at a time), each warp 16 rows. Per tile of 64 key
// groups the [64 x S d] by [S d x 64] product runs on tensor cores (mma.sync m16n8k16, f32
// accumulators; the rows and keys staged in shared memory as the inputs' dtype, one of the S
// steps of d at a time), twice: first for each row's max and sum of exponentials (online, as
// the flash kernel's softmax; double sums as the host's), then for each block's probabilities,
// summed per (row, block) across the quad that holds a row, then per (query block, block) over
// its rows in row order into mass: deterministic, and the block owns its rows of mass (no
// atomics).
#include "cuda/antidiagonal.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "cuda/check.cuh"
#include "cuda/score_tile.cuh"
#include "spattn/error.hpp"

namespace spattn::cuda {
namespace {

constexpr int kThreads = 128;  // four warps
constexpr int kRows = 64;      // strided rows a chunk: 16 a warp
constexpr int kCols = 64;      // key groups a tile: eight n8 tiles a warp

struct AntiParams {
  const void* q;
  const void* k;
  int64_t q_h, q_s, k_h, k_s;
  int group, q_len, kv_len, stride, rq, rk, nqb, nkb, gq, gk, qb_per_cta, max_seg;
  long long off;
  bool causal;
  float alpha;
  double* mass;
};

// Key groups strided row g sees: those starting at or before its last query's position.
__device__ __forceinline__ int visible(const AntiParams& p, int g) {
  if (g >= p.gq) return 0;
  if (!p.causal) return p.gk;
  const long long pos = p.off + min((long long)g * p.stride + p.stride - 1, (long long)p.q_len - 1);
  return pos < 0 ? 0 : int(min((long long)p.gk, pos / p.stride + 1));
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads) antidiagonal_kernel(const AntiParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + kRows * (D + 8);
  double* rowblk = reinterpret_cast<double*>(sK + kCols * (D + 8));  // [kRows][max_seg]
  const int h = blockIdx.y, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int gid = lane / 4, tig = lane % 4;
  const int S = p.stride;
  const T* gQ = static_cast<const T*>(p.q) + int64_t(h) * p.q_h;
  const T* gK = static_cast<const T*>(p.k) + int64_t(h / p.group) * p.k_h;
  const int qb0 = blockIdx.x * p.qb_per_cta, qb1 = min(p.nqb, qb0 + p.qb_per_cta);
  const int g_begin = qb0 * p.rq, g_end = min(p.gq, qb1 * p.rq);

  for (int c0 = g_begin; c0 < g_end; c0 += kRows) {
    const int nrows = min(kRows, g_end - c0);
    // This lane's two rows (gid and gid + 8 of its warp's 16) and what they see; the chunk's
    // widest (visibility grows with g).
    const int r_lo = warp * 16 + gid, r_hi = r_lo + 8;
    const int vis_lo = r_lo < nrows ? visible(p, c0 + r_lo) : 0;
    const int vis_hi = r_hi < nrows ? visible(p, c0 + r_hi) : 0;
    const int cols = visible(p, c0 + nrows - 1);
    float m_lo = -INFINITY, m_hi = -INFINITY;
    double l_lo = 0.0, l_hi = 0.0, inv_lo = 0.0, inv_hi = 0.0;

    for (int pass = 0; pass < 2; ++pass) {
      for (int j0 = 0; j0 < cols; j0 += kCols) {
        float acc[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
        for (int t = 0; t < S; ++t) {
          __syncthreads();  // the previous step's fragment reads are done
          stage_rows<T, D, kRows, kThreads>(sQ, gQ, p.q_s, [&](int r) -> long long {
            const long long s = (long long)(c0 + r) * S + S - 1 - t;  // the rows reversed
            return r < nrows && s < p.q_len ? s : -1;
          });
          stage_rows<T, D, kCols, kThreads>(sK, gK, p.k_s, [&](int r) -> long long {
            const long long s = (long long)(j0 + r) * S + t;
            return j0 + r < p.gk && s < p.kv_len ? s : -1;
          });
          __syncthreads();
          warp_scores<T, D>(acc, sQ, sK, warp, lane);
        }
        // acc[nt][i]: row r_lo (i < 2) or r_hi, key group j0 + nt * 8 + 2 tig + (i & 1).
        auto col = [&](int nt, int i) { return j0 + nt * 8 + 2 * tig + (i & 1); };
        if (pass == 0) {
          // Each row's running max and sum of exponentials.
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[nt][i] *= p.alpha;
          fold_max_sum(acc, j0, vis_lo, vis_hi, m_lo, m_hi, l_lo, l_hi);
        } else {
          // Per (row, block of the tile) its probabilities, then per (query block, block) over
          // the rows, in row order.
          const int ncols = min(kCols, cols - j0);
          const int kb0 = j0 / p.rk, nseg = (j0 + ncols - 1) / p.rk - kb0 + 1;
          for (int sg = 0; sg < nseg; ++sg) {
            const int a = max(j0, (kb0 + sg) * p.rk), b = min(j0 + ncols, (kb0 + sg + 1) * p.rk);
            double x_lo = 0.0, x_hi = 0.0;
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                const int j = col(nt, i);
                if (j < a || j >= b) continue;
                const float s = acc[nt][i] * p.alpha;
                if (i < 2 && j < vis_lo) x_lo += exp(double(s) - double(m_lo)) * inv_lo;
                if (i >= 2 && j < vis_hi) x_hi += exp(double(s) - double(m_hi)) * inv_hi;
              }
            for (int o = 1; o < 4; o <<= 1) {
              x_lo += __shfl_xor_sync(0xffffffffu, x_lo, o);
              x_hi += __shfl_xor_sync(0xffffffffu, x_hi, o);
            }
            if (tig == 0) {
              rowblk[r_lo * p.max_seg + sg] = x_lo;
              rowblk[r_hi * p.max_seg + sg] = x_hi;
            }
          }
          __syncthreads();
          // The chunk's query blocks: rows [max(c0, qb rq), min(c0 + nrows, (qb + 1) rq)).
          const int qa0 = c0 / p.rq, qa1 = (c0 + nrows - 1) / p.rq;
          for (int w = tid; w < (qa1 - qa0 + 1) * nseg; w += kThreads) {
            const int qb = qa0 + w / nseg, sg = w % nseg;
            const int r0 = max(c0, qb * p.rq) - c0, r1 = min(c0 + nrows, (qb + 1) * p.rq) - c0;
            double x = 0.0;
            for (int r = r0; r < r1; ++r) x += rowblk[r * p.max_seg + sg];
            p.mass[(int64_t(h) * p.nqb + qb) * p.nkb + kb0 + sg] += x;
          }
        }
      }
      if (pass == 0) {
        inv_lo = l_lo > 0.0 ? 1.0 / l_lo : 0.0;
        inv_hi = l_hi > 0.0 ? 1.0 / l_hi : 0.0;
      }
    }
  }
}

template <class T, int D>
void launch(const AntiParams& p, unsigned heads, cudaStream_t s) {
  const size_t smem =
      size_t(2 * kRows * (D + 8)) * sizeof(T) + size_t(kRows) * size_t(p.max_seg) * sizeof(double);
  check(cudaFuncSetAttribute(antidiagonal_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(smem)),
        "cudaFuncSetAttribute");
  const unsigned ctas = unsigned((p.nqb + p.qb_per_cta - 1) / p.qb_per_cta);
  antidiagonal_kernel<T, D><<<dim3(ctas, heads), kThreads, smem, s>>>(p);
}

}  // namespace

void antidiagonal_mass(const TensorView& q, const TensorView& k, const AttnOptions& opt,
                       int64_t stride, int64_t block_q, int64_t block_k, double* mass,
                       cudaStream_t s) {
  const char* who = "cuda antidiagonal estimate";
  SPATTN_CHECK(stride >= 1 && block_q % stride == 0 && block_k % stride == 0, who,
               ": stride=", stride, " must divide block_q=", block_q, " and block_k=", block_k,
               " (an antidiagonal's sub-block lies in one block)");
  SPATTN_CHECK(q.dim == 64 || q.dim == 128, who, ": head dim ", q.dim, " (64 or 128 on the GPU)");
  SPATTN_CHECK(q.stride_dim == 1 && k.stride_dim == 1, who, ": the head dim must be contiguous");
  AntiParams p{};
  p.q = q.data, p.k = k.data;
  p.q_h = q.stride_head, p.q_s = q.stride_seq, p.k_h = k.stride_head, p.k_s = k.stride_seq;
  p.group = int(q.heads / k.heads), p.q_len = int(q.seq), p.kv_len = int(k.seq);
  p.stride = int(stride), p.rq = int(block_q / stride), p.rk = int(block_k / stride);
  p.nqb = int((q.seq + block_q - 1) / block_q), p.nkb = int((k.seq + block_k - 1) / block_k);
  p.gq = int((q.seq + stride - 1) / stride), p.gk = int((k.seq + stride - 1) / stride);
  // Query blocks a thread block: as many whole ones as fill its 64 rows (at least one).
  p.qb_per_cta = std::max(1, kRows / p.rq);
  // Blocks 64 consecutive key groups touch: at most (64 - 1) / rk + 2, and never more than 64.
  p.max_seg = std::min(kCols, (kCols - 1) / p.rk + 2);
  p.off = (long long)query_position(0, q.seq, k.seq);
  p.causal = opt.causal;
  p.alpha = softmax_scale(opt, q.dim) / float(stride);
  p.mass = mass;
  const unsigned heads = unsigned(q.heads);
  if (q.dtype == DType::bf16) {
    if (q.dim == 128)
      launch<__nv_bfloat16, 128>(p, heads, s);
    else
      launch<__nv_bfloat16, 64>(p, heads, s);
  } else {
    if (q.dim == 128)
      launch<__half, 128>(p, heads, s);
    else
      launch<__half, 64>(p, heads, s);
  }
  check(cudaGetLastError(), "antidiagonal_kernel launch");
}

}  // namespace spattn::cuda
