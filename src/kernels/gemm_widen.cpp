// gemm_widen_pack / gemm_widen_run (gemm_widen.hpp), compiled once per SIMD target and
// dispatched.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gemm_widen.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "hwy/highway.h"
#include "kernels/gemm_widen.hpp"
#if HWY_ARCH_X86
#include <immintrin.h>
#endif
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"

#ifndef SPATTN_GEMM_WIDEN_SHARED
#define SPATTN_GEMM_WIDEN_SHARED
namespace spattn::kernels::gemm_widen_detail {
constexpr int64_t kPanel = 32;   // activation rows a panel (the tile's vector side)
constexpr int64_t kBlockK = 256;  // columns a weight block is widened for, then reused
constexpr int64_t kRowsN = 512;   // activation rows a pass keeps its accumulators for (L2)
constexpr int64_t kTilesM = 16;   // weight tiles a pass over one block of columns serves (16:
                                  // k = 8192 took 8% less time than with 8)
inline int64_t panels(int64_t n) { return (n + kPanel - 1) / kPanel; }
// Where panel p's columns [t0, t0 + kc) start in the packed rows, of np panels: block by block
// (every panel's slice of one block of columns together, so a pass over a block reads one
// contiguous run rather than np runs a panel's length apart, which on k = 8192 put them in
// the same L2 sets), kc x 32 floats a slice.
inline int64_t slice(int64_t np, int64_t p, int64_t t0, int64_t kc) {
  return (t0 * np + p * kc) * kPanel;
}
}  // namespace spattn::kernels::gemm_widen_detail
#endif

HWY_BEFORE_NAMESPACE();
// The widening decoders, per target.
#include "kernels/weight_widen-inl.h"
namespace spattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace gemm_widen_detail;

// One panel's rows [0, rows) of x (src = its first row), columns [t0, t0 + kc), into its slice
// dst (kc x 32 floats, rows past `rows` zeros), columns [c0, kc) of it one value at a time.
void PackColumns(const float* src, int64_t ldx, int64_t rows, int64_t t0, int64_t c0, int64_t kc,
                 float* dst) {
  // 64 columns at a time: the panel's 32 source rows stay in L1 while the packed side is
  // written in order.
  for (; c0 < kc; c0 += 64) {
    const int64_t c1 = std::min(kc, c0 + 64);
    for (int64_t c = c0; c < c1; ++c) {
      float* d = dst + c * kPanel;
      int64_t j = 0;
      for (; j < rows; ++j) d[j] = src[j * ldx + t0 + c];
      for (; j < kPanel; ++j) d[j] = 0.0f;
    }
  }
}

#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
using DF = hn::ScalableTag<float>;
constexpr int64_t kLanes = int64_t(hn::MaxLanes(DF()));
constexpr int kVecs = int(kPanel / kLanes);  // vectors a panel row of the tile spans
// Accumulators: 24 where the target has 32 vector registers, else 12 (AVX2's 16).
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr int kAcc = 12;
#else
constexpr int kAcc = 24;
#endif
constexpr int kRowsM = kAcc / kVecs > 0 ? kAcc / kVecs : 1;  // MR: weight rows a tile
#else
constexpr int kRowsM = 1;
#endif

// Widens rows [m0, m0 + kRowsM) of w, columns [t0, t0 + kc), into wc (kBlockK floats a row;
// rows past m are zeros, so the tile needs no row tail).
void Widen(const WeightRows& w, int64_t m0, int64_t t0, int64_t kc, float* wc) {
  for (int64_t i = 0; i < kRowsM; ++i) {
    float* d = wc + i * kBlockK;
    if (m0 + i >= w.m)
      std::memset(d, 0, sizeof(float) * size_t(kc));
    else
      WidenRow(w, m0 + i, t0, kc, d);
  }
}

