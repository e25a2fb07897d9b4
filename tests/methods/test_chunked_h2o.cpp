// chunked_h2o ("Chunked Sparse Attention for Prefill Optimization") against a plain
// double-precision twin of the whole algorithm, the paper's Task 3/4 verification tables, its
// dot-product table, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "spattn/chunked_h2o.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

struct Chunk {
  int64_t begin, end;
  bool batch_start;
};

std::vector<Chunk> chunks_of(int64_t n, const ChunkedH2OParams& p) {
  std::vector<Chunk> cs;
  for (int64_t b0 = 0; b0 < n; b0 += p.batch) {
    const int64_t b1 = std::min(n, b0 + p.batch);
    for (int64_t c0 = b0; c0 < b1; c0 += p.chunk)
      cs.push_back({c0, std::min(b1, c0 + p.chunk), c0 == b0});
  }
  return cs;
}

// Softmax weights (double) of row i of q head h over `keys`.
std::vector<double> weights(const TensorView& q, const TensorView& k, int64_t h, int64_t i,
                            const std::vector<int64_t>& keys) {
  const int64_t kh = h / (q.heads / k.heads);
  std::vector<double> s;
  double m = -INFINITY;
  for (int64_t j : keys) {
    double acc = 0;
    for (int64_t c = 0; c < q.dim; ++c) acc += double(q.get(h, i, c)) * k.get(kh, j, c);
    s.push_back(acc / std::sqrt(double(q.dim)));
    m = std::max(m, s.back());
  }
  double l = 0;
  for (double& x : s) l += (x = std::exp(x - m));
  for (double& x : s) x /= l;
  return s;
}

// The whole method written plainly, straight from the paper's Appendix A and B.
struct Plain {
  std::vector<double> out;                                // [h][n][d]
  std::vector<std::vector<std::vector<int64_t>>> memory;  // [c][h], empty when not built
  std::vector<std::vector<double>> scores;                // [h][n]
};

Plain plain_h2o(const TensorView& q, const TensorView& k, const TensorView& v,
                const ChunkedH2OParams& p) {
  const int64_t n = q.seq, hq = q.heads, d = q.dim;
  Plain r;
  r.out.assign(size_t(hq * n * d), 0.0);
  r.scores.assign(size_t(hq), std::vector<double>(size_t(n), 0.0));
  std::vector<std::vector<int64_t>> mem(static_cast<size_t>(hq));
  bool have = false;
  const auto cs = chunks_of(n, p);
  for (size_t c = 0; c < cs.size(); ++c) {
    const auto [c0, c1, bs] = cs[c];
    if (bs && !p.carry) have = false, mem.assign(size_t(hq), {});
    for (int64_t h = 0; h < hq; ++h) {
      auto& sc = r.scores[size_t(h)];
      for (int64_t j = c0; j < c1; ++j) sc[size_t(j)] = 0;
      for (int64_t i = c0; i < c1; ++i) {
        std::vector<int64_t> intra;
        for (int64_t j = c0; j <= i; ++j) intra.push_back(j);
        const auto w = weights(q, k, h, i, intra);  // initial scores: intra column sums
        for (size_t x = 0; x < intra.size(); ++x) sc[size_t(intra[x])] += w[x];
        std::vector<int64_t> keys = have ? mem[size_t(h)] : std::vector<int64_t>{};
        keys.insert(keys.end(), intra.begin(), intra.end());
        const auto o = test::row_over_keys(q, k, v, h, i, keys);
        std::copy(o.begin(), o.end(), r.out.begin() + (h * n + i) * d);
      }
      if (have)
        for (int64_t i = c0; i < c1; ++i) {  // accumulation: inter column sums
          const auto w = weights(q, k, h, i, mem[size_t(h)]);
          for (size_t x = 0; x < w.size(); ++x) sc[size_t(mem[size_t(h)][x])] += w[x];
        }
    }
    r.memory.emplace_back(size_t(hq));
    if (c + 1 == cs.size()) break;
    for (int64_t h = 0; h < hq; ++h) {
      const auto& sc = r.scores[size_t(h)];
      const int64_t lb = std::max(c0, c1 - p.local);
      std::vector<int64_t> cand = mem[size_t(h)];
      for (int64_t j = c0; j < lb; ++j) cand.push_back(j);
      std::sort(cand.begin(), cand.end(), [&](int64_t a, int64_t b) {
        return sc[size_t(a)] != sc[size_t(b)] ? sc[size_t(a)] > sc[size_t(b)] : a < b;
      });
      cand.resize(std::min<size_t>(cand.size(), size_t(p.heavy)));
      for (int64_t j = lb; j < c1; ++j) cand.push_back(j);
      std::sort(cand.begin(), cand.end());
      mem[size_t(h)] = cand;
      r.memory.back()[size_t(h)] = cand;
    }
    have = true;
  }
  return r;
}

