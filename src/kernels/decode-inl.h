// The decode kernel (q_len <= 16 against a long KV cache), compiled once per SIMD target.
//
// One work item is (kv head g, row chunk, key split). The rows are every (q head of g's GQA
// group, query row) pair, so each K and V byte of the split is read once for all of them.
// Per batch of `batch` 64-key blocks of the split:
//
//   S_b  = Q K_b^T, masked          for every block b of the batch, back to back
//   x_b  = S_b * scale * log2(e)    (base-2 softmax units, as in the prefill loop)
//   m'   = max(m, max_b rowmax x_b) (running max over the whole batch)
//   O, l *= 2^(m - m')              (one rescale per batch)
//   for each block b, unless skipped:
//     P_b = 2^(x_b - m'),  l += rowsum P_b,  O += P_b V_b     (only here is V_b read)
//
// Blocks run in the order BlasstOrder asks for: in order, or (local_first, lambda > 0) nearest
// first, with every split's running max starting at the rows' maxima over the newest block and
// the sink block, which are scored once per (kv head, row chunk) before the splits run
// (SeedUnit): each split decides as if those two blocks had been visited just before it.
//
// At the end of the split the partial result (O / l, LSE = (m' + log2 l) ln 2) is stored;
// the splits of a row are merged exactly afterwards in split order (merge_row). The split plan
// depends on kv_len only (PlanSplits), so the output is bitwise the same for any thread count
// and schedule.
//
// Stats: a "tile" is one 64-key block as seen by one (kv head, row chunk) work unit, i.e. by
// all group x q_len rows at once (<= 128 rows per chunk): tiles_visited counts the blocks
// whose scores were computed, tiles_skipped those whose V was never read. score_entries
// counts the (q head, row, key) entries of kept blocks after causal masking.
//
// SkipStats (optional): the same decisions per q head. A row chunk holds whole q heads (all
// q_len rows of a head; see RunDecode), so a block a unit skipped is skipped for every row of
// each of its q heads, and a kept one computed for all of them: the per-head lists are exact.
// Each item records its own counts and skipped blocks; they are joined per q head in split
// order after the parallel loop, so the result is the same for any thread count.
//
// K and V are read in place from the views: rows are contiguous along the head dim, so a dot
// product runs along the head dim and ends in a horizontal sum (SumEach does kLanes of them at
// once). Views with stride_dim != 1 are staged one 64-key block at a time.

#if defined(SPATTN_KERNELS_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPATTN_KERNELS_DECODE_INL_H_
#undef SPATTN_KERNELS_DECODE_INL_H_
#else
#define SPATTN_KERNELS_DECODE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/threading.hpp"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/flash-inl.h"  // DF, VF, Exp2, RoundUp, LoadRowF32, MaskTile, RowMax
#include "kernels/flash_common.hpp"
#include "spattn/blasst.hpp"
#include "spattn/merge.hpp"
#if HWY_TARGET == HWY_AVX3
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
namespace decode {
namespace hn = hwy::HWY_NAMESPACE;

inline constexpr int64_t kMaxRows = 128;  // rows (group x q_len) computed together
inline constexpr int64_t kMaxBatch = 64;
inline constexpr size_t kLanes = hn::MaxLanes(DF());
// Accumulator registers a micro-kernel may hold (32 vector registers on AVX-512, 16 else).
inline constexpr int kAccRegs = kLanes >= 16 ? 16 : 8;

// ---------------------------------------------------------------------------------------
// Loading kLanes consecutive elements of a row as f32 lanes.
template <class E>
struct Elems;
template <>
struct Elems<float> {
  static HWY_INLINE VF Load(DF df, const float* p) { return hn::LoadU(df, p); }
};
template <>
struct Elems<hwy::bfloat16_t> {
  // bf16 is the upper half of an f32.
  static HWY_INLINE VF Load(DF df, const hwy::bfloat16_t* p) {
    const hn::Rebind<uint16_t, DF> du16;
    const hn::Rebind<uint32_t, DF> du32;
    const auto bits = hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p));
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, bits)));
  }
};
template <>
struct Elems<hwy::float16_t> {
  static HWY_INLINE VF Load(DF df, const hwy::float16_t* p) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, p));
  }
};

// The last, partial vector of a row (head dims that are not a multiple of kLanes; the head
// dim is a multiple of 8, so this only happens with 16 lanes): zero-filled, never reads past
// the row.
template <class E>
HWY_INLINE VF LoadTail(DF df, const E* p, int64_t n) {
  alignas(64) E buf[kLanes] = {};
  std::memcpy(buf, p, size_t(n) * sizeof(E));
  return Elems<E>::Load(df, buf);
}

// Prefetches the cache lines of one row of `bytes`.
inline void PrefetchRow(const void* row, int64_t bytes) {
  const char* p = static_cast<const char*>(row);
  for (int64_t off = 0; off < bytes; off += 64) hwy::Prefetch(p + off);
}

