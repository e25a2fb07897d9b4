// exp_row_f64 (exp_row.hpp), compiled once per SIMD target and dispatched.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/exp_row.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/exp_row.hpp"

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

double ExpRowF64(const float* x, int64_t n, double m, double* e, double scale) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // half a vector of floats, one per double lane
  const int64_t N = int64_t(hn::Lanes(dd));
  const auto vm = hn::Set(dd, m), vs = hn::Set(dd, scale);  // scale 1: the product is exact
  auto sum = hn::Zero(dd);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const auto v = hn::Exp(dd, hn::Mul(vs, hn::Sub(hn::PromoteTo(dd, hn::LoadU(df, x + j)), vm)));
    hn::StoreU(v, dd, e + j);
    sum = hn::Add(sum, v);
  }
  if (j < n) {  // the tail through a padded copy (its padding's lanes are dropped)
    float xt[HWY_MAX_BYTES / sizeof(double)] = {};
    double et[HWY_MAX_BYTES / sizeof(double)];
    std::copy(x + j, x + n, xt);
    const auto v = hn::IfThenElseZero(
        hn::FirstN(dd, size_t(n - j)),
        hn::Exp(dd, hn::Mul(vs, hn::Sub(hn::PromoteTo(dd, hn::LoadU(df, xt)), vm))));
    hn::StoreU(v, dd, et);
    sum = hn::Add(sum, v);
    std::copy(et, et + (n - j), e + j);
  }
  return hn::GetLane(hn::SumOfLanes(dd, sum));
}

}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spattn::kernels {
HWY_EXPORT(ExpRowF64);

double exp_row_f64(const float* x, int64_t n, double m, double* e, double scale) {
  return HWY_DYNAMIC_DISPATCH(ExpRowF64)(x, n, m, e, scale);
}
}  // namespace spattn::kernels
#endif
