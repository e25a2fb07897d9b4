// `spattn bench`: times dense and each requested method (by default every method at its paper
// defaults) on one attention problem and judges the sparse ones against exact attention (recall
// of softmax mass, output error at sampled rows). The loop itself is the library's run_bench
// (spattn/bench.hpp), which the Python package calls too; this file owns the flags and the table.
// What else a method did (its kernel path, its own values such as blasst's threshold and
// per-head skips) is printed from its MethodReport, whatever the method.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli.hpp"
#include "spattn/bench.hpp"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/metrics.hpp"
#include "spattn/modality.hpp"
#include "spattn/peak.hpp"

namespace spattn::cli {
namespace {

struct BenchCliOptions {
  ProblemOptions problem;
  std::vector<std::string> method_specs;  // --method, each "name[:key=value,...]"
  std::vector<std::string> method_names;  // --methods, plain names; neither: every method
  int repeat = 3;
  bool json = false;
  std::string bf16_path = "auto";  // --bf16-path: auto (time both), dot, widen
  std::vector<std::string>
      matched;                 // --matched: block top-k methods to run at each method's density
  std::string device = "cpu";  // --device: cpu, or cuda (the GPU paths, spattn/cuda.hpp)
};

std::string shape(const Tensor& t) {
  return fmt::format("[{}, {}, {}]", t.heads(), t.seq(), t.dim());
}

// After the table, whatever else each report holds: one line for its named values, one per
// per-head series; then which methods are evaluation-only or were left out.
void print_notes(const std::vector<BenchResult>& results,
                 const std::vector<std::string>& left_out) {
  std::vector<std::string> lines;
  for (const auto& r : results) {
    const MethodReport& rep = r.report;
    if (!rep.dense_shortcut.empty())
      lines.push_back(
          fmt::format("{}: ran the dense kernel: {}", r.spec,
                      rep.dense_shortcut == "budget"
                          ? "its budget covers every key block at this length (no estimate)"
                          : "its estimate kept every block"));
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
  // Every spec of an evaluation-only method, not the first alone: a sweep runs several.
  std::vector<std::string> evaluation;
  for (const MethodInfo& m : method_catalog())
    for (const auto& r : results)
      if (m.evaluation_only && parse_method_spec(r.spec).name == m.name)
        evaluation.push_back(r.spec);
  if (!evaluation.empty())
    lines.push_back(
        fmt::format("evaluation only (they compute more than dense to choose what "
                    "to compute; compare recall, not time): {}",
                    fmt::join(evaluation, ", ")));
  if (!left_out.empty())
    lines.push_back(fmt::format("left out (causal attention only): {}", fmt::join(left_out, ", ")));
  if (!lines.empty()) fmt::print("\n{}\n", fmt::join(lines, "\n"));
}

void print_peaks(const MachinePeak& pk, const BenchOperands& op) {
  const std::string bf16 =
      pk.bf16_dot_gflops > 0 ? fmt::format("{:.1f} GFLOP/s", pk.bf16_dot_gflops) : "none";
  fmt::print(
      "peak (measured in this process): f32 FMA {:.1f} GFLOP/s, bf16 dot {}, memory "
      "read {:.1f} GB/s; OpenBLAS sgemm {:.1f} GFLOP/s\n",
      pk.fma_gflops, bf16, pk.read_gbps, pk.sgemm_gflops);
  std::string how;
  if (op.timed)
    how = fmt::format(" (--bf16-path auto: dense probe dot {:.2f} ms, widened {:.2f} ms)",
                      op.dot_ms, op.widen_ms);
  else if (op.bf16_input)
    how = fmt::format(" (--bf16-path {})", op.mode);
  fmt::print("operands: {}{}{}; %peak is over the {} peak{}\n", op.operands,
             !op.dot() && op.input != "f32" ? " (" + op.input + " widened)" : "", how,
             op.dot() ? "bf16 dot" : "f32 FMA", op.dot() ? ", %fma over the f32 FMA peak" : "");
}

void print_table(const BenchRun& run, const Problem& p) {
  const MachineInfo& m = run.machine;
  const MachinePeak& pk = run.peak;
  const BenchOperands& op = run.operands;
  const std::vector<BenchResult>& results = run.results;
  const double peak = op.peak_gflops(pk);
  fmt::print("machine: {}, {} cores / {} threads, SIMD {}\n", m.cpu, m.cores, m.threads, m.simd);
  print_peaks(pk, op);
  fmt::print(
      "problem: {}, q {} kv {} {}, {}, {} threads, median of {} runs taken round-robin over the methods\n",
      p.source, shape(p.q), shape(p.k), dtype_name(p.q.dtype()), p.opt.causal ? "causal" : "full",
      p.opt.threads, run.repeat);
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
    fmt::print(
        "{:<{}}  {:>10.2f}  {:>8.1f}  {:>5.1f}%{}  {:>6.2f}x  {:>7.1f}%  {:>8.4f}  "
        "{:>8.4f}  {:>8.1e}  {}\n",
        r.spec, w, r.ms, r.gflops(), peak > 0 ? 100.0 * r.gflops() / peak : 0.0, fma, r.speedup,
        100.0 * r.report.stats.sparsity(), r.recall.mean, r.recall.worst, r.error.rel_l2,
        kernel_path_name(r.report.path));
  }
  if (const double gbps = run.decode_read_gbps(); gbps > 0 && pk.read_gbps > 0)
    fmt::print(
        "\ndense decode reads K and V ({:.1f} MB) at {:.1f} GB/s: {:.0f}% of the read "
        "bandwidth measured above\n",
        run.kv_bytes() / 1e6, gbps, 100.0 * gbps / pk.read_gbps);
  print_notes(results, run.left_out);
}

// --device cuda: one row per method as on the CPU, with dense-equivalent TFLOP/s (the dense
// problem's work over the row's time) in place of the CPU peak fractions, and errors against
// dense's own GPU output; a method with no GPU path gets a row that says so.
void print_table_cuda(const BenchRun& run, const Problem& p) {
  fmt::print("device: {}\n", run.device);
  fmt::print(
      "host: {}, {} threads (masks of mask-building methods are built there, inside "
      "their time)\n",
      run.machine.cpu, run.opt.threads);
  fmt::print(
      "problem: {}, q {} kv {} {} on the device, {}, median of {} runs timed with CUDA "
      "events, round-robin over the methods after one warm-up run each\n",
      p.source, shape(p.q), shape(p.k), dtype_name(run.dtype), p.opt.causal ? "causal" : "full",
      run.repeat);
  const OutputError& de = run.dense_exact_error;
  fmt::print(
      "dense against exact attention (sampled rows): rel-L2 {:.1e}, max-abs {:.1e}; the "
      "rows' errors are against dense's GPU output\n",
      de.rel_l2, de.max_abs);
  size_t w = 6;
  for (const auto& r : run.results) w = std::max(w, r.spec.size());
  fmt::print("\n{:<{}}  {:>10}  {:>8}  {:>7}  {:>8}  {:>8}  {:>8}  {:>8}\n", "method", w, "ms",
             "TFLOP/s", "speedup", "sparsity", "recall", "worst", "rel-L2");
  for (const auto& r : run.results) {
    if (!r.unavailable.empty()) {
      fmt::print("{:<{}}  not run on the GPU: {}\n", r.spec, w, r.unavailable);
      continue;
    }
    fmt::print("{:<{}}  {:>10.3f}  {:>8.1f}  {:>6.2f}x  {:>7.1f}%  {:>8.4f}  {:>8.4f}  {:>8.1e}\n",
               r.spec, w, r.ms, r.dense_equiv_tflops(run.dim), r.speedup,
               100.0 * r.report.stats.sparsity(), r.recall.mean, r.recall.worst, r.error.rel_l2);
  }
  fmt::print("\nTFLOP/s: the dense problem's work (4 d per causal entry) over each row's time\n");
  print_notes(run.results, run.left_out);
}

// --device: cpu or cuda; cuda needs the backend and a visible GPU, and bf16 or f16 inputs (the
// default there: bf16). Checked before any data is made.
void check_device(BenchCliOptions& o) {
  SPATTN_CHECK(o.device == "cpu" || o.device == "cuda", "--device must be cpu or cuda, got '",
               o.device, "'");
  if (o.device == "cpu") return;
  if (o.problem.dtype.empty()) o.problem.dtype = "bf16";
  check_bench_cuda(parse_dtype(o.problem.dtype));
}

// The parameter that sets a method's block count (MethodInfo::count_param), "" if none.
std::string count_param(const std::string& name) {
  for (const MethodInfo& m : method_catalog())
    if (m.name == name) return m.count_param;
  return "";
}

// --matched names, checked before any data is made: plain names of methods with a block count.
void check_matched(const std::vector<std::string>& names) {
  for (const auto& n : names) {
    SPATTN_CHECK(parse_method_spec(n).params.empty(), "--matched takes plain names, got '", n, "'");
    const std::string cp = count_param(n);
    try {
      SPATTN_CHECK(!cp.empty(), "no parameter sets its block count");
      make_method(parse_method_spec(n + ":" + cp + "=1"));
    } catch (const Error& e) {
      detail::fail("--matched: ", n, " has no block count to match a density with (", e.what(),
                   ")");
    }
  }
}

// The budgets other than a count: a mass (topp) or a share threshold (momo's min_share).
bool budget_key(const std::string& key) { return key == "topp" || key == "min_share"; }
bool has_budget(const MethodSpec& s) {
  for (const auto& kv : s.params)
    if (budget_key(kv.first)) return true;
  return false;
}

// The spec of method `name` keeping `count` blocks per query block: bare, or, for the count
// twin of `of` (the same method under another budget), of's parameters with it replaced.
MethodSpec count_spec(const std::string& name, int64_t count, const MethodSpec& of) {
  std::string text = name + ":";
  if (of.name == name && has_budget(of))
    for (const auto& [key, value] : of.params)
      if (!budget_key(key) && key != count_param(name)) text += key + "=" + value + ",";
  return parse_method_spec(fmt::format("{}{}={}", text, count_param(name), count));
}

// --matched: beside each method of the run (dense and the matched ones aside, but a matched
// one with a topp or min_share budget included), each named block-count method (oracle_topk
// and mean_pool by `topk`, momo by `k_trim`) at the count whose sparsity comes closest to that
// method's, found by bisection (sparsity falls as the count grows), so recall and error
// compare at matched density in one command. A topp or min_share run's own method is matched
// with its other parameters kept (count_spec). Returns one note per row added.
std::vector<std::string> add_matched(const std::vector<std::string>& names, BenchMethods& bm,
                                     const Problem& p, Progress& progress) {
  std::vector<MethodSpec>& specs = bm.specs;
  std::vector<std::unique_ptr<Method>>& methods = bm.methods;
  const Tensor out(DType::f32, p.q.heads(), p.q.seq(), p.q.dim());
  auto sparsity = [&](const Method& m) {
    return m.run(p.q, p.k, p.v, out, p.opt).stats.sparsity();
  };
  std::vector<MethodSpec> all;
  std::vector<std::unique_ptr<Method>> built;
  std::vector<std::string> notes;
  auto have = [&](const MethodSpec& x) {
    for (const auto& h : all)
      if (canonical_spec(h) == canonical_spec(x)) return true;
    return false;
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    // A matched method is matched to itself only under another budget (topp, min_share): its
    // count twin at the same density is the comparison such a budget is for.
    const bool reference =
        i > 0 && (std::find(names.begin(), names.end(), specs[i].name) == names.end() ||
                  has_budget(specs[i]));
    all.push_back(specs[i]);
    built.push_back(std::move(methods[i]));
    if (!reference) continue;
    progress.update(fmt::format("matching density of {}", specs[i].text));
    const double target = sparsity(*built.back());
    for (const auto& n : names) {
      auto at = [&](int64_t topk) { return count_spec(n, topk, specs[i]); };
      auto s_at = [&](int64_t topk) { return sparsity(*make_method(at(topk))); };
      // Smallest topk with sparsity <= target in [1, hi]; hi keeps every key block.
      int64_t lo = 1, hi = (p.k.seq() + 63) / 64 + 1;
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        progress.update(
            fmt::format("matching {} to {}: {} {}", n, specs[i].text, count_param(n), mid));
        if (s_at(mid) <= target)
          hi = mid;
        else
          lo = mid + 1;
      }
      int64_t k = lo;
      double got = s_at(k);
      if (k > 1) {
        const double below = s_at(k - 1);
        if (std::abs(below - target) < std::abs(got - target)) k -= 1, got = below;
      }
      MethodSpec m = at(k);
      notes.push_back(fmt::format("{} matches {} ({:.1f}% against {:.1f}% sparsity)", m.text,
                                  specs[i].text, 100 * got, 100 * target));
      if (have(m)) continue;
      built.push_back(make_method(m));
      all.push_back(std::move(m));
    }
  }
  specs = std::move(all);
  methods = std::move(built);
  return notes;
}

void run_bench_command(BenchCliOptions o) {
  check_device(o);
  BenchOptions bo;
  bo.repeat = o.repeat;
  bo.bf16_path = o.bf16_path;
  check_bench_options(bo);
  // Methods are built before any data is made: a typo in a name fails at once.
  BenchMethods methods = make_bench_methods(o.method_specs, o.method_names, o.problem.causal);
  check_matched(o.matched);
  const Problem p = load_problem(o.problem);
  Progress progress("bench");
  bo.progress = [&progress](const std::string& status) { progress.update(status); };
  const std::vector<std::string> matched =
      o.matched.empty() ? std::vector<std::string>{} : add_matched(o.matched, methods, p, progress);
  const bool gpu = o.device == "cuda";
  const BenchRun run = gpu ? run_bench_cuda(methods, p.q, p.k, p.v, p.opt, bo, p.q.dtype())
                           : run_bench(methods, p.q, p.k, p.v, p.opt, bo);
  progress.done();
  if (o.json) {
    BenchSource src;
    if (o.problem.qkv.empty()) {
      src.workload = o.problem.workload;
      src.seed = o.problem.seed;
    } else {
      src.qkv = o.problem.qkv;
      src.layout = o.problem.layout;
      src.modality = o.problem.modality;
    }
    std::cout << bench_json(run, src) << std::endl;
  } else {
    if (gpu)
      print_table_cuda(run, p);
    else
      print_table(run, p);
    if (!matched.empty()) fmt::print("\nmatched density:\n  {}\n", fmt::join(matched, "\n  "));
  }
}

}  // namespace

void add_bench_command(CLI::App& root) {
  auto o = std::make_shared<BenchCliOptions>();
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
  cmd->add_option("--matched", o->matched,
                  "block-count methods (oracle_topk, mean_pool, momo) to run beside each other "
                  "method at the count (topk, momo's k_trim) that matches its sparsity: a,b")
      ->delimiter(',');
  cmd->add_flag("--json", o->json, "print one JSON object instead of the table");
  cmd->add_option("--bf16-path", o->bf16_path,
                  "operand path for bf16 inputs: auto (time both, keep the faster), dot "
                  "(AVX512_BF16 dot products), widen (to f32)")
      ->capture_default_str();
  cmd->add_option("--device", o->device,
                  "where the methods run: cpu, or cuda (inputs uploaded once as bf16, or "
                  "--dtype f16; timed with CUDA events)")
      ->capture_default_str();
  cmd->callback([o] { run_bench_command(*o); });
}

}  // namespace spattn::cli
