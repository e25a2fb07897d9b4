// BLASST calibration: the fit, the file format's validation, and a real calibration at small
// lengths whose thresholds must hit their target sparsity on the samples they came from.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <unistd.h>

#include "cli_run.hpp"
#include "spattn/blasst.hpp"
#include "spattn/calibration.hpp"
#include "spattn/error.hpp"
#include "spattn/workload.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

namespace fs = std::filesystem;

// Points exactly on lambda * L^(gamma + delta * s + epsilon * s^2) = alpha * exp(beta * s +
// eta * s^2), s in [0.2, 0.8] (the default fit range).
std::vector<CalibrationPoint> synthetic(double alpha, double beta, double gamma, double delta = 0,
                                        double eta = 0, double epsilon = 0) {
  std::vector<CalibrationPoint> pts;
  for (int64_t len : {4096, 8192, 16384, 32768})
    for (int i = 0; i <= 12; ++i) {
      const double s = 0.2 + 0.05 * i;
      pts.push_back({len,
                     alpha * std::exp(beta * s + eta * s * s) /
                         std::pow(double(len), gamma + delta * s + epsilon * s * s),
                     s});
    }
  return pts;
}

TEST(CalibFit, RecoversAlphaBetaGammaDelta) {
  const Calibration c = fit_blasst_calibration(synthetic(3e-4, 15.0, 0.3, 0.7), {});
  EXPECT_NEAR(c.alpha, 3e-4, 3e-4 * 1e-6);
  EXPECT_NEAR(c.beta, 15.0, 1e-6);
  EXPECT_NEAR(c.gamma, 0.3, 1e-6);
  EXPECT_NEAR(c.delta, 0.7, 1e-6);
  EXPECT_TRUE(c.gamma_fitted);
  EXPECT_LT(c.rms_log_error, 1e-9);
  EXPECT_LT(c.max_sparsity_error, 1e-9);
  // The simpler forms cannot follow a slope that moves with length.
  EXPECT_GT(c.one_slope_rms_log_error, 0.1);
  EXPECT_GT(c.paper_rms_log_error, c.one_slope_rms_log_error);
  EXPECT_NEAR(c.lambda_for(0.5, 8192), 3e-4 * std::exp(7.5) / std::pow(8192.0, 0.3 + 0.35), 1e-12);
  EXPECT_NEAR(c.predicted_sparsity(c.lambda_for(0.6, 16384), 16384), 0.6, 1e-9);
}

// The curvature terms: a known law bent in s (as measured curves are near their reach) is
// recovered, the linear form cannot follow it, and the inverse still inverts.
TEST(CalibFit, RecoversCurvature) {
  const Calibration c = fit_blasst_calibration(synthetic(2e-5, 8.0, -0.2, 0.5, 30.0, 2.5), {});
  EXPECT_NEAR(c.alpha, 2e-5, 2e-5 * 1e-6);
  EXPECT_NEAR(c.beta, 8.0, 1e-6);
  EXPECT_NEAR(c.gamma, -0.2, 1e-6);
  EXPECT_NEAR(c.delta, 0.5, 1e-6);
  EXPECT_NEAR(c.eta, 30.0, 1e-5);
  EXPECT_NEAR(c.epsilon, 2.5, 1e-6);
  EXPECT_LT(c.rms_log_error, 1e-9);
  EXPECT_LT(c.max_sparsity_error, 1e-9);
  EXPECT_GT(c.linear_rms_log_error, 0.05);
  for (int64_t len : {4096, 6000, 32768})
    for (double s : {0.1, 0.5, 0.7})  // (at 0.9 and 4K lambda clamps at 1)
      EXPECT_NEAR(c.predicted_sparsity(c.lambda_for(s, len), len), s, 1e-9) << len << " " << s;
  const double x = std::log(8192.0), s = 0.6;
  EXPECT_NEAR(c.lambda_for(s, 8192),
              2e-5 * std::exp(8.0 * s + 30.0 * s * s - (-0.2 + 0.5 * s + 2.5 * s * s) * x), 1e-12);
  // Without the terms, the fit is the linear law it was before (and worse on these points).
  CalibrationOptions o;
  o.curvature = false;
  const Calibration lin = fit_blasst_calibration(synthetic(2e-5, 8.0, -0.2, 0.5, 30.0, 2.5), o);
  EXPECT_EQ(lin.eta, 0.0);
  EXPECT_EQ(lin.epsilon, 0.0);
  EXPECT_NEAR(lin.rms_log_error, c.linear_rms_log_error, 1e-12);
  // A bend that turns sparsity against lambda inside [0, 1] at a calibrated length fails.
  try {
    fit_blasst_calibration(synthetic(2e-5, 8.0, -0.2, 0.5, -10.0, 0.0), {});
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("every calibrated length"), std::string::npos) << e.what();
  }
}

