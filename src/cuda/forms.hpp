// The GPU attention forms' shared launch steps (attention.cu), for the method pipelines that
// chain them on the device (momo.cu): the kernel parameters of a problem, and the query-sparse
// and block-sparse launches over lists that already live on the device.
#pragma once
#include <cuda_runtime.h>

#include "cuda/flash_fwd.cuh"
#include "spattn/attention.hpp"

namespace spattn::cuda {

// FlashParams of q, k, v, out (checked by check_qkv_out) for kernel tiles of `rows` query rows.
FlashParams base_params(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse, int rows);

// The query-sparse kernel (64 listed rows a block) over p.rows[0, p.q_len).
void launch_query_sparse(DType dtype, int64_t d, const FlashParams& p, cudaStream_t stream);

// The block-sparse kernel over p.list_offsets / p.list_tiles for kernel tiles of `rows` (64 or
// 128) query rows; 128-row tiles run the wgmma kernel on a Hopper GPU.
void launch_block_sparse(DType dtype, int64_t d, int rows, const FlashParams& p,
                         cudaStream_t stream);

}  // namespace spattn::cuda
