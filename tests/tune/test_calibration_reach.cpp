// Calibration that tells the truth (issue 12): the reach of each calibrated length, a fit whose
// points come from one length, targets out of reach (flagged when calibrating, refused at run
// time), laws per layer, and the CLI's messages and exit codes for each.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "spattn/blasst.hpp"
#include "spattn/calibration.hpp"
#include "spattn/error.hpp"
#include "spattn/io.hpp"
#include "spattn/method.hpp"
#include "spattn/workload.hpp"
#include "spec_error.hpp"
#include "test_util.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

namespace fs = std::filesystem;

bool has(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& l : lines)
    if (l.find(part) != std::string::npos) return true;
  return false;
}

// Error text of f(), or "" when it does not throw.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A law that reaches 30% at 1K and 50% at 4K.
Calibration reach_limited() {
  Calibration c;
  c.alpha = 2e-4, c.beta = 9.0, c.gamma = 0.25, c.gamma_fitted = true, c.points = 10;
  c.fit_min = 0.2, c.fit_max = 0.8, c.samples = 2, c.lengths = {1024, 4096};
  c.fit_lengths = {1024, 4096};
  c.reach = {{1024, 0.3}, {4096, 0.5}};
  c.source = "test", c.heads = 1, c.kv_heads = 1, c.dim = 8, c.dtype = "f32";
  return c;
}

TEST(CalibReach, LinearInLogLengthBetweenAndHeldOutside) {
  Calibration c = reach_limited();
  EXPECT_DOUBLE_EQ(c.max_sparsity_at(1024), 0.3);
  EXPECT_DOUBLE_EQ(c.max_sparsity_at(4096), 0.5);
  EXPECT_NEAR(c.max_sparsity_at(2048), 0.4, 1e-12);
  EXPECT_DOUBLE_EQ(c.max_sparsity_at(100), 0.3);
  EXPECT_DOUBLE_EQ(c.max_sparsity_at(1 << 20), 0.5);
  c.reach.clear();
  EXPECT_TRUE(std::isnan(c.max_sparsity_at(4096)));
}

TEST(CalibReach, TargetBeyondReachRaisesNamingTheRange) {
  Calibration c = reach_limited();
  EXPECT_DOUBLE_EQ(c.threshold_for(4096, 0.45), c.lambda_for(0.45, 4096));
  const std::string e = error_of([&] { c.threshold_for(4096, 0.7); });
  EXPECT_NE(e.find("target sparsity 70.0% is out of reach at length 4096"), std::string::npos) << e;
  EXPECT_NE(e.find("reachable range [0%, 50.0%]"), std::string::npos) << e;
  const std::string far = error_of([&] { c.threshold_for(65536, 0.7); });
  EXPECT_NE(far.find("held from the nearest calibrated length"), std::string::npos) << far;
  // A file that records no reach (version 3 without a curve): the law answers alone.
  c.reach.clear();
  EXPECT_DOUBLE_EQ(c.threshold_for(4096, 0.7), c.lambda_for(0.7, 4096));
}

// Points exactly on a law with gamma 0.3, at the given lengths.
std::vector<CalibrationPoint> on_law(const std::vector<int64_t>& lengths) {
  std::vector<CalibrationPoint> pts;
  for (int64_t len : lengths)
    for (int i = 0; i <= 12; ++i) {
      const double s = 0.2 + 0.05 * i;
      pts.push_back({len, 3e-4 * std::exp(10 * s) / std::pow(double(len), 0.3), s});
    }
  return pts;
}

TEST(CalibReach, FitFromOneLengthIsSaidSo) {
  const Calibration one = fit_blasst_calibration(on_law({4096}), {});
  EXPECT_FALSE(one.gamma_fitted);
  EXPECT_EQ(one.fit_lengths, std::vector<int64_t>{4096});
  EXPECT_TRUE(has(one.warnings(), "every fitted point comes from one length (4096)"))
      << one.warnings().size();
  EXPECT_TRUE(has(one.warnings(), "gamma is fixed"));
  const Calibration two = fit_blasst_calibration(on_law({4096, 16384}), {});
  EXPECT_TRUE(two.gamma_fitted);
  EXPECT_FALSE(has(two.warnings(), "one length"));
  // Survives the file.
  Calibration filed = one;
  filed.samples = 1, filed.source = "test", filed.heads = 1, filed.kv_heads = 1, filed.dim = 8;
  filed.dtype = "f32";
  const Calibration back = calibration_from_json(calibration_to_json(filed));
  EXPECT_EQ(back.fit_lengths, std::vector<int64_t>{4096});
  EXPECT_TRUE(has(back.warnings(), "one length"));
}

