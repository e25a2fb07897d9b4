// MOMO on the GPU (src/cuda/momo.cu) against its twins on the host: each sampled row's online
// top-k selection against the CPU's BlockSelectObserver on the same input (the same blocks,
// differences only where a score ties the k-th within rounding), the method's mask and output
// against the CPU method's, and with every block selected the output against the exact
// reference; both dtypes, head dims 64 and 128, GQA, odd lengths, queries at the end of a
// longer cache, extreme logits. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "assets.hpp"
#include "device_buffers.hpp"
#include "cuda/device_buffers.hpp"
#include "cuda/text_workload.hpp"
#include "spattn/attention.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/select.hpp"
#include "spattn/select_observer.hpp"
#include "spattn/sparse_attention.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

using test::DeviceFloats;
using test::DeviceTensor;
using test::Input;
using test::make_input;
using test::out_tol;

// momo.cpp's geometry for one set of parameters (its Geometry, spelled out as the reference).
cuda::MomoGpuPlan plan_for(int64_t hq, int64_t lq, int64_t lkv, int64_t gamma, int64_t chi,
                           int64_t beta, int64_t k, int64_t sink, int64_t local) {
  cuda::MomoGpuPlan p;
  p.chi = chi, p.beta = beta, p.k = k, p.k_trim = k;
  const BlockMask geom(hq, lq, lkv, chi, beta, true);
  for (int64_t qb = 0; qb < geom.n_qb(); ++qb) {
    ForcedBlocks f;
    f.causal_end = geom.causal_blocks(qb);
    f.sink_end = std::min(sink, f.causal_end);
    f.local_begin = std::max<int64_t>(0, f.causal_end - local);
    p.forced.push_back(f);
  }
  p.rows = strided_rows(lq, gamma);
  for (int64_t qb = 0; qb <= geom.n_qb(); ++qb)
    p.first_row.push_back(std::lower_bound(p.rows.begin(), p.rows.end(), qb * chi) -
                          p.rows.begin());
  return p;
}

struct SelCase {
  bool text;
  DType t;
  int64_t d, hq, hkv, lq, lkv, gamma, chi, beta, k;
  float q_scale;
};
std::string name(const SelCase& c) {
  return std::string(c.text ? "text " : "random ") + dtype_name(c.t) + " d" + std::to_string(c.d) +
         " " + std::to_string(c.hq) + "/" + std::to_string(c.hkv) + " " + std::to_string(c.lq) +
         "x" + std::to_string(c.lkv) + " gamma " + std::to_string(c.gamma) + " chi " +
         std::to_string(c.chi) + " beta " + std::to_string(c.beta) + " k " + std::to_string(c.k) +
         " q_scale " + std::to_string(c.q_scale);
}

