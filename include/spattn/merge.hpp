// Exact merge of partial attention results: (O, LSE) pairs over disjoint key sets.
// If O_a, lse_a is attention over keys A and O_b, lse_b over keys B (A, B disjoint), then
//   lse = log(exp(lse_a) + exp(lse_b)),  O = exp(lse_a - lse) O_a + exp(lse_b - lse) O_b
// is attention over A u B. A side with lse = -inf (no keys) contributes nothing.
#pragma once
#include "spattn/tensor.hpp"

namespace spattn {

// out may alias a. lse arrays are [heads, seq] contiguous; lse_out may alias lse_a.
void merge_attention(const TensorView& o_a, const float* lse_a, const TensorView& o_b,
                     const float* lse_b, const TensorView& out, float* lse_out);

// One row, f32: merges (o_b, lse_b) into (o_a, lse_a) in place.
void merge_row(float* o_a, float& lse_a, const float* o_b, float lse_b, int64_t dim);

// Attention sinks (gpt-oss's, ggml's flash_attn_ext_add_sinks): head h's learned logit
// sinks[h] joins each of its rows' softmax as a key whose value is zero, so every row merges
// with (0, sinks[h]): out *= 1 / (1 + exp(sinks[h] - lse)), lse = log(exp(lse) + exp(sinks[h])).
// A row that saw no key stays 0. out: f32 rows (stride_dim 1), in place; lse [heads, seq].
void merge_sinks(const TensorView& out, float* lse, const float* sinks);

}  // namespace spattn
