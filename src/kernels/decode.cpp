// The decode kernel (dense flash-decoding and BLASST's decode mode): argument checks, the
// per-target entry and its dispatch. The loop is in decode-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/decode.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/decode-inl.h"

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {

void DecodeEntry(const Problem& p, double lambda, int64_t batch, Stats* stats, SkipStats* skip) {
  decode::RunDecode(p, lambda, batch, stats, skip);
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
  kernels::check_lambda(dopt.lambda, "decode");
  SPATTN_CHECK(dopt.batch >= 1 && dopt.batch <= 64, "decode: batch must be in [1, 64], got ",
               dopt.batch);
  const kernels::Problem p = kernels::make_problem(q, k, v, out, opt, lse);
  if (skip) {
    // The prefill layout (attention_blasst) with one query tile: tile_rows 64 > Lq, so
    // blasst_coverage maps every row to tile 0.
    const bool record = skip->record_tiles;
    *skip = SkipStats{};
    skip->record_tiles = record;
    skip->heads = q.heads;
    skip->q_tiles = 1;
    skip->tile_rows = kernels::DensePolicy{}.tile_rows;
    skip->visited.assign(size_t(skip->heads), 0);
    skip->skipped.assign(size_t(skip->heads), 0);
    if (record) skip->skipped_tiles.assign(size_t(skip->heads), {});
  }
  HWY_DYNAMIC_DISPATCH(kernels::DecodeEntry)(p, dopt.lambda, dopt.batch, stats, skip);
}

}  // namespace spattn
#endif  // HWY_ONCE