TEST(CalibReach, CheckTargetsOutOfReachAreWarned) {
  Calibration c = reach_limited();
  c.checks = {{1024, 0.3, 1e-3, 0.29}, {4096, 0.7, 1.0, 0.5}};
  const auto w = c.warnings();
  EXPECT_TRUE(has(
      w, "target 70.0% is out of reach at length 4096: no lambda in (0, 1] skips more than 50.0%"));
  EXPECT_FALSE(has(w, "length 1024"));
  const auto j = nlohmann::json::parse(calibration_to_json(c));
  ASSERT_TRUE(j.contains("warnings"));
  EXPECT_EQ(j["warnings"].size(), w.size());
}

TEST(CalibReach, FilesOfEveryVersionLoad) {
  Calibration c = reach_limited();
  c.curve = {{1024, 0.1, 0.2}, {1024, 1.0, 0.3}, {4096, 0.1, 0.3}, {4096, 1.0, 0.5}};
  auto j = nlohmann::json::parse(calibration_to_json(c));
  const Calibration v4 = calibration_from_json(j.dump());
  ASSERT_EQ(v4.reach.size(), 2u);
  EXPECT_DOUBLE_EQ(v4.reach[1].max_sparsity, 0.5);
  // Version 3 (no reach, fit lengths or layers): the reach is read off the curve at lambda = 1.
  j["version"] = 3;
  for (const char* f : {"reach", "fit_lengths", "layers"}) j.erase(f);
  const Calibration v3 = calibration_from_json(j.dump(), "v3.json");
  ASSERT_EQ(v3.reach.size(), 2u);
  EXPECT_DOUBLE_EQ(v3.max_sparsity_at(1024), 0.3);
  EXPECT_TRUE(v3.fit_lengths.empty());
  j.erase("curve");
  EXPECT_TRUE(calibration_from_json(j.dump(), "v3.json").reach.empty());
  // A newer version than this build reads is named.
  j["version"] = 6;
  const std::string e = error_of([&] { calibration_from_json(j.dump(), "v6.json"); });
  EXPECT_NE(e.find("'version' 6 is not supported"), std::string::npos) << e;
  // Version 4 fields are required and checked.
  auto bad = nlohmann::json::parse(calibration_to_json(c));
  bad["reach"][0]["max_sparsity"] = 1.5;
  EXPECT_NE(error_of([&] { calibration_from_json(bad.dump(), "t.json"); }).find("max_sparsity"),
            std::string::npos);
  bad = nlohmann::json::parse(calibration_to_json(c));
  bad.erase("fit_lengths");
  EXPECT_NE(error_of([&] { calibration_from_json(bad.dump(), "t.json"); }).find("'fit_lengths'"),
            std::string::npos);
}

Workload text(int64_t seq, uint64_t seed) {
  WorkloadConfig w;
  w.seq = seq, w.heads = 4, w.dim = 64, w.seed = seed;
  return make_workload(w);
}

TEST(CalibReach, CalibratorRecordsTheShareAtLambdaOne) {
  CalibrationOptions o;
  o.order = BlasstOrder::local_first;
  o.fit_min = 0.1, o.fit_max = 0.6;
  o.gamma = 1.0;
  BlasstCalibrator cal(o);
  const Workload a = text(512, 1), b = text(1024, 2);
  cal.add(a.q, a.k, a.v);
  cal.add(b.q, b.k, b.v);
  const Calibration c = cal.fit();
  ASSERT_EQ(c.reach.size(), 2u);
  EXPECT_EQ(c.reach[0].length, 512);
  EXPECT_DOUBLE_EQ(
      c.reach[0].max_sparsity,
      blasst_tile_margins(a.q, a.k, a.v, {}, BlasstOrder::local_first).sparsity_at(1.0));
  EXPECT_DOUBLE_EQ(c.reach[1].max_sparsity, cal.sparsity_at(1024, 1.0));
  // Nothing beyond it is reached by any lambda.
  EXPECT_LE(cal.sparsity_at(1024, 0.999), c.reach[1].max_sparsity);
  EXPECT_GT(c.reach[1].max_sparsity, 0.5);
}

