// attention_modality_pairs: MMInference's Q-boundary and 2D-boundary heads ("MMInference:
// Modality-Aware Permutation Sparse Attention", Algorithms 2, 3, 6 and 7). Per piece (a query
// modality against one key modality, or against every key), the piece's keys are packed with their original positions (the pair's columns first,
// so they are one range), the query modality's rows are picked by the row-groups kernel and
// written back to their own rows, and the pairs, which hold disjoint keys, are merged exactly
// by (O, LSE). Nothing copies Q, K or V in a permuted order.
#include <limits>

#include "spattn/error.hpp"
#include "spattn/merge.hpp"
#include "spattn/modality_boundary.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/row_groups.hpp"

namespace spattn {

void attention_modality_pairs(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const std::vector<PairPlan>& plans,
                              const AttnOptions& opt, float* lse, Stats* stats) {
  SPATTN_CHECK(opt.causal, "modality_pairs: needs causal attention");
  SPATTN_CHECK(q.heads == 1 && k.heads == 1, "modality_pairs: takes one head, got q ",
               q.shape_str(), ", k ", k.shape_str());
  validate_attention_args(q, k, v, out, opt);
  const int64_t lq = q.seq, lk = k.seq, d = q.dim;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  Tensor acc(DType::f32, 1, lq, d), part(DType::f32, 1, lq, d);
  std::vector<float> acc_lse(static_cast<size_t>(lq), kNegInf), part_lse(static_cast<size_t>(lq));
  float* const a = static_cast<float*>(acc.view().data);
  const float* const b = static_cast<const float*>(part.view().data);
  AttnOptions o = opt;
  o.check_finite = false;  // checked above
  o.q_start = lk - lq;     // rows keep their positions; packed keys carry theirs
  Stats st;
  for (const PairPlan& plan : plans) {
    if (plan.tiles.empty()) continue;
    for (int64_t j : plan.order)
      SPATTN_CHECK(j >= 0 && j < lk, "modality_pairs: key ", j, " outside [0, ", lk, ")");
    PackedKV kv(1, k.dim, k.dtype, int64_t(plan.order.size()), opt.bf16_dot);
    kv.append_rows(k, v, plan.order, plan.order, opt.threads);
    std::vector<RowGroup> groups;
    groups.reserve(plan.tiles.size());
    for (const PairTile& t : plan.tiles) groups.push_back({t.rows, t.keys});
    attention_row_groups(q, kv, groups, part, o, part_lse.data(), &st);
    // Only this piece's rows were written; fold them into the row's result.
    for (const PairTile& t : plan.tiles)
      for (int64_t r : t.rows)
        merge_row(a + r * d, acc_lse[size_t(r)], b + r * d, part_lse[size_t(r)], d);
  }
  if (stats) {
    // The problem's causal entries once, not once per piece.
    st.causal_entries = 0;
    Stats whole;
    whole.causal_entries = attention_entries(lq, lk, true);
    whole.add(st);
    stats->add(whole);
  }
  for (int64_t s = 0; s < lq; ++s)
    for (int64_t c = 0; c < d; ++c) out.set(0, s, c, a[s * d + c]);
  if (lse) std::copy(acc_lse.begin(), acc_lse.end(), lse);
}

}  // namespace spattn