// The tile: ct[i][j] (+)= sum over t < kc of wc[i][t] xp[t][j] for i < kRowsM and the panel's
// first NV x Lanes(D) rows j. Every variant runs the same per-lane chain (one fused
// multiply-add a t, in order), so a row's result does not depend on the tile that holds it:
// a partial panel takes a narrower variant (a prompt's last few rows, or a short prompt) with
// the same bits as a full one.
#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR
template <class D, int NV>
HWY_INLINE void Tile(const float* xp, const float* wc, int64_t kc, float* ct, int64_t ldct,
                     bool first) {
  const D d;
  using V = hn::Vec<D>;
  constexpr int64_t L = int64_t(hn::MaxLanes(D()));
  V acc[kRowsM][NV];
  for (int i = 0; i < kRowsM; ++i)
    for (int v = 0; v < NV; ++v)
      acc[i][v] = first ? hn::Zero(d) : hn::LoadU(d, ct + i * ldct + v * L);
  for (int64_t t = 0; t < kc; ++t) {
    V xv[NV];
    for (int v = 0; v < NV; ++v) xv[v] = hn::LoadU(d, xp + t * kPanel + v * L);
    for (int i = 0; i < kRowsM; ++i) {
      const V wv = hn::Set(d, wc[i * kBlockK + t]);
      for (int v = 0; v < NV; ++v) acc[i][v] = hn::MulAdd(wv, xv[v], acc[i][v]);
    }
  }
  for (int i = 0; i < kRowsM; ++i)
    for (int v = 0; v < NV; ++v) hn::StoreU(acc[i][v], d, ct + i * ldct + v * L);
}

