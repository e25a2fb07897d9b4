#include "bench_common.hpp"

#include <utility>

#include "kernels/flash_common.hpp"

namespace spattn::bench {

namespace {
MachinePeak g_peak;
}

void set_machine_peak(const MachinePeak& peak) { g_peak = peak; }
const MachinePeak& machine_peak() { return g_peak; }

Tensor filled_tensor(DType t, int64_t heads, int64_t seq, int64_t dim, uint32_t seed) {
  Tensor out(DType::f32, heads, seq, dim);
  float* p = out.data_as<float>();
  uint32_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < out.numel(); ++i) {
    x = x * 1664525u + 1013904223u;  // LCG: cheap and the same on every machine
    p[i] = float(x >> 8) / float(1u << 24) * 2.0f - 1.0f;
  }
  return out.dtype() == t ? std::move(out) : Tensor::copy_of(out.view(), t);
}

void report_flops(benchmark::State& state, double flops_per_iteration, double loop_seconds,
                  DType input) {
  const double total = flops_per_iteration * double(state.iterations());
  state.counters["FLOP/s"] = benchmark::Counter(total, benchmark::Counter::kIsRate);
  // The micro-benchmarks run with default options: bf16 inputs take the dot path where it runs.
  const bool dot = input == DType::bf16 && kernels::bf16_dot_supported();
  if (dot) state.SetLabel("bf16-dot");
  const double peak = dot ? g_peak.bf16_dot_gflops : g_peak.fma_gflops;
  if (loop_seconds <= 0) return;
  const double gflops = total / loop_seconds / 1e9;
  if (peak > 0) state.counters["%peak"] = 100.0 * gflops / peak;
  if (dot && g_peak.fma_gflops > 0) state.counters["%fma"] = 100.0 * gflops / g_peak.fma_gflops;
}

}  // namespace spattn::bench
