// PackedKV: packed once and reused, appended in pieces, or packed in a chosen key order with
// original positions. Outputs are checked bitwise against the per-call packing and against the
// exact reference restricted to the packed key set.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "assets.hpp"
#include "spattn/blasst.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/sparse_attention.hpp"
#include "hwy/targets.h"
#include "kernels/flash_common.hpp"
#include "packed_kv_state.hpp"
#include "targets.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

struct Qkv {
  Tensor q, k, v;
  Qkv(DType t, int64_t hq, int64_t hk, int64_t lq, int64_t lk, int64_t d)
      : q(test::random_tensor(t, hq, lq, d, 21)),
        k(test::random_tensor(t, hk, lk, d, 22)),
        v(test::random_tensor(t, hk, lk, d, 23)) {}
};

TEST(PackedKV, PackedOnceEqualsPerCallPackingBitwise) {
  test::for_each_target([] {
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      Qkv in(t, 4, 2, 300, 517, 64);
      const PackedKV kv = PackedKV::pack(in.k, in.v);
      Tensor a(DType::f32, 4, 300, 64), b(DType::f32, 4, 300, 64);
      std::vector<float> la(4 * 300), lb(4 * 300);
      Stats sa, sb;
      attention_dense(in.q, in.k, in.v, a, {}, la.data(), &sa);
      attention_dense(in.q, kv, b, {}, lb.data(), &sb);
      EXPECT_TRUE(test::bitwise_equal(a, b)) << dtype_name(t);
      EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * 4), 0);
      EXPECT_EQ(sa.score_entries, sb.score_entries);
      EXPECT_EQ(sa.causal_entries, sb.causal_entries);
      // The same pack serves a second call (here: the last 5 rows, decode-like).
      Tensor c(DType::f32, 4, 5, 64), e(DType::f32, 4, 5, 64);
      attention_dense(in.q.view().rows(295, 5), in.k, in.v, c);
      attention_dense(in.q.view().rows(295, 5), kv, e);
      EXPECT_TRUE(test::bitwise_equal(c, e));
    }
  });
}

TEST(PackedKV, AppendedInPiecesEqualsPackedAtOnce) {
  test::for_each_target([] {
    for (DType t : {DType::f32, DType::bf16}) {
      Qkv in(t, 6, 3, 250, 700, 128);
      const PackedKV whole = PackedKV::pack(in.k, in.v);
      PackedKV grown(3, 128, t, 1000);
      int64_t at = 0;
      for (int64_t piece : {1, 63, 100, 64, 200, 272}) {
        grown.append(in.k.view().rows(at, piece), in.v.view().rows(at, piece));
        at += piece;
        EXPECT_EQ(grown.size(), at);
      }
      ASSERT_EQ(at, 700);
      Tensor a(DType::f32, 6, 250, 128), b(DType::f32, 6, 250, 128);
      attention_dense(in.q, whole, a);
      attention_dense(in.q, grown, b);
      EXPECT_TRUE(test::bitwise_equal(a, b)) << dtype_name(t);
      const std::vector<int64_t> rows = strided_rows(250, 16);
      Tensor qa(DType::f32, 6, int64_t(rows.size()), 128),
          qb(DType::f32, 6, int64_t(rows.size()), 128);
      attention_query_sparse(in.q, whole, rows, qa);
      attention_query_sparse(in.q, grown, rows, qb);
      EXPECT_TRUE(test::bitwise_equal(qa, qb));
    }
  });
}

// A decode appends one key at a time: the positions' storage grows geometrically (up to the
// capacity), not by one key per append, which copied every position at every step.
TEST(PackedKV, KeyByKeyAppendsReallocateLogarithmicallyOften) {
  Qkv in(DType::f32, 2, 2, 1, 3000, 64);
  PackedKV kv(2, 64, DType::f32, 3000);
  int64_t grew = 0;
  size_t cap = kv.data().positions.capacity();
  for (int64_t j = 0; j < 3000; ++j) {
    kv.append(in.k.view().rows(j, 1), in.v.view().rows(j, 1));
    grew += kv.data().positions.capacity() != cap;
    cap = kv.data().positions.capacity();
  }
  EXPECT_LE(grew, 13) << "3000 single appends";
  EXPECT_LE(cap, 3000u);
  EXPECT_EQ(kv.data().positions.size(), 3000u);
  EXPECT_EQ(kv.data().positions.back(), 2999);
}

