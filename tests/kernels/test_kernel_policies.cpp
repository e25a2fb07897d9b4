// The loop's policy hooks, exercised with test policies: query-row subsets, key-range lists
// and tile skipping must compute exactly the reference restricted to what they select.
// Compiled for this TU's static SIMD target (the hooks' logic is target-independent).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "kernels/flash-inl.h"
#include "test_util.hpp"

namespace spattn {
namespace {

namespace kn = kernels::HWY_NAMESPACE;

// Exact attention of one row over the keys below `limit` that `keep` admits.
std::vector<double> masked_row(const TensorView& q, const TensorView& k, const TensorView& v,
                               int64_t h, int64_t i, int64_t limit,
                               const std::function<bool(int64_t)>& keep) {
  std::vector<int64_t> keys;
  for (int64_t j = 0; j < limit; ++j)
    if (keep(j)) keys.push_back(j);
  return test::row_over_keys(q, k, v, h, i, keys);
}

struct Inputs {
  Tensor q, k, v, out;
  Inputs(int64_t h, int64_t hk, int64_t lq, int64_t lk, int64_t d)
      : q(test::random_tensor(DType::f32, h, lq, d, 1)),
        k(test::random_tensor(DType::f32, hk, lk, d, 2)),
        v(test::random_tensor(DType::f32, hk, lk, d, 3)),
        out(DType::f32, h, lq, d) {}
  kernels::Problem problem(bool causal = true) {
    AttnOptions opt;
    opt.causal = causal;
    return kernels::make_problem(q, k, v, out, opt, nullptr);
  }
};

void expect_row(const Inputs& in, int64_t h, int64_t i, const std::vector<double>& want) {
  for (int64_t c = 0; c < in.q.dim(); ++c)
    ASSERT_NEAR(in.out.view().get(h, i, c), want[size_t(c)], 1e-4) << "head " << h << " row " << i;
}

// Every gamma-th query row (MOMO's query-sparse pass), tiles of 64 such rows.
struct StridedRows : kernels::DensePolicy {
  int64_t gamma = 3;
  int64_t num_tiles(const kernels::Problem& p) const {
    const int64_t n = (p.q_len + gamma - 1) / gamma;
    return (n + tile_rows - 1) / tile_rows;
  }
  int64_t rows(const kernels::Problem& p, int64_t t, int64_t* q_rows, int64_t* out_rows) const {
    int64_t n = 0;
    for (int64_t r = t * tile_rows; r < (t + 1) * tile_rows && r * gamma < p.q_len; ++r) {
      q_rows[n] = out_rows[n] = r * gamma;
      ++n;
    }
    return n;
  }
};

TEST(KernelPolicy, QueryRowSubset) {
  Inputs in(4, 2, 300, 350, 64);
  kernels::Problem p = in.problem();
  StridedRows pol;
  Stats st;
  kn::RunFlash(p, pol, &st);
  int64_t entries = 0;
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 300; i += pol.gamma) {
      const int64_t limit = i + 50 + 1;
      entries += limit;
      expect_row(in, h, i, masked_row(in.q, in.k, in.v, h, i, limit, [](int64_t) { return true; }));
      if (i + 1 < 300) {
        EXPECT_EQ(in.out.view().get(h, i + 1, 0), 0.0f);  // untouched rows
      }
    }
  EXPECT_EQ(st.score_entries, entries);
}

// A key-range list per (head, tile): sink, a stripe that straddles tiles, and a local window.
struct RangeList : kernels::DensePolicy {
  void key_ranges(const kernels::Problem& p, int64_t h, int64_t t, int64_t limit,
                  std::vector<KeyRange>& out) const {
    out.push_back({0, 4});
    out.push_back({40 + 7 * h, 150});
    out.push_back({100, 120});  // overlaps the previous one: must be coalesced
    out.push_back({limit - 30, limit + 99});
  }
  static bool keep(int64_t h, int64_t j, int64_t limit) {
    return j < 4 || (j >= 40 + 7 * h && j < 150) || j >= limit - 30;
  }
};

// Every row of a RangeList run (2 heads, 200 x 260) against the reference over its keys.
void expect_range_list_rows(const Inputs& in, bool causal) {
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 200; ++i) {
      const int64_t tile_last = std::min<int64_t>(200, (i / 64 + 1) * 64) - 1;
      const int64_t tile_limit = causal ? tile_last + 60 + 1 : 260;
      const int64_t row_limit = causal ? i + 60 + 1 : 260;
      expect_row(in, h, i, masked_row(in.q, in.k, in.v, h, i, row_limit, [&](int64_t j) {
                   return RangeList::keep(h, j, tile_limit);
                 }));
    }
}

TEST(KernelPolicy, KeyRangeLists) {
  for (bool causal : {true, false}) {
    Inputs in(2, 1, 200, 260, 64);
    kernels::Problem p = in.problem(causal);
    RangeList pol;
    kn::RunFlash(p, pol, nullptr);
    expect_range_list_rows(in, causal);
  }
}

// RangeList's tiles visited in reverse (kOrder); a tile in two ranges comes twice, once per
// range. The entries are the same, each once, whatever the order; the skip hook records the
// order it saw.
struct ReversedRanges : RangeList {
  struct KeySource : RangeList::KeySource {
    static constexpr bool kOrder = true;
  };
  struct Observers : RangeList::Observers {
    static constexpr bool kMaySkip = true;
  };
  std::vector<std::vector<int64_t>>* seen = nullptr;  // [h * q_tiles + t]: tiles as visited
  int64_t q_tiles = 0;
  void visit_order(const kernels::Problem&, const kernels::TileView&,
                   std::vector<kernels::TileVisit>& v) const {
    std::reverse(v.begin(), v.end());
  }
  bool skip(Local&, const kernels::TileView& v) const {
    (*seen)[size_t(v.h * q_tiles + v.t)].push_back(v.key_tile);
    return false;
  }
};

