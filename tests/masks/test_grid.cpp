// MMInference's grid head on the permuted layout against the exact reference restricted to the
// same un-permuted entries (a plain predicate written from the rule, not from the layout code),
// entry for entry: odd lengths, GQA, f32 and bf16, phases 0 and stride - 1, strides that do not
// divide the length, each line option. Then the row-group kernel alone, the estimate, and bad
// input.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "masked_reference.hpp"
#include "spattn/error.hpp"
#include "spattn/grid.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/row_groups.hpp"
#include "spattn/workload.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

int64_t mod(int64_t a, int64_t s) { return ((a % s) + s) % s; }

// The grid head's entries from its definition: sink tiles, the local band of whole tiles, and
// outside them the row's lines (hline: a row on the grid sees every key; vline: key on the grid;
// slash: key on the row's diagonal class).
test::EntryPredicate grid_predicate(const std::vector<GridLines>& lines, const GridConfig& c,
                                    int64_t lq, int64_t lk) {
  return [=](int64_t h, int64_t i, int64_t j) {
    const int64_t pos = lk - lq + i, s = lines[size_t(h)].stride, ph = lines[size_t(h)].phase;
    if (j < 64 * c.sink_blocks) return true;
    if (j / 64 >= pos / 64 - c.local_blocks) return true;
    return (c.hline && mod(pos - ph, s) == 0) || (c.vline && mod(j - ph, s) == 0) ||
           (c.slash && mod(pos - j, s) == 0);
  };
}

struct Case {
  int64_t hq, hk, lq, lk, d;
  std::vector<GridLines> lines;
  GridConfig c;
};

void check_case(const Case& cs, DType t, const std::string& what) {
  SCOPED_TRACE(what);
  Tensor q = test::random_tensor(t, cs.hq, cs.lq, cs.d, 11, 1.5f),
         k = test::random_tensor(t, cs.hk, cs.lk, cs.d, 12, 1.5f),
         v = test::random_tensor(t, cs.hk, cs.lk, cs.d, 13);
  Tensor out(DType::f32, cs.hq, cs.lq, cs.d);
  std::vector<float> lse(size_t(cs.hq * cs.lq));
  Stats st;
  attention_grid(q, k, v, out, cs.lines, cs.c, {}, lse.data(), &st);
  const auto keep = grid_predicate(cs.lines, cs.c, cs.lq, cs.lk);
  const test::MaskedRef ref = test::masked_reference(q, k, v, true, keep);
  EXPECT_EQ(st.score_entries, ref.entries);
  EXPECT_EQ(st.causal_entries, cs.hq * attention_entries(cs.lq, cs.lk, true));
  // Coverage in original coordinates: exactly the predicate's keys, row by row.
  auto cov = grid_coverage(cs.lines, cs.c, cs.lq, cs.lk);
  for (int64_t h = 0; h < cs.hq; ++h)
    for (int64_t i = 0; i < cs.lq; ++i) {
      std::vector<int64_t> want;
      for (int64_t j = 0; j <= cs.lk - cs.lq + i; ++j)
        if (keep(h, i, j)) want.push_back(j);
      ASSERT_EQ(test::coverage_keys(*cov, h, i), want) << "head " << h << " row " << i;
    }
  if (t == DType::f32) {
    test::expect_matches(out, lse, ref, what);
    return;
  }
  // bf16 operands (dot-product path rounds P to bf16): a looser bound, same entries.
  for (int64_t h = 0; h < cs.hq; ++h)
    for (int64_t i = 0; i < cs.lq; ++i) {
      ASSERT_NEAR(lse[size_t(h * cs.lq + i)], ref.lse[size_t(h * cs.lq + i)], 2e-2)
          << h << " " << i;
      for (int64_t x = 0; x < cs.d; ++x)
        ASSERT_NEAR(out.view().get(h, i, x), ref.out[size_t((h * cs.lq + i) * cs.d + x)], 2e-2)
            << "head " << h << " row " << i << " dim " << x;
    }
}

