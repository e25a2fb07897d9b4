// The decode kernel (dense flash-decoding and BLASST's decode mode): argument checks, the
// per-target entry and its dispatch. The loop is in decode-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/decode.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/decode-inl.h"

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {

void DecodeEntry(const Problem& p, float log2_lambda, int64_t batch, BlasstOrder order,
                 Stats* stats, SkipStats* skip) {
  decode::RunDecode(p, log2_lambda, batch, order, stats, skip);
}

}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cmath>

#include "spattn/decode.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace kernels {
HWY_EXPORT(DecodeEntry);
}  // namespace kernels

void attention_decode(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const AttnOptions& opt, const DecodeOptions& dopt,
                      float* lse, Stats* stats, SkipStats* skip) {
  // Decode means a handful of new queries; longer q belongs to the prefill kernels.
  SPATTN_CHECK(q.seq >= 1 && q.seq <= kMaxDecodeQueries, "decode: q_len must be in [1, ",
               kMaxDecodeQueries, "], got ", q.seq);
  const float log2_lambda = kernels::blasst_log2_threshold(dopt.lambda, "decode");
  SPATTN_CHECK(dopt.batch >= 1 && dopt.batch <= 64, "decode: batch must be in [1, 64], got ",
               dopt.batch);
  kernels::check_blasst_order(dopt.order, "decode");
  const kernels::Problem p = kernels::make_problem(q, k, v, out, opt, lse);
  // The prefill layout (attention_blasst) with one query tile: tile_rows 64 > Lq, so
  // blasst_coverage maps every row to tile 0.
  if (skip) skip->reset(q.heads, 1);
  HWY_DYNAMIC_DISPATCH(kernels::DecodeEntry)(p, log2_lambda, dopt.batch, dopt.order, stats, skip);
}

}  // namespace spattn
#endif  // HWY_ONCE
