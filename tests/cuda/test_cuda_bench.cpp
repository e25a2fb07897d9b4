// What `spattn bench --device cuda` and the Python package stand on: the public device helpers
// of spattn/cuda.hpp (DeviceTensor, DeviceGuard, EventTimer), a method run on a caller's stream
// (AttnOptions::stream), and run_bench_cuda's rows judged against the host. Every test skips
// without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "assets.hpp"
#include "device_buffers.hpp"
#include "spattn/bench.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/metrics.hpp"
#include "spattn/workload.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

TEST(CudaHelpers, DeviceTensorRoundTripsAndMoves) {
  SKIP_WITHOUT_GPU();
  const Tensor x = test::random_tensor(DType::f32, 3, 37, 64, 5);
  cuda::DeviceTensor d = cuda::DeviceTensor::upload(x, DType::bf16);
  EXPECT_TRUE(cuda::is_device_pointer(d.view().data));
  const Tensor back = cuda::to_host(d);
  const Tensor want = Tensor::copy_of(x, DType::bf16);  // the upload converts on the host
  ASSERT_EQ(back.nbytes(), want.nbytes());
  EXPECT_EQ(std::memcmp(back.data(), want.data(), want.nbytes()), 0);
  cuda::DeviceTensor moved = std::move(d);
  EXPECT_EQ(d.view().data, nullptr);
  EXPECT_EQ(std::memcmp(cuda::to_host(moved).data(), want.data(), want.nbytes()), 0);
  // A fresh one is zero-filled; a device source is refused.
  const Tensor zeros = cuda::to_host(cuda::DeviceTensor(DType::f16, 2, 5, 64));
  for (int64_t i = 0; i < zeros.numel(); ++i) EXPECT_EQ(zeros.data_as<uint16_t>()[i], 0);
  EXPECT_THROW(cuda::DeviceTensor::upload(moved, DType::bf16), Error);
}

TEST(CudaHelpers, DeviceGuardRestoresTheCurrentDevice) {
  SKIP_WITHOUT_GPU();
  const int n = cuda::device_count();
  const int before = cuda::current_device();
  {
    cuda::DeviceGuard g(n - 1);
    EXPECT_EQ(cuda::current_device(), n - 1);
  }
  EXPECT_EQ(cuda::current_device(), before);
  EXPECT_THROW(cuda::DeviceGuard{n}, Error);
  EXPECT_THROW(cuda::set_device(-1), Error);
  EXPECT_EQ(cuda::current_device(), before);
}

// A method run on a caller's stream (what Python passes: torch's current stream) gives the
// default stream's bits, and the events around it see its time.
TEST(CudaHelpers, MethodsRunOnTheCallersStream) {
  SKIP_WITHOUT_GPU();
  WorkloadConfig c;
  c.seq = 700, c.heads = 4, c.kv_heads = 2, c.dim = 128, c.dtype = DType::bf16, c.seed = 4;
  const Workload w = make_workload(c);
  const cuda::DeviceTensor q = cuda::DeviceTensor::upload(w.q, DType::bf16),
                           k = cuda::DeviceTensor::upload(w.k, DType::bf16),
                           v = cuda::DeviceTensor::upload(w.v, DType::bf16);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  // xattention, mean_pool and flexprefill estimate on the device: deterministic (no atomics in
  // a sum).
  for (const std::string spec :
       {"dense", "blasst:lambda=0.01", "a_shape:sink=64,local=256", "xattention:min_share=0.1",
        "mean_pool:topk=3", "mean_pool:topp=0.9", "flexprefill:min_budget=256"}) {
    const auto m = make_method(spec);
    cuda::DeviceTensor o1(DType::bf16, 4, 700, 128), o2(DType::bf16, 4, 700, 128);
    AttnOptions opt;
    m->run(q, k, v, o1, opt);
    opt.stream = s;
    cuda::EventTimer t;
    t.start(s);
    m->run(q, k, v, o2, opt);
    t.stop(s);
    EXPECT_GT(t.ms(), 0.0) << spec;
    cuda::synchronize(s);
    const Tensor a = cuda::to_host(o1), b = cuda::to_host(o2, s);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << spec;
  }
  cudaStreamDestroy(s);
}