TEST(CalibFit, OneSlopeWhenAsked) {
  CalibrationOptions o;
  o.length_slope = false;
  const Calibration c = fit_blasst_calibration(synthetic(3e-4, 9.0, 0.3), o);
  EXPECT_NEAR(c.beta, 9.0, 1e-6);
  EXPECT_NEAR(c.gamma, 0.3, 1e-6);
  EXPECT_EQ(c.delta, 0.0);
  EXPECT_LT(c.rms_log_error, 1e-9);
  // On points with no length slope, fitting delta finds none.
  EXPECT_NEAR(fit_blasst_calibration(synthetic(3e-4, 9.0, 0.3), {}).delta, 0.0, 1e-6);
}

// delta tilts the law with length; where the tilt would make sparsity fall with lambda the
// calibration says it does not reach, rather than returning a threshold.
TEST(CalibLambda, RefusesLengthsWhereTheSlopeTurns) {
  Calibration c;
  c.alpha = 1e-4, c.beta = 10, c.gamma = 0, c.delta = 1.0;  // slope 10 - ln L: zero at L = e^10
  EXPECT_GT(c.lambda_for(0.5, 4096), 0.0);
  EXPECT_THROW(c.lambda_for(0.5, 30000), Error);
}

TEST(CalibFit, PaperFormWhenGammaFixed) {
  CalibrationOptions o;
  o.gamma = 1.0;
  const Calibration c = fit_blasst_calibration(synthetic(50.0, 7.0, 1.0), o);
  EXPECT_FALSE(c.gamma_fitted);
  EXPECT_EQ(c.gamma, 1.0);
  EXPECT_EQ(c.delta, 0.0);
  EXPECT_NEAR(c.alpha, 50.0, 1e-6);
  EXPECT_NEAR(c.beta, 7.0, 1e-9);
  EXPECT_NEAR(c.paper_rms_log_error, 0.0, 1e-9);
}

TEST(CalibFit, FailsLoudly) {
  // Too few points in the fit range.
  std::vector<CalibrationPoint> few = {{4096, 1e-3, 0.5}, {4096, 1e-2, 0.99}, {4096, 1e-4, 0.01}};
  EXPECT_THROW(fit_blasst_calibration(few, {}), Error);
  // Sparsity falling with lambda: beta < 0.
  std::vector<CalibrationPoint> falling;
  for (double s = 0.1; s < 0.9; s += 0.1) falling.push_back({4096, std::exp(-5 * s), s});
  try {
    fit_blasst_calibration(falling, {});
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("beta"), std::string::npos) << e.what();
  }
  // Sparsity rising with lambda at 4K but falling at 32K: no law that holds at both lengths.
  try {
    fit_blasst_calibration(synthetic(3e-4, 15.0, 0.3, 1.6), {});
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("every calibrated length"), std::string::npos) << e.what();
  }
  // One sparsity value only: nothing determines beta.
  std::vector<CalibrationPoint> flat = {{4096, 1e-3, 0.5}, {4096, 1e-2, 0.5}, {4096, 1e-1, 0.5}};
  EXPECT_THROW(fit_blasst_calibration(flat, {}), Error);
}

