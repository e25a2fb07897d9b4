// The int8 dot-product peak (peak_loops.hpp): vpdpbusd on full vectors, the instruction
// prefill's integer products (gemm_int8_avx512vnni.cpp) run on. Carries its own target
// attribute and runs only where the CPU reports AVX512_VNNI.
#include <cstdint>

#include "kernels/peak_loops.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

namespace spattn::kernels {
namespace {

bool cpu_has_vnni512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
}

// 16 independent accumulators: vpdpbusd's latency (4-5 cycles) times its throughput (two a
// cycle on Zen 5's four 512-bit pipes) with room to spare. Each instruction adds 4 x 1 x 1 to
// every lane: no overflow within 2^29 iterations. Named variables, not an array: GCC keeps an
// array of vectors on the stack here even at -O3, and every vpdpbusd then waits on a store and
// a load (this loop measured 170 GOP/s a core that way, a fifth of the ~800 the instruction
// reaches on Zen 5, which made every "% of int8 peak" figure four times too high).
#define SPATTN_INT8_ACC(X) \
  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define SPATTN_INT8_INIT(k) __m512i a##k = _mm512_setzero_si512();
#define SPATTN_INT8_DOT(k) a##k = _mm512_dpbusd_epi32(a##k, x, x);
#define SPATTN_INT8_SUM(k) sum = _mm512_add_epi32(sum, a##k);
__attribute__((target("avx512f,avx512vnni"))) double vnni_loop(int64_t iters, float* sink) {
  const __m512i x = _mm512_set1_epi8(1);
  SPATTN_INT8_ACC(SPATTN_INT8_INIT)
  for (int64_t i = 0; i < iters; ++i) {
    SPATTN_INT8_ACC(SPATTN_INT8_DOT)
    // Keeps the compiler from folding the loop into a multiply of the iteration count.
    __asm__ volatile(""
                     : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6),
                       "+v"(a7));
    __asm__ volatile(""
                     : "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11), "+v"(a12), "+v"(a13), "+v"(a14),
                       "+v"(a15));
  }
  __m512i sum = _mm512_setzero_si512();
  SPATTN_INT8_ACC(SPATTN_INT8_SUM)
  // Lane 0 of the wrapping vector sum (it depends on every accumulator): the lanes' scalar sum
  // (_mm512_reduce_add_epi32, plain int adds in GCC's header) overflows at a full-speed count.
  *sink = float(_mm_cvtsi128_si32(_mm512_castsi512_si128(sum)));
  return 2.0 * 64.0 * 16.0 * double(iters);  // 64 products a vector, 2 ops each
}
#undef SPATTN_INT8_ACC
#undef SPATTN_INT8_INIT
#undef SPATTN_INT8_DOT
#undef SPATTN_INT8_SUM

}  // namespace

double int8_dot_peak_loop(int64_t iters, float* sink) {
  static const bool has = cpu_has_vnni512();
  if (has) return vnni_loop(iters, sink);
  *sink = 0;
  return 0.0;
}

}  // namespace spattn::kernels

#else

namespace spattn::kernels {
double int8_dot_peak_loop(int64_t, float* sink) {
  *sink = 0;
  return 0.0;
}
}  // namespace spattn::kernels

#endif
