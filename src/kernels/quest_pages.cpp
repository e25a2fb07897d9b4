// quest_page_read / quest_page_write / quest_encode (quest_pages.hpp), compiled once per
// SIMD target and dispatched.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/quest_pages.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/quest_bounds.hpp"
#include "kernels/quest_pages.hpp"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

// Rows go through stack buffers this many dimensions at a time.
constexpr int64_t kChunk = 256;

// Bits of a 16-bit row widened to f32 (f16: the conversion; bf16: the upper half), and back:
// every value is exact in both types, so no rounding is involved either way.
void Widen(DType type, const uint16_t* bits, int64_t n, float* out) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto* h = reinterpret_cast<const hwy::float16_t*>(bits);
  int64_t c = 0;
  switch (type) {
    case DType::f16: {
      const hn::Rebind<hwy::float16_t, DF> dh;
      for (; c + N <= n; c += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, h + c)), df, out + c);
      for (; c < n; ++c) out[c] = f16_to_f32(bits[c]);
      return;
    }
    case DType::bf16:
      for (; c < n; ++c) {
        const uint32_t u = uint32_t(bits[c]) << 16;
        std::memcpy(out + c, &u, sizeof u);
      }
      return;
    case DType::f32: break;  // read in place by the callers
  }
  SPATTN_CHECK(false, "internal: Quest's page sums widen 16-bit types, not ", dtype_name(type));
}
void Narrow(DType type, const float* in, int64_t n, uint16_t* bits) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  auto* h = reinterpret_cast<hwy::float16_t*>(bits);
  int64_t c = 0;
  switch (type) {
    case DType::f16: {
      const hn::Rebind<hwy::float16_t, DF> dh;
      for (; c + N <= n; c += N) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, in + c)), dh, h + c);
      for (; c < n; ++c) bits[c] = f32_to_f16(in[c]);
      return;
    }
    case DType::bf16:
      for (; c < n; ++c) {
        uint32_t u;
        std::memcpy(&u, in + c, sizeof u);
        bits[c] = uint16_t(u >> 16);
      }
      return;
    case DType::f32: break;  // written in place by the callers
  }
  SPATTN_CHECK(false, "internal: Quest's page sums narrow to 16-bit types, not ", dtype_name(type));
}

// Page p's min (or max) in dimensions [c0, c0 + n): x[c * kStride] for c < n.
constexpr int64_t kStride = 2 * kQuestPagePad;
template <class T>
T* At(T* s, int64_t d, int64_t p, int64_t c0, bool max) {
  return s + quest_sum_index(d, p, c0, max);
}

void QuestPageRead(const void* sums, DType type, int64_t d, int64_t p, float* lo, float* hi) {
  for (int64_t c0 = 0; c0 < d; c0 += kChunk) {
    const int64_t n = std::min(kChunk, d - c0);
    for (const bool max : {false, true}) {
      float* out = (max ? hi : lo) + c0;
      if (type == DType::f32) {
        const float* x = At(static_cast<const float*>(sums), d, p, c0, max);
        for (int64_t c = 0; c < n; ++c) out[c] = x[c * kStride];
        continue;
      }
      uint16_t bits[kChunk];
      const uint16_t* x = At(static_cast<const uint16_t*>(sums), d, p, c0, max);
      for (int64_t c = 0; c < n; ++c) bits[c] = x[c * kStride];
      Widen(type, bits, n, out);
    }
  }
}

void QuestPageWrite(void* sums, DType type, int64_t d, int64_t p, const float* lo,
                    const float* hi) {
  for (int64_t c0 = 0; c0 < d; c0 += kChunk) {
    const int64_t n = std::min(kChunk, d - c0);
    for (const bool max : {false, true}) {
      const float* in = (max ? hi : lo) + c0;
      if (type == DType::f32) {
        float* x = At(static_cast<float*>(sums), d, p, c0, max);
        for (int64_t c = 0; c < n; ++c) x[c * kStride] = in[c];
        continue;
      }
      uint16_t bits[kChunk];
      Narrow(type, in, n, bits);
      uint16_t* x = At(static_cast<uint16_t*>(sums), d, p, c0, max);
      for (int64_t c = 0; c < n; ++c) x[c * kStride] = bits[c];
    }
  }
}

