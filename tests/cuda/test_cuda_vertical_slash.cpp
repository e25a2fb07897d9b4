// MInference's token-level vertical-slash form on the GPU (cuda::attention_vertical_slash, the
// flash kernel's key pieces: src/cuda/flash_fwd.cuh, src/cuda/attention.cu) against the CPU
// kernel over the same index: output and LSE, the entries computed (exactly the index's
// coverage under each row's causal limit); MInference's estimate on the device
// (cuda::vertical_slash_index, src/cuda/vertical_slash.cu) against the host's, and its
// per-modality form (MMInference's boundary pieces); and the method
// on device tensors against the method on the host. Both dtypes, head dims 64 and 128, GQA, odd lengths, queries at the end
// of a longer cache, ranges off the 64-key grid, more than 64 columns (several gathered
// pieces), extreme logits. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "device_buffers.hpp"
#include "expect_device.hpp"
#include "cuda/device_buffers.hpp"
#include "cuda/text_workload.hpp"
#include "spattn/attention.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/method.hpp"
#include "spattn/modality.hpp"
#include "spattn/modality_boundary.hpp"
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
    test::expect_device_output(dout, dlse, ref, lse_ref, c.t);
    EXPECT_EQ(st.score_entries, covered_entries(index, c.lq, c.lkv)) << "entries computed";
    EXPECT_LT(st.score_entries, st.causal_entries) << "the index must skip keys";
  }
}

// Entries of `got` not in `want` (both ascending).
int64_t missing(const std::vector<int64_t>& want, const std::vector<int64_t>& got) {
  std::vector<int64_t> d;
  std::set_difference(want.begin(), want.end(), got.begin(), got.end(), std::back_inserter(d));
  return int64_t(d.size());
}

// The device's estimate against the host's on the same input: the same sizes, the forced
// columns and diagonals, and few others differ (a near tie at the cut: the device's scores are
// tensor-core products summed in another order).
TEST(CudaVerticalSlash, DeviceIndexIsTheHostsIndex) {
  SKIP_WITHOUT_GPU();
  const std::vector<Case> cases = {
      {1000, 2048, true, DType::bf16, 128, 4, 2, 3000, 3000, 1.0f},
      {100, 200, false, DType::f16, 64, 6, 2, 1333, 2001, 1.0f},
      {70, 300, false, DType::bf16, 64, 2, 1, 777, 777, 8.0f},
      {40, 40, false, DType::f16, 128, 2, 2, 65, 400, 1.0f},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.vertical) + "/" + std::to_string(c.slash) + " " +
                 std::to_string(c.lq) + "x" + std::to_string(c.lkv));
    const Input in = make_input(c.text, c.t, c.d, c.hq, c.hkv, c.lq, c.lkv, c.q_scale, 4);
    AttnOptions opt;
    opt.causal = true;
    VerticalSlashConfig cfg;
    cfg.vertical_size = c.vertical, cfg.slash_size = c.slash;
    const VerticalSlashIndex want = vertical_slash_index(in.q, in.k, cfg, opt);
    DeviceTensor dq(in.q), dk(in.k);
    const VerticalSlashIndex got = cuda::vertical_slash_index(dq.view, dk.view, cfg, opt);
    ASSERT_EQ(got.heads, want.heads);
    ASSERT_EQ(got.columns.size(), want.columns.size());
    for (int64_t h = 0; h < c.hq; ++h) {
      const auto &wc = want.columns[size_t(h)], &gc = got.columns[size_t(h)];
      const auto &wo = want.offsets[size_t(h)], &go = got.offsets[size_t(h)];
      ASSERT_EQ(gc.size(), wc.size()) << "head " << h;
      ASSERT_EQ(go.size(), wo.size()) << "head " << h;
      EXPECT_TRUE(std::is_sorted(gc.begin(), gc.end()) && std::is_sorted(go.begin(), go.end()));
      for (int64_t j = 0; j < std::min<int64_t>(cfg.sink, c.lkv); ++j)
        EXPECT_TRUE(std::binary_search(gc.begin(), gc.end(), j)) << "sink column " << j;
      for (int64_t o = 0; o < std::min<int64_t>(cfg.local, c.lkv); ++o)
        EXPECT_TRUE(std::binary_search(go.begin(), go.end(), o)) << "local diagonal " << o;
      EXPECT_LE(missing(wc, gc), std::max<int64_t>(2, int64_t(wc.size()) / 50)) << "head " << h;
      EXPECT_LE(missing(wo, go), std::max<int64_t>(2, int64_t(wo.size()) / 50)) << "head " << h;
    }
  }
}

