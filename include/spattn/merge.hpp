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

}  // namespace spattn
