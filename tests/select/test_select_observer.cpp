// BlockSelectObserver (MOMO's online block selection inside the query-sparse pass) against the
// standalone selectors: fed tile by tile and strip by strip as the kernel feeds it, each row's
// selection must equal that of a TopKSelector of the same kind pushed the row's candidate
// blocks in order, bitwise, on adversarial score orders and ties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <random>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/error.hpp"
#include "spattn/select_observer.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

enum class Pattern { ascending, descending, ties, levels, extremes, random, climbing, skipped };

// Score of q head h, row r, 64-key block j under a pattern (rows differ so that strips mix).
float score(Pattern p, int64_t h, int64_t r, int64_t j) {
  const uint64_t x = uint64_t(h * 1000003 + r * 7919 + j * 104729);
  const uint64_t hash = (x * 0x9E3779B97F4A7C15ull) >> 40;  // 24 random bits
  const float u = float(hash) / float(1 << 24);             // [0, 1)
  switch (p) {
    case Pattern::ascending: return float(j) * 0.5f - float(h);
    case Pattern::descending: return -float(j) * 0.5f + float(r % 7);
    case Pattern::ties: return 2.5f;
    case Pattern::levels: return float(hash % 3);
    case Pattern::extremes:
      return hash % 3 == 0 ? 1e4f : (hash % 3 == 1 ? -1e4f : (hash & 8 ? 0.0f : -0.0f));
    case Pattern::random: return 6.0f * u - 3.0f;
    // Mostly rising with noise: the case where many pushes beat the current minimum.
    case Pattern::climbing: return float(j) * 0.01f + 0.5f * u;
    case Pattern::skipped: return hash % 5 == 0 ? -kInf : 4.0f * u;
  }
  return 0.0f;
}

struct Rows {
  int64_t heads = 2, len = 64 * 150, beta = 64, chi = 128;
  std::vector<int64_t> rows;
  std::vector<ForcedBlocks> forced;
};

// Sink block 0 and the last two blocks below each query block's end forced, or nothing.
Rows make_setup(int64_t stride, bool with_forced) {
  Rows s;
  s.rows = strided_rows(s.len, stride);
  const int64_t qblocks = (s.len + s.chi - 1) / s.chi;
  for (int64_t qb = 0; qb < qblocks; ++qb) {
    if (!with_forced) {
      s.forced.push_back({0, INT64_MAX, INT64_MAX});
      continue;
    }
    const int64_t end = std::min(s.len, (qb + 1) * s.chi);
    const int64_t causal_end = (end + s.beta - 1) / s.beta;
    s.forced.push_back({1, std::max<int64_t>(1, causal_end - 2), causal_end});
  }
  return s;
}

// Feeds every (strip of 64 compact rows, key tile) of every q head, tiles in increasing order,
// as the query-sparse kernel does; entries past a row's causal keys are NaN (must be ignored).
// batch 1: one observe() per tile; more: observe_tiles() with up to `batch` tiles a call (the
// kernel sends 16), the LSE of tile i at i * stride with stride > rows.
void feed(BlockSelectObserver& obs, const Rows& s, Pattern p, int64_t batch = 1) {
  const int64_t n = int64_t(s.rows.size()), stride = 67;
  std::vector<float> lse(size_t(batch * stride));
  std::vector<int64_t> blocks(static_cast<size_t>(batch));
  for (int64_t h = 0; h < s.heads; ++h)
    for (int64_t b = 0; b < n; b += 64) {
      const int64_t rows = std::min<int64_t>(64, n - b);
      const int64_t tiles = (causal_limit(s.rows[size_t(b + rows - 1)], s.len, s.len) + 63) / 64;
      for (int64_t t0 = 0; t0 < tiles; t0 += batch) {
        const int64_t count = std::min(batch, tiles - t0);
        for (int64_t c = 0; c < count; ++c) {
          const int64_t t = t0 + c;
          blocks[size_t(c)] = t;
          for (int64_t i = 0; i < rows; ++i) {
            const int64_t r = s.rows[size_t(b + i)];
            lse[size_t(c * stride + i)] = t * 64 < causal_limit(r, s.len, s.len)
                                              ? score(p, h, r, t)
                                              : std::numeric_limits<float>::quiet_NaN();
          }
        }
        if (batch == 1)
          obs.observe(h, b, rows, t0, lse.data());
        else
          obs.observe_tiles(h, b, rows, blocks.data(), count, lse.data(), stride);
      }
    }
}

