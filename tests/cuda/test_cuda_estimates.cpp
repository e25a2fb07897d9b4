// The estimating block-mask methods on the GPU (src/cuda/xattention.cu, mean_pool.cu, over
// antidiagonal.cu and block_select.cu) against their twins on the host: every (q head, query
// block) list the device selected is what the host's rule (masks/block_budget.hpp, mean_pool's
// topk) selects from the host's estimate of the same input, up to blocks within rounding of the
// budget's edge (counted); the lists against the CPU method's (few differ); and the output and
// LSE against the CPU's block-sparse attention over the device's own mask. Both dtypes, head
// dims 64 and 128, GQA, odd lengths, queries at the end of a longer cache, non-causal, extreme
// logits. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "assets.hpp"
#include "device_buffers.hpp"
#include "expect_device.hpp"
#include "cuda/device_buffers.hpp"
#include "cuda/text_workload.hpp"
#include "masks/antidiagonal_mass.hpp"
#include "spattn/attention.hpp"
#include "spattn/block_mask.hpp"
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

// A method's selection rule, spelled out as the reference: the forced keys, the estimate and
// the budget.
struct Rule {
  int64_t block_q = 128, block_k = 128;
  int64_t sink = 1, local = 1;  // forced keys (xattention: its sink block and diagonal)
  int64_t stride = 8;           // antidiagonal masses; 0: pooled scores
  bool pooled_mass = false;     // pooled scores as masses (est=pooled)
  int64_t topk = 0;
  double topp = 0, min_share = 0;
};

// Per (h, qb): the host's estimate of the same values in f32 products (what the device
// computes): antidiagonal masses, or pooled scores (their masses where pooled_mass).
std::vector<std::vector<double>> reference_estimate(const Input& in, const Rule& r,
                                                    const AttnOptions& opt, const BlockMask& g) {
  const int64_t hq = in.q.heads(), nq = g.n_qb();
  std::vector<std::vector<double>> est(size_t(hq * nq));
  if (r.stride > 0) {
    masks::AntidiagonalConfig c;
    c.stride = r.stride, c.block_q = r.block_q, c.block_k = r.block_k, c.dot_bf16 = false;
    masks::antidiagonal_block_mass(
        in.q, in.k, opt, c, [&](int64_t h, int64_t qb, const double* m, const masks::RowMasses&) {
          est[size_t(h * nq + qb)].assign(m, m + g.causal_blocks(qb));
        });
    return est;
  }
  const int64_t d = in.q.dim(), group = hq / in.k.heads();
  const double scale = softmax_scale(opt, d);
  const int64_t off = query_position(0, g.q_len, g.kv_len);
  for (int64_t h = 0; h < hq; ++h) {
    const std::vector<float> qp = mean_pool_rows(in.q, h, r.block_q);
    const std::vector<float> kp = mean_pool_rows(in.k, h / group, r.block_k);
    for (int64_t qb = 0; qb < nq; ++qb) {
      std::vector<double>& e = est[size_t(h * nq + qb)];
      const int64_t limit = g.causal_blocks(qb);
      for (int64_t kb = 0; kb < limit; ++kb) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c)
          s += double(qp[size_t(qb * d + c)]) * double(kp[size_t(kb * d + c)]);
        e.push_back(scale * s);
      }
      if (!r.pooled_mass || e.empty()) continue;
      const int64_t p1 = off + std::min((qb + 1) * r.block_q, g.q_len) - 1;
      const int64_t seen = std::min(g.kv_len, opt.causal ? p1 + 1 : g.kv_len);
      const double mx = *std::max_element(e.begin(), e.end());
      for (int64_t kb = 0; kb < limit; ++kb) {
        const int64_t n = std::min(seen, (kb + 1) * r.block_k) - kb * r.block_k;
        e[size_t(kb)] = double(std::max<int64_t>(n, 0)) * std::exp(e[size_t(kb)] - mx);
      }
    }
  }
  return est;
}

