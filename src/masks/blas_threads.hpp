// Scoped OpenBLAS thread count, for the estimates that use sgemm.
#pragma once
#include <cblas.h>

namespace spattn::masks {

// Restores OpenBLAS's thread count on scope exit, so an estimate leaves callers' BLAS alone.
class BlasThreads {
 public:
  explicit BlasThreads(int n) : saved_(openblas_get_num_threads()) { openblas_set_num_threads(n); }
  ~BlasThreads() { openblas_set_num_threads(saved_); }
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

 private:
  int saved_;
};

}  // namespace spattn::masks
