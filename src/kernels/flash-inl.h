// The flash attention loop, compiled once per SIMD target (hwy/foreach_target.h).
//
// One work item is (q head h, query tile t). For each key tile the policy lets through:
//   S   = Q_t K_j^T                       (Scores; unscaled f32)
//   x   = S * scale * log2(e)             (base-2 softmax: exp2 is cheaper than exp)
//   m'  = max(m, rowmax x)                (running max, per row)
//   P   = 2^(x - m'),  alpha = 2^(m - m')
//   l   = alpha l + rowsum P,  O = alpha O + P V_j
// and at the end O /= l, LSE = (m + log2 l) ln 2. Storage of K and V is packed once per call
// into tile-major layouts the micro-kernels stream (K transposed so scores vectorize along
// keys; V row-major so P.V vectorizes along the head dim).
//
// Two operand formats: F32Ops (every target; bf16/f16 inputs are widened while packing) and,
// on AVX-512 CPUs with AVX512_BF16, Bf16DotOps, which keep bf16 operands and use vdpbf16ps
// (two products per lane per instruction) for both S and P.V.

#if defined(SPATTN_KERNELS_FLASH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPATTN_KERNELS_FLASH_INL_H_
#undef SPATTN_KERNELS_FLASH_INL_H_
#else
#define SPATTN_KERNELS_FLASH_INL_H_
#endif

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <type_traits>
#include <vector>

#include "core/threading.hpp"
#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/flash_common.hpp"
#include "kernels/packed_kv.hpp"
#include "spattn/error.hpp"
#if HWY_TARGET == HWY_AVX3
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Register blocking of the micro-kernels: kR rows x kCV vectors of accumulators.
// Rows are padded to kR; the f32 micro-kernels take kRWide rows at a time while they can (6 x 4
// = 24 of the 32 AVX-512 registers: fewer K and V loads per FMA than 4 x 4), then kR.
#if HWY_TARGET == HWY_AVX3
inline constexpr int kR = 4, kCV = 4, kRWide = 6;
#else
inline constexpr int kR = 4, kCV = 2, kRWide = 4;
#endif
// Rows [0, WideRows(npad)) go in kRWide strips and the rest in kR strips: a multiple of both,
// so no strip reaches past npad (a multiple of kR).
inline int64_t WideRows(int64_t npad) {
  constexpr int64_t l = std::lcm(kR, kRWide);
  return npad / l * l;
}

// 2^x, Cephes exp2f polynomial on [-0.5, 0.5] (max relative error ~2e-7 over the range);
// exactly 0 for x < -126 (and -inf), so masked scores add nothing.
HWY_INLINE VF Exp2(DF df, VF x) {
  const hn::RebindToSigned<DF> di;
  const VF xc = hn::Max(x, hn::Set(df, -126.0f));
  const VF n = hn::Round(xc);
  const VF f = hn::Sub(xc, n);
  VF p = hn::Set(df, 1.535336188319500e-4f);
  p = hn::MulAdd(p, f, hn::Set(df, 1.339887440266574e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 9.618437357674640e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 5.550332471162809e-2f));
  p = hn::MulAdd(p, f, hn::Set(df, 2.402264791363012e-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 6.931472028550421e-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 1.0f));
  const auto bits = hn::ShiftLeft<23>(hn::ConvertTo(di, n));
  const VF r = hn::BitCast(df, hn::Add(hn::BitCast(di, p), bits));
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(df, -126.0f)), r);
}

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// ---------------------------------------------------------------------------------------
// Element access for packing (packing is O(L d); the loop is O(L^2 d)).
inline void LoadRowF32(const TensorView& t, int64_t h, int64_t s, int64_t d, float* dst) {
  if (t.stride_dim == 1) {
    const void* src = t.ptr(h, s);
    switch (t.dtype) {
      case DType::f32: std::memcpy(dst, src, size_t(d) * 4); return;
      case DType::bf16: {
        const uint16_t* p = static_cast<const uint16_t*>(src);
        for (int64_t c = 0; c < d; ++c) dst[c] = bf16_to_f32(p[c]);
        return;
      }
      case DType::f16: {
        const hn::Rebind<hwy::float16_t, DF> dh;
        const hwy::float16_t* p = static_cast<const hwy::float16_t*>(src);
        const DF df;
        const int64_t N = int64_t(hn::Lanes(df));
        int64_t c = 0;
        for (; c + N <= d; c += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, p + c)), df, dst + c);
        for (; c < d; ++c) dst[c] = f16_to_f32(static_cast<const uint16_t*>(src)[c]);
        return;
      }
    }
  }
  for (int64_t c = 0; c < d; ++c) dst[c] = t.get(h, s, c);
}

// Copies n (< a few vectors) 32-bit words: one row of a K tile's slots, for the many short
// copies of gathering (a memcpy call per row cost more than the copy).
template <typename W>
HWY_INLINE void CopyWords(const W* HWY_RESTRICT src, W* HWY_RESTRICT dst, int64_t n) {
  static_assert(sizeof(W) == 4);
  const hn::ScalableTag<W> dw;
  const int64_t N = int64_t(hn::Lanes(dw));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::LoadU(dw, src + i), dw, dst + i);
  if (i < n) {
    const auto m = hn::FirstN(dw, size_t(n - i));
    hn::BlendedStore(hn::MaskedLoad(m, dw, src + i), m, dw, dst + i);
  }
}

// Prefetches `rows` rows of `bytes` bytes each, `stride` bytes apart, from p: the slots of
// keys a gathered tile will copy next (their rows are scattered, so the hardware prefetcher
// does not see them coming).
inline void PrefetchRows(const void* p, int64_t rows, int64_t stride, int64_t bytes) {
  const char* b = static_cast<const char*>(p);
  for (int64_t r = 0; r < rows; ++r, b += stride) {
    for (int64_t o = 0; o < bytes; o += 64) hwy::Prefetch(b + o);
    hwy::Prefetch(b + bytes - 1);
  }
}

// Prefetches [p, p + bytes) into the L2 (prefetcht1, not the L1: a tile is 16 KiB stored as f16
// and is widened into scratch that the L1 has to hold). For the next tiles of a contiguous
// range of a cache stored as f16 / bf16 / q8_0: decode over such a cache is bound by memory,
// and the loop reads each tile in one burst (its widening) between bursts of arithmetic, which
// the hardware prefetcher does not cover (RunTile's plain range loop calls it).
inline void PrefetchL2(const void* p, int64_t bytes) {
  const char* b = static_cast<const char*>(p);
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(b + o, 0, 2);
}

#if HWY_TARGET == HWY_AVX3
// A shifted tile on AVX-512 (F32Ops / Bf16DotOps::ScoresShifted): row k's slots are the 64
// words from word sj of row k of the tile at kt, then of the tile after it (rows x 64 words
// on). w gets the five aligned 16-word vectors of row 0 they lie in; ShiftIndex(sj) picks
// vector c's lanes out of w[c] and w[c + 1] with one two-source permute. Aligned loads and a
// permute ran the f32 score kernel faster than unaligned loads (most of which cross a cache
// line).
template <typename W>
inline void ShiftedVectors(const W* kt, int64_t rows, int64_t sj, const W** w) {
  for (int64_t i = 0; i < 5; ++i) {
    const int64_t v = sj / 16 + i;
    w[i] = v < 4 ? kt + v * 16 : kt + rows * kTileKeys + (v - 4) * 16;
  }
}
inline __m512i ShiftIndex(int64_t sj) {
  return _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                          _mm512_set1_epi32(int(sj % 16)));
}
#endif

// ---------------------------------------------------------------------------------------
// F32Ops: f32 operands. Q tile [rows][d]; K tile transposed [d][64]; V tile [64][dp].
struct F32Ops {
  using T = float;
  // V tiles hold keys in pairs (a gathered copy keeps a key's parity to copy whole pairs).
  static constexpr bool kKeyPairs = false;
  static int64_t q_stride(int64_t d) { return d; }
  static int64_t k_tile_elems(int64_t d) { return d * kTileKeys; }
  static int64_t v_tile_elems(int64_t dp) { return kTileKeys * dp; }

  static void PackQ(const TensorView& q, int64_t h, const int64_t* rows, int64_t n, int64_t npad,
                    int64_t d, T* dst) {
    for (int64_t r = 0; r < n; ++r) LoadRowF32(q, h, rows[r], d, dst + r * d);
    std::fill(dst + n * d, dst + npad * d, 0.0f);
  }
  // Slot jj of a K tile and of a V tile (its padding [d, dp) zeroed) from row s of k / v.
  // Other slots are left as they are (zero in a fresh tile).
  static void PackKeyK(const TensorView& k, int64_t h, int64_t s, int64_t jj, int64_t d, T* tile,
                       float* row_buf) {
    LoadRowF32(k, h, s, d, row_buf);
    for (int64_t c = 0; c < d; ++c) tile[c * kTileKeys + jj] = row_buf[c];
  }
  static void PackKeyV(const TensorView& v, int64_t h, int64_t s, int64_t jj, int64_t d,
                       int64_t dp, T* tile, float*) {
    LoadRowF32(v, h, s, d, tile + jj * dp);
    std::fill(tile + jj * dp + d, tile + (jj + 1) * dp, 0.0f);
  }
  // Copies slot sj of packed tiles into slot dj of others (gathering packed keys).
  static void CopyKeyK(const T* src, int64_t sj, T* dst, int64_t dj, int64_t d) {
    for (int64_t c = 0; c < d; ++c) dst[c * kTileKeys + dj] = src[c * kTileKeys + sj];
  }
  static void CopyKeyV(const T* src, int64_t sj, T* dst, int64_t dj, int64_t dp) {
    std::memcpy(dst + dj * dp, src + sj * dp, size_t(dp) * sizeof(T));
  }
  // Copies n consecutive slots sj.. of packed tiles into slots dj.. of others (a key range
  // shifted off the 64-key grid): row copies, not per-key scatters.
  static void CopyKeysK(const T* src, int64_t sj, T* dst, int64_t dj, int64_t n, int64_t d) {
    for (int64_t c = 0; c < d; ++c) CopyWords(src + c * kTileKeys + sj, dst + c * kTileKeys + dj, n);
  }
  static void CopyKeysV(const T* src, int64_t sj, T* dst, int64_t dj, int64_t n, int64_t dp) {
    std::memcpy(dst + dj * dp, src + sj * dp, size_t(n * dp) * sizeof(T));
  }
  // Prefetches slots [sj, sj + n) of a K tile and a V tile.
  static void PrefetchKeys(const T* kt, const T* vt, int64_t sj, int64_t n, int64_t d, int64_t dp) {
    PrefetchRows(kt + sj, d, kTileKeys * 4, n * 4);
    PrefetchRows(vt + sj * dp, 1, 0, n * dp * 4);
  }
  // Zeroes slots [from, 64) of a K tile and a V tile (a partly filled gathered tile: its
  // scores there are masked, and P = 0 times a zero V adds nothing).
  static void ZeroKeys(T* kt, T* vt, int64_t from, int64_t d, int64_t dp) {
    for (int64_t c = 0; c < d; ++c) std::fill(kt + c * kTileKeys + from, kt + (c + 1) * kTileKeys, 0.0f);
    std::fill(vt + from * dp, vt + kTileKeys * dp, 0.0f);
  }