TEST(CudaBench, RowsJudgedAgainstDenseAndTheHost) {
  SKIP_WITHOUT_GPU();
  WorkloadConfig c;
  c.seq = 1200, c.heads = 4, c.kv_heads = 2, c.dim = 64, c.seed = 8;
  const Workload w = make_workload(c);  // f32: the bench converts to the device dtype
  const BenchMethods methods = make_bench_methods(
      {"blasst:lambda=0.01", "a_shape:sink=64,local=256"}, {"chunked_h2o"}, true);
  AttnOptions opt;
  opt.threads = 2;
  BenchOptions bo;
  bo.repeat = 3;
  const BenchRun run = run_bench_cuda(methods, w.q, w.k, w.v, opt, bo, DType::f16);
  EXPECT_NE(run.device.find("sm_"), std::string::npos) << run.device;
  ASSERT_EQ(run.results.size(), 4u);
  const BenchResult& dense = run.results[0];
  EXPECT_EQ(dense.spec, "dense");
  EXPECT_EQ(dense.run_ms.size(), 3u);
  EXPECT_DOUBLE_EQ(dense.speedup, 1.0);
  EXPECT_EQ(dense.error.rel_l2, 0.0);
  EXPECT_NEAR(dense.recall.mean, 1.0, 1e-9);
  EXPECT_LT(run.dense_exact_error.rel_l2, 5e-3);  // f16 output rounding
  EXPECT_GT(dense.dense_equiv_tflops(run.dim), 0.0);
  // a_shape: the recall of its mask, computed on the host as the CPU bench does.
  const BenchResult& ashape = run.results[2];
  ASSERT_TRUE(ashape.unavailable.empty()) << ashape.unavailable;
  const auto m = make_method("a_shape:sink=64,local=256");
  Tensor host_out(DType::f32, 4, 1200, 64);
  const Tensor hq = Tensor::copy_of(w.q, DType::f16), hk = Tensor::copy_of(w.k, DType::f16),
               hv = Tensor::copy_of(w.v, DType::f16);
  AttnOptions host_opt = opt;
  const MethodReport hr = m->run(hq, hk, hv, host_out, host_opt);
  EXPECT_NEAR(ashape.recall.mean, attention_recall(hq, hk, *hr.coverage, host_opt).mean, 1e-9);
  EXPECT_GT(ashape.report.stats.sparsity(), 0.1);
  EXPECT_GT(ashape.error.rel_l2, 0.0);  // against dense: a sparse output differs
  EXPECT_EQ(ashape.report.stats.causal_entries, dense.report.stats.causal_entries);
  EXPECT_GT(run.results[1].report.extras.at("skipped_fraction"), 0.0);
  // chunked_h2o has no GPU path: a row that says so, never timed.
  const BenchResult& none = run.results[3];
  EXPECT_NE(none.unavailable.find("no GPU path"), std::string::npos) << none.unavailable;
  EXPECT_TRUE(none.run_ms.empty());
  const auto j = nlohmann::json::parse(bench_json(run, {}));
  EXPECT_EQ(j["device"], run.device);
  EXPECT_EQ(j["config"]["device"], "cuda");
  EXPECT_EQ(j["results"][3]["unavailable"], none.unavailable);
  EXPECT_EQ(j["results"][2]["speedup"].get<double>(), ashape.speedup);
  // Bad input: f32 on the device.
  EXPECT_THROW(run_bench_cuda(methods, w.q, w.k, w.v, opt, bo, DType::f32), Error);
}

// The device estimates reach `spattn bench --device cuda`: timed rows, estimated on the device.
TEST(CudaBench, DeviceEstimatesReachTheBench) {
  SKIP_WITHOUT_GPU();
  WorkloadConfig c;
  c.seq = 1200, c.heads = 4, c.kv_heads = 2, c.dim = 128, c.seed = 8;
  const Workload w = make_workload(c);
  const BenchMethods methods = make_bench_methods(
      {"xattention:min_share=0.1", "mean_pool:topk=3", "flexprefill:min_budget=256"}, {}, true);
  AttnOptions opt;
  opt.threads = 2;
  BenchOptions bo;
  bo.repeat = 2;
  const BenchRun run = run_bench_cuda(methods, w.q, w.k, w.v, opt, bo, DType::bf16);
  ASSERT_EQ(run.results.size(), 4u);
  for (size_t i = 1; i < 4; ++i) {
    const BenchResult& r = run.results[i];
    ASSERT_TRUE(r.unavailable.empty()) << r.spec << ": " << r.unavailable;
    EXPECT_EQ(r.run_ms.size(), 2u) << r.spec;
    EXPECT_EQ(r.report.extras.count("mask_device"), 1u) << r.spec;
    EXPECT_GT(r.report.stats.sparsity(), 0.0) << r.spec;
    EXPECT_EQ(r.report.stats.causal_entries, run.results[0].report.stats.causal_entries);
  }
}

}  // namespace
}  // namespace spattn
