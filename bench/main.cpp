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
  // The peaks' sanity (once a unit test, tests/eval/test_peak.cpp, where a timing ratio failed
  // under load): a register-bound FMA loop does at least about what a tuned sgemm does, and a
  // library reaching a tenth of the machine would be broken. A quarter, not a half: a core lost
  // to another process during one measurement (2-core Zen 3: FMA 84 GFLOP/s, sgemm 168).
  if (peak.sgemm_gflops > 0 &&
      !(peak.fma_gflops > 0.25 * peak.sgemm_gflops && peak.fma_gflops < 10.0 * peak.sgemm_gflops))
    std::fprintf(stderr,
                 "spattn_microbench: warning: f32 FMA peak %.1f GFLOP/s against sgemm's %.1f: "
                 "the peaks, and every %%peak below, are suspect (a loaded machine?)\n",
                 peak.fma_gflops, peak.sgemm_gflops);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