  // R rows x CV vectors of accumulators, the K vector of dim k at key column col from
  // kvec(k, col); every entry is one dot product summed over k in order, so neither the
  // blocking nor where the K vectors come from (a tile, or a 16-bit cache read in place:
  // group_tiles-inl.h) changes a bit.
  template <int R, int CV, class KVec>
  static HWY_INLINE void ScoreStripOf(const T* HWY_RESTRICT q, int64_t d, const KVec& kvec,
                                      int64_t col0, float* HWY_RESTRICT s) {
    const DF df;
    const int64_t N = int64_t(hn::Lanes(df));
    VF acc[R][CV];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < CV; ++c) acc[r][c] = hn::Zero(df);
    for (int64_t k = 0; k < d; ++k) {
      VF b[CV];
      for (int c = 0; c < CV; ++c) b[c] = kvec(k, col0 + c * N);
      for (int r = 0; r < R; ++r) {
        const VF a = hn::Set(df, q[r * d + k]);
        for (int c = 0; c < CV; ++c) acc[r][c] = hn::MulAdd(a, b[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < CV; ++c) hn::Store(acc[r][c], df, s + r * kTileKeys + col0 + c * N);
  }

  // S[npad][64] = Q K^T (unscaled) over the K vectors kvec gives (ScoreStripOf).
  template <class KVec>
  static HWY_INLINE void ScoresOf(const T* q, int64_t npad, int64_t d, const KVec& kvec,
                                  float* s) {
    const int64_t N = int64_t(hn::Lanes(DF()));
    constexpr int64_t kChunk = kCV;
    static_assert(kTileKeys % 16 == 0);
    for (int64_t col0 = 0; col0 < kTileKeys; col0 += kChunk * N) {
      const int64_t vecs = std::min<int64_t>(kChunk, (kTileKeys - col0) / N);
      int64_t r0 = 0;
      if (vecs == kCV)
        for (; r0 < WideRows(npad); r0 += kRWide)
          ScoreStripOf<kRWide, kCV>(q + r0 * d, d, kvec, col0, s + r0 * kTileKeys);
      for (; r0 < npad; r0 += kR) {
        if (vecs == kCV) ScoreStripOf<kR, kCV>(q + r0 * d, d, kvec, col0, s + r0 * kTileKeys);
        else ScoreStripOf<kR, 1>(q + r0 * d, d, kvec, col0, s + r0 * kTileKeys);
      }
    }
  }
  // S[npad][64] = Q K^T (unscaled) over K tile kt. Not inlined (nor PV): inlined into the
  // loop, GCC 12 ran out of registers there and kept a PV accumulator in memory, a
  // store-to-load chain that cost the f32 loop a fifth of its speed.
  static HWY_NOINLINE void Scores(const T* q, int64_t npad, const T* kt, int64_t d, float* s) {
    const DF df;
    ScoresOf(
        q, npad, d,
        [&](int64_t k, int64_t col) { return hn::Load(df, kt + k * kTileKeys + col); }, s);
  }

  // A shifted tile: packed keys sj, sj + 1, ... of tile kt and, past its end, of the tile after
  // it (a head's K tiles lie back to back, kt + d x 64 words on), as slots 0..63. Below
  // AVX-512 (and there when no vector straddles the boundary), vectors of slots come from one
  // row of either tile (unaligned loads), except the one the tile boundary
  // cuts, whose lanes `lo` come from kt and the rest from the next tile: it goes last in its
  // strip (kBlendLast), so only one vector per strip pays a second load. Every entry is the
  // same dot product, summed in the same order, as in the keys' own tiles.
  template <int R, int CV, bool kBlendLast>
  static HWY_INLINE void ScoreStripShifted(const T* HWY_RESTRICT q, int64_t d,
                                           const T* const* src, const T* hi,
                                           hn::Mask<DF> lo, const int64_t* col,
                                           float* HWY_RESTRICT s) {
    const DF df;
    VF acc[R][CV];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < CV; ++c) acc[r][c] = hn::Zero(df);
    for (int64_t k = 0; k < d; ++k) {
      VF b[CV];
      for (int c = 0; c < CV; ++c) b[c] = hn::LoadU(df, src[c] + k * kTileKeys);
      if constexpr (kBlendLast)
        b[CV - 1] = hn::IfThenElse(lo, b[CV - 1], hn::LoadU(df, hi + k * kTileKeys));
      for (int r = 0; r < R; ++r) {
        const VF a = hn::Set(df, q[r * d + k]);
        for (int c = 0; c < CV; ++c) acc[r][c] = hn::MulAdd(a, b[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < CV; ++c) hn::Store(acc[r][c], df, s + r * kTileKeys + col[c]);
  }

#if HWY_TARGET == HWY_AVX3
  // AVX-512: the shifted row's vectors through ShiftedVectors / ShiftIndex (aligned loads and
  // a permute), where the tile boundary cuts a vector (sj not a multiple of 16).
  template <int R>
  static HWY_INLINE void ScoreStripPerm(const T* HWY_RESTRICT q, int64_t d, const T* const* w,
                                        __m512i idx, float* HWY_RESTRICT s) {
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
    for (int64_t k = 0; k < d; ++k) {
      __m512 b[4];
      __m512 x = _mm512_load_ps(w[0] + k * kTileKeys);
      for (int c = 0; c < 4; ++c) {
        const __m512 y = _mm512_load_ps(w[c + 1] + k * kTileKeys);
        b[c] = _mm512_permutex2var_ps(x, idx, y);
        x = y;
      }
      for (int r = 0; r < R; ++r) {
        const __m512 a = _mm512_set1_ps(q[r * d + k]);
        for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_fmadd_ps(a, b[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) _mm512_store_ps(s + r * kTileKeys + c * 16, acc[r][c]);
  }
#endif
  // S[npad][64] = Q K^T over the shifted tile at slot sj (0 < sj < 64) of kt.
  static HWY_NOINLINE void ScoresShifted(const T* q, int64_t npad, const T* kt, int64_t sj,
                                         int64_t d, float* s) {
#if HWY_TARGET == HWY_AVX3
    if (sj % 16 != 0) {
      const T* w[5];
      ShiftedVectors(kt, d, sj, w);
      const __m512i idx = ShiftIndex(sj);
      int64_t r0 = 0;
      for (; r0 < WideRows(npad); r0 += kRWide)
        ScoreStripPerm<kRWide>(q + r0 * d, d, w, idx, s + r0 * kTileKeys);
      for (; r0 < npad; r0 += kR) ScoreStripPerm<kR>(q + r0 * d, d, w, idx, s + r0 * kTileKeys);
      return;
    }
#endif
    const DF df;
    const int64_t N = int64_t(hn::Lanes(df)), vecs = kTileKeys / N;
    static_assert(kTileKeys / int64_t(hn::MaxLanes(DF())) % kCV == 0);
    const T* next = kt + d * kTileKeys;
    const T* src[kTileKeys];
    int64_t col[kTileKeys];
    int64_t nv = 0, cut = -1;
    for (int64_t v = 0; v < vecs; ++v) {
      const int64_t o = sj + v * N;
      if (o + N <= kTileKeys) src[nv] = kt + o, col[nv++] = v * N;
      else if (o >= kTileKeys) src[nv] = next + (o - kTileKeys), col[nv++] = v * N;
      else cut = v;
    }
    const T* hi = nullptr;
    auto lo = hn::FirstN(df, 0);
    if (cut >= 0) {
      const int64_t o = sj + cut * N;
      src[nv] = kt + o, col[nv++] = cut * N;
      hi = next + (o - kTileKeys);  // lanes [kTileKeys - o, N): the next tile's first keys
      lo = hn::FirstN(df, size_t(kTileKeys - o));
    }
    for (int64_t g = 0; g < nv; g += kCV) {
      const bool blend = cut >= 0 && g + kCV >= nv;
      int64_t r0 = 0;
      for (; r0 < WideRows(npad); r0 += kRWide) {
        if (blend) ScoreStripShifted<kRWide, kCV, true>(q + r0 * d, d, src + g, hi, lo, col + g, s + r0 * kTileKeys);
        else ScoreStripShifted<kRWide, kCV, false>(q + r0 * d, d, src + g, hi, lo, col + g, s + r0 * kTileKeys);
      }
      for (; r0 < npad; r0 += kR) {
        if (blend) ScoreStripShifted<kR, kCV, true>(q + r0 * d, d, src + g, hi, lo, col + g, s + r0 * kTileKeys);
        else ScoreStripShifted<kR, kCV, false>(q + r0 * d, d, src + g, hi, lo, col + g, s + r0 * kTileKeys);
      }
    }
  }
  // The V rows of a shifted tile: V tiles also lie back to back, so they are one stretch.
  static const T* ShiftedV(const T* vt, int64_t sj, int64_t dp) { return vt + sj * dp; }

  // O's R rows x CV vectors from column c0 on, alpha O + P V, the V vector of key j at column
  // col from vvec(j, col): each entry summed over the keys in order, wherever V comes from.
  template <int R, int CV, class VVec>
  static HWY_INLINE void PVStripOf(const float* HWY_RESTRICT p, const VVec& vvec, int64_t dp,
                                   int64_t c0, const float* alpha, float* HWY_RESTRICT o) {
    const DF df;
    const int64_t N = int64_t(hn::Lanes(df));
    VF acc[R][CV];
    for (int r = 0; r < R; ++r) {
      const VF al = hn::Set(df, alpha[r]);
      for (int c = 0; c < CV; ++c) acc[r][c] = hn::Mul(al, hn::Load(df, o + r * dp + c0 + c * N));
    }
    for (int64_t j = 0; j < kTileKeys; ++j) {
      VF b[CV];
      for (int c = 0; c < CV; ++c) b[c] = vvec(j, c0 + c * N);
      for (int r = 0; r < R; ++r) {
        const VF a = hn::Set(df, p[r * kTileKeys + j]);
        for (int c = 0; c < CV; ++c) acc[r][c] = hn::MulAdd(a, b[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < CV; ++c) hn::Store(acc[r][c], df, o + r * dp + c0 + c * N);
  }

  // O[npad][dp] = alpha O + P V over the V vectors vvec gives (PVStripOf).
  template <class VVec>
  static HWY_INLINE void PVOf(const float* p, int64_t npad, const VVec& vvec, int64_t dp,
                              const float* alpha, float* o) {
    const int64_t N = int64_t(hn::Lanes(DF()));
    for (int64_t c0 = 0; c0 < dp; c0 += kCV * N) {
      const int64_t vecs = std::min<int64_t>(kCV, (dp - c0) / N);
      int64_t r0 = 0;
      if (vecs == kCV)
        for (; r0 < WideRows(npad); r0 += kRWide)
          PVStripOf<kRWide, kCV>(p + r0 * kTileKeys, vvec, dp, c0, alpha + r0, o + r0 * dp);
      for (; r0 < npad; r0 += kR) {
        const float* pr = p + r0 * kTileKeys;
        float* orow = o + r0 * dp;
        switch (vecs) {
          case kCV: PVStripOf<kR, kCV>(pr, vvec, dp, c0, alpha + r0, orow); break;
          default:
            for (int64_t c = 0; c < vecs; ++c)
              PVStripOf<kR, 1>(pr, vvec, dp, c0 + c * N, alpha + r0, orow);
        }
      }
    }
  }
  // O[npad][dp] = alpha O + P V over V tile vt.
  static HWY_NOINLINE void PV(const float* p, int64_t npad, const T* vt, int64_t dp,
                              const float* alpha, float* o) {
    const DF df;
    PVOf(p, npad, [&](int64_t j, int64_t col) { return hn::Load(df, vt + j * dp + col); }, dp,
         alpha, o);
  }

};

#if HWY_TARGET == HWY_AVX3
// ---------------------------------------------------------------------------------------
// Bf16DotOps: bf16 operands and vdpbf16ps, which computes per f32 lane
//   acc += a[2i] b[2i] + a[2i+1] b[2i+1].
// Pairs run along the contraction axis: K tile as [d/2][64][2] (pairs of dims per key), V tile
// as [32][dp][2] (pairs of keys per dim), Q as [rows][d] (a broadcast 32-bit word is a pair of
// dims) and P converted to bf16 [rows][64] (a 32-bit word is a pair of keys).
#define SPATTN_BF16_ATTR \
  __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx512bf16,fma,avx2")))

struct Bf16DotOps {
  using T = uint16_t;
  static constexpr bool kKeyPairs = true;
  static int64_t q_stride(int64_t d) { return d; }
  static int64_t k_tile_elems(int64_t d) { return d * kTileKeys; }
  static int64_t v_tile_elems(int64_t dp) { return kTileKeys * dp; }

  static void LoadRowBf16(const TensorView& t, int64_t h, int64_t s, int64_t d, T* dst) {
    if (t.dtype == DType::bf16 && t.stride_dim == 1) {
      std::memcpy(dst, t.ptr(h, s), size_t(d) * 2);
    } else {
      for (int64_t c = 0; c < d; ++c) dst[c] = f32_to_bf16(t.get(h, s, c));
    }
  }
  static void PackQ(const TensorView& q, int64_t h, const int64_t* rows, int64_t n, int64_t npad,
                    int64_t d, T* dst) {
    for (int64_t r = 0; r < n; ++r) LoadRowBf16(q, h, rows[r], d, dst + r * d);
    std::fill(dst + n * d, dst + npad * d, T(0));
  }
  static void PackKeyK(const TensorView& k, int64_t h, int64_t s, int64_t jj, int64_t d, T* tile,
                       float* row_buf) {
    T* row = reinterpret_cast<T*>(row_buf);
    LoadRowBf16(k, h, s, d, row);
    for (int64_t c = 0; c < d; c += 2) {
      tile[(c / 2) * kTileKeys * 2 + jj * 2] = row[c];
      tile[(c / 2) * kTileKeys * 2 + jj * 2 + 1] = row[c + 1];
    }
  }
  static void PackKeyV(const TensorView& v, int64_t h, int64_t s, int64_t jj, int64_t d,
                       int64_t dp, T* tile, float* row_buf) {
    T* row = reinterpret_cast<T*>(row_buf);
    LoadRowBf16(v, h, s, d, row);
    T* pair = tile + (jj / 2) * dp * 2 + (jj & 1);
    for (int64_t c = 0; c < d; ++c) pair[c * 2] = row[c];
    for (int64_t c = d; c < dp; ++c) pair[c * 2] = 0;
  }
  static void CopyKeyK(const T* src, int64_t sj, T* dst, int64_t dj, int64_t d) {
    for (int64_t c2 = 0; c2 < d / 2; ++c2) {
      dst[c2 * kTileKeys * 2 + dj * 2] = src[c2 * kTileKeys * 2 + sj * 2];
      dst[c2 * kTileKeys * 2 + dj * 2 + 1] = src[c2 * kTileKeys * 2 + sj * 2 + 1];
    }
  }
  static void CopyKeyV(const T* src, int64_t sj, T* dst, int64_t dj, int64_t dp) {
    const T* a = src + (sj / 2) * dp * 2 + (sj & 1);
    T* b = dst + (dj / 2) * dp * 2 + (dj & 1);
    for (int64_t c = 0; c < dp; ++c) b[c * 2] = a[c * 2];
  }
  // A key's pair of dims is one 32-bit word.
  static void CopyKeysK(const T* src, int64_t sj, T* dst, int64_t dj, int64_t n, int64_t d) {
    for (int64_t c2 = 0; c2 < d / 2; ++c2)
      CopyWords(reinterpret_cast<const uint32_t*>(src + c2 * kTileKeys * 2 + sj * 2),
                reinterpret_cast<uint32_t*>(dst + c2 * kTileKeys * 2 + dj * 2), n);
  }
  // V pairs keys: whole pair rows copy when both ends start on the same parity.
  static void CopyKeysV(const T* src, int64_t sj, T* dst, int64_t dj, int64_t n, int64_t dp) {
    int64_t i = 0;
    if ((sj & 1) == (dj & 1)) {
      if (sj & 1) CopyKeyV(src, sj, dst, dj, dp), i = 1;
      const int64_t pairs = (n - i) / 2;
      std::memcpy(dst + ((dj + i) / 2) * dp * 2, src + ((sj + i) / 2) * dp * 2,
                  size_t(pairs * dp * 2) * sizeof(T));
      i += pairs * 2;
    }
    for (; i < n; ++i) CopyKeyV(src, sj + i, dst, dj + i, dp);
  }
  static void PrefetchKeys(const T* kt, const T* vt, int64_t sj, int64_t n, int64_t d, int64_t dp) {
    PrefetchRows(kt + sj * 2, d / 2, kTileKeys * 4, n * 4);
    const int64_t a = sj / 2, b = (sj + n + 1) / 2;
    PrefetchRows(vt + a * dp * 2, 1, 0, (b - a) * dp * 4);
  }
  static void ZeroKey(T* kt, T* vt, int64_t j, int64_t d, int64_t dp) {
    for (int64_t c2 = 0; c2 < d / 2; ++c2)
      kt[c2 * kTileKeys * 2 + j * 2] = kt[c2 * kTileKeys * 2 + j * 2 + 1] = 0;
    T* b = vt + (j / 2) * dp * 2 + (j & 1);
    for (int64_t c = 0; c < dp; ++c) b[c * 2] = 0;
  }
  static void ZeroKeys(T* kt, T* vt, int64_t from, int64_t d, int64_t dp) {
    for (int64_t c2 = 0; c2 < d / 2; ++c2)
      std::fill(kt + c2 * kTileKeys * 2 + from * 2, kt + (c2 + 1) * kTileKeys * 2, T(0));
    for (int64_t j = from; j < kTileKeys; ++j) {
      T* b = vt + (j / 2) * dp * 2 + (j & 1);
      for (int64_t c = 0; c < dp; ++c) b[c * 2] = 0;
    }
  }

  // R rows x 4 vectors of accumulators (kRWide rows while a tile allows, then kR): more rows
  // per loaded K/V vector; each dot product keeps its order, so the blocking changes no bit.
  // load(k2, b) gives the 4 K vectors of dim pair k2: a packed tile's (AlignedK) or a shifted
  // tile's (ShiftedK).
  template <int R, class LoadK>
  SPATTN_BF16_ATTR static HWY_INLINE void ScoreStrip(const T* q, int64_t d, const LoadK& load,
                                                     float* s) {
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
    for (int64_t k2 = 0; k2 < d / 2; ++k2) {
      __m512bh b[4];
      load(k2, b);
      for (int r = 0; r < R; ++r) {
        int32_t pair;
        std::memcpy(&pair, q + r * d + 2 * k2, 4);
        const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
        for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], a, b[c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) _mm512_store_ps(s + r * kTileKeys + c * 16, acc[r][c]);
  }
  struct AlignedK {
    const T* kt;
    SPATTN_BF16_ATTR HWY_INLINE void operator()(int64_t k2, __m512bh* b) const {
      for (int c = 0; c < 4; ++c)
        b[c] = (__m512bh)_mm512_load_si512(kt + k2 * kTileKeys * 2 + c * 32);
    }
  };
  // The shifted tile of F32Ops::ScoresShifted on 32-bit words (a key's pair of dims), through
  // ShiftedVectors / ShiftIndex: one two-source permute per vector.
  struct ShiftedK {
    const uint32_t* const* w;
    __m512i idx;
    SPATTN_BF16_ATTR HWY_INLINE void operator()(int64_t k2, __m512bh* b) const {
      __m512i x = _mm512_load_si512(w[0] + k2 * kTileKeys);
      for (int c = 0; c < 4; ++c) {
        const __m512i y = _mm512_load_si512(w[c + 1] + k2 * kTileKeys);
        b[c] = (__m512bh)_mm512_permutex2var_epi32(x, idx, y);
        x = y;
      }
    }
  };
  template <class LoadK>
  SPATTN_BF16_ATTR static HWY_INLINE void ScoreRows(const T* q, int64_t npad, int64_t d,
                                                    const LoadK& load, float* s) {
    int64_t r0 = 0;
    for (; r0 < WideRows(npad); r0 += kRWide) ScoreStrip<kRWide>(q + r0 * d, d, load, s + r0 * kTileKeys);
    for (; r0 < npad; r0 += kR) ScoreStrip<kR>(q + r0 * d, d, load, s + r0 * kTileKeys);
  }

  SPATTN_BF16_ATTR static HWY_NOINLINE void Scores(const T* q, int64_t npad, const T* kt,
                                                   int64_t d, float* s) {
    ScoreRows(q, npad, d, AlignedK{kt}, s);
  }
  // sj even: V pairs keys, and a shifted tile keeps whole pairs.
  SPATTN_BF16_ATTR static HWY_NOINLINE void ScoresShifted(const T* q, int64_t npad, const T* kt,
                                                          int64_t sj, int64_t d, float* s) {
    const uint32_t* w[5];
    ShiftedVectors(reinterpret_cast<const uint32_t*>(kt), d / 2, sj, w);
    ScoreRows(q, npad, d, ShiftedK{w, ShiftIndex(sj)}, s);
  }
  static const T* ShiftedV(const T* vt, int64_t sj, int64_t dp) { return vt + (sj / 2) * dp * 2; }

  // Rows [0, R) of O's columns [c0, c0 + 16 vecs): alpha O + P V with P as bf16 pairs.
  template <int R>
  SPATTN_BF16_ATTR static HWY_INLINE void PVStrip(const uint16_t* pb, const T* vt, int64_t dp,
                                                  int64_t c0, int vecs, const float* alpha,
                                                  float* o) {
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r) {
      const __m512 al = _mm512_set1_ps(alpha[r]);
      for (int c = 0; c < vecs; ++c)
        acc[r][c] = _mm512_mul_ps(al, _mm512_load_ps(o + r * dp + c0 + c * 16));
    }
    for (int64_t j2 = 0; j2 < kTileKeys / 2; ++j2) {
      __m512bh b[4];
      for (int c = 0; c < vecs; ++c)
        b[c] = (__m512bh)_mm512_load_si512(vt + j2 * dp * 2 + (c0 + c * 16) * 2);
      for (int r = 0; r < R; ++r) {
        int32_t pair;
        std::memcpy(&pair, pb + r * kTileKeys + 2 * j2, 4);
        const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
        for (int c = 0; c < vecs; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], a, b[c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < vecs; ++c) _mm512_store_ps(o + r * dp + c0 + c * 16, acc[r][c]);
  }

  SPATTN_BF16_ATTR static HWY_NOINLINE void PV(const float* p, int64_t npad, const T* vt,
                                               int64_t dp, const float* alpha, float* o) {
    alignas(64) uint16_t pb[kMaxTileRows * kTileKeys];
    for (int64_t i = 0; i < npad * kTileKeys; i += 32) {
      const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_load_ps(p + i + 16), _mm512_load_ps(p + i));
      _mm512_store_si512(pb + i, (__m512i)h);
    }
    for (int64_t c0 = 0; c0 < dp; c0 += 4 * 16) {
      const int vecs = int(std::min<int64_t>(4, (dp - c0) / 16));
      int64_t r0 = 0;
      if (vecs == 4)
        for (; r0 < WideRows(npad); r0 += kRWide)
          PVStrip<kRWide>(pb + r0 * kTileKeys, vt, dp, c0, 4, alpha + r0, o + r0 * dp);
      for (; r0 < npad; r0 += kR)
        PVStrip<kR>(pb + r0 * kTileKeys, vt, dp, c0, vecs, alpha + r0, o + r0 * dp);
    }
  }
};
#undef SPATTN_BF16_ATTR
#endif  // HWY_TARGET == HWY_AVX3

// ---------------------------------------------------------------------------------------
// Stored K/V types (PackedKVData::k_type / v_type, kernels/packed_kv.hpp) under F32Ops: rows
// are rounded into their storage as they are packed, and tiles are widened back to F32Ops'
// layouts as the loop reads them (WidenedTiles), so the micro-kernels stay as they are and
// the values they see are exactly the stored ones (f16 / bf16 exact in f32; q8_0's q * d is
// exact too: 8-bit q times an 11-bit scale).

// x rounded to the bits of kT, a 16-bit stored type (f16 or bf16).
template <KVType kT>
inline uint16_t RoundStored(float x) {
  static_assert(traits(kT).value_bytes() == 2);
  if constexpr (traits(kT).widening == Widening::half) return f32_to_f16(x);
  else return f32_to_bf16(x);  // Widening::upper_half
}

// Slot jj of a K tile stored in 16 bits (groups of 16 keys, stored_k_index) from an f32 row.
template <KVType kT>
inline void StoreKeyK16(unsigned char* tile, int64_t jj, const float* row, int64_t d) {
  uint16_t* h = reinterpret_cast<uint16_t*>(tile);
  for (int64_t c = 0; c < d; ++c) h[stored_k_index(d, c, jj)] = RoundStored<kT>(row[c]);
}

// Slot jj of a K tile stored as t (f32 and q8_0 [d][64], q8_0 scales [d/32][64] after the
// values; f16 / bf16 in groups of 16 keys, stored_k_index) from an f32 row.
inline void StoreKeyK(KVType t, unsigned char* tile, int64_t jj, const float* row, int64_t d) {
  switch (t) {
    case KVType::f32: {
      float* f = reinterpret_cast<float*>(tile);
      for (int64_t c = 0; c < d; ++c) f[c * kTileKeys + jj] = row[c];
      return;
    }
    case KVType::f16: return StoreKeyK16<KVType::f16>(tile, jj, row, d);
    case KVType::bf16: return StoreKeyK16<KVType::bf16>(tile, jj, row, d);
    case KVType::q8_0: {
      int8_t qs[256];
      uint16_t sc[256 / 32];
      kv_quantize_q8_0(row, d, qs, sc);
      int8_t* q = reinterpret_cast<int8_t*>(tile);
      uint16_t* scales = reinterpret_cast<uint16_t*>(tile + d * kTileKeys);
      for (int64_t c = 0; c < d; ++c) q[c * kTileKeys + jj] = qs[c];
      for (int64_t b = 0; b < d / 32; ++b) scales[b * kTileKeys + jj] = sc[b];
      return;
    }
  }
}

// Slot jj of a V tile stored in 16 bits ([64][dp]), its padding [d, dp) zero.
template <KVType kT>
inline void StoreKeyV16(unsigned char* tile, int64_t jj, const float* row, int64_t d,
                        int64_t dp) {
  uint16_t* h = reinterpret_cast<uint16_t*>(tile) + jj * dp;
  for (int64_t c = 0; c < d; ++c) h[c] = RoundStored<kT>(row[c]);
  std::fill(h + d, h + dp, uint16_t(0));
}

// Slot jj of a V tile stored as t ([64][dp], q8_0 scales [64][dp/32] after the values), its
// padding [d, dp) zero.
inline void StoreKeyV(KVType t, unsigned char* tile, int64_t jj, const float* row, int64_t d,
                      int64_t dp) {
  switch (t) {
    case KVType::f32: {
      float* f = reinterpret_cast<float*>(tile) + jj * dp;
      std::copy_n(row, d, f);
      std::fill(f + d, f + dp, 0.0f);
      return;
    }
    case KVType::f16: return StoreKeyV16<KVType::f16>(tile, jj, row, d, dp);
    case KVType::bf16: return StoreKeyV16<KVType::bf16>(tile, jj, row, d, dp);
    case KVType::q8_0:  // d % 32 == 0, so dp == d
      kv_quantize_q8_0(row, d, reinterpret_cast<int8_t*>(tile) + jj * dp,
                       reinterpret_cast<uint16_t*>(tile + kTileKeys * dp) + jj * (dp / 32));
      return;
  }
}

// Lanes(df) values stored as kT (f16 or bf16) at p, as f32 (exact: both are f32 with fewer
// bits): what the widening writes and what decode's in-place kernels read (group_tiles-inl.h).
template <KVType kT>
HWY_INLINE VF LoadStored(DF df, const uint16_t* HWY_RESTRICT p) {
  static_assert(traits(kT).value_bytes() == 2);
  if constexpr (traits(kT).widening == Widening::half) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  } else {  // Widening::upper_half, bf16: the upper half of an f32
    const hn::Rebind<uint16_t, DF> d16;
    const hn::RebindToUnsigned<DF> du;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
  }
}

// n (a multiple of the vector length) 2-byte values stored as kT widened to f32.
template <KVType kT>
inline void Widen16(const uint16_t* HWY_RESTRICT src, float* HWY_RESTRICT dst, int64_t n) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  for (int64_t i = 0; i < n; i += N) hn::Store(LoadStored<kT>(df, src + i), df, dst + i);
}

// N int8 values at q times the f32 scales s.
HWY_INLINE VF DequantQ8(DF df, const int8_t* HWY_RESTRICT q, VF s) {
  const hn::Rebind<int8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  return hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, q))), s);
}

// Slots [sj, sj + n) of a K tile into slots [dj, dj + n) of dst, F32Ops' layout [d][64]: the
// keys a gathered piece takes, widened without the rest of their tile. Each dimension's row
// widens whole vectors (q8_0) or whole 16-key groups (f16 / bf16) around the slots and keeps
// the slots. One function per stored type; WidenKeysK dispatches.
inline void WidenKeysKF32(const unsigned char* tile, int64_t sj, int64_t n, int64_t d,
                          float* HWY_RESTRICT dst, int64_t dj) {
  const float* f = reinterpret_cast<const float*>(tile);
  for (int64_t c = 0; c < d; ++c)
    std::memcpy(dst + c * kTileKeys + dj, f + c * kTileKeys + sj, size_t(n) * 4);
}

template <KVType kT>
inline void WidenKeysK16(const unsigned char* tile, int64_t sj, int64_t n, int64_t d,
                         float* HWY_RESTRICT dst, int64_t dj) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  alignas(64) float row[kTileKeys];
  static_assert(kKeyGroup % hn::MaxLanes(DF()) == 0);  // a group is whole vectors
  const uint16_t* h = reinterpret_cast<const uint16_t*>(tile);
  const int64_t g0 = sj / kKeyGroup, g1 = (sj + n + kKeyGroup - 1) / kKeyGroup;
  // In place when the slots are whole groups and land on whole vectors, else through a row.
  const bool direct = g0 * kKeyGroup == sj && g1 * kKeyGroup == sj + n && dj % N == 0;
  for (int64_t c = 0; c < d; ++c) {
    for (int64_t g = g0; g < g1; ++g)
      Widen16<kT>(h + stored_k_index(d, c, g * kKeyGroup),
                  direct ? dst + c * kTileKeys + dj + (g - g0) * kKeyGroup : row + g * kKeyGroup,
                  kKeyGroup);
    if (!direct) std::memcpy(dst + c * kTileKeys + dj, row + sj, size_t(n) * 4);
  }
}

inline void WidenKeysKQ8(const unsigned char* tile, int64_t sj, int64_t n, int64_t d,
                         float* HWY_RESTRICT dst, int64_t dj) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  alignas(64) float row[kTileKeys];
  const int64_t s0 = sj / N * N, s1 = (sj + n + N - 1) / N * N;
  // In place when the slots are whole vectors at the same offset, else through a row.
  const bool direct = s0 == sj && s1 == sj + n && dj % N == 0;
  const int8_t* q = reinterpret_cast<const int8_t*>(tile);
  const hwy::float16_t* sc = reinterpret_cast<const hwy::float16_t*>(tile + d * kTileKeys);
  const hn::Rebind<hwy::float16_t, DF> dh;
  for (int64_t c = 0; c < d; ++c) {
    float* out = direct ? dst + c * kTileKeys + dj : row + s0;
    for (int64_t j = s0; j < s1; j += N) {
      const VF s = hn::PromoteTo(df, hn::LoadU(dh, sc + (c / 32) * kTileKeys + j));
      hn::Store(DequantQ8(df, q + c * kTileKeys + j, s), df, out + (j - s0));
    }
    if (!direct) std::memcpy(dst + c * kTileKeys + dj, row + sj, size_t(n) * 4);
  }
}

// Slots [sj, sj + n) of K tile `tile` (stored as t) into slots [dj, dj + n) of dst.
inline void WidenKeysK(KVType t, const unsigned char* tile, int64_t sj, int64_t n, int64_t d,
                       float* HWY_RESTRICT dst, int64_t dj) {
  switch (t) {
    case KVType::f32: return WidenKeysKF32(tile, sj, n, d, dst, dj);
    case KVType::f16: return WidenKeysK16<KVType::f16>(tile, sj, n, d, dst, dj);
    case KVType::bf16: return WidenKeysK16<KVType::bf16>(tile, sj, n, d, dst, dj);
    case KVType::q8_0: return WidenKeysKQ8(tile, sj, n, d, dst, dj);
  }
}

// Slots [sj, sj + n) of a q8_0 V tile into slots [dj, dj + n) of dst, F32Ops' layout [64][dp].
inline void WidenKeysVQ8(const unsigned char* tile, int64_t sj, int64_t n, int64_t dp,
                         float* HWY_RESTRICT dst, int64_t dj) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  static_assert(32 % hn::MaxLanes(DF()) == 0);  // a vector lies in one block of 32
  const int8_t* q = reinterpret_cast<const int8_t*>(tile);
  const uint16_t* sc = reinterpret_cast<const uint16_t*>(tile + kTileKeys * dp);
  for (int64_t j = sj; j < sj + n; ++j)
    for (int64_t c = 0; c < dp; c += N) {
      const VF s = hn::Set(df, f16_to_f32(sc[j * (dp / 32) + c / 32]));
      hn::Store(DequantQ8(df, q + j * dp + c, s), df, dst + (dj + j - sj) * dp + c);
    }
}

// Slots [sj, sj + n) of V tile `tile` (stored as t) into slots [dj, dj + n) of dst, F32Ops'
// layout [64][dp]: rows, so only those rows are read. dp is a multiple of 16: whole vectors.
inline void WidenKeysV(KVType t, const unsigned char* tile, int64_t sj, int64_t n, int64_t dp,
                       float* HWY_RESTRICT dst, int64_t dj) {
  const auto* h = reinterpret_cast<const uint16_t*>(tile) + sj * dp;
  switch (t) {
    case KVType::f32:
      std::memcpy(dst + dj * dp, reinterpret_cast<const float*>(tile) + sj * dp,
                  size_t(n * dp) * 4);
      return;
    case KVType::f16: return Widen16<KVType::f16>(h, dst + dj * dp, n * dp);
    case KVType::bf16: return Widen16<KVType::bf16>(h, dst + dj * dp, n * dp);
    case KVType::q8_0: return WidenKeysVQ8(tile, sj, n, dp, dst, dj);
  }
}

// K tile `tile` (stored as t) into dst in F32Ops' layout [d][64].
inline void WidenK(KVType t, const unsigned char* tile, int64_t d, float* HWY_RESTRICT dst) {
  WidenKeysK(t, tile, 0, kTileKeys, d, dst, 0);
}

// V tile `tile` (stored as t) into dst in F32Ops' layout [64][dp].
inline void WidenV(KVType t, const unsigned char* tile, int64_t dp, float* HWY_RESTRICT dst) {
  WidenKeysV(t, tile, 0, kTileKeys, dp, dst, 0);
}

// The loop's f32 view of a PackedKVData whose tiles are stored in other types: one tile of a
// head's K, and one of its V, widened into per-thread buffers. A tile is widened once per
// visit run: consecutive reads of the same tile reuse it. Tiles stored as f32 are read in
// place.
struct WidenedTiles {
  std::unique_ptr<float[], void (*)(float*)> buf{nullptr, [](float* p) { aligned_free(p); }};
  float *k = nullptr, *v = nullptr;
  int64_t kh = -1, kt = -1, vh = -1, vt = -1;  // the tiles k and v hold

  void init(const PackedKVData& kv) {
    if (!kv.widened()) return;
    buf.reset(static_cast<float*>(aligned_alloc_bytes(size_t(kv.k_elems + kv.v_elems) * 4)));
    k = buf.get();
    v = k + kv.k_elems;
  }
  // Tile t of head kvh, as f32 in F32Ops' layout.
  const float* K(const PackedKVData& kv, int64_t kvh, int64_t t) {
    if (kv.k_type == KVType::f32) return kv.k_tile<float>(kvh, t);
    if (kh != kvh || kt != t) kh = kvh, kt = t, WidenK(kv.k_type, kv.k_bytes(kvh, t), kv.dim, k);
    return k;
  }
  const float* V(const PackedKVData& kv, int64_t kvh, int64_t t) {
    if (kv.v_type == KVType::f32) return kv.v_tile<float>(kvh, t);
    if (vh != kvh || vt != t) vh = kvh, vt = t, WidenV(kv.v_type, kv.v_bytes(kvh, t), kv.dp, v);
    return v;
  }
  // Keys [a, a + 64) of head kvh, a off the grid (the end of tile a / 64, the start of the
  // next), widened as one tile of their own: half the work of widening both tiles whole.
  const float* KRun(const PackedKVData& kv, int64_t kvh, int64_t a) {
    const int64_t t = a / kTileKeys, sj = a % kTileKeys;
    kh = -1;  // the buffer no longer holds whole tiles
    WidenKeysK(kv.k_type, kv.k_bytes(kvh, t), sj, kTileKeys - sj, kv.dim, k, 0);
    WidenKeysK(kv.k_type, kv.k_bytes(kvh, t + 1), 0, sj, kv.dim, k, kTileKeys - sj);
    return k;
  }
  const float* VRun(const PackedKVData& kv, int64_t kvh, int64_t a) {
    const int64_t t = a / kTileKeys, sj = a % kTileKeys;
    vh = -1;
    WidenKeysV(kv.v_type, kv.v_bytes(kvh, t), sj, kTileKeys - sj, kv.dp, v, 0);
    WidenKeysV(kv.v_type, kv.v_bytes(kvh, t + 1), 0, sj, kv.dp, v, kTileKeys - sj);
    return v;
  }
};

}  // namespace spattn::kernels::HWY_NAMESPACE
// Stored 16-bit tiles read in place for decode's few rows (GroupTile, GroupScoresOf, GroupPVOf).
#include "kernels/group_tiles-inl.h"
namespace spattn::kernels::HWY_NAMESPACE {

// ---------------------------------------------------------------------------------------
// Packing into a PackedKVData (kernels/packed_kv.hpp): rows src_rows[i] of k, v (or rows
// 0.. when null) become packed keys first, first + 1, ... Items are (kv head, tile), so each
// tile is written by one thread; slots outside the range keep their bytes.
template <class Ops>
void PackRange(PackedKVData& kv, const TensorView& k, const TensorView& v,
               const int64_t* src_rows, int64_t first, int64_t n, int threads) {
  using T = typename Ops::T;
  if (n <= 0) return;
  const int64_t t0 = first / kTileKeys, t1 = (first + n - 1) / kTileKeys + 1;
  parallel_for(kv.kv_heads * (t1 - t0), threads, [&](int64_t item, int) {
    alignas(64) float row_buf[512];
    const int64_t h = item / (t1 - t0), t = t0 + item % (t1 - t0);
    const int64_t a = std::max(first, t * kTileKeys), b = std::min(first + n, (t + 1) * kTileKeys);
    T* kt = kv.k_tile<T>(h, t);
    T* vt = kv.v_tile<T>(h, t);
    for (int64_t i = a; i < b; ++i) {
      const int64_t src = src_rows ? src_rows[i - first] : i - first;
      Ops::PackKeyK(k, h, src, i - t * kTileKeys, kv.dim, kt, row_buf);
      Ops::PackKeyV(v, h, src, i - t * kTileKeys, kv.dim, kv.dp, vt, row_buf);
    }
  });
}

// PackRange for tiles stored in other types (k_type / v_type): each row rounded into them.
inline void PackRangeStored(PackedKVData& kv, const TensorView& k, const TensorView& v,
                            const int64_t* src_rows, int64_t first, int64_t n, int threads) {
  if (n <= 0) return;
  const int64_t t0 = first / kTileKeys, t1 = (first + n - 1) / kTileKeys + 1;
  parallel_for(kv.kv_heads * (t1 - t0), threads, [&](int64_t item, int) {
    alignas(64) float row[256];
    const int64_t h = item / (t1 - t0), t = t0 + item % (t1 - t0);
    const int64_t a = std::max(first, t * kTileKeys), b = std::min(first + n, (t + 1) * kTileKeys);
    for (int64_t i = a; i < b; ++i) {
      const int64_t src = src_rows ? src_rows[i - first] : i - first;
      LoadRowF32(k, h, src, kv.dim, row);
      StoreKeyK(kv.k_type, kv.k_bytes(h, t), i - t * kTileKeys, row, kv.dim);
      LoadRowF32(v, h, src, kv.dim, row);
      StoreKeyV(kv.v_type, kv.v_bytes(h, t), i - t * kTileKeys, row, kv.dim, kv.dp);
    }
  });
}

// The operand format this target uses for inputs of `dtype`: bf16 pairs when the caller asks
// for the dot-product path (AttnOptions::bf16_dot) and it can run here.
inline Operands OperandsHere(DType dtype, bool bf16_dot) {
#if HWY_TARGET == HWY_AVX3
  if (dtype == DType::bf16 && bf16_dot && bf16_dot_supported()) return Operands::bf16_dot;
#endif
  return Operands::f32;
}

// Writes rows src_rows[0..n) (or all rows of k when null) of k, v into slots first.. of kv,
// with their formats' packer. Positions and size are the caller's to record afterwards.
inline void PackAppend(PackedKVData& kv, const TensorView& k, const TensorView& v,
                       const int64_t* src_rows, int64_t first, int64_t n, int threads) {
#if HWY_TARGET == HWY_AVX3
  if (kv.ops == Operands::bf16_dot) {
    PackRange<Bf16DotOps>(kv, k, v, src_rows, first, n, threads);
    return;
  }
#endif
  SPATTN_CHECK(kv.ops == Operands::f32,
               "this K/V was packed for bf16 dot products, which the SIMD target now running "
               "lacks");
  if (kv.widened()) {
    PackRangeStored(kv, k, v, src_rows, first, n, threads);
    return;
  }
  PackRange<F32Ops>(kv, k, v, src_rows, first, n, threads);
}

// Packs all of k, v (natural order) into a fresh kv.
inline void PackInto(PackedKVData& kv, Operands ops, const TensorView& k, const TensorView& v,
                     int threads) {
  // Every slot but the last tile's tail is written below: only that tail needs zeroing.
  init_packed(kv, ops, k.dtype, k.heads, k.dim, k.seq, /*zero_all=*/false);
  PackAppend(kv, k, v, nullptr, 0, k.seq, threads);
  add_positions(kv, nullptr, k.seq);
}

// (kPackFragments) Keys [src, src + n) of a range, copied into slots [dst, dst + n) of a
// gathered tile; src -1: slot dst left empty (kKeyPairs).
struct Piece {
  int64_t src, dst, n;
};
// The rest of a range up to this many keys is packed into gathered tiles; more is computed
// as a tile of its own (copying ~50 keys costs more than the ~14 wasted slots).
inline constexpr int64_t kPackedPieceMax = 48;

// Per-thread scratch of one work item.
template <class Ops>
struct Scratch {
  using T = typename Ops::T;
  std::unique_ptr<float[], void (*)(float*)> buf{nullptr, [](float* p) { aligned_free(p); }};
  T* q = nullptr;
  float* s_own = nullptr;  // the scores / P buffer; s points here unless a kKeepP policy moved it
  float *s = nullptr, *o = nullptr, *m = nullptr, *l = nullptr, *alpha = nullptr,
        *tile_max = nullptr, *block_lse = nullptr;
  T *gk = nullptr, *gv = nullptr;  // gathered key / value tile
  int64_t rows[kMaxTileRows];
  int64_t out_rows[kMaxTileRows];
  int64_t pos[kMaxTileRows];
  std::vector<KeyRange> ranges;
  std::vector<int64_t> columns;
  std::vector<TileVisit> visits;  // kOrder policies: the item's key tiles in visiting order
  std::vector<Piece> pieces;      // kPackFragments: the gathered tile's pieces of ranges
  WidenedTiles win;               // tiles stored in other types, widened (F32Ops only)