TEST(CalibLambda, TargetAndClamp) {
  Calibration c;
  c.alpha = 1e-2, c.beta = 10, c.gamma = 0;
  EXPECT_THROW(c.lambda_for(1.0, 4096), Error);
  EXPECT_THROW(c.lambda_for(-0.1, 4096), Error);
  EXPECT_THROW(c.lambda_for(NAN, 4096), Error);
  EXPECT_THROW(c.lambda_for(0.5, 0), Error);
  EXPECT_EQ(c.lambda_for(0.99, 4096), 1.0);  // e^(9.9) * 1e-2 > 1: clamped
  EXPECT_NEAR(c.lambda_for(0.0, 4096), 1e-2, 1e-15);
}

Calibration fitted() {
  Calibration c = fit_blasst_calibration(synthetic(3e-4, 12.0, 0.3, 0.3, 2.0, 0.1), {});
  c.samples = 4, c.source = "text workload", c.heads = 2, c.kv_heads = 1, c.dim = 64;
  c.dtype = "f32";
  c.checks.push_back({4096, 0.5, 1e-3, 0.51});
  return c;
}

TEST(CalibJson, RoundTrip) {
  const Calibration a = fitted();
  const Calibration b = calibration_from_json(calibration_to_json(a));
  EXPECT_DOUBLE_EQ(b.alpha, a.alpha);
  EXPECT_DOUBLE_EQ(b.beta, a.beta);
  EXPECT_DOUBLE_EQ(b.gamma, a.gamma);
  EXPECT_DOUBLE_EQ(b.delta, a.delta);
  EXPECT_DOUBLE_EQ(b.eta, a.eta);
  EXPECT_DOUBLE_EQ(b.epsilon, a.epsilon);
  EXPECT_NE(a.delta, 0.0);
  EXPECT_DOUBLE_EQ(b.one_slope_rms_log_error, a.one_slope_rms_log_error);
  EXPECT_EQ(b.points, a.points);
  EXPECT_EQ(b.lengths, a.lengths);
  EXPECT_EQ(b.source, a.source);
  EXPECT_EQ(b.kv_heads, 1);
  ASSERT_EQ(b.checks.size(), 1u);
  EXPECT_DOUBLE_EQ(b.checks[0].achieved, 0.51);
  EXPECT_EQ(b.curve.size(), a.curve.size());
  EXPECT_DOUBLE_EQ(b.lambda_for(0.7, 65536), a.lambda_for(0.7, 65536));
}

// Version 1 files (before delta) hold the delta = 0 law and still load.
TEST(CalibJson, ReadsVersion1AsNoLengthSlope) {
  auto j = nlohmann::json::parse(calibration_to_json(fitted()));
  j["version"] = 1;
  j.erase("delta");
  j.erase("one_slope_rms_log_error");
  const Calibration c = calibration_from_json(j.dump(), "v1.json");
  EXPECT_EQ(c.delta, 0.0);
  EXPECT_TRUE(std::isnan(c.one_slope_rms_log_error));
  EXPECT_NEAR(c.lambda_for(0.5, 8192), c.alpha * std::exp(c.beta * 0.5) / std::pow(8192.0, c.gamma),
              1e-15);
}

// Version 2 files (before the visiting order) were measured in order and load as in_order.
TEST(CalibJson, ReadsVersion2AsInOrder) {
  auto j = nlohmann::json::parse(calibration_to_json(fitted()));
  j["version"] = 2;
  j.erase("order");
  EXPECT_EQ(calibration_from_json(j.dump(), "v2.json").order, BlasstOrder::in_order);
}