// clear() empties the cache and keeps its capacity: refilled in another order and then in the
// natural one, it computes what a fresh pack does, bit for bit.
TEST(PackedKV, ClearedCacheRefillsLikeAFreshOne) {
  Qkv in(DType::f32, 2, 1, 100, 300, 64);
  PackedKV kv(1, 64, DType::f32, 300);
  std::vector<int64_t> reversed(300);
  for (int64_t i = 0; i < 300; ++i) reversed[size_t(i)] = 299 - i;
  kv.append_rows(in.k, in.v, reversed);
  kv.clear();
  EXPECT_EQ(kv.size(), 0);
  EXPECT_EQ(kv.max_position(), -1);
  kv.append(in.k.view().rows(0, 170), in.v.view().rows(0, 170));
  kv.append(in.k.view().rows(170, 130), in.v.view().rows(170, 130));
  Tensor a(DType::f32, 2, 100, 64), b(DType::f32, 2, 100, 64);
  attention_dense(in.q, PackedKV::pack(in.k, in.v), a);
  attention_dense(in.q, kv, b);
  EXPECT_TRUE(test::bitwise_equal(a, b));
}

// A chunk of queries placed by q_start against a cache that holds more keys than they see:
// the KV cache of chunked prefill, where chunk c attends to everything before it.
TEST(PackedKV, QueriesPlacedByQStart) {
  Qkv in(DType::f32, 2, 1, 100, 400, 64);
  const PackedKV kv = PackedKV::pack(in.k, in.v);
  Tensor out(DType::f32, 2, 100, 64);
  std::vector<float> lse(200);
  Stats st;
  AttnOptions opt;
  opt.q_start = 150;  // rows sit at positions 150..249
  attention_dense(in.q, kv, out, opt, lse.data(), &st);
  int64_t entries = 0;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 100; ++i) {
      std::vector<int64_t> keys(size_t(151 + i));
      std::iota(keys.begin(), keys.end(), 0);
      entries += int64_t(keys.size());
      double want_lse;
      const auto want = test::row_over_keys(in.q, in.k, in.v, h, i, keys, 0, &want_lse);
      for (int64_t c = 0; c < 64; ++c) ASSERT_NEAR(out.view().get(h, i, c), want[size_t(c)], 1e-5);
      EXPECT_NEAR(lse[size_t(h * 100 + i)], want_lse, 1e-4);
    }
  EXPECT_EQ(st.score_entries, entries);
  EXPECT_EQ(st.causal_entries, entries);
}

// Keys packed in a shuffled order (a subset of them), each with its original position: the
// output is the exact reference over that key set, causal by position.
TEST(PackedKV, PermutedOrderWithPositionsIsTheReferenceOverTheSameKeys) {
  test::for_each_target([] {
    for (DType t : {DType::f32, DType::bf16}) {
      const int64_t lk = 333, lq = 200, d = 64;
      Qkv in(t, 4, 2, lq, lk, d);
      std::vector<int64_t> order(static_cast<size_t>(lk));
      std::iota(order.begin(), order.end(), 0);
      std::mt19937 rng(5);
      std::shuffle(order.begin(), order.end(), rng);
      order.resize(250);  // a gathered subset, in shuffled order
      PackedKV kv(2, d, t, 400);
      kv.append_rows(in.k, in.v, std::span<const int64_t>(order).first(100));
      kv.append_rows(in.k, in.v, std::span<const int64_t>(order).subspan(100));
      EXPECT_EQ(kv.max_position(), *std::max_element(order.begin(), order.end()));
      for (bool causal : {true, false}) {
        AttnOptions opt;
        opt.causal = causal;
        opt.q_start = lk - lq;  // the queries are the last lq tokens of the original sequence
        Tensor out(DType::f32, 4, lq, d);
        std::vector<float> lse(size_t(4 * lq));
        Stats st;
        attention_dense(in.q, kv, out, opt, lse.data(), &st);
        int64_t entries = 0;
        for (int64_t h = 0; h < 4; ++h)
          for (int64_t i = 0; i < lq; i += 7) {
            std::vector<int64_t> keys;
            for (int64_t j : order)
              if (!causal || j <= lk - lq + i) keys.push_back(j);
            std::sort(keys.begin(), keys.end());
            double want_lse;
            const auto want = test::row_over_keys(in.q, in.k, in.v, h, i, keys, 0, &want_lse);
            const double tol = t == DType::bf16 ? 2e-2 : 2e-5;
            for (int64_t c = 0; c < d; ++c)
              ASSERT_NEAR(out.view().get(h, i, c), want[size_t(c)], tol)
                  << dtype_name(t) << " causal " << causal << " head " << h << " row " << i;
            EXPECT_NEAR(lse[size_t(h * lq + i)], want_lse, 1e-3);
          }
        for (int64_t i = 0; i < lq; ++i)
          for (int64_t j : order) entries += !causal || j <= lk - lq + i;
        EXPECT_EQ(st.score_entries, 4 * entries);
        EXPECT_EQ(st.causal_entries, 4 * entries);
      }
    }
  });
}

