// XAttention's antidiagonal block importance on the device ("XAttention: Block Sparse
// Attention with Antidiagonal Scoring", Sec. 2.1-2.2; the host's is
// src/masks/antidiagonal_mass.cpp, which this mirrors): the estimate xattention selects by and
// mean_pool's mass budgets read.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "spattn/attention.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cuda {

// mass[(h * nqb + qb) * nkb + kb] (device, zero-filled, Hq x nqb x nkb doubles) gets block kb's
// importance for q head h's query block qb, for kb below the block's causal blocks (every block
// when not causal): the sum over its strided rows of their antidiagonal softmax's
// probabilities inside the block. q, k checked by the caller; stride divides block_q and
// block_k. Queued on s.
void antidiagonal_mass(const TensorView& q, const TensorView& k, const AttnOptions& opt,
                       int64_t stride, int64_t block_q, int64_t block_k, double* mass,
                       cudaStream_t s);

}  // namespace spattn::cuda
