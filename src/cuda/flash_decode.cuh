// The GPU decode kernel: a few new queries against a long KV cache, flash-decoding's split-K
// ("Flash-Decoding for long-context inference", Dao et al. 2023): the key axis is cut into
// splits, one thread block per (split, row chunk, kv head), each returning a partial (O, LSE)
// that decode_combine_kernel merges exactly. With a threshold it is BLASST's decode kernel
// ("BLASST: Dynamic Blocked Attention Sparsity via Softmax Thresholding", section 4.2): the
// scores of a batch of 64-key tiles are computed first, the running max m' is taken over the
// whole batch, and only the tiles whose max is not ln(lambda) below m' have their V tile
// loaded and multiplied: skipped V tiles are never read. The CPU's decode (decode-inl.h) runs
// the same plan (splits of at most 32 tiles, each with its own running max; under local_first
// seeded with the rows' maxima over the newest and the sink tile, then nearest first), so both
// skip the same tiles where their row chunks agree. Without a threshold (dense decode) V tiles
// load with the next batch's K, under the scores.
//
// Rows: the q heads of one GQA group share their kv head, so a block packs the rows (q head,
// query) of a chunk of whole q heads into one m16 tile (group x q_len <= 16 in one chunk, else
// chunks of 16 / q_len heads). Warps split the keys: in a batch of up to four tiles, warp w
// scores tile w of the batch, keeps its own K and V tiles in shared memory (loaded by itself,
// so only the batch maxima need a block barrier), and accumulates its own O and row sums under
// the block's common running max; the four are summed at the end.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/flash_fwd.cuh"
#include "cuda/ptx.cuh"

namespace spattn::cuda {

constexpr int kDecodeWarps = 4;  // also the most tiles a batch holds on the GPU
constexpr int kDecodeRows = 16;  // rows a block: one m16 tile

struct DecodeParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t q_h = 0, q_s = 0, k_h = 0, k_s = 0, v_h = 0, v_s = 0;  // element strides
  int q_len = 0, kv_len = 0, group = 1;
  int chunk_heads = 1;  // q heads a chunk (the last may hold fewer)
  int n_kt = 0;         // key tiles
  int splits = 1, split_tiles = 0;
  int batch = 4;  // tiles scored before the skip decision, <= kDecodeWarps
  bool causal = true;
  bool local_first = false;
  float scale_log2 = 0;
  float threshold = -INFINITY;  // log2(lambda)
  // Partials [unit][split][kDecodeRows] (unit = kv head * chunks + chunk): O / l in f32 rows
  // of D, natural-log LSE.
  float* part_o = nullptr;
  float* part_lse = nullptr;
  // Optional records per (unit, split): tiles visited and skipped, score entries used; the
  // skip map [unit][n_kt] set to 1 where a tile was skipped.
  int* visited = nullptr;
  int* skipped = nullptr;
  unsigned long long* entries = nullptr;
  uint8_t* skip_map = nullptr;
};

namespace detail {

// The i-th of a split's n tiles [t0, t0 + n): in order, or local-first as blasst_local_first
// orders one work item's tiles (the split's newest tile, then tile 0 when it is the split's,
// then nearest first): tile_at's order over the split's range.
__device__ __forceinline__ int split_tile_at(int i, int t0, int n, bool local_first) {
  if (!local_first) return t0 + i;
  if (i == 0) return t0 + n - 1;
  if (t0 == 0) return i == 1 ? 0 : n - i;
  return t0 + n - 1 - i;
}

// One 64-key tile (rows [row0, row0 + 64) of a [seq][D] matrix, zero past `rows`) into a
// swizzled tile, by the 32 lanes of one warp.
template <class T, int D>
__device__ __forceinline__ void load_tile_warp(T* smem, const T* g, int64_t stride, int row0,
                                               int rows, int lane) {
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int n = 0; n < kBN * kChunks / 32; ++n) {
    const int idx = n * 32 + lane, r = idx / kChunks, c = idx % kChunks;
    const bool valid = row0 + r < rows;
    ptx::cp_async_16(ptx::smem_u32(smem + swz<D>(r, c * 8)),
                     valid ? g + int64_t(row0 + r) * stride + c * 8 : g, valid);
  }
}