// Loading `j` must fail with a message naming `field`.
void expect_rejected(const nlohmann::json& j, const std::string& field) {
  try {
    calibration_from_json(j.dump(), "t.json");
    ADD_FAILURE() << "accepted a file with bad '" << field << "': " << j.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'" + field + "'"), std::string::npos) << e.what();
  }
}

// Files before version 5 have no curvature terms: they load as the linear law they were.
TEST(CalibJson, ReadsVersion4AsNoCurvature) {
  auto j = nlohmann::json::parse(calibration_to_json(fitted()));
  EXPECT_NE(j["eta"].get<double>(), 0.0);
  j["version"] = 4;
  j.erase("eta");
  j.erase("epsilon");
  j.erase("linear_rms_log_error");
  const Calibration c = calibration_from_json(j.dump(), "v4.json");
  EXPECT_EQ(c.eta, 0.0);
  EXPECT_EQ(c.epsilon, 0.0);
  EXPECT_TRUE(std::isnan(c.linear_rms_log_error));
  // With curvature, beta alone may be negative: the slope over s in [0, 1] decides.
  auto bent = nlohmann::json::parse(calibration_to_json(fitted()));
  bent["beta"] = -1.0, bent["delta"] = -0.5, bent["eta"] = 20.0, bent["epsilon"] = 0.1;
  EXPECT_EQ(calibration_from_json(bent.dump()).beta, -1.0);
  bent["delta"] = 0.3;  // slope -1 - 0.3 ln L at s = 0: falling
  expect_rejected(bent, "beta");
  // From version 5 on they are required and checked.
  j["version"] = 5;
  expect_rejected(j, "eta");
  j["eta"] = 1e9;
  expect_rejected(j, "eta");
}

TEST(CalibJson, RejectsBadFields) {
  const auto good = nlohmann::json::parse(calibration_to_json(fitted()));
  for (const char* f : {"alpha", "beta", "gamma", "delta", "points", "lengths", "source", "heads",
                        "dim", "causal", "order", "format", "version", "rms_log_error"}) {
    auto j = good;
    j.erase(f);
    expect_rejected(j, f);
  }
  auto j = good;
  j["alpha"] = "1e-3";
  expect_rejected(j, "alpha");
  j = good;
  j["alpha"] = 0.0;
  expect_rejected(j, "alpha");
  j = good;
  j["alpha"] = -1.0;
  expect_rejected(j, "alpha");
  j = good;
  j["beta"] = -2.0;  // a failed fit
  expect_rejected(j, "beta");
  j = good;
  j["delta"] = 1.5;  // slope 12 - 1.5 ln L is negative at the calibrated 32K: a failed fit
  expect_rejected(j, "delta");
  j = good;
  j["delta"] = "0";
  expect_rejected(j, "delta");
  j = good;
  j["version"] = 6;  // a newer format than this build reads
  expect_rejected(j, "version");
  j = good;
  j["order"] = "sideways";
  expect_rejected(j, "order");
  j = good;
  j["points"] = 2;  // a fit from fewer points than it has parameters
  expect_rejected(j, "points");
  j = good;
  j["lengths"] = nlohmann::json::array({4096, -1});
  expect_rejected(j, "lengths");
  j = good;
  j["format"] = "something else";
  expect_rejected(j, "format");
  // Non-finite: JSON has no NaN, but 1e999 parses as infinity.
  std::string text = good.dump();
  const std::string key = "\"beta\":";
  const size_t at = text.find(key) + key.size();
  text.replace(at, text.find(',', at) - at, "1e999");
  EXPECT_THROW(calibration_from_json(text, "t.json"), Error);
  EXPECT_THROW(calibration_from_json("{not json", "t.json"), Error);
  EXPECT_THROW(calibration_from_json("[1,2]", "t.json"), Error);
  EXPECT_THROW(load_calibration("/nonexistent/calib.json"), Error);
}