struct Inputs {
  Tensor q, k, v;
};
Inputs make_inputs(int64_t hq, int64_t hkv, int64_t n, int64_t d, uint64_t seed) {
  return {test::random_tensor(DType::f32, hq, n, d, seed),
          test::random_tensor(DType::f32, hkv, n, d, seed + 1),
          test::random_tensor(DType::f32, hkv, n, d, seed + 2)};
}

ChunkedH2OParams params(int64_t s, int64_t b, int64_t l, int64_t h, bool carry = true) {
  ChunkedH2OParams p;
  p.chunk = s;
  p.batch = b;
  p.local = l;
  p.heavy = h;
  p.carry = carry;
  return p;
}

void expect_matches_plain(int64_t n, const ChunkedH2OParams& p) {
  SCOPED_TRACE(::testing::Message() << "N " << n << " S " << p.chunk << " B " << p.batch << " L "
                                    << p.local << " H " << p.heavy << " carry " << p.carry);
  const Inputs in = make_inputs(4, 2, n, 16, 100 + uint64_t(n));
  Tensor out(DType::f32, 4, n, 16);
  std::vector<float> lse(size_t(4 * n));
  ChunkedH2OTrace trace;
  attention_chunked_h2o(in.q, in.k, in.v, out, p, {}, lse.data(), nullptr, &trace);
  const Plain want = plain_h2o(in.q, in.k, in.v, p);
  ASSERT_EQ(trace.memory.size(), want.memory.size());
  for (size_t c = 0; c < want.memory.size(); ++c) EXPECT_EQ(trace.memory[c], want.memory[c]) << c;
  const TensorView o = out.view();
  double worst = 0;
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < 16; ++c)
        worst = std::max(worst, std::abs(o.get(h, i, c) - want.out[size_t((h * n + i) * 16 + c)]));
  EXPECT_LT(worst, 2e-5);
  // The layer's scores, run batch by batch, equal the plain ones.
  ChunkedH2OLayer layer(p, 4, 2, 16, DType::f32, n);
  Tensor o2(DType::f32, 4, n, 16);
  for (int64_t b0 = 0; b0 < n; b0 += p.batch) {
    const int64_t len = std::min(p.batch, n - b0);
    layer.prefill_batch(in.q.view().rows(b0, len), in.k.view().rows(b0, len),
                        in.v.view().rows(b0, len), o2.view().rows(b0, len), {}, b0 + len == n);
  }
  EXPECT_EQ(test::diff(o2, out).max_abs, 0.0);  // batch by batch is the same computation
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t j = 0; j < n; ++j)
      EXPECT_NEAR(layer.scores(h)[size_t(j)], want.scores[size_t(h)][size_t(j)], 1e-4)
          << h << " " << j;
  for (float x : lse) EXPECT_TRUE(std::isfinite(x));
}