// MMInference's boundary pieces: each piece's estimate on the device (listed rows, candidate
// keys of one modality) against the host's, on a text-vision-text layout with queries at the end
// of a longer cache, Q-boundary and 2D pieces, both dtypes, GQA's second kv head.
TEST(CudaVerticalSlash, PieceEstimatesAreTheHostsPieceEstimates) {
  SKIP_WITHOUT_GPU();
  const int64_t lk = 1700, lq = 1500;
  ModalityLayout layout;
  for (int64_t i = 0; i < lk; ++i)
    layout.ids.push_back(i >= 300 && i < 1190 ? kVisionModality : kTextModality);
  AttnOptions opt;
  opt.causal = true;
  VerticalSlashConfig cfg;
  cfg.vertical_size = 90, cfg.slash_size = 150;
  for (DType t : {DType::bf16, DType::f16})
    for (bool split : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (split ? " 2d" : " q"));
      const Input in = make_input(true, t, 128, 4, 2, lq, lk, 1.0f, 8);
      const TensorView qh = in.q.view().head_range(3, 1), kh = in.k.view().head_range(1, 1);
      const auto want = vertical_slash_pairs(qh, kh, layout, cfg, opt, split);
      DeviceTensor dq(in.q), dk(in.k);
      const TensorView dqh = dq.view.head_range(3, 1), dkh = dk.view.head_range(1, 1);
      const auto got = vertical_slash_pairs(
          layout, lq, cfg, split,
          [&](const std::vector<int64_t>& rows, const std::vector<int64_t>& keys) {
            return cuda::vertical_slash_estimate(dqh, dkh, cfg, opt, rows, &keys);
          });
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        const ModalityPairIndex &g = got[i], &w = want[i];
        EXPECT_EQ(g.q_modality, w.q_modality);
        EXPECT_EQ(g.k_modality, w.k_modality);
        ASSERT_EQ(g.columns.size(), w.columns.size()) << "piece " << i;
        ASSERT_EQ(g.offsets.size(), w.offsets.size()) << "piece " << i;
        // The piece's own sink is forced; the rest may differ by a near tie.
        for (size_t j = 0; j < std::min<size_t>(size_t(cfg.sink), w.columns.size()); ++j)
          EXPECT_EQ(g.columns[j], w.columns[j]) << "piece " << i << " sink column " << j;
        EXPECT_LE(missing(w.columns, g.columns),
                  std::max<int64_t>(2, int64_t(w.columns.size()) / 50))
            << "piece " << i;
        EXPECT_LE(missing(w.offsets, g.offsets),
                  std::max<int64_t>(2, int64_t(w.offsets.size()) / 50))
            << "piece " << i;
      }
    }
  // Rows or keys out of order are named errors.
  const Input in = make_input(false, DType::bf16, 64, 1, 1, 200, 200, 1.0f, 9);
  DeviceTensor dq(in.q), dk(in.k);
  const std::vector<int64_t> keys = {5, 3};
  EXPECT_THROW(cuda::vertical_slash_estimate(dq.view, dk.view, cfg, opt, {10, 20}, &keys), Error);
  EXPECT_THROW(cuda::vertical_slash_estimate(dq.view, dk.view, cfg, opt, {20, 10}, nullptr), Error);
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
  DeviceFloats dlse(size_t(4 * 2000));
  const MethodReport dr = m->run(dq.view, dk.view, dv.view, dout.view, opt, dlse.ptr);
  ASSERT_TRUE(hr.mask && dr.mask && dr.coverage);
  EXPECT_EQ(dr.extras.count("mask_device"), 1u);
  // Few of the block views' lists differ (a near tie in the estimate).
  int64_t differ = 0;
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t qb = 0; qb < dr.mask->n_qb(); ++qb) {
      const auto a = dr.mask->row(h, qb), b = hr.mask->row(h, qb);
      differ += !std::equal(a.begin(), a.end(), b.begin(), b.end());
    }
  EXPECT_LE(differ, std::max<int64_t>(2, 4 * dr.mask->n_qb() / 10));
  // The output against the CPU kernel over the device's own index, through its coverage.
  Tensor ref(DType::f32, 4, 2000, 128);
  std::vector<float> lse_ref(size_t(4 * 2000));
  VerticalSlashConfig cfg;
  cfg.vertical_size = 200, cfg.slash_size = 300;
  const VerticalSlashIndex index = cuda::vertical_slash_index(dq.view, dk.view, cfg, opt);
  attention_vertical_slash(in.q, in.k, in.v, ref, index, opt, lse_ref.data());
  const Tensor got = cuda::to_host(dout.view);
  const test::Diff d = test::diff(got.view(), ref.view());
  EXPECT_LE(d.max_abs, out_tol(DType::bf16) * std::max(1.0, d.ref_max));
  EXPECT_EQ(dr.stats.score_entries, covered_entries(index, 2000, 2000));
}

TEST(CudaVerticalSlash, UnsupportedInputsAreNamedErrors) {
  SKIP_WITHOUT_GPU();
  EXPECT_NE(
      test::method_error_on_device("vertical_slash:tile_rows=128", true).find("tile_rows=128"),
      std::string::npos);
  EXPECT_NE(test::method_error_on_device("vertical_slash", false).find("causal"),
            std::string::npos);
}

}  // namespace
}  // namespace spattn
