// `spattn calibrate`: fit BLASST's threshold law
// lambda * L^(gamma + delta * s) = alpha * exp(beta * s) on
// generated workloads at several lengths (or on --qkv dumps), write it as JSON for
// `--method blasst:sparsity=S,calib=FILE`, and print the fit and where it holds.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
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
  std::vector<std::string> qkv;
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
  // The visiting order calibrated (BlasstOrder): the method's default, so a file written with
  // no --order serves `blasst:sparsity=S,calib=FILE` as it runs by default.
  std::string order = "local_first";
  std::string out;
  // --evaluate: check an existing calibration on fresh workloads instead of fitting one.
  std::string evaluate;
  std::vector<double> targets = {0.5, 0.7};
  double fixed_lambda = 0;  // 0: the calibration's lambda for the last target at the first length
};

// Lengths and samples are checked where they are used (calibrate_on_workloads).
void check(const CalibrateOptions& o) {
  SPATTN_CHECK(o.heads >= 1 && o.heads <= 4096, "--heads must be in [1, 4096], got ", o.heads);
  SPATTN_CHECK(o.kv_heads >= 0 && o.kv_heads <= o.heads && (o.kv_heads == 0 || o.heads % o.kv_heads == 0),
               "--kv-heads must be 0 or divide --heads (", o.heads, "), got ", o.kv_heads);
  SPATTN_CHECK(o.dim >= 1 && o.dim <= 1024, "--dim must be in [1, 1024], got ", o.dim);
}

Tensor as_dtype(Tensor t, const std::string& dtype) {
  if (dtype.empty()) return t;
  const DType d = parse_dtype(dtype);
  return t.dtype() == d ? std::move(t) : Tensor::copy_of(t.view(), d);
}

// The workloads' kind and shape; calibrate_on_workloads sets each one's length and seed.
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

void add_files(const CalibrateOptions& o, BlasstCalibrator& cal, Progress& progress) {
  const Layout layout = parse_layout(o.layout);
  for (size_t i = 0; i < o.qkv.size(); ++i) {
    progress.update(fmt::format("file {}/{}: {}", i + 1, o.qkv.size(), o.qkv[i]));
    QKV x = load_qkv(o.qkv[i], layout);
    const Tensor q = as_dtype(std::move(x.q), o.dtype), k = as_dtype(std::move(x.k), o.dtype),
                 v = as_dtype(std::move(x.v), o.dtype);
    cal.add(q.view(), k.view(), v.view());
  }
}

void print(const Calibration& c, const std::string& out) {
  fmt::print("calibration: {}, {} samples at {} lengths, q heads {}, kv heads {}, dim {}, {}, {}, "
             "order {}\n",
             c.source, c.samples, c.lengths.size(), c.heads, c.kv_heads, c.dim, c.dtype,
             c.causal ? "causal" : "full", blasst_order_name(c.order));
  fmt::print("fit: lambda * L^(gamma + delta * s) = alpha * exp(beta * s)\n");
  fmt::print("  alpha {:.6g}  beta {:.4f}  gamma {:.4f} ({})  delta {:.4f}\n", c.alpha, c.beta,
             c.gamma, c.gamma_fitted ? "fitted" : "fixed", c.delta);
  fmt::print("  {} points with sparsity in [{:.2f}, {:.2f}]: rms ln(lambda) error {:.3f}, "
             "max sparsity error {:.1f} points\n",
             c.points, c.fit_min, c.fit_max, c.rms_log_error, 100 * c.max_sparsity_error);
  if (c.gamma_fitted) {
    fmt::print("  paper's form (gamma = 1, delta = 0) on the same points: rms ln(lambda) error {:.3f}\n",
               c.paper_rms_log_error);
    if (c.delta != 0)
      fmt::print("  one slope for all lengths (delta = 0) on the same points: rms ln(lambda) error {:.3f}\n",
                 c.one_slope_rms_log_error);
  }
  fmt::print("where it holds (sparsity that lambda_for(target) gives on the calibration samples):\n");
  std::vector<double> targets;
  for (const auto& k : c.checks)
    if (std::find(targets.begin(), targets.end(), k.target) == targets.end())
      targets.push_back(k.target);
  fmt::print("  {:>8}", "length");
  for (double t : targets) fmt::print("  {:>13}", fmt::format("target {:.0f}%", 100 * t));
  fmt::print("\n");
  for (int64_t len : c.lengths) {
    fmt::print("  {:>8}", len);
    for (double t : targets)
      for (const auto& k : c.checks)
        if (k.length == len && k.target == t)
          fmt::print("  {:>12.1f}%", 100 * k.achieved);
    fmt::print("\n");
  }
  fmt::print("wrote {}\n", out);
}

