// MMInference on the GPU (src/methods/mminference.cpp's run_cuda): A-shape, vertical-slash and
// grid heads run on the device, each row against exact attention over the keys the device's
// coverage names (the vertical-slash index is estimated on the device, so it may differ from
// the host's by a near tie), the A-shape and grid heads' coverage against the host's (the same
// mask; the same stride search on the same values); Q / 2D boundary heads likewise, on a
// layout of two modalities. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "device_buffers.hpp"
#include "cuda/device_buffers.hpp"
#include "cuda/text_workload.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/mminference.hpp"
#include "spattn/modality.hpp"
#include "temp_dir.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

using test::DeviceFloats;
using test::DeviceTensor;
using test::Input;
using test::make_input;

MMPlan plan_of(std::vector<MMHeadPlan> heads) {
  MMPlan p;
  p.heads = int64_t(heads.size());
  p.layers.push_back(std::move(heads));
  return p;
}

TEST(CudaMMInference, AShapeVerticalSlashAndGridHeadsRunOnTheDevice) {
  SKIP_WITHOUT_GPU();
  MMHeadPlan a, vs, vsk, grid;
  a.pattern = MMPattern::a_shape, a.sink = 128, a.local = 512;
  vs.pattern = MMPattern::vertical_slash, vs.vertical = 200, vs.slash_size = 300;
  vsk = vs, vsk.boundary = MMBoundary::k;
  grid.pattern = MMPattern::grid, grid.max_stride = 256;
  const test::TempDir dir("spattn_cuda_mm");
  const std::string path = dir.file("plan.json");
  save_mm_plan(plan_of({a, vs, vsk, grid}), path);
  const auto m = make_method("mminference:plan=" + path);
  const Input in = make_input(true, DType::bf16, 128, 4, 2, 2000, 2000, 1.0f, 3);
  AttnOptions opt;
  opt.causal = true;
  DeviceTensor dq(in.q), dk(in.k), dv(in.v), dout(DType::bf16, 4, 2000, 128);
  DeviceFloats dlse(size_t(4 * 2000));
  const MethodReport dr = m->run(dq.view, dk.view, dv.view, dout.view, opt, dlse.ptr);
  ASSERT_TRUE(dr.coverage);
  ASSERT_EQ(dr.per_head.at("pattern").size(), 4u);
  Tensor host_out(DType::f32, 4, 2000, 128);
  const MethodReport hr = m->run(in.q, in.k, in.v, host_out, opt);
  // Each row against exact attention over the keys the device's coverage names.
  const Tensor got = cuda::to_host(dout.view);
  int64_t bad = 0;
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 2000; i += 97) {
      const auto keys = test::coverage_keys(*dr.coverage, h, i);
      const auto want = test::row_over_keys(in.q, in.k, in.v, h, i, keys);
      for (int64_t c = 0; c < 128; ++c)
        bad += !(std::abs(got.view().get(h, i, c) - want[size_t(c)]) <=
                 2e-2 * std::max(1.0, std::abs(want[size_t(c)])));
      if (h == 0 || h == 3) {  // A-shape and grid: the host's coverage, key for key
        EXPECT_EQ(keys, test::coverage_keys(*hr.coverage, h, i)) << h << " " << i;
      }
    }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(dr.stats.score_entries, 0);
  EXPECT_LT(dr.stats.score_entries, dr.stats.causal_entries);
}

// Q-boundary and 2D-boundary heads on a text-vision-text layout: each row against exact
// attention over the device's coverage; the A-shape pieces' coverage is the host's (static), the
// vertical-slash pieces' estimated on the device (a near tie may differ).
TEST(CudaMMInference, BoundaryHeadsRunOnTheDevice) {
  SKIP_WITHOUT_GPU();
  MMHeadPlan qa, qvs, twod_a, twod_vs;
  qa.pattern = MMPattern::a_shape, qa.sink = 64, qa.local = 256, qa.boundary = MMBoundary::q;
  qvs.pattern = MMPattern::vertical_slash, qvs.vertical = 100, qvs.slash_size = 150;
  qvs.boundary = MMBoundary::q;
  twod_a = qa, twod_a.boundary = MMBoundary::two_d;
  twod_vs = qvs, twod_vs.boundary = MMBoundary::two_d;
  const test::TempDir dir("spattn_cuda_mm");
  const std::string path = dir.file("plan.json");
  save_mm_plan(plan_of({qa, qvs, twod_a, twod_vs}), path);
  const auto m = make_method("mminference:plan=" + path);
  const int64_t n = 1500;
  const Input in = make_input(false, DType::bf16, 64, 4, 2, n, n, 1.0f, 5);
  auto layout = std::make_shared<ModalityLayout>();
  for (int64_t i = 0; i < n; ++i)
    layout->ids.push_back(i >= 400 && i < 1100 ? kVisionModality : kTextModality);
  AttnOptions opt;
  opt.causal = true;
  opt.modality = layout;
  DeviceTensor dq(in.q), dk(in.k), dv(in.v), dout(DType::bf16, 4, n, 64);
  DeviceFloats dlse(size_t(4 * n));
  const MethodReport dr = m->run(dq.view, dk.view, dv.view, dout.view, opt, dlse.ptr);
  ASSERT_TRUE(dr.coverage);
  Tensor host_out(DType::f32, 4, n, 64);
  const MethodReport hr = m->run(in.q, in.k, in.v, host_out, opt);
  const Tensor got = cuda::to_host(dout.view);
  int64_t bad = 0;
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < n; i += 61) {
      const auto keys = test::coverage_keys(*dr.coverage, h, i);
      if (h == 0 || h == 2) {  // A-shape pieces: the host's keys
        EXPECT_EQ(keys, test::coverage_keys(*hr.coverage, h, i)) << h << " " << i;
      }
      const auto want = test::row_over_keys(in.q, in.k, in.v, h, i, keys);
      for (int64_t c = 0; c < 64; ++c)
        bad += !(std::abs(got.view().get(h, i, c) - want[size_t(c)]) <=
                 2e-2 * std::max(1.0, std::abs(want[size_t(c)])));
    }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(dr.stats.score_entries, 0);
  EXPECT_LT(dr.stats.score_entries, dr.stats.causal_entries);
}

}  // namespace
}  // namespace spattn