TEST(ChunkedH2O, MatchesPlainTwinOnEdgeCases) {
  const int64_t s = 64;
  for (int64_t n : {40, 64, 65, 127, 128, 200}) expect_matches_plain(n, params(s, 2048, 16, 16));
  expect_matches_plain(300, params(s, 128, 16, 16));         // N not a multiple of B
  expect_matches_plain(300, params(s, 100, 16, 16));         // B not a multiple of S
  expect_matches_plain(300, params(s, 128, 16, 16, false));  // memory reset per logical batch
  expect_matches_plain(250, params(s, 2048, 0, 24));         // heavy only
  expect_matches_plain(250, params(s, 2048, 24, 0));         // local only
}

// Phase 1 over the caller's packed K/V (the model runner's KV cache) is the same computation as
// packing the batch again: bitwise the same output, LSE and scores.
TEST(ChunkedH2O, PackedBatchIsTheSameComputation) {
  const int64_t n = 300;
  const ChunkedH2OParams p = params(64, 2048, 16, 16);
  const Inputs in = make_inputs(4, 2, n, 16, 57);
  Tensor a(DType::f32, 4, n, 16), b(DType::f32, 4, n, 16);
  std::vector<float> lse_a(size_t(4 * n)), lse_b(size_t(4 * n));
  ChunkedH2OLayer la(p, 4, 2, 16, DType::f32, n), lb(p, 4, 2, 16, DType::f32, n);
  la.prefill_batch(in.q.view(), in.k.view(), in.v.view(), a.view(), {}, true, lse_a.data());
  PackedKV cache(2, 16, DType::f32, n + 8);  // a cache with room to grow, as the runner's
  cache.append(in.k.view(), in.v.view());
  lb.prefill_batch(in.q.view(), in.k.view(), in.v.view(), b.view(), {}, true, lse_b.data(), nullptr,
                   &cache);
  EXPECT_EQ(test::diff(a, b).max_abs, 0.0);
  EXPECT_EQ(lse_a, lse_b);
  for (int64_t h = 0; h < 4; ++h) {
    EXPECT_TRUE(std::equal(la.scores(h).begin(), la.scores(h).end(), lb.scores(h).begin()));
    EXPECT_TRUE(std::ranges::equal(la.memory(h), lb.memory(h)));
  }
}

// Two layers on one scratch, their batches interleaved as the runner runs them (layer A's
// batch, layer B's, A's next, ...), give what each gives with a scratch of its own: nothing a
// batch leaves in the scratch is read by the next layer or the next batch.
TEST(ChunkedH2O, SharedScratchAcrossLayersIsTheSameComputation) {
  const int64_t n = 300, batch = 128;
  const ChunkedH2OParams p = params(48, batch, 16, 16);
  const Inputs ia = make_inputs(4, 2, n, 16, 61), ib = make_inputs(4, 2, n, 16, 62);
  auto run = [&](ChunkedH2OLayer& la, ChunkedH2OLayer& lb, Tensor& oa, Tensor& ob) {
    for (int64_t b0 = 0; b0 < n; b0 += batch) {
      const int64_t len = std::min(batch, n - b0);
      const bool last = b0 + len == n;
      for (auto [l, in, o] : {std::tuple{&la, &ia, &oa}, std::tuple{&lb, &ib, &ob}})
        l->prefill_batch(in->q.view().rows(b0, len), in->k.view().rows(b0, len),
                         in->v.view().rows(b0, len), o->view().rows(b0, len), {}, last);
    }
  };
  Tensor oa(DType::f32, 4, n, 16), ob(DType::f32, 4, n, 16);
  Tensor sa(DType::f32, 4, n, 16), sb(DType::f32, 4, n, 16);
  ChunkedH2OLayer a(p, 4, 2, 16, DType::f32, n), b(p, 4, 2, 16, DType::f32, n);
  run(a, b, oa, ob);
  ChunkedH2OLayer c(p, 4, 2, 16, DType::f32, n);
  ChunkedH2OLayer d(p, 4, 2, 16, DType::f32, n, true, c.scratch());
  EXPECT_EQ(c.scratch(), d.scratch());
  run(c, d, sa, sb);
  EXPECT_EQ(test::diff(oa, sa).max_abs, 0.0);
  EXPECT_EQ(test::diff(ob, sb).max_abs, 0.0);
  for (int64_t h = 0; h < 4; ++h) {
    EXPECT_TRUE(std::ranges::equal(a.scores(h), c.scores(h)));
    EXPECT_TRUE(std::ranges::equal(b.memory(h), d.memory(h)));
  }
  // The state is the layer's own; the scratch is counted apart.
  EXPECT_EQ(a.state_bytes(), d.state_bytes());
  EXPECT_GT(c.scratch_bytes(), 0u);
  // A scratch of another shape or other parameters is refused.
  EXPECT_THROW(ChunkedH2OLayer(p, 4, 2, 32, DType::f32, n, true, c.scratch()), Error);
  EXPECT_THROW(
      ChunkedH2OLayer(params(64, batch, 16, 16), 4, 2, 16, DType::f32, n, true, c.scratch()),
      Error);
}