// Codes of a vector of dimensions; x: the values, s their scales, up: ceil (max) or floor (min).
template <class D>
HWY_INLINE hn::Vec<D> Code(D d, hn::Vec<D> x, hn::Vec<D> s, bool up) {
  const auto one = hn::Set(d, 1.0f);
  auto k = up ? hn::Ceil(hn::Div(x, s)) : hn::Floor(hn::Div(x, s));
  // The product rounds: where it lands inside the range, one step further out.
  k = up ? hn::IfThenElse(hn::Lt(hn::Mul(k, s), x), hn::Add(k, one), k)
         : hn::IfThenElse(hn::Gt(hn::Mul(k, s), x), hn::Sub(k, one), k);
  k = hn::IfThenElseZero(hn::Gt(s, hn::Zero(d)), k);  // s = 0: amax = 0, every value 0
  // Clamped to [-127, 127]; NaN (the >= test fails) to -127.
  const auto neg = hn::Set(d, -127.0f);
  return hn::IfThenElse(hn::Ge(k, neg), hn::Min(k, hn::Set(d, 127.0f)), neg);
}

// Entries [i, i + lanes of D) of QuestEncode into clo, chi.
template <class D>
HWY_INLINE void EncodeLanes(D d, const float* lo, const float* hi, const float* s, bool one_scale,
                            int64_t i, int32_t* clo, int32_t* chi) {
  const hn::RebindToSigned<D> di;
  const auto vs = one_scale ? hn::Set(d, s[0]) : hn::LoadU(d, s + i);
  hn::StoreU(hn::ConvertTo(di, Code(d, hn::LoadU(d, lo + i), vs, false)), di, clo + i);
  hn::StoreU(hn::ConvertTo(di, Code(d, hn::LoadU(d, hi + i), vs, true)), di, chi + i);
}

void QuestEncode(const float* lo, const float* hi, const float* s, int64_t s_step, int64_t n,
                 int8_t* lo8, int8_t* hi8, int64_t code_step) {
  const DF df;
  const hn::CappedTag<float, 1> d1;  // the last few entries, one at a time
  const int64_t N = int64_t(hn::Lanes(df));
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    const float* si = s + (s_step ? i0 : 0);
    int32_t clo[kChunk], chi[kChunk];
    int64_t i = 0;
    for (; i + N <= m; i += N) EncodeLanes(df, lo + i0, hi + i0, si, s_step == 0, i, clo, chi);
    for (; i < m; ++i) EncodeLanes(d1, lo + i0, hi + i0, si, s_step == 0, i, clo, chi);
    for (i = 0; i < m; ++i) {
      lo8[(i0 + i) * code_step] = int8_t(clo[i]);
      hi8[(i0 + i) * code_step] = int8_t(chi[i]);
    }
  }
}

}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spattn::kernels {
HWY_EXPORT(QuestPageRead);
HWY_EXPORT(QuestPageWrite);
HWY_EXPORT(QuestEncode);

void quest_page_read(const void* sums, DType type, int64_t d, int64_t p, float* lo, float* hi) {
  HWY_DYNAMIC_DISPATCH(QuestPageRead)(sums, type, d, p, lo, hi);
}
void quest_page_write(void* sums, DType type, int64_t d, int64_t p, const float* lo,
                      const float* hi) {
  HWY_DYNAMIC_DISPATCH(QuestPageWrite)(sums, type, d, p, lo, hi);
}
void quest_encode(const float* lo, const float* hi, const float* s, int64_t s_step, int64_t n,
                  int8_t* lo8, int8_t* hi8, int64_t code_step) {
  HWY_DYNAMIC_DISPATCH(QuestEncode)(lo, hi, s, s_step, n, lo8, hi8, code_step);
}
}  // namespace spattn::kernels
#endif