// The row's candidate blocks pushed in order into a selector of its own.
std::vector<BlockScore> reference(const Rows& s, Pattern p, const TopKParams& params, int64_t h,
                                  int64_t r) {
  const ForcedBlocks& f = s.forced[size_t(r / s.chi)];
  const int64_t nb = (causal_limit(r, s.len, s.len) + s.beta - 1) / s.beta;
  TopKParams q = params;
  q.total_blocks = nb - f.count(nb);
  TopKSelector sel(q);
  for (int64_t j = 0; j < nb; ++j) {
    if (f.forced(j)) continue;
    const float x = score(p, h, r, j);
    if (x != -kInf) sel.push(int32_t(j), x);
  }
  return sel.result();
}

void expect_same_as_selectors(const Rows& s, const TopKParams& params, Pattern p,
                              int64_t batch = 1) {
  BlockSelectObserver obs(s.heads, s.rows, s.len, s.len, s.beta, s.forced, s.chi, params);
  feed(obs, s, p, batch);
  std::vector<BlockScore> got;
  for (int64_t h = 0; h < s.heads; ++h)
    for (size_t i = 0; i < s.rows.size(); ++i) {
      obs.result(h, int64_t(i), got);
      const std::vector<BlockScore> want = reference(s, p, params, h, s.rows[i]);
      ASSERT_EQ(got, want) << topk_kind_name(params.kind) << " k " << params.k << " k_exact "
                           << params.k_exact << " pattern " << int(p) << " head " << h << " row "
                           << s.rows[i];
    }
}

void expect_every_kind_and_pattern(std::initializer_list<int> ks,
                                   std::initializer_list<bool> forced) {
  const Pattern patterns[] = {Pattern::ascending, Pattern::descending, Pattern::ties,
                              Pattern::levels,    Pattern::extremes,   Pattern::random,
                              Pattern::climbing,  Pattern::skipped};
  for (bool with_forced : forced) {
    const Rows s = make_setup(with_forced ? 37 : 16, with_forced);
    for (TopKKind kind : {TopKKind::exact, TopKKind::tree, TopKKind::estimate, TopKKind::hybrid})
      for (int k : ks)
        for (Pattern p : patterns)
          expect_same_as_selectors(s, {.kind = kind, .k = k, .k_exact = std::min(8, k)}, p);
  }
}

// k = 5: the buffers fill early and most pushes lose; k = 128 (the paper's): rows of up to 150
// blocks, so the buffers fill late and many pushes win. Rows with sink and local blocks forced.
TEST(SelectObserver, EachRowEqualsItsStandaloneSelector) {
  expect_every_kind_and_pattern({5, 128}, {true});
}

// The same with nothing forced (every 16th row); then one slot, the hybrid's 8 exact slots
// alone (k = 8) and 8 of 40, and k above the row's blocks, both ways.
TEST(SelectObserver, EachRowEqualsItsStandaloneSelectorMoreSlow) {
  expect_every_kind_and_pattern({5, 128}, {false});
  expect_every_kind_and_pattern({1, 8, 40, 200}, {false, true});
}

// The kernel's batched reports (16 tiles a call, and a batch cut short at a strip's end; 5 for
// batches that end mid-way through the buffered pushes): the same selections as tile by tile.
TEST(SelectObserver, BatchedTilesEqualStandaloneSelectors) {
  for (bool with_forced : {true, false}) {
    const Rows s = make_setup(with_forced ? 37 : 16, with_forced);
    for (TopKKind kind : {TopKKind::exact, TopKKind::tree, TopKKind::estimate, TopKKind::hybrid})
      for (int k : {5, 128})
        for (Pattern p : {Pattern::random, Pattern::climbing, Pattern::skipped, Pattern::ties})
          for (int64_t batch : {16, 5})
            expect_same_as_selectors(s, {.kind = kind, .k = k, .k_exact = std::min(8, k)}, p,
                                     batch);
  }
}

TEST(SelectObserver, HybridSettingsOfThePaper) {
  const Rows s = make_setup(16, true);
  for (int k_exact : {0, 8, 64})
    for (Pattern p : {Pattern::random, Pattern::climbing, Pattern::levels})
      expect_same_as_selectors(s, {.kind = TopKKind::hybrid, .k = 64, .k_exact = k_exact}, p);
}

TEST(SelectObserver, RowsWithoutCandidatesSelectNothing) {
  Rows s = make_setup(16, false);
  for (ForcedBlocks& f : s.forced) f = {INT64_MAX, INT64_MAX, INT64_MAX};  // all sink
  for (TopKKind kind : {TopKKind::exact, TopKKind::hybrid}) {
    BlockSelectObserver obs(s.heads, s.rows, s.len, s.len, s.beta, s.forced, s.chi,
                            {.kind = kind, .k = 8, .k_exact = 8});
    feed(obs, s, Pattern::random);
    std::vector<BlockScore> got = {{1, 1.0f}};
    obs.result(1, int64_t(s.rows.size()) - 1, got);
    EXPECT_TRUE(got.empty());
  }
}

}  // namespace
}  // namespace spattn