// ---------------------------------------------------------------------------------------
// Lane i of the result is the sum of the lanes of v[i], for kLanes vectors. Interleaving
// pairs and then quads inside each 128-bit block, then combining blocks, costs about three
// operations per input instead of a log2(kLanes)-step reduction each.
HWY_INLINE VF SumEach(DF df, const VF* v) {
#if HWY_TARGET != HWY_SCALAR  // no block shuffles there (and one lane: nothing to sum)
  if constexpr (kLanes == 4 || kLanes == 8 || kLanes == 16) {
    const hn::Repartition<uint64_t, DF> d64;
    constexpr size_t kQuads = kLanes / 4;
    VF y[kQuads];  // block b of y[g]: the block-b lane sums of v[4g .. 4g+3]
    for (size_t g = 0; g < kQuads; ++g) {
      const VF* x = v + 4 * g;
      // per block [x0, x1, x0, x1], each lane the sum of two of that vector's lanes
      const VF a =
          hn::Add(hn::InterleaveLower(df, x[0], x[1]), hn::InterleaveUpper(df, x[0], x[1]));
      const VF b =
          hn::Add(hn::InterleaveLower(df, x[2], x[3]), hn::InterleaveUpper(df, x[2], x[3]));
      const auto a64 = hn::BitCast(d64, a), b64 = hn::BitCast(d64, b);
      y[g] = hn::Add(hn::BitCast(df, hn::InterleaveLower(d64, a64, b64)),
                     hn::BitCast(df, hn::InterleaveUpper(d64, a64, b64)));
    }
    if constexpr (kQuads == 1) {
      return y[0];
    } else if constexpr (kQuads == 2) {
      const VF t0 = hn::Add(y[0], hn::SwapAdjacentBlocks(y[0]));
      const VF t1 = hn::Add(y[1], hn::SwapAdjacentBlocks(y[1]));
      return hn::OddEvenBlocks(t1, t0);
    } else {
      // t_g = [b0+b1, b0+b1, b2+b3, b2+b3]; u pairs them up, then the halves are added.
      VF u[2];
      for (size_t h = 0; h < 2; ++h) {
        const VF t0 = hn::Add(y[2 * h], hn::SwapAdjacentBlocks(y[2 * h]));
        const VF t1 = hn::Add(y[2 * h + 1], hn::SwapAdjacentBlocks(y[2 * h + 1]));
        u[h] = hn::OddEvenBlocks(t1, t0);
      }
      return hn::Add(hn::ConcatLowerLower(df, u[1], u[0]), hn::ConcatUpperUpper(df, u[1], u[0]));
    }
  }
#endif
  {
    alignas(64) float s[kLanes];
    for (size_t i = 0; i < kLanes; ++i) s[i] = hn::GetLane(hn::SumOfLanes(df, v[i]));
    return hn::Load(df, s);
  }
}

// Writes sums (lane r * KG + kk is row r, key kk) into S rows of kTileKeys.
template <int RQ>
HWY_INLINE void StoreDots(DF df, VF sums, float* s) {
  constexpr int KG = int(kLanes) / RQ;
  if constexpr (RQ == 1) {
    hn::StoreU(sums, df, s);
  } else {
    alignas(64) float t[kLanes];
    hn::Store(sums, df, t);
    for (int r = 0; r < RQ; ++r) std::memcpy(s + r * kTileKeys, t + r * KG, KG * sizeof(float));
  }
}

// ---------------------------------------------------------------------------------------
// Scores: S[r][j] = q_r . k_j for RQ rows and the nv keys of one block. Keys go in groups of
// KG = kLanes / RQ: one accumulator per (row, key) along the head dim, then SumEach. Key
// pointers past nv repeat the last key (in bounds; their scores are masked by the caller).
//
// Reading K from DRAM is what these loops wait on, so the order of the loads matters as much
// as the arithmetic. A/B in one process on the 2-core Zen 4 dev VM (one thread, 32K bf16 keys
// x 8 heads, d = 128, nearly all V skipped so K dominates): a single row (RQ == 1, MHA at
// q_len 1) loading its 16-key group chunk by chunk across the rows took 11.2 ms, key by key
// in address order 5.9 ms; prefetching each 16 keys' rows in address order first (all their
// misses issued at once) took that to 3.8 ms on a quiet machine (~5% under load). Prefetching
// further ahead, or prefetching V blocks, measured slower and was left out. Several rows go
// chunk by chunk so each loaded K vector serves all RQ rows.
template <class E>
HWY_INLINE void PrefetchKeys(const E* k, int64_t ks, int64_t j, int64_t nv, int64_t d) {
  if (j % 16 != 0) return;
  for (int64_t i = j; i < std::min(j + 16, nv); ++i)
    PrefetchRow(k + i * ks, d * int64_t(sizeof(E)));
}

template <int RQ, class E>
HWY_NOINLINE void ScoreRows(const float* HWY_RESTRICT q, int64_t dp, const E* k, int64_t ks,
                            int64_t nv, int64_t d, float* HWY_RESTRICT s, bool prefetch) {
  constexpr int KG = int(kLanes) / RQ;
  const DF df;
  const int64_t N = int64_t(kLanes);
  const int64_t full = d / N * N;
  for (int64_t j = 0; j < nv; j += KG) {
    const E* kr[KG];
    for (int kk = 0; kk < KG; ++kk) kr[kk] = k + std::min<int64_t>(j + kk, nv - 1) * ks;
    if (prefetch) PrefetchKeys(k, ks, j, nv, d);
    VF acc[RQ * KG];
    for (int i = 0; i < RQ * KG; ++i) acc[i] = hn::Zero(df);
    if constexpr (RQ == 1) {
      for (int kk = 0; kk < KG; ++kk) {
        int64_t c = 0;
        for (; c < full; c += N)
          acc[kk] = hn::MulAdd(hn::Load(df, q + c), Elems<E>::Load(df, kr[kk] + c), acc[kk]);
        if (c < d)
          acc[kk] = hn::MulAdd(hn::Load(df, q + c), LoadTail(df, kr[kk] + c, d - c), acc[kk]);
      }
    } else {
      for (int64_t c = 0; c < d; c += N) {
        VF kv[KG];
        for (int kk = 0; kk < KG; ++kk)
          kv[kk] = c < full ? Elems<E>::Load(df, kr[kk] + c) : LoadTail(df, kr[kk] + c, d - c);
        for (int r = 0; r < RQ; ++r) {
          const VF qv = hn::Load(df, q + r * dp + c);
          for (int kk = 0; kk < KG; ++kk)
            acc[r * KG + kk] = hn::MulAdd(qv, kv[kk], acc[r * KG + kk]);
        }
      }
    }
    StoreDots<RQ>(df, SumEach(df, acc), s + j);
  }
}

