#include "bench_common.hpp"

#include <utility>

namespace spattn::bench {

namespace {
double g_peak_gflops = 0;
}

void set_peak_gflops(double gflops) { g_peak_gflops = gflops; }
double peak_gflops() { return g_peak_gflops; }

Tensor filled_tensor(DType t, int64_t heads, int64_t seq, int64_t dim, uint32_t seed) {
  Tensor out(DType::f32, heads, seq, dim);
  float* p = out.data_as<float>();
  uint32_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < out.numel(); ++i) {
    x = x * 1664525u + 1013904223u;  // LCG: cheap and the same on every machine
    p[i] = float(x >> 8) / float(1u << 24) * 2.0f - 1.0f;
  }
  return t == DType::f32 ? std::move(out) : Tensor::copy_of(out.view(), t);
}

void report_flops(benchmark::State& state, double flops_per_iteration, double loop_seconds) {
  const double total = flops_per_iteration * double(state.iterations());
  state.counters["FLOP/s"] = benchmark::Counter(total, benchmark::Counter::kIsRate);
  if (g_peak_gflops > 0 && loop_seconds > 0)
    state.counters["%peak"] = 100.0 * total / loop_seconds / (g_peak_gflops * 1e9);
}

}  // namespace spattn::bench