// Layer 0 is ordinary attention; layer 1's keys are all equal, so every score of a row ties and
// no tile ever falls below its running max: nothing to fit, and it is pooled (reach 0).
TEST(CalibLayers, EachLayerItsOwnLawAndATooSmallOnePooled) {
  CalibrationOptions o;
  o.order = BlasstOrder::local_first;
  o.fit_min = 0.1, o.fit_max = 0.6;
  o.gamma = 1.0;  // two short lengths do not determine a length law: the paper's form
  BlasstCalibrator cal(o);
  for (int64_t len : {512, 1024}) {
    const Workload w = text(len, 7);
    cal.add(w.q, w.k, w.v, 0);
    const Tensor flat(DType::f32, w.k.heads(), len, 64);
    cal.add(w.q, flat, w.v, 1);
  }
  const Calibration c = cal.fit();
  ASSERT_EQ(c.layers.size(), 2u);
  const Calibration& l0 = c.for_layer(0);
  const Calibration& l1 = c.for_layer(1);
  EXPECT_EQ(l0.layer, 0);
  EXPECT_FALSE(l0.pooled);
  EXPECT_EQ(l0.samples, 2);
  EXPECT_TRUE(l1.pooled);
  EXPECT_NE(l1.pool_reason.find("calibration fit failed"), std::string::npos) << l1.pool_reason;
  EXPECT_DOUBLE_EQ(l1.alpha, c.alpha);  // the pooled law
  EXPECT_DOUBLE_EQ(l1.max_sparsity_at(1024), 0.0);
  EXPECT_GT(l0.max_sparsity_at(1024), 0.5);
  // The runner's hook: each layer's own threshold, and its own reach.
  EXPECT_DOUBLE_EQ(c.threshold_for(0, 1024, 0.3), l0.lambda_for(0.3, 1024));
  const std::string e = error_of([&] { c.threshold_for(1, 1024, 0.3); });
  EXPECT_NE(e.find("out of reach at length 1024 for layer 1"), std::string::npos) << e;
  const std::string missing = error_of([&] { c.for_layer(5); });
  EXPECT_NE(missing.find("no law for layer 5 (it has layers 0, 1)"), std::string::npos) << missing;
  EXPECT_TRUE(has(c.warnings(), "layer 1: too few points to fit its own law"));
  // The file holds them.
  const Calibration back = calibration_from_json(calibration_to_json(c));
  ASSERT_EQ(back.layers.size(), 2u);
  EXPECT_TRUE(back.layers[1].pooled);
  EXPECT_DOUBLE_EQ(back.threshold_for(0, 1024, 0.3), c.threshold_for(0, 1024, 0.3));
  EXPECT_EQ(back.layers[0].reach.size(), 2u);
  // A file with one law serves every layer with it.
  const Calibration single = fit_blasst_calibration(on_law({4096, 16384}), {});
  EXPECT_EQ(&single.for_layer(3), &single);
  // Layers must be ascending and distinct.
  auto j = nlohmann::json::parse(calibration_to_json(c));
  j["layers"][1]["layer"] = 0;
  EXPECT_NE(error_of([&] { calibration_from_json(j.dump(), "t.json"); }).find("'layers'"),
            std::string::npos);
}

// blasst:sparsity=S at run time: a target beyond the file's reach at the problem's length
// raises Error (the choice, see README), one within it runs; layer=N picks the layer's law.
TEST(CalibReach, MethodRefusesATargetBeyondReachAtRunTime) {
  const test::TempDir dir("spattn_reach_method");
  const std::string path = (dir / "c.json").string();
  Calibration c = reach_limited();
  Calibration l3 = reach_limited();
  l3.layer = 3, l3.alpha = 5e-4;
  c.layers = {l3};
  save_calibration(path, c);
  const Tensor q = test::random_tensor(DType::f32, 1, 1, 8, 1);
  const Tensor k = test::random_tensor(DType::f32, 1, 4096, 8, 2);
  const Tensor v = test::random_tensor(DType::f32, 1, 4096, 8, 3);
  Tensor out(DType::f32, 1, 1, 8);
  const auto beyond = make_method("blasst:sparsity=0.7,calib=" + path);  // no length yet: fine
  const std::string e = error_of([&] { beyond->run(q, k, v, out, {}); });
  EXPECT_NE(e.find("out of reach at length 4096"), std::string::npos) << e;
  EXPECT_NE(e.find("[0%, 50.0%]"), std::string::npos) << e;
  EXPECT_DOUBLE_EQ(
      make_method("blasst:sparsity=0.4,calib=" + path)->run(q, k, v, out, {}).extras.at("lambda"),
      c.lambda_for(0.4, 4096));
  EXPECT_DOUBLE_EQ(make_method("blasst:sparsity=0.4,calib=" + path + ",layer=3")
                       ->run(q, k, v, out, {})
                       .extras.at("lambda"),
                   l3.lambda_for(0.4, 4096));
  test::expect_spec_error("blasst:sparsity=0.4,calib=" + path + ",layer=2", "no law for layer 2");
  test::expect_spec_error("blasst:lambda=0.1,layer=2", "layer=N goes with sparsity");
  test::expect_spec_error("blasst:sparsity=0.4,calib=" + path + ",layer=-1", "layer");
}

