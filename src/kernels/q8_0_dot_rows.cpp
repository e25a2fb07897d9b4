// Several q8_0 rows' dot products with one activation row, ggml's bits (q8_0_dot_rows.hpp).
// The vector loops carry their own target attributes and run only where the CPU reports the
// features, so the file builds for any x86-64 baseline; its multiplies and multiply-adds are
// explicit, and nothing may be fused besides (CMakeLists.txt: -ffp-contract=off).
#include "kernels/q8_0_dot_rows.hpp"

#include <cmath>
#include <cstring>

#include "ggml-cpu.h"
#include "ggml.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
// GCC 12's intrinsics pass _mm512_undefined_*() as the unused merge operand of unmasked
// conversions, which -Wuninitialized reports in a function with its own target attribute.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define SPATTN_Q8_0_X86 1
#define SPATTN_VNNI_ATTR __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))
#endif

namespace spattn::kernels {
namespace {

constexpr int kBlock = 32;
constexpr int kLanes = 8;  // ggml's accumulator: 8 f32 lanes, 4 products each per block

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return ggml_fp16_to_fp32(h);
}

// ggml's hsum_float_8: the halves added lane by lane, then lanes 0+2 and 1+3, then those two.
float lane_sum(const float a[kLanes]) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

}  // namespace

void q8_0_dot_rows_reference(const void* w, size_t row_bytes, int64_t rows, const void* x,
                             int64_t k, float* y) {
  const auto* xb = static_cast<const uint8_t*>(x);
  const int64_t nb = k / kBlock;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* wr = static_cast<const uint8_t*>(w) + size_t(r) * row_bytes;
    float acc[kLanes] = {};
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* wq = wr + b * kQ8_0BlockBytes;
      const uint8_t* xq = xb + b * kQ8_0BlockBytes;
      const float d = f16_at(wq) * f16_at(xq);
      for (int j = 0; j < kLanes; ++j) {
        int32_t s = 0;
        for (int t = 4 * j; t < 4 * j + 4; ++t)
          s += int32_t(int8_t(wq[2 + t])) * int32_t(int8_t(xq[2 + t]));
        acc[j] = std::fma(d, float(s), acc[j]);
      }
    }
    y[r] = lane_sum(acc);
  }
}

#ifdef SPATTN_Q8_0_X86
namespace {

SPATTN_VNNI_ATTR inline float hsum(__m256 a) {  // lane_sum's order, as ggml's hsum_float_8
  __m128 s = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// R rows from w, each its own accumulator; the activation block and its scale read once. A
// block's 8 lanes of exact integer sums are |w| (u8) times x signed by w, four products a lane in
// one vpdpbusd (ggml's own mul_sum_i8_pairs_float where it has AVX-512 VNNI).
//
// Eight rows side by side are eight streams, more than the hardware prefetcher follows, so each
// step prefetches the same block of the row R rows on, which the next group reads: the reads run
// one group (R rows) ahead in memory, whatever the rows' length. Without prefetching the loops
// read a third as fast as ggml's from memory; 512 bytes ahead within each row left short rows
// slower than ggml's (log entry "q8_0 decode products eight rows at a time"). The last group
// prefetches bytes past the matrix that nothing reads, which is harmless: a prefetch never
// faults.
template <int R>
SPATTN_VNNI_ATTR inline void rows_at_once(const uint8_t* w, size_t row_bytes, const uint8_t* x,
                                          int64_t nb, float* y) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* xq = x + b * kQ8_0BlockBytes;
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 2));
    uint16_t xh;
    std::memcpy(&xh, xq, sizeof xh);
    const float xd = _cvtsh_ss(xh);
    for (int r = 0; r < R; ++r) {
      const uint8_t* wq = w + size_t(r) * row_bytes + b * kQ8_0BlockBytes;
      _mm_prefetch(reinterpret_cast<const char*>(wq + R * row_bytes), _MM_HINT_T0);
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + 2));
      const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(wv, wv),
                                            _mm256_sign_epi8(xv, wv));
      uint16_t wh;
      std::memcpy(&wh, wq, sizeof wh);
      const float d = _cvtsh_ss(wh) * xd;  // ggml: the weight's d times the activation's
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = hsum(acc[r]);
}

SPATTN_VNNI_ATTR void rows_vector(const void* w, size_t row_bytes, int64_t rows, const void* x,
                                  int64_t k, float* y) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  const int64_t nb = k / kBlock;
  int64_t r = 0;
  for (; r + kQ8_0DotRowsAtOnce <= rows; r += kQ8_0DotRowsAtOnce)
    rows_at_once<kQ8_0DotRowsAtOnce>(wb + size_t(r) * row_bytes, row_bytes, xb, nb, y + r);
  const uint8_t* wr = wb + size_t(r) * row_bytes;
  switch (rows - r) {
    case 7: rows_at_once<7>(wr, row_bytes, xb, nb, y + r); break;
    case 6: rows_at_once<6>(wr, row_bytes, xb, nb, y + r); break;
    case 5: rows_at_once<5>(wr, row_bytes, xb, nb, y + r); break;
    case 4: rows_at_once<4>(wr, row_bytes, xb, nb, y + r); break;
    case 3: rows_at_once<3>(wr, row_bytes, xb, nb, y + r); break;
    case 2: rows_at_once<2>(wr, row_bytes, xb, nb, y + r); break;
    case 1: rows_at_once<1>(wr, row_bytes, xb, nb, y + r); break;
    default: break;
  }
}

using RowsFn = void (*)(const void*, size_t, int64_t, const void*, int64_t, float*);

// ggml's AVX2 path is what its CPU backend was built to run (its compile-time features), and the
// loops here need AVX-512 VNNI (Zen 4 and 5, Intel since Ice Lake): elsewhere the callers keep
// ggml's own product.
RowsFn vector_rows() {
  static const RowsFn f = []() -> RowsFn {
    if (!ggml_cpu_has_avx2() || !ggml_cpu_has_fma() || !ggml_cpu_has_f16c()) return nullptr;
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !__builtin_cpu_supports("f16c") || !__builtin_cpu_supports("avx512f") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512vnni"))
      return nullptr;
    return &rows_vector;
  }();
  return f;
}

}  // namespace

void q8_0_dot_rows(const void* w, size_t row_bytes, int64_t rows, const void* x, int64_t k,
                   float* y) {
  if (const RowsFn f = vector_rows()) return f(w, row_bytes, rows, x, k, y);
  q8_0_dot_rows_reference(w, row_bytes, rows, x, k, y);
}

bool q8_0_dot_rows_ggml_bits() { return vector_rows() != nullptr; }

#else

void q8_0_dot_rows(const void* w, size_t row_bytes, int64_t rows, const void* x, int64_t k,
                   float* y) {
  q8_0_dot_rows_reference(w, row_bytes, rows, x, k, y);
}

bool q8_0_dot_rows_ggml_bits() { return false; }

#endif

}  // namespace spattn::kernels
