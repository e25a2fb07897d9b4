// Sums of normalised attention weights a_ij = softmax_i(j), without materialising the
// [Lq, Lkv] matrix: per key (column sums, H2O's heavy-hitter scores in chunked prefill) and per
// (query block, key block) (block mass). A second pass over the same inputs given each row's
// final LSE from a first pass (attention_dense's lse output), as FlashAttention's backward
// pass recomputes P. Sums are double, reduced in a fixed order: bitwise the same on every run
// with the same thread count.
#pragma once
#include <cstdint>
#include <vector>

#include "spattn/attention.hpp"

namespace spattn {

class PackedKV;

struct WeightSums {
  bool want_columns = true, want_blocks = false;
  int64_t block_q = 64, block_k = 64;  // the block-mass grid
  std::vector<double> column;          // [Hq][Lkv]: sum over rows of a_ij
  std::vector<double> block;           // [Hq][ceil(Lq/block_q)][ceil(Lkv/block_k)]
};

// row_lse: [Hq, Lq] natural-log LSE of the same problem (same q, k, v, options).
void attention_weight_sums(const TensorView& q, const TensorView& k, const TensorView& v,
                           const float* row_lse, WeightSums& out, const AttnOptions& opt = {});
void attention_weight_sums(const TensorView& q, const PackedKV& kv, const float* row_lse,
                           WeightSums& out, const AttnOptions& opt = {});

// Attention and its column sums in one pass: out, lse and stats exactly as attention_dense
// gives them over kv (bit for bit), and sums.column ([Hq][kv.size()]) the column sums that
// attention_weight_sums would give from that lse (to f32 rounding), without recomputing Q K^T
// and exp: each work item keeps its tiles' P until its rows' LSE is final, then weights them.
// The sums are added item by item in a fixed order: bitwise the same for any thread count.
// sums must ask for columns only. diagonal_chunk S > 0: block-diagonal causal attention
// instead, chunked prefill's intra pass over every chunk at once (row i sees keys
// floor(i / S) S .. i); needs causal self-attention (kv holds exactly q's rows, in order).
void attention_with_column_sums(const TensorView& q, const PackedKV& kv, const TensorView& out,
                                float* lse, WeightSums& sums, const AttnOptions& opt = {},
                                Stats* stats = nullptr, int64_t diagonal_chunk = 0);

}  // namespace spattn