  explicit Scratch(int64_t d, int64_t dp) {
    const int64_t R = kMaxTileRows + kR;
    auto floats = [](int64_t elems) { return (elems * int64_t(sizeof(T)) + 63) / 64 * 16; };
    const int64_t qf = floats(R * d), gkf = floats(kTileKeys * d), gvf = floats(kTileKeys * dp);
    const int64_t total = qf + gkf + gvf + R * kTileKeys + R * dp + 5 * R;
    buf.reset(static_cast<float*>(aligned_alloc_bytes(size_t(total) * 4)));
    float* f = buf.get();
    q = reinterpret_cast<T*>(f);
    f += qf;
    gk = reinterpret_cast<T*>(f);
    f += gkf;
    gv = reinterpret_cast<T*>(f);
    f += gvf;
    s = s_own = f; f += R * kTileKeys;
    o = f; f += R * dp;
    m = f; f += R;
    l = f; f += R;
    alpha = f; f += R;
    tile_max = f; f += R;
    block_lse = f;
  }
};

// Masks scores outside [lo, hi), past each row's causal limit and (window > 0) below its
// sliding window's start to -inf; returns the number of score entries left.
inline int64_t MaskTile(float* s, int64_t n, const int64_t* pos, bool causal, int64_t j0,
                        int64_t lo, int64_t hi, int64_t window = 0) {
  int64_t kept = 0;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t row_hi = causal ? std::min(hi, pos[r] + 1) : hi;
    const int64_t row_lo = window > 0 ? std::max(lo, window_start(pos[r], window)) : lo;
    const int64_t a = std::clamp<int64_t>(row_lo - j0, 0, kTileKeys);
    const int64_t b = std::clamp<int64_t>(row_hi - j0, a, kTileKeys);
    float* row = s + r * kTileKeys;
    std::fill(row, row + a, kNegInf);
    std::fill(row + b, row + kTileKeys, kNegInf);
    kept += b - a;
  }
  return kept;
}

// Row maxima of the scaled scores (x = S c), into tile_max.
inline void RowMax(const float* s, int64_t n, float c, float* tile_max) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  for (int64_t r = 0; r < n; ++r) {
    VF mx = hn::Set(df, kNegInf);
    for (int64_t j = 0; j < kTileKeys; j += N) mx = hn::Max(mx, hn::Load(df, s + r * kTileKeys + j));
    tile_max[r] = hn::GetLane(hn::MaxOfLanes(df, mx)) * c;
  }
}

