// MMInference's Q-boundary and 2D-boundary heads on the device ("MMInference: Modality-Aware
// Permutation Sparse Attention", Algorithms 2, 3, 6 and 7; spattn/modality_boundary.hpp's
// attention_modality_pairs, which this repeats with the device's kernels): each piece's tiles
// as row groups against the piece's keys, gathered by the kernel with their original positions
// (attention_gathered_groups: the query modality's rows picked and written back to their own
// rows, no permuted copy), and the pieces, which hold disjoint keys, merged exactly by (O, LSE)
// into an accumulator, then into out.
#include <limits>
#include <vector>

#include "cuda/check.cuh"
#include "cuda/inputs.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/modality_boundary.hpp"

namespace spattn::cuda {

void attention_modality_pairs(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const std::vector<PairPlan>& plans,
                              const AttnOptions& opt, float* lse, Stats* stats, void* stream) {
  const char* who = "cuda attention_modality_pairs";
  SPATTN_CHECK(opt.causal, "modality_pairs: needs causal attention");
  SPATTN_CHECK(q.heads == 1 && k.heads == 1, "modality_pairs: takes one head, got q ",
               q.shape_str(), ", k ", k.shape_str());
  check_qkv_out(q, k, v, out, lse, opt.causal, who);
  const int64_t lq = q.seq, lk = k.seq;
  const cudaStream_t s = stream_of(stream, opt);
  const std::vector<float> none(size_t(lq), -std::numeric_limits<float>::infinity());
  // The accumulator and each piece's part: zeros and LSE -inf where no piece has the row.
  const DeviceTensor acc(q.dtype, 1, lq, q.dim), part(q.dtype, 1, lq, q.dim),
      zero(q.dtype, 1, lq, q.dim);
  DeviceBuffer<float> acc_lse, part_lse, zero_lse;
  acc_lse.upload(none, s), zero_lse.upload(none, s);
  AttnOptions o = opt;
  o.q_start = lk - lq;  // rows keep their positions; the keys carry theirs
  Stats st;
  for (const PairPlan& plan : plans) {
    if (plan.tiles.empty()) continue;
    std::vector<GatheredGroup> groups;
    for (const PairTile& t : plan.tiles) {
      GatheredGroup& g = groups.emplace_back();
      g.rows = t.rows;
      for (const KeyRange& r : t.keys)
        for (int64_t i = r.begin; i < r.end; ++i) {
          SPATTN_CHECK(i >= 0 && i < int64_t(plan.order.size()), who, ": packed key ", i,
                       " outside the piece's ", plan.order.size());
          g.keys.push_back(plan.order[size_t(i)]);
          g.positions.push_back(plan.order[size_t(i)]);
        }
    }
    part_lse.upload(none, s);
    attention_gathered_groups(q, k, v, groups, part, o, part_lse.get(), stats ? &st : nullptr, s);
    merge_attention(acc, acc_lse.get(), part, part_lse.get(), acc, acc_lse.get(), s);
  }
  if (stats) {
    // The problem's causal entries once, not once per piece.
    st.causal_entries = dense_entries(1, lq, lk, true);
    stats->add(st);
  }
  merge_attention(acc, acc_lse.get(), zero, zero_lse.get(), out, lse, s);
}

}  // namespace spattn::cuda