// A real calibration at small lengths (~2 s: the generator dominates): lambda_for(0.5) must
// come close to 50% at each calibrated length on the calibration samples. Small lengths saturate early (at 1K no lambda
// skips more than ~2/3 of the entries), hence the fit range stops at 0.6.
TEST(CalibWorkloadSlow, SmallLengthsHitTarget) {
  CalibrationOptions o;
  o.fit_min = 0.2, o.fit_max = 0.6;
  BlasstCalibrator cal(o);
  for (int64_t len : {1024, 2048, 4096})
    for (uint64_t seed : {3, 4}) {
      WorkloadConfig w;
      w.seq = len, w.heads = 16, w.dim = 64, w.seed = seed;
      const Workload x = make_workload(w);
      cal.add(x.q.view(), x.k.view(), x.v.view());
    }
  const Calibration c = cal.fit();
  // The law is a model of the generator's length dependence, not an identity: a miss is
  // bounded by the fit's own reported worst error over its points (and stays small).
  ASSERT_GT(c.points, 0);
  EXPECT_LT(c.max_sparsity_error, 0.10);
  for (int64_t len : {1024, 2048, 4096}) {
    const double got = cal.sparsity_at(len, c.lambda_for(0.5, len));
    EXPECT_LE(std::abs(got - 0.5), c.max_sparsity_error + 0.01) << "length " << len;
    EXPECT_NEAR(got, 0.5, 0.08) << "length " << len;
  }
  // The calibrator's pooled sparsity is the kernel's own count, pooled over both samples
  // (equal causal entries, so the plain mean).
  std::vector<TileMargins> tms;
  for (uint64_t seed : {3, 4}) {
    WorkloadConfig w;
    w.seq = 1024, w.heads = 16, w.dim = 64, w.seed = seed;
    const Workload x = make_workload(w);
    tms.push_back(blasst_tile_margins(x.q.view(), x.k.view(), x.v.view()));
  }
  for (double lambda : {1e-4, 1e-3, 1e-2, 0.3})
    EXPECT_NEAR(cal.sparsity_at(1024, lambda),
                (tms[0].sparsity_at(lambda) + tms[1].sparsity_at(lambda)) / 2, 1e-12);
  EXPECT_NEAR(cal.sparsity_at(1024, cal.lambda_at(1024, 0.4) * 1.0001), 0.4, 0.01);
}

TEST(CalibCli, WritesLoadableFile) {
  const test::TempDir dir("spattn_calib_cli");
  const fs::path out = dir / "calib.json";
  const std::string cmd = std::string(SPATTN_CLI_PATH) +
                          " calibrate --lengths 512,1024 --heads 4 --dim 64 --samples 2 "
                          "--fit-max 0.6 --out " +
                          out.string() + " > " + (dir / "stdout").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << std::ifstream(dir / "stdout").rdbuf();
  const Calibration c = load_calibration(out.string());
  EXPECT_EQ(c.samples, 4);
  EXPECT_EQ(c.lengths, (std::vector<int64_t>{512, 1024}));
  EXPECT_EQ(c.source, "text workload");
  EXPECT_EQ(c.order, BlasstOrder::local_first);  // the method's default order
  EXPECT_GT(c.beta, 0);
  // Bad input is a message and exit code 2.
  const std::string bad = std::string(SPATTN_CLI_PATH) + " calibrate --lengths 0 --out " +
                          out.string() + " > /dev/null 2>&1";
  const int status = std::system(bad.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2);
}