// Online-softmax update of rows [0, n): turns S into P in place, updates m and l, writes the
// O rescale factors alpha and, when observing, each row's log-sum-exp over this tile.
template <bool kObserve>
inline void SoftmaxUpdate(float* s, int64_t n, float c, const float* tile_max, float* m, float* l,
                          float* alpha, float* block_lse) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const VF vc = hn::Set(df, c);
  for (int64_t r = 0; r < n; ++r) {
    const float m_new = std::max(m[r], tile_max[r]);
    // A row that has seen no key keeps m = -inf; use 0 so exp2 sees -inf, not NaN.
    const float m_use = m_new == kNegInf ? 0.0f : m_new;
    // Past the first tiles the running max rarely moves: skip the libm call when it did not
    // (exp2(0) is exactly 1, so the result is the same bits).
    alpha[r] = m[r] == m_use ? 1.0f : std::exp2(m[r] - m_use);
    const VF vm = hn::Set(df, m_use);
    VF sum = hn::Zero(df);
    float* row = s + r * kTileKeys;
    for (int64_t j = 0; j < kTileKeys; j += N) {
      const VF p = Exp2(df, hn::MulSub(hn::Load(df, row + j), vc, vm));
      sum = hn::Add(sum, p);
      hn::Store(p, df, row + j);
    }
    const float rs = hn::GetLane(hn::SumOfLanes(df, sum));
    l[r] = l[r] * alpha[r] + rs;
    m[r] = m_new;
    if constexpr (kObserve) block_lse[r] = rs;
  }
  // The tile LSE, ln 2 (m + log2 rs) with m the max after the tile as above, in a second pass
  // over the rows, a vector of rows at a time rather than a scalar libm call per row (MOMO's
  // observer reads it for every sampled row and key tile). Lanes past n (up to a multiple of
  // N; the scratch holds kMaxTileRows >= that) compute values nobody reads.
  if constexpr (kObserve) {
    static_assert(kMaxTileRows % int64_t(hn::MaxLanes(DF())) == 0);
    const VF ninf = hn::Set(df, kNegInf), zero = hn::Zero(df), ln2 = hn::Set(df, kLn2);
    for (int64_t r = 0; r < n; r += N) {
      const VF rs = hn::Load(df, block_lse + r), mr = hn::Load(df, m + r);
      const VF m_use = hn::IfThenElse(hn::Eq(mr, ninf), zero, mr);
      const VF lse = hn::Mul(hn::Add(m_use, hn::Log2(df, rs)), ln2);
      hn::Store(hn::IfThenElse(hn::Gt(rs, zero), lse, ninf), df, block_lse + r);
    }
  }
}