// Violations of the rule by one list, given the reference estimate e[0, limit); edge: blocks
// within tol of the budget's edge that made the difference (a tie).
struct Check {
  int64_t violations = 0, ties = 0, lists = 0, kept = 0;
};
void check_list(const std::vector<int32_t>& list, const std::vector<double>& e,
                const std::vector<uint8_t>& forced, const Rule& r, Check& out, std::string& why) {
  const int64_t limit = int64_t(e.size());
  std::vector<uint8_t> in(size_t(limit), 0);
  for (int32_t b : list) {
    if (b < 0 || b >= limit) {
      ++out.violations, why = "a block past the causal limit";
      return;
    }
    in[size_t(b)] = 1;
  }
  double total = 0, kept = 0, min_n = INFINITY, max_o = -INFINITY;
  int64_t n_new = 0, open = 0;
  for (int64_t b = 0; b < limit; ++b) {
    total += e[size_t(b)];
    if (in[size_t(b)]) kept += e[size_t(b)];
    if (forced[size_t(b)]) {
      if (!in[size_t(b)]) ++out.violations, why = "a forced block missing";
      continue;
    }
    ++open;
    if (in[size_t(b)])
      ++n_new, min_n = std::min(min_n, e[size_t(b)]);
    else
      max_o = std::max(max_o, e[size_t(b)]);
  }
  const bool scores = r.topp == 0 && r.min_share == 0;
  // Masses: relative to the row's total; scores: absolute, at their scale.
  const double tol =
      scores ? 1e-3 * std::max(1.0, std::max(std::abs(min_n), std::abs(max_o))) : 1e-4 * total;
  // Prefix: nothing left out above what was taken (beyond a tie).
  if (n_new > 0 && max_o > min_n) {
    if (max_o - min_n <= tol)
      ++out.ties;
    else
      ++out.violations, why = "a block left out above one taken";
  }
  if (scores) {
    if (n_new != std::min(r.topk, open)) ++out.violations, why = "not topk blocks";
  } else if (r.topp > 0) {
    const double need = r.topp * total;
    if (kept < need - tol) ++out.violations, why = "topp not reached";
    if (n_new > 0 && kept - min_n >= need + tol) ++out.violations, why = "more than topp needs";
    if (std::abs(kept - need) <= tol || (n_new > 0 && std::abs(kept - min_n - need) <= tol))
      ++out.ties;
  } else {
    const double need = r.min_share * total;
    if (n_new > 0 && min_n < need - tol) ++out.violations, why = "a block under min_share";
    if (max_o >= need + tol) ++out.violations, why = "a block over min_share left out";
  }
}

struct Case {
  std::string spec;
  Rule rule;
  bool text, causal;
  DType t;
  int64_t d, hq, hkv, lq, lkv;
  float q_scale;
};

// Every list of mask m against c's rule on the host's estimate of the same input.
Check check_mask(const Case& c, const Input& in, const AttnOptions& opt, const BlockMask& gm) {
  const std::vector<std::vector<double>> est = reference_estimate(in, c.rule, opt, gm);
  const int64_t nq = gm.n_qb(), nk = gm.n_kb(), off = query_position(0, c.lq, c.lkv);
  Check chk;
  for (int64_t h = 0; h < c.hq; ++h)
    for (int64_t qb = 0; qb < nq; ++qb) {
      const std::vector<double>& e = est[size_t(h * nq + qb)];
      const int64_t limit = gm.causal_blocks(qb);
      EXPECT_EQ(int64_t(e.size()), limit);
      if (int64_t(e.size()) != limit) return chk;
      const int64_t p0 = off + qb * c.rule.block_q,
                    p1 = off + std::min((qb + 1) * c.rule.block_q, c.lq) - 1;
      const int64_t vis_end = c.causal ? p1 + 1 : c.lkv;
      std::vector<uint8_t> forced(size_t(nk), 0);
      auto mark = [&](int64_t b, int64_t e2) {
        b = std::max<int64_t>(b, 0), e2 = std::min(e2, nk * c.rule.block_k);
        for (int64_t kb = b / c.rule.block_k; b < e2 && kb <= (e2 - 1) / c.rule.block_k; ++kb)
          forced[size_t(kb)] = 1;
      };
      mark(0, std::min(c.rule.sink, vis_end));
      mark(p0 - c.rule.local + 1, std::min(p1 + 1, vis_end));
      forced.resize(size_t(limit));
      const auto row = gm.row(h, qb);
      const std::vector<int32_t> list(row.begin(), row.end());
      std::string why;
      const int64_t before = chk.violations;
      check_list(list, e, forced, c.rule, chk, why);
      if (chk.violations > before)
        ADD_FAILURE() << "head " << h << " query block " << qb << ": " << why;
      ++chk.lists, chk.kept += int64_t(list.size());
    }
  return chk;
}