// S = Q K^T for one m16 row tile against a 64-key tile; keys at or past each row's limit
// masked; each row's max in scaled log2 units (lanes of a quad agree).
// Q's fragments are read from shared memory at each step: decode is bound by reading the
// cache, and their registers would spill O's.
template <class T, int D>
__device__ __forceinline__ void decode_scores(uint32_t q_base, uint32_t k_base, int kbase,
                                              const int (&lim)[2], float sl2,
                                              float (&s)[kBN / 8][4], float (&mx)[2], int lane) {
  constexpr uint32_t kRowBytes = D * sizeof(T);
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t qa[4];  // rows lane % 16, dims kk * 16 + (lane / 16) * 8 + [0, 8)
    {
      const int chunk = 2 * kk + lane / 16;
      ptx::ldmatrix_x4(qa, q_base + (lane % 16) * kRowBytes + ((chunk ^ (lane % 8)) * 16));
    }
#pragma unroll
    for (int np = 0; np < kBN / 16; ++np) {
      // keys np * 16 + [0, 16), dims kk * 16 + [0, 16)
      const int row = np * 16 + (lane % 8) + (lane / 16) * 8, chunk = 2 * kk + (lane / 8) % 2;
      uint32_t bk[4];
      ptx::ldmatrix_x4(bk, k_base + row * kRowBytes + ((chunk ^ (row & 7)) * 16));
      ptx::mma_16816<T>(s[2 * np], qa, bk[0], bk[1]);
      ptx::mma_16816<T>(s[2 * np + 1], qa, bk[2], bk[3]);
    }
  }
  mx[0] = mx[1] = -INFINITY;
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = kbase + j * 8 + (lane % 4) * 2 + (e & 1);
      if (key >= lim[e >> 1]) s[j][e] = -INFINITY;
      mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    mx[r] *= sl2;  // the scale is positive: the max commutes
  }
}

}  // namespace detail