TEST(ChunkedH2O, OneChunkIsDense) {
  for (int64_t n : {40, 64}) {
    const Inputs in = make_inputs(4, 2, n, 16, 7);
    Tensor out(DType::f32, 4, n, 16), ref(DType::f32, 4, n, 16);
    attention_chunked_h2o(in.q, in.k, in.v, out, params(64, 64, 16, 16));
    attention_reference(in.q, in.k, in.v, ref);
    EXPECT_LT(test::diff(out, ref).max_abs, 1e-5) << n;
  }
}

TEST(ChunkedH2O, MemoryCoveringEveryEarlierTokenIsDenseChunkedPrefill) {
  const int64_t n = 300;
  const Inputs in = make_inputs(4, 2, n, 32, 11);
  Tensor out(DType::f32, 4, n, 32), dense(DType::f32, 4, n, 32), ref(DType::f32, 4, n, 32);
  Stats st;
  attention_chunked_h2o(in.q, in.k, in.v, out, params(64, 128, 16, 1024), {}, nullptr, &st);
  attention_dense(in.q, in.k, in.v, dense);
  attention_reference(in.q, in.k, in.v, ref);
  EXPECT_LT(test::diff(out, dense).max_abs, 1e-5);
  EXPECT_LT(test::diff(out, ref).max_abs, 1e-5);
  EXPECT_EQ(st.score_entries, st.causal_entries);  // every causal entry, once
}

// Task 4's table on a real run: Local exactly the tail L, Local and Heavy disjoint, sorted,
// |M| = L + H, indices before the chunk's end, heads choosing independently.
TEST(ChunkedH2O, MemorySetsHoldTask4Table) {
  const int64_t n = 64 * 5 + 20, L = 16, H = 24;
  const Inputs in = make_inputs(4, 2, n, 16, 21);
  Tensor out(DType::f32, 4, n, 16);
  ChunkedH2OTrace t;
  attention_chunked_h2o(in.q, in.k, in.v, out, params(64, 128, L, H), {}, nullptr, nullptr, &t);
  ASSERT_EQ(t.chunk_begin, (std::vector<int64_t>{0, 64, 128, 192, 256, 320}));
  EXPECT_EQ(t.inter, (std::vector<char>{0, 1, 1, 1, 1, 1}));  // memory carries across batches
  EXPECT_TRUE(t.memory.back()[0].empty());                    // the last chunk builds none
  for (size_t c = 0; c + 1 < t.memory.size(); ++c) {
    const int64_t c1 = t.chunk_begin[c] + 64;
    for (int64_t h = 0; h < 4; ++h) {
      const auto& m = t.memory[c][size_t(h)];
      ASSERT_EQ(int64_t(m.size()), L + H);
      EXPECT_TRUE(std::adjacent_find(m.begin(), m.end(), std::greater_equal<>()) == m.end());
      const std::vector<int64_t> tail(m.end() - L, m.end());
      EXPECT_EQ(tail, h2o_local_window(c1 - 64, c1, L));  // Local = the tail L, heavy all before
      EXPECT_LT(m.back(), c1);
      EXPECT_GE(m.front(), 0);
    }
    EXPECT_NE(t.memory[c][0], t.memory[c][1]);  // same kv head, own choice
    EXPECT_NE(t.memory[c][0], t.memory[c][2]);
  }
}

