// MMInference's grid head on the GPU (src/cuda/grid.cu) and the kernel form under it, row groups
// gathered against gathered keys with their own positions (cuda::attention_gathered_groups, the
// flash kernel's kRows + kGather variant with scattered output): the groups against exact
// attention over the keys each row may see, rows in no group untouched; the grid head against
// the CPU's attention_grid with the same lines (output, LSE, entries); the stride search with
// its A_hat on the device against the host's. Both dtypes, head dims 64
// and 128, GQA, odd lengths, groups of more than 64 rows and keys, positions out of key order.
// Every test skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "device_buffers.hpp"
#include "expect_device.hpp"
#include "cuda/device_buffers.hpp"
#include "cuda/text_workload.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/grid.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

using test::DeviceFloats;
using test::DeviceTensor;
using test::Input;
using test::make_input;
using test::out_tol;

TEST(CudaGrid, GatheredGroupsAreExactAttentionOverTheirKeys) {
  SKIP_WITHOUT_GPU();
  for (const DType t : {DType::bf16, DType::f16}) {
    for (const int64_t d : {int64_t(64), int64_t(128)}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " d" + std::to_string(d));
      const int64_t lq = 333, lk = 517;
      const Input in = make_input(false, t, d, 1, 1, lq, lk, 1.0f, 7);
      // Three groups: every third row from 0, every third from 1 (past 64 rows each), and a few
      // rows; row 2 mod 3 but those few in no group. Keys: a residue class with positions
      // shifted past a band (as the grid's), all keys, a short list.
      std::vector<cuda::GatheredGroup> groups(3);
      for (int64_t r = 0; r < lq; r += 3) groups[0].rows.push_back(r);
      for (int64_t r = 1; r < lq; r += 3) groups[1].rows.push_back(r);
      groups[2].rows = {5, 8, 200, 332};
      for (int64_t j = 2; j < lk; j += 5)
        groups[0].keys.push_back(j), groups[0].positions.push_back(std::min(lk - 1, j + 70));
      for (int64_t j = lk - 1; j >= 0; --j)
        groups[1].keys.push_back(j), groups[1].positions.push_back(j);  // descending order
      groups[2].keys = {0, 1, 400, 516}, groups[2].positions = {0, 1, 400, 516};
      DeviceTensor dq(in.q), dk(in.k), dv(in.v), dout(t, 1, lq, d);
      DeviceFloats dlse(std::vector<float>(size_t(lq), 7.0f));  // rows in no group keep it
      AttnOptions opt;
      opt.causal = true;
      Stats st;
      cuda::attention_gathered_groups(dq.view, dk.view, dv.view, groups, dout.view, opt, dlse.ptr,
                                      &st);
      const Tensor got = cuda::to_host(dout.view);
      const std::vector<float> lse = dlse.to_host();
      std::vector<int> group_of(size_t(lq), -1);
      for (int g = 0; g < 3; ++g)
        for (int64_t r : groups[size_t(g)].rows) group_of[size_t(r)] = g;
      int64_t bad = 0, entries = 0;
      for (int64_t r = 0; r < lq; ++r) {
        if (group_of[size_t(r)] < 0) {
          bad += lse[size_t(r)] != 7.0f;  // untouched
          for (int64_t c = 0; c < d; ++c) bad += got.view().get(0, r, c) != 0.0f;
          continue;
        }
        const cuda::GatheredGroup& g = groups[size_t(group_of[size_t(r)])];
        const int64_t pos = query_position(r, lq, lk);
        std::vector<int64_t> keys;
        for (size_t i = 0; i < g.keys.size(); ++i)
          if (g.positions[i] <= pos) keys.push_back(g.keys[i]);
        std::sort(keys.begin(), keys.end());
        entries += int64_t(keys.size());
        double ref_lse = 0;
        const auto want = test::row_over_keys(in.q, in.k, in.v, 0, r, keys, 0, &ref_lse);
        for (int64_t c = 0; c < d; ++c)
          bad += !(std::abs(got.view().get(0, r, c) - want[size_t(c)]) <=
                   out_tol(t) * std::max(1.0, std::abs(want[size_t(c)])));
        bad += keys.empty()
                   ? lse[size_t(r)] != -std::numeric_limits<float>::infinity()
                   : !(std::abs(lse[size_t(r)] - ref_lse) <= 2e-3 * std::max(1.0, ref_lse));
      }
      EXPECT_EQ(bad, 0);
      EXPECT_EQ(st.score_entries, entries);
    }
  }
}

// Algorithm 1's search with its A_hat on the device picks the host's stride and phase (a head
// may differ where two strides' scores tie within rounding: at most one here).
TEST(CudaGrid, DeviceSearchPicksTheHostsLines) {
  SKIP_WITHOUT_GPU();
  for (const bool text : {true, false}) {
    SCOPED_TRACE(text ? "text" : "random");
    const Input in = make_input(text, DType::bf16, 128, 4, 2, 2048, 2048, 1.0f, 11);
    GridConfig cfg;
    cfg.max_stride = 256;
    AttnOptions opt;
    opt.causal = true;
    const std::vector<GridLines> want = grid_estimate(in.q, in.k, cfg, opt);
    DeviceTensor dq(in.q), dk(in.k);
    const std::vector<GridLines> got = cuda::grid_estimate(dq.view, dk.view, cfg, opt);
    ASSERT_EQ(got.size(), want.size());
    int64_t differ = 0;
    for (size_t h = 0; h < got.size(); ++h)
      differ += got[h].stride != want[h].stride || got[h].phase != want[h].phase;
    EXPECT_LE(differ, 1);
  }
}

TEST(CudaGrid, GridHeadMatchesTheCpuGrid) {
  SKIP_WITHOUT_GPU();
  struct Case {
    DType t;
    int64_t d, hq, hkv, lq, lk;
    std::vector<GridLines> lines;
  };
  const std::vector<Case> cases = {
      {DType::bf16, 128, 4, 2, 1000, 1000, {{16, 3}, {16, 3}, {64, 0}, {8, 7}}},
      {DType::f16, 64, 2, 1, 640, 1280, {{32, 5}, {128, 100}}},  // queries at the end
      {DType::bf16, 64, 2, 2, 257, 257, {{1, 0}, {257, 256}}},   // extreme strides
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.t)) + " " + std::to_string(c.lq) + "x" +
                 std::to_string(c.lk));
    const Input in = make_input(false, c.t, c.d, c.hq, c.hkv, c.lq, c.lk, 1.0f, 9);
    GridConfig cfg;
    AttnOptions opt;
    opt.causal = true;
    Tensor ref(DType::f32, c.hq, c.lq, c.d);
    std::vector<float> lse_ref(size_t(c.hq * c.lq));
    Stats ref_st;
    attention_grid(in.q, in.k, in.v, ref, c.lines, cfg, opt, lse_ref.data(), &ref_st);
    DeviceTensor dq(in.q), dk(in.k), dv(in.v), dout(c.t, c.hq, c.lq, c.d);
    DeviceFloats dlse(size_t(c.hq * c.lq));
    Stats st;
    cuda::attention_grid(dq.view, dk.view, dv.view, dout.view, c.lines, cfg, opt, dlse.ptr, &st);
    test::expect_device_output(dout, dlse, ref, lse_ref, c.t, 2.0);  // two passes, merged
    EXPECT_EQ(st.score_entries, ref_st.score_entries);
    EXPECT_EQ(st.causal_entries, ref_st.causal_entries);
  }
}

}  // namespace
}  // namespace spattn