template <class T, int D>
__global__ void __launch_bounds__(kDecodeWarps * 32) flash_decode_kernel(const DecodeParams p) {
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  using namespace detail;
  constexpr uint32_t kRowBytes = D * sizeof(T);
  constexpr int kTile = kBN * D;  // elements of one K or V tile
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);                    // [16][D]
  T* sK = sQ + kDecodeRows * D;                              // [2 buffers][warps] tiles
  T* sV = sK + 2 * kDecodeWarps * kTile;                     // [warps] tiles
  __shared__ float batch_max[2][kDecodeWarps][kDecodeRows];  // by batch parity
  __shared__ float seed_max[2][kDecodeRows];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int split = blockIdx.x, chunk = blockIdx.y, kvh = blockIdx.z;
  const int chunks = gridDim.y;
  const int unit = kvh * chunks + chunk;
  const int head0 = kvh * p.group + chunk * p.chunk_heads;  // the chunk's first q head
  const int n_heads = min(p.chunk_heads, p.group - chunk * p.chunk_heads);
  const int n_rows = n_heads * p.q_len;
  const int t0 = split * p.split_tiles, n_vis = min(p.n_kt, t0 + p.split_tiles) - t0;
  const T* gK = static_cast<const T*>(p.k) + kvh * p.k_h;
  const T* gV = static_cast<const T*>(p.v) + kvh * p.v_h;
  const bool local_first = p.local_first;
  const bool v_early = p.threshold == -INFINITY;

  // Q: row r is query r % q_len of q head head0 + r / q_len; rows past n_rows are zero.
  {
    const T* gQ = static_cast<const T*>(p.q);
    constexpr int kChunks = D / 8;
    for (int idx = tid; idx < kDecodeRows * kChunks; idx += kDecodeWarps * 32) {
      const int r = idx / kChunks, c = idx % kChunks;
      const bool valid = r < n_rows;
      const T* src =
          valid ? gQ + int64_t(head0 + r / p.q_len) * p.q_h + int64_t(r % p.q_len) * p.q_s + c * 8
                : gQ;
      ptx::cp_async_16(ptx::smem_u32(sQ + swz<D>(r, c * 8)), src, valid);
    }
  }
  // This warp's tile of the first batch.
  T* myK[2] = {sK + warp * kTile, sK + (kDecodeWarps + warp) * kTile};
  T* myV = sV + warp * kTile;
  if (warp < min(p.batch, n_vis))
    load_tile_warp<T, D>(myK[0], gK, p.k_s, split_tile_at(warp, t0, n_vis, local_first) * kBN,
                         p.kv_len, lane);
  // local_first's seed: warp 0 scores the newest tile, warp 1 the sink (tile 0) when it is
  // another one, as SeedUnit on the CPU; in buffer 1, free until the second batch.
  const int n_seed = !local_first ? 0 : p.n_kt == 1 ? 1 : 2;
  const int seed_tile = warp == 0 ? p.n_kt - 1 : 0;
  if (warp < n_seed) load_tile_warp<T, D>(myK[1], gK, p.k_s, seed_tile * kBN, p.kv_len, lane);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();

  // This thread's rows lane / 4 and lane / 4 + 8; their key limits; whether they are rows.
  int lim[2];
  bool real[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = lane / 4 + r * 8;
    real[r] = row < n_rows;
    lim[r] = p.causal ? min(p.kv_len, p.kv_len - p.q_len + row % p.q_len + 1) : p.kv_len;
  }
  const uint32_t q_base = ptx::smem_u32(sQ);

  float m[2] = {-INFINITY, -INFINITY};  // running max, scaled log2 units (common to the warps)
  float l[2] = {0.f, 0.f};              // this thread's share of this warp's row sums
  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float s[kBN / 8][4], mx[2];
  if (n_seed > 0) {
    if (warp < n_seed) {
      decode_scores<T, D>(q_base, ptx::smem_u32(myK[1]), seed_tile * kBN, lim, p.scale_log2, s, mx,
                          lane);
      if (lane % 4 == 0) seed_max[warp][lane / 4] = mx[0], seed_max[warp][lane / 4 + 8] = mx[1];
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 2; ++r)
      for (int w = 0; w < n_seed; ++w) m[r] = fmaxf(m[r], seed_max[w][lane / 4 + r * 8]);
  }

  int n_visited = 0, n_skipped = 0;
  unsigned long long n_entries = 0;
  for (int i0 = 0, b = 0; i0 < n_vis; i0 += p.batch, ++b) {
    const int nb = min(p.batch, n_vis - i0);
    const bool mine = warp < nb;
    const int kt = mine ? split_tile_at(i0 + warp, t0, n_vis, local_first) : 0;
    const int kbase = kt * kBN;
    __syncwarp();  // every lane is done with the tiles overwritten here
    // Dense decode (nothing can be skipped) loads this batch's V tile here, under the scores.
    if (v_early && mine) load_tile_warp<T, D>(myV, gV, p.v_s, kbase, p.kv_len, lane);
    ptx::cp_async_commit();
    // The next batch's K tile into the other buffer (this warp read it two batches ago, or
    // scored the seed from it); last, so that P V waits for V alone and this load stays in
    // flight into the next batch.
    const int i_next = i0 + p.batch + warp;
    if (warp < p.batch && i_next < n_vis)
      load_tile_warp<T, D>(myK[(b + 1) & 1], gK, p.k_s,
                           split_tile_at(i_next, t0, n_vis, local_first) * kBN, p.kv_len, lane);
    ptx::cp_async_commit();
    // This batch's K tile (the last group of the batch before; not waited for there).
    ptx::cp_async_wait<2>();
    __syncwarp();
    mx[0] = mx[1] = -INFINITY;
    if (mine)
      decode_scores<T, D>(q_base, ptx::smem_u32(myK[b & 1]), kbase, lim, p.scale_log2, s, mx, lane);
    if (lane % 4 == 0) {
      batch_max[b & 1][warp][lane / 4] = real[0] ? mx[0] : -INFINITY;
      batch_max[b & 1][warp][lane / 4 + 8] = real[1] ? mx[1] : -INFINITY;
    }
    __syncthreads();  // the batch's maxima (a warp may write the next batch's: other parity)
    // m' over the whole batch, and the rescale of what came before.
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mn = m[r];
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) mn = fmaxf(mn, batch_max[b & 1][w][lane / 4 + r * 8]);
      base[r] = mn == -INFINITY ? 0.f : mn;
      const float alpha = ptx::ex2(m[r] - base[r]);
      l[r] *= alpha;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) o[j][2 * r] *= alpha, o[j][2 * r + 1] *= alpha;
      m[r] = mn;
    }
    if (!mine) continue;
    // The CPU rule (blasst_skips) against m': every row ln(lambda) below it, NaN counts as below.
    bool below = true;
