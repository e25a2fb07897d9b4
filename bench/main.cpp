// spattn_microbench: Google Benchmark over the kernels (not in ctest; `make bench`).
// The context block names the SIMD target and the in-process sgemm peak, so the FLOP/s
// counters below can be read as a fraction of what this machine can do.
#include <benchmark/benchmark.h>

#include <cstdio>

#include "bench_common.hpp"
#include "spattn/attention.hpp"
#include "spattn/peak.hpp"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  spattn::bench::set_peak_gflops(spattn::measure_sgemm_gflops(0));
  benchmark::AddCustomContext("spattn_simd", spattn::simd_target_name());
  char peak[32];
  std::snprintf(peak, sizeof(peak), "%.1f", spattn::bench::peak_gflops());
  benchmark::AddCustomContext("sgemm_peak_gflops", peak);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
