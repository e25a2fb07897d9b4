// BLASST calibration (the BLASST paper, Algorithm 2): choose the threshold lambda that gives a target
// sparsity s at context length L.
//
// The paper fits  lambda * L = alpha * exp(beta * s).  We fit the more general
//     lambda * L^(gamma + delta * s + epsilon * s^2) = alpha * exp(beta * s + eta * s^2)
// i.e. ln(lambda) is quadratic in s at every length, with coefficients that move linearly in
// ln(L). The paper's form is gamma = 1, delta = eta = epsilon = 0 (fix gamma to get it). The
// curvature (eta, epsilon; issue 24) is measured, not assumed: at one length ln(lambda) bends
// upwards in s as s nears the most any lambda skips there, and a straight line fitted to a
// 4K curve alone misses s = 0.5 by 1.9 points on its own samples. Our
// generated workloads need both terms: their length dependence is much weaker than 1/L (their
// planted score gaps do not shrink with L), and stronger at high sparsity than at low (the
// far tiles that long contexts add are the ones high thresholds skip). With delta = 0 the fit
// misses target sparsities by up to ~3 points more at the ends of the length range.
//
// Measuring is cheap: skipping never changes running maxima (blasst.hpp), so one dense pass
// per sample (blasst_tile_margins) gives its exact sparsity at every lambda of the sweep.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/blasst.hpp"
#include "spattn/tensor.hpp"
#include "spattn/workload.hpp"

namespace spattn {

// Sparsity of one length at one lambda, pooled over that length's samples (entry-weighted).
struct CalibrationPoint {
  int64_t length = 0;
  double lambda = 0, sparsity = 0;
};

// Where the fit holds: at each calibrated length, the sparsity lambda_for(target) gives on the
// calibration samples themselves. A target above the length's reach (ReachPoint) is out of
// reach there: no lambda gets it, whatever the law says.
struct CalibrationCheck {
  int64_t length = 0;
  double target = 0, lambda = 0, achieved = 0;
};

// The most any lambda in (0, 1] skips at one calibrated length: the share at lambda = 1 (every
// tile below its running max skipped; tiles that raise the max are never skippable).
struct ReachPoint {
  int64_t length = 0;
  double max_sparsity = 0;
};

struct CalibrationOptions {
  // The fitted points: at each length, the lambda that reaches sparsity fit_min, fit_min +
  // step, ..., fit_max (read exactly off the sorted tile margins). Points evenly spaced in s,
  // not in lambda: a lambda grid puts many points on the flat ends of the sparsity curve,
  // where lambda moves by decades while s barely moves, and those dominate a least-squares
  // fit of ln(lambda) on s.
  // The default range leaves out the saturated top of short contexts' curves (at 4K no lambda
  // skips more than ~92%), where ln(lambda) shoots up and no exponential law holds.
  double fit_min = 0.2, fit_max = 0.8, sparsity_step = 0.01;
  double lambda_min = 1e-12, lambda_max = 1.0;  // the log grid of the recorded curve
  int points_per_decade = 8;
  std::optional<double> gamma;  // fixed length exponent (delta = 0); unset: fitted
                                // (needs 2+ lengths)
  bool length_slope = true;     // fit delta too (with a fitted gamma); false: delta = 0
  bool curvature = true;        // fit eta (and epsilon with delta) from 3+ lengths;
                                // false (or fewer lengths): both 0
  std::vector<double> check_targets = {0.3, 0.5, 0.7, 0.9};  // also the targets flagged when
                                                             // out of reach
  AttnOptions attn;  // causal, scale, threads of the dense passes
  // The visiting order calibrated: the margin passes visit tiles in it, so the sparsity read
  // off them is what a run with this order skips (and only that order).
  BlasstOrder order = BlasstOrder::in_order;
  std::string source;  // recorded in the result ("text workload", files)
};

struct Calibration {
  double alpha = 0, beta = 0, gamma = 1, delta = 0;
  double eta = 0, epsilon = 0;  // curvature in s and its move with ln L (0 in files before v5)
  bool gamma_fitted = false;
  int64_t points = 0;                  // (length, lambda) points inside the fit range
  double rms_log_error = 0;            // RMS of ln(lambda) residuals over those points
  double max_sparsity_error = 0;       // max |s predicted from lambda - s measured| over them
  double paper_rms_log_error = 0;      // the same points fitted with gamma = 1, delta = 0
  double one_slope_rms_log_error = 0;  // ... with gamma fitted, delta = 0 (NaN: one length)
  double linear_rms_log_error = 0;     // ... with gamma, delta fitted, no curvature (NaN: idem)
  double fit_min = 0, fit_max = 0;
  int64_t samples = 0;
  std::vector<int64_t> lengths;  // distinct context lengths, ascending
  std::string source;            // "text workload", or the files
  int64_t heads = 0, kv_heads = 0, dim = 0;
  std::string dtype;
  bool causal = true;
  BlasstOrder order = BlasstOrder::in_order;  // the visiting order its thresholds are for
  std::vector<CalibrationCheck> checks;       // informational
  std::vector<CalibrationPoint> curve;        // sparsity over the lambda grid per length (a record)
  // The lengths whose points lie in the fit range (fewer than 2: the length dependence was
  // not measured, gamma is fixed). Empty in files older than version 4: unknown.
  std::vector<int64_t> fit_lengths;
  // Reach per calibrated length, ascending. Empty: unknown (an old file with no curve).
  std::vector<ReachPoint> reach;
  // Thresholds per layer (the BLASST paper's "next step": layers differ too much for one law).
  // `layer` is -1 for the law over every sample; each entry of `layers` is one layer's law,
  // with its own reach and checks. `pooled`: the layer had too few points to fit its own law
  // (pool_reason says why) and uses the law over all layers, with its own reach.
  int64_t layer = -1;
  bool pooled = false;
  std::string pool_reason;
  std::vector<Calibration> layers;  // ascending by layer; empty: one law for every layer