TEST(GridHead, PermutedKernelEqualsMaskedReference) {
  // Odd lengths, strides that do not divide them, phases 0 and stride - 1, GQA (heads 0 and 1
  // share a kv head and a grid, so one pack; heads 2 and 3 differ).
  const std::vector<GridLines> lines = {{7, 0}, {7, 0}, {16, 15}, {5, 4}};
  for (DType t : {DType::f32, DType::bf16}) {
    const std::string tn = t == DType::f32 ? "f32" : "bf16";
    check_case({4, 2, 389, 389, 64, lines, {}}, t, tn + " prefill 389");
    check_case({4, 2, 261, 389, 32, lines, {}}, t, tn + " last 261 rows of 389");
  }
}

TEST(GridHead, EachLineOptionAndBandSize) {
  const std::vector<GridLines> lines = {{9, 8}, {4, 0}};
  struct Opt {
    bool hline, vline, slash;
    int64_t sink, local;
  };
  for (const Opt o :
       {Opt{true, false, false, 1, 1}, Opt{false, true, false, 1, 0}, Opt{false, false, true, 2, 1},
        Opt{true, true, false, 0, 2}, Opt{false, true, true, 1, 1}}) {
    GridConfig c;
    c.hline = o.hline, c.vline = o.vline, c.slash = o.slash;
    c.sink_blocks = o.sink, c.local_blocks = o.local;
    check_case({2, 1, 333, 333, 32, lines, c}, DType::f32,
               "hline " + std::to_string(o.hline) + " vline " + std::to_string(o.vline) +
                   " slash " + std::to_string(o.slash) + " sink " + std::to_string(o.sink) +
                   " local " + std::to_string(o.local));
  }
}

TEST(RowGroups, GatheredRowsWriteBackToTheirOwnRows) {
  const int64_t lk = 200, d = 32;
  Tensor q = test::random_tensor(DType::f32, 2, lk, d, 1),
         k = test::random_tensor(DType::f32, 1, lk, d, 2),
         v = test::random_tensor(DType::f32, 1, lk, d, 3);
  // Keys packed in reverse; rows 3, 150, 199 against packed keys [10, 60) and [120, 200).
  std::vector<int64_t> order(static_cast<size_t>(lk));
  for (int64_t j = 0; j < lk; ++j) order[size_t(j)] = lk - 1 - j;
  PackedKV kv(1, d, DType::f32, lk);
  kv.append_rows(k, v, order);
  std::vector<RowGroup> groups = {{{3, 150, 199}, {{10, 60}, {120, 200}}}, {{0, 7}, {{0, 5}}}};
  Tensor out(DType::f32, 2, lk, d);
  AttnOptions opt;
  opt.q_start = 0;
  attention_row_groups(q, kv, groups, out, opt);
  for (int64_t h = 0; h < 2; ++h)
    for (const RowGroup& g : groups)
      for (int64_t i : g.rows) {
        std::vector<int64_t> keys;
        for (const KeyRange& r : g.keys)
          for (int64_t x = r.begin; x < r.end; ++x)
            if (order[size_t(x)] <= i) keys.push_back(order[size_t(x)]);
        std::sort(keys.begin(), keys.end());
        const auto want = test::row_over_keys(q, k, v, h, i, keys);
        for (int64_t c = 0; c < d; ++c) ASSERT_NEAR(out.view().get(h, i, c), want[size_t(c)], 1e-4);
      }
  EXPECT_EQ(out.view().get(0, 1, 0), 0.0f);  // in no group: untouched
  EXPECT_THROW(attention_row_groups(q, kv, {{{3}, {{0, 5}}}, {{3}, {{0, 5}}}}, out, opt), Error);
  EXPECT_THROW(attention_row_groups(q, kv, {{{5, 4}, {{0, 5}}}}, out, opt), Error);
  EXPECT_THROW(attention_row_groups(q, kv, {{{5}, {{0, lk + 1}}}}, out, opt), Error);
  EXPECT_THROW(attention_row_groups(q, kv, {{{lk}, {{0, 5}}}}, out, opt), Error);
}

