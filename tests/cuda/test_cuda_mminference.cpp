// MMInference on the GPU (src/methods/mminference.cpp's run_cuda): A-shape, vertical-slash and
// grid heads run on the device, each row against exact attention over the keys the device's
// coverage names (the vertical-slash index is estimated on the device, so it may differ from
// the host's by a near tie), the A-shape and grid heads' coverage against the host's (the same
// mask; the same stride search on the same values); Q / 2D boundary heads are named Errors
// before anything runs. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "device_buffers.hpp"
#include "cuda/device_buffers.hpp"
#include "cuda/text_workload.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/mminference.hpp"
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

TEST(CudaMMInference, BoundaryHeadsAreNamedErrors) {
  SKIP_WITHOUT_GPU();
  const Input in = make_input(false, DType::bf16, 64, 2, 1, 300, 300, 1.0f, 1);
  DeviceTensor dq(in.q), dk(in.k), dv(in.v), dout(DType::bf16, 2, 300, 64);
  AttnOptions opt;
  opt.causal = true;
  MMHeadPlan a, qb, twod;
  a.pattern = MMPattern::a_shape;
  qb.pattern = MMPattern::vertical_slash, qb.boundary = MMBoundary::q;
  twod.pattern = MMPattern::a_shape, twod.boundary = MMBoundary::two_d;
  const test::TempDir dir("spattn_cuda_mm");
  for (const auto& [second, what] : {std::pair{qb, std::string("boundary 'q'")},
                                     std::pair{twod, std::string("boundary '2d'")}}) {
    const std::string path = dir.file("plan.json");
    save_mm_plan(plan_of({a, second}), path);
    try {
      make_method("mminference:plan=" + path)->run(dq.view, dk.view, dv.view, dout.view, opt);
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace spattn
