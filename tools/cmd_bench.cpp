// `spattn bench`: times dense and each requested method (by default every method at its paper
// defaults) on one attention problem and judges the sparse ones against exact attention (recall
// of softmax mass, output error at sampled rows). Dense always runs first: it is the baseline
// every speedup is measured against. What else a method did (its kernel path, its own values
// such as blasst's threshold and per-head skips) is printed from its MethodReport, whatever the
// method.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "kernels/flash_common.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/metrics.hpp"
#include "spattn/modality.hpp"
#include "spattn/peak.hpp"

namespace spattn::cli {
namespace {

struct BenchOptions {
  ProblemOptions problem;
  std::vector<std::string> method_specs;  // --method, each "name[:key=value,...]"
  std::vector<std::string> method_names;  // --methods, plain names; neither: every method
  int repeat = 3;
  bool json = false;
  std::string bf16_path = "auto";  // --bf16-path: auto (time both), dot, widen
};

struct MethodResult {
  std::string spec;            // as the user wrote it ("dense" for the baseline)
  std::vector<double> run_ms;  // timed runs, in order
  double ms = 0;               // their median
  MethodReport report;         // what one run did (identical for every run)
  Recall recall;
  OutputError error;
  double speedup = 0;  // dense ms / ms
  double gflops() const { return ms > 0 ? report.stats.flops / (ms * 1e-3) / 1e9 : 0.0; }
};

// The operand path this run's kernels take, how it was chosen, and the peak that goes with
// it: bf16 dot-product kernels are measured against the bf16 dot peak, everything else
// (f32 inputs, and bf16/f16 inputs widened to f32) against the f32 FMA peak.
struct OperandPath {
  std::string operands = "f32";  // "bf16-dot" or "f32"
  std::string input;             // the inputs' dtype: bf16 and f16 are widened on the f32 path
  bool bf16_input = false;
  std::string mode;              // --bf16-path
  bool timed = false;            // auto mode with both paths available: choice holds timings
  kernels::Bf16PathChoice choice;
  bool dot() const { return operands == "bf16-dot"; }
  double peak_gflops(const MachinePeak& m) const {
    return dot() ? m.bf16_dot_gflops : m.fma_gflops;
  }
};

void check_bf16_path(const std::string& mode) {
  SPATTN_CHECK(mode == "auto" || mode == "dot" || mode == "widen",
               "--bf16-path must be auto, dot or widen, got '", mode, "'");
  SPATTN_CHECK(mode != "dot" || kernels::cpu_has_bf16_dot(),
               "--bf16-path dot: this CPU has no AVX512_BF16 dot product (use auto or widen)");
}

// bf16 inputs: auto times the dense kernel on a small problem with both paths and keeps the
// faster (kernels::choose_bf16_path); dot and widen force one.
OperandPath choose_operands(const std::string& mode, const Problem& p) {
  OperandPath r;
  r.mode = mode;
  r.input = dtype_name(p.q.dtype());
  r.bf16_input = p.q.dtype() == DType::bf16;
  if (r.bf16_input) {
    if (mode == "auto") {
      r.choice = kernels::choose_bf16_path(p.opt.threads, p.q.dim());
      r.timed = kernels::cpu_has_bf16_dot();
    } else {
      kernels::set_bf16_dot_enabled(mode == "dot");
    }
    if (kernels::bf16_dot_enabled() && kernels::cpu_has_bf16_dot()) r.operands = "bf16-dot";
  }
  return r;
}

// Spec text with parameters in sorted order, so "m:a=1,b=2" and "m:b=2,a=1" are one method.
std::string canonical(const MethodSpec& s) {
  std::string text = s.name;
  char sep = ':';
  for (const auto& [key, value] : s.params) {
    text += sep + key + "=" + value;
    sep = ',';
  }
  return text;
}

// Neither --method nor --methods: every method at its paper defaults, so the first run shows
// what spattn is for (speedup beside recall). Causal-only methods are left out of non-causal
// problems and named in `left_out`.
void add_default_specs(const BenchOptions& o, std::vector<MethodSpec>& specs,
                       std::vector<std::string>& left_out) {
  for (const MethodInfo& m : method_catalog()) {
    if (m.name == "dense") continue;
    if (m.causal_only && !o.problem.causal) {
      left_out.push_back(m.name);
      continue;
    }
    specs.push_back(parse_method_spec(m.default_spec));
  }
}

// The methods to run: dense first, then --method, then --methods, each once.
std::vector<MethodSpec> collect_specs(const BenchOptions& o, std::vector<std::string>& left_out) {
  std::vector<MethodSpec> specs{parse_method_spec("dense")};
  if (o.method_specs.empty() && o.method_names.empty()) {
    add_default_specs(o, specs, left_out);
    return specs;
  }
  auto add = [&](MethodSpec s) {
    for (const auto& have : specs)
      if (canonical(have) == canonical(s)) return;
    specs.push_back(std::move(s));
  };
  for (const auto& text : o.method_specs) add(parse_method_spec(text));
  for (const auto& name : o.method_names) {
    MethodSpec s = parse_method_spec(name);
    SPATTN_CHECK(s.params.empty(), "--methods takes plain names, got '", name,
                 "'; use --method NAME:key=value for parameters");
    add(std::move(s));
  }
  return specs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The report is built inside run(), so its cost is part of the time, as it is for any caller.
double run_once_ms(const Method& m, const Problem& p, const TensorView& out,
                   const AttnOptions& opt, MethodReport& report) {
  const auto t0 = std::chrono::steady_clock::now();
  report = m.run(p.q, p.k, p.v, out, opt);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One untimed run (it also validates the inputs, NaN/Inf included), then the metrics on its
// output: the kernels are deterministic, so every timed run computes the same output and
// report as this one.
MethodResult measure_method(const Method& m, const std::string& spec, const Problem& p,
                            const Tensor& out, const std::string& label, Progress& progress) {
  MethodResult r;
  r.spec = spec;
  progress.update(label + " warm-up");
  run_once_ms(m, p, out, p.opt, r.report);
  progress.update(label + " metrics");
  AttnOptions unchecked = p.opt;
  unchecked.check_finite = false;
  r.recall = attention_recall(p.q, p.k, *r.report.coverage, unchecked);
  r.error = sampled_output_error(out, p.q, p.k, p.v, unchecked);
  return r;
}

std::vector<MethodResult> bench_all(const std::vector<MethodSpec>& specs,
                                    std::vector<std::unique_ptr<Method>>& methods,
                                    const Problem& p, int repeat, Progress& progress) {
  // f32 output whatever the input dtype: the error metrics judge the method, not the
  // rounding of its output to bf16.
  const Tensor out(DType::f32, p.q.heads(), p.q.seq(), p.q.dim());
  std::vector<MethodResult> results;
  for (size_t i = 0; i < methods.size(); ++i) {
    const std::string label =
        fmt::format("method {}/{} {}", i + 1, methods.size(), specs[i].text);
    results.push_back(measure_method(*methods[i], specs[i].text, p, out, label, progress));
  }
  // Timed runs go round-robin over the methods: this machine's speed drifts over seconds
  // (memory bandwidth above all, which decode is bound by), and timing each method's runs
  // back to back would fold that drift into the speedups. The timed runs skip the input
  // check so they time the method alone.
  AttnOptions timed = p.opt;
  timed.check_finite = false;
  MethodReport scratch;
  for (int rep = 0; rep < repeat; ++rep)
    for (size_t i = 0; i < methods.size(); ++i) {
      progress.update(fmt::format("run {}/{} {}", rep + 1, repeat, specs[i].text));
      results[i].run_ms.push_back(run_once_ms(*methods[i], p, out, timed, scratch));
    }
  for (auto& r : results) r.ms = median(r.run_ms);
  for (auto& r : results) r.speedup = r.ms > 0 ? results.front().ms / r.ms : 0.0;
  return results;
}

std::string shape(const Tensor& t) {
  return fmt::format("[{}, {}, {}]", t.heads(), t.seq(), t.dim());
}

// After the table, whatever else each report holds: one line for its named values, one per
// per-head series; then which methods are evaluation-only or were left out.
void print_notes(const std::vector<MethodResult>& results,
                 const std::vector<std::string>& left_out) {
  std::vector<std::string> lines;
  for (const auto& r : results) {
    const MethodReport& rep = r.report;
    if (!rep.extras.empty()) {
      std::vector<std::string> values;
      for (const auto& [name, value] : rep.extras)
        values.push_back(fmt::format("{} {:.4g}", name, value));
      lines.push_back(fmt::format("{}: {}", r.spec, fmt::join(values, ", ")));
    }
    for (const auto& [name, values] : rep.per_head) {
      std::string line = r.spec + ": " + name + " per head:";
      for (size_t h = 0; h < values.size(); ++h) line += fmt::format(" h{} {:.3g}", h, values[h]);
      lines.push_back(line);
    }
  }
  std::vector<std::string> evaluation;
  for (const MethodInfo& m : method_catalog())
    for (const auto& r : results)
      if (m.evaluation_only && parse_method_spec(r.spec).name == m.name) {
        evaluation.push_back(r.spec);
        break;
      }
  if (!evaluation.empty())
    lines.push_back(fmt::format("evaluation only (they compute more than dense to choose what "
                                "to compute; compare recall, not time): {}",
                                fmt::join(evaluation, ", ")));
  if (!left_out.empty())
    lines.push_back(fmt::format("left out (causal attention only): {}", fmt::join(left_out, ", ")));
  if (!lines.empty()) fmt::print("\n{}\n", fmt::join(lines, "\n"));
}

void print_peaks(const MachinePeak& pk, const OperandPath& op) {
  const std::string bf16 =
      pk.bf16_dot_gflops > 0 ? fmt::format("{:.1f} GFLOP/s", pk.bf16_dot_gflops) : "none";
  fmt::print("peak (measured in this process): f32 FMA {:.1f} GFLOP/s, bf16 dot {}, memory "
             "read {:.1f} GB/s; OpenBLAS sgemm {:.1f} GFLOP/s\n",
             pk.fma_gflops, bf16, pk.read_gbps, pk.sgemm_gflops);
  std::string how;
  if (op.timed)
    how = fmt::format(" (--bf16-path auto: dense probe dot {:.2f} ms, widened {:.2f} ms)",
                      op.choice.dot_ms, op.choice.widen_ms);
  else if (op.bf16_input)
    how = fmt::format(" (--bf16-path {})", op.mode);
  fmt::print("operands: {}{}{}; %peak is over the {} peak{}\n", op.operands,
             !op.dot() && op.input != "f32" ? " (" + op.input + " widened)" : "", how,
             op.dot() ? "bf16 dot" : "f32 FMA", op.dot() ? ", %fma over the f32 FMA peak" : "");
}

// Decode is bound by reading the KV cache once: dense decode's K and V bytes per second, or 0
// for prefill runs.
// Bytes of K and V, which dense decode reads once.
double kv_bytes(const Problem& p) {
  return 2.0 * double(p.k.numel()) * double(dtype_size(p.k.dtype()));
}
double decode_read_gbps(const Problem& p, const std::vector<MethodResult>& results) {
  if (results.empty() || results[0].report.path != KernelPath::decode || results[0].ms <= 0)
    return 0.0;
  return kv_bytes(p) / (results[0].ms * 1e-3) / 1e9;
}

void print_table(const MachineInfo& m, const MachinePeak& pk, const OperandPath& op,
                 const Problem& p, const BenchOptions& o,
                 const std::vector<MethodResult>& results,
                 const std::vector<std::string>& left_out) {
  const double peak = op.peak_gflops(pk);
  fmt::print("machine: {}, {} cores / {} threads, SIMD {}\n", m.cpu, m.cores, m.threads, m.simd);
  print_peaks(pk, op);
  fmt::print("problem: {}, q {} kv {} {}, {}, {} threads, median of {} runs taken round-robin over the methods\n", p.source,
             shape(p.q), shape(p.k), dtype_name(p.q.dtype()), p.opt.causal ? "causal" : "full",
             p.opt.threads, o.repeat);
  size_t w = 6;
  for (const auto& r : results) w = std::max(w, r.spec.size());
  // %fma (bf16 dot runs only): the same GFLOP/s over the f32 FMA peak.
  const std::string fma_head = op.dot() ? fmt::format("  {:>6}", "%fma") : "";
  fmt::print("\n{:<{}}  {:>10}  {:>8}  {:>6}{}  {:>7}  {:>8}  {:>8}  {:>8}  {:>8}  {}\n", "method",
             w, "ms", "GFLOP/s", "%peak", fma_head, "speedup", "sparsity", "recall", "worst",
             "rel-L2", "path");
  for (const auto& r : results) {
    const double fma_pct = pk.fma_gflops > 0 ? 100.0 * r.gflops() / pk.fma_gflops : 0.0;
    const std::string fma = op.dot() ? fmt::format("  {:>5.1f}%", fma_pct) : "";
    fmt::print("{:<{}}  {:>10.2f}  {:>8.1f}  {:>5.1f}%{}  {:>6.2f}x  {:>7.1f}%  {:>8.4f}  "
               "{:>8.4f}  {:>8.1e}  {}\n",
               r.spec, w, r.ms, r.gflops(), peak > 0 ? 100.0 * r.gflops() / peak : 0.0, fma,
               r.speedup, 100.0 * r.report.stats.sparsity(), r.recall.mean, r.recall.worst,
               r.error.rel_l2, kernel_path_name(r.report.path));
  }
  if (const double gbps = decode_read_gbps(p, results); gbps > 0 && pk.read_gbps > 0)
    fmt::print("\ndense decode reads K and V ({:.1f} MB) at {:.1f} GB/s: {:.0f}% of the read "
               "bandwidth measured above\n",
               kv_bytes(p) / 1e6, gbps,
               100.0 * gbps / pk.read_gbps);
  print_notes(results, left_out);
}

nlohmann::json machine_json(const MachineInfo& m) {
  return {{"cpu", m.cpu},   {"cores", m.cores},       {"threads", m.threads},
          {"simd", m.simd}, {"compiler", m.compiler}, {"blas", m.blas}};
}

nlohmann::json config_json(const Problem& p, const BenchOptions& o,
                           const std::vector<MethodSpec>& specs) {
  nlohmann::json c;
  if (o.problem.qkv.empty()) {
    c["workload"] = o.problem.workload;
    c["seed"] = o.problem.seed;
  } else {
    c["qkv"] = o.problem.qkv;
    c["layout"] = o.problem.layout;
    if (!o.problem.modality.empty()) c["modality"] = o.problem.modality;
  }
  if (p.opt.modality) c["frame_tokens"] = p.opt.modality->frame_tokens;
  c["seq"] = p.k.seq();
  c["q_len"] = p.q.seq();
  c["heads"] = p.q.heads();
  c["kv_heads"] = p.k.heads();
  c["dim"] = p.q.dim();
  c["dtype"] = dtype_name(p.q.dtype());
  c["causal"] = p.opt.causal;
  c["repeat"] = o.repeat;
  c["threads"] = p.opt.threads;
  c["methods"] = nlohmann::json::array();
  for (const auto& s : specs) c["methods"].push_back(s.text);
  return c;
}

nlohmann::json result_json(const MethodResult& r, const MachinePeak& pk, const OperandPath& op) {
  const double peak = op.peak_gflops(pk);
  nlohmann::json j = {{"method", r.spec},
          {"ms", r.ms},
          {"runs_ms", r.run_ms},
          {"gflops", r.gflops()},
          {"operands", op.operands},
          {"peak_fraction", peak > 0 ? r.gflops() / peak : 0.0},
          {"fma_peak_fraction", pk.fma_gflops > 0 ? r.gflops() / pk.fma_gflops : 0.0},
          {"speedup", r.speedup},
          {"sparsity", r.report.stats.sparsity()},
          {"score_entries", r.report.stats.score_entries},
          {"flops", r.report.stats.flops},
          {"recall", r.recall.mean},
          {"recall_min", r.recall.worst},
          {"rel_l2", r.error.rel_l2},
          {"cosine_min", r.error.cosine_min},
          {"cosine_mean", r.error.cosine_mean},
          {"max_abs", r.error.max_abs}};
  const MethodReport& rep = r.report;
  j["path"] = kernel_path_name(rep.path);
  j["extras"] = rep.extras;
  j["per_head"] = rep.per_head;
  // The name scripts read before per-head series had one place.
  if (const auto it = rep.per_head.find("head_skipped"); it != rep.per_head.end())
    j["skipped_per_head"] = it->second;
  return j;
}

void print_json(const MachineInfo& m, const MachinePeak& pk, const OperandPath& op,
                const Problem& p, const BenchOptions& o, const std::vector<MethodSpec>& specs,
                const std::vector<MethodResult>& results) {
  nlohmann::json j;
  j["machine"] = machine_json(m);
  j["peak_gflops"] = pk.fma_gflops;  // the f32 FMA peak (was OpenBLAS sgemm)
  j["fma_gflops"] = pk.fma_gflops;
  j["bf16_dot_gflops"] = pk.bf16_dot_gflops;
  j["sgemm_gflops"] = pk.sgemm_gflops;
  j["read_gbps"] = pk.read_gbps;
  if (op.bf16_input) {
    // Timings only where both paths were timed (auto on a CPU with the dot product).
    auto ms = [&](double x) { return op.timed ? nlohmann::json(x) : nlohmann::json(); };
    j["bf16_path"] = {{"mode", op.mode},
                      {"chosen", op.dot() ? "dot" : "widen"},
                      {"dot_ms", ms(op.choice.dot_ms)},
                      {"widen_ms", ms(op.choice.widen_ms)}};
  }
  if (const double gbps = decode_read_gbps(p, results); gbps > 0)
    j["decode_read_gbps"] = gbps;  // dense decode's K and V bytes per second
  j["config"] = config_json(p, o, specs);
  j["results"] = nlohmann::json::array();
  for (const auto& r : results) j["results"].push_back(result_json(r, pk, op));
  std::cout << j.dump(2) << std::endl;
}

void run_bench(const BenchOptions& o) {
  SPATTN_CHECK(o.repeat >= 1 && o.repeat <= 10000, "--repeat must be in [1, 10000], got ",
               o.repeat);
  check_bf16_path(o.bf16_path);
  // Methods are built before any data is made: a typo in a name fails at once.
  std::vector<std::string> left_out;
  const std::vector<MethodSpec> specs = collect_specs(o, left_out);
  std::vector<std::unique_ptr<Method>> methods;
  for (const auto& s : specs) methods.push_back(make_method(s));
  const Problem p = load_problem(o.problem);
  Progress progress("bench");
  progress.update("choosing the bf16 operand path");
  const OperandPath op = choose_operands(o.bf16_path, p);
  const std::vector<MethodResult> results = bench_all(specs, methods, p, o.repeat, progress);
  // The peaks are measured after the timed runs, sgemm last: OpenBLAS's worker threads keep
  // spinning for a while after a call and would steal cores from whatever runs next.
  progress.update("measuring the machine's peaks");
  const MachinePeak peak = measure_machine_peak(p.opt.threads);
  progress.done();
  const MachineInfo machine = machine_info();
  if (o.json)
    print_json(machine, peak, op, p, o, specs, results);
  else
    print_table(machine, peak, op, p, o, results, left_out);
}

}  // namespace

void add_bench_command(CLI::App& root) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = root.add_subcommand(
      "bench", "time dense and sparse methods on one problem; report speed and accuracy");
  add_problem_options(*cmd, o->problem);
  // One spec per --method: specs contain commas ("name:a=1,b=2"), so no delimiter here.
  cmd->add_option("--method", o->method_specs, "method to run, NAME[:key=value,...] (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--methods", o->method_names,
                  "methods to run, plain names: a,b (neither option: every method)")
      ->delimiter(',');
  cmd->add_option("--q-len", o->problem.q_len,
                  "queries: the last N positions (1..16: decode kernels; 0: all, prefill)")
      ->capture_default_str();
  cmd->add_option("--repeat", o->repeat, "timed runs per method (the median is reported)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print one JSON object instead of the table");
  cmd->add_option("--bf16-path", o->bf16_path,
                  "operand path for bf16 inputs: auto (time both, keep the faster), dot "
                  "(AVX512_BF16 dot products), widen (to f32)")
      ->capture_default_str();
  cmd->callback([o] { run_bench(*o); });
}

}  // namespace spattn::cli