// The GPU's selection per sampled row is the CPU observer's: every block one of them chose and
// the other did not scores within rounding of the CPU's k-th (a tie), and the scores of the
// blocks both chose agree.
TEST(CudaMomo, SelectionMatchesCpuObserver) {
  SKIP_WITHOUT_GPU();
  const std::vector<SelCase> cases = {
      {true, DType::bf16, 128, 4, 2, 1500, 1500, 16, 128, 64, 8, 1.0f},
      {true, DType::bf16, 64, 4, 2, 700, 1333, 16, 128, 64, 5, 1.0f},  // queries at the end
      {false, DType::f16, 128, 6, 2, 1111, 1111, 32, 128, 128, 4, 1.0f},
      {false, DType::bf16, 64, 2, 1, 999, 999, 16, 64, 64, 3, 8.0f},  // extreme logits
      {false, DType::f16, 64, 3, 3, 517, 517, 64, 128, 192, 2, 1.0f},
      {true, DType::bf16, 128, 4, 2, 2049, 2049, 128, 128, 64, 128, 1.0f},  // k > candidates
  };
  for (const SelCase& c : cases) {
    SCOPED_TRACE(name(c));
    const Input in = make_input(c.text, c.t, c.d, c.hq, c.hkv, c.lq, c.lkv, c.q_scale, 7);
    cuda::MomoGpuPlan plan = plan_for(c.hq, c.lq, c.lkv, c.gamma, c.chi, c.beta, c.k, 1, 3);
    const int64_t R = int64_t(plan.rows.size());
    // The CPU: the query-sparse pass with the observer, f32 products of the same values.
    AttnOptions opt;
    opt.bf16_dot = false;
    TopKParams tp;
    tp.kind = TopKKind::exact, tp.k = int(c.k), tp.k_exact = int(std::min<int64_t>(8, c.k));
    BlockSelectObserver obs(c.hq, plan.rows, c.lq, c.lkv, c.beta, plan.forced, c.chi, tp);
    Tensor og(DType::f32, c.hq, R, c.d);
    std::vector<float> lse_g(size_t(c.hq * R));
    attention_query_sparse(in.q, in.k, in.v, plan.rows, og, opt, lse_g.data(), &obs);
    // The GPU.
    DeviceTensor dq(in.q), dk(in.k), dv(in.v), dout(c.t, c.hq, c.lq, c.d);
    cuda::MomoGpuResult res;
    cuda::momo_attention(dq.view, dk.view, dv.view, dout.view, plan, opt, nullptr, res, true);
    ASSERT_EQ(int64_t(res.row_selection.size()), c.hq * R);
    int64_t chosen = 0, ties = 0, wrong = 0, score_off = 0;
    std::vector<BlockScore> cpu;
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t ri = 0; ri < R; ++ri) {
        obs.result(h, ri, cpu);
        const std::vector<BlockScore>& gpu = res.row_selection[size_t(h * R + ri)];
        chosen += int64_t(cpu.size());
        if (gpu.size() != cpu.size()) {
          ADD_FAILURE() << "head " << h << " row " << plan.rows[size_t(ri)] << ": " << gpu.size()
                        << " blocks on the GPU, " << cpu.size() << " on the CPU";
          continue;
        }
        if (cpu.empty()) continue;
        const float kth = cpu.back().score;  // best first
        const float tol = 2e-3f * std::max(1.0f, std::abs(kth));
        std::map<int32_t, float> on_cpu, on_gpu;
        for (const BlockScore& b : cpu) on_cpu[b.block] = b.score;
        for (const BlockScore& b : gpu) on_gpu[b.block] = b.score;
        for (const auto& [blk, s] : on_gpu) {
          const auto it = on_cpu.find(blk);
          if (it != on_cpu.end()) {
            score_off += !(std::abs(it->second - s) <= 2e-3f * std::max(1.0f, std::abs(s)));
          } else if (std::abs(s - kth) <= tol) {
            ++ties;
          } else {
            ++wrong;
          }
        }
        for (const auto& [blk, s] : on_cpu)
          if (!on_gpu.count(blk) && !(std::abs(s - kth) <= tol)) ++wrong;
      }
    EXPECT_GT(chosen, 0);
    EXPECT_EQ(wrong, 0) << "blocks chosen on one device only, not at a tie (of " << chosen << ")";
    EXPECT_LE(ties, std::max<int64_t>(2, chosen / 200)) << "ties at the k-th, of " << chosen;
    EXPECT_EQ(score_off, 0) << "scores S(j) of blocks both chose differ";
  }
}