// The narrowest tile covering `rows` (<= kPanel) of the panel: whole vectors, then half and
// quarter vectors below one.
template <int NV = kVecs>
HWY_INLINE void TileRows(int64_t rows, const float* xp, const float* wc, int64_t kc, float* ct,
                         int64_t ldct, bool first) {
  if constexpr (NV > 1) {
    if (rows <= (NV - 1) * kLanes) return TileRows<NV - 1>(rows, xp, wc, kc, ct, ldct, first);
  } else {
    if constexpr (kLanes >= 8) {
      if (rows <= kLanes / 4)
        return Tile<hn::CappedTag<float, kLanes / 4>, 1>(xp, wc, kc, ct, ldct, first);
      if (rows <= kLanes / 2)
        return Tile<hn::CappedTag<float, kLanes / 2>, 1>(xp, wc, kc, ct, ldct, first);
    }
  }
  Tile<DF, NV>(xp, wc, kc, ct, ldct, first);
}
#else
HWY_INLINE void TileRows(int64_t rows, const float* xp, const float* wc, int64_t kc, float* ct,
                         int64_t ldct, bool first) {
  for (int64_t j = 0; j < rows; ++j) {
    float s = first ? 0.0f : ct[j];
    for (int64_t t = 0; t < kc; ++t) s += wc[t] * xp[t * kPanel + j];
    ct[j] = s;
  }
  (void)ldct;
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// Calls of fewer than 128 rows (a prompt's last rows, a short chat turn): the tile above would
// spend most of its lanes on a panel's zero rows and widen every weight for a few uses (about
// 4x ggml's time at 2 rows). Here the lanes run along the weights instead: each 16 x 32 block
// of f16 weights is transposed in registers as 16 x 16 pairs and widened, and each activation
// value is broadcast. Per output the chain is the tile's (one fused multiply-add a column, in
// order, from zero, of the same two floats), so a row's bits do not change with the path.
// AVX-512 only (its in-register transpose); other targets take the tile.
constexpr bool kRowPath = true;
// Below 128 rows the row path; from 128 the tile, which there is 10-20% faster than ggml. The
// row path against ggml on two threads (8192 x 2048): 1.5x its time at 2 rows, 0.95-1.07x
// at 8-96; the tile is no faster there (BENCHMARKS.md, "Prefill's f16 products").
constexpr int64_t kRowPathBelow = 128;

// r[i] = row i of a 16 x 16 block; afterwards r[j] = column j.
HWY_INLINE void Transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {  // pairs of rows interleaved within 128-bit blocks
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  __m512 u[16];  // u[4g + c]: block b holds column 4b + c of rows 4g..4g+3
  for (int g = 0; g < 4; ++g) {
    const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]),
                  cc = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, cc));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, cc));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int c = 0; c < 4; ++c) {  // 4 x 4 transpose of 128-bit blocks
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
    const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[8 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

// PackColumns over 16 columns at a time: each 16-row group of the panel loaded as rows and
// transposed in registers into 16 of the slice's columns (the same values, moved: 1B f16 at 16
// rows spent about 2% of its prefill in the value-by-value loop).
void PackSlice(const float* src, int64_t ldx, int64_t rows, int64_t t0, int64_t kc, float* dst) {
  int64_t c = 0;
  for (; c + 16 <= kc; c += 16) {
    for (int64_t r0 = 0; r0 < kPanel; r0 += 16) {
      __m512 v[16];
      for (int64_t i = 0; i < 16; ++i)
        v[i] = r0 + i < rows ? _mm512_loadu_ps(src + (r0 + i) * ldx + t0 + c) : _mm512_setzero_ps();
      if (r0 < rows) Transpose16(v);
      for (int j = 0; j < 16; ++j) _mm512_storeu_ps(dst + (c + j) * kPanel + r0, v[j]);
    }
  }
  PackColumns(src, ldx, rows, t0, c, kc, dst);
}

// The f16 pairs (t + 2j, t + 2j + 1), j < 16, of the 16 weight rows at row[0..16), transposed
// in registers: v[j] holds row i's pair in lane i.
HWY_INLINE void LoadPairs(const uint16_t* const row[16], int64_t t, __m512 v[16]) {
  for (int i = 0; i < 16; ++i) {
    // Sixteen streams 4 KiB apart outrun the hardware prefetchers: ask for the lines eight
    // steps ahead.
    _mm_prefetch(reinterpret_cast<const char*>(row[i] + t + 8 * 32), _MM_HINT_T0);
    v[i] = _mm512_castsi512_ps(_mm512_loadu_si512(row[i] + t));
  }
  Transpose16(v);
}

// Pair vector -> the 16 rows' weights at its first (half 0) or second (half 1) column.
HWY_INLINE __m512 WidenHalf(__m512i v, int half) {
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(half ? _mm512_srli_epi32(v, 16) : v));
}

// The 16 rows' weights at column t, one by one: a block's columns past a multiple of 32.
HWY_INLINE __m512 WeightColumn(const uint16_t* const row[16], int64_t t) {
  HWY_ALIGN float col[16];
  for (int i = 0; i < 16; ++i) col[i] = f16_to_f32(row[i][t]);
  return _mm512_load_ps(col);
}

// x[r0][t] in the packed rows: panel r0 / 32's slice of t's block of columns; rows r0.. follow
// it, and t + 1 is 32 floats on within the block.
HWY_INLINE const float* XColumn(const float* xp, int64_t np, int64_t r0, int64_t k, int64_t t) {
  const int64_t t0 = t / kBlockK * kBlockK;
  return xp + slice(np, r0 / kPanel, t0, std::min(kBlockK, k - t0)) + (t - t0) * kPanel +
         r0 % kPanel;
}

// Stores acc[r] (16 weight rows from m0) for the rows r0 + r < n.
template <int R>
HWY_INLINE void StoreRows(const __m512* acc, int64_t n, int64_t r0, int64_t m, int64_t m0,
                          float* c, int64_t ldc) {
  const int64_t cols = std::min<int64_t>(16, m - m0);
  for (int64_t r = 0; r < std::min<int64_t>(R, n - r0); ++r) {
    float* dst = c + (r0 + r) * ldc + m0;
    if (cols == 16) {
      _mm512_storeu_ps(dst, acc[r]);
    } else {
      HWY_ALIGN float tmp[16];
      _mm512_store_ps(tmp, acc[r]);
      std::copy_n(tmp, cols, dst);
    }
  }
}

// acc[r] = sum over t < k of w[m0 + i][t] x[r0 + r][t] (row[i] = w's row m0 + i), the chain in
// t order, for the R activation rows from r0 (within one panel): each 32-column block of the
// 16 weight rows is transposed and used in registers.
template <int R>
HWY_INLINE void RowTile(const uint16_t* const row[16], const float* xp, int64_t np, int64_t r0,
                        int64_t k, __m512 acc[R]) {
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t t = 0;
  for (; t + 32 <= k; t += 32) {
    __m512 v[16];
    LoadPairs(row, t, v);
    const float* xa = XColumn(xp, np, r0, k, t);
    for (int j = 0; j < 16; ++j) {
      const __m512 lo = WidenHalf(_mm512_castps_si512(v[j]), 0);
      const __m512 hi = WidenHalf(_mm512_castps_si512(v[j]), 1);
      const float* x0 = xa + 2 * j * kPanel;
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(lo, _mm512_set1_ps(x0[r]), acc[r]);
      for (int r = 0; r < R; ++r)
        acc[r] = _mm512_fmadd_ps(hi, _mm512_set1_ps(x0[kPanel + r]), acc[r]);
    }
  }
  for (; t < k; ++t) {
    const __m512 wv = WeightColumn(row, t);
    const float* x0 = XColumn(xp, np, r0, k, t);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x0[r]), acc[r]);
  }
}

