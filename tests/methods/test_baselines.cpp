// The classic baselines as registry methods: spec parameters, results against the reference
// restricted to what each computed, and coverage (recall) against what the kernel really did.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "masked_reference.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/method.hpp"
#include "spattn/metrics.hpp"

namespace spattn {
namespace {

const char* const kBaselines[] = {"a_shape",        "tri_shape", "sf_fixed",   "sf_strided",
                                  "vertical_slash", "mean_pool", "oracle_topk"};

// Specs small enough that every part of each pattern shows at lengths <= 200, in blocks of 64
// and of other sizes.
const char* const kSpecs[] = {
    "a_shape:sink=16,local=48",
    "a_shape:sink=16,local=48,block_q=32,block_k=32",
    "tri_shape:sink=16,local=48,bottom=40",
    "tri_shape:sink=0,local=1,bottom=70,block_q=128,block_k=64",
    "sf_fixed:local=48,vline_stride=40",
    "sf_fixed:local=48,vline_stride=40,block_q=32,block_k=128",
    "sf_strided:local=32,vline_stride=50",
    "sf_strided:local=32,vline_stride=50,block_q=32,block_k=32",
    "vertical_slash:vertical=20,slash=30,sink=4,local=8",
    "vertical_slash:vertical=20,slash=30,sink=4,local=8,last_q=16,tile_rows=32",
    "mean_pool:topk=1,sink=16,local=16",
    "mean_pool:topk=2,sink=0,local=1,block_q=32,block_k=32",
    "oracle_topk:topk=2",
    "oracle_topk:topk=1,block_q=32,block_k=128",
    "oracle_topk:topp=0.8",
    "oracle_topk:min_share=0.3,block_q=32",
};

struct Shape {
  int64_t lq, lk;
};
const Shape kShapes[] = {{1, 1}, {63, 63}, {65, 65}, {200, 200}, {65, 200}, {1, 200}};

struct Outcome {
  Tensor q, k, v, out;
  std::vector<float> lse;
  MethodReport report;
};
Outcome run(const Method& m, const Shape& s, uint64_t seed, bool causal = true) {
  Outcome r{test::random_tensor(DType::f32, 4, s.lq, 32, seed),  // GQA: 4 q heads over 2 kv heads
            test::random_tensor(DType::f32, 2, s.lk, 32, seed + 1),
            test::random_tensor(DType::f32, 2, s.lk, 32, seed + 2),
            Tensor(DType::f32, 4, s.lq, 32),
            std::vector<float>(size_t(4 * s.lq)),
            MethodReport{}};
  AttnOptions opt;
  opt.causal = causal;
  r.report = m.run(r.q, r.k, r.v, r.out, opt, r.lse.data());
  return r;
}

// The entries a coverage lists, as a predicate.
test::EntryPredicate coverage_predicate(const Coverage& cov) {
  return [&cov](int64_t h, int64_t i, int64_t j) {
    std::vector<KeyRange> r;
    cov.row_ranges(h, i, r);
    for (const KeyRange& x : r)
      if (j >= x.begin && j < x.end) return true;
    return false;
  };
}

std::string label(const char* spec, const Shape& s) {
  return std::string(spec) + " at " + std::to_string(s.lq) + "x" + std::to_string(s.lk);
}

TEST(BaselineRegistry, KnowsEveryBaselineWithDefaults) {
  const std::vector<std::string> names = method_names();
  for (const char* name : kBaselines) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
    auto m = make_method(name);
    EXPECT_EQ(m->name(), name);
  }
}

TEST(BaselineParams, SpecSetsTheParameters) {
  EXPECT_NO_THROW(make_method("vertical_slash:vertical=1000,slash=2048"));
  auto m = make_method("a_shape:sink=64,local=128,block_q=32,block_k=64");
  Outcome r = run(*m, {200, 200}, 1);
  MaskGeometry g;
  g.heads = 4;
  g.q_len = g.kv_len = 200;
  g.block_q = 32;
  const BlockMask want = a_shape_mask(g, 64, 128);
  ASSERT_NE(r.report.mask, nullptr);
  EXPECT_EQ(r.report.mask->block_q, 32);
  EXPECT_EQ(r.report.mask->to_dense(), want.to_dense());
}

TEST(BaselineParams, RejectNegativeSink) {
  for (const char* spec :
       {"a_shape:sink=-1", "tri_shape:sink=-1", "vertical_slash:sink=-1", "mean_pool:sink=-1"})
    EXPECT_THROW(make_method(spec), Error) << spec;
}

TEST(BaselineParams, RejectZeroSlashAndOtherEmptyBudgets) {
  for (const char* spec :
       {"vertical_slash:slash=0", "vertical_slash:local=0", "vertical_slash:last_q=0",
        "vertical_slash:vertical=-1", "a_shape:local=0", "tri_shape:bottom=-1",
        "sf_fixed:vline_stride=0", "sf_strided:local=0", "mean_pool:topk=-1", "oracle_topk:topk=0",
        "oracle_topk:topp=0", "oracle_topk:topp=1.5", "oracle_topk:min_share=1",
        "oracle_topk:min_share=-0.1", "oracle_topk:topk=4,topp=0.5",
        "oracle_topk:topp=0.5,min_share=0.1", "oracle_topk:local=-1"})
    EXPECT_THROW(make_method(spec), Error) << spec;
}

TEST(BaselineParams, RejectUnknownKeys) {
  for (const char* name : kBaselines)
    EXPECT_THROW(make_method(std::string(name) + ":bogus=1"), Error) << name;
  EXPECT_THROW(make_method("a_shape:vertical=10"), Error);  // another method's key
}

TEST(BaselineParams, RejectMalformedValues) {
  for (const char* spec :
       {"a_shape:local=abc", "vertical_slash:slash=2.5", "mean_pool:topk=", "sf_fixed:block_q=0",
        "tri_shape:block_k=-64", "vertical_slash:tile_rows=129"})
    EXPECT_THROW(make_method(spec), Error) << spec;
}

// Oracle block masses come in 64-key tiles; other key blocks are an Error at run time.
TEST(BaselineParams, OracleRejectsKeyBlocksThatAreNotTiles) {
  // topk=1 selects (the default 128 would cover the context and run dense, checking nothing).
  auto m = make_method("oracle_topk:topk=1,block_k=32");
  EXPECT_THROW(run(*m, {65, 65}, 1), Error);
}

TEST(BaselineMethods, MatchTheReferenceRestrictedToTheirMask) {
  for (const char* spec : kSpecs)
    for (const Shape& s : kShapes) {
      auto m = make_method(spec);
      Outcome r = run(*m, s, 11);
      const BlockMask* mask = r.report.mask.get();
      ASSERT_NE(mask, nullptr) << spec;
      ASSERT_NE(r.report.coverage, nullptr) << spec;
      EXPECT_EQ(r.report.path, KernelPath::prefill) << spec;  // block-sparse: no decode kernel
      mask->validate();
      // Block methods computed exactly their mask; vertical_slash's block view holds at least
      // what it computed, so it is checked through its coverage (itself checked in the Mask
      // tests against the index written out by hand).
      const Coverage* cov = r.report.coverage.get();
      const bool token_level = std::string(spec).rfind("vertical_slash", 0) == 0;
      const test::MaskedRef ref = test::masked_reference(
          r.q, r.k, r.v, true,
          token_level ? coverage_predicate(*cov) : test::mask_predicate(*mask));
      test::expect_matches(r.out, r.lse, ref, label(spec, s));
      EXPECT_EQ(r.report.stats.score_entries, ref.entries) << label(spec, s);
      EXPECT_EQ(r.report.stats.causal_entries, 4 * attention_entries(s.lq, s.lk, true))
          << label(spec, s);
      if (!token_level) {
        EXPECT_EQ(mask->entries(), ref.entries) << label(spec, s);
      }
    }
}

// Recall from the report's coverage equals the recall the method's own output shows: a row's softmax mass
// over what it computed is exp(LSE_method - LSE_exact).
TEST(BaselineMethods, CoverageRecallEqualsMeasuredRecall) {
  for (const char* spec : kSpecs)
    for (const Shape& s : kShapes) {
      auto m = make_method(spec);
      Outcome r = run(*m, s, 21);
      Tensor ref(DType::f32, 4, s.lq, 32);
      std::vector<float> lse_ref(size_t(4 * s.lq));
      attention_reference(r.q, r.k, r.v, ref, {}, lse_ref.data());
      double mean = 0, worst = 1;
      for (size_t i = 0; i < r.lse.size(); ++i) {
        const double rec = std::exp(double(r.lse[i]) - double(lse_ref[i]));  // 0 when -inf
        mean += rec / double(r.lse.size());
        worst = std::min(worst, rec);
      }
      const Recall got = attention_recall(r.q, r.k, *r.report.coverage, {}, 1 << 20);
      EXPECT_EQ(got.rows, 4 * s.lq) << label(spec, s);
      EXPECT_NEAR(got.mean, mean, 1e-4) << label(spec, s);
      EXPECT_NEAR(got.worst, worst, 1e-4) << label(spec, s);
      // And the entry count: what coverage lists is what the kernel counted.
      int64_t listed = 0;
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t i = 0; i < s.lq; ++i) {
          std::vector<KeyRange> rr;
          r.report.coverage->row_ranges(h, i, rr);
          for (const KeyRange& x : rr) listed += x.end - x.begin;
        }
      EXPECT_EQ(listed, r.report.stats.score_entries) << label(spec, s);
    }
}