#pragma unroll
    for (int r = 0; r < 2; ++r) below = below && (!real[r] || !(mx[r] - m[r] >= p.threshold));
    const bool skip = p.threshold != -INFINITY && __all_sync(0xffffffffu, below);
    ++n_visited;
    if (skip) {
      ++n_skipped;
      if (p.skip_map && lane == 0) p.skip_map[int64_t(unit) * p.n_kt + kt] = 1;
      continue;
    }
    if (!v_early) {
      load_tile_warp<T, D>(myV, gV, p.v_s, kbase, p.kv_len, lane);
      ptx::cp_async_commit();
    }
    if (p.entries && lane % 4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (real[r]) n_entries += max(0, min(lim[r], kbase + kBN) - kbase);
    }
    uint32_t pf[kBN / 16][4];
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      const float p0 = ptx::ex2(fmaf(s[j][0], p.scale_log2, -base[0]));
      const float p1 = ptx::ex2(fmaf(s[j][1], p.scale_log2, -base[0]));
      const float p2 = ptx::ex2(fmaf(s[j][2], p.scale_log2, -base[1]));
      const float p3 = ptx::ex2(fmaf(s[j][3], p.scale_log2, -base[1]));
      l[0] += p0 + p1;
      l[1] += p2 + p3;
      pf[j / 2][(j % 2) * 2 + 0] = ptx::pack2<T>(p0, p1);
      pf[j / 2][(j % 2) * 2 + 1] = ptx::pack2<T>(p2, p3);
    }
    // V: dense decode's is the second newest group (the next K may stay in flight); a kept
    // tile's, loaded after the vote, the newest.
    if (v_early)
      ptx::cp_async_wait<1>();
    else
      ptx::cp_async_wait<0>();
    __syncwarp();
    const uint32_t v_base = ptx::smem_u32(myV);
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        // keys kk * 16 + [0, 16), dims dp * 16 + [0, 16)
        const int row = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8, chunk = 2 * dp + lane / 16;
        uint32_t bv[4];
        ptx::ldmatrix_x4_trans(bv, v_base + row * kRowBytes + ((chunk ^ (row & 7)) * 16));
        ptx::mma_16816<T>(o[2 * dp], pf[kk], bv[0], bv[1]);
        ptx::mma_16816<T>(o[2 * dp + 1], pf[kk], bv[2], bv[3]);
      }
  }
  ptx::cp_async_wait<0>();

  // The warps' O and row sums, all under the same running max m: summed by warp 0 through
  // shared memory (the K buffers, free now), in warp order.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  float* red = reinterpret_cast<float*>(sK);  // [warps][16][D] O, then [warps][16] l
  float* red_l = red + kDecodeWarps * kDecodeRows * D;
  __syncthreads();  // every warp is done with its K and V tiles
  if (warp > 0) {
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<float2*>(red + (warp * kDecodeRows + lane / 4 + r * 8) * D + j * 8 +
                                   (lane % 4) * 2) = make_float2(o[j][2 * r], o[j][2 * r + 1]);
    if (lane % 4 == 0)
      red_l[warp * kDecodeRows + lane / 4] = l[0], red_l[warp * kDecodeRows + lane / 4 + 8] = l[1];
  }
  if (p.visited && lane == 0) {
    atomicAdd(p.visited + unit * p.splits + split, n_visited);
    atomicAdd(p.skipped + unit * p.splits + split, n_skipped);
  }
  if (p.entries) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) n_entries += __shfl_xor_sync(0xffffffffu, n_entries, off);
    if (lane == 0 && n_entries) atomicAdd(p.entries + unit * p.splits + split, n_entries);
  }
  __syncthreads();
  if (warp != 0) return;
  constexpr float kLn2 = 0.693147180559945309f;
  const int64_t part = (int64_t(unit) * p.splits + split) * kDecodeRows;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = lane / 4 + r * 8;
    float lr = l[r];
    for (int w = 1; w < kDecodeWarps; ++w) lr += red_l[w * kDecodeRows + row];
    const float inv = lr > 0.f ? 1.f / lr : 0.f;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      float2 acc = make_float2(o[j][2 * r], o[j][2 * r + 1]);
      for (int w = 1; w < kDecodeWarps; ++w) {
        const float2 x = *reinterpret_cast<const float2*>(red + (w * kDecodeRows + row) * D +
                                                          j * 8 + (lane % 4) * 2);
        acc.x += x.x, acc.y += x.y;
      }
      *reinterpret_cast<float2*>(p.part_o + (part + row) * D + j * 8 + (lane % 4) * 2) =
          make_float2(acc.x * inv, acc.y * inv);
    }
    if (lane % 4 == 0) p.part_lse[part + row] = lr > 0.f ? (m[r] + log2f(lr)) * kLn2 : -INFINITY;
  }
}

