// What this machine can do: a description of it, and the f32 matrix-multiply rate it reaches
// in this very process. Kernel GFLOP/s figures are read as a fraction of that peak, so a
// number from a laptop and one from a server mean the same thing.
#pragma once
#include <string>

namespace spattn {

struct MachineInfo {
  std::string cpu;       // model name from /proc/cpuinfo ("unknown" elsewhere)
  int cores = 0;         // physical cores (0 if unknown)
  int threads = 0;       // hardware threads this process may run on
  std::string simd;      // the SIMD target the kernels dispatch to
  std::string compiler;  // compiler and version this binary was built with
  std::string blas;      // OpenBLAS build configuration
};
MachineInfo machine_info();

struct PeakOptions {
  int n = 2048;            // square matrix size: large enough that sgemm is compute bound
  double budget_s = 0.6;   // timed calls stop once this much time has passed ...
  int min_calls = 3;       // ... and at least this many were timed
  int max_calls = 20;
};

// Best-of-several GFLOP/s of OpenBLAS cblas_sgemm (n x n x n, 2 n^3 flops) on `threads`
// threads (0: all), after one warm-up call. Takes about budget_s plus one call.
double measure_sgemm_gflops(int threads, const PeakOptions& opt = {});

}  // namespace spattn
