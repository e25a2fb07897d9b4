// The GPU decode (cuda::attention_decode) against its twins on the host: the double reference
// at lambda 0 (dense decode: both dtypes, head dims 64 and 128, GQA groups whose rows fill one
// chunk, several, or one head each, q_len 1..16, one split and several, causal and not,
// extreme logits), and the CPU's BLASST decode on the text workload (the same tiles visited
// and skipped, counted where a margin sits within rounding of ln(lambda), the same entries
// and outputs), both orders and batches 1..4; the method API's decode path; bad input.
// Every test skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "assets.hpp"
#include "device_buffers.hpp"
#include "cuda/device_buffers.hpp"
#include "spattn/attention.hpp"
#include "spattn/cuda.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/workload.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

using test::DeviceFloats;
using test::DeviceTensor;

double out_tol(DType t) { return t == DType::bf16 ? 1.6e-2 : 2.5e-3; }

int lse_rows_off(const std::vector<float>& lse, const std::vector<float>& ref) {
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    bad += !(std::abs(lse[i] - ref[i]) <= 2e-3 * std::max(1.0f, std::abs(ref[i])));
  return bad;
}

struct Case {
  DType t;
  int64_t d, hq, hkv, lq, lkv;
  bool causal;
  float q_sigma = 1.0f;
};

TEST(CudaDecode, DenseMatchesDoubleReference) {
  SKIP_WITHOUT_GPU();
  std::vector<Case> cs;
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128})
      for (bool causal : {true, false}) {
        cs.push_back({t, d, 8, 2, 1, 1, causal});      // one key
        cs.push_back({t, d, 32, 8, 1, 4097, causal});  // three splits, a partial last tile
        cs.push_back({t, d, 4, 4, 16, 300, causal});   // MHA, 16 queries
        cs.push_back({t, d, 8, 2, 3, 2500, causal});   // 12 rows a chunk
        cs.push_back({t, d, 16, 2, 4, 700, causal});   // 32 rows: two chunks of 2 heads
        cs.push_back({t, d, 10, 1, 15, 150, causal});  // chunks of one head, 15 rows
      }
  cs.push_back({DType::bf16, 128, 8, 2, 2, 3000, true, 60.0f});  // scores in the thousands
  uint64_t seed = 100;
  for (const Case& c : cs) {
    const std::string what = std::string(dtype_name(c.t)) + " d" + std::to_string(c.d) + " " +
                             std::to_string(c.hq) + "/" + std::to_string(c.hkv) + " " +
                             std::to_string(c.lq) + "x" + std::to_string(c.lkv) +
                             (c.causal ? " causal" : " full");
    const Tensor q = test::random_tensor(c.t, c.hq, c.lq, c.d, seed++, c.q_sigma);
    const Tensor k = test::random_tensor(c.t, c.hkv, c.lkv, c.d, seed++);
    const Tensor v = test::random_tensor(c.t, c.hkv, c.lkv, c.d, seed++);
    AttnOptions opt;
    opt.causal = c.causal;
    Tensor ref(DType::f32, c.hq, c.lq, c.d);
    std::vector<float> lse_ref(size_t(c.hq * c.lq));
    attention_reference(q, k, v, ref, opt, lse_ref.data());
    DeviceTensor dq(q), dk(k), dv(v), dout(c.t, c.hq, c.lq, c.d);
    DeviceFloats dlse(size_t(c.hq * c.lq));
    Stats st;
    cuda::attention_decode(dq.view, dk.view, dv.view, dout.view, opt, {}, dlse.ptr, &st);
    const test::Diff d = test::diff(dout.to_host().view(), ref.view());
    EXPECT_LE(d.max_abs, out_tol(c.t) * std::max(1.0, d.ref_max)) << what;
    EXPECT_EQ(lse_rows_off(dlse.to_host(), lse_ref), 0) << what;
    Stats cpu;
    Tensor cpu_out(DType::f32, c.hq, c.lq, c.d);
    attention_decode(q, k, v, cpu_out, opt, {}, nullptr, &cpu);
    EXPECT_EQ(st.score_entries, cpu.score_entries) << what;
    EXPECT_EQ(st.causal_entries, cpu.causal_entries) << what;
    EXPECT_EQ(st.tiles_skipped, 0) << what;
    if (c.hq / c.hkv * c.lq <= 16) {
      EXPECT_EQ(st.tiles_visited, cpu.tiles_visited) << what;
    }
  }
}