void expect_error(const std::function<void()>& f, const std::string& mention) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected an error mentioning '" << mention << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
  }
}

TEST(GridHead, BadInputRaisesError) {
  const int64_t lk = 256, d = 32;
  Tensor q = test::random_tensor(DType::f32, 2, lk, d, 1),
         k = test::random_tensor(DType::f32, 1, lk, d, 2),
         v = test::random_tensor(DType::f32, 1, lk, d, 3), out(DType::f32, 2, lk, d);
  const GridConfig c;
  expect_error([&] { grid_layout({0, 0}, c, lk, lk); }, "stride must be >= 1");
  expect_error([&] { grid_layout({lk + 1, 0}, c, lk, lk); }, "above the length");
  expect_error([&] { grid_layout({8, 8}, c, lk, lk); }, "phase");
  expect_error([&] { grid_layout({8, -1}, c, lk, lk); }, "phase");
  expect_error([&] { attention_grid(q, k, v, out, {{8, 0}}, c); }, "1 grids for 2 q heads");
  expect_error([&] { attention_grid(q, k, v, out, {{8, 0}, {0, 0}}, c); }, "stride");
  Tensor q_odd = test::random_tensor(DType::f32, 2, 100, d, 4), out_odd(DType::f32, 2, 100, d);
  expect_error(
      [&] {
        attention_grid(q_odd, k, v, out_odd, {{8, 0}, {8, 0}}, c);
      },
      "multiple of 64");
  GridConfig none = c;
  none.hline = none.vline = none.slash = false;
  expect_error([&] { check_grid_config(none); }, "at least one");
  GridConfig bad = c;
  bad.max_stride = 0;
  expect_error([&] { grid_stride_space(bad, lk); }, "max_stride");
  AttnOptions full;
  full.causal = false;
  expect_error([&] { attention_grid(q, k, v, out, {{8, 0}, {8, 0}}, c, full); }, "causal");
}

TEST(GridHead, StrideSpaceHoldsTheFrameStrideAndPowersOfTwo) {
  GridConfig c;
  c.frame_stride = 196;
  const auto s = grid_stride_space(c, 100000);
  for (int64_t x : {16, 32, 49, 64, 98, 128, 196, 256, 512, 1024})
    EXPECT_NE(std::find(s.begin(), s.end(), x), s.end()) << x;
  EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
  EXPECT_EQ(grid_stride_space(c, 300).back(), 256);  // never above the length
}

// On the video workload the search finds the planted grid (stride and phase, or a divisor of
// the stride with the phase it implies) on most heads: heads whose style weighs the grid
// lightly may pick another stride. The same input always gives the same lines.
TEST(GridHead, EstimateFindsThePlantedGrid) {
  int found = 0, heads = 0;
  for (uint64_t seed : {1u, 2u, 3u}) {
    WorkloadConfig cfg;
    cfg.kind = WorkloadKind::video;
    cfg.seq = 8192;
    cfg.heads = 2;
    cfg.dim = 64;
    cfg.seed = seed;
    const Workload w = make_workload(cfg);
    GridConfig c;
    c.frame_stride = w.layout.frame_tokens;
    const auto lines = grid_estimate(w.q, w.k, c, {});
    const auto again = grid_estimate(w.q, w.k, c, {});
    for (size_t h = 0; h < lines.size(); ++h) {
      EXPECT_EQ(lines[h].stride, again[h].stride);
      EXPECT_EQ(lines[h].phase, again[h].phase);
      ++heads;
      found +=
          w.grid_stride % lines[h].stride == 0 && w.grid_phase % lines[h].stride == lines[h].phase;
    }
  }
  EXPECT_GE(found, heads - 1) << found << " of " << heads << " heads found the planted grid";
}

}  // namespace
}  // namespace spattn