TEST(ChunkedH2O, BuildMemoryIsTopHeavyOfCandidates) {
  // Scores over 3 chunks of 8; local 2, heavy 3.
  std::vector<double> sc = {5, 1, 9, 0.5, 3, 2, 7, 7, /*C1*/ 4, 8, 1, 1, 6, 0, 2, 2};
  const auto m0 = h2o_build_memory({}, 0, 8, sc, 2, 3);
  EXPECT_EQ(m0, (std::vector<int64_t>{0, 2, 4, 6, 7}));  // top-3 of 0..5: 2, 0, 4; local 6, 7
  const auto m1 = h2o_build_memory(m0, 8, 16, sc, 2, 3);
  // candidates {0, 2, 4, 6, 7} u {8..13}: scores 5, 9, 3, 7, 7, 4, 8, 1, 1, 6, 0 -> 2, 9, 6
  EXPECT_EQ(m1, (std::vector<int64_t>{2, 6, 9, 14, 15}));
  // Ties go to the earlier position.
  std::vector<double> flat(16, 1.0);
  EXPECT_EQ(h2o_build_memory({}, 0, 16, flat, 4, 3),
            (std::vector<int64_t>{0, 1, 2, 12, 13, 14, 15}));
  // Fewer candidates than H: all of them.
  EXPECT_EQ(h2o_build_memory({}, 0, 4, flat, 2, 8), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_THROW(h2o_build_memory(std::vector<int64_t>{3, 2}, 8, 16, sc, 2, 3), Error);
  EXPECT_THROW(h2o_build_memory(std::vector<int64_t>{9}, 8, 16, sc, 2, 3), Error);
  EXPECT_THROW(h2o_build_memory({}, 8, 20, sc, 2, 3), Error);
}

// A token of C_0 that every query attends to (an attention sink) survives into M_1, M_2, ...
TEST(ChunkedH2O, HighScoreTokenOfFirstChunkSurvives) {
  const int64_t n = 64 * 4, sink = 5;
  Inputs in = make_inputs(2, 1, n, 16, 31);
  TensorView q = in.q.view(), k = in.k.view();
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < n; ++i) q.set(h, i, 0, q.get(h, i, 0) * 0.2f + 3.0f);
  for (int64_t c = 0; c < 16; ++c) k.set(0, sink, c, c == 0 ? 4.0f : 0.0f);
  Tensor out(DType::f32, 2, n, 16);
  ChunkedH2OTrace t;
  attention_chunked_h2o(in.q, in.k, in.v, out, params(64, 2048, 8, 8), {}, nullptr, nullptr, &t);
  for (size_t c = 0; c < 3; ++c)
    for (int64_t h = 0; h < 2; ++h) {
      const auto& m = t.memory[c][size_t(h)];
      EXPECT_TRUE(std::binary_search(m.begin(), m.end(), sink)) << "M_" << c << " head " << h;
    }
}