// BLASST's decode: the GPU and the CPU visit and skip the same tiles (row chunks agree:
// group x q_len <= 16); a decision may differ only where a margin sits within rounding of
// ln(lambda): counted, and few.
TEST(CudaDecode, BlasstSkipsTheCpuTiles) {
  SKIP_WITHOUT_GPU();
  int64_t total_differ = 0, total_visited = 0;
  for (int64_t d : {64, 128})
    for (int64_t lq : {1, 4}) {
      WorkloadConfig wc;
      wc.kind = WorkloadKind::text;
      wc.seq = 9000;  // five splits
      wc.q_len = lq;
      wc.heads = 8;
      wc.kv_heads = 2;
      wc.dim = d;
      wc.dtype = DType::bf16;
      wc.seed = 5 + uint64_t(d + lq);
      const Workload w = make_workload(wc);
      DeviceTensor dq(w.q), dk(w.k), dv(w.v);
      for (BlasstOrder order : {BlasstOrder::in_order, BlasstOrder::local_first})
        for (int64_t batch : {1, 4})
          for (double lambda : {1e-3, 1e-2}) {
            DecodeOptions dopt;
            dopt.lambda = lambda, dopt.batch = batch, dopt.order = order;
            AttnOptions opt;
            opt.bf16_dot = false;
            Tensor ref(DType::f32, 8, lq, d);
            std::vector<float> lse_ref(size_t(8 * lq));
            SkipStats cpu;
            cpu.record_tiles = true;
            Stats cst;
            attention_decode(w.q, w.k, w.v, ref, opt, dopt, lse_ref.data(), &cst, &cpu);
            DeviceTensor dout(DType::bf16, 8, lq, d);
            DeviceFloats dlse(size_t(8 * lq));
            SkipStats gpu;
            gpu.record_tiles = true;
            Stats gst;
            cuda::attention_decode(dq.view, dk.view, dv.view, dout.view, opt, dopt, dlse.ptr, &gst,
                                   &gpu);
            const std::string what = std::string(blasst_order_name(order)) + " d" +
                                     std::to_string(d) + " q_len " + std::to_string(lq) +
                                     " batch " + std::to_string(batch) + " lambda " +
                                     std::to_string(lambda);
            EXPECT_EQ(gpu.visited, cpu.visited) << what;
            EXPECT_EQ(gst.tiles_visited, cst.tiles_visited) << what;
            ASSERT_EQ(gpu.skipped_tiles.size(), cpu.skipped_tiles.size()) << what;
            int64_t differ = 0;
            for (size_t i = 0; i < cpu.skipped_tiles.size(); ++i) {
              EXPECT_TRUE(std::is_sorted(gpu.skipped_tiles[i].begin(), gpu.skipped_tiles[i].end()));
              const std::set<int32_t> a(cpu.skipped_tiles[i].begin(), cpu.skipped_tiles[i].end());
              const std::set<int32_t> b(gpu.skipped_tiles[i].begin(), gpu.skipped_tiles[i].end());
              for (int32_t x : a) differ += !b.count(x);
              for (int32_t x : b) differ += !a.count(x);
            }
            std::printf("[ DECODE  ] %s: skipped %lld of %lld tiles (CPU %lld), %lld differ\n",
                        what.c_str(), (long long)gst.tiles_skipped, (long long)gst.tiles_visited,
                        (long long)cst.tiles_skipped, (long long)differ);
            EXPECT_GT(cst.tiles_skipped, 0) << what;
            total_differ += differ, total_visited += cst.tiles_visited;
            if (differ == 0) {
              EXPECT_EQ(gst.tiles_skipped, cst.tiles_skipped) << what;
              EXPECT_EQ(gst.score_entries, cst.score_entries) << what;
              const test::Diff df = test::diff(dout.to_host().view(), ref.view());
              EXPECT_LE(df.max_abs, out_tol(DType::bf16) * std::max(1.0, df.ref_max)) << what;
              EXPECT_EQ(lse_rows_off(dlse.to_host(), lse_ref), 0) << what;
            }
          }
    }
  // Decisions are per (kv head, split) and tile; the counts compare per q head (x 4).
  EXPECT_LE(total_differ, std::max<int64_t>(8, total_visited / 100));
}