// A block mask over a permuted pack selects packed blocks; causality still follows positions.
TEST(PackedKV, BlockSparseOverPermutedKeys) {
  const int64_t lk = 256, d = 64;
  Qkv in(DType::f32, 2, 1, lk, lk, d);
  std::vector<int64_t> order(static_cast<size_t>(lk));
  for (int64_t j = 0; j < lk; ++j) order[size_t(j)] = (j % 4) * 64 + j / 4;  // stride-4 grid
  PackedKV kv(1, d, DType::f32, lk);
  kv.append_rows(in.k, in.v, order);
  // Every query block keeps packed blocks 0 and 2 (keys with position % 4 == ... by layout).
  std::vector<std::vector<int32_t>> lists(size_t(2 * 4), std::vector<int32_t>{0, 2});
  const BlockMask mask = BlockMask::from_lists(2, lk, lk, 64, 64, false, lists);
  Tensor out(DType::f32, 2, lk, d);
  attention_block_sparse(in.q, kv, out, mask);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < lk; i += 5) {
      std::vector<int64_t> keys;
      for (int64_t b : {0, 2})
        for (int64_t jj = 0; jj < 64; ++jj)
          if (order[size_t(b * 64 + jj)] <= i) keys.push_back(order[size_t(b * 64 + jj)]);
      std::sort(keys.begin(), keys.end());
      const auto want = test::row_over_keys(in.q, in.k, in.v, h, i, keys);
      for (int64_t c = 0; c < d; ++c) ASSERT_NEAR(out.view().get(h, i, c), want[size_t(c)], 2e-5);
    }
  // A causal mask over permuted keys is refused: causality comes from positions.
  const BlockMask causal = BlockMask::full(2, lk, lk, 64, 64, true);
  EXPECT_THROW(attention_block_sparse(in.q, kv, out, causal), Error);
}

// A KV cache that grows token by token, decoded after each append: every step equals the exact
// reference over the keys so far, and nothing is repacked.
TEST(PackedKV, DecodeReadsTheCacheAsItGrows) {
  test::for_each_target([] {
    for (DType t : {DType::f32, DType::bf16}) {
      const int64_t lk = 4200, d = 64;
      Qkv in(t, 4, 2, 3, lk, d);
      PackedKV kv(2, d, t, lk);
      kv.append(in.k.view().rows(0, 4100), in.v.view().rows(0, 4100));
      for (int64_t len : {4100, 4101, 4163, 4200}) {
        if (len > kv.size())
          kv.append(in.k.view().rows(kv.size(), len - kv.size()),
                    in.v.view().rows(kv.size(), len - kv.size()));
        Tensor out(DType::f32, 4, 3, d);
        std::vector<float> lse(12);
        Stats st;
        attention_decode(in.q, kv, out, {}, {}, lse.data(), &st);
        const TensorView kp = in.k.view().rows(0, len), vp = in.v.view().rows(0, len);
        for (int64_t h = 0; h < 4; ++h)
          for (int64_t i = 0; i < 3; ++i) {
            std::vector<int64_t> keys(size_t(len - 3 + i + 1));
            std::iota(keys.begin(), keys.end(), 0);
            double want_lse;
            const auto want = test::row_over_keys(in.q, kp, vp, h, i, keys, 0, &want_lse);
            const double tol = t == DType::bf16 ? 1e-2 : 1e-5;
            for (int64_t c = 0; c < d; ++c)
              ASSERT_NEAR(out.view().get(h, i, c), want[size_t(c)], tol)
                  << len << " " << h << " " << i;
            EXPECT_NEAR(lse[size_t(h * 3 + i)], want_lse, 1e-3);
          }
        EXPECT_EQ(st.score_entries, 4 * (3 * (len - 2) + 3));
      }
    }
  });
}

