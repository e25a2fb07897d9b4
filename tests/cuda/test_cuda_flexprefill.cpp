// FlexPrefill on the GPU (src/cuda/flexprefill.cu) against its twin on the host
// (src/methods/flexprefill.cpp, the same rules in f32 products): each head's pattern choice
// and distance, its vertical blocks and slash bands, the lists (few differ: the device's last
// queries' scores are tensor-core products, summed in another order), and the output and LSE
// against the CPU's block-sparse attention over the device's own mask. Every budget (gamma
// over the flattened map or per query block, topk, min_share), both patterns forced by tau,
// both dtypes, head dims 64 and 128, GQA, blocks of 64 to 256, odd lengths, queries at the end
// of a longer cache, fewer queries than a block, extreme logits. Every test skips without a
// GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "device_buffers.hpp"
#include "expect_device.hpp"
#include "cuda/device_buffers.hpp"
#include "cuda/text_workload.hpp"
#include "spattn/attention.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
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
  std::string spec;
  bool text;
  DType t;
  int64_t d, hq, hkv, lq, lkv;
  float q_scale;
};

std::vector<Case> cases() {
  return {
      {"flexprefill", true, DType::bf16, 128, 4, 2, 3000, 3000, 1.0f},  // the paper's defaults
      {"flexprefill:tau=1", true, DType::bf16, 128, 4, 2, 2100, 2100, 1.0f},  // all query-aware
      {"flexprefill:tau=0,min_budget=256", false, DType::f16, 64, 4, 2, 1900, 1900, 8.0f},
      {"flexprefill:qa=block,tau=0.3,min_budget=256", false, DType::f16, 64, 6, 2, 1500, 2000,
       1.0f},
      {"flexprefill:topk=3,min_budget=0,block=64", true, DType::bf16, 128, 4, 2, 1777, 1777, 1.0f},
      {"flexprefill:min_share=0.02,block=256,tau=0.2", false, DType::bf16, 128, 2, 1, 2500, 2600,
       1.0f},
      {"flexprefill:min_budget=128", false, DType::bf16, 64, 2, 1, 100, 700, 1.0f},  // q < block
  };
}

std::string name(const Case& c) {
  return c.spec + (c.text ? " text " : " random ") + dtype_name(c.t) + " d" + std::to_string(c.d) +
         " " + std::to_string(c.hq) + "/" + std::to_string(c.hkv) + " " + std::to_string(c.lq) +
         "x" + std::to_string(c.lkv);
}

const std::vector<double>& series(const MethodReport& r, const char* key) {
  static const std::vector<double> none;
  const auto it = r.per_head.find(key);
  EXPECT_NE(it, r.per_head.end()) << "no per-head " << key;
  return it == r.per_head.end() ? none : it->second;
}

