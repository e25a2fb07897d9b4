// BLASST prefill: lambda 0 is the dense kernel bit for bit; skipped tiles really skip work and
// the output is exact attention over what was kept; one margin pass predicts every lambda.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "spattn/blasst.hpp"
#include "spattn/error.hpp"
#include "spattn/workload.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

Workload text(int64_t seq, DType t = DType::f32) {
  WorkloadConfig c;
  c.kind = WorkloadKind::text;
  c.seq = seq;
  c.heads = 4;
  c.kv_heads = 2;
  c.dim = 64;
  c.dtype = t;
  c.seed = 3;
  return make_workload(c);
}

TEST(BlasstKernel, LambdaZeroIsBitwiseDense) {
  for (DType t : {DType::f32, DType::bf16}) {
    Workload w = text(700, t);
    Tensor a(DType::f32, 4, 700, 64), b(DType::f32, 4, 700, 64);
    std::vector<float> la(4 * 700), lb(4 * 700);
    Stats sa, sb;
    SkipStats skip;
    attention_dense(w.q, w.k, w.v, a, {}, la.data(), &sa);
    attention_blasst(w.q, w.k, w.v, b, 0.0, {}, lb.data(), &sb, &skip);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * 4), 0);
    EXPECT_EQ(sb.tiles_skipped, 0);
    EXPECT_EQ(sb.score_entries, sa.score_entries);
    EXPECT_EQ(skip.skipped_fraction(), 0.0);
  }
}

TEST(BlasstKernel, SkippedTilesSkipWorkAndKeptTilesAreExact) {
  Workload w = text(1000);
  const double lambda = 1e-3;
  Tensor out(DType::f32, 4, 1000, 64);
  Stats st;
  SkipStats skip;
  skip.record_tiles = true;
  attention_blasst(w.q, w.k, w.v, out, lambda, {}, nullptr, &st, &skip);
  ASSERT_GT(st.tiles_skipped, 0);
  int64_t visited = 0, skipped = 0, rec = 0;
  for (size_t i = 0; i < skip.visited.size(); ++i) {
    visited += skip.visited[i];
    skipped += skip.skipped[i];
    rec += int64_t(skip.skipped_tiles[i].size());
  }
  EXPECT_EQ(visited, st.tiles_visited);
  EXPECT_EQ(skipped, st.tiles_skipped);
  EXPECT_EQ(rec, skipped);
  EXPECT_GT(st.sparsity(), 0.0);
  // exp and P.V ran only on kept tiles: the entries that entered the softmax are exactly the
  // coverage's, and the output is exact attention over them.
  auto cov = blasst_coverage(skip, 1000, 1000, true);
  int64_t entries = 0;
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 1000; i += 7) {
      const std::vector<int64_t> keys = test::coverage_keys(*cov, h, i);
      const auto want = test::row_over_keys(w.q, w.k, w.v, h, i, keys);
      for (int64_t c = 0; c < 64; ++c) ASSERT_NEAR(out.view().get(h, i, c), want[size_t(c)], 1e-4);
    }
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 1000; ++i) entries += int64_t(test::coverage_keys(*cov, h, i).size());
  EXPECT_EQ(entries, st.score_entries);
}

TEST(BlasstKernel, MarginsPredictSparsityForEveryLambda) {
  Workload w = text(1500);
  const TileMargins tm = blasst_tile_margins(w.q, w.k, w.v);
  for (double lambda : {1e-8, 1e-5, 1e-3, 1e-2, 0.1, 0.5}) {
    Tensor out(DType::f32, 4, 1500, 64);
    Stats st;
    attention_blasst(w.q, w.k, w.v, out, lambda, {}, nullptr, &st);
    EXPECT_NEAR(tm.sparsity_at(lambda), st.sparsity(), 1e-12) << lambda;
  }
  EXPECT_EQ(tm.sparsity_at(0.0), 0.0);
}

TEST(BlasstKernel, PerHeadAndPerTileFractions) {
  Workload w = text(800);
  Tensor out(DType::f32, 4, 800, 64);
  SkipStats skip;
  attention_blasst(w.q, w.k, w.v, out, 1e-2, {}, nullptr, nullptr, &skip);
  EXPECT_EQ(skip.heads, 4);
  EXPECT_EQ(skip.q_tiles, (800 + 63) / 64);
  double mean = 0;
  for (int64_t h = 0; h < 4; ++h) {
    const double f = skip.head_skipped_fraction(h);
    EXPECT_GE(f, 0.0);
    EXPECT_LE(f, 1.0);
    mean += f / 4;
  }
  EXPECT_NEAR(mean, skip.skipped_fraction(), 0.2);
  EXPECT_EQ(skip.tile_skipped_fraction(0, 0), 0.0);  // a row's first tile is never skipped
  EXPECT_THROW(skip.head_skipped_fraction(4), Error);
}

TEST(BlasstKernel, BadLambdaRaisesError) {
  Workload w = text(64);
  Tensor out(DType::f32, 4, 64, 64);
  for (double bad : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()})
    EXPECT_THROW(attention_blasst(w.q, w.k, w.v, out, bad), Error) << bad;
  TileMargins tm;
  EXPECT_THROW(tm.sparsity_at(-1), Error);
}

}  // namespace
}  // namespace spattn