// Masks entries by original key position: (r, jj) is kept when jj < count, key index
// key(jj) lies in [lo, hi), and (causal) its position kpos[key(jj)] (or key(jj) itself when kpos
// is null) is <= pos[r] and (window > 0) > pos[r] - window. Used for gathered tiles and for
// packed K/V in a permuted order.
template <class KeyOf>
inline int64_t MaskByPosition(float* s, int64_t n, const int64_t* pos, bool causal,
                              const int64_t* kpos, KeyOf key, int64_t count, int64_t lo,
                              int64_t hi, int64_t window = 0) {
  int64_t kept = 0;
  for (int64_t r = 0; r < n; ++r) {
    float* row = s + r * kTileKeys;
    for (int64_t jj = 0; jj < kTileKeys; ++jj) {
      bool keep = jj < count;
      if (keep) {
        const int64_t j = key(jj), kp = kpos ? kpos[j] : j;
        keep = j >= lo && j < hi && (!causal || kp <= pos[r]) &&
               (window <= 0 || kp > pos[r] - window);
      }
      if (!keep) row[jj] = kNegInf;
      kept += keep;
    }
  }
  return kept;
}

// Writes O / l (and LSE) of rows [0, n) to output rows out_rows.
inline void Finalize(const Problem& p, int64_t h, const int64_t* out_rows, int64_t n, int64_t dp,
                     const float* o, const float* m, const float* l) {
  const int64_t out_len = p.out.seq;
  for (int64_t r = 0; r < n; ++r) {
    store_row(p.out, h, out_rows[r], o + r * dp, p.dim, l[r] > 0 ? 1.0f / l[r] : 0.0f);
    if (p.lse) p.lse[h * out_len + out_rows[r]] = RowLse(m[r], l[r]);
  }
}

