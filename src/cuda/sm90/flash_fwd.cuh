// The attention kernel on Hopper's warpgroup MMA (sm_90a), after FlashAttention-3
// ("FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision", 3.1: warp
// specialization, a producer and consumers over a ring of shared-memory stages). The same
// policies and records as the mma.sync kernel (cuda/flash_fwd.cuh, FlashParams): dense or a key
// tile list per query tile, BLASST's skip rule in the loop, in order or local-first.
//
// One thread block, three warpgroups over a 128-row query tile:
//   - warpgroup 0, the producer, copies Q once and each visited tile's K and V into a ring of
//     kStages stages with cp.async, and marks a stage full (an mbarrier) once the copies are
//     done and fenced for the async proxy that wgmma reads through;
//   - warpgroups 1 and 2, the consumers, each own one 64-row group (the CPU's 64-row query tile,
//     BLASST's unit): S = Q K^T by wgmma from shared memory into registers, the mask, the online
//     softmax, then O += P V by wgmma with P straight from the score registers; each marks the
//     stage empty when done with it.
// The groups meet only at the ring: a group that skips a tile goes on to the next one while the
// other computes (the mma.sync kernel keeps its groups in step, so a tile costs the block
// unless both groups skip it; BENCHMARKS.md).
//
// Schedules (FlashAttention-3, 3.1 and 3.2), each to be timed against the plain one before it
// is anyone's default (SPATTN_CUDA_KERNEL, launch.cu):
//   - overlap (intra-warpgroup overlapping, two score register sets): a consumer issues tile
//     i + 1's S = Q K^T and tile i's O += P V back to back, then runs tile i + 1's softmax
//     while the tensor cores compute both; the second set of scores needs more registers than
//     384 threads share evenly, so the producer gives some up (setmaxnreg) to the consumers;
//   - pingpong (overlap, plus inter-warpgroup ping-pong): the two consumers take turns to issue
//     their products (two named barriers), so one group's softmax runs under the other's
//     products.
// BLASST keeps the plain schedule: its vote reads the current tile's scores before the next
// tile's products may be issued.
//
// Tiles are stored [D / 64][rows][64] in the 128-byte swizzle wgmma's descriptors name (16-byte
// chunk c of a 128-byte row r at c ^ (r % 8)): K and Q are K-major operands, V is read
// transposed (MN-major), all three in the same layout.
#pragma once
#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/flash_fwd.cuh"
#include "cuda/ptx.cuh"
#include "cuda/sm90/ptx.cuh"

