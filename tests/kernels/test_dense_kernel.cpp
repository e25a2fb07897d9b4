// The dense kernel against the exact reference, on every SIMD target this build dispatches to.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include "hwy/targets.h"
#include "kernels/flash_common.hpp"
#include "spattn/attention.hpp"
#include "spattn/error.hpp"
#include "targets.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

using test::diff;
using test::random_tensor;

struct Case {
  DType dtype;
  int64_t hq, hkv, lq, lk, d;
  bool causal;
  float sigma = 1.0f;
};

std::string name(const Case& c) {
  return std::string(dtype_name(c.dtype)) + " hq" + std::to_string(c.hq) + " hkv" +
         std::to_string(c.hkv) + " lq" + std::to_string(c.lq) + " lk" + std::to_string(c.lk) +
         " d" + std::to_string(c.d) + (c.causal ? " causal" : " full");
}

// The kernel's error budget: f32 operands ~1e-6; bf16 dot products round P to bf16 (2^-9).
double tolerance(DType t) {
  return t == DType::bf16 && kernels::bf16_dot_supported() ? 2e-2 : 2e-4;
}

void check_case(const Case& c, uint64_t seed = 1) {
  SCOPED_TRACE(name(c) + " target " + simd_target_name());
  Tensor q = random_tensor(c.dtype, c.hq, c.lq, c.d, seed, c.sigma);
  Tensor k = random_tensor(c.dtype, c.hkv, c.lk, c.d, seed + 1, c.sigma);
  Tensor v = random_tensor(c.dtype, c.hkv, c.lk, c.d, seed + 2);
  Tensor out(DType::f32, c.hq, c.lq, c.d), ref(DType::f32, c.hq, c.lq, c.d);
  std::vector<float> lse(size_t(c.hq * c.lq)), lse_ref(size_t(c.hq * c.lq));
  AttnOptions opt;
  opt.causal = c.causal;
  Stats st;
  attention_dense(q, k, v, out, opt, lse.data(), &st);
  attention_reference(q, k, v, ref, opt, lse_ref.data());
  const test::Diff dd = diff(out, ref);
  EXPECT_LE(dd.max_abs, tolerance(c.dtype) * std::max(1.0, dd.ref_max));
  for (size_t i = 0; i < lse.size(); ++i) {
    ASSERT_TRUE(std::isfinite(lse[i])) << i;
    ASSERT_NEAR(lse[i], lse_ref[i], 1e-3 * std::max(1.0f, std::abs(lse_ref[i]))) << "row " << i;
  }
  EXPECT_EQ(st.score_entries, c.hq * attention_entries(c.lq, c.lk, c.causal));
  EXPECT_EQ(st.causal_entries, st.score_entries);
  EXPECT_EQ(st.tiles_skipped, 0);
}

using test::for_each_target;

TEST(DenseKernel, MatchesReferenceAcrossDtypesShapesTargets) {
  const std::vector<Case> cases = {
      {DType::f32, 2, 2, 1, 1, 64, true},
      {DType::f32, 2, 1, 63, 63, 64, true},
      {DType::f32, 4, 2, 65, 65, 128, true},
      {DType::f32, 2, 2, 65, 65, 80, false},
      {DType::f32, 3, 1, 17, 130, 128, true},
      {DType::f32, 2, 2, 70, 200, 64, false},
      {DType::bf16, 2, 2, 63, 63, 128, true},
      {DType::bf16, 4, 2, 65, 129, 80, true},
      {DType::bf16, 2, 1, 65, 65, 64, false},
      {DType::f16, 2, 2, 65, 65, 128, true},
      {DType::f16, 4, 1, 33, 100, 80, true},
      {DType::f16, 2, 2, 1, 77, 64, false},
      {DType::f32, 1, 1, 1, 300, 128, true},
      {DType::bf16, 2, 2, 1, 1, 128, true},
      {DType::f32, 1, 1, 200, 200, 8, true},
      {DType::f32, 1, 1, 100, 100, 256, true},
      {DType::f32, 2, 2, 129, 129, 72, true},
      // The widest head dim (kMaxHeadDim: DeepSeek's absorbed latent attention), 8 q heads a
      // kv head as there.
      {DType::f32, 8, 1, 70, 70, kMaxHeadDim, true},
      {DType::bf16, 8, 1, 65, 130, kMaxHeadDim, true},
  };
  for_each_target([&] {
    for (const Case& c : cases) check_case(c);
  });
}

