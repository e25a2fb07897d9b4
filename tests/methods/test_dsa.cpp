// DeepSeek's sparse attention (src/methods/dsa.cpp) against plain twins: the Hadamard rotation
// against the Sylvester matrix llama.cpp multiplies by; the lightning indexer's scores
// (sum over heads of the weight times ReLU(q . k)) against plain loops, over keys in several
// packed chunks, the same bits however a row's keys are split; the top-k selection against
// llama.cpp's (ggml-cpu's top_k copied: which of the tokens tied at the cut it keeps), each row
// reading every key while it has at most top-k, and a decode row's keys split among workers;
// the indexer keys' truncation and copies.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "methods/dsa.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

std::vector<float> randn(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

TEST(Dsa, HadamardIsSylvestersOrthonormalMatrix) {
  for (int64_t n : {64, 128, 256}) {
    const std::vector<float> x = randn(size_t(n), uint64_t(n));
    std::vector<float> y = x;
    hadamard_rotate(y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int64_t j = 0; j < n; ++j)
        want += (std::popcount(uint64_t(i & j)) % 2 ? -1.0 : 1.0) * x[size_t(j)];
      EXPECT_NEAR(y[size_t(i)], want / std::sqrt(double(n)), 1e-5) << n << " " << i;
    }
    hadamard_rotate(y.data(), n);  // H H = I
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[size_t(i)], x[size_t(i)], 1e-5);
  }
}

// I[s] = sum_h w[h] ReLU(q[h] . k[s]) in double.
std::vector<double> plain_scores(const float* q, const float* w, int64_t H, int64_t D,
                                 const std::vector<float>& k, int64_t n) {
  std::vector<double> s(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t h = 0; h < H; ++h) {
      double dot = 0;
      for (int64_t c = 0; c < D; ++c) dot += double(q[h * D + c]) * double(k[size_t(j * D + c)]);
      s[size_t(j)] += double(w[h]) * std::max(dot, 0.0);
    }
  return s;
}

// Keys appended up to the room given never move (a decode's append copies nothing), and a copy
// (a fork) keeps the room; past it they still append.
TEST(Dsa, IndexerKeysHoldTheirRoom) {
  const int64_t D = 8, cap = 100;
  const std::vector<float> k = randn(size_t((cap + 1) * D), 4);
  IndexerKeys keys(D, cap);
  EXPECT_EQ(keys.bytes(), size_t(cap * D) * sizeof(float));
  keys.append(k.data(), 1);
  const float* first = keys.row(0);
  for (int64_t i = 1; i < cap; i += 33)
    keys.append(k.data() + i * D, std::min<int64_t>(33, cap - i));
  ASSERT_EQ(keys.size(), cap);
  EXPECT_EQ(keys.row(0), first);
  keys.truncate(50);
  keys.append(k.data() + 50 * D, 1);
  EXPECT_EQ(keys.row(0), first);
  EXPECT_EQ(keys.row(50)[0], k[size_t(50 * D)]);
  const IndexerKeys copy = keys;
  EXPECT_EQ(copy.bytes(), keys.bytes());
  IndexerKeys assigned(D);
  assigned = keys;
  EXPECT_EQ(assigned.bytes(), keys.bytes());
  keys.append(k.data(), cap - keys.size());
  keys.append(k.data() + cap * D, 1);  // past the room: it grows
  EXPECT_EQ(keys.size(), cap + 1);
  EXPECT_EQ(keys.row(cap)[0], k[size_t(cap * D)]);
}

TEST(Dsa, IndexerScoresEqualPlainLoops) {
  const int64_t H = 4, D = 64, n = IndexerKeys::kChunk + 700;  // two chunks, the last partial
  const std::vector<float> k = randn(size_t(n * D), 1), q = randn(size_t(H * D), 2),
                           w = randn(size_t(H), 3);
  IndexerKeys keys(D);
  keys.append(k.data(), n);
  keys.pack(n);
  std::vector<float> s(static_cast<size_t>(n)), scratch(size_t(H * IndexerKeys::kBlock));
  for (int64_t len : {int64_t(1), int64_t(100), n}) {
    indexer_scores(q.data(), w.data(), H, keys, 0, len, s.data(), scratch.data());
    const std::vector<double> want = plain_scores(q.data(), w.data(), H, D, k, len);
    for (int64_t j = 0; j < len; ++j)
      ASSERT_NEAR(s[size_t(j)], want[size_t(j)], 1e-4 * (1 + std::abs(want[size_t(j)]))) << j;
  }
  // Split at blocks (across the chunk boundary too), the same bits as the whole row.
  for (int64_t cut : {IndexerKeys::kBlock, IndexerKeys::kChunk, IndexerKeys::kChunk + 512}) {
    std::vector<float> t(s.size(), -1.0f);
    indexer_scores(q.data(), w.data(), H, keys, 0, cut, t.data(), scratch.data());
    indexer_scores(q.data(), w.data(), H, keys, cut, n, t.data(), scratch.data());
    EXPECT_EQ(t, s) << cut;
  }
  EXPECT_THROW(indexer_scores(q.data(), w.data(), H, keys, 100, n, s.data(), scratch.data()),
               Error);  // not at a block
  // One row (decode) with its keys split among 2 or 3 workers selects what one worker does.
  const IndexerRows row{q.data(), nullptr, w.data(), H, D};
  const TokenSelection whole = dsa_select(row, 1, n - 1, keys, 100, 1);
  ASSERT_EQ(whole.count(0), 100);
  for (int threads : {2, 3})
    EXPECT_EQ(dsa_select(row, 1, n - 1, keys, 100, threads).keys, whole.keys);
}