namespace spattn::cuda::sm90 {

constexpr int kBM = 128;       // query rows a block: two 64-row groups
constexpr int kStages = 4;     // K/V stages in the ring
constexpr int kThreads = 384;  // producer + two consumer warpgroups
constexpr int kLag = 2;        // tiles the producer keeps in flight before marking the oldest
enum class Schedule { plain, overlap, pingpong };

// The TMA producer's tensor maps (kTma; launch.cu builds them): q, k and v as [heads][seq][D]
// (or [seq][heads][D] where heads_inner: the seq-major layout) with boxes of 64 columns by a
// tile's rows in the 128-byte swizzle the tiles are stored in, so that one copy fills one
// column block of a tile. The cp.async producer ignores them.
struct TmaMaps {
  CUtensorMap q, k, v;
  bool q_heads_inner, k_heads_inner, v_heads_inner;
};

// One column block of a tile by TMA: columns [c, c + 64) of rows [row, ...) of head h.
__device__ __forceinline__ void tma_rows(uint32_t dst, const CUtensorMap& map, bool heads_inner,
                                         int c, int row, int h, uint32_t bar) {
  heads_inner ? tma_load_3d(dst, &map, c, h, row, bar) : tma_load_3d(dst, &map, c, row, h, bar);
}

// The overlapped schedules' register split (setmaxnreg): 128 x 56 + 256 x 224 <= 65536 (fewer
// for the producer spill its cp.async addresses: ptxas -v).
constexpr int kProducerRegs = 56, kConsumerRegs = 224;
// Named barriers: 0 is __syncthreads', 1 + g BLASST's vote of group g, kTurn + g "group g may
// issue its products" (pingpong).
constexpr int kTurn = 3;

// Dynamic shared memory a block takes: Q, the stages, their barriers, and slack to align the
// start to the 1024 bytes a swizzle atom needs.
template <int D>
constexpr size_t smem_bytes() {
  return 1024 + size_t(kBM) * D * 2 + size_t(kStages) * 2 * kBN * D * 2 + 2 * kStages * 8;
}

namespace detail {

// Rows [row0, row0 + kRows) of a [seq][D] matrix (row stride `stride`) into a [D / 64][kRows][64]
// swizzled tile at shared address `dst_base`, by the producer's 128 threads; rows at or past
// `rows` are zero-filled. A thread copies 16-byte chunk tid % (D / 8) of rows tid / (D / 8) +
// n * kStep; kStep is a multiple of 8, so its chunk's swizzle is the same in every row.
template <class T, int D, int kRows>
__device__ __forceinline__ void load_tile(uint32_t dst_base, const T* g, int64_t stride, int row0,
                                          int rows, int tid) {
  constexpr int kChunks = D / 8, kStep = 128 / kChunks;
  static_assert(kStep % 8 == 0 && kRows % kStep == 0, "rows per pass");
  const int c = tid % kChunks, r = tid / kChunks;
  const uint32_t dst = dst_base + 2 * ((c >> 3) * kRows * 64 + r * 64 + (((c & 7) ^ (r & 7)) << 3));
  const T* src = g + int64_t(row0 + r) * stride + c * 8;
#pragma unroll
  for (int n = 0; n < kRows / kStep; ++n) {
    const bool valid = row0 + r + n * kStep < rows;
    ptx::cp_async_16(dst + n * kStep * 128, valid ? src + int64_t(n) * kStep * stride : g, valid);
  }
}

}  // namespace detail

template <class T, int D, bool kList, bool kSkip, Schedule kSched = Schedule::plain,
          bool kTma = false>
__global__ void __launch_bounds__(kThreads, 1)
    flash_fwd_kernel(const __grid_constant__ FlashParams p, const __grid_constant__ TmaMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(!(kList && kSkip), "BLASST runs over the dense visiting order");
  constexpr bool kOverlap = kSched != Schedule::plain;
  static_assert(!(kOverlap && kSkip), "BLASST votes on the current tile before the next");
  using cuda::detail::tile_at;
  constexpr uint32_t kQBytes = kBM * D * 2, kTileBytes = kBN * D * 2;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (ptx::smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base;
  auto sK = [&](int s) { return base + kQBytes + uint32_t(s) * 2 * kTileBytes; };
  auto sV = [&](int s) { return sK(s) + kTileBytes; };
  const uint32_t bars = base + kQBytes + kStages * 2 * kTileBytes;
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (kStages + s); };

  const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      // cp.async: every producer thread, once its copies of the stage are done; TMA: the one
      // thread that issues them, with the bytes they bring.
      mbar_init(full(s), kTma ? 1 : 128);
      mbar_init(empty(s), 8);  // every consumer warp, once done with the stage
    }
    mbar_init_fence();
  }
  __syncthreads();

  // Causal: the longest query tiles first, so the last wave is short ones.
  const int t = p.causal ? p.n_qt - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / p.group;
  const int64_t item = (int64_t(b) * p.heads + h) * p.n_qt + t;
  const int row0 = t * kBM;
  const int rows_here = min(kBM, p.q_len - row0);

  const int* list = nullptr;
  const uint8_t* groups = nullptr;  // whose each listed tile is (null: both groups')
  int n_visit;
  if constexpr (kList) {
    const int begin = p.list_offsets[item];
    list = p.list_tiles + begin;
    if (p.list_groups) groups = p.list_groups + begin;
    n_visit = p.list_offsets[item + 1] - begin;
  } else if (p.causal) {
    const int last_pos = p.pos_offset + row0 + rows_here - 1;
    n_visit = last_pos < 0 ? 0 : min(p.n_kt, last_pos / kBN + 1);
  } else {
    n_visit = p.n_kt;
  }
  const bool local_first = kSkip && p.local_first;

  if (wg == 0) {
    if constexpr (kOverlap) setmaxnreg_dec<kProducerRegs>();
    if constexpr (kTma) {
      // One thread issues the copies: each stage's K and V (and Q with the first), one TMA
      // copy per 64-column block, completing on the stage's full barrier by their bytes.
      if (tid == 0) {
        for (int i = 0; i < n_visit; ++i) {
          const int s = i % kStages;
          if (i >= kStages) mbar_wait(empty(s), ((i / kStages) - 1) & 1);
          const int kt = tile_at(i, n_visit, list, local_first);
          mbar_arrive_expect_tx(full(s), 2 * kTileBytes + (i == 0 ? kQBytes : 0));
#pragma unroll
          for (int c = 0; c < D / 64; ++c) {
            if (i == 0)
              tma_rows(sQ + c * kBM * 128, maps.q, maps.q_heads_inner, c * 64, row0, h, full(s));
            tma_rows(sK(s) + c * kBN * 128, maps.k, maps.k_heads_inner, c * 64, kt * kBN, kvh,
                     full(s));
            tma_rows(sV(s) + c * kBN * 128, maps.v, maps.v_heads_inner, c * 64, kt * kBN, kvh,
                     full(s));
          }
        }
      }
      return;
    }
    // The producer. Tile i goes into stage i % kStages once every consumer warp is done with
    // tile i - kStages there; a stage is marked full kLag tiles later (or at the end), after
    // this thread's copies of it are done and fenced: the wait is on copies issued long before.
    if (n_visit > 0) {
      const T* gQ = static_cast<const T*>(p.q) + b * p.q_b + h * p.q_h;
      const T* gK = static_cast<const T*>(p.k) + b * p.k_b + kvh * p.k_h;
      const T* gV = static_cast<const T*>(p.v) + b * p.v_b + kvh * p.v_h;
      for (int i = 0; i < n_visit; ++i) {
        const int s = i % kStages;
        if (i >= kStages) mbar_wait(empty(s), ((i / kStages) - 1) & 1);
        const int kt = tile_at(i, n_visit, list, local_first);
        if (i == 0) detail::load_tile<T, D, kBM>(sQ, gQ, p.q_s, row0, p.q_len, tid);
        detail::load_tile<T, D, kBN>(sK(s), gK, p.k_s, kt * kBN, p.kv_len, tid);
        detail::load_tile<T, D, kBN>(sV(s), gV, p.v_s, kt * kBN, p.kv_len, tid);
        ptx::cp_async_commit();
        if (i >= kLag) {
          ptx::cp_async_wait<kLag>();
          fence_proxy_async();
          mbar_arrive(full((i - kLag) % kStages));
        }
      }
      ptx::cp_async_wait<0>();
      fence_proxy_async();
      for (int i = max(0, n_visit - kLag); i < n_visit; ++i) mbar_arrive(full(i % kStages));
    }
    return;
  }

  // A consumer: 64-row group g of the tile; warp w of its warpgroup holds rows 16 w + [0, 16).
  if constexpr (kOverlap) setmaxnreg_inc<kConsumerRegs>();
  const int g = wg - 1, w = (tid / 32) % 4;
  const int t64 = t * 2 + g;
  const int64_t item64 = (int64_t(b) * p.heads + h) * p.n_qt64 + t64;
  const int row_base = row0 + g * 64 + w * 16 + lane / 4;
  auto row_of = [&](int r) { return row_base + r * 8; };
  auto lim_of = [&](int r) {
    return p.causal ? min(p.kv_len, p.pos_offset + row_of(r) + 1) : p.kv_len;
  };
  const int lim_min = lim_of(0);
  // Keys [0, reach) some row of this group sees: a tile at or past it is not the group's.
  const int last = min(p.q_len, row0 + (g + 1) * 64) - 1;
  const int reach = last < row0 + g * 64
                        ? 0
                        : (p.causal ? max(0, min(p.kv_len, p.pos_offset + last + 1)) : p.kv_len);

  // local_first: the block's tiles come in the CPU's order for group 1 (its diagonal, the sink,
  // then nearest to farthest), in which group 0's diagonal is third, after the sink. The CPU's
  // 64-row tile visits its diagonal first, so group 0 takes positions 1 and 2 swapped (both are
  // in the ring at once: kStages >= 3): its diagonal, then the sink decided against it, then the
  // rest, tile for tile the CPU's decisions.
  bool swap12 = false;
  if (local_first && p.threshold != -INFINITY && g == 0) {
    const int diag0 = reach > 0 ? (reach - 1) / kBN : 0;
    swap12 = diag0 > 0 && diag0 < n_visit - 1;
  }
  static_assert(kStages >= 3, "positions 1 and 2 resident together");

  float o[D / 2];  // O: n8 tile j's four values at o[4 j .. 4 j + 3]
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // m in scaled log2 units
  int n_visited = 0, n_skipped = 0;
  unsigned long long n_entries = 0;
  const float sl2 = p.scale_log2;

  // Descriptors: Q's 64 rows of this group and K, both K-major (k16 step kk: 32 bytes along a
  // 128-byte row, the next column block every four); V MN-major (k16 step: 16 keys down).
  auto desc_q = [&](int kk) {
    return desc_sw128(sQ + (kk / 4) * (kBM * 128) + g * 64 * 128 + (kk % 4) * 32, 16, 1024);
  };
  auto desc_k = [&](int s, int kk) {
    return desc_sw128(sK(s) + (kk / 4) * (kBN * 128) + (kk % 4) * 32, 16, 1024);
  };
  auto desc_v = [&](int s, int kk) { return desc_sw128(sV(s) + kk * 16 * 128, kBN * 128, 1024); };

  // S = Q K^T of stage s into sc, committed (the caller waits).
  auto issue_scores = [&](float(&sc)[kBN / 2], int s) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) mma_ss<T, kBN>(sc, desc_q(kk), desc_k(s, kk), kk > 0);
    wgmma_commit();
  };
  // The causal mask on the tile at kbase (every score where the tile is not `mine`), then its
  // row maxima mx in scaled log2 units.
  auto mask_max = [&](float(&sc)[kBN / 2], int kbase, bool mine, float(&mx)[2]) {
    if (!mine) {
#pragma unroll
      for (int e = 0; e < kBN / 2; ++e) sc[e] = -INFINITY;
    } else if (kbase + kBN > lim_min) {
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kbase + j * 8 + (lane % 4) * 2 + (e & 1);
          if (key >= lim_of(e >> 1)) sc[4 * j + e] = -INFINITY;
        }
    }
    mx[0] = mx[1] = -INFINITY;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      mx[0] = fmaxf(mx[0], fmaxf(sc[4 * j], sc[4 * j + 1]));
      mx[1] = fmaxf(mx[1], fmaxf(sc[4 * j + 2], sc[4 * j + 3]));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      mx[r] *= sl2;  // the scale is positive: the max commutes
    }
  };
  // The tile's entries counted and its online softmax: m and l updated, P in place of the
  // scores, and the factor alpha O must be scaled by before P V is added. A row that has seen
  // only masked keys keeps m = -inf: its base is 0, so 2^(-inf - 0) = 0 and no NaN arises.
  auto softmax = [&](float(&sc)[kBN / 2], const float(&mx)[2], int kbase, bool mine,
                     float(&alpha)[2]) {
    if (mine && p.entries && lane % 4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (row_of(r) < p.q_len) n_entries += max(0, min(lim_of(r), kbase + kBN) - kbase);
    }
    float base_[2], sum[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mn = fmaxf(m[r], mx[r]);
      base_[r] = mn == -INFINITY ? 0.f : mn;
      alpha[r] = ptx::ex2(m[r] - base_[r]);
      m[r] = mn;
    }
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      sc[4 * j] = ptx::ex2(fmaf(sc[4 * j], sl2, -base_[0]));
      sc[4 * j + 1] = ptx::ex2(fmaf(sc[4 * j + 1], sl2, -base_[0]));
      sc[4 * j + 2] = ptx::ex2(fmaf(sc[4 * j + 2], sl2, -base_[1]));
      sc[4 * j + 3] = ptx::ex2(fmaf(sc[4 * j + 3], sl2, -base_[1]));
      sum[0] += sc[4 * j] + sc[4 * j + 1];
      sum[1] += sc[4 * j + 2] + sc[4 * j + 3];
    }
    l[0] = l[0] * alpha[0] + sum[0];  // this thread's share; the quad's sum is taken at the end
    l[1] = l[1] * alpha[1] + sum[1];
  };
  // P as wgmma A fragments, one per 16 keys (an overlapped schedule packs them only once the
  // previous P V, which reads the old ones, is done).
  auto pack = [&](const float(&sc)[kBN / 2], uint32_t(&pf)[kBN / 16][4]) {
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      pf[j / 2][(j % 2) * 2 + 0] = ptx::pack2<T>(sc[4 * j], sc[4 * j + 1]);
      pf[j / 2][(j % 2) * 2 + 1] = ptx::pack2<T>(sc[4 * j + 2], sc[4 * j + 3]);
    }
  };
  auto rescale = [&](const float(&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      o[4 * j] *= alpha[0];
      o[4 * j + 1] *= alpha[0];
      o[4 * j + 2] *= alpha[1];
      o[4 * j + 3] *= alpha[1];
    }
  };
  // O += P V of stage s, committed (the caller waits).
  auto issue_pv = [&](const uint32_t(&pf)[kBN / 16][4], int s) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) mma_rs_tb<T, D>(o, pf[kk], desc_v(s, kk));
    wgmma_commit();
  };
  // Tile position pos of the visiting order: its stage, its first key, and whether it is this
  // group's (uniform over the warpgroup), once the producer has filled its stage.
  struct Visit {
    int s, kt, kbase;
    bool mine;
  };
  auto visit_at = [&](int pos) {
    Visit v;
    v.s = pos % kStages;
    v.kt = tile_at(pos, n_visit, list, local_first);
    v.kbase = v.kt * kBN;
    mbar_wait(full(v.s), (pos / kStages) & 1);
    v.mine = v.kbase < reach && (!groups || (groups[pos] >> g) & 1);  // uniform over the group
    if (v.mine && tid % 128 == 0) ++n_visited;
    return v;
  };
  auto release = [&](int s) {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty(s));
  };

  if constexpr (kOverlap) {
    // FlashAttention-3's order: step i issues tile i + 1's scores into a fresh register set,
    // scales O by tile i's alpha and issues O += P_i V_i, then runs tile i + 1's softmax on its
    // scores in place under P_i V_i, and packs P_{i+1} once P_i V_i (which reads pf) is in;
    // the last tile's P V is the epilogue. No branch around a wgmma (ptxas serializes them
    // otherwise): a tile that is not the group's (past its reach) is computed with every score
    // masked, which leaves m, l and O as they were (alpha 1, P 0). The operations on O and l
    // come in the plain schedule's order: the same bits.
    constexpr bool kPingPong = kSched == Schedule::pingpong;
    if (n_visit > 0) {
      float alpha[2];
      uint32_t pf[kBN / 16][4];
      Visit cur = visit_at(0);
      {
        float s0[kBN / 2], mx[2];
        issue_scores(s0, cur.s);
        wgmma_wait<0>();
        fence_regs(s0);
        mask_max(s0, cur.kbase, cur.mine, mx);
        softmax(s0, mx, cur.kbase, cur.mine, alpha);
        pack(s0, pf);
      }
      // Group 0 issues first: group 1 opens its turn. Each group waits for its turn once a
      // step (n_visit of them, the epilogue's included) and hands it over after issuing (group
      // 1 not after its last: nobody waits for it), so the counts match.
      if (kPingPong && g == 1) bar_arrive(kTurn + 0, 256);
      for (int i = 0; i + 1 < n_visit; ++i) {
        const Visit next = visit_at(i + 1);
        float sn[kBN / 2], mx[2];
        if (kPingPong) bar_sync(kTurn + g, 256);
        issue_scores(sn, next.s);
        rescale(alpha);
        issue_pv(pf, cur.s);
        if (kPingPong) bar_arrive(kTurn + 1 - g, 256);
        wgmma_wait<1>();  // the scores, committed first, are in; P_i V_i may still run
        fence_regs(sn);
        mask_max(sn, next.kbase, next.mine, mx);
        softmax(sn, mx, next.kbase, next.mine, alpha);
        wgmma_wait<0>();
        fence_regs(o);
        release(cur.s);
        pack(sn, pf);
        cur = next;
      }
      if (kPingPong) bar_sync(kTurn + g, 256);
      rescale(alpha);
      issue_pv(pf, cur.s);
      if (kPingPong && g == 0) bar_arrive(kTurn + 1, 256);
      wgmma_wait<0>();
      fence_regs(o);
      release(cur.s);
    }
  } else {
    for (int i = 0; i < n_visit; ++i) {
      const Visit v = visit_at(swap12 && (i == 1 || i == 2) ? 3 - i : i);
      float sc[kBN / 2];                     // S: n8 tile j's four values at sc[4 j .. 4 j + 3]
      float mx[2] = {-INFINITY, -INFINITY};  // the tile's row maxima, scaled log2 units
      if (v.mine) {
        issue_scores(sc, v.s);
        wgmma_wait<0>();
        fence_regs(sc);
        mask_max(sc, v.kbase, true, mx);
      }

      // BLASST: the group skips the tile when each of its rows is ln(lambda) below its running
      // max (the CPU rule, blasst_skips: a NaN difference, -inf against -inf, counts as below;
      // a -inf threshold, lambda 0, skips nothing). The vote is the warpgroup's barrier.
      bool skip = false;
      if constexpr (kSkip) {
        bool below = true;
#pragma unroll
        for (int r = 0; r < 2; ++r)
          below = below && (row_of(r) >= p.q_len || !(mx[r] - m[r] >= p.threshold));
        const bool all = all_at_barrier(below, 1 + g, 128);
        skip = v.mine && p.threshold != -INFINITY && all;
      }
      if (skip && tid % 128 == 0) {
        ++n_skipped;
        if (p.skip_map) p.skip_map[item64 * p.n_kt + v.kt] = 1;
      }
      if (v.mine && !skip) {
        uint32_t pf[kBN / 16][4];
        float alpha[2];
        softmax(sc, mx, v.kbase, true, alpha);
        pack(sc, pf);
        rescale(alpha);
        issue_pv(pf, v.s);
        wgmma_wait<0>();
        fence_regs(o);
      }
      release(v.s);
    }
  }

  // Final: divide by the row sums; an empty row (l = 0) gets 0 and LSE -inf.
  constexpr float kLn2 = 0.693147180559945309f;
  float* lse = p.lse ? p.lse + b * p.lse_b + h * p.lse_h : nullptr;
  T* gO = static_cast<T*>(p.o) + b * p.o_b + h * p.o_h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float lr = l[r];
    lr += __shfl_xor_sync(0xffffffffu, lr, 1);
    lr += __shfl_xor_sync(0xffffffffu, lr, 2);
    const float inv = lr > 0.f ? 1.f / lr : 0.f;
    if (row_of(r) < p.q_len) {
      T* orow = gO + int64_t(row_of(r)) * p.o_s;
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<uint32_t*>(orow + j * 8 + (lane % 4) * 2) =
            ptx::pack2<T>(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
      if (lse && lane % 4 == 0) lse[row_of(r)] = lr > 0.f ? (m[r] + log2f(lr)) * kLn2 : -INFINITY;
    }
  }
  if (p.entries) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) n_entries += __shfl_xor_sync(0xffffffffu, n_entries, off);
    if (lane == 0 && n_entries) atomicAdd(p.entries + item64, n_entries);
  }
  if (tid % 128 == 0 && t64 < p.n_qt64) {
    if (p.visited) p.visited[item64] = n_visited;
    if (p.skipped) p.skipped[item64] = n_skipped;
  }
#endif
}

}  // namespace spattn::cuda::sm90
