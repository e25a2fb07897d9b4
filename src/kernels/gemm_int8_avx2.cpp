// The integer product's block loops on 256-bit vectors (gemm_int8.hpp), for CPUs without AVX-512
// VNNI: with AVX-VNNI's vpdpbusd (VEX-encoded, 8 lanes) where the CPU has it, else on AVX2's
// vpmaddubsw + vpmaddwd. The tile (gemm_int8_tile.hpp) is the AVX-512 loops' own: each 64-byte
// column group is two 32-byte halves (rows 0-7, rows 8-15), each half its own pass over the
// blocks with up to 4 activation rows at a time (4 int32 and 4 f32 accumulators, the weight
// vector and its absolute values in 16 registers).
//
// Every block's integer sum is exact on each path, so the outputs are the portable loops' bits:
//  - AVX-VNNI: as the AVX-512 loops, the u8 activations (q + 128) times the s8 weights, the
//    accumulator starting at the tile's correction (-128 times the weights' sum);
//  - AVX2: vpmaddubsw multiplies u8 by s8 and adds pairs into int16 with saturation, which
//    q + 128 (up to 255) times a weight would overflow. So it multiplies |w| (u8, up to 128) by
//    q with w's sign (s8: |q| <= 127, its sign flipped, never overflows): pairs of at most
//    2 x 128 x 127 = 32512 fit int16, and the sum is q w's, the correction not needed.
// The f32 steps are the portable loops' operations in their order. The functions carry their
// own target attributes and run only where the CPU reports the features.
#include "kernels/gemm_int8_tile.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define SPATTN_AVX2_ATTR __attribute__((target("avx2,fma")))
#define SPATTN_AVXVNNI_ATTR __attribute__((target("avx2,fma,avxvnni")))

namespace spattn::kernels::gemm_int8_detail {
namespace {

// One column group's products: acc += 4 activation bytes x4 (u8, q + 128, broadcast) times the
// 8 rows' 4 weights w (|w| in wabs).
struct Avx2Dot {
  static constexpr bool kCorr = false;  // sums q w directly
  SPATTN_AVX2_ATTR static __m256i weights_abs(__m256i w) { return _mm256_abs_epi8(w); }
  SPATTN_AVX2_ATTR static __m256i step(__m256i acc, uint32_t x4, __m256i w, __m256i wabs) {
    const __m256i xs = _mm256_set1_epi32(int32_t(x4 ^ 0x80808080u));  // q as s8
    const __m256i p16 = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(xs, w));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
  }
};

struct AvxVnniDot {
  static constexpr bool kCorr = true;  // sums (q + 128) w from the correction
  SPATTN_AVXVNNI_ATTR static __m256i weights_abs(__m256i w) { return w; }
  SPATTN_AVXVNNI_ATTR static __m256i step(__m256i acc, uint32_t x4, __m256i w, __m256i) {
    return _mm256_dpbusd_avx_epi32(acc, _mm256_set1_epi32(int32_t(x4)), w);
  }
};

// acc[r] = (corr) + row r's products with block bi's column groups [g0, g1), half h.
template <class D, int R>
SPATTN_AVXVNNI_ATTR inline void dots(__m256i acc[R], const TileBlock& t, const int32_t* corr,
                                     const uint8_t* const xq[R], int64_t bi, int h, int g0,
                                     int g1) {
  for (int r = 0; r < R; ++r)
    acc[r] = D::kCorr ? _mm256_load_si256(reinterpret_cast<const __m256i*>(corr + 8 * h))
                      : _mm256_setzero_si256();
  for (int g = g0; g < g1; ++g) {
    const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(t.q + g * 64 + 32 * h));
    const __m256i wabs = D::weights_abs(wv);
    for (int r = 0; r < R; ++r) {
      uint32_t x4;
      __builtin_memcpy(&x4, xq[r] + bi * kBlock + 4 * g, 4);
      acc[r] = D::step(acc[r], x4, wv, wabs);
    }
  }
}

