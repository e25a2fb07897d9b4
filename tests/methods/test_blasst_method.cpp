// The blasst method: its spec (lambda=X xor sparsity=S,calib=FILE), the threshold it derives
// from a calibration, and both kernels it dispatches to (prefill, and decode at q_len <= 16).
#include <gtest/gtest.h>

#include <unistd.h>

#include "spec_error.hpp"

#include <cmath>
#include <filesystem>
#include <string>

#include "spattn/attention.hpp"
#include "spattn/calibration.hpp"
#include "methods/registry.hpp"
#include "spattn/decode.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/metrics.hpp"
#include "spattn/workload.hpp"
#include "test_util.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

namespace fs = std::filesystem;

// A calibration file in the folder given.
fs::path write_calibration(const test::TempDir& dir) {
  Calibration c;
  c.alpha = 2e-4, c.beta = 9.0, c.gamma = 0.25, c.gamma_fitted = true, c.points = 10;
  c.fit_min = 0.2, c.fit_max = 0.85, c.samples = 1, c.lengths = {1024};
  c.source = "test", c.heads = 2, c.kv_heads = 2, c.dim = 64, c.dtype = "f32";
  const fs::path p = dir / "calib.json";
  save_calibration(p.string(), c);
  return p;
}

using test::expect_spec_error;

TEST(BlasstSpec, Errors) {
  const test::TempDir dir("spattn_blasst_method");
  const std::string calib = write_calibration(dir).string();
  expect_spec_error("blasst", "exactly one");
  expect_spec_error("blasst:lambda=0.1,sparsity=0.5,calib=" + calib, "exactly one");
  expect_spec_error("blasst:sparsity=0.5", "calib=FILE");
  expect_spec_error("blasst:sparsity=0.5,calib=/nonexistent/c.json", "/nonexistent/c.json");
  expect_spec_error("blasst:lambda=0.1,calib=" + calib, "calib=FILE goes with sparsity");
  expect_spec_error("blasst:lambda=-0.1", "lambda");
  expect_spec_error("blasst:lambda=nan", "lambda");
  expect_spec_error("blasst:lambda=1.5", "lambda");
  expect_spec_error("blasst:sparsity=1,calib=" + calib, "sparsity");
  expect_spec_error("blasst:lambda=0.1,batch=0", "batch");
  expect_spec_error("blasst:lambda=0.1,bogus=1", "bogus");
}

// The threshold a run used, as its report gives it: one decode query over kv_len keys.
double run_lambda(const Method& m, int64_t kv_len) {
  const Tensor q = test::random_tensor(DType::f32, 1, 1, 8, 1);
  const Tensor k = test::random_tensor(DType::f32, 1, kv_len, 8, 2);
  const Tensor v = test::random_tensor(DType::f32, 1, kv_len, 8, 3);
  Tensor out(DType::f32, 1, 1, 8);
  return m.run(q, k, v, out, {}).extras.at("lambda");
}

TEST(BlasstSpec, ThresholdFromCalibration) {
  const test::TempDir dir("spattn_blasst_method");
  const fs::path p = write_calibration(dir);
  auto m = make_method("blasst:sparsity=0.6,calib=" + p.string());
  const Calibration c = load_calibration(p.string());
  EXPECT_DOUBLE_EQ(run_lambda(*m, 4096), c.lambda_for(0.6, 4096));
  EXPECT_DOUBLE_EQ(run_lambda(*m, 65536), c.lambda_for(0.6, 65536));
  EXPECT_DOUBLE_EQ(run_lambda(*make_method("blasst:lambda=0.001"), 4096), 0.001);
}

// The runner's decode (--attn-decode): the same spec forms, the threshold from the file's law
// at the cache's length each step, the file's order; bad forms are named Errors.
TEST(BlasstSpec, DecodeThresholdFromCalibration) {
  const test::TempDir dir("spattn_blasst_method");
  const fs::path p = write_calibration(dir);
  const Calibration c = load_calibration(p.string());
  // One decoded row through the runner's backend at each layer and length: bit for bit the
  // decode kernel at the law's threshold for that length, in the file's order.
  const auto decoded = [](const std::string& spec, int64_t layer, int64_t length,
                          const DecodeOptions* expected) {
    const Tensor q = test::random_tensor(DType::f32, 2, 1, 64, 7);
    const Tensor k = test::random_tensor(DType::f32, 2, length, 64, 8);
    const Tensor v = test::random_tensor(DType::f32, 2, length, 64, 9);
    const PackedKV kv = PackedKV::pack(k, v);
    Tensor out(DType::f32, 2, 1, 64), want(DType::f32, 2, 1, 64);
    BackendContext ctx;
    ctx.layer = layer;
    LayerCall c;
    c.q = q, c.out = out;
    c.pos0 = length - 1;
    c.packed = &kv;
    c.opt.threads = 1;
    DecodeReads reads;
    make_decode_backend(parse_method_spec(spec), ctx)->decode(c, reads);
    AttnOptions a;
    a.threads = 1;
    a.q_start = length - 1;
    attention_decode(q, kv, want, a, *expected);
    EXPECT_EQ(test::diff(out, want).max_abs, 0.0)
        << spec << " layer " << layer << " length " << length;
    EXPECT_EQ(reads.keys_read, 2 * length);
  };
  for (int64_t layer : {0, 5})  // a file with one law serves every layer
    for (int64_t length : {1024, 4096}) {
      DecodeOptions o;
      o.lambda = c.lambda_for(0.6, length);
      o.order = c.order;
      decoded("blasst:sparsity=0.6,calib=" + p.string(), layer, length, &o);
    }
  DecodeOptions fixed;
  fixed.lambda = 0.01;
  fixed.order = BlasstOrder::local_first;  // the runner's default order
  decoded("blasst:lambda=0.01", 3, 1024, &fixed);
  const auto& expect_error = test::expect_decode_spec_error;
  const std::string calib = p.string();
  expect_error("blasst", "exactly one");
  expect_error("blasst:lambda=0.1,sparsity=0.5,calib=" + calib, "exactly one");
  expect_error("blasst:sparsity=0.5", "calib=FILE");
  expect_error("blasst:sparsity=0.5,calib=/nonexistent/c.json", "/nonexistent/c.json");
  expect_error("blasst:lambda=0.1,calib=" + calib, "calib=FILE goes with sparsity");
  expect_error("blasst:sparsity=1,calib=" + calib, "sparsity");
  const char* other = c.order == BlasstOrder::local_first ? "in_order" : "local_first";
  expect_error("blasst:sparsity=0.5,calib=" + calib + ",order=" + other, "calibrated for order");
}