// target_miss against its definition, worked by hand: the mean's miss, the sample standard
// deviation (n - 1) over sqrt(n), the range; one workload has no spread to estimate.
TEST(CalibEvaluate, TargetMissIsTheMeansMissWithItsStandardError) {
  const TargetMiss m = target_miss({0.50, 0.54, 0.52, 0.56}, 0.5);
  EXPECT_EQ(m.workloads, 4);
  EXPECT_NEAR(m.mean, 0.53, 1e-15);
  EXPECT_NEAR(m.miss, 0.03, 1e-15);
  // deviations -0.03, 0.01, -0.01, 0.03: squares sum to 0.002, variance 0.002 / 3
  EXPECT_NEAR(m.standard_error, std::sqrt(0.002 / 3 / 4), 1e-15);
  EXPECT_EQ(m.min, 0.50);
  EXPECT_EQ(m.max, 0.56);
  const TargetMiss one = target_miss({0.7}, 0.75);
  EXPECT_NEAR(one.miss, -0.05, 1e-15);
  EXPECT_EQ(one.standard_error, 0.0);
  EXPECT_THROW(target_miss({}, 0.5), Error);
}

// --evaluate reads a calibration and reports the sparsity it reaches on fresh workloads; every
// bad value of its flags is a message and exit code 2.
TEST(CalibCli, EvaluateChecksACalibrationAndRejectsBadFlags) {
  const test::TempDir dir("spattn_calib_eval");
  const std::string calib = (dir / "calib.json").string();
  const std::string small = " --lengths 512,1024 --heads 4 --dim 64 --samples 2 ";
  ASSERT_EQ(test::run_spattn("calibrate" + small + "--fit-max 0.6 --out " + calib, dir).code(), 0);
  const test::CliRun ok =
      test::run_spattn("calibrate --evaluate " + calib + small + "--seed 50", dir);
  ASSERT_EQ(ok.code(), 0) << ok.err;
  EXPECT_NE(ok.out.find("worst mean miss"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("target 70%"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("over 2 workloads (target "), std::string::npos) << ok.out;
  // --json: the same evaluation, each miss with its standard error and workload count, and the
  // worst of them one of those.
  const test::CliRun js =
      test::run_spattn("calibrate --json --evaluate " + calib + small + "--seed 50", dir);
  ASSERT_EQ(js.code(), 0) << js.err;
  const nlohmann::json j = nlohmann::json::parse(js.out);
  ASSERT_EQ(j.at("rows").size(), 2u);
  double worst = 0;
  for (const auto& row : j.at("rows")) {
    EXPECT_EQ(row.at("workloads"), 2);
    ASSERT_EQ(row.at("targets").size(), 2u);  // 0.5, 0.7
    for (const auto& t : row.at("targets")) {
      EXPECT_EQ(t.at("workloads"), 2);
      EXPECT_GE(t.at("miss_standard_error").get<double>(), 0.0);
      EXPECT_NEAR(t.at("miss").get<double>(),
                  t.at("mean").get<double>() - t.at("target").get<double>(), 1e-12);
      if (t.at("in_reach")) worst = std::max(worst, std::abs(t.at("miss").get<double>()));
    }
  }
  ASSERT_FALSE(j.at("worst_miss").is_null()) << js.out;
  EXPECT_EQ(std::abs(j.at("worst_miss").at("miss").get<double>()), worst);
  EXPECT_EQ(j.at("worst_miss").at("workloads"), 2);
  auto expect_bad = [&](const std::string& args, const std::string& mention) {
    const test::CliRun r = test::run_spattn("calibrate" + small + args, dir);
    ASSERT_TRUE(r.exited()) << r.err;
    EXPECT_EQ(r.code(), 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find(mention), std::string::npos) << args << ": " << r.err;
  };
  expect_bad("--evaluate " + (dir / "missing.json").string(), "missing.json");
  expect_bad("--evaluate " + calib + " --targets 0.5,1.5", "--targets");
  expect_bad("--evaluate " + calib + " --fixed-lambda -0.1", "--fixed-lambda");
  expect_bad("--evaluate " + calib + " --fixed-lambda 2", "--fixed-lambda");
  expect_bad("", "--out is required");
  expect_bad("--json --out " + calib, "--json goes with --evaluate");
  expect_bad("--order sideways --out " + calib, "sideways");
}

}  // namespace
}  // namespace spattn
