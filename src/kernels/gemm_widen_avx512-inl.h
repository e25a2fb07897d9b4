// The prefill product's row path for f16 weights on AVX-512 (gemm_widen.cpp, which includes
// this file once per SIMD target inside its HWY_BEFORE_NAMESPACE region): the one place the
// product uses raw AVX-512 intrinsics (an in-register 16 x 16 transpose Highway has no
// operation for), compiled only for the AVX3 targets of Highway's per-target dispatch. Every
// other target gets the stubs at the end (kRowPath false: the tile takes every call).

#if defined(SPATTN_KERNELS_GEMM_WIDEN_AVX512_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPATTN_KERNELS_GEMM_WIDEN_AVX512_INL_H_
#undef SPATTN_KERNELS_GEMM_WIDEN_AVX512_INL_H_
#else
#define SPATTN_KERNELS_GEMM_WIDEN_AVX512_INL_H_
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#include <immintrin.h>
#endif

namespace spattn::kernels::HWY_NAMESPACE {
using namespace gemm_widen_detail;

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
HWY_INLINE void StoreRows(const __m512* acc, int64_t n, int64_t r0, int64_t m, int64_t m0, float* c,
                          int64_t ldc) {
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
HWY_INLINE void WidePass(const __m512i* pairs, const float* xp, int64_t np, int64_t r0, int64_t k,
                         int64_t t0, int64_t t1, const uint16_t* const row[32], __m512 acc[2][R]) {
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
      for (int r = 0; r < R; ++r) acc[h][r] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x0[r]), acc[h][r]);
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
            acc[h][r] = t0 == 0 || r >= rows
                            ? _mm512_setzero_ps()
                            : _mm512_maskz_loadu_ps(valid[h], c + (r0 + r) * ldc + m0 + 16 * h);
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

}  // namespace spattn::kernels::HWY_NAMESPACE

#endif  // include guard
