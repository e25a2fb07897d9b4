// spattn/cuda.hpp where there is no GPU (every CI machine): each entry point answers with a
// named Error, whether the build holds the CUDA backend (then: host memory where device memory
// is needed) or not (then: built without CUDA). tests/cuda/ runs the kernels where a GPU is.
#include <gtest/gtest.h>

#include <string>
#include <vector>

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
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is present: tests/cuda covers it";
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

}  // namespace
}  // namespace spattn
