// The bench loop on a CUDA device (run_bench_cuda in spattn/bench.hpp): the CPU bench's
// methods and judgement, with the inputs in device memory and the time from CUDA events. It
// reaches the GPU only through spattn/cuda.hpp, so it builds (and throws) without CUDA.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "eval/bench_parts.hpp"
#include "spattn/bench.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

using bench_parts::median;
using bench_parts::say;

struct DeviceProblem {
  cuda::DeviceTensor q, k, v, out;
};

// One run between two events on the default stream.
double timed_run_ms(const Method& m, const DeviceProblem& d, const AttnOptions& opt,
                    MethodReport& report) {
  cuda::EventTimer t;
  t.start(opt.stream);
  report = m.run(d.q, d.k, d.v, d.out, opt);
  t.stop(opt.stream);
  return t.ms();
}

}  // namespace

void check_bench_cuda(DType dtype) {
  SPATTN_CHECK(cuda::built(),
               "--device cuda: this spattn was built without CUDA (configure "
               "with a CUDA compiler and SPATTN_CUDA=auto or on)");
  SPATTN_CHECK(cuda::device_count() > 0,
               "--device cuda: no CUDA device is visible (driver or "
               "GPU missing, or CUDA_VISIBLE_DEVICES empty)");
  SPATTN_CHECK(dtype == DType::bf16 || dtype == DType::f16,
               "--device cuda: the GPU kernels take bf16 or f16 inputs, got ", dtype_name(dtype));
}

BenchRun run_bench_cuda(const BenchMethods& methods, const TensorView& q, const TensorView& k,
                        const TensorView& v, const AttnOptions& opt, const BenchOptions& o,
                        DType dtype) {
  check_bench_options(o);
  check_bench_cuda(dtype);
  SPATTN_CHECK(opt.threads > 0, "threads must be resolved (> 0) before a bench, got ", opt.threads);
  SPATTN_CHECK(!methods.methods.empty() && methods.methods.size() == methods.specs.size(),
               "a bench needs its methods from make_bench_methods");
  BenchRun run;
  run.device = cuda::device_description(cuda::current_device()) + ", prefill kernel " +
               cuda::prefill_kernel();
  // The host copies in the device's dtype: recall and the exact reference see the values the
  // GPU sees.
  const Tensor hq = Tensor::copy_of(q, dtype), hk = Tensor::copy_of(k, dtype),
               hv = Tensor::copy_of(v, dtype);
  say(o, "uploading q, k, v");
  DeviceProblem d{cuda::DeviceTensor::upload(hq, dtype), cuda::DeviceTensor::upload(hk, dtype),
                  cuda::DeviceTensor::upload(hv, dtype),
                  cuda::DeviceTensor(dtype, q.heads, q.seq, q.dim)};
  AttnOptions unchecked = opt;
  unchecked.check_finite = false;

  const size_t n = methods.methods.size();
  std::vector<BenchResult> results(n);
  std::optional<Tensor> dense_out;
  for (size_t i = 0; i < n; ++i) {
    BenchResult& r = results[i];
    r.spec = methods.specs[i].text;
    const std::string label = fmt::format("method {}/{} {}", i + 1, n, r.spec);
    say(o, label + " warm-up");
    try {
      timed_run_ms(*methods.methods[i], d, opt, r.report);
    } catch (const Error& e) {
      if (i == 0) throw;  // dense is the baseline: without it there is no bench
      r.unavailable = e.what();
      continue;
    }
    say(o, label + " metrics");
    Tensor out = cuda::to_host(d.out);
    r.recall = attention_recall(hq, hk, *r.report.coverage, unchecked);
    if (i == 0) {
      run.dense_exact_error = sampled_output_error(out, hq, hk, hv, unchecked);
      dense_out = std::move(out);
    }
    r.error = compare_outputs(i == 0 ? dense_out->view() : out.view(), dense_out->view());
  }
  // Round-robin, as on the CPU; timed runs skip the finite check (the warm-up did it).
  MethodReport scratch;
  for (int rep = 0; rep < o.repeat; ++rep)
    for (size_t i = 0; i < n; ++i) {
      if (!results[i].unavailable.empty()) continue;
      say(o, fmt::format("run {}/{} {}", rep + 1, o.repeat, results[i].spec));
      results[i].run_ms.push_back(timed_run_ms(*methods.methods[i], d, unchecked, scratch));
    }
  for (auto& r : results)
    if (r.unavailable.empty()) r.ms = median(r.run_ms);
  for (auto& r : results)
    if (r.unavailable.empty()) r.speedup = r.ms > 0 ? results.front().ms / r.ms : 0.0;
  run.results = std::move(results);
  // The machine: the host, which builds the masks of mask-building methods.
  bench_parts::describe(run, methods, q, k, dtype, opt, o);
  return run;
}

}  // namespace spattn