// The cases: both methods, each budget and estimate, both dtypes, head dims 64 and 128, GQA,
// odd lengths, queries at the end of a longer cache, not causal, extreme logits, and block
// shapes that exercise the estimate's row passes and tile boundaries.
std::vector<Case> cases() {
  auto xa = [](int64_t bq, int64_t bk, int64_t stride, double topp, double min_share) {
    Rule r;
    r.block_q = bq, r.block_k = bk, r.stride = stride, r.topp = topp, r.min_share = min_share;
    return r;
  };
  auto xk = [&](int64_t topk) {
    Rule r = xa(128, 128, 8, 0, 0);
    r.topk = topk;
    return r;
  };
  auto mp = [](int64_t sink, int64_t local, int64_t stride, int64_t topk, double topp,
               double min_share) {
    Rule r;
    r.block_q = r.block_k = 64, r.sink = sink, r.local = local, r.stride = stride;
    r.topk = topk, r.topp = topp, r.min_share = min_share;
    r.pooled_mass = stride == 0 && (topp > 0 || min_share > 0);
    return r;
  };
  return {
      {"xattention:dot=f32", xa(128, 128, 8, 0.9, 0), true, true, DType::bf16, 128, 4, 2, 1500,
       1500, 1.0f},
      {"xattention:dot=f32,min_share=0.05", xa(128, 128, 8, 0, 0.05), false, true, DType::f16, 64,
       6, 2, 1000, 1333, 1.0f},
      {"xattention:dot=f32,stride=16,topp=0.8", xa(128, 128, 16, 0.8, 0), true, true, DType::bf16,
       64, 4, 2, 777, 777, 1.0f},
      {"xattention:dot=f32", xa(128, 128, 8, 0.9, 0), false, false, DType::bf16, 128, 4, 4, 600,
       900, 1.0f},  // not causal
      {"xattention:dot=f32,tau=0.95", xa(128, 128, 8, 0.95, 0), false, true, DType::bf16, 128, 2, 1,
       1029, 1029, 8.0f},  // extreme logits
      {"xattention:dot=f32,block_q=256,block_k=512", xa(256, 512, 8, 0.9, 0), false, true,
       DType::bf16, 128, 2, 1, 3000, 5000, 1.0f},  // rows in two passes, blocks across tiles
      {"xattention:dot=f32,block_q=192,block_k=192", xa(192, 192, 8, 0.9, 0), true, true,
       DType::bf16, 128, 4, 2, 1700, 1700, 1.0f},  // 24-row blocks: two a thread block
      {"xattention:dot=f32,block_q=1024,block_k=64,stride=4", xa(1024, 64, 4, 0.9, 0), false, true,
       DType::f16, 64, 2, 1, 2500, 3000, 1.0f},  // 256 rows a block: four passes of 64
      {"xattention:dot=f32,block_q=64,stride=32", xa(64, 128, 32, 0.9, 0), true, true, DType::f16,
       128, 4, 2, 1111, 1111, 1.0f},
      {"xattention:dot=f32,topk=3", xk(3), true, true, DType::bf16, 128, 4, 2, 1500, 1500,
       1.0f},  // a count on the masses
      {"mean_pool:topk=4", mp(64, 64, 0, 4, 0, 0), true, true, DType::bf16, 128, 4, 2, 1500, 1500,
       1.0f},
      {"mean_pool:topk=3,sink=128,local=200", mp(128, 200, 0, 3, 0, 0), false, true, DType::f16, 64,
       6, 3, 999, 1400, 1.0f},
      {"mean_pool:topp=0.9", mp(64, 64, 4, 0, 0.9, 0), true, true, DType::bf16, 128, 4, 2, 1500,
       1500, 1.0f},
      {"mean_pool:min_share=0.03,stride=8", mp(64, 64, 8, 0, 0, 0.03), false, true, DType::f16, 128,
       4, 2, 1100, 1100, 1.0f},
      {"mean_pool:topp=0.8,est=pooled", mp(64, 64, 0, 0, 0.8, 0), true, true, DType::bf16, 64, 4, 2,
       1300, 1300, 1.0f},
      {"mean_pool:min_share=0.05,est=pooled", mp(64, 64, 0, 0, 0, 0.05), false, false, DType::bf16,
       128, 4, 2, 700, 1000, 1.0f},  // not causal
      {"mean_pool:topk=2", mp(64, 64, 0, 2, 0, 0), false, true, DType::bf16, 128, 2, 2, 1029, 1029,
       10.0f},  // extreme logits
  };
}

std::string name(const Case& c) {
  return c.spec + (c.text ? " text " : " random ") + dtype_name(c.t) + " d" + std::to_string(c.d) +
         " " + std::to_string(c.hq) + "/" + std::to_string(c.hkv) + " " + std::to_string(c.lq) +
         "x" + std::to_string(c.lkv) + (c.causal ? "" : " not causal");
}