  // alpha * exp(beta * s + eta * s^2) / L^(gamma + delta * s + epsilon * s^2) clamped to [0, 1].
  // Throws Error for s outside [0, 1), L < 1, and lengths so far from the calibrated ones that
  // the law's slope in s is no longer positive on all of [0, 1]. No reach check: see threshold_for.
  double lambda_for(double sparsity, int64_t length) const;
  // The inverse: the sparsity the fit predicts for lambda at L (unclamped).
  double predicted_sparsity(double lambda, int64_t length) const;
  // The most any lambda skips at `length`: the recorded reach at a calibrated length, linear in
  // ln L between two, held at the nearest one outside them (an estimate there). NaN: unknown.
  double max_sparsity_at(int64_t length) const;
  // lambda_for after checking the target is within reach at `length`: a target above
  // max_sparsity_at(length) throws Error naming the reachable range there. (The choice: a run
  // that asks for 70% and would get 6% fails instead of running silently at 6%.)
  double threshold_for(int64_t length, double target) const;
  // The law of one layer: its own entry of `layers`; a file with no per-layer laws serves every
  // layer with its one law. A layer missing from a per-layer file throws Error naming those it has.
  const Calibration& for_layer(int64_t layer) const;
  // The model runner's hook: the threshold of `layer` for `target` sparsity at context `length`.
  double threshold_for(int64_t layer, int64_t length, double target) const {
    return for_layer(layer).threshold_for(length, target);
  }
  // What a reader must know before trusting the thresholds, one sentence each: a fit from one
  // length (gamma fixed for lack of lengths), check targets out of reach, layers pooled (and
  // the same for each layer, prefixed "layer N: ").
  std::vector<std::string> warnings() const;
};

// Collects samples one at a time (a 64K sample's q, k, v need not outlive add()): each add()
// is one dense pass whose tile margins are kept, sorted, per context length.
class BlasstCalibrator {
 public:
  explicit BlasstCalibrator(CalibrationOptions opt);
  // One sample; its context length is k.seq. Samples must share heads, kv heads and dim.
  // layer >= 0 labels the model layer it came from: fit() then fits each layer's own law too.
  void add(const TensorView& q, const TensorView& k, const TensorView& v, int64_t layer = -1);
  // Pooled (entry-weighted) sparsity of one calibrated length at lambda.
  double sparsity_at(int64_t length, double lambda) const;
  // The smallest lambda that reaches sparsity s at length (0 if s is beyond reach).
  double lambda_at(int64_t length, double sparsity) const;
  // Sparsity per (length, lambda) over the log grid (the recorded curve).
  std::vector<CalibrationPoint> curve() const;
  // The points fitted: lambda_at(length, s) for s on the fit range's even steps.
  std::vector<CalibrationPoint> fit_points() const;
  // measure + fit + checks (+ one law per labelled layer; a layer whose own fit fails is
  // pooled). Throws Error when nothing was added or the fit over all samples fails.
  Calibration fit() const;

