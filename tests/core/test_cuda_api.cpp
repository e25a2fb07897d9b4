// spattn/cuda.hpp where there is no GPU (every CI machine): each entry point answers with a
// named Error, whether the build holds the CUDA backend (then: host memory where device memory
// is needed) or not (then: built without CUDA). tests/cuda/ runs the kernels where a GPU is.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "assets.hpp"
#include "spattn/bench.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

void expect_named_error(void (*call)(const Tensor&), const Tensor& x) {
  try {
    call(x);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda "), std::string::npos) << what;
    EXPECT_TRUE(what.find(cuda::built() ? "host tensor" : "built without CUDA") !=
                std::string::npos)
        << what;
  }
}

TEST(CudaApi, WithoutAGpuEveryCallIsANamedError) {
  if (cuda::device_count() > 0)
    SPATTN_SKIP_NOT_APPLICABLE("a GPU is present: tests/cuda covers it");
  const Tensor x = test::random_tensor(DType::bf16, 2, 10, 64, 1);
  expect_named_error([](const Tensor& t) { cuda::attention_dense(t, t, t, t); }, x);
  expect_named_error([](const Tensor& t) { cuda::attention_blasst(t, t, t, t, 0.01); }, x);
  expect_named_error(
      [](const Tensor& t) {
        const Tensor q = test::random_tensor(DType::bf16, 2, 1, 64, 2), o(DType::bf16, 2, 1, 64);
        cuda::attention_decode(q, t, t, o);
      },
      x);
  expect_named_error(
      [](const Tensor& t) {
        cuda::attention_block_sparse(t, t, t, t, BlockMask::full(2, 10, 10, 64, 64, true));
      },
      x);
  if (!cuda::built()) {
    std::vector<float> l(20);
    EXPECT_THROW(cuda::merge_attention(x, l.data(), x, l.data(), x, l.data()), Error);
  }
  EXPECT_THROW(cuda::device_description(0), Error);
}

// The helpers bench --device cuda and the Python package stand on, likewise.
TEST(CudaApi, WithoutAGpuTheDeviceHelpersAreNamedErrors) {
  if (cuda::device_count() > 0)
    SPATTN_SKIP_NOT_APPLICABLE("a GPU is present: tests/cuda covers it");
  const std::string why = cuda::built() ? "no CUDA device" : "built without CUDA";
  auto expect = [&](auto call, const char* name) {
    try {
      call();
      ADD_FAILURE() << name << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << name << ": " << e.what();
    }
  };
  const Tensor x = test::random_tensor(DType::f32, 2, 10, 64, 1);
  expect([] { cuda::DeviceGuard g(0); }, "DeviceGuard");
  expect([] { cuda::current_device(); }, "current_device");
  expect([] { cuda::set_device(0); }, "set_device");
  expect([] { cuda::DeviceTensor t(DType::bf16, 2, 10, 64); }, "DeviceTensor");
  expect([&] { cuda::DeviceTensor::upload(x, DType::bf16); }, "DeviceTensor::upload");
  const BenchMethods m = make_bench_methods({}, {"a_shape"}, true);
  AttnOptions opt;
  opt.threads = 1;
  expect([&] { run_bench_cuda(m, x, x, x, opt, {}, DType::bf16); }, "run_bench_cuda");
  expect([] { cuda::EventTimer t; }, "EventTimer");
}

}  // namespace
}  // namespace spattn