#if HWY_TARGET == HWY_AVX3
// The same with vdpbf16ps (bf16 q and k, AVX512_BF16 CPUs): per f32 lane
//   acc += q[2i] k[2i] + q[2i+1] k[2i+1],
// so pairs run along the head dim, which is how both q and k rows are stored. q is bf16
// zero-padded to dq (a multiple of 32); the last chunk of a k row is a masked load.
#define SPATTN_DECODE_BF16_ATTR __attribute__((target(HWY_TARGET_STR ",avx512bf16")))
SPATTN_DECODE_BF16_ATTR HWY_INLINE __m512 DotBf16(__m512 acc, const uint16_t* q, const uint16_t* k,
                                                  int64_t c, int64_t d) {
  const __mmask32 mask = d - c >= 32 ? ~__mmask32(0) : __mmask32((1u << (d - c)) - 1);
  return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_load_si512(q + c),
                          (__m512bh)_mm512_maskz_loadu_epi16(mask, k + c));
}

template <int RQ>
SPATTN_DECODE_BF16_ATTR HWY_NOINLINE void ScoreRowsBf16(const uint16_t* HWY_RESTRICT q, int64_t dq,
                                                        const uint16_t* k, int64_t ks, int64_t nv,
                                                        int64_t d, float* HWY_RESTRICT s,
                                                        bool prefetch) {
  constexpr int KG = 16 / RQ;
  const DF df;
  for (int64_t j = 0; j < nv; j += KG) {
    const uint16_t* kr[KG];
    for (int kk = 0; kk < KG; ++kk) kr[kk] = k + std::min<int64_t>(j + kk, nv - 1) * ks;
    if (prefetch) PrefetchKeys(k, ks, j, nv, d);
    VF acc[RQ * KG];
    for (int i = 0; i < RQ * KG; ++i) acc[i] = hn::Zero(df);
    if constexpr (RQ == 1) {
      for (int kk = 0; kk < KG; ++kk)
        for (int64_t c = 0; c < d; c += 32) acc[kk].raw = DotBf16(acc[kk].raw, q, kr[kk], c, d);
    } else {
      for (int64_t c = 0; c < d; c += 32) {
        const __mmask32 mask = d - c >= 32 ? ~__mmask32(0) : __mmask32((1u << (d - c)) - 1);
        __m512i kv[KG];
        for (int kk = 0; kk < KG; ++kk) kv[kk] = _mm512_maskz_loadu_epi16(mask, kr[kk] + c);
        for (int r = 0; r < RQ; ++r) {
          const __m512bh qv = (__m512bh)_mm512_load_si512(q + r * dq + c);
          for (int kk = 0; kk < KG; ++kk)
            acc[r * KG + kk].raw = _mm512_dpbf16_ps(acc[r * KG + kk].raw, qv, (__m512bh)kv[kk]);
        }
      }
    }
    StoreDots<RQ>(df, SumEach(df, acc), s + j);
  }
}
#undef SPATTN_DECODE_BF16_ATTR
#endif

// ---------------------------------------------------------------------------------------
// P.V works on pairs of vectors: 2 kLanes consecutive elements of a V row at a time.
//   f32, f16: the two halves, in order.
//   bf16: one full-width load, split into the even elements (the low half of each 32-bit
//         word, shifted up) and the odd ones (the high half, masked): one operation per
//         vector instead of two for a widening load. O's columns are then stored permuted
//         within each pair (evens, then odds); see kPermutedO and UnpermuteRow.
template <class E>
HWY_INLINE void LoadPair(DF df, const E* p, VF& lo, VF& hi) {
  lo = Elems<E>::Load(df, p);
  hi = Elems<E>::Load(df, p + kLanes);
}
#if HWY_TARGET != HWY_SCALAR  // one lane: no 32-bit word holds two bf16 lanes
template <>
HWY_INLINE void LoadPair(DF df, const hwy::bfloat16_t* p, VF& even, VF& odd) {
  const hn::Repartition<uint32_t, DF> du32;
  const hn::Repartition<uint16_t, DF> du16;
  const auto w = hn::BitCast(du32, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p)));
  even = hn::BitCast(df, hn::ShiftLeft<16>(w));
  odd = hn::BitCast(df, hn::And(w, hn::Set(du32, 0xFFFF0000u)));
}
template <class E>
inline constexpr bool kPermutedO = std::is_same_v<E, hwy::bfloat16_t>;
#else
template <class E>
inline constexpr bool kPermutedO = false;
#endif

// The last, partial pair of a row: zero-filled, never reads past the row.
template <class E>
HWY_INLINE void LoadPairTail(DF df, const E* p, int64_t n, VF& a, VF& b) {
  alignas(64) E buf[2 * kLanes] = {};
  std::memcpy(buf, p, size_t(n) * sizeof(E));
  LoadPair(df, buf, a, b);
}

