// The online top-k selectors (MOMO, Section 3) against an exact sort, erfinv against a
// Newton-refined inverse, and the estimate's captured attention mass on the text workload.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "select/select_common.hpp"
#include "spattn/error.hpp"
#include "spattn/select.hpp"
#include "spattn/workload.hpp"

namespace spattn {
namespace {

using Stream = std::vector<BlockScore>;  // pushes in order

// The k best of a stream under the selectors' order, by a full sort.
Stream reference_topk(Stream s, int k) {
  std::sort(s.begin(), s.end(), ranks_before);
  if (int(s.size()) > k) s.resize(size_t(k));
  return s;
}

template <class Sel>
Stream run(Sel& sel, const Stream& s) {
  for (const BlockScore& b : s) sel.push(b.block, b.score);
  return sel.result();
}

Stream with_scores(const std::vector<float>& scores) {  // block i gets scores[i]
  Stream s;
  for (size_t i = 0; i < scores.size(); ++i) s.push_back({int32_t(i), scores[i]});
  return s;
}

// Block i gets score f(i), pushed in a shuffled order.
Stream shuffled(Stream s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::shuffle(s.begin(), s.end(), rng);
  return s;
}

Stream random_stream(int n, uint64_t seed, int distinct = 0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> level(0, std::max(0, distinct - 1));
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = distinct > 0 ? float(level(rng)) : normal(rng);
  return with_scores(v);
}

std::string show(const Stream& s) {
  std::ostringstream out;
  for (const BlockScore& b : s) out << '(' << b.block << ", " << b.score << ") ";
  return out.str();
}

template <class F>
void expect_error_naming(F f, const std::string& name) {
  try {
    f();
    ADD_FAILURE() << "no Error; expected one naming " << name;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// erfinv

// erf^-1 by Newton on erf (erfc for x > 0.5, where 1 - x is exact and erf would lose it),
// started from the approximation under test and iterated to double-precision convergence.
double erfinv_reference(float xf) {
  const double x = xf, a = std::fabs(x);
  double y = std::fabs(double(erfinv(xf)));
  if (!std::isfinite(y)) y = 4.0;
  for (int it = 0; it < 50; ++it) {
    const double f = a > 0.5 ? (1.0 - a) - std::erfc(y) : std::erf(y) - a;
    const double step = f / (2.0 / std::sqrt(M_PI) * std::exp(-y * y));
    y -= step;
    if (std::fabs(step) < 1e-15 * std::max(1.0, y)) break;
  }
  return std::copysign(y, x);
}

TEST(SelectErfinv, MatchesNewtonReference) {
  std::vector<float> xs = {0.0f, 1e-30f, 1e-10f, 1e-4f, 0.5f, 0.9f, 0.99f, 0.9966f, 0.9967f};
  for (int i = -2000; i <= 2000; ++i) xs.push_back(float(i) / 2001.0f);
  for (int e = 1; e <= 24; ++e) xs.push_back(1.0f - std::ldexp(1.0f, -e));  // towards 1
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int i = 0; i < 20000; ++i) xs.push_back(u(rng));
  double worst = 0;
  float worst_x = 0;
  for (float x0 : xs)
    for (float x : {x0, -x0}) {
      const double ref = erfinv_reference(x), got = erfinv(x);
      const double err = std::fabs(got - ref) / std::max(1.0, std::fabs(ref));
      if (err > worst) worst = err, worst_x = x;
    }
  std::printf("erfinv: worst error %.3g (relative, absolute below 1) at x = %.9g\n", worst,
              worst_x);
  EXPECT_LE(worst, 1e-6) << "at x = " << worst_x;
}

TEST(SelectErfinv, EdgesAndSymmetry) {
  EXPECT_EQ(erfinv(0.0f), 0.0f);
  EXPECT_EQ(erfinv(1.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(erfinv(-1.0f), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(erfinv(1.5f)));
  EXPECT_TRUE(std::isnan(erfinv(-1.0001f)));
  EXPECT_TRUE(std::isnan(erfinv(std::numeric_limits<float>::quiet_NaN())));
  for (float x : {0.1f, 0.3f, 0.77f, 0.999f}) EXPECT_EQ(erfinv(-x), -erfinv(x));
  // erf(erfinv(x)) = x at the median point of the threshold's use: p = 3/4 -> 2p - 1 = 0.5.
  EXPECT_NEAR(std::erf(double(erfinv(0.5f))), 0.5, 1e-7);
}

// ---------------------------------------------------------------------------------------------
// Names and parameters

TEST(SelectParams, ParseKindNames) {
  for (TopKKind k : {TopKKind::exact, TopKKind::tree, TopKKind::estimate, TopKKind::hybrid})
    EXPECT_EQ(parse_topk_kind(topk_kind_name(k)), k);
  EXPECT_EQ(parse_topk_kind("tree"), TopKKind::tree);
  expect_error_naming([] { parse_topk_kind("heap"); }, "'heap'");
  expect_error_naming([] { parse_topk_kind(""); }, "''");
  expect_error_naming([] { parse_topk_kind("Exact"); }, "'Exact'");
}

TEST(SelectParams, BadParametersNameThemselves) {
  expect_error_naming([] { ExactTopK s(0); }, "k must be > 0 (got 0)");
  expect_error_naming([] { TournamentTopK s(-3); }, "k must be > 0 (got -3)");
  expect_error_naming([] { EstimatedTopK s(0, 10); }, "k must be > 0");
  expect_error_naming([] { EstimatedTopK s(4, -1); }, "total_blocks must be >= 0 (got -1)");
  expect_error_naming(
      [] {
        EstimatedTopK s(4, 8);
        s.reset(-2);
      },
      "total_blocks");
  expect_error_naming([] { HybridTopK s(0, 0, 10); }, "k must be > 0");
  expect_error_naming([] { HybridTopK s(8, 9, 10); },
                      "k_exact must be in [0, k] (got k_exact = 9 with k = 8)");
  expect_error_naming([] { HybridTopK s(8, -1, 10); }, "k_exact");
  expect_error_naming([] { HybridTopK s(8, 4, -1); }, "total_blocks");
  for (TopKKind kind : {TopKKind::exact, TopKKind::tree, TopKKind::estimate, TopKKind::hybrid}) {
    expect_error_naming([&] { TopKSelector s({.kind = kind, .k = 0}); }, "k must be > 0");
    expect_error_naming([&] { TopKSelector s({.kind = kind, .k = 4, .k_exact = 5}); }, "k_exact");
    expect_error_naming([&] { TopKSelector s({.kind = kind, .k = 4, .k_exact = -1}); }, "k_exact");
    expect_error_naming([&] { TopKSelector s({.kind = kind, .k = 4, .total_blocks = -1}); },
                        "total_blocks");
    TopKSelector s({.kind = kind, .k = 4, .total_blocks = 4});
    expect_error_naming([&] { s.reset(-1); }, "total_blocks");
  }
  // Default-constructed selectors hold k = 0 and keep nothing.
  ExactTopK e;
  TournamentTopK t;
  EstimatedTopK m;
  HybridTopK h;
  for (int b = 0; b < 4; ++b) e.push(b, 1.0f), t.push(b, 1.0f), m.push(b, 1.0f), h.push(b, 1.0f);
  EXPECT_EQ(e.size() + t.size() + m.size() + h.size(), 0);
}

// ---------------------------------------------------------------------------------------------
// The exact selectors: the buffer with its argmin, and the tournament tree

template <class Sel>
class SelectExactKinds : public ::testing::Test {};
using ExactKinds = ::testing::Types<ExactTopK, TournamentTopK>;
TYPED_TEST_SUITE(SelectExactKinds, ExactKinds);

template <class Sel>
void expect_exact(const Stream& s, int k, const std::string& what) {
  Sel sel(k);
  const Stream got = run(sel, s), want = reference_topk(s, k);
  EXPECT_EQ(got, want) << what << ", k = " << k << "\n got:  " << show(got)
                       << "\n want: " << show(want);
  EXPECT_EQ(sel.size(), int(want.size())) << what;
  // A reset forgets the row: the same stream again gives the same answer.
  sel.reset();
  EXPECT_EQ(run(sel, s), want) << what << " after reset, k = " << k;
}

TYPED_TEST(SelectExactKinds, AdversarialOrders) {
  const int n = 100;
  std::vector<float> up(n), down(n), ties(n, 2.5f), extremes(n);
  for (int i = 0; i < n; ++i) {
    up[size_t(i)] = float(i);
    down[size_t(i)] = float(n - i);
    extremes[size_t(i)] = i % 3 == 0 ? 1e4f : (i % 3 == 1 ? -1e4f : 0.0f);
  }
  for (int k : {1, 2, 3, 5, 7, 16, 31, 64, 99, 100, 101, 250}) {
    expect_exact<TypeParam>(with_scores(up), k, "ascending");
    expect_exact<TypeParam>(with_scores(down), k, "descending");
    expect_exact<TypeParam>(with_scores(ties), k, "all ties");
    expect_exact<TypeParam>(with_scores(extremes), k, "+-1e4 with ties");
    // The same scores arriving in reverse block order, and shuffled: the tie rule must hold for
    // any arrival order, not only the kernel's increasing one.
    for (const auto* v : {&up, &ties, &extremes}) {
      Stream rev = with_scores(*v);
      std::reverse(rev.begin(), rev.end());
      expect_exact<TypeParam>(rev, k, "reversed");
      expect_exact<TypeParam>(shuffled(with_scores(*v), uint64_t(k)), k, "shuffled");
    }
  }
}

TYPED_TEST(SelectExactKinds, FewerBlocksThanK) {
  for (int n : {0, 1, 5, 15})
    for (int k : {16, 17, 1000})
      expect_exact<TypeParam>(random_stream(n, uint64_t(n)), k, "few blocks");
}

TYPED_TEST(SelectExactKinds, RandomOrdersWithManyTies) {
  for (uint64_t seed = 0; seed < 40; ++seed)
    for (int distinct : {0, 2, 5}) {
      const int n = 64 + int(seed) * 13;
      const Stream s = shuffled(random_stream(n, seed, distinct), seed + 100);
      for (int k : {1, 3, 8, 13, 32, 60, 127}) expect_exact<TypeParam>(s, k, "random, ties");
    }
}

TYPED_TEST(SelectExactKinds, SignedZerosAndInfinitiesRank) {
  // -0 and +0 are one score: the smaller block wins the tie whichever sign arrives first.
  Stream s = {{5, -0.0f}, {2, 0.0f}, {9, -0.0f}, {1, -0.0f}, {3, 0.0f}};
  expect_exact<TypeParam>(s, 2, "signed zeros");
  TypeParam sel(2);
  EXPECT_EQ(run(sel, s), (Stream{{1, 0.0f}, {2, 0.0f}}));
  const float inf = std::numeric_limits<float>::infinity();
  s = {{0, -inf}, {1, 3.0f}, {2, inf}, {3, -inf}, {4, -1e4f}};
  expect_exact<TypeParam>(s, 3, "infinities");
  TypeParam all(5);
  EXPECT_EQ(run(all, s).back(), (BlockScore{3, -inf}));  // -inf blocks rank last, by index
}

TYPED_TEST(SelectExactKinds, ResetToOtherK) {
  const Stream s = shuffled(random_stream(300, 3, 4), 4);
  TypeParam sel(200);
  for (int k : {7, 64, 3, 250, 1}) {
    sel.reset(k);
    EXPECT_EQ(sel.k(), k);
    EXPECT_EQ(run(sel, s), reference_topk(s, k)) << "k = " << k;
  }
}

// The exact buffer finds its argmin in two levels (groups of 16 slots): k over many groups,
// with a partial last group, on long ascending rows (every push wins and every group is
// rewritten) and random rows with ties.
TEST(SelectExact, GroupedArgminOverManyGroups) {
  std::vector<float> up(3000);
  for (size_t i = 0; i < up.size(); ++i) up[i] = float(i) * 0.5f;
  for (int k : {128, 129, 1000, 1024}) {
    expect_exact<ExactTopK>(with_scores(up), k, "ascending");
    expect_exact<ExactTopK>(shuffled(random_stream(3000, uint64_t(k), 7), uint64_t(k) + 1), k,
                            "random, ties");
  }
}

TEST(SelectTree, AnyKNotOnlyPowersOfTwo) {
  // The heap layout over 2k nodes is a complete binary tree for every k: leaves at two depths
  // when k is not a power of two. Every k from 1 to 130, ascending scores (every push wins, so
  // every leaf's path is replayed) and random ones with ties.
  const Stream up = with_scores([] {
    std::vector<float> v(300);
    std::iota(v.begin(), v.end(), 0.0f);
    return v;
  }());
  for (int k = 1; k <= 130; ++k) {
    expect_exact<TournamentTopK>(up, k, "ascending");
    expect_exact<TournamentTopK>(shuffled(random_stream(2 * k + 7, uint64_t(k), 3), uint64_t(k)), k,
                                 "random, ties");
  }
}

// ---------------------------------------------------------------------------------------------
// The estimate

std::set<int32_t> blocks_of(const Stream& s) {
  std::set<int32_t> out;
  for (const BlockScore& b : s) out.insert(b.block);
  return out;
}

TEST(SelectEstimate, TakesEveryBlockWhenSlotsCoverThem) {
  // p <= 0 from the first block: every block is taken, whatever its score.
  for (int n : {0, 1, 7, 64}) {
    const Stream s = random_stream(n, 11);
    for (int k : {n, n + 1, 3 * n + 5})
      if (k > 0) {
        EstimatedTopK e(k, n);
        EXPECT_EQ(run(e, s), reference_topk(s, k)) << "n = " << n << ", k = " << k;
      }
  }
}

TEST(SelectEstimate, FillsExactlyMinKNAndNeverMore) {
  // Once remaining slots equal remaining blocks (p = 0) every block is taken, so a row of
  // exactly total_blocks pushes ends with min(k, n) blocks; with no slot left (p = 1) none is.
  for (uint64_t seed = 0; seed < 30; ++seed)
    for (int distinct : {0, 3})
      for (int k : {1, 2, 5, 16, 64, 200}) {
        const int n = 20 + int(seed) * 17;
        const Stream s = random_stream(n, seed, distinct);
        EstimatedTopK e(k, n);
        const Stream got = run(e, s);
        EXPECT_EQ(int(got.size()), std::min(k, n)) << "n = " << n << ", k = " << k;
        EXPECT_EQ(blocks_of(got).size(), got.size());
        EXPECT_TRUE(std::is_sorted(got.begin(), got.end(), ranks_before));
        if (k <= n) {
          e.push(n, 1e30f);  // past total_blocks with no slot left: not taken
          EXPECT_EQ(int(e.result().size()), k);
        }
      }
}

TEST(SelectEstimate, FirstBlocksBeforeTheVarianceExists) {
  // Block 0: no mean yet, taken. Block 1: one score, sigma = 0, threshold = m = 5: an equal
  // score is not taken (strict). Block 2: still sigma = 0 (5, 5): 6 > 5 is taken.
  EstimatedTopK e(3, 10);
  e.push(0, 5.0f);
  EXPECT_EQ(e.size(), 1);
  e.push(1, 5.0f);
  EXPECT_EQ(e.size(), 1);
  EXPECT_EQ(e.sigma(), 0.0);
  e.push(2, 6.0f);
  EXPECT_EQ(e.result(), (Stream{{2, 6.0f}, {0, 5.0f}}));
  EXPECT_GT(e.sigma(), 0.0);
  // The first block is taken even when it is the row's worst.
  EstimatedTopK f(1, 10);
  EXPECT_EQ(run(f, with_scores({-100, 1, 2, 3, 4, 5, 6, 7, 8, 9})), (Stream{{0, -100.0f}}));
}

TEST(SelectEstimate, AllTiesTakeTheFirstBlockThenTheLast) {
  // Equal scores never exceed the threshold m (sigma = 0), so after block 0 nothing is taken
  // until the slots left equal the blocks left: the row's last k - 1 blocks.
  EstimatedTopK e(4, 12);
  EXPECT_EQ(blocks_of(run(e, with_scores(std::vector<float>(12, 1.5f)))),
            (std::set<int32_t>{0, 9, 10, 11}));
}

TEST(SelectEstimate, GridBoundsBracketErfinv) {
  // The estimate decides most blocks from bounds on z = erfinv(float(x)) read off a grid; they
  // must hold for every x, including across the approximation's branch at |x| ~ 0.9966 (every
  // float in [0.99, 1) is checked) and at the grid points themselves.
  int64_t checked = 0;
  auto check = [&](double x) {
    const topk_detail::ZBounds b = topk_detail::erfinv_bounds(x);
    const double z = erfinv(float(x));
    ASSERT_LE(b.lo, z) << "x = " << x;
    ASSERT_GE(b.hi, z) << "x = " << x;
    ++checked;
  };
  for (float x = 0.99f; x < 1.0f; x = std::nextafter(x, 2.0f)) check(x);
  for (int i = 0; i <= 4096; ++i) {
    check(i / 4096.0);
    if (i > 0) check(std::nextafter(i / 4096.0, 0.0));
  }
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int i = 0; i < 1000000; ++i) check(u(rng));
  check(1.0);
  EXPECT_GT(checked, 1000000);
  // Tight enough to decide: at x = 0.9 (p = 0.95) the bracket is within 1% of z.
  const topk_detail::ZBounds b = topk_detail::erfinv_bounds(0.9);
  EXPECT_LT(b.hi - b.lo, 0.01 * erfinv(0.9f));
}

TEST(SelectEstimate, ThresholdIsEq6BlockByBlock) {
  // Before each push, predict from the selector's own m, sigma and slot count whether Eq. (6)
  // takes the block, with erfinv from the Newton reference; skip the rare scores within
  // rounding of s_th.
  int checked = 0, taken = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const int n = 512, k = 16 + int(seed) * 8;
    const Stream s = random_stream(n, seed);
    EstimatedTopK e(k, n);
    for (int j = 0; j < n; ++j) {
      const int slots = k - e.size();
      const int64_t remaining = n - j;
      const float score = s[size_t(j)].score;
      bool known = true, take;
      if (slots == 0)
        take = false;
      else if (slots >= remaining || j == 0)
        take = true;
      else {
        const double x = 1.0 - 2.0 * slots / double(remaining);
        const double s_th = std::sqrt(2.0) * e.sigma() * erfinv_reference(float(x)) + e.mean();
        take = score > s_th;
        known = std::fabs(score - s_th) > 1e-4 * (1.0 + std::fabs(s_th));
      }
      const int before = e.size();
      e.push(s[size_t(j)].block, score);
      if (known) {
        ++checked;
        taken += take;
        EXPECT_EQ(e.size() - before, int(take)) << "seed " << seed << ", block " << j;
      }
    }
  }
  EXPECT_GT(checked, 9000);
  EXPECT_GT(taken, 1000);
}

TEST(SelectEstimate, InfinitiesStayOutOfTheStatistics) {
  const float inf = std::numeric_limits<float>::infinity();
  EstimatedTopK e(6, 10);
  for (int j = 0; j < 4; ++j) e.push(j, float(j));
  ASSERT_EQ(e.size(), 4);  // 0 (first), 1 (> m, sigma = 0), 2 and 3 (above s_th)
  const double m = e.mean(), sd = e.sigma();
  e.push(4, -inf);
  e.push(5, inf);
  EXPECT_EQ(e.mean(), m);
  EXPECT_EQ(e.sigma(), sd);
  EXPECT_TRUE(blocks_of(e.result()).count(5));   // +inf exceeds any finite threshold
  EXPECT_FALSE(blocks_of(e.result()).count(4));  // -inf exceeds none
}

TEST(SelectEstimate, ExtraBlocksAreTakenWhileSlotsRemain) {
  EstimatedTopK e(5, 3);
  for (int j = 0; j < 7; ++j) e.push(j, -float(j));
  EXPECT_EQ(blocks_of(e.result()), (std::set<int32_t>{0, 1, 2, 3, 4}));
  e.reset(4);  // a new row, same k
  EXPECT_EQ(e.size(), 0);
  EXPECT_EQ(e.total_blocks(), 4);
}

// ---------------------------------------------------------------------------------------------
// The hybrid

TEST(SelectHybrid, EndsAreExactAndEstimate) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const int n = 100 + int(seed) * 29;
    const Stream s = random_stream(n, seed, seed % 2 ? 4 : 0);
    for (int k : {1, 8, 33, 128}) {
      HybridTopK all_exact(k, k, n), all_est(k, 0, n);
      ExactTopK exact(k);
      EstimatedTopK est(k, n);
      EXPECT_EQ(run(all_exact, s), run(exact, s)) << "k_exact = k = " << k;
      EXPECT_EQ(run(all_est, s), run(est, s)) << "k_exact = 0, k = " << k;
    }
  }
}

TEST(SelectHybrid, HoldsTheTrueTopKExactAndFillsK) {
  for (uint64_t seed = 0; seed < 30; ++seed)
    for (auto [k, k_exact] : {std::pair{128, 8}, {64, 8}, {16, 4}, {5, 2}, {64, 63}}) {
      const int n = 40 + int(seed) * 23;
      const Stream s = random_stream(n, seed, seed % 3 ? 0 : 3);
      HybridTopK h(k, k_exact, n);
      const Stream got = run(h, s);
      EXPECT_EQ(int(got.size()), std::min(k, n));
      EXPECT_EQ(blocks_of(got).size(), got.size()) << "a block in both parts";
      EXPECT_EQ(h.exact_part().result(), reference_topk(s, k_exact));
      const std::set<int32_t> held = blocks_of(got);
      for (const BlockScore& b : reference_topk(s, k_exact)) EXPECT_TRUE(held.count(b.block));
      EXPECT_TRUE(std::is_sorted(got.begin(), got.end(), ranks_before));
    }
}

TEST(SelectHybrid, EvictedBlocksReachTheEstimate) {
  // Ascending scores: each block evicts the previous minimum from the 1-slot exact part, which
  // hands it to the estimate. With 2 estimated slots over 5 handed-on blocks, the first one
  // handed on (block 0, no statistics yet) is taken.
  HybridTopK h(3, 1, 6);
  run(h, with_scores({0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(h.exact_part().result(), (Stream{{5, 5.0f}}));
  EXPECT_EQ(h.estimated_part().total_blocks(), 5);
  EXPECT_TRUE(blocks_of(h.estimated_part().result()).count(0));
  EXPECT_EQ(h.size(), 3);
}

// ---------------------------------------------------------------------------------------------
// TopKSelector: the run-time choice

TEST(SelectSelector, EachKindMatchesItsType) {
  const int n = 300, k = 40;
  std::vector<Stream> rows = {random_stream(n, 1), random_stream(n, 2, 3),
                              random_stream(n - 50, 3)};
  for (TopKKind kind : {TopKKind::exact, TopKKind::tree, TopKKind::estimate, TopKKind::hybrid}) {
    TopKSelector sel({.kind = kind, .k = k, .k_exact = 8, .total_blocks = n});
    EXPECT_EQ(sel.kind(), kind);
    EXPECT_EQ(sel.k(), k);
    for (const Stream& row : rows) {
      sel.reset(int64_t(row.size()));
      Stream want;
      switch (kind) {
        case TopKKind::exact: {
          ExactTopK s(k);
          want = run(s, row);
          break;
        }
        case TopKKind::tree: {
          TournamentTopK s(k);
          want = run(s, row);
          break;
        }
        case TopKKind::estimate: {
          EstimatedTopK s(k, int64_t(row.size()));
          want = run(s, row);
          break;
        }
        case TopKKind::hybrid: {
          HybridTopK s(k, 8, int64_t(row.size()));
          want = run(s, row);
          break;
        }
      }
      EXPECT_EQ(run(sel, row), want) << topk_kind_name(kind);
      EXPECT_EQ(sel.size(), int(want.size()));
      std::vector<BlockScore> out(3, BlockScore{});
      sel.result(out);  // the reusing form replaces out's contents
      EXPECT_EQ(out, want);
    }
  }
}

// gate(): a push whose key is at or below it changes nothing, so the observer may drop it with
// one compare. A selector that skips those pushes stays equal to one that takes every push, at
// every step, for each kind (hybrid also with no estimated slot, k_exact = k), on random rows,
// rows of three score levels (ties) and ascending rows; and the gate does drop blocks.
TEST(SelectSelector, GatedPushesChangeNothing) {
  const int n = 300;
  Stream ascending;
  for (int i = 0; i < n; ++i) ascending.push_back({i, float(i) * 0.25f - 30.0f});
  const std::vector<Stream> rows = {random_stream(n, 4), random_stream(n, 5, 3), ascending,
                                    random_stream(20, 6)};
  for (TopKKind kind : {TopKKind::exact, TopKKind::tree, TopKKind::estimate, TopKKind::hybrid})
    for (int k_exact : {8, 40}) {
      int64_t dropped = 0;
      for (const Stream& row : rows) {
        const TopKParams p{
            .kind = kind, .k = 40, .k_exact = k_exact, .total_blocks = int64_t(row.size())};
        TopKSelector all(p), gated(p);
        for (const BlockScore& b : row) {
          all.push(b.block, b.score);
          if (topk_detail::make_key(b.block, b.score) <= gated.gate())
            ++dropped;
          else
            gated.push(b.block, b.score);
          ASSERT_EQ(gated.result(), all.result()) << topk_kind_name(kind) << " block " << b.block;
        }
      }
      EXPECT_GT(dropped, 0) << topk_kind_name(kind) << " k_exact " << k_exact;
    }
}

// ---------------------------------------------------------------------------------------------
// Mass captured on attention-like scores

// Per-row block scores S(j) (Eq. 3) of scaled scores q.k / sqrt(d), 64-key blocks, for rows
// at the end of a block (so every visible block is whole), in the order the kernel visits them.
std::vector<Stream> text_block_lses(int64_t seq, const std::vector<int64_t>& rows, uint64_t seed) {
  const Workload w =
      make_workload({.kind = WorkloadKind::text, .seq = seq, .heads = 2, .dim = 128, .seed = seed});
  const TensorView q = w.q, k = w.k;
  const double scale = 1.0 / std::sqrt(double(q.dim));
  std::vector<Stream> out;
  for (int64_t h = 0; h < q.heads; ++h)
    for (int64_t i : rows) {
      const int64_t kh = h / (q.heads / k.heads), blocks = (i + 1) / 64;
      Stream row;
      for (int64_t b = 0; b < blocks; ++b) {
        double s[64], m = -INFINITY, l = 0;
        for (int64_t t = 0; t < 64; ++t) {
          double acc = 0;
          for (int64_t c = 0; c < q.dim; ++c)
            acc += double(q.get(h, i, c)) * k.get(kh, b * 64 + t, c);
          s[t] = acc * scale;
          m = std::max(m, s[t]);
        }
        for (double x : s) l += std::exp(x - m);
        row.push_back({int32_t(b), float(m + std::log(l))});
      }
      out.push_back(row);
    }
  return out;
}

double mass(const Stream& s, double shift) {
  double sum = 0;
  for (const BlockScore& b : s) sum += std::exp(double(b.score) - shift);
  return sum;
}

struct Capture {
  double mean = 0, worst = 1;
};

template <class Make>
Capture captured(const std::vector<Stream>& rows, int k, Make make) {
  Capture c;
  for (const Stream& row : rows) {
    auto sel = make(int64_t(row.size()));
    const Stream want = reference_topk(row, k);
    const double r = mass(run(sel, row), want[0].score) / mass(want, want[0].score);
    c.mean += r / double(rows.size());
    c.worst = std::min(c.worst, r);
  }
  return c;
}

// Fig. 4 (right) analogue: softmax mass of the blocks a selector keeps over the mass of the
// exact top-k at the same k, on text-workload rows of 256..512 whole 64-key blocks (every 16th
// block's last row, 2 heads: 34 rows). Measured with workload seed 5 (mean / worst row):
//   k =  64: estimate 0.962 / 0.466    hybrid 64/8  0.998 / 0.991
//   k = 128: estimate 0.985 / 0.574    hybrid 128/8 0.999 / 0.996
// and over seeds 1-6: estimate means 0.94-0.996, worst rows 0.25-0.92; hybrid means >= 0.993,
// worst rows >= 0.947. The estimate's bad rows are rows whose slots run out a few blocks before
// the end and so miss the row's last (local) block; the first block (the sink) it always takes,
// and the floor below is what catches a regression there (not taking it measures 0.23).
// Floors, below every seed measured: estimate mean 0.90 and worst row 0.2; hybrid mean 0.99
// and worst row 0.93; and the hybrid's mean at least the estimate's.
TEST(SelectMass, EstimateAndHybridOnTextRows) {
  std::vector<int64_t> rows;
  for (int64_t b = 256; b <= 512; b += 16) rows.push_back(b * 64 - 1);
  const std::vector<Stream> lses = text_block_lses(512 * 64, rows, 5);
  for (int k : {64, 128}) {
    const Capture est = captured(lses, k, [&](int64_t n) { return EstimatedTopK(k, n); });
    const Capture hyb = captured(lses, k, [&](int64_t n) { return HybridTopK(k, 8, n); });
    const Capture tree = captured(lses, k, [&](int64_t) { return TournamentTopK(k); });
    std::printf(
        "mass captured, k = %d: estimate mean %.4f worst %.4f | hybrid %d/8 mean %.4f worst %.4f\n",
        k, est.mean, est.worst, k, hyb.mean, hyb.worst);
    EXPECT_EQ(tree.worst, 1.0);
    EXPECT_GE(est.mean, 0.90) << "k = " << k;
    EXPECT_GE(est.worst, 0.2) << "k = " << k;
    EXPECT_GE(hyb.mean, 0.99) << "k = " << k;
    EXPECT_GE(hyb.worst, 0.93) << "k = " << k;
    EXPECT_GE(hyb.mean, est.mean) << "k = " << k;
  }
}

}  // namespace
}  // namespace spattn
