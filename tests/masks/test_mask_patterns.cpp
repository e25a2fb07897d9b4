// Static mask builders (A-shape, tri-shape, SF-fixed, SF-strided) against their token-level
// rules rounded out to blocks by brute force, and the block-sparse kernel on each against the
// reference restricted to the same mask. Also block_mask_coverage.
#include <gtest/gtest.h>

#include "masked_reference.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn {
namespace {

// Token rule: does the row at absolute position p attend to key j (j <= p)?
using TokenRule = std::function<bool(int64_t p, int64_t j)>;

// The block closure, obviously: keep (qb, kb) when some row of qb and some causally visible
// key of kb satisfy the rule.
std::vector<uint8_t> closure(const MaskGeometry& g, const TokenRule& rule) {
  const int64_t nq = (g.q_len + g.block_q - 1) / g.block_q,
                nk = (g.kv_len + g.block_k - 1) / g.block_k;
  std::vector<uint8_t> grid(size_t(g.heads * nq * nk), 0);
  for (int64_t i = 0; i < g.q_len; ++i) {
    const int64_t p = g.kv_len - g.q_len + i;
    for (int64_t j = 0; j <= p; ++j)
      if (rule(p, j))
        for (int64_t h = 0; h < g.heads; ++h)
          grid[size_t((h * nq + i / g.block_q) * nk + j / g.block_k)] = 1;
  }
  return grid;
}

struct Pattern {
  std::string name;
  std::function<BlockMask(const MaskGeometry&)> build;
  std::function<TokenRule(const MaskGeometry&)> rule;
};

// Parameters small enough that every part of each pattern shows at lengths <= 333.
std::vector<Pattern> patterns() {
  return {
      {"a_shape sink=5 local=40", [](const MaskGeometry& g) { return a_shape_mask(g, 5, 40); },
       [](const MaskGeometry&) -> TokenRule {
         return [](int64_t p, int64_t j) { return j < 5 || p - j < 40; };
       }},
      {"a_shape sink=0 local=1", [](const MaskGeometry& g) { return a_shape_mask(g, 0, 1); },
       [](const MaskGeometry&) -> TokenRule {
         return [](int64_t p, int64_t j) { return p == j; };
       }},
      {"tri_shape sink=5 local=40 bottom=30",
       [](const MaskGeometry& g) { return tri_shape_mask(g, 5, 40, 30); },
       [](const MaskGeometry& g) -> TokenRule {
         const int64_t kv = g.kv_len;
         return [kv](int64_t p, int64_t j) { return p >= kv - 30 || j < 5 || p - j < 40; };
       }},
      {"sf_fixed local=48 vline_stride=40",
       [](const MaskGeometry& g) { return sf_fixed_mask(g, 48, 40); },
       [](const MaskGeometry&) -> TokenRule {
         return [](int64_t p, int64_t j) { return j / 48 == p / 48 || j % 40 == 0; };
       }},
      {"sf_fixed local=100 vline_stride=100",
       [](const MaskGeometry& g) { return sf_fixed_mask(g, 100, 100); },
       [](const MaskGeometry&) -> TokenRule {
         return [](int64_t p, int64_t j) { return j / 100 == p / 100 || j % 100 == 0; };
       }},
      {"sf_strided local=32 vline_stride=50",
       [](const MaskGeometry& g) { return sf_strided_mask(g, 32, 50); },
       [](const MaskGeometry&) -> TokenRule {
         return [](int64_t p, int64_t j) { return p - j < 32 || (p - j) % 50 == 0; };
       }},
      {"sf_strided local=1 vline_stride=130",
       [](const MaskGeometry& g) { return sf_strided_mask(g, 1, 130); },
       [](const MaskGeometry&) -> TokenRule {
         return [](int64_t p, int64_t j) { return (p - j) % 130 == 0; };
       }},
  };
}

struct Geo {
  int64_t lq, lk, bq, bk;
};
const Geo kGeos[] = {{1, 1, 64, 64},     {63, 63, 64, 64},   {65, 65, 64, 64},
                     {200, 200, 64, 64}, {200, 200, 32, 32}, {200, 200, 128, 64},
                     {65, 200, 64, 128}, {1, 200, 64, 64},   {200, 333, 32, 128}};

MaskGeometry geometry(const Geo& g, int64_t heads) {
  MaskGeometry m;
  m.heads = heads;
  m.q_len = g.lq;
  m.kv_len = g.lk;
  m.block_q = g.bq;
  m.block_k = g.bk;
  return m;
}

std::string label(const Pattern& p, const Geo& g) {
  return p.name + " at " + std::to_string(g.lq) + "x" + std::to_string(g.lk) + " blocks " +
         std::to_string(g.bq) + "x" + std::to_string(g.bk);
}

TEST(MaskPatterns, EqualTheTokenRuleRoundedOutToBlocks) {
  for (const Pattern& p : patterns())
    for (const Geo& geo : kGeos) {
      const MaskGeometry g = geometry(geo, 2);
      BlockMask m = p.build(g);
      EXPECT_NO_THROW(m.validate()) << label(p, geo);
      EXPECT_TRUE(m.causal);
      EXPECT_EQ(m.to_dense(), closure(g, p.rule(g))) << label(p, geo);
    }
}

TEST(MaskPatterns, KernelMatchesMaskedReference) {
  for (const Pattern& p : patterns())
    for (const Geo& geo : kGeos) {
      Tensor q = test::random_tensor(DType::f32, 4, geo.lq, 32, 21);  // GQA: 4 q heads, 2 kv
      Tensor k = test::random_tensor(DType::f32, 2, geo.lk, 32, 22);
      Tensor v = test::random_tensor(DType::f32, 2, geo.lk, 32, 23);
      Tensor out(DType::f32, 4, geo.lq, 32);
      std::vector<float> lse(size_t(4 * geo.lq));
      const BlockMask m = p.build(geometry(geo, 4));
      Stats st;
      attention_block_sparse(q, k, v, out, m, {}, lse.data(), &st);
      const test::MaskedRef ref = test::masked_reference(q, k, v, true, test::mask_predicate(m));
      test::expect_matches(out, lse, ref, label(p, geo));
      EXPECT_EQ(st.score_entries, ref.entries) << label(p, geo);
      EXPECT_EQ(m.entries(), ref.entries) << label(p, geo);
    }
}

// Tri-shape with bottom >= q_len is dense; A-shape with a window past the start is dense.
TEST(MaskPatterns, DegenerateParametersGiveTheFullMask) {
  const MaskGeometry g = geometry({200, 333, 64, 64}, 2);
  const BlockMask full = BlockMask::full(2, 200, 333, 64, 64, true);
  EXPECT_EQ(tri_shape_mask(g, 0, 1, 200).to_dense(), full.to_dense());
  EXPECT_EQ(a_shape_mask(g, 0, 333).to_dense(), full.to_dense());
  EXPECT_EQ(sf_strided_mask(g, 1, 1).to_dense(), full.to_dense());
  EXPECT_NE(tri_shape_mask(g, 0, 1, 0).to_dense(), full.to_dense());
}

// a_shape_block_keys (context parallelism's form of the pattern) against a_shape_mask: the
// key blocks its ranges cover for each query block are the mask's blocks of that row block.
TEST(MaskPatterns, AShapeBlockKeysAreTheMasksBlocks) {
  struct Case {
    int64_t n, bq, bk, sink, local;
  };
  for (const Case c : {Case{300, 16, 16, 16, 64}, Case{333, 64, 32, 5, 40}, Case{257, 16, 64, 0, 1},
                       Case{200, 32, 16, 128, 17}, Case{512, 64, 64, 0, 4096}}) {
    const MaskGeometry g = geometry({c.n, c.n, c.bq, c.bk}, 1);
    const std::vector<uint8_t> dense = a_shape_mask(g, c.sink, c.local).to_dense();
    const int64_t nq = (c.n + c.bq - 1) / c.bq, nk = (c.n + c.bk - 1) / c.bk;
    for (int64_t qb = 0; qb < nq; ++qb) {
      const int64_t p0 = qb * c.bq, p1 = std::min(c.n, p0 + c.bq) - 1;
      std::vector<uint8_t> mine(static_cast<size_t>(nk), 0);
      int64_t last_end = -1;
      for (const KeyRange& r : a_shape_block_keys(p0, p1, c.sink, c.local, c.bk)) {
        EXPECT_LT(r.begin, r.end);
        EXPECT_GT(r.begin, last_end);  // ascending and disjoint
        last_end = r.end;
        for (int64_t j = r.begin; j < std::min(r.end, p1 + 1); ++j) mine[size_t(j / c.bk)] = 1;
      }
      const std::vector<uint8_t> want(dense.begin() + qb * nk, dense.begin() + (qb + 1) * nk);
      EXPECT_EQ(mine, want) << "n " << c.n << " block " << qb;
    }
  }
}

TEST(MaskPatterns, RejectBadParameters) {
  const MaskGeometry g = geometry({200, 200, 64, 64}, 1);
  EXPECT_THROW(a_shape_mask(g, -1, 64), Error);
  EXPECT_THROW(a_shape_mask(g, 4, 0), Error);
  EXPECT_THROW(tri_shape_mask(g, -1, 64, 64), Error);
  EXPECT_THROW(tri_shape_mask(g, 4, 64, -1), Error);
  EXPECT_THROW(sf_fixed_mask(g, 0, 64), Error);
  EXPECT_THROW(sf_fixed_mask(g, 64, 0), Error);
  EXPECT_THROW(sf_strided_mask(g, 0, 64), Error);
  EXPECT_THROW(sf_strided_mask(g, 64, 0), Error);
  MaskGeometry bad = g;
  bad.block_k = 0;
  EXPECT_THROW(a_shape_mask(bad, 4, 64), Error);
  bad = g;
  bad.q_len = 201;  // causal patterns need q_len <= kv_len
  EXPECT_THROW(a_shape_mask(bad, 4, 64), Error);
}

// block_mask_coverage lists exactly the mask's causally visible keys, row by row.
TEST(MaskCoverage, BlockMaskCoverageIsTheMask) {
  for (bool causal : {true, false}) {
    BlockMask m = a_shape_mask(geometry({200, 333, 32, 64}, 2), 5, 40);
    m.causal = causal;
    const auto cov = block_mask_coverage(m);
    const auto keep = test::mask_predicate(m);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 200; ++i) {
        std::vector<KeyRange> r;
        cov->row_ranges(h, i, r);
        std::vector<uint8_t> got(333, 0), want(333, 0);
        for (size_t t = 0; t < r.size(); ++t) {
          ASSERT_LT(r[t].begin, r[t].end);
          if (t) {
            ASSERT_GT(r[t].begin, r[t - 1].end) << "ranges must be disjoint and coalesced";
          }
          for (int64_t j = r[t].begin; j < r[t].end; ++j) got[size_t(j)] = 1;
        }
        const int64_t visible = causal ? 333 - 200 + i + 1 : 333;
        for (int64_t j = 0; j < visible; ++j) want[size_t(j)] = keep(h, i, j);
        ASSERT_EQ(got, want) << "head " << h << " row " << i;
      }
  }
}

}  // namespace
}  // namespace spattn