// The method on the device against the method on the host: the same masks (a list may differ
// only by a tie; counted, few) and, in the query blocks whose lists agree, the same output.
TEST(CudaMomo, MethodMatchesCpuMethod) {
  SKIP_WITHOUT_GPU();
  struct MCase {
    std::string spec;
    bool text;
    DType t;
    int64_t d, lq, lkv;
    float q_scale;
  };
  const std::vector<MCase> cases = {
      {"momo", true, DType::bf16, 128, 1500, 1500, 1.0f},  // the budget covers it: dense
      {"momo:k=8", true, DType::bf16, 128, 1500, 1500, 1.0f},
      {"momo:gamma=16,k=6", true, DType::bf16, 128, 1777, 1777, 1.0f},
      {"momo:gamma=16,k=4,blend=mean_pool", true, DType::f16, 64, 1300, 1300, 1.0f},
      {"momo:gamma=32,k=4,blend=none,trim=mean", false, DType::bf16, 64, 1029, 1029, 1.0f},
      {"momo:gamma=16,k=4,blend=none,pool=above", true, DType::bf16, 128, 900, 1400, 1.0f},
      {"momo:gamma=16,k=8,k_trim=5,topp=0.9", true, DType::bf16, 128, 1500, 1500, 1.0f},
      {"momo:gamma=16,k=8,min_share=0.02", true, DType::f16, 128, 1500, 1500, 1.0f},
      {"momo:gamma=16,k=4,delta=off", false, DType::f16, 128, 1000, 1000, 6.0f},
      {"momo:chi=64,gamma=16,k=4,beta=128", true, DType::bf16, 64, 1234, 1234, 1.0f},
  };
  for (const MCase& c : cases) {
    SCOPED_TRACE(c.spec + (c.text ? " text " : " random ") + dtype_name(c.t) + " d" +
                 std::to_string(c.d) + " " + std::to_string(c.lq) + "x" + std::to_string(c.lkv));
    const int64_t hq = c.text ? 4 : 6, hkv = 2;
    const Input in = make_input(c.text, c.t, c.d, hq, hkv, c.lq, c.lkv, c.q_scale, 3);
    const auto m = make_method(c.spec);
    AttnOptions opt;
    opt.bf16_dot = false;
    Tensor host_out(DType::f32, hq, c.lq, c.d);
    std::vector<float> host_lse(size_t(hq * c.lq));
    const MethodReport hr = m->run(in.q, in.k, in.v, host_out, opt, host_lse.data());
    DeviceTensor dq(in.q), dk(in.k), dv(in.v), dout(c.t, hq, c.lq, c.d);
    DeviceFloats dlse(size_t(hq * c.lq));
    const MethodReport dr = m->run(dq.view, dk.view, dv.view, dout.view, opt, dlse.ptr);
    ASSERT_TRUE(dr.mask && hr.mask && dr.coverage);
    const BlockMask &gm = *dr.mask, &cm = *hr.mask;
    ASSERT_EQ(gm.n_qb(), cm.n_qb());
    int64_t differ = 0;
    std::vector<uint8_t> same(size_t(hq * cm.n_qb()));
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t qb = 0; qb < cm.n_qb(); ++qb) {
        const auto a = gm.row(h, qb), b = cm.row(h, qb);
        same[size_t(h * cm.n_qb() + qb)] = std::equal(a.begin(), a.end(), b.begin(), b.end());
        differ += !same[size_t(h * cm.n_qb() + qb)];
      }
    EXPECT_LE(differ, std::max<int64_t>(1, hq * cm.n_qb() / 50))
        << "query blocks whose lists differ (ties at the trim), of " << hq * cm.n_qb();
    const Tensor got = cuda::to_host(dout.view);
    const std::vector<float> lse = dlse.to_host();
    const int64_t chi = cm.block_q;
    double worst = 0, ref_max = 1;
    int64_t lse_bad = 0;
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < c.lq; ++i) {
        // (A row's sampled row, whose correction it takes, lies in its own block: chi is a
        // multiple of gamma.)
        if (!same[size_t(h * cm.n_qb() + i / chi)]) continue;
        for (int64_t e = 0; e < c.d; ++e) {
          const double y = host_out.view().get(h, i, e);
          worst = std::max(worst, std::abs(got.view().get(h, i, e) - y));
          ref_max = std::max(ref_max, std::abs(y));
        }
        const float a = lse[size_t(h * c.lq + i)], b = host_lse[size_t(h * c.lq + i)];
        lse_bad += !(std::abs(a - b) <= 2e-3f * std::max(1.0f, std::abs(b)));
      }
    // Delta adds a difference of two rounded rows to a third: twice the dtype's rounding.
    EXPECT_LE(worst, 2 * out_tol(c.t) * ref_max);
    EXPECT_EQ(lse_bad, 0);
    EXPECT_EQ(dr.dense_shortcut, hr.dense_shortcut);
    if (!hr.dense_shortcut.empty()) continue;  // no passes of momo's ran: nothing more to compare
    for (const char* key : {"k_sparse", "k_dense", "blocks_per_row", "blocks_per_qblock", "gamma"})
      EXPECT_NEAR(dr.extras.at(key), hr.extras.at(key), 0.02 * std::max(1.0, hr.extras.at(key)))
          << key;
  }
}