// O[r][c0 .. c0 + 2 CP kLanes) += sum_{j < nk} P[r][j] V[j][...] for RQ rows (f32
// arithmetic). kTail: the strip is the last, partial pair of the row (CP == 1).
template <int RQ, int CP, bool kTail, class E>
HWY_INLINE void PVStrip(const float* HWY_RESTRICT p, int64_t nk, const E* v, int64_t vs, int64_t c0,
                        int64_t d, float* HWY_RESTRICT o, int64_t dp) {
  const DF df;
  const int64_t N = int64_t(kLanes);
  VF acc[RQ][2 * CP];
  for (int r = 0; r < RQ; ++r)
    for (int c = 0; c < 2 * CP; ++c) acc[r][c] = hn::Load(df, o + r * dp + c0 + c * N);
  for (int64_t j = 0; j < nk; ++j) {
    const E* row = v + j * vs + c0;
    VF b[2 * CP];
    for (int c = 0; c < CP; ++c) {
      if constexpr (kTail)
        LoadPairTail(df, row, d - c0, b[0], b[1]);
      else
        LoadPair(df, row + 2 * c * N, b[2 * c], b[2 * c + 1]);
    }
    for (int r = 0; r < RQ; ++r) {
      const VF a = hn::Set(df, p[r * kTileKeys + j]);
      for (int c = 0; c < 2 * CP; ++c) acc[r][c] = hn::MulAdd(a, b[c], acc[r][c]);
    }
  }
  for (int r = 0; r < RQ; ++r)
    for (int c = 0; c < 2 * CP; ++c) hn::Store(acc[r][c], df, o + r * dp + c0 + c * N);
}

// The strip of `rem` (< K + 1) whole pairs left over after the wide strips.
template <int RQ, int K, class E>
HWY_INLINE void PVRemainder(int64_t rem, const float* p, int64_t nk, const E* v, int64_t vs,
                            int64_t c0, int64_t d, float* o, int64_t dp) {
  if constexpr (K > 0) {
    if (rem == K)
      PVStrip<RQ, K, false>(p, nk, v, vs, c0, d, o, dp);
    else
      PVRemainder<RQ, K - 1>(rem, p, nk, v, vs, c0, d, o, dp);
  }
}

template <int RQ, class E>
HWY_NOINLINE void PVRows(const float* p, int64_t nk, const E* v, int64_t vs, int64_t d, float* o,
                         int64_t dp) {
  constexpr int CP = std::max(1, std::min(4, kAccRegs / (2 * RQ)));  // <= 8 vectors of O
  const int64_t W = 2 * int64_t(kLanes);
  const int64_t whole = d / W;
  int64_t c = 0;
  for (; c + CP <= whole; c += CP) PVStrip<RQ, CP, false>(p, nk, v, vs, c * W, d, o, dp);
  PVRemainder<RQ, CP - 1>(whole - c, p, nk, v, vs, c * W, d, o, dp);
  if (whole * W < d) PVStrip<RQ, 1, true>(p, nk, v, vs, whole * W, d, o, dp);
}

// Column c of an O row in natural order, from the pair-permuted layout.
inline float UnpermutedAt(const float* o, int64_t c) {
  const int64_t W = 2 * int64_t(kLanes), base = c / W * W, i = c - base;
  return o[base + (i & 1) * int64_t(kLanes) + i / 2];
}

// ---------------------------------------------------------------------------------------
// Softmax pieces on S rows of kTileKeys.

// P = 2^(x - m) in place (x = S c), l += rowsum P. m must be finite (a row that has seen no
// key uses 0: its scores are all -inf and give P = 0).
inline void ExpRows(float* s, int64_t n, float c, const float* m, float* l) {
  const DF df;
  const int64_t N = int64_t(kLanes);
  const VF vc = hn::Set(df, c);
  for (int64_t r = 0; r < n; ++r) {
    const VF vm = hn::Set(df, m[r]);
    float* row = s + r * kTileKeys;
    VF sum = hn::Zero(df);
    for (int64_t j = 0; j < kTileKeys; j += N) {
      const VF p = Exp2(df, hn::MulSub(hn::Load(df, row + j), vc, vm));
      sum = hn::Add(sum, p);
      hn::Store(p, df, row + j);
    }
    l[r] += hn::GetLane(hn::SumOfLanes(df, sum));
  }
}

inline void ScaleRows(float* o, int64_t n, int64_t dp, const float* alpha) {
  const DF df;
  const int64_t N = int64_t(kLanes);
  for (int64_t r = 0; r < n; ++r) {
    if (alpha[r] == 1.0f) continue;
    const VF a = hn::Set(df, alpha[r]);
    for (int64_t c = 0; c < dp; c += N)
      hn::Store(hn::Mul(a, hn::Load(df, o + r * dp + c)), df, o + r * dp + c);
  }
}

// ---------------------------------------------------------------------------------------
// The split plan and the per-thread scratch.

// What one work item skipped (only when the caller asked for SkipStats). A cache line each:
// neighbouring items run at the same time on different threads.
struct alignas(64) ItemSkips {
  int64_t visited = 0, skipped = 0;
  std::vector<int32_t> blocks;  // global 64-key block indices, ascending (record_tiles only)
};

