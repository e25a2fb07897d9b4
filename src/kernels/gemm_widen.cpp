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
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"

#ifndef SPATTN_GEMM_WIDEN_SHARED
#define SPATTN_GEMM_WIDEN_SHARED
namespace spattn::kernels::gemm_widen_detail {
constexpr int64_t kPanel = 32;    // activation rows a panel (the tile's vector side)
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

}  // namespace spattn::kernels::HWY_NAMESPACE
// f16's row path (AVX-512 intrinsics; PackSlice, RunRows and kRowPath on every target).
#include "kernels/gemm_widen_avx512-inl.h"
namespace spattn::kernels::HWY_NAMESPACE {

void GemmWidenPack(const float* x, int64_t n, int64_t k, int64_t ldx, float* xp, int ith, int nth) {
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

void GemmWidenRun(const WeightRows& w, const float* xp, int64_t n, int64_t k, float* c, int64_t ldc,
                  int ith, int nth) {
  const int64_t m = w.m;
  if (kRowPath && w.format == WeightFormat::f16 && n < kRowPathBelow)
    return RunRows(static_cast<const uint16_t*>(w.data), w.row_bytes / 2, m, xp, n, k, c, ldc, ith,
                   nth);
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

int64_t gemm_widen_min_rows(WeightFormat f) { return HWY_DYNAMIC_DISPATCH(MinRowsHere)(f); }
}  // namespace spattn::kernels
#endif