TEST(CalibCliReach, SingleLengthAndOutOfReachAreReportedAndStrictFails) {
  const test::TempDir dir("spattn_reach_cli");
  const std::string small = " --heads 4 --dim 64 --samples 1 --fit-max 0.6 ";
  const std::string one = (dir / "one.json").string();
  // One length: written (exit 0), said so in the table, on stderr and in the file.
  test::CliRun r = test::run_spattn("calibrate --lengths 1024" + small + "--out " + one, dir);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("fixed: every fitted point is from one length"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("warnings:\n  every fitted point comes from one length (1024)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("warning(s) in the calibration (listed under 'warnings:')"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(load_calibration(one).fit_lengths, std::vector<int64_t>{1024});
  // A check target beyond any lambda: flagged "!" in the table and warned.
  const std::string two = (dir / "two.json").string();
  r = test::run_spattn("calibrate --lengths 512,1024 --targets 0.3,0.99" + small + "--out " + two,
                       dir);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("%!"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("target 99.0% is out of reach at length 512"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("warning: "), std::string::npos) << r.err;
  // --strict: the same is exit 2 and nothing written.
  const std::string strict = (dir / "strict.json").string();
  r = test::run_spattn("calibrate --strict --lengths 1024" + small + "--out " + strict, dir);
  EXPECT_EQ(r.code(), 2) << r.err;
  EXPECT_NE(r.err.find("warning(s) in the calibration; nothing written"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(strict));
  // --evaluate flags a target beyond the file's reach, and --strict makes it exit 2.
  r = test::run_spattn("calibrate --evaluate " + two + " --targets 0.3,0.99 --lengths 512" + small,
                       dir);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(
      r.out.find("target 99.0% is out of reach at length 512: the calibration reaches at most"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("]!"), std::string::npos) << r.out;
  r = test::run_spattn(
      "calibrate --strict --evaluate " + two + " --targets 0.99 --lengths 512" + small, dir);
  EXPECT_EQ(r.code(), 2) << r.err;
  // At run time: exit 2 naming the reachable range.
  r = test::run_spattn(
      "bench --seq 1024 --heads 2 --dim 64 --repeat 1 --method blasst:sparsity=0.99,calib=" + two,
      dir);
  EXPECT_EQ(r.code(), 2) << r.err;
  EXPECT_NE(r.err.find("out of reach at length 1024"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("reachable range [0%, "), std::string::npos) << r.err;
}

// Dumps of two layers, calibrated at two prefixes each: a law per layer in the file, and the
// CLI's checks on --layer and --lengths.
TEST(CalibCliReach, LayersFromDumpsAndTheirPrefixes) {
  const test::TempDir dir("spattn_layers_cli");
  std::string files;
  for (int layer : {0, 1}) {
    const Workload w = text(1024, 20 + layer);
    const std::string f = (dir / ("layer" + std::to_string(layer) + ".safetensors")).string();
    write_safetensors(f, {{"q", w.q.view()}, {"k", w.k.view()}, {"v", w.v.view()}});
    files += " --qkv " + f + " --layer " + std::to_string(layer);
  }
  const std::string out = (dir / "layers.json").string();
  test::CliRun r = test::run_spattn(
      "calibrate" + files + " --lengths 512,1024 --fit-max 0.6 --length-exponent 1 --out " + out,
      dir);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("layer 1: 2 samples"), std::string::npos) << r.out;
  const Calibration c = load_calibration(out);
  EXPECT_EQ(c.samples, 4);
  EXPECT_EQ(c.lengths, (std::vector<int64_t>{512, 1024}));
  ASSERT_EQ(c.layers.size(), 2u);
  EXPECT_EQ(c.layers[1].layer, 1);
  EXPECT_EQ(c.layers[1].samples, 2);
  r = test::run_spattn("calibrate --evaluate " + out + " --qkv " +
                           (dir / "layer1.safetensors").string() +
                           " --layer 1 --lengths 768,1024 --targets 0.3",
                       dir);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("     768"), std::string::npos) << r.out;
  auto expect_bad = [&](const std::string& args, const std::string& mention) {
    const test::CliRun b = test::run_spattn("calibrate" + args, dir);
    EXPECT_EQ(b.code(), 2) << args << ": " << b.err;
    EXPECT_NE(b.err.find(mention), std::string::npos) << args << ": " << b.err;
  };
  const std::string f0 = " --qkv " + (dir / "layer0.safetensors").string();
  expect_bad(f0 + f0 + " --layer 0 --out " + out, "--layer: give one per --qkv");
  expect_bad(f0 + " --lengths 4096 --out " + out, "--lengths: 4096 exceeds the 1024 rows");
  expect_bad(" --evaluate " + out + f0 + " --layer 9", "no law for layer 9");
}

}  // namespace
}  // namespace spattn
