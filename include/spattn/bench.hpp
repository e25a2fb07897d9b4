// Timing and judging methods on one attention problem: what `spattn bench` prints and what the
// Python package's spattn.bench() returns. Dense always runs first: it is the baseline every
// speedup is measured against. Sparse methods are judged against exact attention (recall of
// softmax mass, output error at sampled rows); what else a method did comes from its
// MethodReport, whatever the method.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/method.hpp"
#include "spattn/metrics.hpp"
#include "spattn/peak.hpp"
#include "spattn/report.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

// The methods one bench runs, built before any data is made so that a typo in a name fails
// at once. Dense first, then `specs` (each "name[:key=value,...]"), then `names` (plain
// names), each method once (parameters compared in sorted order). Neither given: every
// method of method_catalog() at its default spec; causal-only methods are left out of
// non-causal problems and named in left_out.
// Spec text with parameters in sorted order, so "m:a=1,b=2" and "m:b=2,a=1" are one method.
std::string canonical_spec(const MethodSpec& s);

struct BenchMethods {
  std::vector<MethodSpec> specs;
  std::vector<std::unique_ptr<Method>> methods;
  std::vector<std::string> left_out;
};
BenchMethods make_bench_methods(const std::vector<std::string>& specs,
                                const std::vector<std::string>& names, bool causal);

struct BenchOptions {
  int repeat = 3;                  // timed runs per method; the median is reported
  std::string bf16_path = "auto";  // bf16 inputs: auto (time both paths), dot, widen
  // Status lines for long runs ("method 2/5 blasst warm-up"); may be empty.
  std::function<void(const std::string&)> progress;
};
// Throws Error naming --repeat or --bf16-path when either is out of range.
void check_bench_options(const BenchOptions& o);

// The operand path this run's kernels took, how it was chosen, and the peak that goes with
// it: bf16 dot-product kernels are measured against the bf16 dot peak, everything else
// (f32 inputs, and bf16/f16 inputs widened to f32) against the f32 FMA peak.
struct BenchOperands {
  std::string operands = "f32";  // "bf16-dot" or "f32"
  std::string input;             // the inputs' dtype
  bool bf16_input = false;
  std::string mode;    // BenchOptions::bf16_path
  bool timed = false;  // auto mode with both paths available: the times below hold
  double dot_ms = 0, widen_ms = 0;
  bool dot() const { return operands == "bf16-dot"; }
  double peak_gflops(const MachinePeak& m) const {
    return dot() ? m.bf16_dot_gflops : m.fma_gflops;
  }
};

struct BenchResult {
  std::string spec;            // as written ("dense" for the baseline)
  std::vector<double> run_ms;  // timed runs, in order
  double ms = 0;               // their median
  MethodReport report;         // what one run did (identical for every run)
  Recall recall;
  OutputError error;
  double speedup = 0;  // dense ms / ms
  // Device runs: why the method did not run there (its Error, "<name>: no GPU path yet"); the
  // row holds nothing else. Empty: it ran.
  std::string unavailable;
  double gflops() const { return ms > 0 ? report.stats.flops / (ms * 1e-3) / 1e9 : 0.0; }
  // TFLOP/s of the dense problem's work (4 d per entry of the causal or full problem) in this
  // row's time: what a sparse method's speed is worth against dense's own TFLOP/s.
  double dense_equiv_tflops(int64_t dim) const {
    return ms > 0 ? attention_flops(report.stats.causal_entries, dim) / (ms * 1e-3) / 1e12 : 0.0;
  }
};

struct BenchRun {
  // Device runs (run_bench_cuda): cuda::device_description() of the GPU; empty on the CPU.
  std::string device;
  // Device runs: dense's output against exact attention at sampled rows (the other rows'
  // errors are against dense's device output).
  OutputError dense_exact_error;
  MachineInfo machine;
  MachinePeak peak;  // measured after the timed runs, in the same process
  BenchOperands operands;
  std::vector<std::string> specs;  // as run, dense first
  std::vector<std::string> left_out;
  std::vector<BenchResult> results;  // in specs order
  int64_t heads = 0, kv_heads = 0, q_len = 0, seq = 0, dim = 0;
  DType dtype = DType::f32;
  AttnOptions opt;
  int repeat = 0;
  // Dense decode's K and V bytes per second (decode is bound by reading them once); 0 for
  // prefill runs.
  double kv_bytes() const;
  double decode_read_gbps() const;
};

// Times every method round-robin (one untimed run each first, whose output the metrics
// judge), then measures the machine's peaks. Output is f32 whatever the input dtype: the error
// metrics judge the method, not the rounding of its output. opt.threads must be resolved (> 0).
BenchRun run_bench(const BenchMethods& methods, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttnOptions& opt, const BenchOptions& o);

// The same bench on the current CUDA device (`spattn bench --device cuda`): q, k, v (host views)
// uploaded once in `dtype` (bf16 or f16), every method run through Method::run on the device
// views (its GPU path), one warm-up run each whose output is copied back and judged, then
// o.repeat rounds round-robin timed with CUDA events on the default stream (host work a GPU
// path does before its kernel, a mask built on the CPU, is in its time), the median kept.
// Recall is computed on the host from the method's coverage, error against dense's device
// output. A method whose GPU run throws Error (no GPU path yet) gets a row saying so. Throws
// Error without the backend or a device. No CPU peaks are measured.
BenchRun run_bench_cuda(const BenchMethods& methods, const TensorView& q, const TensorView& k,
                        const TensorView& v, const AttnOptions& opt, const BenchOptions& o,
                        DType dtype);
// What run_bench_cuda needs before any data is made: the CUDA backend, a visible device, and
// dtype bf16 or f16; Error saying which is missing.
void check_bench_cuda(DType dtype);

// Where the problem came from, for the JSON record's "config": a generated workload and its
// seed, or a --qkv file and its layout; neither (both empty): arrays a caller passed.
struct BenchSource {
  std::string workload;
  uint64_t seed = 0;
  std::string qkv, layout;
  std::string modality;  // the --modality file beside a --qkv dump, if any
};
// The record `spattn bench --json` prints (one JSON object, indented).
std::string bench_json(const BenchRun& run, const BenchSource& source);

}  // namespace spattn