// A decoded token's q heads of one kv head are the rows of one item (each key tile widened once
// an item), up to 64 of them: a group of 40 is one item, 65 five of 13, 96 two of 48, 128 (the
// latent attention's heads over its one cached head) two of 64. The same bits as decoding each
// q head alone, and the plain twin's values; under BLASST's rule exact over the coverage recorded
// per q head, every head of an item sharing its skips.
TEST(PackedKV, DecodeTakesLargeGroupsInItemsOfWholeHeads) {
  const int64_t lk = 2500, d = 64;  // two key chunks
  for (int64_t group : {40, 65, 96, 128}) {
    const Tensor q = test::random_tensor(DType::f32, group, 1, d, 1);
    const Tensor k = test::random_tensor(DType::f32, 1, lk, d, 2);
    const Tensor v = test::random_tensor(DType::f32, 1, lk, d, 3);
    const PackedKV kv = PackedKV::pack(k, v, 0, 2, true, KVType::f16, KVType::f16);
    Tensor out(DType::f32, group, 1, d), alone(DType::f32, group, 1, d);
    attention_decode(q, kv, out);
    for (int64_t h = 0; h < group; ++h)
      attention_decode(q.view().head_range(h, 1), kv, alone.view().head_range(h, 1));
    EXPECT_TRUE(test::bitwise_equal(out, alone)) << group;
    Tensor ks(DType::f32, 1, lk, d), vs(DType::f32, 1, lk, d);  // as the f16 cache holds them
    for (int64_t j = 0; j < lk; ++j)
      for (int64_t c = 0; c < d; ++c) {
        ks.view().set(0, j, c, f16_to_f32(f32_to_f16(k.view().get(0, j, c))));
        vs.view().set(0, j, c, f16_to_f32(f32_to_f16(v.view().get(0, j, c))));
      }
    std::vector<int64_t> all(static_cast<size_t>(lk));
    std::iota(all.begin(), all.end(), 0);
    for (int64_t h = 0; h < group; h += 7) {
      const auto want = test::row_over_keys(q, ks, vs, h, 0, all);
      for (int64_t c = 0; c < d; ++c)
        ASSERT_NEAR(out.view().get(h, 0, c), want[size_t(c)], 2e-5) << group << " " << h;
    }
    SkipStats skip;
    skip.record_tiles = true;
    attention_decode(q, kv, out, {}, {.lambda = 0.02}, nullptr, nullptr, &skip);
    const auto cov = blasst_coverage(skip, 1, lk, true);
    for (int64_t h = 0; h < group; h += 5) {
      const auto want = test::row_over_keys(q, ks, vs, h, 0, test::coverage_keys(*cov, h, 0));
      for (int64_t c = 0; c < d; ++c)
        ASSERT_NEAR(out.view().get(h, 0, c), want[size_t(c)], 2e-5) << group << " " << h;
    }
  }
}