// Sparsity that a calibration's thresholds reach on workloads it never saw, measured exactly
// (one dense pass per workload: blasst_tile_margins gives the skip decision of every lambda).
// At each length, the mean over the samples (like the paper's averages over a dataset) and
// their range; beside it a fixed lambda, to show the drift calibration removes.
void run_evaluate(const CalibrateOptions& o) {
  check(o);
  const Calibration c = load_calibration(o.evaluate);
  AttnOptions attn;
  attn.causal = o.causal;
  attn.threads = resolve_threads(o.threads);
  CalibrationEvaluation e;
  {
    Progress progress("evaluate");
    e = evaluate_calibration(c, workload_config(o), o.lengths, o.samples, o.targets,
                             o.fixed_lambda, attn,
                             [&progress](const std::string& s) { progress.update(s); });
  }
  const double fixed = e.fixed_lambda;
  auto mean = [](const std::vector<double>& x) {
    double s = 0;
    for (double v : x) s += v;
    return s / double(x.size());
  };
  fmt::print("calibration {} (alpha {:.6g}, beta {:.4f}, gamma {:.4f}, delta {:.4f}, order {}) on {} "
             "fresh {} workloads per length (seeds {}..{}), {} q heads\n",
             o.evaluate, c.alpha, c.beta, c.gamma, c.delta, blasst_order_name(c.order), o.samples,
             o.workload, o.seed, o.seed + uint64_t(o.samples) - 1, o.heads);
  fmt::print("sparsity reached: mean over the workloads (points off target) [min, max]\n");
  fmt::print("{:>8}", "length");
  for (double t : o.targets) fmt::print("  {:>27}", fmt::format("target {:.0f}%", 100 * t));
  fmt::print("  {:>24}\n", fmt::format("fixed lambda {:.3g}", fixed));
  double worst = 0;
  for (size_t li = 0; li < o.lengths.size(); ++li) {
    fmt::print("{:>8}", o.lengths[li]);
    for (size_t ti = 0; ti < o.targets.size(); ++ti) {
      const auto& x = e.sparsity[li][ti];
      const double m = mean(x), off = 100 * (m - o.targets[ti]);
      worst = std::max(worst, std::abs(off));
      fmt::print("  {:>6.1f}% ({:+5.1f}) [{:4.1f}, {:4.1f}]", 100 * m, off,
                 100 * *std::min_element(x.begin(), x.end()),
                 100 * *std::max_element(x.begin(), x.end()));
    }
    const auto& f = e.fixed[li];
    fmt::print("  {:>6.1f}% [{:4.1f}, {:4.1f}]\n", 100 * mean(f),
               100 * *std::min_element(f.begin(), f.end()), 100 * *std::max_element(f.begin(), f.end()));
  }
  fmt::print("worst mean miss: {:.1f} points\n", worst);
}

