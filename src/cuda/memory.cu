// Device memory queries and copies for code that holds a TensorView and must know where it
// lives (Method::run's dispatch) or needs it on the host (masks built on the CPU).
#include <cuda_runtime.h>

#include "cuda/check.cuh"
#include "spattn/cuda.hpp"

namespace spattn::cuda {

bool is_device_pointer(const void* p) {
  // The driver is asked once whether there is a GPU at all, so host-only runs in a CUDA build
  // pay one query per process, not one per call.
  static const bool any = device_count() > 0;
  if (!any || !p) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

Tensor to_host(const TensorView& v, void* stream) {
  (void)device_of(v.data, "tensor", "cuda to_host");
  SPATTN_CHECK(v.stride_dim == 1, "cuda to_host: the head dimension must be contiguous");
  Tensor t(v.dtype, v.heads, v.seq, v.dim);
  const size_t es = dtype_size(v.dtype);
  const auto s = static_cast<cudaStream_t>(stream);
  // One 2D copy per head: rows of dim elements at the view's row stride.
  for (int64_t h = 0; h < v.heads; ++h)
    check(cudaMemcpy2DAsync(static_cast<char*>(t.data()) + size_t(h * v.seq * v.dim) * es,
                            size_t(v.dim) * es, v.ptr(h, 0), size_t(v.stride_seq) * es,
                            size_t(v.dim) * es, size_t(v.seq), cudaMemcpyDeviceToHost, s),
          "cudaMemcpy2DAsync");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  return t;
}

}  // namespace spattn::cuda