struct Plan {
  int64_t rows = 0;  // group * q_len: the rows that share one kv head
  int64_t chunks = 1, chunk_heads = 0, chunk_rows = 0;  // chunk_rows = chunk_heads * q_len
  int64_t tiles = 0;                                    // 64-key blocks of the cache
  int64_t splits = 1, split_tiles = 0;
  int64_t batch = 1;
  bool may_skip = false;
  float log2_lambda = 0;   // the skip threshold in base-2 units (ln(lambda) log2(e))
  int64_t dp = 0, dq = 0;  // head dim padded to 2 kLanes (f32 rows) and to 32 (bf16 q rows)
  float c = 0;             // scale * log2(e)
  std::vector<float> part_o, part_lse;  // [kv head][row][split] x dp, and the LSEs
  std::vector<ItemSkips> skips;         // [item], empty unless SkipStats were asked for
  bool record_tiles = false;            // also list the skipped blocks
  // BlasstOrder::local_first (with lambda > 0): splits visit their blocks nearest first and
  // start their running max at seed, the rows' maxima over the newest and the sink block.
  bool local_first = false;
  std::vector<float> seed;  // [unit = kv head * chunks + chunk][chunk_rows], log2 units
  int64_t part_index(int64_t kvh, int64_t row, int64_t split) const {
    return (kvh * rows + row) * splits + split;
  }
};

struct Scratch {
  std::unique_ptr<float[], void (*)(float*)> buf{nullptr, [](float* p) { aligned_free(p); }};
  float *q = nullptr, *s = nullptr, *bmax = nullptr, *o = nullptr, *m = nullptr, *l = nullptr,
        *m_use = nullptr, *alpha = nullptr, *stage = nullptr;
  uint16_t* qb = nullptr;
  int64_t pos[kMaxRows];
  int64_t kept[kMaxBatch];
  std::vector<TileVisit> visits;  // the item's blocks in visiting order

  explicit Scratch(const Plan& pl) {
    const int64_t R = pl.chunk_rows;
    const auto up = [](int64_t floats) { return RoundUp(floats, 16); };  // 64-byte pieces
    const int64_t sizes[] = {up(R * pl.dp),
                             up(pl.batch * R * kTileKeys),
                             up(pl.batch * R),
                             up(R * pl.dp),
                             up(R),
                             up(R),
                             up(R),
                             up(R),
                             up(kTileKeys * pl.dp),
                             up((R * pl.dq + 1) / 2)};
    int64_t total = 0;
    for (int64_t x : sizes) total += x;
    buf.reset(static_cast<float*>(aligned_alloc_bytes(size_t(total) * 4)));
    float* f = buf.get();
    float** parts[] = {&q, &s, &bmax, &o, &m, &l, &m_use, &alpha, &stage};
    for (size_t i = 0; i < 9; ++i) {
      *parts[i] = f;
      f += sizes[i];
    }
    qb = reinterpret_cast<uint16_t*>(f);
  }
};

// ---------------------------------------------------------------------------------------
// How K and V rows are reached. Direct: in place (stride_dim == 1, element type E). Staged:
// any view, one block at a time converted to f32 rows of dp.
template <class E, bool kStaged>
struct Rows {
  const E* base = nullptr;
  int64_t stride = 0;  // elements between rows
  const TensorView* view = nullptr;
  int64_t head = 0;

  Rows(const TensorView& t, int64_t h) : view(&t), head(h) {
    if constexpr (!kStaged) {
      base = static_cast<const E*>(t.ptr(h, 0));
      stride = t.stride_seq;
    }
  }
  // Rows j0 .. j0 + n of this head, as (pointer, stride).
  const E* block(int64_t j0, int64_t n, int64_t d, int64_t dp, float* stage,
                 int64_t& out_stride) const {
    if constexpr (kStaged) {
      for (int64_t j = 0; j < n; ++j) LoadRowF32(*view, head, j0 + j, d, stage + j * dp);
      out_stride = dp;
      return stage;
    } else {
      out_stride = stride;
      return base + j0 * stride;
    }
  }
};

// Scores of one block for rows [0, n), in quads, then a pair, then single rows; the first
// group prefetches (see ScoreRows).
template <class E, bool kDot>
void ScoreBlock(const Scratch& sc, const Plan& pl, int64_t n, const E* k, int64_t ks, int64_t nv,
                int64_t d, float* s, bool prefetch) {
  int64_t r = 0;
#if HWY_TARGET == HWY_AVX3
  if constexpr (kDot) {
    const uint16_t* kb = reinterpret_cast<const uint16_t*>(k);
    for (; r + 4 <= n; r += 4, prefetch = false)
      ScoreRowsBf16<4>(sc.qb + r * pl.dq, pl.dq, kb, ks, nv, d, s + r * kTileKeys, prefetch);
    if (r + 2 <= n) {
      ScoreRowsBf16<2>(sc.qb + r * pl.dq, pl.dq, kb, ks, nv, d, s + r * kTileKeys, prefetch);
      r += 2;
      prefetch = false;
    }
    if (r < n)
      ScoreRowsBf16<1>(sc.qb + r * pl.dq, pl.dq, kb, ks, nv, d, s + r * kTileKeys, prefetch);
    return;
  }
#endif
  // A group of RQ rows takes kLanes / RQ keys at a time, so RQ <= kLanes.
  if constexpr (kLanes >= 4)
    for (; r + 4 <= n; r += 4, prefetch = false)
      ScoreRows<4>(sc.q + r * pl.dp, pl.dp, k, ks, nv, d, s + r * kTileKeys, prefetch);
  if constexpr (kLanes >= 2)
    if (r + 2 <= n) {
      ScoreRows<2>(sc.q + r * pl.dp, pl.dp, k, ks, nv, d, s + r * kTileKeys, prefetch);
      r += 2;
      prefetch = false;
    }
  for (; r < n; ++r, prefetch = false)
    ScoreRows<1>(sc.q + r * pl.dp, pl.dp, k, ks, nv, d, s + r * kTileKeys, prefetch);
}