TEST(DenseKernelSlow, Length4097) {
  for (DType t : {DType::f32, DType::bf16}) check_case({t, 2, 1, 4097, 4097, 64, true});
  check_case({DType::f16, 1, 1, 4097, 4097, 128, false});
}

TEST(DenseKernel, ExtremeLogitsStayFiniteAndCorrect) {
  // Scaled logits up to about +-1e4: q and k of norm ~ 300 each at d = 128.
  for_each_target([&] {
    check_case({DType::f32, 2, 2, 65, 65, 128, true, 50.0f}, 7);
    check_case({DType::f32, 2, 1, 40, 130, 64, false, 60.0f}, 8);
  });
  Tensor q = random_tensor(DType::f32, 2, 65, 128, 7, 50.0f);
  Tensor k = random_tensor(DType::f32, 2, 65, 128, 8, 50.0f);
  float max_logit = 0;
  for (int64_t i = 0; i < 65; ++i)
    for (int64_t j = 0; j < 65; ++j) {
      float s = 0;
      for (int64_t c = 0; c < 128; ++c) s += q.view().get(0, i, c) * k.view().get(0, j, c);
      max_logit = std::max(max_logit, std::abs(s) / std::sqrt(128.0f));
    }
  EXPECT_GT(max_logit, 8e3f);  // the case above really reaches the extreme range
}

TEST(DenseKernel, StridedSeqMajorViews) {
  // [seq, heads, dim] buffers read in place, and a bf16 output view.
  const int64_t h = 4, hk = 2, l = 70, d = 64;
  Tensor qb = random_tensor(DType::f32, 1, l, h * d, 11);
  Tensor kb = random_tensor(DType::f32, 1, l, hk * d, 12);
  Tensor vb = random_tensor(DType::f32, 1, l, hk * d, 13);
  TensorView q = TensorView::shd(qb.data(), DType::f32, h, l, d);
  TensorView k = TensorView::shd(kb.data(), DType::f32, hk, l, d);
  TensorView v = TensorView::shd(vb.data(), DType::f32, hk, l, d);
  Tensor out(DType::bf16, h, l, d), ref(DType::f32, h, l, d);
  attention_dense(q, k, v, out, {});
  attention_reference(q, k, v, ref, {});
  EXPECT_LE(diff(out, ref).max_abs, 1e-2);
}

TEST(DenseKernel, BitwiseDeterministic) {
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor q = random_tensor(t, 2, 700, 128, 21), k = random_tensor(t, 2, 700, 128, 22),
           v = random_tensor(t, 2, 700, 128, 23);
    for (int threads : {1, 2, 3}) {
      AttnOptions opt;
      opt.threads = threads;
      Tensor a(DType::f32, 2, 700, 128), b(DType::f32, 2, 700, 128);
      attention_dense(q, k, v, a, opt);
      attention_dense(q, k, v, b, opt);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << threads;
    }
  }
}

