#include "cuda/pool_rows.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/check.cuh"
#include "spattn/error.hpp"

namespace spattn::cuda {
namespace {

// Per (block b, head h) of t: the mean of its rows [b * block, ...), double sums as the host's
// mean_pool_rows, at out[(h * nb + b) * d ...] as f32.
template <class T>
__global__ void mean_rows_kernel(const T* t, int64_t stride_h, int64_t stride_s, int seq, int d,
                                 int block, float* out) {
  const int b = blockIdx.x, h = blockIdx.y;
  const int s0 = b * block, s1 = min(seq, s0 + block);
  const int nb = gridDim.x;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    double sum = 0;
    for (int s = s0; s < s1; ++s) sum += double(float(t[h * stride_h + int64_t(s) * stride_s + c]));
    out[(int64_t(h) * nb + b) * d + c] = float(sum / double(s1 - s0));
  }
}

template <class T>
void launch(const TensorView& t, int64_t block, float* out, cudaStream_t s) {
  const unsigned nb = unsigned((t.seq + block - 1) / block);
  mean_rows_kernel<T><<<dim3(nb, unsigned(t.heads)), 128, 0, s>>>(
      static_cast<const T*>(t.data), t.stride_head, t.stride_seq, int(t.seq), int(t.dim),
      int(block), out);
  check(cudaGetLastError(), "mean_rows_kernel launch");
}

}  // namespace

void pool_rows(const TensorView& t, int64_t block, float* out, cudaStream_t s) {
  SPATTN_CHECK(block >= 1 && t.seq >= 1 && t.stride_dim == 1, "cuda pool_rows: block ", block,
               " over ", t.shape_str());
  if (t.dtype == DType::bf16)
    launch<__nv_bfloat16>(t, block, out, s);
  else
    launch<__half>(t, block, out, s);
}

}  // namespace spattn::cuda
