// CUDA status checks and device buffers for the host side of the GPU forms: every CUDA error
// becomes a named spattn::Error, every pointer is checked to be device memory before a kernel
// reads it, and scratch lives in stream-ordered allocations freed on the stream they serve.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "spattn/error.hpp"

namespace spattn::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear a sticky-free error so the next call starts clean
    detail::fail("CUDA error in ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
                 ")");
  }
}

// The device `p` (named `name` in messages) lives on; throws Error for host or unknown memory:
// a host tensor where a device one is needed.
inline int device_of(const void* p, const char* name, const char* who) {
  SPATTN_CHECK(p != nullptr, who, ": ", name, " is null");
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) (void)cudaGetLastError();
  SPATTN_CHECK(
      e == cudaSuccess && (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged), who,
      ": ", name,
      " is not in CUDA device memory (a host tensor where a device one "
      "is needed)");
  return a.device;
}

// n elements of T on the device, zero-filled, allocated and freed in order on one stream.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_) (void)cudaFreeAsync(ptr_, stream_);
  }
  void alloc(size_t n, cudaStream_t s) {
    stream_ = s, n_ = n;
    if (n == 0) return;
    check(cudaMallocAsync(reinterpret_cast<void**>(&ptr_), n * sizeof(T), s), "cudaMallocAsync");
    check(cudaMemsetAsync(ptr_, 0, n * sizeof(T), s), "cudaMemsetAsync");
  }
  void upload(const std::vector<T>& host, cudaStream_t s) {
    alloc(host.size(), s);
    if (n_)
      check(cudaMemcpyAsync(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice, s),
            "cudaMemcpyAsync");
  }
  std::vector<T> to_host(cudaStream_t s) const {
    std::vector<T> host(n_);
    if (n_) {
      check(cudaMemcpyAsync(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost, s),
            "cudaMemcpyAsync");
      check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    }
    return host;
  }
  T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
  cudaStream_t stream_ = nullptr;
};

}  // namespace spattn::cuda
