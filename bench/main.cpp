// spattn_microbench: Google Benchmark over the kernels (not in ctest; `make bench`).
// The context block names the SIMD target and the peaks measured in this process (f32 FMA,
// bf16 dot, memory read, and OpenBLAS sgemm for comparison), so the FLOP/s counters below can
// be read as a fraction of what this machine can do.
#include <benchmark/benchmark.h>

#include <cstdio>

#include "bench_common.hpp"
#include "spattn/attention.hpp"
#include "spattn/peak.hpp"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const spattn::MachinePeak peak = spattn::measure_machine_peak(0);
  spattn::bench::set_machine_peak(peak);
  benchmark::AddCustomContext("spattn_simd", spattn::simd_target_name());
  auto add = [](const char* key, double value) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f", value);
    benchmark::AddCustomContext(key, text);
  };
  add("fma_peak_gflops", peak.fma_gflops);
  add("bf16_dot_peak_gflops", peak.bf16_dot_gflops);
  add("read_peak_gbps", peak.read_gbps);
  add("sgemm_gflops", peak.sgemm_gflops);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