// llama.cpp's top-k on the CPU (ggml-cpu's ggml_compute_forward_top_k_f32), copied: the
// indices in order, std::partial_sort of the first k by greater score, those k kept (sorted
// here, as a set).
std::vector<int64_t> ggml_top_k(const std::vector<float>& s, int64_t k) {
  std::vector<int32_t> tmp(s.size());
  std::iota(tmp.begin(), tmp.end(), 0);
  std::partial_sort(tmp.begin(), tmp.begin() + k, tmp.end(),
                    [&](int32_t a, int32_t b) { return s[size_t(a)] > s[size_t(b)]; });
  std::vector<int64_t> out(tmp.begin(), tmp.begin() + k);
  std::sort(out.begin(), out.end());
  return out;
}

// The k highest, equal scores broken by the earlier token (what spattn's selectors keep).
std::vector<int64_t> earliest_top_k(const std::vector<float>& s, int64_t k) {
  std::vector<int64_t> order(s.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return s[size_t(a)] > s[size_t(b)]; });
  order.resize(size_t(k));
  std::sort(order.begin(), order.end());
  return order;
}

#if defined(__GLIBCXX__)
// What llama.cpp built with GCC's library keeps among equal scores, by hand: partial_sort is a
// heap select. make_heap over the first k = 3 indices leaves them [2, 1, 0] (root first: its
// sift moves a hole down even past equal scores); index 3 (score 1) beats the root's 0 and
// takes its place, sifting to [0, 1, 3]; index 4 (score 1) beats the root again and evicts
// index 0. So {1, 3, 4} stay where the earliest-first rule keeps {0, 3, 4}.
TEST(Dsa, TopKKeepsTheTiedTokensGgmlKeeps) {
  const std::vector<float> s = {0, 0, 0, 1, 1};
  TopKScratch scratch;
  std::vector<int64_t> out;
  top_k_as_ggml(s.data(), int64_t(s.size()), 3, scratch, out);
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(earliest_top_k(s, 3), (std::vector<int64_t>{0, 3, 4}));
}
#endif

// The set against llama.cpp's partial sort on scores with and without ties at the cut: distinct
// values (the linear selection's case), a few values repeated (ties everywhere), signed zeros
// (equal as floats), -inf, and a NaN (both left to the partial sort), for cuts from 1 to n.
TEST(Dsa, TopKIsGgmlsSetWithAndWithoutTies) {
  TopKScratch scratch;
  std::vector<int64_t> out;
  for (const int64_t n : {1, 50, 1000, 4099})
    for (int form = 0; form < 5; ++form) {
      std::vector<float> s = randn(size_t(n), uint32_t(10 + form));
      for (float& x : s) {
        if (form == 1) x = std::round(x * 2.0f);
        if (form == 2) x = x > 0.5f ? x : (x > 0 ? 0.0f : -0.0f);
        if (form == 3 && x < -1.0f) x = -std::numeric_limits<float>::infinity();
      }
      if (form == 4) s[size_t(n / 2)] = std::numeric_limits<float>::quiet_NaN();
      for (const int64_t k : {int64_t(1), int64_t(7), n / 3, n - 1, n}) {
        if (k < 1 || k > n) continue;
        top_k_as_ggml(s.data(), n, k, scratch, out);
        std::sort(out.begin(), out.end());
        EXPECT_EQ(out, ggml_top_k(s, k)) << "n " << n << " form " << form << " k " << k;
      }
    }
}