template <class E>
void PVBlock(const float* p, int64_t n, const E* v, int64_t vs, int64_t nk, int64_t d, float* o,
             int64_t dp) {
  int64_t r = 0;
  for (; r + 4 <= n; r += 4) PVRows<4>(p + r * kTileKeys, nk, v, vs, d, o + r * dp, dp);
  if (r + 2 <= n) {
    PVRows<2>(p + r * kTileKeys, nk, v, vs, d, o + r * dp, dp);
    r += 2;
  }
  if (r < n) PVRows<1>(p + r * kTileKeys, nk, v, vs, d, o + r * dp, dp);
}

// BLASST's decode skip rule is the prefill rule (blasst_skips in flash_common.hpp) per block b
// of a batch, except that m' is the running max after the whole batch (including b itself and
// the blocks after it), not the max before b: the batch's scores are known before any V block
// of it is loaded. The block holding a row's new max has margin 0 >= log2(lambda), so it is
// never skipped and skipping never changes m'.

// Loads rows [r0, r0 + n) of kv head kvh's group into sc (q and positions): row rho is query
// row rho % q_len of q head kvh * group + rho / q_len. Returns the key limit below which
// every row sees every key.
template <bool kDot>
int64_t LoadRows(const Problem& p, const Plan& pl, int64_t kvh, int64_t r0, int64_t n,
                 Scratch& sc) {
  const int64_t d = p.dim, dp = pl.dp;
  int64_t min_limit = p.kv_len;  // keys below this are visible to every row of the chunk
  for (int64_t r = 0; r < n; ++r) {
    const int64_t rho = r0 + r, h = kvh * p.group + rho / p.q_len, i = rho % p.q_len;
    sc.pos[r] = p.pos_offset + i;
    if (p.causal) min_limit = std::min(min_limit, sc.pos[r] + 1);
    if constexpr (kDot) {
      uint16_t* dst = sc.qb + r * pl.dq;
      for (int64_t c = 0; c < d; ++c) dst[c] = f32_to_bf16(p.q.get(h, i, c));  // exact: q is bf16
      std::fill(dst + d, dst + pl.dq, uint16_t(0));
    } else {
      LoadRowF32(p.q, h, i, d, sc.q + r * dp);
      std::fill(sc.q + r * dp + d, sc.q + (r + 1) * dp, 0.0f);
    }
  }
  return min_limit;
}

// local_first's seed for one unit (kv head, row chunk): the rows' maxima (log2 units) over
// the two blocks local-first visits first (blasst_anchors: the newest block and the sink),
// into pl.seed. Their scores are computed once more by the splits that hold them.
template <class E, bool kStaged, bool kDot>
void SeedUnit(const Problem& p, Plan& pl, int64_t unit, Scratch& sc) {
  const int64_t chunk = unit % pl.chunks, kvh = unit / pl.chunks;
  const int64_t r0 = chunk * pl.chunk_rows, n = std::min(pl.chunk_rows, pl.rows - r0);
  LoadRows<kDot>(p, pl, kvh, r0, n, sc);
  sc.visits.clear();
  for (int64_t jt = 0; jt < pl.tiles; ++jt)
    sc.visits.push_back(natural_visit(jt, 0, p.kv_len, p.kv_len));
  const BlasstAnchors a = blasst_anchors(sc.visits, blasst_row_position(p, p.q_len - 1));
  float* seed = pl.seed.data() + unit * pl.chunk_rows;
  std::fill(seed, seed + n, kNegInf);
  const Rows<E, kStaged> K(p.k, kvh);
  for (int64_t jt : {a.diagonal, a.sink}) {
    if (jt < 0 || (jt == a.sink && a.sink == a.diagonal)) continue;
    const int64_t j0 = jt * kTileKeys, nv = std::min(kTileKeys, p.kv_len - j0);
    int64_t ks;
    const E* kb = K.block(j0, nv, p.dim, pl.dp, sc.stage, ks);
    ScoreBlock<E, kDot>(sc, pl, n, kb, ks, nv, p.dim, sc.s, /*prefetch=*/!kStaged);
    MaskTile(sc.s, n, sc.pos, p.causal, j0, 0, p.kv_len);
    RowMax(sc.s, n, pl.c, sc.bmax);
    for (int64_t r = 0; r < n; ++r) seed[r] = std::max(seed[r], sc.bmax[r]);
  }
}