// The checker itself on the host (no GPU needed): the CPU method's own masks obey the rule on
// the reference estimate, where its products are the reference's (bf16 values, or dot=f32).
TEST(CudaEstimates, HostMethodsPassTheRuleCheck) {
  for (const Case& c : cases()) {
    if (c.t != DType::bf16 && c.spec.rfind("xattention", 0) != 0) continue;
    SCOPED_TRACE(name(c));
    const Input in = make_input(c.text, c.t, c.d, c.hq, c.hkv, c.lq, c.lkv, c.q_scale, 9);
    AttnOptions opt;
    opt.causal = c.causal;
    opt.bf16_dot = false;
    Tensor out(DType::f32, c.hq, c.lq, c.d);
    const MethodReport hr = make_method(c.spec)->run(in.q, in.k, in.v, out, opt);
    ASSERT_TRUE(hr.mask);
    if (hr.dense_shortcut == "budget") continue;  // no estimate ran
    const Check chk = check_mask(c, in, opt, *hr.mask);
    EXPECT_EQ(chk.violations, 0);
    EXPECT_GT(chk.kept, 0);
    EXPECT_LE(chk.ties, std::max<int64_t>(2, chk.lists / 50));
  }
}

TEST(CudaEstimates, SelectionIsTheHostRuleAndOutputIsExact) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : cases()) {
    SCOPED_TRACE(name(c));
    const Input in = make_input(c.text, c.t, c.d, c.hq, c.hkv, c.lq, c.lkv, c.q_scale, 9);
    AttnOptions opt;
    opt.causal = c.causal;
    opt.bf16_dot = false;
    const auto m = make_method(c.spec);
    // The device.
    DeviceTensor dq(in.q), dk(in.k), dv(in.v), dout(c.t, c.hq, c.lq, c.d);
    DeviceFloats dlse(size_t(c.hq * c.lq));
    const MethodReport dr = m->run(dq.view, dk.view, dv.view, dout.view, opt, dlse.ptr);
    ASSERT_TRUE(dr.mask && dr.coverage);
    ASSERT_TRUE(dr.dense_shortcut.empty()) << "the case must select";
    EXPECT_EQ(dr.extras.count("mask_device"), 1u) << "the estimate ran on the device";
    const BlockMask& gm = *dr.mask;
    const Check chk = check_mask(c, in, opt, gm);
    const int64_t lists = chk.lists, nq = gm.n_qb();
    EXPECT_GT(chk.kept, 0);
    EXPECT_LE(chk.ties, std::max<int64_t>(2, lists / 50)) << "lists at a tie, of " << lists;
    // Against the CPU method's own mask (its products may round differently: dot=bf16 on an
    // f16 input, a different order of sums): few lists differ.
    Tensor host_out(DType::f32, c.hq, c.lq, c.d);
    const MethodReport hr = m->run(in.q, in.k, in.v, host_out, opt);
    if (hr.mask && hr.dense_shortcut.empty()) {
      int64_t differ = 0;
      for (int64_t h = 0; h < c.hq; ++h)
        for (int64_t qb = 0; qb < nq; ++qb) {
          const auto a = gm.row(h, qb), b = hr.mask->row(h, qb);
          differ += !std::equal(a.begin(), a.end(), b.begin(), b.end());
        }
      EXPECT_LE(differ, std::max<int64_t>(2, lists / 25)) << "lists unlike the CPU method's";
    }
    // The output over the device's mask against the host's block-sparse attention over it.
    test::expect_block_sparse_output(in, opt, gm, dout, dlse, c.t, dr.stats);
  }
}