// lambda = 0 computes every tile: the output is exact attention, prefill and decode alike;
// `dense` at q_len <= 16 takes the decode kernel and must agree too.
TEST(BlasstMethod, LambdaZeroIsExact) {
  for (int64_t q_len : {256, 5}) {
    const Tensor q = test::random_tensor(DType::f32, 4, q_len, 64, 1);
    const Tensor k = test::random_tensor(DType::f32, 2, 256, 64, 2);
    const Tensor v = test::random_tensor(DType::f32, 2, 256, 64, 3);
    Tensor ref(DType::f32, 4, q_len, 64);
    attention_reference(q, k, v, ref);
    for (const char* spec : {"blasst:lambda=0", "dense"}) {
      Tensor out(DType::f32, 4, q_len, 64);
      const Stats st = make_method(spec)->run(q, k, v, out, {}).stats;
      EXPECT_LT(test::diff(out, ref).max_abs, 1e-4) << spec << " q_len " << q_len;
      EXPECT_EQ(st.tiles_skipped, 0) << spec;
    }
  }
}

// A positive lambda skips tiles, reports them per head (prefill path), and stays close to exact
// attention.
TEST(BlasstMethod, SkipsAndReportsPerHead) {
  WorkloadConfig cfg;  // structured scores: iid random ones leave nothing below lambda
  cfg.seq = 1024, cfg.heads = 2, cfg.dim = 64;
  const Workload w = make_workload(cfg);
  const Tensor &q = w.q, &k = w.k, &v = w.v;
  Tensor ref(DType::f32, 2, 1024, 64), out(DType::f32, 2, 1024, 64);
  attention_reference(q, k, v, ref);
  auto m = make_method("blasst:lambda=0.01");
  const MethodReport rep = m->run(q, k, v, out, {});
  const Stats& st = rep.stats;
  EXPECT_EQ(rep.path, KernelPath::prefill);
  EXPECT_EQ(rep.mask, nullptr);
  EXPECT_EQ(rep.extras.at("lambda"), 0.01);
  EXPECT_GT(st.tiles_skipped, 0);
  const double skipped = double(st.tiles_skipped) / double(st.tiles_visited);
  EXPECT_NEAR(rep.extras.at("skipped_fraction"), skipped, 1e-12);
  // Prefill: every q head has the same number of query tiles, so the heads' mean is the total.
  const std::vector<double>& heads = rep.per_head.at("head_skipped");
  ASSERT_EQ(heads.size(), 2u);
  EXPECT_NEAR(0.5 * (heads[0] + heads[1]), skipped, 1e-12);
  // Skipped tiles hold at most lambda of a row's max weight each: the output moves little.
  EXPECT_LT(test::diff(out, ref).rel_l2, 0.1);
  // Recall sees the skipped tiles: below 1, and exactly what the kept entries hold.
  const Recall r = attention_recall(q, k, *rep.coverage, {});
  EXPECT_LT(r.mean, 1.0);
  EXPECT_GT(r.mean, 0.9);
}

// The same at q_len <= 16, where the decode kernel runs: skips per q head, and the coverage is
// the kernel's record (exact), not every causal key.
TEST(BlasstMethod, DecodeSkipsAndReportsPerHead) {
  WorkloadConfig cfg;
  cfg.seq = 4096, cfg.q_len = 4, cfg.heads = 4, cfg.kv_heads = 2, cfg.dim = 64;
  const Workload w = make_workload(cfg);
  Tensor out(DType::f32, 4, 4, 64);
  auto m = make_method("blasst:lambda=0.03");
  const MethodReport rep = m->run(w.q, w.k, w.v, out, {});
  const Stats& st = rep.stats;
  EXPECT_EQ(rep.path, KernelPath::decode);
  ASSERT_GT(st.tiles_skipped, 0);
  EXPECT_NEAR(rep.extras.at("skipped_fraction"),
              double(st.tiles_skipped) / double(st.tiles_visited), 1e-12);
  // One skip decision per GQA group (2 q heads here): its q heads report the same fraction.
  const std::vector<double>& heads = rep.per_head.at("head_skipped");
  ASSERT_EQ(heads.size(), 4u);
  EXPECT_EQ(heads[0], heads[1]);
  EXPECT_EQ(heads[2], heads[3]);
  EXPECT_GT(heads[0] + heads[2], 0.0);
  const Recall r = attention_recall(w.q, w.k, *rep.coverage, {});
  EXPECT_LT(r.mean, 1.0);
  EXPECT_GT(r.mean, 0.9);
}

}  // namespace
}  // namespace spattn