// The rows from r0 (at most 16 of them) in one pass, as few accumulators as cover them; rows
// past n read the panel's zero rows and are not stored.
void RowPass(const uint16_t* const row[16], const float* xp, int64_t n, int64_t k, float* c,
             int64_t ldc, int64_t m, int64_t m0, int64_t r0) {
  const auto run = [&](auto rows) {
    constexpr int R = decltype(rows)::value;
    __m512 acc[R];
    RowTile<R>(row, xp, panels(n), r0, k, acc);
    StoreRows<R>(acc, n, r0, m, m0, c, ldc);
  };
  const int64_t left = std::min<int64_t>(16, n - r0);
  if (left <= 2) return run(std::integral_constant<int, 2>());
  if (left <= 4) return run(std::integral_constant<int, 4>());
  if (left <= 8) return run(std::integral_constant<int, 8>());
  run(std::integral_constant<int, 16>());
}

// Continues the sums of R activation rows (x[r][t] at xa[r], the next column 32 floats on) over
// one 32-column block whose 16 weight rows are widened in wl[j], wh[j] (columns 2j, 2j + 1).
template <int R>
HWY_INLINE void BlockRows(const __m512* wl, const __m512* wh, const float* xa, __m512 acc[R]) {
  for (int j = 0; j < 16; ++j) {
    const float* x0 = xa + 2 * j * kPanel;
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(wl[j], _mm512_set1_ps(x0[r]), acc[r]);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_fmadd_ps(wh[j], _mm512_set1_ps(x0[kPanel + r]), acc[r]);
  }
}

// 17 to 32 rows: per tile of 16 weight rows, each 32-column block transposed once and widened
// into 2 KiB on the stack (L1), then rows 0-15 and the rest in turn read it, each group's sums
// waiting in memory while the other's run.
template <int R2>
void RowsTwo(const uint16_t* const row[16], const float* xp, int64_t n, int64_t k, float* c,
             int64_t ldc, int64_t m, int64_t m0) {
  HWY_ALIGN float sums[(16 + R2) * 16];
  auto* acc_mem = reinterpret_cast<__m512*>(sums);
  for (int r = 0; r < 16 + R2; ++r) acc_mem[r] = _mm512_setzero_ps();
  int64_t t = 0;
  for (; t + 32 <= k; t += 32) {
    __m512 v[16];
    LoadPairs(row, t, v);
    HWY_ALIGN __m512 wl[16], wh[16];
    for (int j = 0; j < 16; ++j) {
      wl[j] = WidenHalf(_mm512_castps_si512(v[j]), 0);
      wh[j] = WidenHalf(_mm512_castps_si512(v[j]), 1);
    }
    const float* xa = XColumn(xp, 1, 0, k, t);
    {
      __m512 acc[16];
      for (int r = 0; r < 16; ++r) acc[r] = acc_mem[r];
      BlockRows<16>(wl, wh, xa, acc);
      for (int r = 0; r < 16; ++r) acc_mem[r] = acc[r];
    }
    __m512 acc[R2];
    for (int r = 0; r < R2; ++r) acc[r] = acc_mem[16 + r];
    BlockRows<R2>(wl, wh, xa + 16, acc);
    for (int r = 0; r < R2; ++r) acc_mem[16 + r] = acc[r];
  }
  for (; t < k; ++t) {
    const __m512 wv = WeightColumn(row, t);
    const float* x0 = XColumn(xp, 1, 0, k, t);
    for (int r = 0; r < 16 + R2; ++r)
      acc_mem[r] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x0[r]), acc_mem[r]);
  }
  StoreRows<16 + R2>(acc_mem, n, 0, m, m0, c, ldc);
}

