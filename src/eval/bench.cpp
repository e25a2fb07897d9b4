// The bench loop behind `spattn bench` and spattn.bench() in Python (see spattn/bench.hpp).
#include "spattn/bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include <nlohmann/json.hpp>

#include "eval/bench_parts.hpp"
#include "kernels/flash_common.hpp"
#include "spattn/error.hpp"
#include "spattn/modality.hpp"

namespace spattn {

std::string canonical_spec(const MethodSpec& s) {
  std::string text = s.name;
  char sep = ':';
  for (const auto& [key, value] : s.params) {
    text += sep + key + "=" + value;
    sep = ',';
  }
  return text;
}

namespace {

std::vector<MethodSpec> collect_specs(const std::vector<std::string>& texts,
                                      const std::vector<std::string>& names, bool causal,
                                      std::vector<std::string>& left_out) {
  std::vector<MethodSpec> specs{parse_method_spec("dense")};
  if (texts.empty() && names.empty()) {
    for (const MethodInfo& m : method_catalog()) {
      if (m.name == "dense") continue;
      if (m.causal_only && !causal) {
        left_out.push_back(m.name);
        continue;
      }
      specs.push_back(parse_method_spec(m.default_spec));
    }
    return specs;
  }
  auto add = [&](MethodSpec s) {
    for (const auto& have : specs)
      if (canonical_spec(have) == canonical_spec(s)) return;
    specs.push_back(std::move(s));
  };
  for (const auto& text : texts) add(parse_method_spec(text));
  for (const auto& name : names) {
    MethodSpec s = parse_method_spec(name);
    SPATTN_CHECK(s.params.empty(), "--methods takes plain names, got '", name,
                 "'; use --method NAME:key=value for parameters");
    add(std::move(s));
  }
  return specs;
}

using bench_parts::median;

struct Problem {
  const TensorView &q, &k, &v;
  AttnOptions opt;
};

// bf16 inputs: auto times the dense kernel on a small problem with both paths and keeps the
// faster (kernels::choose_bf16_path); dot and widen force one. The choice goes into this
// bench's own options (AttnOptions::bf16_dot) and its record, nowhere else: another thread's
// calls, and this process's later ones, take their own.
BenchOperands choose_operands(const std::string& mode, Problem& p) {
  BenchOperands r;
  r.mode = mode;
  r.input = dtype_name(p.q.dtype);
  r.bf16_input = p.q.dtype == DType::bf16;
  if (r.bf16_input) {
    bool dot = mode == "dot";
    if (mode == "auto") {
      const kernels::Bf16PathChoice choice = kernels::choose_bf16_path(p.opt.threads, p.q.dim);
      r.timed = kernels::bf16_dot_supported();
      r.dot_ms = choice.dot_ms;
      r.widen_ms = choice.widen_ms;
      dot = choice.dot;
    }
    p.opt.bf16_dot = dot;
    if (dot && kernels::bf16_dot_supported()) r.operands = "bf16-dot";
  }
  return r;
}

// The report is built inside run(), so its cost is part of the time, as it is for any caller.
double run_once_ms(const Method& m, const Problem& p, const TensorView& out, const AttnOptions& opt,
                   MethodReport& report) {
  const auto t0 = std::chrono::steady_clock::now();
  report = m.run(p.q, p.k, p.v, out, opt);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

using bench_parts::say;

// One untimed run (it also validates the inputs, NaN/Inf included), then the metrics on its
// output: the kernels are deterministic, so every timed run computes the same output and
// report as this one.
BenchResult measure_method(const Method& m, const std::string& spec, const Problem& p,
                           const Tensor& out, const std::string& label, const BenchOptions& o) {
  BenchResult r;
  r.spec = spec;
  say(o, label + " warm-up");
  run_once_ms(m, p, out, p.opt, r.report);
  say(o, label + " metrics");
  AttnOptions unchecked = p.opt;
  unchecked.check_finite = false;
  r.recall = attention_recall(p.q, p.k, *r.report.coverage, unchecked);
  r.error = sampled_output_error(out, p.q, p.k, p.v, unchecked);
  return r;
}

std::vector<BenchResult> bench_all(const BenchMethods& m, const Problem& p, const BenchOptions& o) {
  const Tensor out(DType::f32, p.q.heads, p.q.seq, p.q.dim);
  std::vector<BenchResult> results;
  const size_t n = m.methods.size();
  for (size_t i = 0; i < n; ++i) {
    const std::string label = fmt::format("method {}/{} {}", i + 1, n, m.specs[i].text);
    results.push_back(measure_method(*m.methods[i], m.specs[i].text, p, out, label, o));
  }
  // Timed runs go round-robin over the methods: this machine's speed drifts over seconds
  // (memory bandwidth above all, which decode is bound by), and timing each method's runs
  // back to back would fold that drift into the speedups. The timed runs skip the input
  // check so they time the method alone.
  AttnOptions timed = p.opt;
  timed.check_finite = false;
  MethodReport scratch;
  for (int rep = 0; rep < o.repeat; ++rep)
    for (size_t i = 0; i < n; ++i) {
      say(o, fmt::format("run {}/{} {}", rep + 1, o.repeat, m.specs[i].text));
      results[i].run_ms.push_back(run_once_ms(*m.methods[i], p, out, timed, scratch));
    }
  for (auto& r : results) r.ms = median(r.run_ms);
  for (auto& r : results) r.speedup = r.ms > 0 ? results.front().ms / r.ms : 0.0;
  return results;
}

nlohmann::json machine_json(const MachineInfo& m) {
  return {{"cpu", m.cpu},   {"cores", m.cores},       {"threads", m.threads},
          {"simd", m.simd}, {"compiler", m.compiler}, {"blas", m.blas}};
}

nlohmann::json config_json(const BenchRun& run, const BenchSource& src) {
  nlohmann::json c;
  if (!src.workload.empty()) {
    c["workload"] = src.workload;
    c["seed"] = src.seed;
  } else if (!src.qkv.empty()) {
    c["qkv"] = src.qkv;
    c["layout"] = src.layout;
    if (!src.modality.empty()) c["modality"] = src.modality;
  }
  if (run.opt.modality && run.opt.modality->frame_tokens > 0)
    c["frame_tokens"] = run.opt.modality->frame_tokens;
  c["seq"] = run.seq;
  c["q_len"] = run.q_len;
  c["heads"] = run.heads;
  c["kv_heads"] = run.kv_heads;
  c["dim"] = run.dim;
  c["dtype"] = dtype_name(run.dtype);
  c["causal"] = run.opt.causal;
  c["repeat"] = run.repeat;
  c["threads"] = run.opt.threads;
  c["methods"] = run.specs;
  return c;
}

// What a row says on either device: its times, speed over dense, the work done and the
// recall of what it kept.
nlohmann::json common_result_json(const BenchResult& r) {
  return {
      {"method", r.spec},
      {"ms", r.ms},
      {"runs_ms", r.run_ms},
      {"speedup", r.speedup},
      {"sparsity", r.report.stats.sparsity()},
      {"score_entries", r.report.stats.score_entries},
      {"flops", r.report.stats.flops},
      {"recall", r.recall.mean},
      {"recall_min", r.recall.worst},
      {"path", kernel_path_name(r.report.path)},
      // null, or why the method ran the dense kernel ("budget", "estimate")
      {"dense_shortcut", r.report.dense_shortcut.empty() ? nlohmann::json(nullptr)
                                                         : nlohmann::json(r.report.dense_shortcut)},
      {"extras", r.report.extras},
      {"per_head", r.report.per_head}};
}

nlohmann::json result_json(const BenchResult& r, const MachinePeak& pk, const BenchOperands& op) {
  const double peak = op.peak_gflops(pk);
  nlohmann::json j = common_result_json(r);
  j["gflops"] = r.gflops();
  j["operands"] = op.operands;
  j["peak_fraction"] = peak > 0 ? r.gflops() / peak : 0.0;
  j["fma_peak_fraction"] = pk.fma_gflops > 0 ? r.gflops() / pk.fma_gflops : 0.0;
  j["rel_l2"] = r.error.rel_l2;
  j["cosine_min"] = r.error.cosine_min;
  j["cosine_mean"] = r.error.cosine_mean;
  j["max_abs"] = r.error.max_abs;
  const MethodReport& rep = r.report;
  // The name scripts read before per-head series had one place.
  if (const auto it = rep.per_head.find("head_skipped"); it != rep.per_head.end())
    j["skipped_per_head"] = it->second;
  return j;
}

// A device run's row: dense-equivalent TFLOP/s instead of CPU peak fractions; a method with
// no GPU path holds only why.
nlohmann::json device_result_json(const BenchResult& r, int64_t dim) {
  if (!r.unavailable.empty()) return {{"method", r.spec}, {"unavailable", r.unavailable}};
  nlohmann::json j = common_result_json(r);
  j["dense_equiv_tflops"] = r.dense_equiv_tflops(dim);
  j["rel_l2_vs_dense"] = r.error.rel_l2;
  j["cosine_min_vs_dense"] = r.error.cosine_min;
  j["max_abs_vs_dense"] = r.error.max_abs;
  return j;
}

std::string device_bench_json(const BenchRun& run, const BenchSource& source) {
  nlohmann::json j;
  j["device"] = run.device;
  j["host"] = machine_json(run.machine);
  j["timing"] = "CUDA events on the default stream, median of the timed runs";
  j["dense_vs_exact"] = {{"rel_l2", run.dense_exact_error.rel_l2},
                         {"cosine_min", run.dense_exact_error.cosine_min},
                         {"max_abs", run.dense_exact_error.max_abs}};
  j["config"] = config_json(run, source);
  j["config"]["device"] = "cuda";
  j["config"].erase("threads");
  j["config"]["host_threads"] = run.opt.threads;  // the CPU mask builders'
  j["results"] = nlohmann::json::array();
  for (const auto& r : run.results) j["results"].push_back(device_result_json(r, run.dim));
  return j.dump(2);
}

}  // namespace

BenchMethods make_bench_methods(const std::vector<std::string>& specs,
                                const std::vector<std::string>& names, bool causal) {
  BenchMethods m;
  m.specs = collect_specs(specs, names, causal, m.left_out);
  for (const auto& s : m.specs) m.methods.push_back(make_method(s));
  return m;
}

void check_bench_options(const BenchOptions& o) {
  SPATTN_CHECK(o.repeat >= 1 && o.repeat <= 10000, "--repeat must be in [1, 10000], got ",
               o.repeat);
  const std::string& mode = o.bf16_path;
  SPATTN_CHECK(mode == "auto" || mode == "dot" || mode == "widen",
               "--bf16-path must be auto, dot or widen, got '", mode, "'");
  SPATTN_CHECK(mode != "dot" || kernels::cpu_has_bf16_dot(),
               "--bf16-path dot: this CPU has no AVX512_BF16 dot product (use auto or widen)");
}

double BenchRun::kv_bytes() const {
  return 2.0 * double(kv_heads) * double(seq) * double(dim) * double(dtype_size(dtype));
}

double BenchRun::decode_read_gbps() const {
  if (results.empty() || results[0].report.path != KernelPath::decode || results[0].ms <= 0)
    return 0.0;
  return kv_bytes() / (results[0].ms * 1e-3) / 1e9;
}

BenchRun run_bench(const BenchMethods& methods, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttnOptions& opt, const BenchOptions& o) {
  check_bench_options(o);
  SPATTN_CHECK(opt.threads > 0, "threads must be resolved (> 0) before a bench, got ", opt.threads);
  SPATTN_CHECK(!methods.methods.empty() && methods.methods.size() == methods.specs.size(),
               "a bench needs its methods from make_bench_methods");
  Problem p{q, k, v, opt};
  BenchRun run;
  say(o, "choosing the bf16 operand path");
  run.operands = choose_operands(o.bf16_path, p);
  run.results = bench_all(methods, p, o);
  // The peaks are measured after the timed runs (they take the cores for a while), sgemm last.
  say(o, "measuring the machine's peaks");
  run.peak = measure_machine_peak(opt.threads);
  bench_parts::describe(run, methods, q, k, q.dtype, p.opt, o);  // p.opt: with the bf16 path
  return run;
}

std::string bench_json(const BenchRun& run, const BenchSource& source) {
  if (!run.device.empty()) return device_bench_json(run, source);
  const MachinePeak& pk = run.peak;
  const BenchOperands& op = run.operands;
  nlohmann::json j;
  j["machine"] = machine_json(run.machine);
  j["peak_gflops"] = pk.fma_gflops;  // the f32 FMA peak (was OpenBLAS sgemm)
  j["fma_gflops"] = pk.fma_gflops;
  j["bf16_dot_gflops"] = pk.bf16_dot_gflops;
  j["int8_dot_gops"] = pk.int8_dot_gops;
  j["sgemm_gflops"] = pk.sgemm_gflops;
  j["read_gbps"] = pk.read_gbps;
  if (op.bf16_input) {
    // Timings only where both paths were timed (auto on a CPU with the dot product).
    auto ms = [&](double x) { return op.timed ? nlohmann::json(x) : nlohmann::json(); };
    j["bf16_path"] = {{"mode", op.mode},
                      {"chosen", op.dot() ? "dot" : "widen"},
                      {"dot_ms", ms(op.dot_ms)},
                      {"widen_ms", ms(op.widen_ms)}};
  }
  if (const double gbps = run.decode_read_gbps(); gbps > 0)
    j["decode_read_gbps"] = gbps;  // dense decode's K and V bytes per second
  j["config"] = config_json(run, source);
  j["results"] = nlohmann::json::array();
  for (const auto& r : run.results) j["results"].push_back(result_json(r, pk, op));
  return j.dump(2);
}

}  // namespace spattn