// With every block selected (k and k_trim above the block count) the mask is every causal
// block, the sampled rows are exact, and so is every other row: momo is exact attention.
TEST(CudaMomo, EveryBlockSelectedIsExactAttention) {
  SKIP_WITHOUT_GPU();
  struct ECase {
    bool text;
    DType t;
    int64_t d, hq, hkv, lq, lkv;
    float q_scale;
  };
  const std::vector<ECase> cases = {
      {true, DType::bf16, 128, 4, 2, 1000, 1000, 1.0f},
      {false, DType::f16, 64, 6, 3, 333, 777, 1.0f},
      {false, DType::bf16, 128, 4, 1, 517, 517, 12.0f},
      {false, DType::f16, 128, 2, 2, 130, 130, 1.0f},
      {true, DType::f16, 64, 4, 2, 1029, 1029, 1.0f},
  };
  for (const ECase& c : cases) {
    SCOPED_TRACE(std::string(c.text ? "text " : "random ") + dtype_name(c.t) + " d" +
                 std::to_string(c.d) + " " + std::to_string(c.hq) + "/" + std::to_string(c.hkv) +
                 " " + std::to_string(c.lq) + "x" + std::to_string(c.lkv) + " q_scale " +
                 std::to_string(c.q_scale));
    const Input in = make_input(c.text, c.t, c.d, c.hq, c.hkv, c.lq, c.lkv, c.q_scale, 5);
    AttnOptions opt;
    Tensor ref(DType::f32, c.hq, c.lq, c.d);
    std::vector<float> lse_ref(size_t(c.hq * c.lq));
    attention_reference(in.q, in.k, in.v, ref, opt, lse_ref.data());
    DeviceTensor dq(in.q), dk(in.k), dv(in.v), dout(c.t, c.hq, c.lq, c.d);
    DeviceFloats dlse(size_t(c.hq * c.lq));
    // The kernels themselves, not the method: at this budget the method runs the dense kernel
    // (dense_shortcut.hpp), and the point here is the pipeline's lists, passes and delta.
    const cuda::MomoGpuPlan plan = plan_for(c.hq, c.lq, c.lkv, 16, 128, 64, 4096, 1, 1);
    cuda::MomoGpuResult res;
    cuda::momo_attention(dq.view, dk.view, dv.view, dout.view, plan, opt, dlse.ptr, res);
    const Tensor got = cuda::to_host(dout.view);
    const test::Diff d = test::diff(got.view(), ref.view());
    EXPECT_LE(d.max_abs, 2 * out_tol(c.t) * std::max(1.0, d.ref_max));
    const std::vector<float> lse = dlse.to_host();
    int64_t bad = 0;
    for (size_t i = 0; i < lse.size(); ++i)
      bad += !(std::abs(lse[i] - lse_ref[i]) <= 2e-3f * std::max(1.0f, std::abs(lse_ref[i])));
    EXPECT_EQ(bad, 0) << "LSE rows off";
    const BlockMask full(c.hq, c.lq, c.lkv, 128, 64, true);
    int64_t causal_blocks = 0, listed = 0;
    for (int64_t qb = 0; qb < full.n_qb(); ++qb) causal_blocks += full.causal_blocks(qb);
    for (const auto& l : res.lists) listed += int64_t(l.size());
    EXPECT_EQ(listed, c.hq * causal_blocks) << "every causal block";
  }
}