// One q head's columns (kPackedColumns), packed once per call: `keys` are packed indices of
// the main K/V (sorted, unique), `kv` holds their K and V tiles (one head) copied bit for bit
// from the main tiles, with the keys' original positions.
struct HeadColumns {
  std::vector<int64_t> keys;
  PackedKVData kv;
};

// K/V tiles as the loop reads them: a typed view of a PackedKVData.
template <class Ops>
struct KVTiles {
  using T = typename Ops::T;
  const PackedKVData& kv;
  const int64_t* kpos;  // original positions, or null when they equal the packed index
  const std::vector<HeadColumns>* columns = nullptr;  // per q head (kPackedColumns)
  // Tile t of head kvh: in place, or widened into the thread's scratch when stored in another
  // type.
  const T* k_tile(int64_t kvh, int64_t t, Scratch<Ops>& sc) const {
    if constexpr (std::is_same_v<T, float>)
      if (kv.widened()) return sc.win.K(kv, kvh, t);
    return kv.k_tile<T>(kvh, t);
  }
  const T* v_tile(int64_t kvh, int64_t t, Scratch<Ops>& sc) const {
    if constexpr (std::is_same_v<T, float>)
      if (kv.widened()) return sc.win.V(kv, kvh, t);
    return kv.v_tile<T>(kvh, t);
  }
  // Keys [a, a + 64) of head kvh, a off the grid, for a shifted tile: in place, the two tiles
  // they span, read shifted; stored in another type, one tile of their own widened from the
  // two (then scored as a plain tile).
  struct Run {
    const T *k, *v;
    bool shifted;
  };
  Run run(int64_t kvh, int64_t a, Scratch<Ops>& sc) const {
    const int64_t t = a / kTileKeys;
    if constexpr (std::is_same_v<T, float>)
      if (kv.widened()) return {sc.win.KRun(kv, kvh, a), sc.win.VRun(kv, kvh, a), false};
    return {kv.k_tile<T>(kvh, t), Ops::ShiftedV(kv.v_tile<T>(kvh, t), a % kTileKeys, kv.dp), true};
  }
  // Slots [sj, sj + n) of tile t of head kvh into slots dj.. of the gathered tiles. Stored in
  // another type, only those slots are widened: a 16-key page would otherwise widen its whole
  // tile of 64 keys to keep a quarter of it.
  void copy_keys(int64_t kvh, int64_t t, int64_t sj, int64_t n, Scratch<Ops>& sc, int64_t dj) const {
    if constexpr (std::is_same_v<T, float>)
      if (kv.widened()) {
        WidenKeysK(kv.k_type, kv.k_bytes(kvh, t), sj, n, kv.dim, sc.gk, dj);
        WidenKeysV(kv.v_type, kv.v_bytes(kvh, t), sj, n, kv.dp, sc.gv, dj);
        return;
      }
    Ops::CopyKeysK(kv.k_tile<T>(kvh, t), sj, sc.gk, dj, n, kv.dim);
    Ops::CopyKeysV(kv.v_tile<T>(kvh, t), sj, sc.gv, dj, n, kv.dp);
  }
};

// Packs every q head's head_columns() into tiles of its own, copying slots of the main packed
// tiles (so the values are the same bits as the keys' own tiles), heads in parallel.
template <class Ops, class Policy>
std::vector<HeadColumns> PackHeadColumns(const Problem& p, const Policy& pol,
                                         const PackedKVData& main) {
  using T = typename Ops::T;
  std::vector<HeadColumns> out(static_cast<size_t>(p.q.heads));
  parallel_for(p.q.heads, p.threads, [&](int64_t h, int) {
    HeadColumns& c = out[size_t(h)];
    pol.head_columns(p, h, c.keys);
    std::sort(c.keys.begin(), c.keys.end());
    c.keys.erase(std::unique(c.keys.begin(), c.keys.end()), c.keys.end());
    c.keys.erase(std::remove_if(c.keys.begin(), c.keys.end(),
                                [&](int64_t j) { return j < 0 || j >= main.size; }),
                 c.keys.end());
    const int64_t n = int64_t(c.keys.size());
    if (n == 0) return;
    init_packed(c.kv, main.ops, main.dtype, 1, main.dim, n);
    std::vector<int64_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = main.positions[size_t(c.keys[size_t(i)])];
    add_positions(c.kv, pos.data(), n);
    const int64_t kvh = h / p.group;
    // Stored types are widened (the column tiles hold f32): the same values as the loop reads.
    WidenedTiles win;
    win.init(main);
    const auto k_of = [&](int64_t jt) -> const T* {
      if constexpr (std::is_same_v<T, float>) return win.K(main, kvh, jt);
      return main.k_tile<T>(kvh, jt);
    };
    const auto v_of = [&](int64_t jt) -> const T* {
      if constexpr (std::is_same_v<T, float>) return win.V(main, kvh, jt);
      return main.v_tile<T>(kvh, jt);
    };
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = c.keys[size_t(i)], jt = j / kTileKeys, sj = j % kTileKeys;
      T* kt = c.kv.k_tile<T>(0, i / kTileKeys);
      T* vt = c.kv.v_tile<T>(0, i / kTileKeys);
      Ops::CopyKeyK(k_of(jt), sj, kt, i % kTileKeys, main.dim);
      Ops::CopyKeyV(v_of(jt), sj, vt, i % kTileKeys, main.dp);
    }
  });
  return out;
}

// Masks the keys of `keys` (sorted packed indices) that lie in [lo, hi) out of a tile starting
// at packed key j0; returns how many unmasked (row, key) entries that removed.
inline int64_t MaskKeys(float* s, int64_t n, const std::vector<int64_t>& keys, int64_t j0,
                        int64_t lo, int64_t hi) {
  int64_t dropped = 0;
  for (auto it = std::lower_bound(keys.begin(), keys.end(), lo); it != keys.end() && *it < hi; ++it)
    for (int64_t r = 0; r < n; ++r) {
      float& x = s[r * kTileKeys + (*it - j0)];
      if (x != kNegInf) x = kNegInf, ++dropped;
    }
  return dropped;
}

// The per-item state the tile step updates.
template <class Ops, class Policy>
struct TileStep {
  const Problem& p;
  const Policy& pol;
  typename Policy::Local& local;
  Scratch<Ops>& sc;
  Stats& st;
  TileView view;
  int64_t npad, dp;
  float c;  // scale * log2(e)

  // One key tile whose scores are in sc.s and whose masked entries number `kept`. v_tile: the
  // tile's V, or a callable giving it, called only when the tile is not skipped (a V stored in
  // another type is then widened only for the tiles whose V is read).
  template <class VTile>
  void Run(int64_t key_tile, const int64_t* gathered, int64_t n_keys, int64_t kept,
           VTile&& v_tile) {
    const int64_t n = view.n;
    // Padding rows stay finite and contribute nothing.
    std::fill(sc.s + n * kTileKeys, sc.s + npad * kTileKeys, kNegInf);
    RowMax(sc.s, npad, c, sc.tile_max);
    ++st.tiles_visited;
    view.key_tile = key_tile;
    view.gathered = gathered;
    view.n_keys = n_keys;
    view.entries = kept;
    if constexpr (Policy::kMaySkip) {
      view.m = sc.m;
      if (pol.skip(local, view)) {
        ++st.tiles_skipped;
        return;
      }
    }
    st.score_entries += kept;
    SoftmaxUpdate<Policy::kObserve>(sc.s, npad, c, sc.tile_max, sc.m, sc.l, sc.alpha,
                                    sc.block_lse);
    if constexpr (Policy::kOutput) {
      if constexpr (std::is_invocable_v<VTile>) {
        const auto v = v_tile();
        if constexpr (std::is_same_v<std::remove_cv_t<decltype(v)>, GroupV>)
          GroupPVOf(v.type, sc.s, n, *v.g, dp, sc.alpha, sc.o);
        else Ops::PV(sc.s, npad, v, dp, sc.alpha, sc.o);
      } else {
        Ops::PV(sc.s, npad, v_tile, dp, sc.alpha, sc.o);
      }
    }
    if constexpr (Policy::kObserve) {
      view.m = sc.m;
      view.l = sc.l;
      view.p = sc.s;
      view.lse = sc.block_lse;
      pol.observe(local, view);
    }
  }
};

