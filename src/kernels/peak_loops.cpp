// The peak loops (peak_loops.hpp), compiled once per SIMD target and dispatched like the
// attention kernels, so each measures the target the kernels run on.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/peak_loops.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/flash_common.hpp"
#if HWY_TARGET == HWY_AVX3
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Independent accumulator chains: FMA latency (4 cycles on current x86) times FMA pipes (2)
// needs 8; more hides scheduling slack. 16 on AVX-512 (32 vector registers), 12 elsewhere
// (16 registers, two of them hold the constants). They are named variables, not an array:
// an array stays on the stack below -O3, and every FMA then waits on a store and a load.
// (Under -fsanitize=address,undefined the vector objects go to the stack anyway: figures
// from sanitizer builds mean nothing.)
#define SPATTN_PEAK_ACC12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#if HWY_MAX_BYTES >= 64
#define SPATTN_PEAK_ACC(X) SPATTN_PEAK_ACC12(X) X(12) X(13) X(14) X(15)
#else
#define SPATTN_PEAK_ACC(X) SPATTN_PEAK_ACC12(X)
#endif
#define SPATTN_PEAK_ACC16(X) SPATTN_PEAK_ACC12(X) X(12) X(13) X(14) X(15)
#define SPATTN_PEAK_ONE(k) +1
#define SPATTN_PEAK_INIT(k) V a##k = hn::Set(d, 0.01f * float(k + 1));
#define SPATTN_PEAK_FMA(k) a##k = hn::MulAdd(a##k, m, c);
#define SPATTN_PEAK_SUM(k) sum = hn::Add(sum, a##k);
#define SPATTN_PEAK_INIT_BF16(k) __m512 a##k = _mm512_set1_ps(0.01f * float(k + 1));
#define SPATTN_PEAK_DOT(k) a##k = _mm512_dpbf16_ps(a##k, x, y);
#define SPATTN_PEAK_SUM_BF16(k) sum = _mm512_add_ps(sum, a##k);

HWY_NOINLINE double FmaLoop(int64_t iters, float* sink) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  constexpr int kAcc = 0 SPATTN_PEAK_ACC(SPATTN_PEAK_ONE);
  // a = a m + c converges to c / (1 - m) = 1e-1: normal numbers throughout, no denormal or
  // overflow slow paths.
  const V m = hn::Set(d, 0.999f), c = hn::Set(d, 1e-4f);
  SPATTN_PEAK_ACC(SPATTN_PEAK_INIT)
  for (int64_t i = 0; i < iters; ++i) {
    SPATTN_PEAK_ACC(SPATTN_PEAK_FMA)
  }
  V sum = hn::Zero(d);
  SPATTN_PEAK_ACC(SPATTN_PEAK_SUM)
  *sink = hn::GetLane(hn::SumOfLanes(d, sum));
  return 2.0 * double(hn::Lanes(d)) * double(kAcc) * double(iters);
}

#if HWY_TARGET == HWY_AVX3
#define SPATTN_PEAK_BF16_ATTR __attribute__((target(HWY_TARGET_STR ",avx512bf16")))
SPATTN_PEAK_BF16_ATTR HWY_NOINLINE double Bf16DotLoopAvx512(int64_t iters, float* sink) {
  // x = 2^-10, y = 1 in bf16: each instruction adds 2^-9 per lane; sums stay normal.
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3A80);
  const __m512bh y = (__m512bh)_mm512_set1_epi16(0x3F80);
  SPATTN_PEAK_ACC16(SPATTN_PEAK_INIT_BF16)
  for (int64_t i = 0; i < iters; ++i) {
    SPATTN_PEAK_ACC16(SPATTN_PEAK_DOT)
  }
  __m512 sum = _mm512_setzero_ps();
  SPATTN_PEAK_ACC16(SPATTN_PEAK_SUM_BF16)
  *sink = _mm512_reduce_add_ps(sum);
  return 4.0 * 16.0 * 16.0 * double(iters);
}
#endif

double Bf16DotLoop(int64_t iters, float* sink) {
#if HWY_TARGET == HWY_AVX3
  if (cpu_has_bf16_dot()) return Bf16DotLoopAvx512(iters, sink);
#endif
  *sink = 0;
  return 0.0;
}

HWY_NOINLINE double ReadSum(const float* HWY_RESTRICT p, int64_t n, float* sink) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  auto s4 = hn::Zero(d), s5 = hn::Zero(d), s6 = hn::Zero(d), s7 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 8 * N <= n; i += 8 * N) {
    s0 = hn::Add(s0, hn::LoadU(d, p + i));
    s1 = hn::Add(s1, hn::LoadU(d, p + i + N));
    s2 = hn::Add(s2, hn::LoadU(d, p + i + 2 * N));
    s3 = hn::Add(s3, hn::LoadU(d, p + i + 3 * N));
    s4 = hn::Add(s4, hn::LoadU(d, p + i + 4 * N));
    s5 = hn::Add(s5, hn::LoadU(d, p + i + 5 * N));
    s6 = hn::Add(s6, hn::LoadU(d, p + i + 6 * N));
    s7 = hn::Add(s7, hn::LoadU(d, p + i + 7 * N));
  }
  float tail = 0;
  for (; i < n; ++i) tail += p[i];
  const auto sum =
      hn::Add(hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)), hn::Add(hn::Add(s4, s5), hn::Add(s6, s7)));
  *sink = hn::GetLane(hn::SumOfLanes(d, sum)) + tail;
  return 4.0 * double(n);
}

// Defined again for the next target (SPATTN_PEAK_ACC depends on the vector width).
#undef SPATTN_PEAK_ACC12
#undef SPATTN_PEAK_ACC
#undef SPATTN_PEAK_ACC16
#undef SPATTN_PEAK_ONE
#undef SPATTN_PEAK_INIT
#undef SPATTN_PEAK_FMA
#undef SPATTN_PEAK_SUM
#undef SPATTN_PEAK_INIT_BF16
#undef SPATTN_PEAK_DOT
#undef SPATTN_PEAK_SUM_BF16
#undef SPATTN_PEAK_BF16_ATTR

}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/peak_loops.hpp"

namespace spattn::kernels {
HWY_EXPORT(FmaLoop);
HWY_EXPORT(Bf16DotLoop);
HWY_EXPORT(ReadSum);

double fma_peak_loop(int64_t iters, float* sink) {
  return HWY_DYNAMIC_DISPATCH(FmaLoop)(iters, sink);
}
double bf16_dot_peak_loop(int64_t iters, float* sink) {
  return HWY_DYNAMIC_DISPATCH(Bf16DotLoop)(iters, sink);
}
double read_sum_loop(const float* p, int64_t n, float* sink) {
  return HWY_DYNAMIC_DISPATCH(ReadSum)(p, n, sink);
}

}  // namespace spattn::kernels
#endif  // HWY_ONCE