 private:
  struct Length {
    int64_t length = 0, causal_entries = 0;
    std::vector<float> margin;    // skippable tiles (margin < 0), sorted ascending
    std::vector<int64_t> prefix;  // prefix[i]: entries of margin[0..i)
  };
  using Lengths = std::vector<Length>;  // ascending by length
  struct Layer {
    int64_t layer = 0, samples = 0;
    Lengths lengths;
  };
  static void merge(Lengths& into, int64_t length, const TileMargins& tm);
  static const Length& find(const Lengths& ls, int64_t length);  // throws for a length never added
  static double sparsity_in(const Length& l, double lambda);
  static double lambda_in(const Length& l, double sparsity);
  std::vector<CalibrationPoint> curve_of(const Lengths& ls) const;
  std::vector<CalibrationPoint> fit_points_of(const Lengths& ls) const;
  // reach and checks of `c`'s law on the samples `ls`.
  void measure(Calibration& c, const Lengths& ls) const;
  CalibrationOptions opt_;
  Lengths lengths_;            // every sample, pooled over layers
  std::vector<Layer> layers_;  // labelled samples per layer, ascending
  int64_t samples_ = 0, heads_ = 0, kv_heads_ = 0, dim_ = 0;
  std::string dtype_;
};

// Least squares of ln(lambda) = ln(alpha) + beta s + eta s^2 - (gamma + delta s + epsilon s^2)
// ln(L) over the points with s in [fit_min, fit_max]. gamma, delta and epsilon are fitted only
// when opt.gamma is unset and 2+ lengths are in range (delta only with opt.length_slope),
// eta only with opt.curvature and 3+ lengths (epsilon also only with delta); else gamma = opt.gamma or 1 and the others 0. Throws Error when the fit fails: fewer points
// in range than parameters + 1, the parameters not determined by them, or sparsity not growing
// with lambda for every s in [0, 1] at some calibrated length.
Calibration fit_blasst_calibration(const std::vector<CalibrationPoint>& points,
                                   const CalibrationOptions& opt);

// Status lines for long calibrations ("sample 3/8: length 8192, seed 1"); may be empty.
using CalibrationProgress = std::function<void(const std::string&)>;

// The generated samples of calibration and of its evaluation: `samples` workloads of `base`'s
// kind and shape at each length, seeds base.seed, base.seed + 1, ..., the same seeds at every
// length, so lengths differ only in length as far as a generator can make them. Reports
// "sample i/n: length L, seed s" before making each. Throws Error on empty lengths, lengths
// outside [1, 2^30] and samples outside [1, 1000], before any work.
void for_each_calibration_workload(const WorkloadConfig& base, const std::vector<int64_t>& lengths,
                                   int64_t samples, const CalibrationProgress& progress,
                                   const std::function<void(const Workload&)>& use);

// Calibration on generated workloads (`spattn calibrate`, spattn.calibrate), made by
// for_each_calibration_workload. Throws Error as it does, and whatever the calibrator or the
// fit throws.
Calibration calibrate_on_workloads(const CalibrationOptions& opt, const WorkloadConfig& base,
                                   const std::vector<int64_t>& lengths, int64_t samples,
                                   const CalibrationProgress& progress = {});

// The sparsity a calibration's thresholds reach on workloads it never saw, measured exactly
// (one dense pass per workload: blasst_tile_margins gives the skip decision of every lambda),
// beside a fixed lambda, to show the drift calibration removes.
struct CalibrationEvaluation {
  std::vector<int64_t> lengths;
  std::vector<double> targets;
  double fixed_lambda = 0;
  uint64_t first_seed = 0;
  int64_t samples = 0;
  // sparsity[length][target][sample]: what lambda_for(target, length) skipped.
  std::vector<std::vector<std::vector<double>>> sparsity;
  std::vector<std::vector<double>> fixed;  // fixed[length][sample]
};
// Workloads as calibrate_on_workloads makes them. fixed_lambda 0: the calibration's lambda for
// the last target at the first length. Throws Error on targets outside [0, 1), a fixed lambda
// outside [0, 1], and as calibrate_on_workloads.
CalibrationEvaluation evaluate_calibration(const Calibration& c, const WorkloadConfig& base,
                                           const std::vector<int64_t>& lengths, int64_t samples,
                                           const std::vector<double>& targets, double fixed_lambda,
                                           const AttnOptions& attn,
                                           const CalibrationProgress& progress = {});

// How far the sparsity a target's threshold reached on n workloads lies from the target: their
// mean's miss (mean - target, as a fraction) with its standard error (the samples' standard
// deviation, n - 1 in the variance, over sqrt(n); 0 for one workload) and n. Why: a mean over a
// few workloads scatters by itself (over 4 text workloads, 0.9-1.5 points: a perfect law then
// misses 2 points about 30% of the time), so a miss means little without its error and count.
// Throws Error on no workloads.
struct TargetMiss {
  double mean = 0, miss = 0, standard_error = 0, min = 0, max = 0;
  int64_t workloads = 0;
};
TargetMiss target_miss(const std::vector<double>& reached, double target);

// JSON (nlohmann). load validates every field: missing, wrong type, non-finite or
// non-positive alpha, a failed fit (beta not finite and positive, too few points) -> Error
// naming the field and the file.
std::string calibration_to_json(const Calibration& c);
Calibration calibration_from_json(const std::string& text, const std::string& origin = "json");
void save_calibration(const std::string& path, const Calibration& c);
Calibration load_calibration(const std::string& path);

}  // namespace spattn
