// The dense kernel's online softmax carried from call to call: a caller that holds a row's
// keys in pieces (context parallelism, where each rank holds some of the prompt's K/V) visits
// them piece by piece in position order and gets one attention_dense call's bits, where
// merging every piece's (O, LSE) afterwards (spattn/merge.hpp) is exact only to rounding.
//
// attention_dense's loop keeps, per query row, the running max m, the sum l and the
// unnormalised O, and updates them one 64-key tile at a time (FlashAttention-2, "Faster
// Attention with Better Parallelism and Work Partitioning", Algorithm 1); at the end it writes
// O / l. attention_dense_continue runs that loop over some key tiles starting from the state a
// former call left and leaves the state instead of the output; attention_state_finish is the
// end. Calls over the tiles of [0, 64), [64, 128), ... in order, each tile whole in one call
// and packed as attention_dense's K/V packs it (the same format, the same 64-key tile grid of
// positions), give attention_dense's output and LSE bit for bit: every tile meets the same
// state, and a tile a row sees none of leaves its state as it was (alpha 1, P 0).
#pragma once
#include <cstdint>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/coverage.hpp"
#include "spattn/packed_kv.hpp"

namespace spattn {

// Per (q head, row): m (log2 units) and l [heads][rows]; O [heads][rows][dim] unnormalised.
struct AttnState {
  int64_t heads = 0, rows = 0, dim = 0;
  std::vector<float> m, l, o;
  // Sized for heads x rows x dim, every row having seen no key (m -inf, l 0, O 0).
  void reset(int64_t heads, int64_t rows, int64_t dim);
};

// attention_dense of q over the packed keys [keys.begin, keys.end) of kv (packed indices:
// the order they were appended in; the causal mask and opt.q_start as attention_dense), from
// `state` (q.heads x q.seq rows, q.dim) and back into it. Throws Error on a state of another
// shape or a range outside [0, kv.size()]; an empty range leaves the state as it is.
void attention_dense_continue(const TensorView& q, const PackedKV& kv, KeyRange keys,
                              AttnState& state, const AttnOptions& opt = {},
                              Stats* stats = nullptr);

// out [heads, rows, dim] = O / l (0 for a row that saw no key) and lse [heads][rows] (natural
// log; -inf for none), if given: attention_dense's last step, the same bits.
void attention_state_finish(const AttnState& state, const TensorView& out, float* lse = nullptr);

}  // namespace spattn