// One work item: q head h, query tile t.
template <class Ops, class Policy>
void RunTile(const Problem& p, const Policy& pol, typename Policy::Local& local,
             const KVTiles<Ops>& kv, int64_t dp, int64_t h, int64_t t, Scratch<Ops>& sc,
             Stats& st) {
  const int64_t n = pol.rows(p, t, sc.rows, sc.out_rows);
  if (n <= 0) return;
  const int64_t npad = RoundUp(n, kR);
  const int64_t kvh = h / p.group;
  for (int64_t r = 0; r < n; ++r) sc.pos[r] = sc.rows[r] + p.pos_offset;
  // Packed keys the tile's last row may see: a prefix when positions ascend.
  const int64_t limit = p.causal ? kv.kv.causal_prefix(sc.pos[n - 1]) : p.kv_len;
  sc.ranges.clear();
  pol.key_ranges(p, h, t, limit, sc.ranges);
  NormalizeRanges(sc.ranges, limit);
  // A sliding window: keys before the first row's band are nobody's, so the ranges start at
  // its edge and the tiles below are never visited (a band of W keys costs O(W) per row, not
  // O(position)). In natural order only, where packed index = position; permuted keys are
  // masked by position below.
  if (p.window > 0 && !kv.kpos) {
    const int64_t lo = window_start(sc.pos[0], p.window);
    for (KeyRange& kr : sc.ranges) kr.begin = std::max(kr.begin, lo);
    std::erase_if(sc.ranges, [](const KeyRange& kr) { return kr.end <= kr.begin; });
  }

  Ops::PackQ(p.q, h, sc.rows, n, npad, p.dim, sc.q);
  std::fill(sc.o, sc.o + npad * dp, 0.0f);
  std::fill(sc.m, sc.m + npad, kNegInf);
  std::fill(sc.l, sc.l + npad, 0.0f);
  TileView view;
  view.h = h, view.t = t, view.n = n;
  view.q_rows = sc.rows, view.out_rows = sc.out_rows, view.row_pos = sc.pos;
  view.positions = kv.kpos;
  view.tile_max = sc.tile_max;
  if constexpr (Policy::kSeedMax) pol.seed_max(p, view, sc.m);
  if constexpr (Policy::kCarry) pol.load_state(p, view, sc.o, sc.m, sc.l, dp);
  TileStep<Ops, Policy> step{p, pol, local, sc, st, view, npad, dp, p.scale * kLog2e};
  // (kKeepP) Each tile's scores / P in the policy's buffer.
  const auto next_p = [&] {
    if constexpr (Policy::kKeepP) sc.s = pol.p_buffer(local, npad);
  };
  const PackedKVData& d = kv.kv;
  // Stored 16-bit K and V read in place (group_tiles-inl.h): decode's few rows.
  const bool in_place = ReadsInPlace<Ops>(d, npad);
  const auto group_scores = [&](const GroupTile& g) {
    if constexpr (std::is_same_v<typename Ops::T, float>)
      GroupScoresOf(d.k_type, sc.q, n, g, p.dim, sc.s);
  };
  // One key tile, limited to the keys [begin, end) of the range that brought it in.
  // Masks the scores of keys j0.. (packed indices; any j0 in natural order) to the range
  // [lo, hi) and causally (last_pos: the tile's last key position), and leaves out the keys a
  // packed column tile computes (all of them, for the rows that see them); returns the
  // entries kept.
  const auto mask_range = [&](int64_t j0, int64_t n_keys, int64_t lo, int64_t hi,
                              int64_t last_pos) {
    // (A window leaves a tile whole only when its first key is in the last row's band.)
    const bool full = lo <= j0 && j0 + kTileKeys <= hi && (!p.causal || last_pos <= sc.pos[0]) &&
                      (p.window <= 0 || (!kv.kpos && j0 >= window_start(sc.pos[n - 1], p.window)));
    int64_t kept;
    if (full) kept = n * kTileKeys;
    else if (!kv.kpos) kept = MaskTile(sc.s, n, sc.pos, p.causal, j0, lo, hi, p.window);
    else
      kept = MaskByPosition(sc.s, n, sc.pos, p.causal, kv.kpos,
                            [j0](int64_t jj) { return j0 + jj; }, n_keys, lo, hi, p.window);
    if constexpr (Policy::kPackedColumns)
      kept -= MaskKeys(sc.s, n, (*kv.columns)[size_t(h)].keys, j0, std::max(j0, lo),
                       std::min(j0 + kTileKeys, hi));
    return kept;
  };
  const auto visit = [&](const TileVisit& tv) {
    const int64_t jt = tv.tile, j0 = jt * kTileKeys;
    const int64_t n_keys = std::min(kTileKeys, p.kv_len - j0);
    // Permuted keys: a tile whose every key lies after the tile's last row adds nothing.
    if (p.causal && tv.first_pos > sc.pos[n - 1]) return;
    // ...and one whose every key lies before the first row's sliding window.
    if (p.window > 0 && tv.last_pos < window_start(sc.pos[0], p.window)) return;
    next_p();
    if (in_place) {
      const GroupTile g = TileGroups(d, kvh, jt);
      group_scores(g);
      const int64_t kept = mask_range(j0, n_keys, tv.begin, tv.end, tv.last_pos);
      step.Run(jt, nullptr, n_keys, kept, [&] { return GroupV{&g, d.v_type}; });
      return;
    }
    Ops::Scores(sc.q, npad, kv.k_tile(kvh, jt, sc), p.dim, sc.s);
    const int64_t kept = mask_range(j0, n_keys, tv.begin, tv.end, tv.last_pos);
    step.Run(jt, nullptr, n_keys, kept, [&] { return kv.v_tile(kvh, jt, sc); });
  };
  // (kPackFragments) A range is computed 64 keys at a time from its first key, on the grid or
  // not (shifted tiles), and its last few keys (kPackedPieceMax or fewer) are copied, piece
  // after piece, into gathered tiles of 64, each computed once: the tiles computed are about
  // the keys needed over 64, not the tiles the ranges touch. Only where positions equal
  // packed indices.
  int64_t filled = 0;  // keys in the gathered tile sc.gk / sc.gv
  sc.pieces.clear();
  const auto run_gathered = [&] {
    if (filled == 0) return;
    if (filled < kTileKeys) Ops::ZeroKeys(sc.gk, sc.gv, filled, p.dim, dp);
    next_p();
    Ops::Scores(sc.q, npad, sc.gk, p.dim, sc.s);
    for (int64_t r = 0; r < n; ++r)
      std::fill(sc.s + r * kTileKeys + filled, sc.s + (r + 1) * kTileKeys, kNegInf);
    sc.columns.resize(size_t(filled));
    int64_t kept = 0;
    for (const Piece& pc : sc.pieces) {
      if (pc.src < 0) {  // a skipped slot (kKeyPairs)
        for (int64_t r = 0; r < n; ++r) sc.s[r * kTileKeys + pc.dst] = kNegInf;
        sc.columns[size_t(pc.dst)] = 0;
        continue;
      }
      std::iota(sc.columns.begin() + pc.dst, sc.columns.begin() + pc.dst + pc.n, pc.src);
      // Keys src.. in slots dst..: row r keeps those up to its position (and, with a
      // sliding window, from its band's start).
      if ((p.causal && pc.src + pc.n - 1 > sc.pos[0]) ||
          (p.window > 0 && pc.src < window_start(sc.pos[n - 1], p.window))) {
        for (int64_t r = 0; r < n; ++r) {
          const int64_t vis = std::clamp<int64_t>(sc.pos[r] + 1 - pc.src, 0, pc.n);
          const int64_t from = std::clamp<int64_t>(window_start(sc.pos[r], p.window) - pc.src, 0, vis);
          float* row = sc.s + r * kTileKeys + pc.dst;
          std::fill(row, row + from, kNegInf);
          std::fill(row + vis, row + pc.n, kNegInf);
          kept += vis - from;
        }
      } else {
        kept += n * pc.n;
      }
      if constexpr (Policy::kPackedColumns)
        kept -= MaskKeys(sc.s, n, (*kv.columns)[size_t(h)].keys, pc.src - pc.dst, pc.src,
                         pc.src + pc.n);
    }
    step.Run(-1, sc.columns.data(), filled, kept, sc.gv);
    filled = 0;
    sc.pieces.clear();
  };
  // A shifted tile: packed keys [a, a + 64) (a off the 64-key grid) of a range [lo, hi), read
  // straight from the two packed tiles they lie in.
  const auto visit_shifted = [&](int64_t a, int64_t lo, int64_t hi) {
    const auto run = kv.run(kvh, a, sc);
    next_p();
    if (run.shifted) Ops::ScoresShifted(sc.q, npad, run.k, a % kTileKeys, p.dim, sc.s);
    else Ops::Scores(sc.q, npad, run.k, p.dim, sc.s);
    const int64_t n_keys = std::min(kTileKeys, p.kv_len - a);
    const int64_t kept = mask_range(a, n_keys, lo, hi, a + kTileKeys - 1);
    // The tile's keys, for the view (sc.columns is free until run_gathered fills it).
    sc.columns.resize(size_t(kTileKeys));
    std::iota(sc.columns.begin(), sc.columns.end(), a);
    step.Run(-1, sc.columns.data(), n_keys, kept, run.v);
  };
  // How a range [b, e) is computed: from b on, 64 keys at a time as one tile (shifted when off
  // the grid; with key pairs a shifted tile starts on an even key, so the first may start one
  // key early, masked) while more than kPackedPieceMax keys are left, then the rest as pieces,
  // one per packed tile they lie in, for gathered tiles. A slash line's range is as wide as
  // the query tile, so most ranges are one shifted tile and copy nothing.
  const auto split_range = [&](const KeyRange& kr, auto&& tile, auto&& piece) {
    int64_t x = kr.begin;
    while (kr.end - x > kPackedPieceMax) {
      int64_t a = x;
      if constexpr (Ops::kKeyPairs) a -= a & 1;
      // A shifted tile reads the tile after a's: the storage's last one has none.
      if (a % kTileKeys != 0 && a / kTileKeys + 1 >= d.tiles_cap) break;
      tile(a);
      x = a + kTileKeys;
    }
    for (int64_t s0 = x; s0 < kr.end;) {
      const int64_t s1 = std::min(kr.end, (s0 / kTileKeys + 1) * kTileKeys);
      piece(s0, s1);
      s0 = s1;
    }
  };
  // The pieces of the next range, prefetched: their copies otherwise wait on memory (the
  // hardware prefetcher does not see scattered short rows coming).
  const auto prefetch_piece = [&](int64_t lo, int64_t hi) {
    const int64_t jt = lo / kTileKeys;
    if (d.widened()) return;  // read once widened, from the thread's scratch
    Ops::PrefetchKeys(d.template k_tile<typename Ops::T>(kvh, jt),
                      d.template v_tile<typename Ops::T>(kvh, jt), lo % kTileKeys, hi - lo, p.dim, dp);
  };
  // Keys [lo, hi) of one packed tile into the gathered tile (and the next, if it fills).
  const auto add_piece = [&](int64_t lo, int64_t hi) {
    const int64_t jt = lo / kTileKeys;
    while (lo < hi) {
      if constexpr (Ops::kKeyPairs) {
        // A key moved to the other half of a pair costs a scalar copy per dim: skip a slot
        // instead (zero K and V, masked below), so whole pairs copy.
        if ((filled & 1) != (lo & 1)) {
          Ops::ZeroKey(sc.gk, sc.gv, filled, p.dim, dp);
          sc.pieces.push_back({-1, filled, 1});
          if (++filled == kTileKeys) run_gathered();
          continue;
        }
      }
      const int64_t take = std::min(hi - lo, kTileKeys - filled);
      kv.copy_keys(kvh, jt, lo % kTileKeys, take, sc, filled);
      sc.pieces.push_back({lo, filled, take});
      filled += take;
      lo += take;
      if (filled == kTileKeys) run_gathered();
    }
  };
  // (kPackFragments, stored 16-bit keys read in place) Each range as the 16-key groups it
  // touches, four to a tile in the order met, wherever they lie: nothing is copied or shifted,
  // and a group's keys outside its range (at most 15 a range end) are masked. A Quest page is
  // whole groups (its size a multiple of 16). Not with kPackedColumns, whose keys the ranges
  // must leave out (MaskKeys in the paths below).
  const auto visit_groups = [&] {
    GroupTile g;
    int64_t first[kGroupsPerTile], lo[kGroupsPerTile], hi[kGroupsPerTile];
    int64_t ng = 0;
    const auto flush = [&] {
      if (ng == 0) return;
      for (int64_t c = ng; c < kGroupsPerTile; ++c)
        g.k[c] = g.v[c] = kZeroGroup, first[c] = lo[c] = hi[c] = 0;
      next_p();
      group_scores(g);
      sc.columns.resize(size_t(kTileKeys));
      for (int64_t c = 0; c < kGroupsPerTile; ++c)
        for (int64_t jj = 0; jj < kKeyGroup; ++jj)
          sc.columns[size_t(c * kKeyGroup + jj)] = first[c] + jj;
      // Groups wholly inside their ranges and visible to every row (Quest's pages: every
      // group, decode being non-causal) need no per-entry test: only the missing groups'
      // slots are masked.
      bool whole = p.window <= 0;
      for (int64_t c = 0; c < ng && whole; ++c)
        whole = lo[c] <= first[c] && first[c] + kKeyGroup <= hi[c] &&
                (!p.causal || first[c] + kKeyGroup - 1 <= sc.pos[0]);
      int64_t kept = 0;
      if (whole) {
        for (int64_t r = 0; r < n; ++r)
          std::fill(sc.s + r * kTileKeys + ng * kKeyGroup, sc.s + (r + 1) * kTileKeys, kNegInf);
        kept = n * ng * kKeyGroup;
      } else {
        for (int64_t slot = 0; slot < kTileKeys; ++slot) {
          const int64_t c = slot / kKeyGroup, j = sc.columns[size_t(slot)];
          for (int64_t r = 0; r < n; ++r) {
            const bool keep = j >= lo[c] && j < hi[c] && (!p.causal || j <= sc.pos[r]) &&
                              (p.window <= 0 || j >= window_start(sc.pos[r], p.window));
            if (!keep) sc.s[r * kTileKeys + slot] = kNegInf;
            kept += keep;
          }
        }
      }
      step.Run(-1, sc.columns.data(), ng * kKeyGroup, kept, [&] { return GroupV{&g, d.v_type}; });
      ng = 0;
    };
    const auto* k0 = reinterpret_cast<const uint16_t*>(d.k_bytes(kvh, 0));
    const auto* v0 = reinterpret_cast<const uint16_t*>(d.v_bytes(kvh, 0));
    for (const KeyRange& kr : sc.ranges)
      for (int64_t gi = kr.begin / kKeyGroup; gi * kKeyGroup < kr.end; ++gi) {
        // A head's tiles lie back to back, so group gi is the gi-th run of 16 keys.
        g.k[ng] = k0 + gi * p.dim * kKeyGroup;
        g.v[ng] = v0 + gi * kKeyGroup * dp;
        first[ng] = gi * kKeyGroup, lo[ng] = kr.begin, hi[ng] = kr.end;
        if (++ng == kGroupsPerTile) flush();
      }
    flush();
  };
  bool grouped = false;
  if constexpr (Policy::kPackFragments && !Policy::kOrder && !Policy::kPackedColumns)
    if (in_place && !kv.kpos) visit_groups(), grouped = true;
  if constexpr (Policy::kOrder) {
    // The same tiles as below, listed first so the policy can choose their order.
    sc.visits.clear();
    for (const KeyRange& kr : sc.ranges)
      for (int64_t jt = kr.begin / kTileKeys; jt * kTileKeys < kr.end; ++jt)
        sc.visits.push_back(d.visit(jt, kr.begin, kr.end));
    pol.visit_order(p, view, sc.visits);
    for (const TileVisit& v : sc.visits) visit(v);
  } else if (!grouped) {
    for (size_t ri = 0; ri < sc.ranges.size(); ++ri) {
      const KeyRange& kr = sc.ranges[ri];
      if constexpr (Policy::kPackFragments) {
        if (!kv.kpos) {
          if (ri + 1 < sc.ranges.size())
            split_range(sc.ranges[ri + 1], [](int64_t) {}, prefetch_piece);
          split_range(
              kr,
              [&](int64_t a) {
                if (a % kTileKeys != 0) visit_shifted(a, kr.begin, kr.end);
                else visit(d.visit(a / kTileKeys, kr.begin, kr.end));
              },
              add_piece);
          continue;
        }
      }
      for (int64_t jt = kr.begin / kTileKeys; jt * kTileKeys < kr.end; ++jt) {
        // A stored (widened) cache: this tile's V and the next tile's K start coming into the
        // L2 while this tile's K is widened and scored. The runner's decode over an f16 cache
        // at 16K depth (code-small-32k, 2 threads, Zen 5): 1.20-1.23x tokens/s (BENCHMARKS.md,
        // "Decode over an f16 cache"). Two or three tiles ahead measured no better.
        if (d.widened()) {
          PrefetchL2(d.v_bytes(kvh, jt), d.v_tile_bytes);
          if ((jt + 1) * kTileKeys < kr.end) PrefetchL2(d.k_bytes(kvh, jt + 1), d.k_tile_bytes);
        }
        visit(d.visit(jt, kr.begin, kr.end));
      }
    }
    if constexpr (Policy::kPackFragments) run_gathered();
  }
  if constexpr (Policy::kGather) {
    sc.columns.clear();
    pol.key_columns(p, h, t, limit, sc.columns);
    NormalizeColumns(sc.columns, sc.ranges, limit);
    for (size_t i = 0; i < sc.columns.size(); i += size_t(kTileKeys)) {
      const int64_t count = std::min<int64_t>(kTileKeys, int64_t(sc.columns.size() - i));
      const int64_t* keys = sc.columns.data() + i;
      // Gathered from the packed tiles (never from raw K/V): the same values, bit for bit.
      std::fill(sc.gk, sc.gk + d.k_elems, typename Ops::T(0));
      std::fill(sc.gv, sc.gv + d.v_elems, typename Ops::T(0));
      for (int64_t jj = 0; jj < count; ++jj) {
        const int64_t j = keys[jj], jt = j / kTileKeys, sj = j % kTileKeys;
        Ops::CopyKeyK(kv.k_tile(kvh, jt, sc), sj, sc.gk, jj, p.dim);
        Ops::CopyKeyV(kv.v_tile(kvh, jt, sc), sj, sc.gv, jj, dp);
      }
      next_p();
      Ops::Scores(sc.q, npad, sc.gk, p.dim, sc.s);
      const int64_t kept = MaskByPosition(sc.s, n, sc.pos, p.causal, kv.kpos,
                                          [keys](int64_t jj) { return keys[jj]; }, count, 0,
                                          p.kv_len, p.window);
      step.Run(-1, keys, count, kept, sc.gv);
    }
  }
  if constexpr (Policy::kPackedColumns) {
    const HeadColumns& hc = (*kv.columns)[size_t(h)];
    const int64_t total = int64_t(hc.keys.size());
    // The columns the tile's last row may see: a prefix when positions ascend.
    const int64_t cols = total == 0 ? 0 : p.causal ? hc.kv.causal_prefix(sc.pos[n - 1]) : total;
    const int64_t* cpos = hc.kv.positions.data();
    for (int64_t i = 0; i < cols; i += kTileKeys) {
      const int64_t ct = i / kTileKeys, count = std::min(kTileKeys, cols - i);
      next_p();
      Ops::Scores(sc.q, npad, hc.kv.template k_tile<typename Ops::T>(0, ct), p.dim, sc.s);
      const bool full = count == kTileKeys && p.window <= 0 &&
                        (!p.causal || hc.kv.tile_max[size_t(ct)] <= sc.pos[0]);
      const int64_t kept =
          full ? n * kTileKeys
               : MaskByPosition(sc.s, n, sc.pos, p.causal, cpos, [i](int64_t jj) { return i + jj; },
                                count, 0, total, p.window);
      step.Run(-1, hc.keys.data() + i, count, kept,
               hc.kv.template v_tile<typename Ops::T>(0, ct));
    }
  }
  if constexpr (Policy::kCarry) pol.store_state(p, view, sc.o, sc.m, sc.l, dp);
  else if constexpr (Policy::kOutput) Finalize(p, h, sc.out_rows, n, dp, sc.o, sc.m, sc.l);
  if constexpr (Policy::kFinish) {
    // alpha is free once the last tile is done: it holds the rows' final LSE.
    for (int64_t r = 0; r < n; ++r) sc.alpha[r] = RowLse(sc.m[r], sc.l[r]);
    view.key_tile = -1, view.gathered = nullptr, view.n_keys = 0, view.entries = 0;
    view.m = sc.m, view.l = sc.l, view.p = nullptr, view.lse = nullptr;
    pol.finish(local, view, sc.alpha);
  }
  sc.s = sc.s_own;
}

