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
// (16 registers, two of them hold the constants).
inline constexpr int kPeakAcc = hn::MaxLanes(hn::ScalableTag<float>()) >= 16 ? 16 : 12;

HWY_NOINLINE double FmaLoop(int64_t iters, float* sink) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  // acc = acc m + c converges to c / (1 - m) = 1e-1: normal numbers throughout, no denormal
  // or overflow slow paths.
  const V m = hn::Set(d, 0.999f), c = hn::Set(d, 1e-4f);
  V acc[kPeakAcc];
  for (int k = 0; k < kPeakAcc; ++k) acc[k] = hn::Set(d, 0.01f * float(k + 1));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kPeakAcc; ++k) acc[k] = hn::MulAdd(acc[k], m, c);
  }
  V sum = acc[0];
  for (int k = 1; k < kPeakAcc; ++k) sum = hn::Add(sum, acc[k]);
  *sink = hn::GetLane(hn::SumOfLanes(d, sum));
  return 2.0 * double(hn::Lanes(d)) * double(kPeakAcc) * double(iters);
}

#if HWY_TARGET == HWY_AVX3
#define SPATTN_PEAK_BF16_ATTR __attribute__((target(HWY_TARGET_STR ",avx512bf16")))
SPATTN_PEAK_BF16_ATTR HWY_NOINLINE double Bf16DotLoopAvx512(int64_t iters, float* sink) {
  // a = 2^-10, b = 1 in bf16: each instruction adds 2^-9 per lane; sums stay normal.
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3A80);
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3F80);
  __m512 acc[16];
  for (int k = 0; k < 16; ++k) acc[k] = _mm512_set1_ps(0.01f * float(k + 1));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
  }
  __m512 sum = acc[0];
  for (int k = 1; k < 16; ++k) sum = _mm512_add_ps(sum, acc[k]);
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
  const auto sum = hn::Add(hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)),
                           hn::Add(hn::Add(s4, s5), hn::Add(s6, s7)));
  *sink = hn::GetLane(hn::SumOfLanes(d, sum)) + tail;
  return 4.0 * double(n);
}

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