// The AVX2 path runs only where the CPU has AVX2 and FMA; the target list also names avxvnni so
// that one template serves both, and the AVX2 path's code contains no AVX-VNNI instruction.
template <class D, Scaling SC, int R>
SPATTN_AVXVNNI_ATTR void rows_r(const TileBlock* tb, int64_t nbt, const ActRows& a, int64_t b0,
                                int64_t r0, float* c, int64_t ldc, int64_t m0, int mrows,
                                bool first) {
  for (int h = 0; h < 2; ++h) {
    const int lanes = mrows - 8 * h;
    if (lanes <= 0) return;
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), idx);
    const uint8_t* xq[R];
    const float* xd[R];
    const float* xs[R];
    __m256 out[R];
    for (int r = 0; r < R; ++r) {
      xq[r] = a.q(r0 + r) + b0 * kBlock;
      xd[r] = a.d(r0 + r) + b0;
      xs[r] = a.s(r0 + r) + b0;
      out[r] =
          first ? _mm256_setzero_ps() : _mm256_maskload_ps(c + (r0 + r) * ldc + m0 + 8 * h, mask);
    }
    for (int64_t bi = 0; bi < nbt; ++bi) {
      const TileBlock& t = tb[bi];
      __m256i lo[R];
      dots<D, R>(lo, t, t.corr, xq, bi, h, 0, SC == Scaling::halves ? 4 : 8);
      const __m256 s0 = _mm256_load_ps(t.s0 + 8 * h);
      if constexpr (SC == Scaling::halves) {
        __m256i hi[R];
        dots<D, R>(hi, t, t.corr_hi, xq, bi, h, 4, 8);
        const __m256 s1 = _mm256_load_ps(t.s1 + 8 * h);
        for (int r = 0; r < R; ++r) {
          const __m256 part = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi[r]), s1,
                                              _mm256_mul_ps(_mm256_cvtepi32_ps(lo[r]), s0));
          out[r] = _mm256_fmadd_ps(part, _mm256_set1_ps(xd[r][bi]), out[r]);
        }
      } else {
        for (int r = 0; r < R; ++r)
          out[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo[r]),
                                   _mm256_mul_ps(s0, _mm256_set1_ps(xd[r][bi])), out[r]);
        if constexpr (SC == Scaling::min) {
          const __m256 mn = _mm256_load_ps(t.mn + 8 * h);
          for (int r = 0; r < R; ++r)
            out[r] = _mm256_fnmadd_ps(mn, _mm256_set1_ps(xs[r][bi]), out[r]);
        }
      }
    }
    for (int r = 0; r < R; ++r) _mm256_maskstore_ps(c + (r0 + r) * ldc + m0 + 8 * h, mask, out[r]);
  }
}

template <class D, Scaling SC>
SPATTN_AVXVNNI_ATTR void rows_sc(const TileBlock* tb, int64_t nbt, const ActRows& a, int64_t b0,
                                 int64_t r0, int64_t rows, float* c, int64_t ldc, int64_t m0,
                                 int mrows, bool first) {
  constexpr int R = 4;
  int64_t r = r0;
  for (; r + R <= r0 + rows; r += R) rows_r<D, SC, R>(tb, nbt, a, b0, r, c, ldc, m0, mrows, first);
  switch (r0 + rows - r) {
    case 3: return rows_r<D, SC, 3>(tb, nbt, a, b0, r, c, ldc, m0, mrows, first);
    case 2: return rows_r<D, SC, 2>(tb, nbt, a, b0, r, c, ldc, m0, mrows, first);
    case 1: return rows_r<D, SC, 1>(tb, nbt, a, b0, r, c, ldc, m0, mrows, first);
    default: return;
  }
}

template <class D>
void rows_256(Scaling sc, const TileBlock* tb, int64_t nbt, const ActRows& a, int64_t b0,
              int64_t r0, int64_t rows, float* c, int64_t ldc, int64_t m0, int mrows, bool first) {
  switch (sc) {
    case Scaling::plain:
      return rows_sc<D, Scaling::plain>(tb, nbt, a, b0, r0, rows, c, ldc, m0, mrows, first);
    case Scaling::min:
      return rows_sc<D, Scaling::min>(tb, nbt, a, b0, r0, rows, c, ldc, m0, mrows, first);
    case Scaling::halves:
      return rows_sc<D, Scaling::halves>(tb, nbt, a, b0, r0, rows, c, ldc, m0, mrows, first);
  }
}

bool cpu_has(const char* what) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
  return what == nullptr || __builtin_cpu_supports("avxvnni");
}

}  // namespace

RowsFn avx2_rows() {
  static const bool has = cpu_has(nullptr);
  return has ? &rows_256<Avx2Dot> : nullptr;
}
RowsFn avxvnni_rows() {
  static const bool has = cpu_has("avxvnni");
  return has ? &rows_256<AvxVnniDot> : nullptr;
}

}  // namespace spattn::kernels::gemm_int8_detail

#else

namespace spattn::kernels::gemm_int8_detail {
RowsFn avx2_rows() { return nullptr; }
RowsFn avxvnni_rows() { return nullptr; }
}  // namespace spattn::kernels::gemm_int8_detail

#endif
