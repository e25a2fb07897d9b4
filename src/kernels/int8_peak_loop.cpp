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
// every lane: no overflow within 2^29 iterations.
__attribute__((target("avx512f,avx512vnni"))) double vnni_loop(int64_t iters, float* sink) {
  const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(1);
  __m512i acc[16];
  for (__m512i& x : acc) x = _mm512_setzero_si512();
  for (int64_t i = 0; i < iters; ++i) {
    for (__m512i& x : acc) x = _mm512_dpbusd_epi32(x, a, b);
    // Keeps the compiler from folding the loop into a multiply of the iteration count.
    __asm__ volatile(""
                     : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]), "+v"(acc[4]),
                       "+v"(acc[5]), "+v"(acc[6]), "+v"(acc[7]));
    __asm__ volatile(""
                     : "+v"(acc[8]), "+v"(acc[9]), "+v"(acc[10]), "+v"(acc[11]), "+v"(acc[12]),
                       "+v"(acc[13]), "+v"(acc[14]), "+v"(acc[15]));
  }
  __m512i sum = _mm512_setzero_si512();
  for (const __m512i& x : acc) sum = _mm512_add_epi32(sum, x);
  *sink = float(_mm512_reduce_add_epi32(sum));
  return 2.0 * 64.0 * 16.0 * double(iters);  // 64 products a vector, 2 ops each
}

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
