// quest_bounds (quest_bounds.hpp), compiled once per SIMD target and dispatched.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/quest_bounds.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/quest_bounds.hpp"

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows [r0, r0 + R) against pages [p0, p0 + 2N): the summaries' two vectors are loaded once
// per dimension for all R rows.
template <int R>
HWY_INLINE void BoundsBlock(const float* q, int64_t r0, int64_t d, const float* lo,
                            const float* hi, int64_t ld, int64_t p0, float* u, int64_t ldu) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  using V = hn::Vec<decltype(df)>;
  V a0[R], a1[R];
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = hn::Zero(df);
  for (int64_t c = 0; c < d; ++c) {
    const float* l = lo + c * ld + p0;
    const float* h = hi + c * ld + p0;
    const V l0 = hn::LoadU(df, l), l1 = hn::LoadU(df, l + N);
    const V h0 = hn::LoadU(df, h), h1 = hn::LoadU(df, h + N);
    for (int r = 0; r < R; ++r) {
      const V qc = hn::Set(df, q[(r0 + r) * d + c]);
      a0[r] = hn::Add(a0[r], hn::Max(hn::Mul(qc, l0), hn::Mul(qc, h0)));
      a1[r] = hn::Add(a1[r], hn::Max(hn::Mul(qc, l1), hn::Mul(qc, h1)));
    }
  }
  for (int r = 0; r < R; ++r) {
    hn::StoreU(a0[r], df, u + (r0 + r) * ldu + p0);
    hn::StoreU(a1[r], df, u + (r0 + r) * ldu + p0 + N);
  }
}

void QuestBounds(const float* q, int64_t rows, int64_t d, const float* lo, const float* hi,
                 int64_t ld, int64_t pages, float* u, int64_t ldu) {
  const hn::ScalableTag<float> df;
  const int64_t step = 2 * int64_t(hn::Lanes(df));  // divides kQuestPagePad
  const int64_t padded = quest_padded(pages);
  for (int64_t p0 = 0; p0 < padded; p0 += step) {
    int64_t r0 = 0;
    for (; r0 + 4 <= rows; r0 += 4) BoundsBlock<4>(q, r0, d, lo, hi, ld, p0, u, ldu);
    switch (rows - r0) {
      case 3: BoundsBlock<3>(q, r0, d, lo, hi, ld, p0, u, ldu); break;
      case 2: BoundsBlock<2>(q, r0, d, lo, hi, ld, p0, u, ldu); break;
      case 1: BoundsBlock<1>(q, r0, d, lo, hi, ld, p0, u, ldu); break;
      default: break;
    }
  }
}

}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spattn::kernels {
HWY_EXPORT(QuestBounds);

void quest_bounds(const float* q, int64_t rows, int64_t d, const float* lo, const float* hi,
                  int64_t ld, int64_t pages, float* u, int64_t ldu) {
  HWY_DYNAMIC_DISPATCH(QuestBounds)(q, rows, d, lo, hi, ld, pages, u, ldu);
}
}  // namespace spattn::kernels
#endif  // HWY_ONCE