// Step 1 over chunks of heads (MomoGpuPlan::scratch_bytes: one head, half a group, one group
// at a time) is step 1 over every head at once: the same selections, masks, outputs and LSE,
// bit for bit (each head's work is its own).
TEST(CudaMomo, HeadChunksAreTheWholePass) {
  SKIP_WITHOUT_GPU();
  const int64_t hq = 8, hkv = 2, lq = 1500, d = 128;
  const Input in = make_input(true, DType::bf16, d, hq, hkv, lq, lq, 1.0f, 11);
  AttnOptions opt;
  DeviceTensor dq(in.q), dk(in.k), dv(in.v);
  cuda::MomoGpuPlan plan = plan_for(hq, lq, lq, 16, 128, 64, 6, 1, 2);
  const int64_t per_head = int64_t(plan.rows.size()) * ((lq + 63) / 64) * 4;
  Tensor out[4];
  std::vector<float> lse[4];
  cuda::MomoGpuResult res[4];
  const int64_t budgets[4] = {int64_t(1) << 30, 1, 2 * per_head, 4 * per_head};
  for (int i = 0; i < 4; ++i) {
    plan.scratch_bytes = budgets[i];
    DeviceTensor dout(DType::bf16, hq, lq, d);
    DeviceFloats dlse(size_t(hq * lq));
    cuda::momo_attention(dq.view, dk.view, dv.view, dout.view, plan, opt, dlse.ptr, res[i], true);
    out[i] = cuda::to_host(dout.view);
    lse[i] = dlse.to_host();
  }
  for (int i = 1; i < 4; ++i) {
    SCOPED_TRACE("scratch_bytes " + std::to_string(budgets[i]));
    EXPECT_EQ(test::diff(out[i].view(), out[0].view()).max_abs, 0.0);
    EXPECT_EQ(lse[i], lse[0]);
    EXPECT_EQ(res[i].lists, res[0].lists);
    ASSERT_EQ(res[i].row_selection.size(), res[0].row_selection.size());
    for (size_t r = 0; r < res[0].row_selection.size(); ++r) {
      const auto &a = res[i].row_selection[r], &b = res[0].row_selection[r];
      ASSERT_EQ(a.size(), b.size()) << "row " << r;
      for (size_t j = 0; j < a.size(); ++j) {
        EXPECT_EQ(a[j].block, b[j].block) << "row " << r;
        EXPECT_EQ(a[j].score, b[j].score) << "row " << r;
      }
    }
    EXPECT_EQ(res[i].fused.score_entries, res[0].fused.score_entries);
  }
}