// Task 3: scores never decrease, memory tokens gain once per chunk, others stay put, and the
// number of accumulations is the number of chunks after the first.
TEST(ChunkedH2O, ScoresAccumulateMonotonicallyOncePerChunk) {
  const int64_t n = 64 * 5, s = 64;
  const Inputs in = make_inputs(2, 2, n, 16, 41);
  ChunkedH2OLayer layer(params(s, s, 8, 8), 2, 2, 16, DType::f32, n);
  Tensor out(DType::f32, 2, n, 16);
  std::vector<std::vector<double>> before(2);
  std::vector<std::vector<int64_t>> mem(2);
  for (int64_t c = 0; c * s < n; ++c) {
    layer.prefill_batch(in.q.view().rows(c * s, s), in.k.view().rows(c * s, s),
                        in.v.view().rows(c * s, s), out.view().rows(c * s, s), {},
                        (c + 1) * s == n);
    EXPECT_EQ(layer.score_updates(), c);
    for (int64_t h = 0; h < 2; ++h) {
      const auto now = layer.scores(h);
      for (int64_t j = 0; j < c * s; ++j) {
        const bool in_mem = std::binary_search(mem[size_t(h)].begin(), mem[size_t(h)].end(), j);
        if (in_mem)
          EXPECT_GT(now[size_t(j)], before[size_t(h)][size_t(j)]);
        else
          EXPECT_EQ(now[size_t(j)], before[size_t(h)][size_t(j)]);
      }
      for (int64_t j = c * s; j < (c + 1) * s; ++j) EXPECT_GT(now[size_t(j)], 0.0);
      before[size_t(h)].assign(now.begin(), now.end());
      mem[size_t(h)].assign(layer.memory(h).begin(), layer.memory(h).end());
    }
    EXPECT_NE(layer.scores(0)[size_t(c * s)], layer.scores(1)[size_t(c * s)]);  // per head
  }
  EXPECT_EQ(layer.score_updates(), n / s - 1);
  // Intra column sums of a chunk add up to its rows: each row's weights sum to one.
  double sum = 0;
  for (int64_t j = 0; j < s; ++j) sum += layer.scores(0)[size_t(j)];
  EXPECT_GT(sum, double(s) - 1e-3);  // and inter votes only add
}

// The paper's complexity table (Section 1.2.7): S = 1024, M = 512.
TEST(ChunkedH2O, DotProductCountsFollowThePaperTable) {
  auto p = params(1024, 4096, 256, 256);
  Stats st;
  {
    const int64_t n = 4096;
    const Inputs in = make_inputs(1, 1, n, 16, 51);
    Tensor out(DType::f32, 1, n, 16);
    attention_chunked_h2o(in.q, in.k, in.v, out, p, {}, nullptr, &st);
  }
  EXPECT_EQ(st.causal_entries, 8390656);  // 4096 * 4097 / 2
  EXPECT_EQ(st.score_entries, 2099200 + 1572864);
  EXPECT_EQ(st.score_entries, chunked_h2o_entries(4096, p));
  auto ratio = [](int64_t n, const ChunkedH2OParams& q) {
    return std::round(10.0 * double(n * (n + 1) / 2) / double(chunked_h2o_entries(n, q))) / 10;
  };
  EXPECT_EQ(ratio(4096, p), 2.3);
  // The paper's formula, (k-1) S M inter entries, gives 4.3x and 8.3x; its quoted 4.6x and 9.1x
  // (7.3M and 14.7M entries) count n_B (k_B - 1) inter chunks: no memory across logical batches.
  EXPECT_EQ(ratio(8192, p), 4.3);
  EXPECT_EQ(ratio(16384, p), 8.3);
  auto reset = params(1024, 4096, 256, 256, false);
  EXPECT_EQ(ratio(4096, reset), 2.3);
  EXPECT_EQ(ratio(8192, reset), 4.6);
  EXPECT_EQ(ratio(16384, reset), 9.1);
  EXPECT_EQ(chunked_h2o_entries(16384, reset), 14688256);
  // The kernels' counts equal the formula at 16384 in both forms.
  for (bool carry : {true, false}) {
    const int64_t n = 16384;
    const Inputs in = make_inputs(1, 1, n, 8, 61);
    Tensor out(DType::f32, 1, n, 8);
    Stats s16;
    attention_chunked_h2o(in.q, in.k, in.v, out, params(1024, 4096, 256, 256, carry), {}, nullptr,
                          &s16);
    EXPECT_EQ(s16.score_entries, chunked_h2o_entries(n, params(1024, 4096, 256, 256, carry)));
  }
}

