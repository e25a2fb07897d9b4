// kv_round_row (spattn/kv_type.hpp): each value as a KV cache of type t stores it, read back as
// f32. Compiled once per SIMD target and dispatched: the f16 round trip went through the scalar
// converters one value at a time, and a decode step rounds every layer's new K and V rows
// before the cache packs them: the two converters took 1.0% of a code-tiny-8k Q4_0 decode's
// samples (perf, 2,000 tokens, two threads), all of it on the thread the other one waits for.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kv_round.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstring>

#include "hwy/highway.h"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"
#include "spattn/kv_type.hpp"

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// f16_to_f32(f32_to_f16(x)) for every x, the same bits: x86's conversion instructions (F16C,
// AVX-512) round to nearest even and overflow to inf as the scalar converter does; a NaN comes
// back as the converter's quiet NaN (0x7e00 with x's sign) rather than with x's payload.
// Targets without the instructions keep the scalar loop (Highway emulates the conversion there).
void RoundThroughF16(const float* src, float* dst, int64_t n) {
  int64_t i = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto qnan = hn::BitCast(df, hn::Set(hn::RebindToSigned<decltype(df)>(), 0x7fc00000));
  for (; i + N <= n; i += N) {
    const auto x = hn::LoadU(df, src + i);
    const auto r = hn::PromoteTo(df, hn::DemoteTo(dh, x));
    hn::StoreU(hn::IfThenElse(hn::IsNaN(x), hn::CopySign(qnan, x), r), df, dst + i);
  }
#endif
  for (; i < n; ++i) dst[i] = f16_to_f32(f32_to_f16(src[i]));
}

}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spattn {
namespace kernels {
HWY_EXPORT(RoundThroughF16);
}  // namespace kernels

void kv_round_row(KVType t, const float* src, float* dst, int64_t n) {
  switch (t) {
    case KVType::f32:
      if (dst != src) std::memmove(dst, src, size_t(n) * sizeof(float));
      return;
    case KVType::f16: HWY_DYNAMIC_DISPATCH(kernels::RoundThroughF16)(src, dst, n); return;
    case KVType::bf16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(f32_to_bf16(src[i]));
      return;
    case KVType::q8_0: {
      constexpr int64_t kBlock = 32;
      SPATTN_CHECK(n % kBlock == 0, "q8_0: a row of ", n,
                   " values is not a whole number of blocks of 32");
      int8_t qs[kBlock];
      uint16_t scale;
      for (int64_t b = 0; b < n; b += kBlock) {
        kv_quantize_q8_0(src + b, kBlock, qs, &scale);
        const float d = f16_to_f32(scale);
        for (int64_t i = 0; i < kBlock; ++i) dst[b + i] = float(qs[i]) * d;
      }
      return;
    }
  }
}
}  // namespace spattn
#endif