TEST(CudaFlexPrefill, ChoicesAndListsAreTheHostsAndOutputIsExact) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : cases()) {
    SCOPED_TRACE(name(c));
    const Input in = make_input(c.text, c.t, c.d, c.hq, c.hkv, c.lq, c.lkv, c.q_scale, 5);
    AttnOptions opt;
    opt.causal = true;
    const auto m = make_method(c.spec);
    DeviceTensor dq(in.q), dk(in.k), dv(in.v), dout(c.t, c.hq, c.lq, c.d);
    DeviceFloats dlse(size_t(c.hq * c.lq));
    const MethodReport dr = m->run(dq.view, dk.view, dv.view, dout.view, opt, dlse.ptr);
    ASSERT_TRUE(dr.mask && dr.coverage);
    EXPECT_EQ(dr.extras.count("mask_device"), 1u) << "the estimate ran on the device";
    Tensor host_out(DType::f32, c.hq, c.lq, c.d);
    const MethodReport hr = m->run(in.q, in.k, in.v, host_out, opt);
    ASSERT_TRUE(hr.mask);

    // The pattern per head: the same distance to rounding, the same choice away from tau.
    const std::vector<double>&djs = series(dr, "js_distance"), &hjs = series(hr, "js_distance");
    const std::vector<double>&dqa = series(dr, "query_aware"), &hqa = series(hr, "query_aware");
    const std::vector<double>&dnv = series(dr, "vertical_blocks"),
          &hnv = series(hr, "vertical_blocks");
    const std::vector<double>&dns = series(dr, "slash_bands"), &hns = series(hr, "slash_bands");
    ASSERT_EQ(djs.size(), size_t(c.hq));
    ASSERT_EQ(hjs.size(), size_t(c.hq));
    const double tau = hr.extras.at("tau");
    int64_t counts_differ = 0;
    for (int64_t h = 0; h < c.hq; ++h) {
      EXPECT_NEAR(djs[size_t(h)], hjs[size_t(h)], 1e-3) << "head " << h;
      if (std::abs(hjs[size_t(h)] - tau) > 1e-3) {
        EXPECT_EQ(dqa[size_t(h)], hqa[size_t(h)]) << "head " << h << "'s pattern";
      }
      counts_differ += dnv[size_t(h)] != hnv[size_t(h)] || dns[size_t(h)] != hns[size_t(h)];
    }
    EXPECT_LE(counts_differ, std::max<int64_t>(1, c.hq / 4)) << "heads keeping other counts";

    // The lists: few differ from the host's (a near tie at a budget's edge).
    const BlockMask& gm = *dr.mask;
    const int64_t nq = gm.n_qb(), lists = c.hq * nq;
    int64_t differ = 0, kept = 0;
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t qb = 0; qb < nq; ++qb) {
        const auto a = gm.row(h, qb), b = hr.mask->row(h, qb);
        differ += !std::equal(a.begin(), a.end(), b.begin(), b.end());
        kept += int64_t(a.size());
      }
    EXPECT_GT(kept, 0);
    EXPECT_LE(differ, std::max<int64_t>(2, lists / 25))
        << "lists unlike the CPU method's, of " << lists;

    // The output over the device's mask against the host's block-sparse attention over it.
    test::expect_block_sparse_output(in, opt, gm, dout, dlse, c.t, dr.stats);
  }
}

// The same input twice gives the same mask and the same bits: every sum on the device runs in
// a fixed order.
TEST(CudaFlexPrefill, RepeatsBitForBit) {
  SKIP_WITHOUT_GPU();
  for (const std::string spec : {"flexprefill:tau=1", "flexprefill:tau=0,block=64"}) {
    SCOPED_TRACE(spec);
    const Input in = make_input(false, DType::bf16, 128, 4, 2, 1333, 1400, 1.0f, 3);
    AttnOptions opt;
    opt.causal = true;
    const auto m = make_method(spec);
    DeviceTensor dq(in.q), dk(in.k), dv(in.v), o1(DType::bf16, 4, 1333, 128),
        o2(DType::bf16, 4, 1333, 128);
    const MethodReport a = m->run(dq.view, dk.view, dv.view, o1.view, opt);
    const MethodReport b = m->run(dq.view, dk.view, dv.view, o2.view, opt);
    ASSERT_TRUE(a.mask && b.mask);
    EXPECT_NO_THROW(a.mask->validate());
    EXPECT_EQ(a.mask->blocks, b.mask->blocks);
    EXPECT_EQ(a.per_head, b.per_head);
    const Tensor x = o1.to_host(), y = o2.to_host();
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0) << "the same bits twice";
  }
}

// What the device path does not take is a named Error before any kernel runs.
TEST(CudaFlexPrefill, UnsupportedInputsAreNamedErrors) {
  SKIP_WITHOUT_GPU();
  EXPECT_NE(test::method_error_on_device("flexprefill:block=96", true).find("multiples of 64"),
            std::string::npos);
  EXPECT_NE(test::method_error_on_device("flexprefill", false).find("causal"), std::string::npos);
}

}  // namespace
}  // namespace spattn