// Up to 32 rows: per tile of 16 weight rows, one pass from the registers (up to 16 rows), or
// the two groups of RowsTwo (keeping a whole tile's block for a second pass instead, in L2,
// or transposing it again, measured slower: 20-token prompts 0.74x and 0.83x of llama.cpp
// against 0.94x).
void RowsFew(const uint16_t* w, int64_t ldw, int64_t m, const float* xp, int64_t n, int64_t k,
             float* c, int64_t ldc, int64_t tb, int64_t te) {
  for (int64_t tt = tb; tt < te; ++tt) {
    const int64_t m0 = tt * 16;
    const uint16_t* row[16];
    for (int i = 0; i < 16; ++i) row[i] = w + std::min(m0 + i, m - 1) * ldw;  // past m: repeat
    if (n <= 16)
      RowPass(row, xp, n, k, c, ldc, m, m0, 0);
    else if (n <= 20)
      RowsTwo<4>(row, xp, n, k, c, ldc, m, m0);
    else if (n <= 24)
      RowsTwo<8>(row, xp, n, k, c, ldc, m, m0);
    else
      RowsTwo<16>(row, xp, n, k, c, ldc, m, m0);
  }
}

// More than 32 rows: per tile of 32 weight rows and block of kRowBlock columns, the block's
// transposed pairs are kept (kRowBlock / 32 x 2 x 16 vectors, 128 KiB, in L2), then passes of
// R rows read them, each broadcast value feeding both 16-row halves (two multiply-adds a
// broadcast, as the tile's loop). Between blocks a pass's sums wait in C (exact f32).
constexpr int64_t kRowBlock = 2048;  // columns a tile's pairs are kept for (k = 8192 whole, the
                                     // pairs falling out of L2: 1.16x ggml's time at 100 rows
                                     // against 1.07x)

template <int R>
HWY_INLINE void WidePass(const __m512i* pairs, const float* xp, int64_t np, int64_t r0,
                         int64_t k, int64_t t0, int64_t t1, const uint16_t* const row[32],
                         __m512 acc[2][R]) {
  int64_t t = t0;
  for (; t + 32 <= t1; t += 32) {
    const __m512i* p = pairs + ((t - t0) / 32) * 32;
    const float* xa = XColumn(xp, np, r0, k, t);
    for (int j = 0; j < 16; ++j) {
      const __m512i p0 = _mm512_load_si512(p + j), p1 = _mm512_load_si512(p + 16 + j);
      const float* x0 = xa + 2 * j * kPanel;
      const __m512 lo0 = WidenHalf(p0, 0), lo1 = WidenHalf(p1, 0);
      for (int r = 0; r < R; ++r) {
        const __m512 a = _mm512_set1_ps(x0[r]);
        acc[0][r] = _mm512_fmadd_ps(lo0, a, acc[0][r]);
        acc[1][r] = _mm512_fmadd_ps(lo1, a, acc[1][r]);
      }
      const __m512 hi0 = WidenHalf(p0, 1), hi1 = WidenHalf(p1, 1);
      for (int r = 0; r < R; ++r) {
        const __m512 b = _mm512_set1_ps(x0[kPanel + r]);
        acc[0][r] = _mm512_fmadd_ps(hi0, b, acc[0][r]);
        acc[1][r] = _mm512_fmadd_ps(hi1, b, acc[1][r]);
      }
    }
  }
  for (; t < t1; ++t) {  // the last block's columns past a multiple of 32
    const float* x0 = XColumn(xp, np, r0, k, t);
    for (int h = 0; h < 2; ++h) {
      const __m512 wv = WeightColumn(row + 16 * h, t);
      for (int r = 0; r < R; ++r)
        acc[h][r] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x0[r]), acc[h][r]);
    }
  }
}

