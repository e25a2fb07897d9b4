// The bf16 product's loops on AVX512_BF16 (gemm_bf16.hpp): per column pair, two vdpbf16ps an
// activation row, each adding the pair's two products to 16 of the tile's 32 weight rows (the
// row's pair of bf16 broadcast from memory). Up to 8 activation rows at a time share each pair's
// two weight vectors: 16 f32 accumulators (vdpbf16ps's latency times its two a cycle on Zen 5)
// stay in registers over the tile's pairs (up to 1024). And the activations' rounding to bf16, ggml's
// integer rule on 16 lanes. The functions carry their own target attribute and run only where
// the CPU reports AVX512_BF16, so the file builds for any x86-64 baseline.
#include "kernels/gemm_bf16_tile.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cstring>

// GCC 12's intrinsics pass _mm512_undefined_*() as the unused merge operand of unmasked
// conversions, which -Wuninitialized reports in a function with its own target attribute.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define SPATTN_BF16_ATTR \
  __attribute__((target("avx2,fma,avx512f,avx512vl,avx512bw,avx512dq,avx512bf16")))

namespace spattn::kernels::gemm_bf16_detail {
namespace {

template <int R>
SPATTN_BF16_ATTR void rows_r(const TilePair* t, int64_t np, const uint16_t* xb, int64_t k,
                             int64_t p0, int64_t r0, float* c, int64_t ldc, int64_t m0, int mrows,
                             bool first) {
  const __mmask16 mlo = __mmask16(mrows >= 16 ? 0xffffu : (1u << mrows) - 1u);
  const __mmask16 mhi = __mmask16(mrows <= 16 ? 0u : (1u << (mrows - 16)) - 1u);
  const uint16_t* x[R];
  __m512 lo[R], hi[R];
  for (int r = 0; r < R; ++r) {
    x[r] = xb + (r0 + r) * k + 2 * p0;
    const float* cr = c + (r0 + r) * ldc + m0;
    lo[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mlo, cr);
    hi[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mhi, cr + 16);
  }
  for (int64_t p = 0; p < np; ++p) {
    const __m512bh w0 = (__m512bh)_mm512_load_si512(t[p].w[0]);
    const __m512bh w1 = (__m512bh)_mm512_load_si512(t[p].w[1]);
    for (int r = 0; r < R; ++r) {
      int32_t x2;
      std::memcpy(&x2, x[r] + 2 * p, 4);
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(x2);
      lo[r] = _mm512_dpbf16_ps(lo[r], xv, w0);
      hi[r] = _mm512_dpbf16_ps(hi[r], xv, w1);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* cr = c + (r0 + r) * ldc + m0;
    _mm512_mask_storeu_ps(cr, mlo, lo[r]);
    _mm512_mask_storeu_ps(cr + 16, mhi, hi[r]);
  }
}

SPATTN_BF16_ATTR void rows_bf16(const TilePair* t, int64_t np, const uint16_t* xb, int64_t k,
                                int64_t p0, int64_t r0, int64_t rows, float* c, int64_t ldc,
                                int64_t m0, int mrows, bool first) {
  constexpr int R = 8;
  int64_t r = r0;
  for (; r + R <= r0 + rows; r += R) rows_r<R>(t, np, xb, k, p0, r, c, ldc, m0, mrows, first);
  switch (r0 + rows - r) {
    case 7: return rows_r<7>(t, np, xb, k, p0, r, c, ldc, m0, mrows, first);
    case 6: return rows_r<6>(t, np, xb, k, p0, r, c, ldc, m0, mrows, first);
    case 5: return rows_r<5>(t, np, xb, k, p0, r, c, ldc, m0, mrows, first);
    case 4: return rows_r<4>(t, np, xb, k, p0, r, c, ldc, m0, mrows, first);
    case 3: return rows_r<3>(t, np, xb, k, p0, r, c, ldc, m0, mrows, first);
    case 2: return rows_r<2>(t, np, xb, k, p0, r, c, ldc, m0, mrows, first);
    case 1: return rows_r<1>(t, np, xb, k, p0, r, c, ldc, m0, mrows, first);
    default: return;
  }
}

// 16 rows of 16 dwords (rows[i] at r + i rb) transposed into 16 vectors, vector j holding
// dword j of each row: 32-bit and 64-bit unpacks (within 128-bit lanes), then two rounds of
// 128-bit lane shuffles.
SPATTN_BF16_ATTR inline void transpose16(const uint8_t* r, int64_t rb, __m512i out[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    const __m512i a = _mm512_loadu_si512(r + i * rb), b = _mm512_loadu_si512(r + (i + 1) * rb);
    t[i] = _mm512_unpacklo_epi32(a, b);  // a0 b0 a1 b1 in each lane
    t[i + 1] = _mm512_unpackhi_epi32(a, b);
  }
  for (int j = 0; j < 16; j += 4) {  // u[j + c], lane L: rows j..j+3 at dword 4 L + c
    u[j] = _mm512_unpacklo_epi64(t[j], t[j + 2]);
    u[j + 1] = _mm512_unpackhi_epi64(t[j], t[j + 2]);
    u[j + 2] = _mm512_unpacklo_epi64(t[j + 1], t[j + 3]);
    u[j + 3] = _mm512_unpackhi_epi64(t[j + 1], t[j + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // lane L of out[4 L + c]: u[4 j + c]'s lane L, j = 0..3
    const __m512i s0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
    const __m512i s1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
    const __m512i s2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i s3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    out[c] = _mm512_shuffle_i32x4(s0, s2, 0x88);
    out[4 + c] = _mm512_shuffle_i32x4(s0, s2, 0xDD);
    out[8 + c] = _mm512_shuffle_i32x4(s1, s3, 0x88);
    out[12 + c] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
  }
}

// The tile of 32 whole rows: 16 pairs of 16 rows at a time by transposes, a tail of fewer than
// 16 pairs one dword at a time (the portable unpack's copies).
SPATTN_BF16_ATTR void unpack_bf16(const uint8_t* rows, int64_t rb, int64_t p0, int64_t np,
                                  TilePair* t) {
  int64_t p = 0;
  for (; p + 16 <= np; p += 16)
    for (int h = 0; h < 2; ++h) {
      __m512i v[16];
      transpose16(rows + 16 * h * rb + 4 * (p0 + p), rb, v);
      for (int j = 0; j < 16; ++j) _mm512_store_si512(t[p + j].w[h], v[j]);
    }
  for (int i = 0; i < 32; ++i)
    for (int64_t q = p; q < np; ++q)
      std::memcpy(&t[q].w[i / 16][i % 16], rows + i * rb + 4 * (p0 + q), 4);
}

// ggml's GGML_FP32_TO_BF16 on 16 lanes: (u + 0x7fff + bit 16 of u) >> 16, a NaN's top half with
// the quiet bit set instead (vcvtneps2bf16 would also round ties to even, but it takes
// subnormal inputs as zero, which ggml's rounding does not).
SPATTN_BF16_ATTR void round_row_bf16(const float* x, int64_t k, uint16_t* y) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i quiet = _mm512_set1_epi32(64);
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    const __m512i u = _mm512_loadu_si512(x + i);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(hi, one))), 16);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtepi32_epi16(r));
  }
  for (; i < k; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    y[i] = (u & 0x7fffffffu) > 0x7f800000u ? uint16_t((u >> 16) | 64)
                                           : uint16_t((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
  }
}

bool cpu_has_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bf16");
}

bool has_bf16() {
  static const bool has = cpu_has_bf16();
  return has;
}

}  // namespace

RowsFn avx512bf16_rows() { return has_bf16() ? &rows_bf16 : nullptr; }
RoundRowFn avx512bf16_round_row() { return has_bf16() ? &round_row_bf16 : nullptr; }
UnpackFn avx512bf16_unpack() { return has_bf16() ? &unpack_bf16 : nullptr; }

}  // namespace spattn::kernels::gemm_bf16_detail

#else

namespace spattn::kernels::gemm_bf16_detail {
RowsFn avx512bf16_rows() { return nullptr; }
RoundRowFn avx512bf16_round_row() { return nullptr; }
UnpackFn avx512bf16_unpack() { return nullptr; }
}  // namespace spattn::kernels::gemm_bf16_detail

#endif
