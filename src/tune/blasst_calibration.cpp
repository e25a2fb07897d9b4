// BLASST calibration: sweep lambda over per-sample tile margins and fit
// ln(lambda) = ln(alpha) + beta * s + eta * s^2 - (gamma + delta * s + epsilon * s^2) * ln(L).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "spattn/blasst.hpp"
#include "spattn/calibration.hpp"
#include "spattn/error.hpp"

namespace spattn {

namespace {
std::string fmt_layer(int64_t layer) { return " for layer " + std::to_string(layer); }

// d ln(lambda) / ds at sparsity s and length L: must be positive (sparsity grows with lambda).
double slope_at(const Calibration& c, double s, int64_t length) {
  return c.beta + 2 * c.eta * s - (c.delta + 2 * c.epsilon * s) * std::log(double(length));
}
// The slope is linear in s, so positive on all of [0, 1] when positive at both ends: the law
// is then monotone at this length and lambda_for / predicted_sparsity invert each other.
double least_slope(const Calibration& c, int64_t length) {
  return std::min(slope_at(c, 0.0, length), slope_at(c, 1.0, length));
}
}  // namespace

double Calibration::lambda_for(double sparsity, int64_t length) const {
  SPATTN_CHECK(std::isfinite(sparsity) && sparsity >= 0.0 && sparsity < 1.0,
               "target sparsity must be in [0, 1), got ", sparsity);
  SPATTN_CHECK(length >= 1, "context length must be >= 1, got ", length);
  // A fitted delta (or epsilon) tilts the law with length; far enough out it would turn
  // sparsity against lambda. That is outside anything the calibration saw, so say so instead
  // of guessing.
  SPATTN_CHECK(least_slope(*this, length) > 0, "calibration does not extend to length ", length,
               ": d ln(lambda) / ds = ", least_slope(*this, length),
               " somewhere in [0, 1] there (calibrate at lengths nearer to it)");
  const double x = std::log(double(length)), s = sparsity;
  const double ln =
      std::log(alpha) + beta * s + eta * s * s - (gamma + delta * s + epsilon * s * s) * x;
  // exp overflows to inf for huge ln; the clamp makes that 1 (skip everything skippable).
  return std::clamp(std::exp(ln), 0.0, 1.0);
}

double Calibration::predicted_sparsity(double lambda, int64_t length) const {
  // The root of a2 s^2 + a1 s + a0 = 0 on the branch where the slope a1 + 2 a2 s is positive,
  // written so that a2 = 0 (no curvature) is the linear law's answer.
  const double x = std::log(double(length));
  const double a2 = eta - epsilon * x, a1 = beta - delta * x;
  const double a0 = std::log(alpha) - gamma * x - std::log(lambda);
  const double disc = a1 * a1 - 4 * a2 * a0;
  if (!(disc >= 0)) return NAN;  // lambda beyond every sparsity the law gives at this length
  return -2 * a0 / (a1 + std::sqrt(disc));
}

double Calibration::max_sparsity_at(int64_t length) const {
  if (reach.empty()) return NAN;
  if (length <= reach.front().length) return reach.front().max_sparsity;
  if (length >= reach.back().length) return reach.back().max_sparsity;
  size_t i = 1;
  while (reach[i].length < length) ++i;
  const ReachPoint& a = reach[i - 1];
  const ReachPoint& b = reach[i];
  const double t =
      std::log(double(length) / double(a.length)) / std::log(double(b.length) / double(a.length));
  return a.max_sparsity + t * (b.max_sparsity - a.max_sparsity);
}

double Calibration::threshold_for(int64_t length, double target) const {
  const double reachable = max_sparsity_at(length);
  const std::string who = layer >= 0 ? fmt_layer(layer) : std::string();
  // NaN (reach unknown: an old file without a curve) lets the law answer alone.
  const bool outside =
      !reach.empty() && (length < reach.front().length || length > reach.back().length);
  SPATTN_CHECK(!(target > reachable), "blasst: target sparsity ",
               fmt::format("{:.1f}%", 100 * target), " is out of reach at length ", length, who,
               ": reachable range [0%, ", fmt::format("{:.1f}%", 100 * reachable),
               "] (the most any lambda in (0, 1] skips there",
               outside ? ", held from the nearest calibrated length" : "", ")");
  return lambda_for(target, length);
}

const Calibration& Calibration::for_layer(int64_t l) const {
  SPATTN_CHECK(l >= 0, "calibration layer must be >= 0, got ", l);
  if (layers.empty()) return *this;
  for (const auto& c : layers)
    if (c.layer == l) return c;
  std::string have;
  for (const auto& c : layers) have += (have.empty() ? "" : ", ") + std::to_string(c.layer);
  detail::fail("calibration has no law for layer ", l, " (it has layers ", have, ")");
}

std::vector<std::string> Calibration::warnings() const {
  std::vector<std::string> w;
  auto pct = [](double x) { return fmt::format("{:.1f}%", 100 * x); };
  if (pooled)
    w.push_back("too few points to fit its own law (" + pool_reason +
                "); uses the law pooled over every layer");
  if (!pooled && fit_lengths.size() == 1)
    w.push_back("every fitted point comes from one length (" + std::to_string(fit_lengths[0]) +
                "): gamma is fixed at " + fmt::format("{:g}", gamma) +
                " for lack of lengths, so the law's length dependence is assumed, not measured");
  for (const auto& k : checks) {
    const double r = max_sparsity_at(k.length);
    if (k.target > r)
      w.push_back("target " + pct(k.target) + " is out of reach at length " +
                  std::to_string(k.length) + ": no lambda in (0, 1] skips more than " + pct(r) +
                  " there");
  }
  for (const auto& lc : layers)
    for (const auto& x : lc.warnings()) w.push_back("layer " + std::to_string(lc.layer) + ": " + x);
  return w;
}

namespace {

// The bound the file format puts on eta and epsilon (calibration_json.cpp): far beyond any
// measured curve's bend (eta ~ 20 on generated text), finite and sane.
constexpr double kMaxCurvature = 1000;

// Which terms of ln(lambda) = c + beta s + eta s^2 - (gamma + delta s + epsilon s^2) x
// (x = ln L) are fitted; a term not fitted is fixed (gamma at `gamma`, the others at 0).
struct Form {
  bool fit_gamma = false, fit_delta = false, fit_eta = false, fit_epsilon = false;
  double gamma = 1.0;
};
struct Law {
  double intercept = 0, beta = 0, gamma = 0, delta = 0, eta = 0, epsilon = 0;
  double ln_lambda(double s, double x) const {
    return intercept + beta * s + eta * s * s - (gamma + delta * s + epsilon * s * s) * x;
  }
};

// Least squares over the form's free terms. Columns are centered (the intercept comes from
// the means), which keeps the normal equations well conditioned: ln L ~ 8-11 would otherwise
// nearly repeat the constant column. Returns false when the points do not determine the terms.
bool solve(const std::vector<CalibrationPoint>& pts, const Form& form, Law& out) {
  constexpr int kMax = 5;  // beta, gamma, delta, eta, epsilon
  const double n = double(pts.size());
  auto columns = [&](const CalibrationPoint& p, std::array<double, kMax>& col, double& y) {
    const double x = std::log(double(p.length));
    int k = 0;
    col[k++] = p.sparsity;
    if (form.fit_gamma) col[k++] = -x;
    if (form.fit_delta) col[k++] = -p.sparsity * x;
    if (form.fit_eta) col[k++] = p.sparsity * p.sparsity;
    if (form.fit_epsilon) col[k++] = -p.sparsity * p.sparsity * x;
    y = std::log(p.lambda) + (form.fit_gamma ? 0.0 : form.gamma * x);
    return k;
  };
  std::array<double, kMax> mean{}, col{};
  double my = 0, y = 0;
  int k = 0;
  for (const auto& p : pts) {
    k = columns(p, col, y);
    for (int i = 0; i < k; ++i) mean[size_t(i)] += col[size_t(i)] / n;
    my += y / n;
  }
  double A[kMax][kMax + 1] = {};
  for (const auto& p : pts) {
    columns(p, col, y);
    for (int i = 0; i < k; ++i) {
      const double ci = col[size_t(i)] - mean[size_t(i)];
      for (int j = 0; j < k; ++j) A[i][j] += ci * (col[size_t(j)] - mean[size_t(j)]);
      A[i][k] += ci * (y - my);
    }
  }
  // Gaussian elimination with partial pivoting; a pivot that vanishes against its column's
  // spread means that term is not determined (sparsity or length does not vary).
  std::array<double, kMax> scale{};
  for (int i = 0; i < k; ++i) scale[size_t(i)] = A[i][i];
  for (int c = 0; c < k; ++c) {
    int piv = c;
    for (int r = c + 1; r < k; ++r)
      if (std::abs(A[r][c]) > std::abs(A[piv][c])) piv = r;
    if (!(std::abs(A[piv][c]) > 1e-9 * scale[size_t(c)]) || !(scale[size_t(c)] > 1e-12))
      return false;
    std::swap(A[c], A[piv]);
    for (int r = 0; r < k; ++r) {
      if (r == c) continue;
      const double f = A[r][c] / A[c][c];
      for (int j = c; j <= k; ++j) A[r][j] -= f * A[c][j];
    }
  }
  std::array<double, kMax> coef{};
  for (int i = 0; i < k; ++i) coef[size_t(i)] = A[i][k] / A[i][i];
  int i = 0;
  out.beta = coef[size_t(i++)];
  out.gamma = form.fit_gamma ? coef[size_t(i++)] : form.gamma;
  out.delta = form.fit_delta ? coef[size_t(i++)] : 0.0;
  out.eta = form.fit_eta ? coef[size_t(i++)] : 0.0;
  out.epsilon = form.fit_epsilon ? coef[size_t(i++)] : 0.0;
  out.intercept = my;  // my = c + sum_i coef_i * mean_i, in the y the fit used
  for (int t = 0; t < k; ++t) out.intercept -= coef[size_t(t)] * mean[size_t(t)];
  return true;
}

double rms_residual(const std::vector<CalibrationPoint>& pts, const Law& f) {
  double sum = 0;
  for (const auto& p : pts) {
    const double r = std::log(p.lambda) - f.ln_lambda(p.sparsity, std::log(double(p.length)));
    sum += r * r;
  }
  return std::sqrt(sum / double(pts.size()));
}

void check_options(const CalibrationOptions& o) {
  SPATTN_CHECK(o.sparsity_step > 0 && o.sparsity_step <= 1,
               "calibration sparsity step must be in (0, 1], got ", o.sparsity_step);
  SPATTN_CHECK(o.lambda_min > 0 && o.lambda_min < o.lambda_max && o.lambda_max <= 1,
               "calibration lambda grid must satisfy 0 < min < max <= 1, got [", o.lambda_min, ", ",
               o.lambda_max, "]");
  SPATTN_CHECK(o.points_per_decade >= 1 && o.points_per_decade <= 1000,
               "calibration points per decade must be in [1, 1000], got ", o.points_per_decade);
  SPATTN_CHECK(o.fit_min >= 0 && o.fit_min < o.fit_max && o.fit_max <= 1,
               "calibration fit range must satisfy 0 <= min < max <= 1, got [", o.fit_min, ", ",
               o.fit_max, "]");
  SPATTN_CHECK(!o.gamma || std::isfinite(*o.gamma), "calibration length exponent must be finite");
}

}  // namespace

Calibration fit_blasst_calibration(const std::vector<CalibrationPoint>& points,
                                   const CalibrationOptions& opt) {
  check_options(opt);
  std::vector<CalibrationPoint> in;
  std::vector<int64_t> lengths;
  for (const auto& p : points) {
    SPATTN_CHECK(
        p.length >= 1 && p.lambda > 0 && std::isfinite(p.lambda) && std::isfinite(p.sparsity),
        "calibration point (length ", p.length, ", lambda ", p.lambda, ", sparsity ", p.sparsity,
        ") is not a valid measurement");
    if (p.sparsity < opt.fit_min || p.sparsity > opt.fit_max) continue;
    in.push_back(p);
    if (std::find(lengths.begin(), lengths.end(), p.length) == lengths.end())
      lengths.push_back(p.length);
  }
  SPATTN_CHECK(in.size() >= 3, "calibration fit failed: ", in.size(), " points with sparsity in [",
               opt.fit_min, ", ", opt.fit_max,
               "] (need 3; widen the lambda grid or the fit range)");
  // gamma, delta and epsilon are only identifiable across lengths; one length falls back to
  // the paper's 1/L. A fixed gamma means the paper's shape (one slope for every length, no
  // curvature). The curvature terms (eta, and epsilon letting it move with ln L) are there
  // because at a fixed length ln(lambda) is not linear in s: the measured curves bend upwards
  // as s nears the length's reach (the most any lambda skips), more at short lengths, whose
  // reach is lowest. No straight line in s fits a 4K curve to within 2 points at s = 0.5.
  Form form;
  form.fit_gamma = !opt.gamma && lengths.size() >= 2;
  form.fit_delta = form.fit_gamma && opt.length_slope;
  // The curvature needs a third length: beta and delta are the slope at s = 0, outside the
  // fit range, and with two curves only the bend's noise would pass into a steep length law
  // (|delta| 9 to 47 on two short lengths); with fewer lengths the law stays linear in s.
  form.fit_eta = !opt.gamma && opt.curvature && lengths.size() >= 3;
  form.fit_epsilon = form.fit_eta && form.fit_delta;
  form.gamma = opt.gamma.value_or(1.0);
  const int64_t terms = 2 + form.fit_gamma + form.fit_delta + form.fit_eta + form.fit_epsilon;
  SPATTN_CHECK(int64_t(in.size()) >= terms + 1, "calibration fit failed: ", in.size(),
               " points with sparsity in [", opt.fit_min, ", ", opt.fit_max, "] for ", terms,
               " parameters (widen the lambda grid or the fit range)");
  Law f;
  SPATTN_CHECK(solve(in, form, f), "calibration fit failed: the ", in.size(),
               " points in range do not determine the fit (sparsity or length does not vary)");
  // The file format bounds them (calibration_json.cpp); a fit outside is two close lengths
  // read as a steep length law, not a measurement of one.
  SPATTN_CHECK(
      std::abs(f.gamma) <= 8 && std::abs(f.delta) <= 8, "calibration fit failed: gamma = ", f.gamma,
      ", delta = ", f.delta,
      " outside [-8, 8] (the lengths do not determine the "
      "length law: calibrate at lengths further apart, or fix gamma with --length-exponent)");
  SPATTN_CHECK(std::abs(f.eta) <= kMaxCurvature && std::abs(f.epsilon) <= kMaxCurvature,
               "calibration fit failed: eta = ", f.eta, ", epsilon = ", f.epsilon, " outside [-",
               kMaxCurvature, ", ", kMaxCurvature, "] (fit without them: --no-curvature)");
  Calibration c;
  c.alpha = std::exp(f.intercept);
  SPATTN_CHECK(std::isfinite(c.alpha) && c.alpha > 0, "calibration fit failed: alpha = ", c.alpha);
  c.beta = f.beta;
  c.gamma = f.gamma;
  c.delta = f.delta;
  c.eta = f.eta;
  c.epsilon = f.epsilon;
  for (int64_t len : lengths)
    SPATTN_CHECK(std::isfinite(f.beta) && std::isfinite(f.delta) && least_slope(c, len) > 0,
                 "calibration fit failed: beta = ", f.beta, ", delta = ", f.delta,
                 ", eta = ", f.eta, ", epsilon = ", f.epsilon,
                 " (sparsity must grow with lambda at every calibrated "
                 "length, for every s in [0, 1]; at ",
                 len, " the slope falls to ", least_slope(c, len), ")");
  c.gamma_fitted = form.fit_gamma;
  c.points = int64_t(in.size());
  c.fit_min = opt.fit_min;
  c.fit_max = opt.fit_max;
  c.rms_log_error = rms_residual(in, f);
  for (const auto& p : in)
    c.max_sparsity_error = std::max(
        c.max_sparsity_error, std::abs(c.predicted_sparsity(p.lambda, p.length) - p.sparsity));
  // The simpler forms on the same points, so a user sees what each term buys.
  Form one_slope_form, linear_form;
  one_slope_form.fit_gamma = linear_form.fit_gamma = true;
  linear_form.fit_delta = true;
  Law paper, one_slope, linear;
  const bool lengths_vary = lengths.size() >= 2;
  c.paper_rms_log_error = solve(in, Form{}, paper) ? rms_residual(in, paper) : NAN;
  c.one_slope_rms_log_error =
      lengths_vary && solve(in, one_slope_form, one_slope) ? rms_residual(in, one_slope) : NAN;
  c.linear_rms_log_error =
      lengths_vary && solve(in, linear_form, linear) ? rms_residual(in, linear) : NAN;
  std::sort(lengths.begin(), lengths.end());
  c.lengths = lengths;
  c.fit_lengths = lengths;
  return c;
}

BlasstCalibrator::BlasstCalibrator(CalibrationOptions opt) : opt_(std::move(opt)) {
  check_options(opt_);
}

void BlasstCalibrator::merge(Lengths& into, int64_t length, const TileMargins& tm) {
  auto it =
      std::find_if(into.begin(), into.end(), [&](const Length& l) { return l.length >= length; });
  if (it == into.end() || it->length != length) {
    Length fresh;
    fresh.length = length;
    it = into.insert(it, std::move(fresh));
  }
  // Only tiles below their running max (margin < 0) can be skipped by any lambda <= 1.
  std::vector<std::pair<float, int64_t>> tiles;
  tiles.reserve(it->margin.size() + tm.margin.size());
  for (size_t i = 0; i < it->margin.size(); ++i)
    tiles.emplace_back(it->margin[i], it->prefix[i + 1] - it->prefix[i]);
  for (size_t i = 0; i < tm.margin.size(); ++i)
    if (tm.margin[i] < 0) tiles.emplace_back(tm.margin[i], tm.entries[i]);
  std::sort(tiles.begin(), tiles.end());
  it->margin.resize(tiles.size());
  it->prefix.assign(tiles.size() + 1, 0);
  for (size_t i = 0; i < tiles.size(); ++i) {
    it->margin[i] = tiles[i].first;
    it->prefix[i + 1] = it->prefix[i] + tiles[i].second;
  }
  it->causal_entries += tm.causal_entries;
}

void BlasstCalibrator::add(const TensorView& q, const TensorView& k, const TensorView& v,
                           int64_t layer) {
  SPATTN_CHECK(layer >= -1, "calibration layer must be >= 0 (or -1: unlabelled), got ", layer);
  if (samples_ == 0) {
    heads_ = q.heads, kv_heads_ = k.heads, dim_ = q.dim;
    dtype_ = dtype_name(q.dtype);
  }
  SPATTN_CHECK(q.heads == heads_ && k.heads == kv_heads_ && q.dim == dim_,
               "calibration samples must share heads, kv heads and dim: got [", q.heads, ", ",
               k.heads, ", ", q.dim, "] after [", heads_, ", ", kv_heads_, ", ", dim_, "]");
  const TileMargins tm = blasst_tile_margins(q, k, v, opt_.attn, opt_.order);
  merge(lengths_, k.seq, tm);
  if (layer >= 0) {
    auto it = std::find_if(layers_.begin(), layers_.end(),
                           [&](const Layer& l) { return l.layer >= layer; });
    if (it == layers_.end() || it->layer != layer) {
      Layer fresh;
      fresh.layer = layer;
      it = layers_.insert(it, std::move(fresh));
    }
    merge(it->lengths, k.seq, tm);
    ++it->samples;
  }
  ++samples_;
}

const BlasstCalibrator::Length& BlasstCalibrator::find(const Lengths& ls, int64_t length) {
  for (const auto& l : ls)
    if (l.length == length) return l;
  detail::fail("no calibration sample has length ", length);
}

double BlasstCalibrator::sparsity_in(const Length& l, double lambda) {
  if (!(lambda > 0) || l.causal_entries == 0) return 0.0;
  // The kernel's rule: skipped exactly when margin < ln(lambda).
  const double thr = std::log(lambda);
  const size_t n = size_t(std::lower_bound(l.margin.begin(), l.margin.end(), thr,
                                           [](float m, double t) { return double(m) < t; }) -
                          l.margin.begin());
  return double(l.prefix[n]) / double(l.causal_entries);
}

double BlasstCalibrator::lambda_in(const Length& l, double sparsity) {
  if (sparsity <= 0 || l.causal_entries == 0) return 0.0;
  // First tile count whose entries reach the target; lambda must exceed that tile's margin.
  const double need = sparsity * double(l.causal_entries);
  const size_t i = size_t(std::lower_bound(l.prefix.begin(), l.prefix.end(), need,
                                           [](int64_t p, double n) { return double(p) < n; }) -
                          l.prefix.begin());
  if (i == 0 || i >= l.prefix.size()) return 0.0;
  return std::exp(double(l.margin[i - 1]));
}

double BlasstCalibrator::sparsity_at(int64_t length, double lambda) const {
  return sparsity_in(find(lengths_, length), lambda);
}

double BlasstCalibrator::lambda_at(int64_t length, double sparsity) const {
  return lambda_in(find(lengths_, length), sparsity);
}

std::vector<CalibrationPoint> BlasstCalibrator::curve_of(const Lengths& ls) const {
  std::vector<CalibrationPoint> pts;
  const double lo = std::log10(opt_.lambda_min), hi = std::log10(opt_.lambda_max);
  const int steps = int(std::floor((hi - lo) * opt_.points_per_decade + 1e-9));
  for (const auto& l : ls)
    for (int i = steps; i >= 0; --i) {
      // Grid anchored at lambda_max so lambda = 1 (the most BLASST can skip) is always on it.
      const double lambda = std::pow(10.0, hi - double(i) / opt_.points_per_decade);
      pts.push_back({l.length, lambda, sparsity_in(l, lambda)});
    }
  return pts;
}

std::vector<CalibrationPoint> BlasstCalibrator::fit_points_of(const Lengths& ls) const {
  std::vector<CalibrationPoint> pts;
  const int n = int(std::floor((opt_.fit_max - opt_.fit_min) / opt_.sparsity_step + 1e-9));
  for (const auto& l : ls)
    for (int i = 0; i <= n; ++i) {
      const double s = opt_.fit_min + i * opt_.sparsity_step;
      const double lambda = lambda_in(l, s);
      if (lambda > 0 && lambda <= 1) pts.push_back({l.length, lambda, s});
    }
  return pts;
}

std::vector<CalibrationPoint> BlasstCalibrator::curve() const { return curve_of(lengths_); }
std::vector<CalibrationPoint> BlasstCalibrator::fit_points() const {
  return fit_points_of(lengths_);
}

void BlasstCalibrator::measure(Calibration& c, const Lengths& ls) const {
  c.lengths.clear();
  c.reach.clear();
  c.checks.clear();
  for (const auto& l : ls) {
    c.lengths.push_back(l.length);
    c.reach.push_back({l.length, sparsity_in(l, 1.0)});
  }
  for (const auto& l : ls)
    for (double t : opt_.check_targets) {
      const double lambda = c.lambda_for(t, l.length);
      c.checks.push_back({l.length, t, lambda, sparsity_in(l, lambda)});
    }
}

Calibration BlasstCalibrator::fit() const {
  SPATTN_CHECK(samples_ > 0, "calibration needs at least one sample");
  Calibration c = fit_blasst_calibration(fit_points(), opt_);
  c.curve = curve();
  c.samples = samples_;
  c.source = opt_.source;
  c.heads = heads_, c.kv_heads = kv_heads_, c.dim = dim_;
  c.dtype = dtype_;
  c.causal = opt_.attn.causal;
  c.order = opt_.order;
  measure(c, lengths_);
  for (const Layer& layer : layers_) {
    Calibration lc;
    try {
      lc = fit_blasst_calibration(fit_points_of(layer.lengths), opt_);
    } catch (const Error& e) {
      // Too few points of its own (a layer that stays dense below fit_min, say): the law over
      // every layer stands in, and the file says so.
      lc = c;
      lc.layers.clear();
      lc.curve.clear();
      lc.pooled = true;
      lc.pool_reason = e.what();
    }
    lc.layer = layer.layer;
    lc.samples = layer.samples;
    lc.source = c.source;
    lc.heads = c.heads, lc.kv_heads = c.kv_heads, lc.dim = c.dim;
    lc.dtype = c.dtype;
    lc.causal = c.causal;
    lc.order = c.order;
    measure(lc, layer.lengths);
    c.layers.push_back(std::move(lc));
  }
  return c;
}

}  // namespace spattn