void RowsMany(const uint16_t* w, int64_t ldw, int64_t m, const float* xp, int64_t n, int64_t k,
              float* c, int64_t ldc, int64_t tb, int64_t te) {
  constexpr int kR = 8;  // 2 x 8 accumulators
  const int64_t np = panels(n);
  struct Aligned64 {
    alignas(64) uint32_t v[16];
  };
  thread_local std::vector<Aligned64> pairs_buf;
  pairs_buf.resize(size_t(std::min(k, kRowBlock) / 32 * 32));
  auto* pairs = reinterpret_cast<__m512i*>(pairs_buf.data());
  for (int64_t tt = tb; tt < te; ++tt) {
    const int64_t m0 = tt * 32;
    const uint16_t* row[32];
    for (int i = 0; i < 32; ++i) row[i] = w + std::min(m0 + i, m - 1) * ldw;  // past m: repeat
    // The lanes of each half that are weight rows (C's columns m0 + 16h ...).
    __mmask16 valid[2];
    for (int h = 0; h < 2; ++h) {
      const int64_t cols = std::clamp<int64_t>(m - m0 - 16 * h, 0, 16);
      valid[h] = __mmask16((uint32_t(1) << cols) - 1);
    }
    for (int64_t t0 = 0; t0 < k; t0 += kRowBlock) {
      const int64_t t1 = std::min(k, t0 + kRowBlock);
      for (int64_t t = t0; t + 32 <= t1; t += 32)
        for (int h = 0; h < 2; ++h) {
          __m512 v[16];
          LoadPairs(row + 16 * h, t, v);
          for (int j = 0; j < 16; ++j)
            _mm512_store_si512(pairs + ((t - t0) / 32) * 32 + 16 * h + j,
                               _mm512_castps_si512(v[j]));
        }
      for (int64_t r0 = 0; r0 < n; r0 += kR) {
        const int64_t rows = std::min<int64_t>(kR, n - r0);
        __m512 acc[2][kR];
        for (int h = 0; h < 2; ++h)
          for (int r = 0; r < kR; ++r)
            acc[h][r] = t0 == 0 || r >= rows ? _mm512_setzero_ps()
                                             : _mm512_maskz_loadu_ps(
                                                   valid[h], c + (r0 + r) * ldc + m0 + 16 * h);
        WidePass<kR>(pairs, xp, np, r0, k, t0, t1, row, acc);
        for (int h = 0; h < 2; ++h)
          for (int64_t r = 0; r < rows; ++r)
            _mm512_mask_storeu_ps(c + (r0 + r) * ldc + m0 + 16 * h, valid[h], acc[h][r]);
      }
    }
  }
}

// Splits the weight rows' tiles (16 rows for up to 32 activation rows, else 32) between the
// threads and runs the pass shape that covers n.
void RunRows(const uint16_t* w, int64_t ldw, int64_t m, const float* xp, int64_t n, int64_t k,
             float* c, int64_t ldc, int ith, int nth) {
  const int64_t rows_a_tile = n <= 32 ? 16 : 32, tiles = (m + rows_a_tile - 1) / rows_a_tile;
  const int64_t tb = tiles * ith / nth, te = tiles * (ith + 1) / nth;
  if (n <= 32) return RowsFew(w, ldw, m, xp, n, k, c, ldc, tb, te);
  RowsMany(w, ldw, m, xp, n, k, c, ldc, tb, te);
}
#else
void PackSlice(const float* src, int64_t ldx, int64_t rows, int64_t t0, int64_t kc, float* dst) {
  PackColumns(src, ldx, rows, t0, 0, kc, dst);
}
constexpr bool kRowPath = false;
constexpr int64_t kRowPathBelow = 0;
void RunRows(const uint16_t*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t,
             int, int) {}