// One work item: kv head kvh, rows [r0, r0 + n) of its group, key blocks [t0, t1).
template <class E, bool kStaged, bool kDot>
void RunItem(const Problem& p, Plan& pl, int64_t item, Scratch& sc, Stats& st) {
  const int64_t split = item % pl.splits, unit = item / pl.splits;
  const int64_t chunk = unit % pl.chunks, kvh = unit / pl.chunks;
  const int64_t r0 = chunk * pl.chunk_rows, n = std::min(pl.chunk_rows, pl.rows - r0);
  const int64_t d = p.dim, dp = pl.dp;

  const int64_t min_limit = LoadRows<kDot>(p, pl, kvh, r0, n, sc);
  std::fill(sc.o, sc.o + n * dp, 0.0f);
  std::fill(sc.l, sc.l + n, 0.0f);
  if (pl.local_first)
    std::copy_n(pl.seed.data() + unit * pl.chunk_rows, n, sc.m);
  else
    std::fill(sc.m, sc.m + n, kNegInf);

  const Rows<E, kStaged> K(p.k, kvh), V(p.v, kvh);
  const int64_t t0 = split * pl.split_tiles, t1 = std::min(pl.tiles, t0 + pl.split_tiles);
  // The split's blocks in visiting order; splits hold whole blocks, so a visit's tile is the
  // global block index (key / 64).
  sc.visits.clear();
  for (int64_t jt = t0; jt < t1; ++jt)
    sc.visits.push_back(natural_visit(jt, 0, p.kv_len, p.kv_len));
  if (pl.local_first) blasst_local_first(sc.visits, blasst_row_position(p, p.q_len - 1));
  const int64_t nvis = int64_t(sc.visits.size());
  ItemSkips* rec = pl.skips.empty() ? nullptr : &pl.skips[size_t(item)];
  std::vector<int32_t>* rec_blocks = rec && pl.record_tiles ? &rec->blocks : nullptr;
  if (rec_blocks) rec_blocks->reserve(size_t(t1 - t0));
  const int64_t skipped_before = st.tiles_skipped;
  for (int64_t i0 = 0; i0 < nvis; i0 += pl.batch) {
    const int64_t nb = std::min(pl.batch, nvis - i0);
    const TileVisit* batch = sc.visits.data() + i0;
    // 1. Scores of the whole batch, back to back.
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t j0 = batch[b].tile * kTileKeys, nv = std::min(kTileKeys, p.kv_len - j0);
      float* s = sc.s + b * n * kTileKeys;
      int64_t ks;
      const E* kb = K.block(j0, nv, d, dp, sc.stage, ks);
      ScoreBlock<E, kDot>(sc, pl, n, kb, ks, nv, d, s, /*prefetch=*/!kStaged);
      // Only the blocks at the end hold keys some row may not see (bottom-right causal) or
      // keys past the cache.
      sc.kept[b] = j0 + kTileKeys <= min_limit ? n * kTileKeys
                                               : MaskTile(s, n, sc.pos, p.causal, j0, 0, p.kv_len);
      RowMax(s, n, pl.c, sc.bmax + b * n);
    }
    // 2. The running max over the batch; O and l rescaled once.
    for (int64_t r = 0; r < n; ++r) {
      float mx = sc.m[r];
      for (int64_t b = 0; b < nb; ++b) mx = std::max(mx, sc.bmax[b * n + r]);
      sc.m_use[r] = mx == kNegInf ? 0.0f : mx;
      sc.alpha[r] = std::exp2(sc.m[r] - sc.m_use[r]);
      sc.l[r] *= sc.alpha[r];
      sc.m[r] = mx;
    }
    ScaleRows(sc.o, n, dp, sc.alpha);
    // 3. Exponentials and P.V of the blocks that are kept; only these read V.
    for (int64_t b = 0; b < nb; ++b) {
      ++st.tiles_visited;
      if (pl.may_skip && blasst_skips(sc.bmax + b * n, sc.m, n, pl.log2_lambda)) {
        ++st.tiles_skipped;
        if (rec_blocks) rec_blocks->push_back(int32_t(batch[b].tile));
        continue;
      }
      const int64_t j0 = batch[b].tile * kTileKeys, nv = std::min(kTileKeys, p.kv_len - j0);
      float* s = sc.s + b * n * kTileKeys;
      ExpRows(s, n, pl.c, sc.m_use, sc.l);
      int64_t vs;
      const E* vb = V.block(j0, nv, d, dp, sc.stage, vs);
      PVBlock(s, n, vb, vs, nv, d, sc.o, dp);
      st.score_entries += sc.kept[b];
    }
  }

  if (rec) {
    rec->visited = t1 - t0;
    rec->skipped = st.tiles_skipped - skipped_before;
    if (rec_blocks && pl.local_first) std::sort(rec_blocks->begin(), rec_blocks->end());
  }

  // The split's partial result: O / l and its natural-log LSE.
  for (int64_t r = 0; r < n; ++r) {
    const int64_t idx = pl.part_index(kvh, r0 + r, split);
    const float inv = sc.l[r] > 0 ? 1.0f / sc.l[r] : 0.0f;
    float* dst = pl.part_o.data() + idx * dp;
    const float* src = sc.o + r * dp;
    for (int64_t c = 0; c < d; ++c)
      dst[c] = (kPermutedO<E> && !kStaged ? UnpermutedAt(src, c) : src[c]) * inv;
    pl.part_lse[size_t(idx)] = sc.l[r] > 0 ? (sc.m[r] + std::log2(sc.l[r])) * kLn2 : kNegInf;
  }
}

// Splits of the key axis (decode_splits, flash_common.hpp: the GPU's too): as few as give
// splits of at most 32 blocks (2048 keys), evenly sized. The plan depends on kv_len only, not
// on the thread count, so results (BLASST's skip decisions included: each split starts its own
// running max) are the same for any number of threads. At 2048 keys a split reads 0.5-1 MiB of
// K per kv head at d = 128, far more than the per-item setup and the merge cost; a 32K cache
// gives 16 items per kv head, plenty for two threads (and the items all cost the same).
inline void PlanSplits(Plan& pl) {
  const DecodeSplits d = decode_splits(pl.tiles);
  pl.splits = d.splits;
  pl.split_tiles = d.split_tiles;
}

// Joins the items' records per q head: q head h is in chunk (h % group) / chunk_heads of kv
// head h / group; its splits are appended in order, so block lists stay ascending.
inline void CollectSkips(const Problem& p, const Plan& pl, SkipStats& skip) {
  for (int64_t h = 0; h < p.q.heads; ++h) {
    const int64_t kvh = h / p.group, chunk = h % p.group / pl.chunk_heads;
    const int64_t item0 = (kvh * pl.chunks + chunk) * pl.splits;
    for (int64_t sp = 0; sp < pl.splits; ++sp) {
      const ItemSkips& it = pl.skips[size_t(item0 + sp)];
      skip.visited[size_t(h)] += it.visited;
      skip.skipped[size_t(h)] += it.skipped;
      if (skip.record_tiles)
        skip.skipped_tiles[size_t(h)].insert(skip.skipped_tiles[size_t(h)].end(), it.blocks.begin(),
                                             it.blocks.end());
    }
  }
}

