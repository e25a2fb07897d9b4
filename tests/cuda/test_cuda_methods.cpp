// One method API on either device: make_method(spec)->run() on device tensors takes the GPU
// path (dense, blasst, the block-mask methods) and matches the same method on the host; a
// method without a GPU path says so. Every test skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "assets.hpp"
#include "cuda/device_buffers.hpp"
#include "cuda/text_workload.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/workload.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

using test::DeviceTensor;

TEST(CudaMethods, DeviceRunMatchesHostRun) {
  if (cuda::device_count() == 0) SPATTN_SKIP_NOT_APPLICABLE("no CUDA device");
  const Workload w = test::text_workload(1500, 128, 11);
  DeviceTensor dq(w.q), dk(w.k), dv(w.v);
  for (const std::string spec :
       {"dense", "blasst:lambda=0.01", "a_shape", "mean_pool", "xattention", "flexprefill"}) {
    const auto m = make_method(spec);
    AttnOptions opt;
    opt.bf16_dot = false;
    Tensor host_out(DType::f32, 4, 1500, 128);
    const MethodReport hr = m->run(w.q, w.k, w.v, host_out, opt);
    DeviceTensor dout(DType::bf16, 4, 1500, 128);
    const MethodReport dr = m->run(dq.view, dk.view, dv.view, dout.view, opt);
    const Tensor got = cuda::to_host(dout.view);
    const test::Diff d = test::diff(got.view(), host_out.view());
    bool same_mask = true;
    if (hr.mask) {
      ASSERT_TRUE(dr.mask) << spec;
      EXPECT_EQ(dr.dense_shortcut.empty(),
                hr.dense_shortcut.empty() || dr.extras.count("mask_device"))
          << spec << ": the estimate's dense shortcut is the host's alone";
      if (dr.extras.count("mask_device")) {
        // Estimated on the device (test_cuda_estimates.cpp checks its rule): few lists differ,
        // by a tie at the budget's edge, or because the host's estimate kept every block.
        same_mask = dr.mask->blocks == hr.mask->blocks;
        int64_t differ = 0, lists = dr.mask->heads * dr.mask->n_qb();
        for (int64_t h = 0; h < dr.mask->heads; ++h)
          for (int64_t qb = 0; qb < dr.mask->n_qb(); ++qb) {
            const auto a = dr.mask->row(h, qb), b = hr.mask->row(h, qb);
            differ += !std::equal(a.begin(), a.end(), b.begin(), b.end());
          }
        if (hr.dense_shortcut.empty()) {
          EXPECT_LE(differ, std::max<int64_t>(1, lists / 25)) << spec;
        }
      } else {
        EXPECT_EQ(dr.mask->blocks, hr.mask->blocks) << spec << ": the same mask from the same data";
        if (dr.dense_shortcut.empty()) {
          EXPECT_GT(dr.extras.at("mask_host_ms"), 0.0) << spec;
        }
      }
    }
    // (Where a tie flipped a block, its query block's rows differ: test_cuda_estimates.cpp
    // compares those against the host over the device's own mask.)
    if (same_mask) {
      EXPECT_LE(d.max_abs, 1.6e-2 * std::max(1.0, d.ref_max)) << spec;
    }
    if (spec.rfind("blasst", 0) == 0) {
      // Skip decisions may differ where a margin sits within rounding of the threshold, or
      // where the 128-row blocks' local-first order differs from the 64-row CPU tiles'
      // (counted by tests/cuda/test_cuda_attention.cpp): few.
      EXPECT_NEAR(dr.extras.at("skipped_fraction"), hr.extras.at("skipped_fraction"), 0.01) << spec;
      EXPECT_GT(dr.extras.at("skipped_fraction"), 0.0) << spec;
    } else if (same_mask && dr.dense_shortcut == hr.dense_shortcut) {
      EXPECT_EQ(dr.stats.score_entries, hr.stats.score_entries) << spec;
    }
    ASSERT_TRUE(dr.coverage) << spec;
  }
}

TEST(CudaMethods, AMethodWithoutAGpuPathSaysSo) {
  if (cuda::device_count() == 0) SPATTN_SKIP_NOT_APPLICABLE("no CUDA device");
  const Tensor x = test::random_tensor(DType::bf16, 2, 100, 64, 1);
  DeviceTensor d(x), o(DType::bf16, 2, 100, 64);
  try {
    make_method("chunked_h2o")->run(d.view, d.view, d.view, o.view, {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU path"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spattn