// The splits' partials of one row merged exactly (merge_row's identity, all splits at once):
// one warp per (unit, row), out[q head][query] in T and the natural-log LSE.
struct CombineParams {
  const float* part_o = nullptr;
  const float* part_lse = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // [Hq][q_len] or null
  int64_t o_h = 0, o_s = 0;
  int q_len = 0, group = 1, chunk_heads = 1, chunks = 1, splits = 1, units = 0, dim = 0;
};

template <class T>
__global__ void decode_combine_kernel(const CombineParams c) {
  const int item = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (item >= c.units * kDecodeRows) return;
  const int unit = item / kDecodeRows, row = item % kDecodeRows;
  const int kvh = unit / c.chunks, chunk = unit % c.chunks;
  const int n_heads = min(c.chunk_heads, c.group - chunk * c.chunk_heads);
  if (row >= n_heads * c.q_len) return;
  const int h = kvh * c.group + chunk * c.chunk_heads + row / c.q_len, i = row % c.q_len;
  const int64_t part0 = int64_t(unit) * c.splits * kDecodeRows + row;
  float mx = -INFINITY;
  for (int sp = 0; sp < c.splits; ++sp) mx = fmaxf(mx, c.part_lse[part0 + sp * kDecodeRows]);
  float wsum = 0.f;
  for (int sp = 0; sp < c.splits; ++sp) {
    const float ls = c.part_lse[part0 + sp * kDecodeRows];
    wsum += ls == -INFINITY ? 0.f : expf(ls - mx);
  }
  const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
  T* o = static_cast<T*>(c.out) + int64_t(h) * c.o_h + int64_t(i) * c.o_s;
  for (int d = lane; d < c.dim; d += 32) {
    float acc = 0.f;
    for (int sp = 0; sp < c.splits; ++sp) {
      const float ls = c.part_lse[part0 + sp * kDecodeRows];
      if (ls != -INFINITY) acc += expf(ls - mx) * c.part_o[(part0 + sp * kDecodeRows) * c.dim + d];
    }
    o[d] = T(acc * inv);
  }
  if (lane == 0 && c.lse)
    c.lse[int64_t(h) * c.q_len + i] = wsum > 0.f ? mx + logf(wsum) : -INFINITY;
}

}  // namespace spattn::cuda