// Fixed assignment of items (already longest first) to threads: each goes to the thread with
// the least cost so far (ties: the lowest index). Used when a policy reduces per-thread state,
// whose sums must not depend on which thread was quicker to claim an item.
inline std::vector<std::vector<int64_t>> StaticSchedule(const std::vector<int64_t>& costs,
                                                        int threads) {
  std::vector<std::vector<int64_t>> lists(static_cast<size_t>(threads));
  std::vector<int64_t> load(static_cast<size_t>(threads), 0);
  for (size_t i = 0; i < costs.size(); ++i) {
    const size_t w = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    lists[w].push_back(int64_t(i));
    load[w] += std::max<int64_t>(costs[i], 1);
  }
  return lists;
}

template <class Ops, class Policy>
void RunFlashOps(const Problem& p, Policy& pol, const PackedKVData& packed, Stats* stats) {
  const int64_t dp = packed.dp;
  std::vector<HeadColumns> columns;
  if constexpr (Policy::kPackedColumns) columns = PackHeadColumns<Ops>(p, pol, packed);
  const KVTiles<Ops> kv{packed, packed.mask_positions(), &columns};

  // Items kv head by kv head, each head's longest first: the threads then stream the same
  // head's K and V at the same time (at 16K two heads' K/V overflow a 32 MiB L3, one does not:
  // 74% -> 79% of the FMA peak on Zen 5), and the last items to run are short, so they finish
  // together. The order is fixed, and each item is computed by one thread, so the output does
  // not depend on scheduling.
  const int64_t tiles = pol.num_tiles(p);
  struct Item { int64_t h, t, cost; };
  std::vector<Item> items;
  items.reserve(size_t(tiles * p.q.heads));
  std::vector<int64_t> rows(kMaxTileRows), out_rows(kMaxTileRows);
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t n = pol.rows(p, t, rows.data(), out_rows.data());
    if (n <= 0) continue;
    for (int64_t h = 0; h < p.q.heads; ++h)
      items.push_back({h, t, pol.cost(p, h, t, rows[size_t(n - 1)])});
  }
  std::stable_sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
    const int64_t ka = a.h / p.group, kb = b.h / p.group;
    return ka != kb ? ka < kb : a.cost > b.cost;
  });

  const int threads = int(std::min<int64_t>(p.threads, std::max<int64_t>(1, int64_t(items.size()))));
  std::vector<std::unique_ptr<Scratch<Ops>>> scratch;
  std::vector<Stats> part(static_cast<size_t>(threads));
  std::vector<typename Policy::Local> locals(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) {
    scratch.push_back(std::make_unique<Scratch<Ops>>(p.dim, dp));
    scratch.back()->win.init(packed);
  }
  const Policy& cpol = pol;
  auto run = [&](int64_t i, size_t tid) {
    const Item& it = items[size_t(i)];
    RunTile<Ops>(p, cpol, locals[tid], kv, dp, it.h, it.t, *scratch[tid], part[tid]);
  };
  if constexpr (Policy::kReduce) {
    std::vector<int64_t> costs;
    for (const Item& it : items) costs.push_back(it.cost);
    const auto lists = StaticSchedule(costs, threads);
    parallel_for(threads, threads, [&](int64_t w, int) {
      for (int64_t i : lists[size_t(w)]) run(i, size_t(w));
    });
    pol.reduce(locals);
  } else {
    parallel_for(int64_t(items.size()), threads, [&](int64_t i, int tid) { run(i, size_t(tid)); });
  }
  add_kernel_stats(p, part, stats);
}

// Runs the loop with the caller's packed K/V, or packs p.k and p.v for this call. The operand
// format is the packed one's; for a call that packs, bf16 inputs use bf16 dot products where
// this target and CPU have them.
template <class Policy>
void RunFlash(const Problem& p, Policy& pol, Stats* stats) {
  static_assert(FlashPolicy<Policy>,
                "a flash policy needs the DensePolicy hooks with their signatures (derive from "
                "DensePolicy and override what changes)");
  const PackedKVData* packed = p.packed;
  PackedKVData own;
  if (!packed) {
    PackInto(own, OperandsHere(p.q.dtype, p.bf16_dot), p.k, p.v, p.threads);
    packed = &own;
  }
#if HWY_TARGET == HWY_AVX3
  if (packed->ops == Operands::bf16_dot) {
    RunFlashOps<Bf16DotOps>(p, pol, *packed, stats);
    return;
  }
#endif
  SPATTN_CHECK(packed->ops == Operands::f32,
               "this K/V was packed for bf16 dot products, which the SIMD target now running "
               "lacks: pack it again");
  RunFlashOps<F32Ops>(p, pol, *packed, stats);
}

}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
