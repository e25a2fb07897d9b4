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

// The two estimates (quest_bounds.hpp), as one dimension's term added to a page's sum; a row's
// coefficients a, b per dimension are prepared by Prepare from its q (and the softmax scale).
struct Bound {  // U: a = q_c, the term max(a lo, a hi)
  static void Prepare(float qc, float, float& a, float&) { a = qc; }
  static VF Add(VF acc, VF a, VF, VF lo, VF hi) {
    return hn::Add(acc, hn::Max(hn::Mul(a, lo), hn::Mul(a, hi)));
  }
};
struct Gauss {  // G: a = q_c / 2, b = q_c^2 scale / 24, the term a (lo + hi) + b (hi - lo)^2
  static void Prepare(float qc, float scale, float& a, float& b) {
    a = 0.5f * qc;
    b = (qc * qc) * (scale / 24.0f);
  }
  static VF Add(VF acc, VF a, VF b, VF lo, VF hi) {
    const VF w = hn::Sub(hi, lo);
    return hn::Add(hn::Add(acc, hn::Mul(a, hn::Add(lo, hi))), hn::Mul(b, hn::Mul(w, w)));
  }
};

// Rows [r0, r0 + R) against pages [p0, p0 + 2N) of one block (s: the block's first element,
// off: p0's lane within it): the summaries' four vectors are loaded once per dimension for
// all R rows. qa, qb: the rows' coefficients ([rows][d], E::Prepare's).
template <class L, class E, int R>
HWY_INLINE void BoundsBlock(const float* qa, const float* qb, int64_t r0, int64_t d,
                            const typename L::T* s, int64_t off, int64_t p0, float* u,
                            int64_t ldu) {
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
      const VF a = hn::Set(df, qa[(r0 + r) * d + c]), b = hn::Set(df, qb[(r0 + r) * d + c]);
      a0[r] = E::Add(a0[r], a, b, l0, h0);
      a1[r] = E::Add(a1[r], a, b, l1, h1);
    }
  }
  for (int r = 0; r < R; ++r) {
    hn::StoreU(a0[r], df, u + (r0 + r) * ldu + p0);
    hn::StoreU(a1[r], df, u + (r0 + r) * ldu + p0 + N);
  }
}

// scales: null, or per block the d scales of QuestBoundsI8 (q scaled into qs per block before
// E::Prepare).
template <class L, class E>
void Bounds(const float* q, int64_t rows, int64_t d, const typename L::T* sums, int64_t pages,
            float* u, int64_t ldu, float scale, const float* scales = nullptr) {
  const int64_t step = 2 * int64_t(hn::Lanes(DF()));  // divides kQuestPagePad
  const int64_t padded = quest_padded(pages);
  std::vector<float> qa(size_t(rows * d)), qb(size_t(rows * d));
  const auto prepare = [&](int64_t b) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d; ++c) {
        const float qc = scales ? q[r * d + c] * scales[b * d + c] : q[r * d + c];
        E::Prepare(qc, scale, qa[size_t(r * d + c)], qb[size_t(r * d + c)]);
      }
  };
  if (!scales) prepare(0);
  for (int64_t p0 = 0; p0 < padded; p0 += step) {
    const int64_t b = p0 / kQuestPagePad;
    const typename L::T* s = sums + b * d * 2 * kQuestPagePad;  // the block
    const int64_t off = p0 % kQuestPagePad;
    if (scales && off == 0) prepare(b);
    const float *a = qa.data(), *bq = qb.data();
    int64_t r0 = 0;
    for (; r0 + 4 <= rows; r0 += 4) BoundsBlock<L, E, 4>(a, bq, r0, d, s, off, p0, u, ldu);
    switch (rows - r0) {
      case 3: BoundsBlock<L, E, 3>(a, bq, r0, d, s, off, p0, u, ldu); break;
      case 2: BoundsBlock<L, E, 2>(a, bq, r0, d, s, off, p0, u, ldu); break;
      case 1: BoundsBlock<L, E, 1>(a, bq, r0, d, s, off, p0, u, ldu); break;
      default: break;
    }
  }
}

template <class E>
void BoundsOf(const float* q, int64_t rows, int64_t d, const void* sums, DType type, int64_t pages,
              float* u, int64_t ldu, float scale) {
  switch (type) {
    case DType::f16:
      return Bounds<LoadF16, E>(q, rows, d, static_cast<const hwy::float16_t*>(sums), pages, u, ldu,
                                scale);
    case DType::bf16:
      return Bounds<LoadBF16, E>(q, rows, d, static_cast<const uint16_t*>(sums), pages, u, ldu,
                                 scale);
    case DType::f32:
      return Bounds<LoadF32, E>(q, rows, d, static_cast<const float*>(sums), pages, u, ldu, scale);
  }
}

void QuestBounds(const float* q, int64_t rows, int64_t d, const void* sums, DType type,
                 int64_t pages, float* u, int64_t ldu, PageEstimate est, float scale) {
  if (est == PageEstimate::gauss)
    return BoundsOf<Gauss>(q, rows, d, sums, type, pages, u, ldu, scale);
  BoundsOf<Bound>(q, rows, d, sums, type, pages, u, ldu, scale);
}

void QuestBoundsI8(const float* q, int64_t rows, int64_t d, const int8_t* codes,
                   const float* scales, int64_t pages, float* u, int64_t ldu, PageEstimate est,
                   float scale) {
  if (est == PageEstimate::gauss)
    return Bounds<LoadI8, Gauss>(q, rows, d, codes, pages, u, ldu, scale, scales);
  Bounds<LoadI8, Bound>(q, rows, d, codes, pages, u, ldu, scale, scales);
}

}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spattn::kernels {
HWY_EXPORT(QuestBounds);
HWY_EXPORT(QuestBoundsI8);

void quest_bounds(const float* q, int64_t rows, int64_t d, const void* sums, DType type,
                  int64_t pages, float* u, int64_t ldu, PageEstimate est, float scale) {
  HWY_DYNAMIC_DISPATCH(QuestBounds)(q, rows, d, sums, type, pages, u, ldu, est, scale);
}

void quest_bounds_i8(const float* q, int64_t rows, int64_t d, const int8_t* codes,
                     const float* scales, int64_t pages, float* u, int64_t ldu, PageEstimate est,
                     float scale) {
  HWY_DYNAMIC_DISPATCH(QuestBoundsI8)(q, rows, d, codes, scales, pages, u, ldu, est, scale);
}
}  // namespace spattn::kernels
#endif  // HWY_ONCE