// BLASST decode over the packed cache: exact over the recorded coverage; lambda 0 is dense.
TEST(PackedKV, BlasstDecodeIsExactOverItsCoverage) {
  const int64_t lk = 5000, d = 64;
  Qkv in(DType::f32, 4, 2, 2, lk, d);
  // Make a few keys stand out so some tiles fall below the threshold and others do not.
  for (int64_t j = 0; j < lk; j += 97)
    for (int64_t c = 0; c < d; ++c) in.k.view().set(j % 2, j, c, 4.0f * in.q.view().get(0, 1, c));
  const PackedKV kv = PackedKV::pack(in.k, in.v);
  Tensor dense(DType::f32, 4, 2, d), zero(DType::f32, 4, 2, d), out(DType::f32, 4, 2, d);
  attention_decode(in.q, kv, dense);
  attention_decode(in.q, kv, zero, {}, {.lambda = 0.0});
  EXPECT_TRUE(test::bitwise_equal(dense, zero));
  SkipStats skip;
  skip.record_tiles = true;
  Stats st;
  attention_decode(in.q, kv, out, {}, {.lambda = 0.05}, nullptr, &st, &skip);
  EXPECT_GT(skip.skipped_fraction(), 0.0);
  EXPECT_LT(skip.skipped_fraction(), 1.0);
  EXPECT_EQ(skip.q_tiles, 1);
  const auto cov = blasst_coverage(skip, 2, lk, true);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 2; ++i) {
      const auto want =
          test::row_over_keys(in.q, in.k, in.v, h, i, test::coverage_keys(*cov, h, i));
      for (int64_t c = 0; c < d; ++c) ASSERT_NEAR(out.view().get(h, i, c), want[size_t(c)], 1e-5);
    }
}

TEST(PackedKV, BadInputRaisesError) {
  Qkv in(DType::f32, 4, 2, 50, 100, 64);
  PackedKV kv(2, 64, DType::f32, 120);
  // Tensors of another shape or dtype.
  Tensor k3 = test::random_tensor(DType::f32, 3, 10, 64, 1);
  EXPECT_THROW(kv.append(k3, k3), Error);
  Tensor k32 = test::random_tensor(DType::f32, 2, 10, 32, 1);
  EXPECT_THROW(kv.append(k32, k32), Error);
  Tensor kb = test::random_tensor(DType::bf16, 2, 10, 64, 1);
  EXPECT_THROW(kv.append(kb, kb), Error);
  EXPECT_THROW(kv.append(in.k, in.v.view().rows(0, 50)), Error);
  // NaN in a key.
  Tensor kn = test::random_tensor(DType::f32, 2, 10, 64, 1);
  kn.view().set(1, 3, 5, NAN);
  EXPECT_THROW(kv.append(kn, kn), Error);
  // Appends past capacity (nothing is appended by a refused call).
  kv.append(in.k, in.v);
  EXPECT_THROW(kv.append(in.k.view().rows(0, 21), in.v.view().rows(0, 21)), Error);
  EXPECT_EQ(kv.size(), 100);
  // Orders that are not permutations or subsets; positions out of range or miscounted.
  PackedKV kv2(2, 64, DType::f32, 300);
  const std::vector<int64_t> dup = {1, 2, 1}, outside = {0, 100}, negative = {-1};
  EXPECT_THROW(kv2.append_rows(in.k, in.v, dup), Error);
  EXPECT_THROW(kv2.append_rows(in.k, in.v, outside), Error);
  EXPECT_THROW(kv2.append_rows(in.k, in.v, negative), Error);
  const std::vector<int64_t> rows = {3, 4}, bad_pos = {2, -5}, short_pos = {1};
  EXPECT_THROW(kv2.append_rows(in.k, in.v, rows, bad_pos), Error);
  EXPECT_THROW(kv2.append_rows(in.k, in.v, rows, short_pos), Error);
  std::vector<int64_t> huge(100, int64_t(1) << 50);
  EXPECT_THROW(kv2.append(in.k, in.v, huge), Error);
  EXPECT_EQ(kv2.size(), 0);
  EXPECT_TRUE(kv2.positions().empty());
  // Bad geometry.
  EXPECT_THROW(PackedKV(0, 64, DType::f32, 10), Error);
  EXPECT_THROW(PackedKV(2, 60, DType::f32, 10), Error);
  EXPECT_THROW(PackedKV(2, 64, DType::f32, 0), Error);
  EXPECT_THROW(PackedKV::pack(in.k, in.v, 50), Error);
  // Attention calls that do not fit the cache.
  Tensor out(DType::f32, 4, 50, 64);
  EXPECT_THROW(attention_dense(in.q, kv2, out), Error);  // empty
  Tensor qb = test::random_tensor(DType::bf16, 4, 50, 64, 1);
  EXPECT_THROW(attention_dense(qb, kv, out), Error);  // dtype
  Tensor q3 = test::random_tensor(DType::f32, 3, 50, 64, 1), o3(DType::f32, 3, 50, 64);
  EXPECT_THROW(attention_dense(q3, kv, o3), Error);  // heads
  Tensor q200 = test::random_tensor(DType::f32, 4, 200, 64, 1), o200(DType::f32, 4, 200, 64);
  EXPECT_THROW(attention_dense(q200, kv, o200), Error);  // more queries than keys, causal
  AttnOptions opt;
  opt.q_start = -3;
  EXPECT_THROW(attention_dense(in.q, kv, out, opt), Error);
  opt.q_start = 5;  // q_start is for PackedKV calls only
  EXPECT_THROW(attention_dense(in.q, in.k, in.v, out, opt), Error);
  // Decode over the cache takes at most kMaxDecodeQueries rows, and a valid lambda.
  Tensor o50(DType::f32, 4, 50, 64);
  EXPECT_THROW(attention_decode(in.q, kv, o50), Error);
  Tensor q1 = test::random_tensor(DType::f32, 4, 1, 64, 1), o1(DType::f32, 4, 1, 64);
  EXPECT_THROW(attention_decode(q1, kv, o1, {}, {.lambda = 1.5}), Error);
  EXPECT_THROW(attention_decode(q1, kv, o1, {}, {.lambda = -0.1}), Error);
}

