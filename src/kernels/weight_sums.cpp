// Sums of normalised attention weights (spattn/weight_sums.hpp): the dense loop with
// WeightSumsPolicy, output discarded.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/weight_sums.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/flash-inl.h"
#include "kernels/weight_sums_policy.hpp"

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
void WeightSumsEntry(const Problem& p, const float* row_lse, WeightSums* out) {
  WeightSumsPolicy pol;
  pol.row_lse = row_lse;
  pol.out = out;
  pol.heads = p.q.heads, pol.q_len = p.q_len, pol.kv_len = p.kv_len;
  pol.n_qb = (p.q_len + out->block_q - 1) / out->block_q;
  pol.n_kb = (p.kv_len + out->block_k - 1) / out->block_k;
  RunFlash(p, pol, nullptr);
}
}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "spattn/error.hpp"
#include "spattn/packed_kv.hpp"

namespace spattn {
namespace kernels {
HWY_EXPORT(WeightSumsEntry);

void run_weight_sums(Problem p, const float* row_lse, WeightSums& out) {
  SPATTN_CHECK(row_lse != nullptr, "weight sums: row_lse (the first pass's LSE) is null");
  SPATTN_CHECK(out.block_q >= 1 && out.block_k >= 1,
               "weight sums: block_q and block_k must be "
               ">= 1, got ",
               out.block_q, " and ", out.block_k);
  SPATTN_CHECK(out.want_columns || out.want_blocks, "weight sums: ask for columns or blocks");
  // The pass recomputes P only (WeightSumsPolicy::Observers::kOutput is false): nothing is
  // written to p.out, which is q itself.
  p.lse = nullptr;
  HWY_DYNAMIC_DISPATCH(WeightSumsEntry)(p, row_lse, &out);
}
}  // namespace kernels

void attention_weight_sums(const TensorView& q, const TensorView& k, const TensorView& v,
                           const float* row_lse, WeightSums& out, const AttnOptions& opt) {
  TensorView o = q;  // validation wants out shaped like q; run_weight_sums swaps in scratch
  kernels::run_weight_sums(kernels::make_problem(q, k, v, o, opt, nullptr), row_lse, out);
}

void attention_weight_sums(const TensorView& q, const PackedKV& kv, const float* row_lse,
                           WeightSums& out, const AttnOptions& opt) {
  TensorView o = q;
  kernels::run_weight_sums(kernels::make_problem(q, kv.data(), o, opt, nullptr), row_lse, out);
}

}  // namespace spattn
#endif  // HWY_ONCE
