// Scoped OpenBLAS thread count, for code that calls sgemm (mask estimates, the peak).
#pragma once
#include <cblas.h>

namespace spattn {

// Restores the thread count on scope exit, so a callee leaves its caller's BLAS settings alone.
class BlasThreads {
 public:
  explicit BlasThreads(int n) : saved_(openblas_get_num_threads()) { openblas_set_num_threads(n); }
  ~BlasThreads() { openblas_set_num_threads(saved_); }
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

 private:
  int saved_;
};

}  // namespace spattn
