// `spattn calibrate`: fit BLASST's threshold law
// lambda * L^(gamma + delta * s + epsilon * s^2) = alpha * exp(beta * s + eta * s^2) on
// generated workloads at several lengths (or on --qkv dumps and their prefixes, optionally one
// --layer per dump for laws per layer), write it as JSON for
// `--method blasst:sparsity=S,calib=FILE[,layer=N]`, and print the fit, where it holds and
// what it cannot do (targets out of reach, a fit from one length, layers pooled).
//
// Exit status: 0 when the fit is written, warnings or not (the file records its reach, and a
// run asking for a target out of reach fails then); 2 on bad input, a failed fit, or, with
// --strict, any warning (nothing is written).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli.hpp"
#include "core/threading.hpp"
#include "spattn/blasst.hpp"
#include "spattn/calibration.hpp"
#include "spattn/error.hpp"
#include "spattn/io.hpp"
#include "spattn/workload.hpp"

namespace spattn::cli {
namespace {

struct CalibrateOptions {
  std::string workload = "text";
  std::vector<int64_t> lengths = {4096, 8192, 16384, 32768};
  bool lengths_given = false;  // with --qkv: the prefixes to take (else each file whole)
  std::vector<std::string> qkv;
  std::vector<int64_t> layers;  // --layer, one per --qkv (by position), or none
  std::string layout = "hsd";
  int64_t heads = 8, kv_heads = 0, dim = 128, samples = 2;
  std::string dtype;
  uint64_t seed = 0;
  bool causal = true;
  int threads = 0;
  double fit_min = CalibrationOptions{}.fit_min, fit_max = CalibrationOptions{}.fit_max;
  double gamma = 0;  // used only when --length-exponent is given
  bool gamma_given = false;
  bool length_slope = true;
  bool curvature = true;
  // The visiting order calibrated (BlasstOrder): the method's default, so a file written with
  // no --order serves `blasst:sparsity=S,calib=FILE` as it runs by default.
  std::string order = "local_first";
  std::string out;
  // --evaluate: check an existing calibration on fresh workloads instead of fitting one.
  std::string evaluate;
  bool json = false;  // --evaluate: one JSON object instead of the table
  std::vector<double> targets = {0.5, 0.7};
  bool targets_given = false;  // calibrate: the check targets (default 0.3, 0.5, 0.7, 0.9)
  bool strict = false;         // any warning is an error (exit 2, nothing written)
  double fixed_lambda = 0;  // 0: the calibration's lambda for the last target at the first length
};

void check(const CalibrateOptions& o) {
  SPATTN_CHECK(o.heads >= 1 && o.heads <= 4096, "--heads must be in [1, 4096], got ", o.heads);
  SPATTN_CHECK(
      o.kv_heads >= 0 && o.kv_heads <= o.heads && (o.kv_heads == 0 || o.heads % o.kv_heads == 0),
      "--kv-heads must be 0 or divide --heads (", o.heads, "), got ", o.kv_heads);
  SPATTN_CHECK(o.dim >= 1 && o.dim <= 1024, "--dim must be in [1, 1024], got ", o.dim);
}

Tensor as_dtype(Tensor t, const std::string& dtype) {
  if (dtype.empty()) return t;
  const DType d = parse_dtype(dtype);
  return t.dtype() == d ? std::move(t) : Tensor::copy_of(t.view(), d);
}

WorkloadConfig workload_config(const CalibrateOptions& o) {
  WorkloadConfig cfg;
  cfg.kind = parse_workload_kind(o.workload);
  cfg.heads = o.heads;
  cfg.kv_heads = o.kv_heads;
  cfg.dim = o.dim;
  cfg.dtype = o.dtype.empty() ? DType::f32 : parse_dtype(o.dtype);
  cfg.seed = o.seed;
  return cfg;
}

// Every sample, generated or read, as (layer, q, k, v); layer -1 when none was given.
template <class F>
void for_each_sample(const CalibrateOptions& o, Progress& progress, F&& use) {
  if (o.qkv.empty()) {
    for_each_calibration_workload(
        workload_config(o), o.lengths, o.samples,
        [&](const std::string& status) { progress.update(status); },
        [&](const Workload& w) { use(int64_t(-1), w.q.view(), w.k.view(), w.v.view()); });
    return;
  }
  const Layout layout = parse_layout(o.layout);
  for (size_t i = 0; i < o.qkv.size(); ++i) {
    progress.update(fmt::format("file {}/{}: {}", i + 1, o.qkv.size(), o.qkv[i]));
    QKV x = load_qkv(o.qkv[i], layout);
    const Tensor q = as_dtype(std::move(x.q), o.dtype), k = as_dtype(std::move(x.k), o.dtype),
                 v = as_dtype(std::move(x.v), o.dtype);
    const int64_t layer = o.layers.empty() ? -1 : o.layers[i];
    if (!o.lengths_given) {
      use(layer, q.view(), k.view(), v.view());
      continue;
    }
    // A prefix of a causal prefill dump is the same attention on its first L tokens.
    SPATTN_CHECK(q.seq() == k.seq(),
                 "--lengths with --qkv takes prefixes of prefill dumps (q rows = "
                 "k rows), but ",
                 o.qkv[i], " has ", q.seq(), " q rows and ", k.seq(), " k rows");
    for (int64_t len : o.lengths) {
      SPATTN_CHECK(len <= k.seq(), "--lengths: ", len, " exceeds the ", k.seq(), " rows of ",
                   o.qkv[i]);
      const Tensor qp = Tensor::copy_of(q.view().rows(0, len)),
                   kp = Tensor::copy_of(k.view().rows(0, len)),
                   vp = Tensor::copy_of(v.view().rows(0, len));
      use(layer, qp.view(), kp.view(), vp.view());
    }
  }
}

void check_files(const CalibrateOptions& o) {
  SPATTN_CHECK(o.layers.empty() || o.layers.size() == o.qkv.size(),
               "--layer: give one per --qkv "
               "(the i-th --layer labels the i-th --qkv), got ",
               o.layers.size(), " for ", o.qkv.size(), " files");
  for (int64_t l : o.layers)
    SPATTN_CHECK(l >= 0 && l <= (int64_t(1) << 20), "--layer must be >= 0, got ", l);
  if (o.lengths_given) {
    SPATTN_CHECK(!o.lengths.empty(), "--lengths needs at least one length");
    for (int64_t l : o.lengths) SPATTN_CHECK(l >= 1, "--lengths: each must be >= 1, got ", l);
  }
}

void check_targets(const std::vector<double>& targets) {
  SPATTN_CHECK(!targets.empty(), "--targets needs at least one sparsity");
  for (double t : targets)
    SPATTN_CHECK(t >= 0.0 && t < 1.0, "--targets: each must be in [0, 1), got ", t);
}

// The warnings are listed with the table (stdout); stderr gets their count, so a terminal or
// a log that keeps only stderr still shows them; with --strict they are the error.
void report_warnings(const std::vector<std::string>& warnings, bool strict,
                     const std::string& what) {
  if (warnings.empty()) return;
  SPATTN_CHECK(!strict, "--strict: ", warnings.size(), " warning(s) ", what,
               " (listed under 'warnings:')");
  fmt::print(stderr, "warning: {} warning(s) {} (listed under 'warnings:')\n", warnings.size(),
             what);
}

void print_warnings(const std::vector<std::string>& warnings) {
  if (warnings.empty()) return;
  fmt::print("warnings:\n");
  for (const auto& w : warnings) fmt::print("  {}\n", w);
}

// Per calibrated length: the reach, and the sparsity lambda_for(target) gives on the samples;
// "!" marks a target out of reach there (a run asking for it raises Error).
void print_checks(const Calibration& c, const std::string& indent) {
  fmt::print(
      "{}where it holds (sparsity that lambda_for(target) gives on the calibration samples; "
      "! out of reach):\n",
      indent);
  std::vector<double> targets;
  for (const auto& k : c.checks)
    if (std::find(targets.begin(), targets.end(), k.target) == targets.end())
      targets.push_back(k.target);
  fmt::print("{}  {:>8}  {:>9}", indent, "length", "reach");
  for (double t : targets) fmt::print("  {:>13}", fmt::format("target {:.0f}%", 100 * t));
  fmt::print("\n");
  for (int64_t len : c.lengths) {
    const double reach = c.max_sparsity_at(len);
    fmt::print("{}  {:>8}  {:>8.1f}%", indent, len, 100 * reach);
    for (double t : targets)
      for (const auto& k : c.checks)
        if (k.length == len && k.target == t)
          fmt::print("  {:>11.1f}%{}", 100 * k.achieved, t > reach ? "!" : " ");
    fmt::print("\n");
  }
}

void print(const Calibration& c, const std::string& out) {
  fmt::print(
      "calibration: {}, {} samples at {} lengths, q heads {}, kv heads {}, dim {}, {}, {}, "
      "order {}\n",
      c.source, c.samples, c.lengths.size(), c.heads, c.kv_heads, c.dim, c.dtype,
      c.causal ? "causal" : "full", blasst_order_name(c.order));
  fmt::print(
      "fit: lambda * L^(gamma + delta * s + epsilon * s^2) = alpha * exp(beta * s + eta * s^2)\n");
  fmt::print(
      "  alpha {:.6g}  beta {:.4f}  gamma {:.4f} ({})  delta {:.4f}  eta {:.4f}  epsilon {:.4f}\n",
      c.alpha, c.beta, c.gamma,
      c.gamma_fitted             ? "fitted"
      : c.fit_lengths.size() < 2 ? "fixed: every fitted point is from one length"
                                 : "fixed",
      c.delta, c.eta, c.epsilon);
  fmt::print(
      "  {} points with sparsity in [{:.2f}, {:.2f}]: rms ln(lambda) error {:.3f}, "
      "max sparsity error {:.1f} points\n",
      c.points, c.fit_min, c.fit_max, c.rms_log_error, 100 * c.max_sparsity_error);
  if (c.gamma_fitted) {
    fmt::print(
        "  paper's form (gamma = 1, delta = 0) on the same points: rms ln(lambda) error {:.3f}\n",
        c.paper_rms_log_error);
    if (c.delta != 0)
      fmt::print(
          "  one slope for all lengths (delta = 0) on the same points: rms ln(lambda) error {:.3f}\n",
          c.one_slope_rms_log_error);
    if (c.eta != 0 || c.epsilon != 0)
      fmt::print(
          "  no curvature (eta = epsilon = 0) on the same points: rms ln(lambda) error {:.3f}\n",
          c.linear_rms_log_error);
  }
  print_checks(c, "");
  for (const auto& l : c.layers) {
    fmt::print("layer {}: {} samples, ", l.layer, l.samples);
    if (l.pooled)
      fmt::print("pooled (too few points of its own): uses the law above\n");
    else
      fmt::print(
          "alpha {:.6g}  beta {:.4f}  gamma {:.4f} ({})  delta {:.4f}  eta {:.4f}  epsilon "
          "{:.4f}, {} points, rms ln(lambda) error {:.3f}\n",
          l.alpha, l.beta, l.gamma, l.gamma_fitted ? "fitted" : "fixed", l.delta, l.eta, l.epsilon,
          l.points, l.rms_log_error);
    print_checks(l, "  ");
  }
  print_warnings(c.warnings());
  if (!out.empty()) fmt::print("wrote {}\n", out);
}

// Sparsity that a calibration's thresholds reach on workloads it never saw (or on --qkv dumps
// and their prefixes), measured exactly (one dense pass per sample: blasst_tile_margins gives
// the skip decision of every lambda). At each length, the mean over the samples (like the
// paper's averages over a dataset) and their range; beside it the most any lambda reaches on
// them, and a fixed lambda, to show the drift calibration removes. A sample labelled with
// --layer uses that layer's law.
void run_evaluate(const CalibrateOptions& o) {
  if (o.qkv.empty()) check(o);
  check_files(o);
  check_targets(o.targets);
  SPATTN_CHECK(o.fixed_lambda >= 0.0 && o.fixed_lambda <= 1.0,
               "--fixed-lambda must be in (0, 1] (or 0: derived from the calibration), got ",
               o.fixed_lambda);
  const Calibration c = load_calibration(o.evaluate);
  for (int64_t l : o.layers) c.for_layer(l);  // a layer the file lacks fails before any work
  double fixed = o.fixed_lambda;
  AttnOptions attn;
  attn.causal = o.causal;
  attn.threads = resolve_threads(o.threads);
  struct Row {
    int64_t length = 0;
    std::vector<std::vector<double>> per_target;
    std::vector<double> fixed, reach;
    double calib_reach = HUGE_VAL;  // the least reach any sample's law records here
  };
  std::vector<Row> rows;
  {
    Progress progress("evaluate");
    for_each_sample(
        o, progress,
        [&](int64_t layer, const TensorView& q, const TensorView& k, const TensorView& v) {
          const Calibration& law = layer >= 0 ? c.for_layer(layer) : c;
          if (fixed == 0) fixed = c.lambda_for(o.targets.back(), k.seq);
          auto it = std::find_if(rows.begin(), rows.end(),
                                 [&](const Row& r) { return r.length == k.seq; });
          if (it == rows.end()) {
            rows.push_back(
                {k.seq, std::vector<std::vector<double>>(o.targets.size()), {}, {}, HUGE_VAL});
            it = rows.end() - 1;
          }
          const TileMargins tm = blasst_tile_margins(q, k, v, attn, c.order);
          for (size_t ti = 0; ti < o.targets.size(); ++ti)
            it->per_target[ti].push_back(tm.sparsity_at(law.lambda_for(o.targets[ti], k.seq)));
          it->fixed.push_back(tm.sparsity_at(fixed));
          it->reach.push_back(tm.sparsity_at(1.0));
          const double r = law.max_sparsity_at(k.seq);
          if (!std::isnan(r)) it->calib_reach = std::min(it->calib_reach, r);
        });
  }
  std::sort(rows.begin(), rows.end(),
            [](const Row& a, const Row& b) { return a.length < b.length; });
  auto mean = [](const std::vector<double>& x) {
    double s = 0;
    for (double v : x) s += v;
    return s / double(x.size());
  };
  const std::string what =
      o.qkv.empty()
          ? fmt::format("{} fresh {} workloads per length (seeds {}..{}), {} q heads", o.samples,
                        o.workload, o.seed, o.seed + uint64_t(o.samples) - 1, o.heads)
          : fmt::format("{} file(s){}", o.qkv.size(), o.lengths_given ? " and their prefixes" : "");
  // The worst miss over the targets within reach, with the standard error and the count of
  // the mean it comes from (target_miss: a few workloads' mean scatters by itself).
  std::vector<std::string> warnings;
  TargetMiss worst;
  bool any = false;
  int64_t worst_length = 0;
  double worst_target = 0;
  nlohmann::json jrows = nlohmann::json::array();
  std::string table;
  for (const Row& row : rows) {
    table +=
        fmt::format("{:>8}  {:>5}  {:>5.1f}%", row.length, row.reach.size(), 100 * mean(row.reach));
    nlohmann::json jt = nlohmann::json::array();
    for (size_t ti = 0; ti < o.targets.size(); ++ti) {
      const TargetMiss m = target_miss(row.per_target[ti], o.targets[ti]);
      const bool out = o.targets[ti] > row.calib_reach;
      if (out)
        warnings.push_back(
            fmt::format("target {:.1f}% is out of reach at length {}: the calibration "
                        "reaches at most {:.1f}% there",
                        100 * o.targets[ti], row.length, 100 * row.calib_reach));
      else if (!any || std::abs(m.miss) > std::abs(worst.miss)) {
        any = true;
        worst = m, worst_length = row.length, worst_target = o.targets[ti];
      }
      table += fmt::format("  {:>6.1f}% ({:+5.1f} +-{:4.1f}) [{:4.1f}, {:4.1f}]{}", 100 * m.mean,
                           100 * m.miss, 100 * m.standard_error, 100 * m.min, 100 * m.max,
                           out ? "!" : " ");
      jt.push_back({{"target", o.targets[ti]},
                    {"mean", m.mean},
                    {"miss", m.miss},
                    {"miss_standard_error", m.standard_error},
                    {"workloads", m.workloads},
                    {"min", m.min},
                    {"max", m.max},
                    {"in_reach", !out}});
    }
    const TargetMiss f = target_miss(row.fixed, 0);
    table +=
        fmt::format("  {:>6.1f}% [{:4.1f}, {:4.1f}]\n", 100 * f.mean, 100 * f.min, 100 * f.max);
    jrows.push_back({{"length", row.length},
                     {"workloads", int64_t(row.reach.size())},
                     {"reach", mean(row.reach)},
                     {"targets", jt},
                     {"fixed", {{"mean", f.mean}, {"min", f.min}, {"max", f.max}}}});
  }
  if (o.json) {
    nlohmann::json j = {{"calibration", o.evaluate},
                        {"on", what},
                        {"fixed_lambda", fixed},
                        {"rows", jrows},
                        {"warnings", warnings}};
    j["worst_miss"] = any ? nlohmann::json({{"miss", worst.miss},
                                            {"standard_error", worst.standard_error},
                                            {"workloads", worst.workloads},
                                            {"length", worst_length},
                                            {"target", worst_target}})
                          : nlohmann::json(nullptr);
    std::cout << j.dump(2) << std::endl;
    report_warnings(warnings, o.strict, "in the evaluation");
    return;
  }
  fmt::print(
      "calibration {} (alpha {:.6g}, beta {:.4f}, gamma {:.4f}, delta {:.4f}, eta {:.4f}, "
      "epsilon {:.4f}, order {}{}) on {}\n",
      o.evaluate, c.alpha, c.beta, c.gamma, c.delta, c.eta, c.epsilon, blasst_order_name(c.order),
      c.layers.empty() ? "" : fmt::format(", {} layer laws", c.layers.size()), what);
  fmt::print(
      "sparsity reached: mean over the n samples (points off target +- its standard error) "
      "[min, max]; reach: the most any lambda skips on them; ! target beyond the "
      "calibration's reach (a run refuses it)\n");
  fmt::print("{:>8}  {:>5}  {:>6}", "length", "n", "reach");
  for (double t : o.targets) fmt::print("  {:>34}", fmt::format("target {:.0f}%", 100 * t));
  fmt::print("  {:>24}\n{}", fmt::format("fixed lambda {:.3g}", fixed), table);
  if (any)
    fmt::print(
        "worst mean miss (targets within reach): {:.1f} points, standard error {:.1f}, over {} "
        "workloads (target {:.0f}% at length {})\n",
        100 * std::abs(worst.miss), 100 * worst.standard_error, worst.workloads, 100 * worst_target,
        worst_length);
  else
    fmt::print("worst mean miss (targets within reach): none within reach\n");
  print_warnings(warnings);
  std::fflush(stdout);
  report_warnings(warnings, o.strict, "in the evaluation");
}

void run_calibrate(const CalibrateOptions& o) {
  if (!o.evaluate.empty()) return run_evaluate(o);
  SPATTN_CHECK(!o.json, "--json goes with --evaluate (the fit writes its JSON with --out)");
  SPATTN_CHECK(!o.out.empty(), "--out is required (or --evaluate FILE to check a calibration)");
  CalibrationOptions copt;
  copt.order = parse_blasst_order(o.order);
  copt.fit_min = o.fit_min;
  copt.fit_max = o.fit_max;
  if (o.gamma_given) copt.gamma = o.gamma;
  copt.length_slope = o.length_slope;
  copt.curvature = o.curvature;
  copt.attn.causal = o.causal;
  copt.attn.threads = resolve_threads(o.threads);
  if (o.targets_given) {
    check_targets(o.targets);
    copt.check_targets = o.targets;
  }
  check_files(o);
  if (o.qkv.empty()) {
    check(o);
    copt.source = o.workload + " workload";
  } else {
    for (size_t i = 0; i < o.qkv.size(); ++i)
      copt.source += (copt.source.empty() ? "" : ", ") + o.qkv[i] +
                     (o.layers.empty() ? "" : fmt::format(" (layer {})", o.layers[i]));
    if (o.lengths_given) copt.source += fmt::format(" at prefixes {}", fmt::join(o.lengths, ","));
  }
  BlasstCalibrator cal(copt);  // checks the fit options before any data is made
  {
    Progress progress("calibrate");
    for_each_sample(o, progress,
                    [&](int64_t layer, const TensorView& q, const TensorView& k,
                        const TensorView& v) { cal.add(q, k, v, layer); });
  }
  const Calibration c = cal.fit();
  // --strict: the warnings are the error, and nothing is written.
  const std::vector<std::string> warnings = c.warnings();
  const bool write = !o.strict || warnings.empty();
  if (write) save_calibration(o.out, c);
  print(c, write ? o.out : "");
  std::fflush(stdout);
  report_warnings(warnings, o.strict,
                  write ? "in the calibration" : "in the calibration; nothing written");
}

}  // namespace

void add_calibrate_command(CLI::App& root) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = root.add_subcommand(
      "calibrate", "fit BLASST's threshold for a target sparsity at any context length");
  cmd->add_option("--out", o->out, "calibration file to write (JSON)");
  cmd->add_option("--evaluate", o->evaluate,
                  "instead of fitting: check this calibration file on fresh workloads (--lengths, "
                  "--samples, --seed), reporting the sparsity its thresholds reach");
  cmd->add_flag("--json", o->json,
                "with --evaluate: print one JSON object (per length and target the mean, its miss "
                "with standard error and workload count; the worst miss) instead of the table");
  cmd->add_option("--targets", o->targets,
                  "target sparsities a,b: with --evaluate those evaluated (default 0.5,0.7); when "
                  "fitting, those checked and flagged when out of reach (default 0.3,0.5,0.7,0.9)")
      ->delimiter(',')
      ->each([o](const std::string&) { o->targets_given = true; });
  cmd->add_flag("--strict", o->strict,
                "exit 2 on any warning (a target out of reach, a fit from one length, a layer "
                "pooled) instead of 0; a fit with warnings is then not written");
  cmd->add_option("--fixed-lambda", o->fixed_lambda,
                  "with --evaluate: the fixed lambda shown for comparison (default: the "
                  "calibration's lambda for the last target at the first length)");
  auto* workload =
      cmd->add_option("--workload", o->workload, "generated workload: random, text, video, mixed")
          ->capture_default_str();
  cmd->add_option("--lengths", o->lengths,
                  "context lengths to calibrate at: a,b (with --qkv: take these "
                  "prefixes of each file; without: each file whole)")
      ->delimiter(',')
      ->capture_default_str()
      ->each([o](const std::string&) { o->lengths_given = true; });
  auto* qkv = cmd->add_option("--qkv", o->qkv,
                              "calibrate on q, k, v from a file or prefix (as bench's --qkv; "
                              "repeatable) instead of generated workloads")
                  ->allow_extra_args(false);
  cmd->add_option("--layout", o->layout, "axis order of --qkv arrays: hsd or shd")
      ->capture_default_str()
      ->needs(qkv);
  cmd->add_option("--layer", o->layers,
                  "the model layer of each --qkv, in the same order (repeatable; one per --qkv): "
                  "fits a law per layer beside the law over all of them")
      ->allow_extra_args(false)
      ->needs(qkv);
  auto* heads = cmd->add_option("--heads", o->heads, "query heads")->capture_default_str();
  auto* kv_heads = cmd->add_option("--kv-heads", o->kv_heads, "key/value heads (0: --heads)")
                       ->capture_default_str();
  auto* dim = cmd->add_option("--dim", o->dim, "head dimension")->capture_default_str();
  auto* seed = cmd->add_option("--seed", o->seed, "first workload seed")->capture_default_str();
  auto* samples =
      cmd->add_option("--samples", o->samples, "workloads per length (seeds --seed, --seed+1, ...)")
          ->capture_default_str();
  for (auto* gen : {workload, heads, kv_heads, dim, seed, samples}) qkv->excludes(gen);
  cmd->add_option("--dtype", o->dtype, "f32, bf16, f16 (default: f32, or as stored in --qkv)");
  cmd->add_flag("--causal,!--no-causal", o->causal, "causal attention (default) or full");
  cmd->add_option("--threads", o->threads, "worker threads (0: all)")->capture_default_str();
  cmd->add_option("--fit-min", o->fit_min, "lowest sparsity fitted")->capture_default_str();
  cmd->add_option("--fit-max", o->fit_max, "highest sparsity fitted")->capture_default_str();
  cmd->add_option(
         "--length-exponent", o->gamma,
         "fix gamma, with delta = 0 (1: the paper's lambda * L form), instead of fitting them")
      ->each([o](const std::string&) { o->gamma_given = true; });
  cmd->add_option("--order", o->order,
                  "BLASST visiting order to calibrate: local_first or in_order (a file fits only "
                  "its order; --evaluate uses the file's)")
      ->capture_default_str();
  cmd->add_flag("--length-slope,!--no-length-slope", o->length_slope,
                "fit delta, letting the law's slope in s move with ln L (default), or keep one "
                "slope for every length");
  cmd->add_flag("--curvature,!--no-curvature", o->curvature,
                "fit the curvature in s (eta, and epsilon moving it with ln L; default, from 3+ "
                "lengths), or keep ln(lambda) linear in s at every length");
  cmd->callback([o] { run_calibrate(*o); });
}

}  // namespace spattn::cli
