// Mean-pooled rows on the device (the host's mean_pool_rows, src/masks/mean_pool.cpp): the
// block summaries mean_pool scores by and flexprefill's pooled estimates read.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "spattn/tensor.hpp"

namespace spattn::cuda {

// out[(h * nb + b) * dim + c] (device, f32) = the mean over rows [b * block, (b + 1) * block)
// of t (bf16 or f16, its last block shorter) of head h, summed in double as the host does;
// nb = ceil(t.seq / block). Queued on s.
void pool_rows(const TensorView& t, int64_t block, float* out, cudaStream_t s);

}  // namespace spattn::cuda