TEST(ChunkedH2O, RegistryMethodRunsAndCoverageIsWhatItComputed) {
  const int64_t n = 200;
  const Inputs in = make_inputs(4, 2, n, 16, 71);
  const auto m = make_method("chunked_h2o:chunk=64,batch=128,local=8,heavy=16");
  EXPECT_EQ(m->name(), "chunked_h2o");
  Tensor out(DType::f32, 4, n, 16), direct(DType::f32, 4, n, 16);
  const MethodReport r = m->run(in.q, in.k, in.v, out, {});
  attention_chunked_h2o(in.q, in.k, in.v, direct, params(64, 128, 8, 16));
  EXPECT_EQ(test::diff(out, direct).max_abs, 0.0);
  EXPECT_EQ(r.extras.at("chunks"), 4.0);
  int64_t covered = 0;
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < n; i += 7) {
      const auto keys = test::coverage_keys(*r.coverage, h, i);
      const auto want = test::row_over_keys(in.q, in.k, in.v, h, i, keys);
      for (int64_t c = 0; c < 16; ++c) EXPECT_NEAR(out.view().get(h, i, c), want[size_t(c)], 2e-5);
    }
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < n; ++i)
      covered += int64_t(test::coverage_keys(*r.coverage, h, i).size());
  EXPECT_EQ(covered, r.stats.score_entries);
  // Decode-sized queries: full attention.
  Tensor q1 = test::random_tensor(DType::f32, 4, 3, 16, 5), o1(DType::f32, 4, 3, 16),
         ref(DType::f32, 4, 3, 16);
  EXPECT_EQ(m->run(q1, in.k, in.v, o1, {}).path, KernelPath::decode);
  attention_reference(q1, in.k, in.v, ref);
  EXPECT_LT(test::diff(o1, ref).max_abs, 1e-5);
}

TEST(ChunkedH2O, BadInputRaises) {
  EXPECT_THROW(make_method("chunked_h2o:chunk=0"), Error);
  EXPECT_THROW(make_method("chunked_h2o:chunk=64,local=65"), Error);
  EXPECT_THROW(make_method("chunked_h2o:local=0,heavy=0"), Error);
  EXPECT_THROW(make_method("chunked_h2o:carry=2"), Error);
  EXPECT_THROW(make_method("chunked_h2o:window=3"), Error);
  const Inputs in = make_inputs(4, 2, 100, 16, 81);
  Tensor out(DType::f32, 4, 100, 16);
  AttnOptions full;
  full.causal = false;
  EXPECT_THROW(make_method("chunked_h2o")->run(in.q, in.k, in.v, out, full), Error);
  ChunkedH2OLayer layer(params(64, 64, 8, 8), 4, 2, 16, DType::f32, 100);
  EXPECT_THROW(layer.prefill_batch(in.q.view().rows(0, 80), in.k.view().rows(0, 80),
                                   in.v.view().rows(0, 80), out.view().rows(0, 80), {}, false),
               Error);  // more rows than a logical batch
  EXPECT_THROW(layer.prefill_batch(in.q.view().rows(0, 10), in.k.view().rows(0, 9),
                                   in.v.view().rows(0, 10), out.view().rows(0, 10), {}, false),
               Error);
  PackedKV other(2, 16, DType::f32, 100);  // packed rows that are not the batch's
  other.append(in.k.view().rows(0, 50), in.v.view().rows(0, 50));
  EXPECT_THROW(
      layer.prefill_batch(in.q.view().rows(0, 40), in.k.view().rows(0, 40), in.v.view().rows(0, 40),
                          out.view().rows(0, 40), {}, false, nullptr, nullptr, &other),
      Error);
  EXPECT_THROW(ChunkedH2OLayer(params(64, 64, 8, 8), 3, 2, 16, DType::f32, 100), Error);
  Tensor qn = Tensor::copy_of(in.q);
  qn.view().set(1, 3, 2, NAN);
  EXPECT_THROW(attention_chunked_h2o(qn, in.k, in.v, out, params(64, 64, 8, 8)), Error);
}

}  // namespace
}  // namespace spattn