// Every block kept (topp 1 covers every block a row sees with mass; min_share tiny) gives the
// exact attention: the pipeline's lists, tiles and pass cover each causal block once.
TEST(CudaEstimates, EveryBlockKeptIsExactAttention) {
  SKIP_WITHOUT_GPU();
  struct ECase {
    DType t;
    int64_t d, hq, hkv, lq, lkv;
    bool causal;
  };
  const std::vector<ECase> cases = {
      {DType::bf16, 128, 4, 2, 1000, 1000, true},
      {DType::f16, 64, 6, 3, 333, 777, true},
      {DType::bf16, 64, 2, 2, 130, 300, false},
  };
  for (const ECase& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.t)) + " d" + std::to_string(c.d) + " " +
                 std::to_string(c.lq) + "x" + std::to_string(c.lkv));
    const Input in = make_input(false, c.t, c.d, c.hq, c.hkv, c.lq, c.lkv, 1.0f, 4);
    AttnOptions opt;
    opt.causal = c.causal;
    Tensor ref(DType::f32, c.hq, c.lq, c.d);
    attention_reference(in.q, in.k, in.v, ref, opt, nullptr);
    DeviceTensor dq(in.q), dk(in.k), dv(in.v);
    for (int which = 0; which < 2; ++which) {
      DeviceTensor dout(c.t, c.hq, c.lq, c.d);
      cuda::BlockSelectResult res;
      int64_t bq = 64, bk = 64;
      if (which == 0) {
        cuda::XAttentionGpuPlan p;
        p.budget = {0, 0, 1e-12};
        bq = p.block_q, bk = p.block_k;
        cuda::xattention_attention(dq.view, dk.view, dv.view, dout.view, p, opt, nullptr, res);
      } else {
        cuda::MeanPoolGpuPlan p;
        p.budget = {1 << 20, 0, 0};
        cuda::mean_pool_attention(dq.view, dk.view, dv.view, dout.view, p, opt, nullptr, res);
      }
      const BlockMask full(c.hq, c.lq, c.lkv, bq, bk, c.causal);
      int64_t causal_blocks = 0, listed = 0;
      for (int64_t qb = 0; qb < full.n_qb(); ++qb) causal_blocks += full.causal_blocks(qb);
      for (const auto& l : res.lists) listed += int64_t(l.size());
      EXPECT_EQ(listed, c.hq * causal_blocks) << "every block, " << which;
      const Tensor got = cuda::to_host(dout.view);
      const test::Diff d = test::diff(got.view(), ref.view());
      EXPECT_LE(d.max_abs, out_tol(c.t) * std::max(1.0, d.ref_max)) << which;
    }
  }
}

// Small odd shapes through every estimate and budget, for the sanitizers (memcheck, racecheck:
// scripts/gpu_check.sh): each run's mask valid, its output finite, and the same on a second run
// (the estimate sums in a fixed order).
TEST(CudaEstimates, OddShapesRunCleanAndRepeat) {
  SKIP_WITHOUT_GPU();
  struct OCase {
    std::string spec;
    DType t;
    int64_t d, hq, hkv, lq, lkv;
    bool causal;
  };
  const std::vector<OCase> cases = {
      {"xattention:min_share=0.05", DType::bf16, 128, 2, 1, 333, 517, true},
      {"xattention:block_q=192,block_k=192,tau=0.8", DType::f16, 64, 3, 3, 450, 450, true},
      {"xattention:block_q=1024,block_k=64,stride=4", DType::bf16, 64, 2, 2, 700, 701, true},
      {"xattention:block_q=64,stride=32", DType::bf16, 128, 2, 1, 129, 300, false},
      {"mean_pool:topk=2,sink=100,local=70", DType::f16, 128, 4, 2, 257, 640, true},
      {"mean_pool:topp=0.7", DType::bf16, 64, 2, 1, 199, 199, true},
      {"mean_pool:min_share=0.1,est=pooled", DType::bf16, 128, 2, 2, 300, 450, false},
  };
  for (const OCase& c : cases) {
    SCOPED_TRACE(c.spec + " " + std::to_string(c.lq) + "x" + std::to_string(c.lkv));
    const Input in = make_input(false, c.t, c.d, c.hq, c.hkv, c.lq, c.lkv, 1.0f, 2);
    AttnOptions opt;
    opt.causal = c.causal;
    const auto m = make_method(c.spec);
    DeviceTensor dq(in.q), dk(in.k), dv(in.v), o1(c.t, c.hq, c.lq, c.d), o2(c.t, c.hq, c.lq, c.d);
    const MethodReport a = m->run(dq.view, dk.view, dv.view, o1.view, opt);
    const MethodReport b = m->run(dq.view, dk.view, dv.view, o2.view, opt);
    ASSERT_TRUE(a.mask && b.mask);
    EXPECT_NO_THROW(a.mask->validate());
    EXPECT_EQ(a.mask->blocks, b.mask->blocks);
    const Tensor x = o1.to_host(), y = o2.to_host();
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0) << "the same bits twice";
    int64_t bad = 0;
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t i = 0; i < c.lq; ++i)
        for (int64_t e = 0; e < c.d; ++e) bad += !std::isfinite(x.view().get(h, i, e));
    EXPECT_EQ(bad, 0);
  }
}

// What the device paths do not take is a named Error before any kernel runs.
TEST(CudaEstimates, UnsupportedInputsAreNamedErrors) {
  SKIP_WITHOUT_GPU();
  const Tensor x = test::random_tensor(DType::bf16, 2, 300, 64, 1);
  DeviceTensor d(x), o(DType::bf16, 2, 300, 64);
  for (const std::string spec : {"xattention:block_q=96,stride=8", "mean_pool:block_k=32,topk=1"}) {
    try {
      make_method(spec)->run(d.view, d.view, d.view, o.view, {});
      ADD_FAILURE() << spec << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("multiples of 64"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace spattn
