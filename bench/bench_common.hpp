// Helpers shared by the micro-benchmarks: deterministic inputs and FLOP counters.
#pragma once
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>

#include "spattn/peak.hpp"
#include "spattn/tensor.hpp"

namespace spattn::bench {

// The machine's peaks, measured once in main before any benchmark runs.
void set_machine_peak(const MachinePeak& peak);
const MachinePeak& machine_peak();

// [heads, seq, dim] filled with a fixed pseudo-random pattern in [-1, 1): the dense kernel's
// speed does not depend on the values, only that they are finite and not all equal.
Tensor filled_tensor(DType t, int64_t heads, int64_t seq, int64_t dim, uint32_t seed);

// Wall time of the timing loop, for counters Google Benchmark cannot derive itself.
class LoopTimer {
 public:
  LoopTimer() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Counters for `flops` per iteration: "FLOP/s" (a rate) and "%peak", the share of the peak of
// the operand path the kernel ran on over `loop_seconds` of wall time. `input` is the
// inputs' dtype: bf16 on the bf16 dot path (label "bf16-dot") is measured against the bf16
// dot peak and also gets "%fma", the share of the f32 FMA peak; everything else runs on f32
// operands and is measured against the f32 FMA peak.
void report_flops(benchmark::State& state, double flops_per_iteration, double loop_seconds,
                  DType input = DType::f32);

}  // namespace spattn::bench