// The method API: q_len <= 16 takes the decode kernel on the device as on the host.
TEST(CudaDecode, MethodsTakeTheDecodePath) {
  SKIP_WITHOUT_GPU();
  WorkloadConfig wc;
  wc.kind = WorkloadKind::text;
  wc.seq = 5000;
  wc.q_len = 2;
  wc.heads = 8;
  wc.kv_heads = 2;
  wc.dtype = DType::bf16;
  wc.seed = 3;
  const Workload w = make_workload(wc);
  DeviceTensor dq(w.q), dk(w.k), dv(w.v);
  for (const std::string spec : {"dense", "blasst:lambda=0.01", "blasst:lambda=0.01,batch=2"}) {
    const auto m = make_method(spec);
    AttnOptions opt;
    opt.bf16_dot = false;
    Tensor host_out(DType::f32, 8, 2, 128);
    const MethodReport hr = m->run(w.q, w.k, w.v, host_out, opt);
    DeviceTensor dout(DType::bf16, 8, 2, 128);
    const MethodReport dr = m->run(dq.view, dk.view, dv.view, dout.view, opt);
    EXPECT_EQ(dr.path, KernelPath::decode) << spec;
    EXPECT_EQ(dr.path, hr.path) << spec;
    const test::Diff d = test::diff(cuda::to_host(dout.view).view(), host_out.view());
    EXPECT_LE(d.max_abs, 1.6e-2 * std::max(1.0, d.ref_max)) << spec;
    if (spec != "dense") {
      EXPECT_NEAR(dr.extras.at("skipped_fraction"), hr.extras.at("skipped_fraction"), 0.02) << spec;
      EXPECT_GT(dr.extras.at("skipped_fraction"), 0.0) << spec;
    }
  }
  // The CPU takes batches up to 64; the GPU's batch is one tile a warp.
  DeviceTensor dout(DType::bf16, 8, 2, 128);
  EXPECT_THROW(
      make_method("blasst:lambda=0.01,batch=8")->run(dq.view, dk.view, dv.view, dout.view, {}),
      Error);
}

TEST(CudaDecode, BadInputIsANamedError) {
  SKIP_WITHOUT_GPU();
  const Tensor q = test::random_tensor(DType::bf16, 4, 17, 64, 1);
  const Tensor k = test::random_tensor(DType::bf16, 2, 100, 64, 2);
  DeviceTensor dq(q), dk(k), dv(k), dout(DType::bf16, 4, 17, 64);
  auto fails = [](auto&& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error, expected one saying " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  fails([&] { cuda::attention_decode(dq.view, dk.view, dv.view, dout.view); }, "q_len");
  const Tensor q1 = test::random_tensor(DType::bf16, 4, 1, 64, 3);
  DeviceTensor dq1(q1), dout1(DType::bf16, 4, 1, 64);
  DecodeOptions big;
  big.batch = 5;
  fails([&] { cuda::attention_decode(dq1.view, dk.view, dv.view, dout1.view, {}, big); }, "batch");
  DecodeOptions bad_lambda;
  bad_lambda.lambda = 2.0;
  fails([&] { cuda::attention_decode(dq1.view, dk.view, dv.view, dout1.view, {}, bad_lambda); },
        "lambda");
  fails([&] { cuda::attention_decode(q1.view(), dk.view, dv.view, dout1.view); },
        "not in CUDA device memory");
  AttnOptions full;
  full.causal = false;
  const TensorView empty_k = TensorView::hsd(dk.ptr, DType::bf16, 2, 0, 64);
  fails([&] { cuda::attention_decode(dq1.view, empty_k, empty_k, dout1.view, full); }, "no key");
}

}  // namespace
}  // namespace spattn