// The formats a test packs in: f32, and bf16 in both operand formats (pairs where this CPU
// has the dot product, widened to f32 when the caller asks for that).
struct Format {
  DType dtype;
  bool bf16_dot;
};
const Format kFormats[] = {{DType::f32, true}, {DType::bf16, true}, {DType::bf16, false}};

// truncate(n) leaves exactly what appending the first n keys to an empty cache leaves, bytes
// included (the tail of the last tile zeroed again), at tile boundaries and inside tiles; the
// dropped keys appended again give the whole pack back.
TEST(PackedKV, TruncateEqualsPackingThePrefix) {
  for (const Format f : kFormats) {
    Qkv in(f.dtype, 4, 2, 40, 300, 64);
    for (int64_t n : {300, 299, 256, 200, 65, 64, 1, 0}) {
      PackedKV kv = PackedKV::pack(in.k, in.v, 320, 2, f.bf16_dot);
      kv.truncate(n);
      PackedKV want(2, 64, f.dtype, 320, f.bf16_dot);
      if (n > 0) want.append(in.k.view().rows(0, n), in.v.view().rows(0, n));
      EXPECT_EQ(test::packed_kv_difference(kv, want), "") << dtype_name(f.dtype) << " " << n;
      if (n < 300) kv.append(in.k.view().rows(n, 300 - n), in.v.view().rows(n, 300 - n));
      EXPECT_EQ(test::packed_kv_difference(kv, PackedKV::pack(in.k, in.v, 320, 2, f.bf16_dot)), "")
          << dtype_name(f.dtype) << " " << n;
    }
    // Keys in another order: truncating recomputes the order flags and spans.
    std::vector<int64_t> order(300);
    for (int64_t i = 0; i < 300; ++i) order[size_t(i)] = (i * 7) % 300;
    PackedKV perm(2, 64, f.dtype, 300, f.bf16_dot), want(2, 64, f.dtype, 300, f.bf16_dot);
    perm.append_rows(in.k, in.v, order);
    perm.truncate(1);
    want.append_rows(in.k, in.v, std::span(order).first(1));
    EXPECT_EQ(test::packed_kv_difference(perm, want), "");
  }
  PackedKV kv(2, 64, DType::f32, 100);
  EXPECT_THROW(kv.truncate(1), Error);
  EXPECT_THROW(kv.truncate(-1), Error);
}

