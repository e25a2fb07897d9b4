// Device memory queries and copies for code that holds a TensorView and must know where it
// lives (Method::run's dispatch) or needs it on the host (masks built on the CPU), and the
// owning DeviceTensor (bench's inputs and outputs).
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

DeviceTensor::DeviceTensor(DType t, int64_t heads, int64_t seq, int64_t dim) {
  SPATTN_CHECK(heads >= 0 && seq >= 0 && dim >= 0, "cuda DeviceTensor: negative shape [", heads,
               ", ", seq, ", ", dim, "]");
  SPATTN_CHECK(device_count() > 0, "cuda DeviceTensor: no CUDA device is visible");
  const size_t bytes = size_t(heads * seq * dim) * dtype_size(t);
  void* p = nullptr;
  check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  // cudaMemset is asynchronous: wait for it, or a kernel on another stream could write the
  // tensor before the zeros land.
  cudaError_t e = cudaMemset(p, 0, bytes);
  if (e == cudaSuccess) e = cudaStreamSynchronize(nullptr);
  if (e != cudaSuccess) {
    cudaFree(p);
    check(e, "cudaMemset");
  }
  view_ = TensorView::hsd(p, t, heads, seq, dim);
}

DeviceTensor DeviceTensor::upload(const TensorView& host, DType t) {
  SPATTN_CHECK(!is_device_pointer(host.data),
               "cuda DeviceTensor::upload: the source is already "
               "in device memory (it takes a host view)");
  const Tensor staged = Tensor::copy_of(host, t);
  DeviceTensor d(t, host.heads, host.seq, host.dim);
  check(cudaMemcpy(d.view_.data, staged.data(), staged.nbytes(), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  return d;
}

DeviceTensor::~DeviceTensor() {
  if (view_.data) cudaFree(view_.data);
}

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& o) noexcept {
  if (this != &o) {
    if (view_.data) cudaFree(view_.data);
    view_ = o.view_;
    o.view_ = TensorView{};
  }
  return *this;
}

}  // namespace spattn::cuda