#endif

void GemmWidenPack(const float* x, int64_t n, int64_t k, int64_t ldx, float* xp, int ith,
                   int nth) {
  // The threads split (panel, block of columns) pairs: a call of up to 32 rows is one panel,
  // which a split by panels left to one thread while the others waited.
  const int64_t np = panels(n), nb = (k + kBlockK - 1) / kBlockK;
  for (int64_t u = np * nb * ith / nth; u < np * nb * (ith + 1) / nth; ++u) {
    const int64_t p = u / nb, t0 = (u % nb) * kBlockK;
    const int64_t kc = std::min(kBlockK, k - t0);
    PackSlice(x + p * kPanel * ldx, ldx, std::min(kPanel, n - p * kPanel), t0, kc,
              xp + slice(np, p, t0, kc));
  }
}

void GemmWidenRun(const WeightRows& w, const float* xp, int64_t n, int64_t k, float* c,
                  int64_t ldc, int ith, int nth) {
  const int64_t m = w.m;
  if (kRowPath && w.format == WeightFormat::f16 && n < kRowPathBelow)
    return RunRows(static_cast<const uint16_t*>(w.data), w.row_bytes / 2, m, xp, n, k, c, ldc,
                   ith, nth);
  const int64_t tiles = (m + kRowsM - 1) / kRowsM, np = panels(n);
  const int64_t tb = tiles * ith / nth, te = tiles * (ith + 1) / nth;
  if (tb >= te || n <= 0) return;
  constexpr int64_t ldct = kRowsN;
  thread_local std::vector<float> ct_buf, wc_buf;
  ct_buf.resize(size_t(kTilesM * kRowsM * ldct));
  wc_buf.resize(size_t(kRowsM * kBlockK));
  float* ct = ct_buf.data();
  float* wc = wc_buf.data();
  for (int64_t g0 = tb; g0 < te; g0 += kTilesM) {
    const int64_t gt = std::min(kTilesM, te - g0);
    for (int64_t n0 = 0; n0 < n; n0 += kRowsN) {
      const int64_t nn = std::min(kRowsN, n - n0), p0 = n0 / kPanel, p1 = panels(n0 + nn);
      for (int64_t t0 = 0; t0 < k; t0 += kBlockK) {
        const int64_t kc = std::min(kBlockK, k - t0);
        for (int64_t g = 0; g < gt; ++g) {
          Widen(w, (g0 + g) * kRowsM, t0, kc, wc);
          float* cg = ct + g * kRowsM * ldct;
          for (int64_t p = p0; p < p1; ++p)
            TileRows(std::min(kPanel, n0 + nn - p * kPanel), xp + slice(np, p, t0, kc), wc, kc,
                     cg + (p - p0) * kPanel, ldct, t0 == 0);
        }
      }
      for (int64_t g = 0; g < gt; ++g) {
        const int64_t j0 = (g0 + g) * kRowsM, mr = std::min<int64_t>(kRowsM, m - j0);
        const float* cg = ct + g * kRowsM * ldct;
        for (int64_t r = 0; r < nn; ++r)
          for (int64_t i = 0; i < mr; ++i) c[(n0 + r) * ldc + j0 + i] = cg[i * ldct + r];
      }
    }
  }
}

void GemmWidenRows(const WeightRows& w, int64_t r0, int64_t rows, int64_t t0, int64_t kc,
                   float* dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r) WidenRow(w, r0 + r, t0, kc, dst + r * ldd);
}