// copy(n) is the cache truncated to n, without touching the original; the two grow apart
// independently, and attention over the copy equals attention over a fresh pack.
TEST(PackedKV, CopyIsThePrefixAndIndependent) {
  for (const Format f : kFormats) {
    Qkv in(f.dtype, 4, 2, 40, 300, 64);
    const PackedKV whole = PackedKV::pack(in.k, in.v, 400, 2, f.bf16_dot);
    for (int64_t n : {-1, 300, 190, 128, 0}) {
      PackedKV c = whole.copy(n);
      PackedKV want = PackedKV::pack(in.k, in.v, 400, 2, f.bf16_dot);
      want.truncate(n < 0 ? 300 : n);
      EXPECT_EQ(test::packed_kv_difference(c, want), "") << dtype_name(f.dtype) << " " << n;
      c.append(in.k.view().rows(0, 50), in.v.view().rows(0, 50));
    }
    EXPECT_EQ(test::packed_kv_difference(whole, PackedKV::pack(in.k, in.v, 400, 2, f.bf16_dot)),
              "");
    const PackedKV c = whole.copy(200);
    Tensor a(DType::f32, 4, 40, 64), b(DType::f32, 4, 40, 64);
    attention_dense(in.q, c, a);
    attention_dense(
        in.q, PackedKV::pack(in.k.view().rows(0, 200), in.v.view().rows(0, 200), 0, 2, f.bf16_dot),
        b);
    EXPECT_TRUE(test::bitwise_equal(a, b));
    EXPECT_THROW(whole.copy(301), Error);
  }
}

// An append that fails while writing (here: bf16 pairs, which only the AVX-512 target can
// write, appended with that target switched off) leaves the cache as it was; it used to grow
// size() first and leave keys it never wrote.
TEST(PackedKV, FailedAppendChangesNothing) {
  if (!kernels::bf16_dot_supported())
    SPATTN_SKIP_NOT_APPLICABLE("no AVX512_BF16: no pair format to fail on");
  Qkv in(DType::bf16, 4, 2, 8, 200, 64);
  PackedKV kv(2, 64, DType::bf16, 256);
  ASSERT_TRUE(kv.bf16_operands());
  kv.append(in.k.view().rows(0, 100), in.v.view().rows(0, 100));
  const PackedKV before = kv.copy();
  hwy::SetSupportedTargetsForTest(HWY_AVX2);
  EXPECT_THROW(kv.append(in.k.view().rows(100, 100), in.v.view().rows(100, 100)), Error);
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_EQ(kv.size(), 100);
  EXPECT_EQ(test::packed_kv_difference(kv, before), "");
  kv.append(in.k.view().rows(100, 100), in.v.view().rows(100, 100));
  EXPECT_EQ(test::packed_kv_difference(kv, PackedKV::pack(in.k, in.v, 256)), "");
}

// The operand format is the object's, fixed when it is built: bf16_dot false packs widened
// f32 whatever the CPU, and a call over it computes in that format whatever its options say.
TEST(PackedKV, OperandFormatIsFixedAtConstruction) {
  Qkv in(DType::bf16, 4, 2, 70, 200, 64);
  EXPECT_FALSE(PackedKV(2, 64, DType::bf16, 10, false).bf16_operands());
  EXPECT_EQ(PackedKV(2, 64, DType::bf16, 10, true).bf16_operands(), kernels::bf16_dot_supported());
  EXPECT_FALSE(PackedKV(2, 64, DType::f32, 10, true).bf16_operands());
  const PackedKV widened = PackedKV::pack(in.k, in.v, 0, 2, false);
  AttnOptions dot, widen;
  widen.bf16_dot = false;
  Tensor a(DType::f32, 4, 70, 64), b(DType::f32, 4, 70, 64), c(DType::f32, 4, 70, 64);
  attention_dense(in.q, widened, a, dot);
  attention_dense(in.q, widened, b, widen);
  attention_dense(in.q, in.k, in.v, c, widen);  // packs for itself, as the options say
  EXPECT_TRUE(test::bitwise_equal(a, b));
  EXPECT_TRUE(test::bitwise_equal(a, c));
  if (kernels::bf16_dot_supported()) {  // the dot path computes other bits
    attention_dense(in.q, in.k, in.v, c, dot);
    EXPECT_FALSE(test::bitwise_equal(a, c));
  }
}

}  // namespace
}  // namespace spattn