TEST(KernelPolicy, VisitOrderPermutesTheTiles) {
  for (bool causal : {true, false}) {
    Inputs in(2, 1, 200, 260, 64);
    kernels::Problem p = in.problem(causal);
    Stats in_order, reversed;
    RangeList plain;
    kn::RunFlash(p, plain, &in_order);
    ReversedRanges pol;
    pol.q_tiles = pol.num_tiles(p);
    std::vector<std::vector<int64_t>> seen(size_t(2 * pol.q_tiles));
    pol.seen = &seen;
    kn::RunFlash(p, pol, &reversed);
    EXPECT_EQ(reversed.score_entries, in_order.score_entries);
    EXPECT_EQ(reversed.tiles_visited, in_order.tiles_visited);
    for (const auto& tiles : seen) {
      ASSERT_GT(tiles.size(), 1u);
      EXPECT_TRUE(std::is_sorted(tiles.rbegin(), tiles.rend()));  // descending
    }
    expect_range_list_rows(in, causal);
  }
}

// A running max seeded above every score (kSeedMax): the skip hook sees it from the first
// tile, and the output and LSE are the same softmax.
struct SeededHigh : kernels::DensePolicy {
  struct Observers : kernels::DensePolicy::Observers {
    static constexpr bool kMaySkip = true;
  };
  struct TileState : kernels::DensePolicy::TileState {
    static constexpr bool kSeedMax = true;
  };
  float seed = 20.0f;  // log2 units; these scores stay below ~8
  void seed_max(const kernels::Problem&, const kernels::TileView& rows, float* m) const {
    std::fill(m, m + rows.n, seed);
  }
  bool skip(Local&, const kernels::TileView& v) const {
    for (int64_t r = 0; r < v.n; ++r) EXPECT_EQ(v.m[r], seed);
    return false;
  }
};

TEST(KernelPolicy, SeededRunningMaxIsTheSameSoftmax) {
  Inputs in(2, 2, 150, 150, 64);
  std::vector<float> lse(2 * 150);
  AttnOptions opt;
  kernels::Problem p = kernels::make_problem(in.q, in.k, in.v, in.out, opt, lse.data());
  SeededHigh pol;
  kn::RunFlash(p, pol, nullptr);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 150; ++i) {
      std::vector<int64_t> keys;
      for (int64_t j = 0; j <= i; ++j) keys.push_back(j);
      double want_lse = 0;
      expect_row(in, h, i, test::row_over_keys(in.q, in.k, in.v, h, i, keys, 0, &want_lse));
      ASSERT_NEAR(lse[size_t(h * 150 + i)], want_lse, 1e-4) << "head " << h << " row " << i;
    }
}

// Skips every key tile but the first once its scores are known.
struct SkipLater : kernels::DensePolicy {
  struct Observers : kernels::DensePolicy::Observers {
    static constexpr bool kMaySkip = true;
  };
  bool skip(Local&, const kernels::TileView& v) const { return v.key_tile > 0; }
};

TEST(KernelPolicy, SkippedTilesAddNothing) {
  Inputs in(2, 2, 130, 130, 64);
  kernels::Problem p = in.problem();
  SkipLater pol;
  Stats st;
  kn::RunFlash(p, pol, &st);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 130; ++i)
      expect_row(in, h, i,
                 masked_row(in.q, in.k, in.v, h, i, i + 1, [](int64_t j) { return j < 64; }));
  // tiles per q tile: 1, 2, 3 (rows 0-63, 64-127, 128-129), two heads
  EXPECT_EQ(st.tiles_visited, 2 * (1 + 2 + 3));
  EXPECT_EQ(st.tiles_skipped, 2 * (0 + 1 + 2));
}

// Ranges plus single gathered key columns (vertical lines), some inside a range (must not be
// counted twice) and some beyond the causal limit.
struct RangesAndColumns : kernels::DensePolicy {
  struct KeySource : kernels::DensePolicy::KeySource {
    static constexpr bool kGather = true;
  };
  void key_ranges(const kernels::Problem&, int64_t, int64_t, int64_t limit,
                  std::vector<KeyRange>& out) const {
    out.push_back({limit - 20, limit});
  }
  void key_columns(const kernels::Problem&, int64_t h, int64_t, int64_t,
                   std::vector<int64_t>& out) const {
    for (int64_t j = 3 + h; j < 400; j += 5) out.push_back(j);
    out.push_back(8 + h);  // a duplicate column
  }
  static bool keep(int64_t h, int64_t j, int64_t limit) {
    return j >= limit - 20 || (j >= 3 + h && (j - 3 - h) % 5 == 0);
  }
};

TEST(KernelPolicy, GatheredColumns) {
  Inputs in(2, 2, 190, 300, 64);
  kernels::Problem p = in.problem();
  RangesAndColumns pol;
  Stats st;
  kn::RunFlash(p, pol, &st);
  int64_t entries = 0;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 190; ++i) {
      const int64_t tile_last = std::min<int64_t>(190, (i / 64 + 1) * 64) - 1;
      const int64_t tile_limit = tile_last + 110 + 1, row_limit = i + 110 + 1;
      auto keep = [&](int64_t j) { return RangesAndColumns::keep(h, j, tile_limit); };
      for (int64_t j = 0; j < row_limit; ++j) entries += keep(j);
      expect_row(in, h, i, masked_row(in.q, in.k, in.v, h, i, row_limit, keep));
    }
  EXPECT_EQ(st.score_entries, entries);
}

}  // namespace
}  // namespace spattn
