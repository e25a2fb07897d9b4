// Intra-modality heads: A-shape and vertical-slash indexes built per modality, restricted to
// the modality's rows; one index per modality fills every row exactly once (a Q-boundary head),
// each piece equal to the exact reference over the keys its coverage lists.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "spattn/error.hpp"
#include "spattn/modality_heads.hpp"
#include "spattn/workload.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

ModalityLayout two_modalities(int64_t seq) {
  ModalityLayout m;
  m.ids.assign(size_t(seq), 0);
  for (int64_t j = 40; j < seq; ++j) m.ids[size_t(j)] = (j / 60) % 2 ? 1 : 0;  // runs of 60
  m.frame_tokens = 0;
  return m;
}

TEST(ModalityHeads, RowsAndPositions) {
  const ModalityLayout m = two_modalities(300);
  const auto pos = modality_positions(m, 1);
  ASSERT_FALSE(pos.empty());
  for (int64_t j : pos) EXPECT_EQ(m.ids[size_t(j)], 1);
  const auto rows = modality_rows(m, 1, 100);  // queries are positions 200..299
  for (int64_t r : rows) EXPECT_EQ(m.ids[size_t(200 + r)], 1);
  EXPECT_EQ(rows.size() + modality_rows(m, 0, 100).size(), 100u);
  EXPECT_TRUE(modality_rows(m, 2, 100).empty());
}

TEST(ModalityHeads, AShapeSinksAreTheModalitysOwnFirstTokens) {
  const ModalityLayout m = two_modalities(300);
  const VerticalSlashIndex x = a_shape_index_for_modality(m, 1, 2, 300, 300, 8, 16);
  const auto pos = modality_positions(m, 1);
  ASSERT_EQ(x.columns.size(), 2u);
  EXPECT_EQ(x.columns[0], std::vector<int64_t>(pos.begin(), pos.begin() + 8));
  ASSERT_EQ(x.offsets[1].size(), 16u);
  EXPECT_EQ(x.offsets[1].back(), 15);
  ASSERT_TRUE(x.rows.has_value());
  EXPECT_EQ(*x.rows, modality_rows(m, 1, 300));
  EXPECT_THROW(a_shape_index_for_modality(m, 1, 2, 300, 301, 8, 16), Error);   // layout length
  EXPECT_THROW(a_shape_index_for_modality(m, 1, 2, 300, 300, 8, 0), Error);    // local
  EXPECT_THROW(a_shape_index_for_modality(m, 16, 2, 300, 300, 8, 16), Error);  // unknown id
}

// With one modality everywhere, the per-modality estimate is MInference's own.
TEST(ModalityHeads, VerticalSlashOfTheOnlyModalityIsTheGlobalEstimate) {
  const Tensor q = test::random_tensor(DType::f32, 4, 200, 32, 1),
               k = test::random_tensor(DType::f32, 2, 230, 32, 2);
  VerticalSlashConfig c;
  c.vertical_size = 20, c.slash_size = 30, c.last_q = 16, c.sink = 3, c.local = 5;
  const VerticalSlashIndex a = vertical_slash_index(q, k, c, {});
  const VerticalSlashIndex b =
      vertical_slash_index_for_modality(q, k, uniform_modality(230), 0, c, {});
  EXPECT_EQ(a.columns, b.columns);
  EXPECT_EQ(a.offsets, b.offsets);
  ASSERT_TRUE(b.rows.has_value());
  EXPECT_EQ(b.rows->size(), 200u);
  AttnOptions full;
  full.causal = false;
  EXPECT_THROW(vertical_slash_index_for_modality(q, k, uniform_modality(230), 0, c, full), Error);
  EXPECT_THROW(vertical_slash_index_for_modality(q, k, uniform_modality(229), 0, c, {}), Error);
}

// Q-boundary on the mixed workload: each modality's vertical-slash index from its own last
// queries, columns among its own keys; the two pieces fill every row once, each row equal to
// the reference over its coverage's keys.
TEST(ModalityHeads, OneIndexPerModalityFillsEveryRowOnce) {
  WorkloadConfig cfg;
  cfg.kind = WorkloadKind::mixed;
  cfg.seq = 1500;
  cfg.heads = 2;
  cfg.kv_heads = 1;
  cfg.dim = 32;
  cfg.frame_tokens = 64;
  cfg.seed = 3;
  const Workload w = make_workload(cfg);
  ASSERT_EQ(w.layout.num_modalities(), 2);
  VerticalSlashConfig c;
  c.vertical_size = 40, c.slash_size = 64, c.tile_rows = 32;
  Tensor out(DType::f32, 2, 1500, 32);
  int64_t entries = 0;
  std::vector<std::unique_ptr<Coverage>> cov;
  std::vector<VerticalSlashIndex> idx;
  for (uint8_t m : {uint8_t(0), uint8_t(1)}) {
    idx.push_back(vertical_slash_index_for_modality(w.q, w.k, w.layout, m, c, {}));
    for (const auto& cols : idx.back().columns)
      for (int64_t j : cols) EXPECT_EQ(w.layout.ids[size_t(j)], m);
    Stats st;
    attention_vertical_slash(w.q, w.k, w.v, out, idx.back(), {}, nullptr, &st);
    entries += st.score_entries;
    cov.push_back(vertical_slash_coverage(idx.back(), 1500, 1500));
  }
  int64_t listed = 0;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 1500; i += 7) {
      const size_t m = w.layout.ids[size_t(i)];
      EXPECT_TRUE(test::coverage_keys(*cov[1 - m], h, i).empty());
      const std::vector<int64_t> keys = test::coverage_keys(*cov[m], h, i);
      ASSERT_FALSE(keys.empty());
      const auto want = test::row_over_keys(w.q, w.k, w.v, h, i, keys);
      for (int64_t d = 0; d < 32; ++d) ASSERT_NEAR(out.view().get(h, i, d), want[size_t(d)], 1e-4);
    }
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 1500; ++i)
      listed += int64_t(test::coverage_keys(*cov[w.layout.ids[size_t(i)]], h, i).size());
  EXPECT_EQ(entries, listed);
}

}  // namespace
}  // namespace spattn