// One flag per causal key block of (head h, query block qb): whether mask keeps it.
std::vector<uint8_t> kept_flags(const BlockMask& mask, int64_t h, int64_t qb, int64_t limit) {
  std::vector<uint8_t> kept(size_t(limit), 0);
  for (int32_t kb : mask.row(h, qb)) kept[size_t(kb)] = 1;
  return kept;
}

// The oracle's mass budgets keep, per query block, what their rule says on the exact block masses
// (block_mass, computed here apart from the method): topp the fewest largest blocks reaching P of
// the query block's mass, min_share every block holding at least T of it; and a topp run's
// recall, the mean of its rows' kept mass, is at least P. With local=W the blocks of each row's W
// most recent keys are kept first and topp adds the fewest largest others.
TEST(BaselineMethods, OracleMassBudgetsKeepTheirRuleOnTheExactMasses) {
  const int64_t heads = 4, n = 512, d = 32, bq = 64, bk = 64;
  Tensor q = test::random_tensor(DType::f32, heads, n, d, 41, 2.0f);  // peaked rows
  Tensor k = test::random_tensor(DType::f32, 2, n, d, 42);
  Tensor v = test::random_tensor(DType::f32, 2, n, d, 43);
  AttnOptions opt;
  for (const int64_t local : {0, 100})
    for (const double p : {0.5, 0.7, 0.8}) {
      auto m =
          make_method("oracle_topk:topp=" + std::to_string(p) + ",local=" + std::to_string(local));
      Tensor out(DType::f32, heads, n, d);
      std::vector<float> lse(size_t(heads * n));
      const MethodReport rep = m->run(q, k, v, out, opt, lse.data());
      ASSERT_NE(rep.mask, nullptr);
      const BlockMask& mask = *rep.mask;
      int64_t dropped = 0;
      for (int64_t h = 0; h < heads; ++h) {
        const BlockMassGrid g = block_mass(q, k, v, h, bq, bk, opt);
        for (int64_t qb = 0; qb < g.n_qb; ++qb) {
          const int64_t limit = g.causal_blocks(qb);
          const std::vector<uint8_t> kept = kept_flags(mask, h, qb, limit);
          // Forced: the blocks of keys [p0 - local + 1, p1], each row's local most recent.
          const int64_t first_forced =
              local > 0 ? std::max<int64_t>(qb * bq - local + 1, 0) / bk : limit;
          double total = 0, held = 0, least_kept = 2, most_left = -1;
          for (int64_t kb = 0; kb < limit; ++kb) {
            const double x = g.mass[size_t(qb * g.n_kb + kb)];
            const bool forced = kb >= first_forced;
            total += x;
            if (forced) {
              EXPECT_TRUE(kept[size_t(kb)]) << "local block " << kb;
            }
            if (kept[size_t(kb)])
              held += x, least_kept = forced ? least_kept : std::min(least_kept, x);
            else
              most_left = std::max(most_left, x), ++dropped;
          }
          const std::string at = "topp=" + std::to_string(p) + ",local=" + std::to_string(local) +
                                 " head " + std::to_string(h) + " qb " + std::to_string(qb);
          EXPECT_GE(held, p * total - 1e-9) << at;  // reaches P
          if (least_kept <= 1) {  // some block beyond the forced: the fewest, and the largest ones
            EXPECT_LT(held - least_kept, p * total + 1e-9) << at;
          }
          EXPECT_GE(least_kept, most_left) << at;
        }
      }
      EXPECT_GT(dropped, 0) << p;  // a budget that kept everything would check nothing
      const Recall rec = attention_recall(q, k, *rep.coverage, opt, 1 << 20);
      EXPECT_GE(rec.mean, p - 1e-5) << p;
    }
  for (const double t : {0.05, 0.2}) {
    auto m = make_method("oracle_topk:min_share=" + std::to_string(t) + ",block_q=32");
    Tensor out(DType::f32, heads, n, d);
    std::vector<float> lse(size_t(heads * n));
    const MethodReport rep = m->run(q, k, v, out, opt, lse.data());
    ASSERT_NE(rep.mask, nullptr);
    const BlockMask& mask = *rep.mask;
    int64_t kept_blocks = 0, dropped = 0;
    for (int64_t h = 0; h < heads; ++h) {
      const BlockMassGrid g = block_mass(q, k, v, h, 32, bk, opt);
      for (int64_t qb = 0; qb < g.n_qb; ++qb) {
        const int64_t limit = g.causal_blocks(qb);
        const std::vector<uint8_t> kept = kept_flags(mask, h, qb, limit);
        double total = 0;
        for (int64_t kb = 0; kb < limit; ++kb) total += g.mass[size_t(qb * g.n_kb + kb)];
        for (int64_t kb = 0; kb < limit; ++kb) {
          const bool want = g.mass[size_t(qb * g.n_kb + kb)] >= t * total;
          EXPECT_EQ(bool(kept[size_t(kb)]), want)
              << "min_share=" << t << " head " << h << " qb " << qb << " kb " << kb;
          kept_blocks += want, dropped += !want;
        }
      }
    }
    EXPECT_GT(dropped, 0) << t;
    EXPECT_GT(kept_blocks, 0) << t;
  }
}

// The positional patterns and MInference's estimate are causal; mean-pool and the oracle are
// not tied to positions and run on non-causal attention too.
TEST(BaselineMethods, CausalOnlyPatternsRejectNonCausalInput) {
  for (const char* spec : {"a_shape", "tri_shape", "sf_fixed", "sf_strided", "vertical_slash"}) {
    auto m = make_method(spec);
    EXPECT_THROW(run(*m, {65, 65}, 1, /*causal=*/false), Error) << spec;
  }
  for (const char* spec : {"mean_pool:topk=1,sink=0,local=1", "oracle_topk:topk=1"}) {
    auto m = make_method(spec);
    Outcome r = run(*m, {200, 100}, 31, /*causal=*/false);
    ASSERT_NE(r.report.mask, nullptr);
    EXPECT_FALSE(r.report.mask->causal);
    test::expect_matches(
        r.out, r.lse,
        test::masked_reference(r.q, r.k, r.v, false, test::mask_predicate(*r.report.mask)), spec);
  }
}

}  // namespace
}  // namespace spattn
