// Calibration files. A calibration decides every threshold a `blasst:sparsity=` run uses, so
// loading treats the file as untrusted: every field is checked and named when wrong.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/json_fields.hpp"
#include "spattn/calibration.hpp"
#include "spattn/error.hpp"

namespace spattn {

namespace {

using nlohmann::json;
constexpr const char* kFormat = "spattn.blasst_calibration";
// Version 2 added delta (version 1 files are the delta = 0 law and still load); version 3 the
// visiting order (older files were measured in order, and load as in_order); version 4 the
// reach per length, the lengths the fit's points came from, and laws per layer (older files
// have one law; their reach is read off their curve at lambda = 1 where it has that point);
// version 5 the curvature terms eta and epsilon (older files are the eta = epsilon = 0 law).
constexpr int kVersion = 5;

using Fields = detail::JsonFields;

}  // namespace

namespace {

// The fields of one law: the whole file's, or one layer's entry of "layers".
json law_json(const Calibration& c) {
  json j;
  j["alpha"] = c.alpha;
  j["beta"] = c.beta;
  j["gamma"] = c.gamma;
  j["delta"] = c.delta;
  j["eta"] = c.eta;
  j["epsilon"] = c.epsilon;
  j["gamma_fitted"] = c.gamma_fitted;
  j["points"] = c.points;
  j["rms_log_error"] = c.rms_log_error;
  j["max_sparsity_error"] = c.max_sparsity_error;
  // NaN is not JSON: a paper-form fit that could not be made is written as null.
  auto finite_or_null = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  j["paper_rms_log_error"] = finite_or_null(c.paper_rms_log_error);
  j["one_slope_rms_log_error"] = finite_or_null(c.one_slope_rms_log_error);
  j["linear_rms_log_error"] = finite_or_null(c.linear_rms_log_error);
  j["fit_min"] = c.fit_min;
  j["fit_max"] = c.fit_max;
  j["samples"] = c.samples;
  j["lengths"] = c.lengths;
  j["fit_lengths"] = c.fit_lengths;
  j["reach"] = json::array();
  for (const auto& r : c.reach)
    j["reach"].push_back({{"length", r.length}, {"max_sparsity", r.max_sparsity}});
  j["checks"] = json::array();
  for (const auto& k : c.checks)
    j["checks"].push_back({{"length", k.length},
                           {"target", k.target},
                           {"lambda", k.lambda},
                           {"achieved", k.achieved}});
  return j;
}

}  // namespace

std::string calibration_to_json(const Calibration& c) {
  json j = law_json(c);
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["model"] =
      "lambda * L^(gamma + delta * sparsity + epsilon * sparsity^2) = alpha * exp(beta * sparsity + "
      "eta * sparsity^2)";
  j["source"] = c.source;
  j["heads"] = c.heads;
  j["kv_heads"] = c.kv_heads;
  j["dim"] = c.dim;
  j["dtype"] = c.dtype;
  j["causal"] = c.causal;
  j["order"] = blasst_order_name(c.order);
  j["layers"] = json::array();
  for (const auto& l : c.layers) {
    json e = law_json(l);
    e["layer"] = l.layer;
    e["pooled"] = l.pooled;
    e["pool_reason"] = l.pool_reason;
    j["layers"].push_back(std::move(e));
  }
  // For the reader only (recomputed on load): what to know before trusting the thresholds.
  j["warnings"] = c.warnings();
  j["curve"] = json::array();
  for (const auto& p : c.curve)
    j["curve"].push_back({{"length", p.length}, {"lambda", p.lambda}, {"sparsity", p.sparsity}});
  return j.dump(2) + "\n";
}

namespace {

std::vector<int64_t> read_lengths(const json& a, const std::string& origin, const char* name) {
  SPATTN_CHECK(a.is_array(), origin, ": field '", name, "' must be an array");
  std::vector<int64_t> out;
  for (const auto& l : a) {
    SPATTN_CHECK(l.is_number_integer() && l.get<int64_t>() >= 1, origin, ": field '", name,
                 "' must hold positive integers, got ", l.dump());
    out.push_back(l.get<int64_t>());
  }
  return out;
}

// One law's fields (see law_json) from `j`.
void read_law(const json& j, const std::string& origin, int64_t version, Calibration& c) {
  const Fields f(j, origin);
  c.alpha = f.number("alpha", 0.0, HUGE_VAL, /*lo_open=*/true);
  // A failed fit (beta <= 0 in a linear law: sparsity falling with lambda) gives thresholds
  // that mean nothing. With curvature (version 5) beta alone may be negative: the slope check
  // below, over all of s in [0, 1], is what says the law is monotone.
  c.beta = version >= 5 ? f.number("beta", -1e6, 1e6)
                        : f.number("beta", 0.0, HUGE_VAL, /*lo_open=*/true);
  c.gamma = f.number("gamma", -8.0, 8.0);
  c.delta = version >= 2 ? f.number("delta", -8.0, 8.0) : 0.0;
  c.eta = version >= 5 ? f.number("eta", -1000.0, 1000.0) : 0.0;
  c.epsilon = version >= 5 ? f.number("epsilon", -1000.0, 1000.0) : 0.0;
  c.gamma_fitted = f.boolean("gamma_fitted");
  c.points = f.integer("points", 3);
  c.rms_log_error = f.number("rms_log_error", 0.0, HUGE_VAL);
  c.max_sparsity_error = f.number("max_sparsity_error", 0.0, HUGE_VAL);
  c.paper_rms_log_error = j.contains("paper_rms_log_error") && j["paper_rms_log_error"].is_null()
                              ? NAN
                              : f.number("paper_rms_log_error", 0.0, HUGE_VAL);
  // A comparison only (and absent from version 1): optional, checked when present.
  c.one_slope_rms_log_error =
      !j.contains("one_slope_rms_log_error") || j["one_slope_rms_log_error"].is_null()
          ? NAN
          : f.number("one_slope_rms_log_error", 0.0, HUGE_VAL);
  c.linear_rms_log_error =
      !j.contains("linear_rms_log_error") || j["linear_rms_log_error"].is_null()
          ? NAN
          : f.number("linear_rms_log_error", 0.0, HUGE_VAL);
  c.fit_min = f.number("fit_min", 0.0, 1.0);
  c.fit_max = f.number("fit_max", 0.0, 1.0);
  SPATTN_CHECK(c.fit_min < c.fit_max, origin, ": field 'fit_min' (", c.fit_min,
               ") must be below 'fit_max' (", c.fit_max, ")");
  c.samples = f.integer("samples", 1);
  c.lengths = read_lengths(f.get("lengths"), origin, "lengths");
  SPATTN_CHECK(!c.lengths.empty(), origin, ": field 'lengths' must be a non-empty array");
  for (int64_t len : c.lengths) {
    // A failed fit also shows as sparsity falling with lambda at a calibrated length: the slope
    // d ln(lambda) / ds is linear in s, so its ends s = 0 and 1 bound it.
    const double x = std::log(double(len));
    const double slope =
        std::min(c.beta - c.delta * x, c.beta + 2 * c.eta - (c.delta + 2 * c.epsilon) * x);
    SPATTN_CHECK(slope > 0, origin,
                 ": fields 'beta', 'delta', 'eta' and 'epsilon' give a slope "
                 "d ln(lambda) / ds = ",
                 slope, " <= 0 at calibrated length ", len, " (a failed fit)");
  }
  if (version >= 4) {
    c.fit_lengths = read_lengths(f.get("fit_lengths"), origin, "fit_lengths");
    const json& reach = f.get("reach");
    SPATTN_CHECK(reach.is_array(), origin, ": field 'reach' must be an array");
    for (const auto& e : reach) {
      SPATTN_CHECK(e.is_object(), origin, ": field 'reach' must hold objects");
      const Fields g(e, origin + " reach[]");
      c.reach.push_back({g.integer("length", 1), g.number("max_sparsity", 0, 1)});
      SPATTN_CHECK(c.reach.size() < 2 || c.reach[c.reach.size() - 2].length < c.reach.back().length,
                   origin, ": field 'reach' must be in ascending length order");
    }
  }
  // checks are a record of the calibration run, not needed to use it: optional, but checked
  // when present so a damaged file does not load half-read.
  if (j.contains("checks")) {
    SPATTN_CHECK(j["checks"].is_array(), origin, ": field 'checks' must be an array");
    for (const auto& e : j["checks"]) {
      SPATTN_CHECK(e.is_object(), origin, ": field 'checks' must hold objects");
      const Fields g(e, origin + " checks[]");
      c.checks.push_back({g.integer("length", 1), g.number("target", 0, 1),
                          g.number("lambda", 0, 1), g.number("achieved", 0, 1)});
    }
  }
}

// Files before version 4 record no reach, but their curve's grid ends at lambda = 1 (the most
// BLASST skips): read it there, per length.
void reach_from_curve(Calibration& c) {
  for (int64_t len : c.lengths)
    for (const auto& p : c.curve)
      if (p.length == len && p.lambda == 1.0) {
        c.reach.push_back({len, p.sparsity});
        break;
      }
  if (c.reach.size() != c.lengths.size()) c.reach.clear();  // partial: unknown
  std::sort(c.reach.begin(), c.reach.end(),
            [](const ReachPoint& a, const ReachPoint& b) { return a.length < b.length; });
}

}  // namespace

Calibration calibration_from_json(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    detail::fail(origin, ": not valid JSON (", e.what(), ")");
  }
  SPATTN_CHECK(j.is_object(), origin, ": expected a JSON object");
  const Fields f(j, origin);
  SPATTN_CHECK(f.string("format") == kFormat, origin, ": field 'format' must be '", kFormat,
               "' (not a BLASST calibration file)");
  const int64_t version = f.integer("version", 1);
  SPATTN_CHECK(version <= kVersion, origin, ": field 'version' ", j["version"].dump(),
               " is not supported (expected 1 to ", kVersion, "; written by a newer spattn)");
  Calibration c;
  read_law(j, origin, version, c);
  c.source = f.string("source");
  c.heads = f.integer("heads", 1);
  c.kv_heads = f.integer("kv_heads", 1);
  c.dim = f.integer("dim", 1);
  c.dtype = f.string("dtype");
  c.causal = f.boolean("causal");
  if (version >= 3) {
    const std::string order = f.string("order");
    try {
      c.order = parse_blasst_order(order);
    } catch (const Error& e) {
      detail::fail(origin, ": field 'order': ", e.what());
    }
  }
  if (j.contains("curve")) {
    SPATTN_CHECK(j["curve"].is_array(), origin, ": field 'curve' must be an array");
    for (const auto& e : j["curve"]) {
      SPATTN_CHECK(e.is_object(), origin, ": field 'curve' must hold objects");
      const Fields g(e, origin + " curve[]");
      c.curve.push_back(
          {g.integer("length", 1), g.number("lambda", 0, 1, true), g.number("sparsity", 0, 1)});
    }
  }
  if (version < 4) reach_from_curve(c);
  if (version >= 4) {
    const json& layers = f.get("layers");
    SPATTN_CHECK(layers.is_array(), origin, ": field 'layers' must be an array");
    for (const auto& e : layers) {
      SPATTN_CHECK(e.is_object(), origin, ": field 'layers' must hold objects");
      const std::string at = origin + " layers[]";
      Calibration l;
      read_law(e, at, version, l);
      const Fields g(e, at);
      l.layer = g.integer("layer", 0);
      SPATTN_CHECK(c.layers.empty() || c.layers.back().layer < l.layer, origin,
                   ": field 'layers' must be in ascending, distinct layer order");
      l.pooled = g.boolean("pooled");
      l.pool_reason = g.string("pool_reason");
      l.source = c.source, l.heads = c.heads, l.kv_heads = c.kv_heads, l.dim = c.dim;
      l.dtype = c.dtype, l.causal = c.causal, l.order = c.order;
      c.layers.push_back(std::move(l));
    }
  }
  return c;
}

void save_calibration(const std::string& path, const Calibration& c) {
  const std::string text = calibration_to_json(c);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SPATTN_CHECK(out.good(), "cannot write calibration file '", path, "'");
  out << text;
  out.close();
  SPATTN_CHECK(out.good(), "failed writing calibration file '", path, "'");
}

Calibration load_calibration(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPATTN_CHECK(in.good(), "cannot read calibration file '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return calibration_from_json(ss.str(), "calibration file '" + path + "'");
}

}  // namespace spattn