TEST(DenseKernel, ObserverReportsEveryCausalTileLse) {
  const int64_t l = 150, d = 64;
  Tensor q = random_tensor(DType::f32, 2, l, d, 31), k = random_tensor(DType::f32, 1, l, d, 32),
         v = random_tensor(DType::f32, 1, l, d, 33);
  // Pre-sized: observe() runs on worker threads, each (head, row) on one thread only.
  struct Grid : BlockLseObserver {
    int64_t l = 0;
    std::vector<std::vector<float>> lse;  // [head * l + row] -> per key block
    void observe(int64_t h, int64_t row0, int64_t rows, int64_t kb, const float* x) override {
      for (int64_t r = 0; r < rows; ++r) {
        auto& v = lse[size_t(h * l + row0 + r)];
        ASSERT_EQ(int64_t(v.size()), kb);  // increasing key-block order, none missing
        v.push_back(x[r]);
      }
    }
  } grid;
  grid.l = l;
  grid.lse.resize(size_t(2 * l));
  Tensor out(DType::f32, 2, l, d);
  std::vector<float> row_lse(2 * l);
  attention_dense_observed(q, k, v, out, {}, row_lse.data(), grid);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < l; ++i) {
      const auto& blocks = grid.lse[size_t(h * l + i)];
      // Every block holding a causal key is reported; later ones only as -inf.
      ASSERT_GE(int64_t(blocks.size()), i / kKeyBlock + 1);
      double total = 0;
      for (size_t b = 0; b < blocks.size(); ++b) {
        // exact block LSE over causal keys of block b
        double m = -INFINITY, s = 0;
        std::vector<double> x;
        for (int64_t j = int64_t(b) * kKeyBlock;
             j < std::min<int64_t>(l, (b + 1) * kKeyBlock) && j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(q.view().get(h, i, c)) * k.view().get(0, j, c);
          x.push_back(dot / 8.0);
          m = std::max(m, dot / 8.0);
        }
        for (double e : x) s += std::exp(e - m);
        const double want = x.empty() ? -INFINITY : m + std::log(s);
        if (x.empty())
          EXPECT_EQ(blocks[b], -INFINITY);
        else
          EXPECT_NEAR(blocks[b], want, 1e-4);
        if (!x.empty()) total += std::exp(want - row_lse[size_t(h * l + i)]);
      }
      EXPECT_NEAR(total, 1.0, 1e-4);  // block masses of a row sum to one
    }
}

TEST(DenseKernel, BadInputRaisesError) {
  Tensor q = random_tensor(DType::f32, 2, 8, 64, 1), k = random_tensor(DType::f32, 2, 8, 64, 2);
  Tensor out(DType::f32, 2, 8, 64);
  auto expect_error = [&](const TensorView& q_, const TensorView& k_, const TensorView& v_,
                          const TensorView& o_, AttnOptions opt, const char* what) {
    try {
      attention_dense(q_, k_, v_, o_, opt);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  Tensor k3 = random_tensor(DType::f32, 3, 8, 64, 3);
  expect_error(q, k3, k3, out, {}, "multiple of kv heads");
  Tensor kd = random_tensor(DType::f32, 2, 8, 32, 3);
  expect_error(q, kd, kd, out, {}, "head dims must match");
  Tensor kb = random_tensor(DType::bf16, 2, 8, 64, 3);
  expect_error(q, kb, kb, out, {}, "dtypes must match");
  Tensor q0(DType::f32, 2, 0, 64), o0(DType::f32, 2, 0, 64);
  expect_error(q0, k, k, o0, {}, "length must be > 0");
  TensorView null_q = q.view();
  null_q.data = nullptr;
  expect_error(null_q, k, k, out, {}, "null");
  Tensor qlong = random_tensor(DType::f32, 2, 9, 64, 4), olong(DType::f32, 2, 9, 64);
  expect_error(qlong, k, k, olong, {}, "q_len <= kv_len");
  Tensor d12 = random_tensor(DType::f32, 2, 8, 12, 4);
  expect_error(d12, d12, d12, d12, {}, "multiple of 8");
  Tensor wrong_out(DType::f32, 2, 8, 32);
  expect_error(q, k, k, wrong_out, {}, "out shape");
  Tensor qn = random_tensor(DType::f32, 2, 8, 64, 5);
  qn.data_as<float>()[100] = std::numeric_limits<float>::quiet_NaN();
  expect_error(qn, k, k, out, {}, "non-finite");
  Tensor kn = random_tensor(DType::bf16, 2, 8, 64, 5), qb = random_tensor(DType::bf16, 2, 8, 64, 6);
  kn.data_as<uint16_t>()[7] = 0x7fc0;  // bf16 NaN
  expect_error(qb, kn, kn, out, {}, "non-finite");
  AttnOptions bad_scale;
  bad_scale.scale = -1;
  expect_error(q, k, k, out, bad_scale, "scale");
}

}  // namespace
}  // namespace spattn
