// MInference's token-level vertical-slash form on the GPU (cuda::attention_vertical_slash, the
// flash kernel's key pieces: src/cuda/flash_fwd.cuh, src/cuda/attention.cu) against the CPU
// kernel over the same index: output and LSE, the entries computed (exactly the index's
// coverage under each row's causal limit), and the method on device tensors against the
// method on the host. Both dtypes, head dims 64 and 128, GQA, odd lengths, queries at the end
// of a longer cache, ranges off the 64-key grid, more than 64 columns (several gathered
// pieces), extreme logits. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "device_buffers.hpp"
#include "cuda/device_buffers.hpp"
#include "cuda/text_workload.hpp"
#include "spattn/attention.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/method.hpp"
#include "spattn/sparse_attention.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

using test::DeviceFloats;
using test::DeviceTensor;
using test::Input;
using test::make_input;
using test::out_tol;

struct Case {
  int64_t vertical, slash;
  bool text;
  DType t;
  int64_t d, hq, hkv, lq, lkv;
  float q_scale;
};

// The entries the index computes: each row's coverage below its causal limit.
int64_t covered_entries(const VerticalSlashIndex& index, int64_t q_len, int64_t kv_len) {
  const auto cov = vertical_slash_coverage(index, q_len, kv_len);
  std::vector<KeyRange> ranges;
  int64_t n = 0;
  for (int64_t h = 0; h < index.heads; ++h)
    for (int64_t r = 0; r < q_len; ++r) {
      ranges.clear();
      cov->row_ranges(h, r, ranges);
      const int64_t lim = query_position(r, q_len, kv_len) + 1;
      for (const KeyRange& k : ranges) n += std::max<int64_t>(0, std::min(k.end, lim) - k.begin);
    }
  return n;
}

TEST(CudaVerticalSlash, KernelMatchesTheCpuKernelOnTheSameIndex) {
  SKIP_WITHOUT_GPU();
  const std::vector<Case> cases = {
      {1000, 2048, true, DType::bf16, 128, 4, 2, 3000, 3000, 1.0f},  // MInference's sizes
      {100, 200, true, DType::bf16, 128, 4, 2, 2500, 2500, 1.0f},
      {150, 90, false, DType::f16, 64, 6, 2, 1333, 2001, 1.0f},  // q at the end of the cache
      {70, 300, false, DType::bf16, 64, 2, 1, 777, 777, 8.0f},   // extreme logits
      {40, 40, false, DType::f16, 128, 2, 2, 65, 400, 1.0f},     // one tile and a row
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.vertical) + "/" + std::to_string(c.slash) + " " +
                 dtype_name(c.t) + " d" + std::to_string(c.d) + " " + std::to_string(c.lq) + "x" +
                 std::to_string(c.lkv));
    const Input in = make_input(c.text, c.t, c.d, c.hq, c.hkv, c.lq, c.lkv, c.q_scale, 4);
    AttnOptions opt;
    opt.causal = true;
    VerticalSlashConfig cfg;
    cfg.vertical_size = c.vertical, cfg.slash_size = c.slash;
    const VerticalSlashIndex index = vertical_slash_index(in.q, in.k, cfg, opt);
    Tensor ref(DType::f32, c.hq, c.lq, c.d);
    std::vector<float> lse_ref(size_t(c.hq * c.lq));
    attention_vertical_slash(in.q, in.k, in.v, ref, index, opt, lse_ref.data());
    DeviceTensor dq(in.q), dk(in.k), dv(in.v), dout(c.t, c.hq, c.lq, c.d);
    DeviceFloats dlse(size_t(c.hq * c.lq));
    Stats st;
    cuda::attention_vertical_slash(dq.view, dk.view, dv.view, dout.view, index, opt, dlse.ptr, &st);
    const Tensor got = cuda::to_host(dout.view);
    const test::Diff d = test::diff(got.view(), ref.view());
    EXPECT_LE(d.max_abs, out_tol(c.t) * std::max(1.0, d.ref_max));
    const std::vector<float> lse = dlse.to_host();
    int64_t lse_bad = 0;
    for (size_t i = 0; i < lse.size(); ++i)
      lse_bad += !(std::abs(lse[i] - lse_ref[i]) <= 2e-3f * std::max(1.0f, std::abs(lse_ref[i])));
    EXPECT_EQ(lse_bad, 0) << "LSE rows off";
    EXPECT_EQ(st.score_entries, covered_entries(index, c.lq, c.lkv)) << "entries computed";
    EXPECT_LT(st.score_entries, st.causal_entries) << "the index must skip keys";
  }
}

TEST(CudaVerticalSlash, MethodOnTheDeviceIsTheMethodOnTheHost) {
  SKIP_WITHOUT_GPU();
  const Input in = make_input(true, DType::bf16, 128, 4, 2, 2000, 2000, 1.0f, 6);
  AttnOptions opt;
  opt.causal = true;
  const auto m = make_method("vertical_slash:vertical=200,slash=300");
  Tensor host_out(DType::f32, 4, 2000, 128);
  const MethodReport hr = m->run(in.q, in.k, in.v, host_out, opt);
  DeviceTensor dq(in.q), dk(in.k), dv(in.v), dout(DType::bf16, 4, 2000, 128);
  const MethodReport dr = m->run(dq.view, dk.view, dv.view, dout.view, opt);
  ASSERT_TRUE(hr.mask && dr.mask && dr.coverage);
  EXPECT_EQ(dr.mask->blocks, hr.mask->blocks) << "the same index from the same data";
  EXPECT_EQ(dr.extras.count("mask_host_ms"), 1u);
  const Tensor got = cuda::to_host(dout.view);
  const test::Diff d = test::diff(got.view(), host_out.view());
  EXPECT_LE(d.max_abs, out_tol(DType::bf16) * std::max(1.0, d.ref_max));
}

TEST(CudaVerticalSlash, UnsupportedInputsAreNamedErrors) {
  SKIP_WITHOUT_GPU();
  const Tensor x = test::random_tensor(DType::bf16, 2, 300, 64, 1);
  DeviceTensor d(x), o(DType::bf16, 2, 300, 64);
  auto error_of = [&](const std::string& spec, bool causal) -> std::string {
    AttnOptions opt;
    opt.causal = causal;
    try {
      make_method(spec)->run(d.view, d.view, d.view, o.view, opt);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of("vertical_slash:tile_rows=128", true).find("tile_rows=128"),
            std::string::npos);
  EXPECT_NE(error_of("vertical_slash", false).find("causal"), std::string::npos);
}

}  // namespace
}  // namespace spattn