// gemm_widen_min_rows on this target: from how many rows the tile (or, f16 on AVX-512, the row
// path) beats ggml's product of the format, 0 where it does not (two threads, 8192 x 2048;
// BENCHMARKS.md, "Prefill's quantized products" and "...on AVX2"). AVX-512: f16 from two rows,
// where ggml too leaves its vector product for tinyBLAS (the row path below 128 rows, 1.5x
// ggml's time at 2 rows, even from 8); the quantized formats from where the tile, which widens
// every weight whatever the row count, pays that back: q8_0 32 (16: 1.22x ggml's time, 32:
// 0.83x), q6_K 16 (8: 1.12x, 16: 0.63x), q5_K 8 (0.97x), q3_K 16 (8: 1.20x, 16: 0.75x); at 128
// rows 0.72x, 0.42x, 0.30x and 0.30x. AVX2 (measured as AVX2 code on the Zen 5's cores, with
// llama.cpp's AVX2 build of ggml): ggml's tinyBLAS keeps f16 and q8_0 (0.83-0.97x the tile's
// time at 512 rows), the K-quants come here from 32 rows (20: 1.03-1.07x ggml's time,
// 32: 0.76-0.83x; 512: q6_K 0.69x, q5_K 0.60x, q3_K 0.55x). Other targets: ggml's.
int64_t MinRowsHere(WeightFormat f) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  switch (f) {
    case WeightFormat::f16: return 2;
    case WeightFormat::q8_0: return 32;
    case WeightFormat::q6_K: return 16;
    case WeightFormat::q5_K: return 8;
    case WeightFormat::q3_K: return 16;
  }
  return 0;
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  switch (f) {
    case WeightFormat::f16:
    case WeightFormat::q8_0: return 0;
    case WeightFormat::q6_K:
    case WeightFormat::q5_K:
    case WeightFormat::q3_K: return 32;
  }
  return 0;
#else
  (void)f;
  return 0;
#endif
}

}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spattn::kernels {
HWY_EXPORT(GemmWidenPack);
HWY_EXPORT(GemmWidenRun);
HWY_EXPORT(GemmWidenRows);
HWY_EXPORT(MinRowsHere);

std::optional<WeightFormat> widen_format(gguf::GgmlType t) {
  for (WeightFormat f : kWeightFormats)
    if (traits(f).ggml_id == uint32_t(t)) return f;
  return std::nullopt;
}

void gemm_widen_check(const WeightRows& w, int64_t k) {
  const StorageTraits& f = traits(w.format);  // its values and bytes a block
  // A format of single values (f16) is read value by value: its rows start on one.
  SPATTN_CHECK(k % f.block == 0 && w.row_bytes >= k / f.block * f.block_bytes &&
                   (f.block > 1 || w.row_bytes % f.block_bytes == 0),
               "gemm_widen: ", w.m, " rows of ", k, " values in format ", f.name, " with ",
               w.row_bytes, " bytes a row");
}

int64_t gemm_widen_packed_floats(int64_t n, int64_t k) {
  return gemm_widen_detail::panels(n) * gemm_widen_detail::kPanel * k;
}

void gemm_widen_pack(const float* x, int64_t n, int64_t k, int64_t ldx, float* xp, int ith,
                     int nth) {
  HWY_DYNAMIC_DISPATCH(GemmWidenPack)(x, n, k, ldx, xp, ith, nth);
}

void gemm_widen_run(const WeightRows& w, const float* xp, int64_t n, int64_t k, float* c,
                    int64_t ldc, int ith, int nth) {
  gemm_widen_check(w, k);
  HWY_DYNAMIC_DISPATCH(GemmWidenRun)(w, xp, n, k, c, ldc, ith, nth);
}

void gemm_widen_rows(const WeightRows& w, int64_t k, int64_t r0, int64_t rows, int64_t t0,
                     int64_t kc, float* dst, int64_t ldd) {
  gemm_widen_check(w, k);
  SPATTN_CHECK(r0 >= 0 && rows >= 0 && r0 + rows <= w.m && t0 >= 0 && kc >= 0 && t0 + kc <= k,
               "gemm_widen_rows: rows [", r0, ", ", r0 + rows, ") columns [", t0, ", ", t0 + kc,
               ") outside ", w.m, " x ", k);
  HWY_DYNAMIC_DISPATCH(GemmWidenRows)(w, r0, rows, t0, kc, dst, ldd);
}

int64_t gemm_widen_min_rows(WeightFormat f) {
  return HWY_DYNAMIC_DISPATCH(MinRowsHere)(f);
}
}  // namespace spattn::kernels
#endif
