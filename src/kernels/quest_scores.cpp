// quest_page_scores (quest_scores.hpp), compiled once per SIMD target and dispatched.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/quest_scores.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/quest_scores.hpp"

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void QuestPageScores(const float* u, int64_t rows, int64_t ldu, int64_t np, float scale,
                     float* score, float* e) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t N = int64_t(hn::Lanes(df));  // divides ldu (a multiple of kQuestPagePad)
  const auto lane = hn::Iota(di, 0), pages = hn::Set(di, int32_t(np));
  // The lanes of the vector at p that are pages (the rest, up to ldu, are padding).
  const auto in = [&](int64_t p) {
    return hn::RebindMask(df, hn::Lt(hn::Add(lane, hn::Set(di, int32_t(p))), pages));
  };
  const auto vs = hn::Set(df, scale);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = u + r * ldu;
    auto mx = hn::Set(df, x[0]);
    for (int64_t p = 0; p < ldu; p += N)
      mx = hn::IfThenElse(in(p), hn::Max(mx, hn::LoadU(df, x + p)), mx);
    const auto vm = hn::Set(df, hn::GetLane(hn::MaxOfLanes(df, mx)));
    auto sum = hn::Zero(df);
    for (int64_t p = 0; p < ldu; p += N) {
      const auto v = hn::Exp(df, hn::Mul(vs, hn::Sub(hn::LoadU(df, x + p), vm)));
      const auto kept = hn::IfThenElseZero(in(p), v);
      hn::StoreU(kept, df, e + p);
      sum = hn::Add(sum, kept);
    }
    // Z_r rows: one division a row, a product a page.
    const auto w = hn::Set(df, 1.0f / (hn::GetLane(hn::SumOfLanes(df, sum)) * float(rows)));
    for (int64_t p = 0; p < ldu; p += N) {
      auto s = hn::Mul(hn::LoadU(df, e + p), w);
      if (r > 0) s = hn::Add(s, hn::LoadU(df, score + p));
      hn::StoreU(s, df, score + p);
    }
  }
}

}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spattn::kernels {
HWY_EXPORT(QuestPageScores);

void quest_page_scores(const float* u, int64_t rows, int64_t ldu, int64_t np, float scale,
                       float* score, float* e) {
  HWY_DYNAMIC_DISPATCH(QuestPageScores)(u, rows, ldu, np, scale, score, e);
}
}  // namespace spattn::kernels
#endif
