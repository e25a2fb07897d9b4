// GPU time on a stream from CUDA events (spattn bench --device cuda): the GPU's own clock,
// not the host's, so queued-but-not-run work is not counted and finished work is.
#include <cuda_runtime.h>

#include "cuda/check.cuh"
#include "spattn/cuda.hpp"

namespace spattn::cuda {

EventTimer::EventTimer() {
  SPATTN_CHECK(device_count() > 0, "cuda EventTimer: no CUDA device is visible");
  cudaEvent_t a = nullptr, b = nullptr;
  check(cudaEventCreate(&a), "cudaEventCreate");
  if (const cudaError_t e = cudaEventCreate(&b); e != cudaSuccess) {
    cudaEventDestroy(a);
    check(e, "cudaEventCreate");
  }
  start_ = a, stop_ = b;
}

EventTimer::~EventTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void EventTimer::start(void* stream) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(start_), static_cast<cudaStream_t>(stream)),
        "cudaEventRecord");
}

void EventTimer::stop(void* stream) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(stop_), static_cast<cudaStream_t>(stream)),
        "cudaEventRecord");
}

double EventTimer::ms() const {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)), "cudaEventSynchronize");
  float ms = 0;
  check(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)),
      "cudaEventElapsedTime");
  return double(ms);
}

}  // namespace spattn::cuda
