// MOMO's per-row selection pieces the device shares between its two forms (src/cuda/
// row_topk.cuh, host and device code), here on the CPU against plain rules: the heap keeps the
// k largest keys and sorts them best first as a full sort would; the fold of a row's tiles
// into block scores, offered to the heap as the tiles arrive, selects what scoring every
// candidate block and sorting them selects (ties to the smaller block, -inf blocks left out,
// tiles past the row's limit unread).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "cuda/row_topk.cuh"

namespace spattn::cuda {
namespace {

TEST(RowTopK, HeapKeepsTheLargestKeysBestFirst) {
  std::mt19937_64 rng(3);
  for (int k : {1, 2, 5, 64, 128})
    for (int n : {0, 1, 3, 64, 200, 1000}) {
      std::vector<unsigned long long> all(static_cast<size_t>(n));
      for (auto& x : all) x = rng() % 5000 + 1;  // repeats: equal keys are kept as equals
      std::vector<unsigned long long> heap(static_cast<size_t>(k));
      int count = 0;
      for (unsigned long long x : all) heap_offer(heap.data(), count, k, x);
      heap_sort_desc(heap.data(), count);
      std::sort(all.begin(), all.end(), std::greater<>());
      all.resize(std::min<size_t>(all.size(), size_t(k)));
      heap.resize(size_t(count));
      EXPECT_EQ(heap, all) << "k " << k << " n " << n;
    }
}

TEST(RowTopK, KeysOrderByScoreThenTheSmallerBlock) {
  EXPECT_GT(make_key(3, 1.5f), make_key(2, 1.0f));
  EXPECT_GT(make_key(2, 1.0f), make_key(3, 1.0f));  // a tie: the smaller block first
  EXPECT_GT(make_key(7, -1.0f), make_key(1, -2.0f));
  EXPECT_EQ(make_key(4, -0.0f), make_key(4, 0.0f));
  for (float s : {-3.25f, -0.0f, 0.0f, 1e-30f, 7.5f, -INFINITY}) {
    EXPECT_EQ(key_block(make_key(11, s)), 11);
    EXPECT_EQ(key_score(make_key(11, s)), s + 0.0f);
  }
}

// Rows at the end of longer caches, blocks of one to three tiles, sinks and local windows that
// cut the candidates, tiles with no key measured, tied scores.
TEST(RowTopK, FoldAsTilesArriveIsTheSortOfEveryCandidate) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  int checked = 0;
  for (int beta : {64, 128, 192})
    for (int k : {1, 3, 8, 40})
      for (int trial = 0; trial < 40; ++trial) {
        const int kv_len = 64 + int(rng() % 3000), q_len = 1 + int(rng() % kv_len);
        const int pos_offset = kv_len - q_len, row = int(rng() % q_len);
        QBlock f{};
        f.sink_end = int(rng() % 3);
        f.local_begin = f.sink_end + int(rng() % 40);
        const Candidates c = candidates_of(row, f, kv_len, pos_offset, beta);
        ASSERT_EQ(c.limit, std::min(kv_len, pos_offset + row + 1));
        const int n_tiles = (c.limit + 63) / 64;
        std::vector<float> tile(static_cast<size_t>(n_tiles));
        for (float& x : tile) {
          const int pick = int(rng() % 10);
          x = pick == 0 ? -INFINITY : pick == 1 ? 0.5f : u(rng);  // none measured; ties
        }
        // The rule: each candidate block's tiles below the limit, folded in key order.
        std::vector<unsigned long long> want;
        for (int j = c.lo; j < c.lo + c.n; ++j) {
          const int t0 = j * beta / 64, t1 = std::min(n_tiles, (j + 1) * beta / 64);
          float s = tile[size_t(t0)];
          for (int t = t0 + 1; t < t1; ++t) s = log_add_exp(s, tile[size_t(t)]);
          if (s != -INFINITY) want.push_back(make_key(j, s));
        }
        std::sort(want.begin(), want.end(), std::greater<>());
        want.resize(std::min<size_t>(want.size(), size_t(k)));
        // The fused form: tiles one by one.
        std::vector<unsigned long long> heap(static_cast<size_t>(k));
        int count = 0;
        BlockFold fold;
        for (int t = 0; t < n_tiles; ++t)
          fold.add(t, tile[size_t(t)], beta, c, heap.data(), count, k);
        fold.finish(c, heap.data(), count, k);
        heap_sort_desc(heap.data(), count);
        heap.resize(size_t(count));
        EXPECT_EQ(heap, want) << "beta " << beta << " k " << k << " trial " << trial;
        checked += !want.empty();
      }
  EXPECT_GT(checked, 300);  // most draws have candidates
}

}  // namespace
}  // namespace spattn::cuda
