// Device selection for callers that hold tensors on a given GPU (the Python package runs on
// the device of q, whatever the caller made current) and waiting on a stream.
#include <cuda_runtime.h>

#include "cuda/check.cuh"
#include "spattn/cuda.hpp"

namespace spattn::cuda {

int current_device() {
  SPATTN_CHECK(device_count() > 0, "cuda: no CUDA device is visible");
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

void set_device(int device) {
  const int n = device_count();
  SPATTN_CHECK(device >= 0 && device < n, "cuda: no CUDA device ", device, " (devices: ", n, ")");
  check(cudaSetDevice(device), "cudaSetDevice");
}

DeviceGuard::DeviceGuard(int device) {
  previous_ = current_device();
  if (previous_ != device) set_device(device);
}

DeviceGuard::~DeviceGuard() {
  // Restoring a device that existed a moment ago cannot fail short of a lost driver; a
  // destructor must not throw, so a failure is cleared and left.
  if (cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
}

void synchronize(void* stream) {
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
}

}  // namespace spattn::cuda
