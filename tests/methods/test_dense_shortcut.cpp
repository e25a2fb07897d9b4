// The dense shortcut (src/methods/dense_shortcut.hpp): a block-selecting method whose budget or
// estimate leaves nothing to skip runs the dense kernel, says why, and gives dense's bits; one
// whose budget selects does not.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "methods/dense_shortcut.hpp"
#include "spattn/method.hpp"
#include "spattn/workload.hpp"

namespace spattn {
namespace {

TEST(DenseShortcut, BudgetCoversTheLongestRowsBlocks) {
  EXPECT_TRUE(budget_covers_context(128, 8192, 64));  // momo's and mean_pool's defaults at 8K
  EXPECT_FALSE(budget_covers_context(127, 8192, 64));
  EXPECT_FALSE(budget_covers_context(128, 8193, 64));  // a partial 129th block
  EXPECT_TRUE(budget_covers_context(129, 8193, 64));
  EXPECT_FALSE(budget_covers_context(-1, 1, 64));  // no count decides
  EXPECT_TRUE(budget_covers_context(0, 0, 64));
}

TEST(DenseShortcut, KeepsEveryBlockOnlyWhenEveryListIsFull) {
  for (const bool causal : {true, false}) {
    BlockMask m = BlockMask::full(2, 200, 300, 64, 32, causal);
    EXPECT_TRUE(keeps_every_block(m));
    std::vector<uint8_t> grid = m.to_dense();
    grid[grid.size() - 1] = 0;  // the last head's last query block loses its last block
    EXPECT_FALSE(keeps_every_block(BlockMask::from_dense(2, 200, 300, 64, 32, causal, grid)));
  }
}

struct Outcome {
  Tensor out;
  std::vector<float> lse;
  MethodReport report;
};

Workload text_workload(int64_t seq) {
  WorkloadConfig c;
  c.seq = seq;
  c.heads = 4;
  c.kv_heads = 2;
  c.dim = 64;
  c.seed = 11;
  return make_workload(c);
}

Outcome run(const std::string& spec, const Workload& w) {
  Outcome r{Tensor(DType::f32, w.q.heads(), w.q.seq(), w.q.dim()),
            std::vector<float>(size_t(w.q.heads() * w.q.seq())),
            {}};
  AttnOptions opt;
  opt.threads = 2;
  r.report = make_method(spec)->run(w.q, w.k, w.v, r.out, opt, r.lse.data());
  return r;
}

// Dense's output and LSE, bit for bit, and its work: the shortcut adds nothing but the
// estimate's, when one ran.
void expect_dense(const Outcome& r, const Workload& w, const std::string& what) {
  Outcome d = run("dense", w);
  EXPECT_EQ(std::memcmp(r.out.data(), d.out.data(), d.out.nbytes()), 0) << what;
  EXPECT_EQ(std::memcmp(r.lse.data(), d.lse.data(), d.lse.size() * sizeof(float)), 0) << what;
  EXPECT_EQ(r.report.stats.causal_entries, d.report.stats.causal_entries) << what;
  ASSERT_NE(r.report.coverage, nullptr) << what;
  ASSERT_NE(r.report.mask, nullptr) << what;
  EXPECT_TRUE(keeps_every_block(*r.report.mask)) << what;
}

// 1024 keys are 16 blocks of 64: the default budgets (128) cover them, so the estimate never
// runs and the work is dense's exactly.
TEST(DenseShortcut, DefaultBudgetsCoveringTheContextRunDense) {
  const Workload w = text_workload(1024);
  for (const char* spec : {"momo", "mean_pool", "oracle_topk", "momo:k=16", "mean_pool:topk=16"}) {
    const Outcome r = run(spec, w);
    EXPECT_EQ(r.report.dense_shortcut, kDenseByBudget) << spec;
    EXPECT_EQ(r.report.stats.sparsity(), 0.0) << spec;
    expect_dense(r, w, spec);
  }
}

// Budgets that select run their own pass.
TEST(DenseShortcut, BudgetsThatSelectDoNot) {
  const Workload w = text_workload(1024);
  for (const char* spec : {"momo:k=4", "momo:k=8", "mean_pool:topk=4", "oracle_topk:topk=15",
                           "momo:topp=0.9", "mean_pool:topp=0.9"}) {
    const Outcome r = run(spec, w);
    EXPECT_EQ(r.report.dense_shortcut, "") << spec;
    EXPECT_GT(r.report.stats.sparsity(), 0.0) << spec;
  }
}

// A mask that keeps every block through its forced blocks (a sink over the whole context):
// the estimate ran, then dense; momo's work counts its fused pass too.
TEST(DenseShortcut, AnEstimateKeepingEveryBlockRunsDense) {
  const Workload w = text_workload(1024);
  for (const char* spec : {"mean_pool:topk=1,sink=1024", "momo:k=2,sink=16"}) {
    const Outcome r = run(spec, w);
    EXPECT_EQ(r.report.dense_shortcut, kDenseByEstimate) << spec;
    expect_dense(r, w, spec);
  }
  EXPECT_LT(run("momo:k=2,sink=16", w).report.stats.sparsity(), 0.0);  // the fused pass's rows
}

// The skip rule still skips with every block kept: momo with lambda takes no shortcut.
TEST(DenseShortcut, MomoUnderTheSkipRuleKeepsItsPasses) {
  const Workload w = text_workload(1024);
  EXPECT_EQ(run("momo:lambda=0.001", w).report.dense_shortcut, "");
}

}  // namespace
}  // namespace spattn