// Each row's set against llama.cpp's rule on the same scores, with deliberate ties at the cut:
// every fifth key is zero (score exactly 0 after the ReLU), keys 21..29 repeat key 7 (equal
// scores), and every second row's head weights are negative (every score <= 0, so the cut
// falls among the zeros). Rows with at most top_k keys read them all.
TEST(Dsa, SelectionIsLlamaCppsTopKWithTies) {
  const int64_t H = 3, D = 64, pos0 = 40, n = 60, top_k = 16, L = pos0 + n;
  std::vector<float> k = randn(size_t(L * D), 4);
  for (int64_t j = 0; j < L; j += 5) std::fill_n(&k[size_t(j * D)], D, 0.0f);
  for (int64_t j = 21; j < 30; ++j)
    if (j % 5) std::copy_n(&k[size_t(7 * D)], D, &k[size_t(j * D)]);
  const std::vector<float> q = randn(size_t(n * H * D), 5);
  std::vector<float> w = randn(size_t(n * H), 6);
  for (int64_t i = 1; i < n; i += 2)
    for (int64_t h = 0; h < H; ++h) w[size_t(i * H + h)] = -std::abs(w[size_t(i * H + h)]);
  IndexerKeys keys(D);
  keys.append(k.data(), L);
  const IndexerRows rows{q.data(), nullptr, w.data(), H, D};
  const TokenSelection sel = dsa_select(rows, n, pos0, keys, top_k, 2);
  ASSERT_EQ(sel.rows(), n);
  int tied = 0, not_earliest = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = pos0 + i + 1;
    if (len <= top_k) {
      EXPECT_TRUE(sel.all[size_t(i)]) << i;
      continue;
    }
    ASSERT_FALSE(sel.all[size_t(i)]) << i;
    std::vector<float> s(static_cast<size_t>(len)), scratch(size_t(H * IndexerKeys::kBlock));
    indexer_scores(&q[size_t(i * H * D)], &w[size_t(i * H)], H, keys, 0, len, s.data(),
                   scratch.data());
    const std::vector<int64_t> want = ggml_top_k(s, top_k);
    EXPECT_EQ(std::vector<int64_t>(sel.row(i), sel.row(i) + sel.count(i)), want) << i;
    // The row alone, as decode calls it: its keys split among more workers than rows.
    const IndexerRows row{&q[size_t(i * H * D)], nullptr, &w[size_t(i * H)], H, D};
    const TokenSelection one = dsa_select(row, 1, pos0 + i, keys, top_k, 3);
    EXPECT_EQ(std::vector<int64_t>(one.row(0), one.row(0) + one.count(0)), want) << i;
    std::vector<float> sorted = s;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const float cut = sorted[size_t(top_k - 1)];
    tied += sorted[size_t(top_k)] == cut;  // a token left out that scores as one kept
    not_earliest += want != earliest_top_k(s, top_k);
  }
  // The ties are there, and they matter: the earliest-first rule keeps other tokens.
  EXPECT_GE(tied, n / 4);
  EXPECT_GE(not_earliest, 1);
}

// Keys packed as they arrive (a prompt, then decode steps one key at a time, across a chunk's
// end, and after a truncation) score as the same keys packed at once, bit for bit, and a
// decode step's key goes into its chunk in place (the chunk's tiles are not made again).
TEST(Dsa, KeysPackedAsTheyArriveEqualPackedAtOnce) {
  const int64_t H = 3, D = 64, n = IndexerKeys::kChunk + 40;
  const std::vector<float> k = randn(size_t(n * D), 11), q = randn(size_t(H * D), 12),
                           w = randn(size_t(H), 13);
  IndexerKeys grown(D, n);
  const int64_t prompt = IndexerKeys::kChunk - 20;
  grown.append(k.data(), prompt);
  grown.pack(prompt);
  const void* tiles = grown.chunk(0).data.get();
  bool rolled_back = false;
  for (int64_t j = prompt; j < n; ++j) {
    if (j == prompt + 10 && !rolled_back) {  // a rollback of five keys, then on
      grown.truncate(j - 5);
      j -= 5;
      rolled_back = true;
    }
    grown.append(k.data() + j * D, 1);
    grown.pack(j + 1);
    if (j + 1 < IndexerKeys::kChunk && j < prompt + 5) {
      EXPECT_EQ(grown.chunk(0).data.get(), tiles);
    }
  }
  IndexerKeys once(D);
  once.append(k.data(), n);
  once.pack(n);
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)),
      scratch(size_t(H * IndexerKeys::kBlock));
  indexer_scores(q.data(), w.data(), H, grown, 0, n, a.data(), scratch.data());
  indexer_scores(q.data(), w.data(), H, once, 0, n, b.data(), scratch.data());
  EXPECT_EQ(a, b);
}

TEST(Dsa, KeysTruncateAppendAndCopy) {
  const int64_t D = 64, n = IndexerKeys::kChunk + 10;
  const std::vector<float> k = randn(size_t(n * D), 7), q = randn(size_t(D), 8);
  const float w = 1.0f;
  IndexerKeys keys(D);
  keys.append(k.data(), n);
  keys.pack(n);
  keys.truncate(IndexerKeys::kChunk - 5);  // cuts the first chunk
  keys.append(k.data() + (IndexerKeys::kChunk - 5) * D, 15);
  EXPECT_EQ(keys.size(), IndexerKeys::kChunk + 10);
  const IndexerKeys copy = keys;
  for (const IndexerKeys* kk : {static_cast<const IndexerKeys*>(&keys), &copy}) {
    IndexerKeys c = *kk;
    c.pack(c.size());
    std::vector<float> s(static_cast<size_t>(n)), scratch(size_t(IndexerKeys::kBlock));
    indexer_scores(q.data(), &w, 1, c, 0, n, s.data(), scratch.data());
    const std::vector<double> want = plain_scores(q.data(), &w, 1, D, k, n);
    for (int64_t j = 0; j < n; ++j) ASSERT_NEAR(s[size_t(j)], want[size_t(j)], 1e-3) << j;
  }
  EXPECT_THROW(keys.truncate(n + 1), Error);
}

}  // namespace
}  // namespace spattn
