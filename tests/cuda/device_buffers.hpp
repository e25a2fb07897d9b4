// Device copies of host tensors and float arrays for the GPU tests: allocated and filled in the
// constructor, read back with to_host(), freed with the object; and the skip every GPU test
// opens with where no device is visible.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "assets.hpp"
#include "spattn/cuda.hpp"
#include "spattn/tensor.hpp"

#define SKIP_WITHOUT_GPU() \
  if (spattn::cuda::device_count() == 0) SPATTN_SKIP_NOT_APPLICABLE("no CUDA device")

namespace spattn::test {

struct DeviceTensor {
  void* ptr = nullptr;
  TensorView view;
  explicit DeviceTensor(const Tensor& host) {
    EXPECT_EQ(cudaMalloc(&ptr, host.nbytes()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    view = TensorView::hsd(ptr, host.dtype(), host.heads(), host.seq(), host.dim());
  }
  DeviceTensor(DType t, int64_t heads, int64_t seq, int64_t dim)
      : DeviceTensor(Tensor(t, heads, seq, dim)) {}
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() { cudaFree(ptr); }
  Tensor to_host() const {
    Tensor t(view.dtype, view.heads, view.seq, view.dim);
    EXPECT_EQ(cudaMemcpy(t.data(), ptr, t.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return t;
  }
};

struct DeviceFloats {
  float* ptr = nullptr;
  size_t n;
  explicit DeviceFloats(size_t n_) : n(n_) { EXPECT_EQ(cudaMalloc(&ptr, n * 4 + 4), cudaSuccess); }
  explicit DeviceFloats(const std::vector<float>& h) : DeviceFloats(h.size()) {
    EXPECT_EQ(cudaMemcpy(ptr, h.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  ~DeviceFloats() { cudaFree(ptr); }
  std::vector<float> to_host() const {
    std::vector<float> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

}  // namespace spattn::test