template <class E, bool kStaged, bool kDot>
void RunDecodeAs(const Problem& p, Plan& pl, Stats* stats, SkipStats* skip) {
  const int64_t items = p.k.heads * pl.chunks * pl.splits;
  const int threads = int(std::min<int64_t>(p.threads, items));
  std::vector<std::unique_ptr<Scratch>> scratch;
  for (int i = 0; i < threads; ++i) scratch.push_back(std::make_unique<Scratch>(pl));
  std::vector<Stats> part{size_t(threads)};
  if (pl.local_first) {
    // On this thread: two blocks per unit against a split's 32, and starting threads for them
    // (parallel_for starts its own each call) cost more than it saves at decode's sizes.
    const int64_t units = p.k.heads * pl.chunks;
    pl.seed.assign(size_t(units * pl.chunk_rows), kNegInf);
    for (int64_t unit = 0; unit < units; ++unit)
      SeedUnit<E, kStaged, kDot>(p, pl, unit, *scratch[0]);
  }
  parallel_for(items, threads, [&](int64_t item, int tid) {
    RunItem<E, kStaged, kDot>(p, pl, item, *scratch[size_t(tid)], part[size_t(tid)]);
  });
  if (skip) CollectSkips(p, pl, *skip);

  // Exact merge of the splits of every row, always in split order.
  std::vector<float> o(size_t(pl.dp));
  for (int64_t kvh = 0; kvh < p.k.heads; ++kvh)
    for (int64_t rho = 0; rho < pl.rows; ++rho) {
      const int64_t h = kvh * p.group + rho / p.q_len, i = rho % p.q_len;
      const int64_t idx0 = pl.part_index(kvh, rho, 0);
      std::copy_n(pl.part_o.data() + idx0 * pl.dp, p.dim, o.data());
      float lse = pl.part_lse[size_t(idx0)];
      for (int64_t sp = 1; sp < pl.splits; ++sp)
        merge_row(o.data(), lse, pl.part_o.data() + (idx0 + sp) * pl.dp,
                  pl.part_lse[size_t(idx0 + sp)], p.dim);
      store_row(p.out, h, i, o.data(), p.dim, 1.0f);
      if (p.lse) p.lse[h * p.q_len + i] = lse;
    }

  add_kernel_stats(p, part, stats);
}

// log2_lambda from blasst_log2_threshold, batch in [1, kMaxBatch]. skip: null, or laid out by
// attention_decode (Hq heads, one query tile, zero counts).
inline void RunDecode(const Problem& p, float log2_lambda, int64_t batch, BlasstOrder order,
                      Stats* stats, SkipStats* skip) {
  Plan pl;
  pl.rows = p.group * p.q_len;
  // Chunks of whole q heads (at most kMaxRows / q_len >= 8 heads each), evenly sized: a skip
  // decision then covers all rows of each q head it concerns, which is what lets SkipStats
  // record it per q head exactly. Splitting by rows could cut a head in two chunks that decide
  // differently (e.g. group 9 x q_len 15).
  const DecodeChunks c = decode_chunks(p.group, p.q_len, kMaxRows);
  pl.chunks = c.chunks;
  pl.chunk_heads = c.chunk_heads;
  pl.chunk_rows = pl.chunk_heads * p.q_len;
  pl.tiles = (p.kv_len + kTileKeys - 1) / kTileKeys;
  pl.batch = batch;
  pl.may_skip = log2_lambda != kNegInf;
  pl.log2_lambda = log2_lambda;
  // Nothing is skipped at lambda 0: in order, as dense decode.
  pl.local_first = pl.may_skip && order == BlasstOrder::local_first;
  pl.dp = RoundUp(p.dim, 2 * int64_t(kLanes));  // whole pairs of vectors (PVStrip)
  pl.dq = RoundUp(p.dim, 32);
  pl.c = p.scale * kLog2e;
  PlanSplits(pl);
  pl.part_o.assign(size_t(p.k.heads * pl.rows * pl.splits * pl.dp), 0.0f);
  pl.part_lse.assign(size_t(p.k.heads * pl.rows * pl.splits), kNegInf);
  if (skip) {
    pl.skips.resize(size_t(p.k.heads * pl.chunks * pl.splits));
    pl.record_tiles = skip->record_tiles;
  }

  if (p.k.stride_dim != 1 || p.v.stride_dim != 1) {
    RunDecodeAs<float, true, false>(p, pl, stats, skip);
    return;
  }
  switch (p.k.dtype) {
    case DType::f32: RunDecodeAs<float, false, false>(p, pl, stats, skip); return;
    case DType::f16: RunDecodeAs<hwy::float16_t, false, false>(p, pl, stats, skip); return;
    case DType::bf16:
#if HWY_TARGET == HWY_AVX3
      if (p.bf16_dot && bf16_dot_supported()) {
        RunDecodeAs<hwy::bfloat16_t, false, true>(p, pl, stats, skip);
        return;
      }
#endif
      RunDecodeAs<hwy::bfloat16_t, false, false>(p, pl, stats, skip);
      return;
  }
}

}  // namespace decode
}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
