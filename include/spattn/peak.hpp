// What this machine can do: a description of it, and the rates it reaches in this very
// process. Kernel GFLOP/s figures are read as a fraction of the physical peak of the operand
// path they ran on, so a number from a laptop and one from a server mean the same thing.
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
  int n = 2048;           // square matrix size: large enough that sgemm is compute bound
  double budget_s = 0.6;  // timed calls stop once this much time has passed ...
  int min_calls = 3;      // ... and at least this many were timed
  int max_calls = 20;
};

// Best-of-several GFLOP/s of OpenBLAS cblas_sgemm (n x n x n, 2 n^3 flops) on `threads`
// threads (0: all) as spattn runs it (blas::sgemm: slices on spattn's threads, OpenBLAS
// single-threaded), after one warm-up call. Takes about budget_s plus one call.
double measure_sgemm_gflops(int threads, const PeakOptions& opt = {});

// The machine's physical peaks, measured by register-bound loops on every thread at once
// (src/kernels/peak_loops.cpp), on the SIMD target the kernels dispatch to.
struct MachinePeak {
  double fma_gflops = 0;       // f32 FMA on full vectors: 2 flops per lane per FMA
  double bf16_dot_gflops = 0;  // vdpbf16ps: 4 flops per f32 lane; 0 where the kernels
                               // cannot use it (no AVX512_BF16)
  double int8_dot_gops = 0;    // vpdpbusd: 2 ops (a product and a sum) per byte pair; 0
                               // where the CPU has no AVX512_VNNI
  double sgemm_gflops = 0;     // OpenBLAS sgemm (measure_sgemm_gflops): a library's reach,
                               // not the machine's
  double read_gbps = 0;        // memory read bandwidth, 1e9 bytes/s, far beyond the caches
  std::string simd_target;     // the target the loops ran on (simd_target_name())
};

struct MachinePeakOptions {
  double rep_s = 0.02;                 // each timed repetition lasts about this long ...
  int reps = 5;                        // ... and the best of this many counts
  long long read_bytes = 256ll << 20;  // streamed buffer (at least 16 MiB per thread, so
                                       // well beyond the L3); 0: bandwidth not measured
  bool sgemm = true;                   // also measure sgemm (the slowest part)
  PeakOptions sgemm_opt{.budget_s = 0.2, .min_calls = 2};
};

// All four figures on `threads` threads (0: all), each the best of its repetitions: noise
// only ever slows a loop down, and on a shared machine many short repetitions catch a quiet
// window more often than a few long ones. The compute loops take about 2 x reps x rep_s, the
// bandwidth about rep_s plus the buffer's first touch, sgemm about its budget; sgemm runs
// last. About
// 0.7 s in all with the defaults on a quiet 2-core machine.
MachinePeak measure_machine_peak(int threads, const MachinePeakOptions& opt = {});

}  // namespace spattn
