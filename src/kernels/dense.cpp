// The dense kernel forms: every causal key for every query row (or, with a sliding window,
// every key of its band), optionally observed.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dense.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/flash-inl.h"

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {

void DenseEntry(const Problem& p, Stats* stats) {
  DensePolicy pol;
  RunFlash(p, pol, stats);
}

void DenseObservedEntry(const Problem& p, BlockLseObserver* observer, Stats* stats) {
  ObservedDensePolicy pol;
  pol.observer = observer;
  RunFlash(p, pol, stats);
}

}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "spattn/packed_kv.hpp"

namespace spattn {
namespace kernels {
HWY_EXPORT(DenseEntry);
HWY_EXPORT(DenseObservedEntry);
}  // namespace kernels

void attention_dense(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const AttnOptions& opt, float* lse, Stats* stats) {
  const kernels::Problem p = kernels::make_problem(q, k, v, out, opt, lse, /*takes_window=*/true);
  HWY_DYNAMIC_DISPATCH(kernels::DenseEntry)(p, stats);
}

void attention_dense_observed(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const AttnOptions& opt, float* lse,
                              BlockLseObserver& observer, Stats* stats) {
  const kernels::Problem p = kernels::make_problem(q, k, v, out, opt, lse);
  HWY_DYNAMIC_DISPATCH(kernels::DenseObservedEntry)(p, &observer, stats);
}

void attention_dense(const TensorView& q, const PackedKV& kv, const TensorView& out,
                     const AttnOptions& opt, float* lse, Stats* stats) {
  const kernels::Problem p =
      kernels::make_problem(q, kv.data(), out, opt, lse, /*takes_window=*/true);
  HWY_DYNAMIC_DISPATCH(kernels::DenseEntry)(p, stats);
}

}  // namespace spattn
#endif  // HWY_ONCE