void run_calibrate(const CalibrateOptions& o) {
  if (!o.evaluate.empty()) return run_evaluate(o);
  SPATTN_CHECK(!o.out.empty(), "--out is required (or --evaluate FILE to check a calibration)");
  CalibrationOptions copt;
  copt.order = parse_blasst_order(o.order);
  copt.fit_min = o.fit_min;
  copt.fit_max = o.fit_max;
  if (o.gamma_given) copt.gamma = o.gamma;
  copt.length_slope = o.length_slope;
  copt.attn.causal = o.causal;
  copt.attn.threads = resolve_threads(o.threads);
  if (o.qkv.empty()) {
    check(o);
    copt.source = o.workload + " workload";
  } else {
    for (const auto& f : o.qkv) copt.source += (copt.source.empty() ? "" : ", ") + f;
  }
  Calibration c;
  {
    Progress progress("calibrate");
    if (o.qkv.empty()) {
      c = calibrate_on_workloads(copt, workload_config(o), o.lengths, o.samples,
                                 [&progress](const std::string& s) { progress.update(s); });
    } else {
      BlasstCalibrator cal(copt);  // checks the fit options before any file is read
      add_files(o, cal, progress);
      c = cal.fit();
    }
  }
  save_calibration(o.out, c);
  print(c, o.out);
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
  cmd->add_option("--targets", o->targets, "with --evaluate: target sparsities a,b")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--fixed-lambda", o->fixed_lambda,
                  "with --evaluate: the fixed lambda shown for comparison (default: the "
                  "calibration's lambda for the last target at the first length)");
  auto* workload = cmd->add_option("--workload", o->workload,
                                   "generated workload: random, text, video, mixed")
                       ->capture_default_str();
  auto* lengths = cmd->add_option("--lengths", o->lengths, "context lengths to calibrate at: a,b")
                      ->delimiter(',')
                      ->capture_default_str();
  auto* qkv = cmd->add_option("--qkv", o->qkv,
                              "calibrate on q, k, v from a file or prefix (as bench's --qkv; "
                              "repeatable) instead of generated workloads")
                  ->allow_extra_args(false);
  cmd->add_option("--layout", o->layout, "axis order of --qkv arrays: hsd or shd")
      ->capture_default_str()
      ->needs(qkv);
  auto* heads = cmd->add_option("--heads", o->heads, "query heads")->capture_default_str();
  auto* kv_heads = cmd->add_option("--kv-heads", o->kv_heads, "key/value heads (0: --heads)")
                       ->capture_default_str();
  auto* dim = cmd->add_option("--dim", o->dim, "head dimension")->capture_default_str();
  auto* seed = cmd->add_option("--seed", o->seed, "first workload seed")->capture_default_str();
  auto* samples = cmd->add_option("--samples", o->samples,
                                  "workloads per length (seeds --seed, --seed+1, ...)")
                      ->capture_default_str();
  for (auto* gen : {workload, lengths, heads, kv_heads, dim, seed, samples}) qkv->excludes(gen);
  cmd->add_option("--dtype", o->dtype, "f32, bf16, f16 (default: f32, or as stored in --qkv)");
  cmd->add_flag("--causal,!--no-causal", o->causal, "causal attention (default) or full");
  cmd->add_option("--threads", o->threads, "worker threads (0: all)")->capture_default_str();
  cmd->add_option("--fit-min", o->fit_min, "lowest sparsity fitted")->capture_default_str();
  cmd->add_option("--fit-max", o->fit_max, "highest sparsity fitted")->capture_default_str();
  cmd->add_option("--length-exponent", o->gamma,
                  "fix gamma, with delta = 0 (1: the paper's lambda * L form), instead of fitting them")
      ->each([o](const std::string&) { o->gamma_given = true; });
  cmd->add_option("--order", o->order,
                  "BLASST visiting order to calibrate: local_first or in_order (a file fits only "
                  "its order; --evaluate uses the file's)")
      ->capture_default_str();
  cmd->add_flag("--length-slope,!--no-length-slope", o->length_slope,
                "fit delta, letting the law's slope in s move with ln L (default), or keep one "
                "slope for every length");
  cmd->callback([o] { run_calibrate(*o); });
}

}  // namespace spattn::cli