// The selection fused into the query-sparse pass (per-row heaps as the tiles arrive) against
// the pass's tile LSEs and the selection kernel: the same selections, masks, outputs and LSE,
// bit for bit (the same tile LSEs, folded in the same order; the same keys, best first).
// Queries at the end of a longer cache, blocks of one to three tiles, k beyond the candidates,
// both dtypes and head dims; a k past the heaps' room runs the selection kernel and says so.
TEST(CudaMomo, FusedSelectionIsTheSelectionKernel) {
  SKIP_WITHOUT_GPU();
  const std::vector<SelCase> cases = {
      {true, DType::bf16, 128, 4, 2, 1500, 1500, 16, 128, 64, 8, 1.0f},
      {true, DType::bf16, 64, 4, 2, 700, 1333, 16, 128, 64, 5, 1.0f},
      {false, DType::f16, 128, 6, 2, 1111, 1111, 32, 128, 128, 4, 1.0f},
      {false, DType::f16, 64, 3, 3, 517, 517, 64, 128, 192, 2, 1.0f},
      {true, DType::bf16, 128, 4, 2, 2049, 2049, 128, 128, 64, 128, 1.0f},
      {false, DType::bf16, 64, 2, 1, 999, 999, 16, 64, 64, 3, 8.0f},
  };
  for (const SelCase& c : cases) {
    SCOPED_TRACE(name(c));
    const Input in = make_input(c.text, c.t, c.d, c.hq, c.hkv, c.lq, c.lkv, c.q_scale, 7);
    cuda::MomoGpuPlan plan = plan_for(c.hq, c.lq, c.lkv, c.gamma, c.chi, c.beta, c.k, 1, 3);
    AttnOptions opt;
    DeviceTensor dq(in.q), dk(in.k), dv(in.v);
    Tensor out[2];
    std::vector<float> lse[2];
    cuda::MomoGpuResult res[2];
    for (int i = 0; i < 2; ++i) {
      plan.fused_select = i == 1;
      DeviceTensor dout(c.t, c.hq, c.lq, c.d);
      DeviceFloats dlse(size_t(c.hq * c.lq));
      cuda::momo_attention(dq.view, dk.view, dv.view, dout.view, plan, opt, dlse.ptr, res[i], true);
      out[i] = cuda::to_host(dout.view);
      lse[i] = dlse.to_host();
    }
    EXPECT_FALSE(res[0].fused_select);
    EXPECT_TRUE(res[1].fused_select);
    EXPECT_EQ(test::diff(out[1].view(), out[0].view()).max_abs, 0.0);
    EXPECT_EQ(lse[1], lse[0]);
    EXPECT_EQ(res[1].lists, res[0].lists);
    ASSERT_EQ(res[1].row_selection.size(), res[0].row_selection.size());
    for (size_t r = 0; r < res[0].row_selection.size(); ++r) {
      const auto &a = res[1].row_selection[r], &b = res[0].row_selection[r];
      ASSERT_EQ(a.size(), b.size()) << "row " << r;
      for (size_t j = 0; j < a.size(); ++j) {
        EXPECT_EQ(a[j].block, b[j].block) << "row " << r;
        EXPECT_EQ(a[j].score, b[j].score) << "row " << r;
      }
    }
    EXPECT_EQ(res[1].fused.score_entries, res[0].fused.score_entries);
  }
  // 258 key blocks, k 300: a row may keep 258, past the heaps' 256.
  const int64_t n = 16500;
  const Input in = make_input(false, DType::bf16, 64, 1, 1, n, n, 1.0f, 3);
  DeviceTensor dq(in.q), dk(in.k), dv(in.v), dout(DType::bf16, 1, n, 64);
  cuda::MomoGpuPlan plan = plan_for(1, n, n, 256, 128, 64, 300, 1, 1);
  plan.fused_select = true;
  cuda::MomoGpuResult res;
  cuda::momo_attention(dq.view, dk.view, dv.view, dout.view, plan, {}, nullptr, res);
  EXPECT_FALSE(res.fused_select) << "k 300 over 258 blocks: no room for the heaps";
  // A value SPATTN_CUDA_MOMO_FUSED does not take is a named Error, not the unfused form.
  ::setenv("SPATTN_CUDA_MOMO_FUSED", "yes", 1);
  plan.fused_select = false;
  try {
    cuda::momo_attention(dq.view, dk.view, dv.view, dout.view, plan, {}, nullptr, res);
    ADD_FAILURE() << "SPATTN_CUDA_MOMO_FUSED=yes was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SPATTN_CUDA_MOMO_FUSED"), std::string::npos) << e.what();
  }
  ::unsetenv("SPATTN_CUDA_MOMO_FUSED");
}

// What the GPU path does not take is a named Error, before any kernel runs.
TEST(CudaMomo, UnsupportedParametersAreNamedErrors) {
  SKIP_WITHOUT_GPU();
  const Tensor x = test::random_tensor(DType::bf16, 2, 300, 64, 1);
  DeviceTensor d(x), o(DType::bf16, 2, 300, 64);
  for (const std::string spec :
       {"momo:topk=hybrid", "momo:topk=estimate", "momo:lambda=0.01", "momo:chi=48,gamma=16"}) {
    try {
      make_method(spec)->run(d.view, d.view, d.view, o.view, {});
      ADD_FAILURE() << spec << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("momo"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace spattn
