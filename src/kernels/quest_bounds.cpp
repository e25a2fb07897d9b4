// quest_bounds (quest_bounds.hpp), compiled once per SIMD target and dispatched.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/quest_bounds.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <vector>

#include "hwy/highway.h"
#include "kernels/quest_bounds.hpp"

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// N summaries at p, widened to f32 (exactly: every f16 and bf16 value is an f32 value).
struct LoadF32 {
  using T = float;
  static VF Load(const float* p) { return hn::LoadU(DF(), p); }
};
struct LoadF16 {
  using T = hwy::float16_t;
  static VF Load(const T* p) { return hn::PromoteTo(DF(), hn::LoadU(hn::Rebind<T, DF>(), p)); }
};
struct LoadI8 {  // an 8-bit code, exactly
  using T = int8_t;
  static VF Load(const T* p) {
    const hn::RebindToSigned<DF> di;
    return hn::ConvertTo(DF(), hn::PromoteTo(di, hn::LoadU(hn::Rebind<T, DF>(), p)));
  }
};
struct LoadBF16 {  // the upper half of an f32
  using T = uint16_t;
  static VF Load(const T* p) {
    const hn::RebindToUnsigned<DF> du;
    return hn::BitCast(DF(),
                       hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(hn::Rebind<T, DF>(), p))));
  }
};

// Rows [r0, r0 + R) against pages [p0, p0 + 2N) of one block (s: the block's first element,
// off: p0's lane within it): the summaries' four vectors are loaded once per dimension for
// all R rows.
template <class L, int R>
HWY_INLINE void BoundsBlock(const float* q, int64_t r0, int64_t d, const typename L::T* s,
                            int64_t off, int64_t p0, float* u, int64_t ldu) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF a0[R], a1[R];
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = hn::Zero(df);
  for (int64_t c = 0; c < d; ++c) {
    const typename L::T* l = s + c * 2 * kQuestPagePad + off;
    const typename L::T* h = l + kQuestPagePad;
    const VF l0 = L::Load(l), l1 = L::Load(l + N);
    const VF h0 = L::Load(h), h1 = L::Load(h + N);
    for (int r = 0; r < R; ++r) {
      const VF qc = hn::Set(df, q[(r0 + r) * d + c]);
      a0[r] = hn::Add(a0[r], hn::Max(hn::Mul(qc, l0), hn::Mul(qc, h0)));
      a1[r] = hn::Add(a1[r], hn::Max(hn::Mul(qc, l1), hn::Mul(qc, h1)));
    }
  }
  for (int r = 0; r < R; ++r) {
    hn::StoreU(a0[r], df, u + (r0 + r) * ldu + p0);
    hn::StoreU(a1[r], df, u + (r0 + r) * ldu + p0 + N);
  }
}

// scales: null, or per block the d scales of QuestBoundsI8 (q scaled into qs per block).
template <class L>
void Bounds(const float* q0, int64_t rows, int64_t d, const typename L::T* sums, int64_t pages,
            float* u, int64_t ldu, const float* scales = nullptr) {
  const int64_t step = 2 * int64_t(hn::Lanes(DF()));  // divides kQuestPagePad
  const int64_t padded = quest_padded(pages);
  std::vector<float> qs(scales ? size_t(rows * d) : 0);
  const float* q = scales ? qs.data() : q0;
  for (int64_t p0 = 0; p0 < padded; p0 += step) {
    const int64_t b = p0 / kQuestPagePad;
    const typename L::T* s = sums + b * d * 2 * kQuestPagePad;  // the block
    const int64_t off = p0 % kQuestPagePad;
    if (scales && off == 0)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < d; ++c) qs[size_t(r * d + c)] = q0[r * d + c] * scales[b * d + c];
    int64_t r0 = 0;
    for (; r0 + 4 <= rows; r0 += 4) BoundsBlock<L, 4>(q, r0, d, s, off, p0, u, ldu);
    switch (rows - r0) {
      case 3: BoundsBlock<L, 3>(q, r0, d, s, off, p0, u, ldu); break;
      case 2: BoundsBlock<L, 2>(q, r0, d, s, off, p0, u, ldu); break;
      case 1: BoundsBlock<L, 1>(q, r0, d, s, off, p0, u, ldu); break;
      default: break;
    }
  }
}

void QuestBounds(const float* q, int64_t rows, int64_t d, const void* sums, DType type,
                 int64_t pages, float* u, int64_t ldu) {
  switch (type) {
    case DType::f16:
      return Bounds<LoadF16>(q, rows, d, static_cast<const hwy::float16_t*>(sums), pages, u, ldu);
    case DType::bf16:
      return Bounds<LoadBF16>(q, rows, d, static_cast<const uint16_t*>(sums), pages, u, ldu);
    case DType::f32:
      return Bounds<LoadF32>(q, rows, d, static_cast<const float*>(sums), pages, u, ldu);
  }
}

void QuestBoundsI8(const float* q, int64_t rows, int64_t d, const int8_t* codes,
                   const float* scales, int64_t pages, float* u, int64_t ldu) {
  Bounds<LoadI8>(q, rows, d, codes, pages, u, ldu, scales);
}

}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spattn::kernels {
HWY_EXPORT(QuestBounds);
HWY_EXPORT(QuestBoundsI8);

void quest_bounds(const float* q, int64_t rows, int64_t d, const void* sums, DType type,
                  int64_t pages, float* u, int64_t ldu) {
  HWY_DYNAMIC_DISPATCH(QuestBounds)(q, rows, d, sums, type, pages, u, ldu);
}

void quest_bounds_i8(const float* q, int64_t rows, int64_t d, const int8_t* codes,
                     const float* scales, int64_t pages, float* u, int64_t ldu) {
  HWY_DYNAMIC_DISPATCH(QuestBoundsI8)(q, rows, d, codes, scales, pages, u, ldu);
}
}  // namespace spattn::kernels
#endif  // HWY_ONCE
