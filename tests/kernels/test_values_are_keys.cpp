// A PackedKV whose values are its keys (v_is_k: DeepSeek's latent cache, K stored once) against
// the same cache with those values stored as V: every kernel form over it, bit for bit, and
// against the plain twin (each row's attention in double over the stored keys, the keys as
// values). Over every stored type, a head dim that pads V's rows (40 -> 48) and one that does
// not, prefill and decode rows, whole tiles and ranges off the tile grid, gathered tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels/packed_kv.hpp"
#include "packed_kv_state.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/decode.hpp"
#include "spattn/kv_type.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/token_sparse.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

using test::random_tensor;

struct Pair {
  PackedKV keys;    // v_is_k
  PackedKV stored;  // the same keys, and their stored values as an f32 V
  Tensor k_stored;  // [1, L, d]: the keys as the cache stores them (widened to f32)
};

Pair make_pair(KVType t, int64_t d, int64_t L, int64_t cap, uint64_t seed) {
  const Tensor k = random_tensor(DType::f32, 1, L, d, seed);
  PackedKV a(1, d, DType::f32, cap, true, t, KVType::f32, /*v_is_k=*/true);
  a.append(k.view(), k.view());
  Tensor ks(DType::f32, 1, L, d);
  std::vector<float> row(static_cast<size_t>(d));
  for (int64_t j = 0; j < L; ++j) {
    a.read_key(0, j, row.data());
    for (int64_t c = 0; c < d; ++c) ks.view().set(0, j, c, row[size_t(c)]);
  }
  PackedKV b(1, d, DType::f32, cap, true, t, KVType::f32);
  b.append(k.view(), ks.view());
  return {std::move(a), std::move(b), std::move(ks)};
}

// Each output row against the plain twin over its keys (the stored keys as K and as V).
void expect_plain(const TensorView& q, const Tensor& ks, const TensorView& out,
                  const std::vector<std::vector<int64_t>>& keys_of_row, const std::string& what) {
  for (int64_t h = 0; h < q.heads; ++h)
    for (int64_t i = 0; i < q.seq; ++i) {
      const auto want = test::row_over_keys(q, ks.view(), ks.view(), h, i, keys_of_row[size_t(i)]);
      for (int64_t c = 0; c < q.dim; ++c)
        ASSERT_NEAR(out.get(h, i, c), want[size_t(c)], 3e-5)
            << what << " head " << h << " row " << i;
    }
}

std::vector<int64_t> prefix(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) v[size_t(j)] = j;
  return v;
}

struct Shape {
  KVType t;
  int64_t d;
};

class ValuesAreKeys : public ::testing::TestWithParam<Shape> {};

TEST_P(ValuesAreKeys, EveryFormEqualsTheStoredValues) {
  const auto [t, d] = GetParam();
  const int64_t L = 300, Hq = 8, cap = 320;  // the last tile part-filled
  Pair p = make_pair(t, d, L, cap, 11);
  const std::string tag = std::string(kv_type_name(t)) + " d " + std::to_string(d);
  // Half the bytes of the cache that stores its values.
  EXPECT_TRUE(p.keys.v_is_k());
  EXPECT_EQ(p.keys.v_type(), p.keys.k_type());
  EXPECT_EQ(p.keys.data().v_tile_bytes, 0);
  EXPECT_LT(p.keys.bytes(), p.stored.bytes());

  const auto both = [&](const std::string& form, const TensorView& q, auto&& run) {
    Tensor x(DType::f32, q.heads, q.seq, d), y(DType::f32, q.heads, q.seq, d);
    run(p.keys, x.view());
    run(p.stored, y.view());
    EXPECT_TRUE(test::bitwise_equal(x.view(), y.view())) << form << ", " << tag;
    return x;
  };

  // Prefill rows, causal over every key.
  const Tensor qp = random_tensor(DType::f32, Hq, L, d, 12);
  const Tensor dense = both("dense", qp.view(), [&](const PackedKV& kv, const TensorView& o) {
    attention_dense(qp.view(), kv, o);
  });
  std::vector<std::vector<int64_t>> causal;
  for (int64_t i = 0; i < L; ++i) causal.push_back(prefix(i + 1));
  expect_plain(qp.view(), p.k_stored, dense.view(), causal, "dense " + tag);

  // Block-sparse: random key blocks per query block (the diagonal kept).
  std::mt19937_64 rng(13);
  const int64_t nb = (L + 63) / 64;
  std::vector<std::vector<int32_t>> lists(size_t(Hq * nb));
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t qb = 0; qb < nb; ++qb)
      for (int64_t kb = 0; kb <= qb; ++kb)
        if (kb == qb || rng() % 2) lists[size_t(h * nb + qb)].push_back(int32_t(kb));
  const BlockMask mask = BlockMask::from_lists(Hq, L, L, 64, 64, true, lists);
  both("block-sparse", qp.view(), [&](const PackedKV& kv, const TensorView& o) {
    attention_block_sparse(qp.view(), kv, o, mask);
  });

  // Decode: one row over every key, and ranges off the tile grid (shifted runs and pieces).
  const Tensor qd = random_tensor(DType::f32, Hq, 1, d, 14);
  const Tensor dec = both("decode", qd.view(), [&](const PackedKV& kv, const TensorView& o) {
    attention_decode(qd.view(), kv, o);
  });
  expect_plain(qd.view(), p.k_stored, dec.view(), {prefix(L)}, "decode " + tag);
  std::vector<std::vector<KeyRange>> ranges(static_cast<size_t>(Hq));
  for (int64_t h = 0; h < Hq; ++h)
    ranges[size_t(h)] = {{3 + h, 90 + 7 * h}, {150 + h, 170}, {280, L}};
  const Tensor rng_out =
      both("decode ranges", qd.view(), [&](const PackedKV& kv, const TensorView& o) {
        attention_decode_ranges(qd.view(), kv, o, ranges);
      });
  for (int64_t h = 0; h < Hq; ++h) {
    std::vector<int64_t> keys;
    for (const KeyRange& r : ranges[size_t(h)])
      for (int64_t j = r.begin; j < r.end; ++j) keys.push_back(j);
    const auto want =
        test::row_over_keys(qd.view(), p.k_stored.view(), p.k_stored.view(), h, 0, keys);
    for (int64_t c = 0; c < d; ++c)
      ASSERT_NEAR(rng_out.view().get(h, 0, c), want[size_t(c)], 3e-5) << "ranges " << tag;
  }

  // Token-sparse (DSA): prefill rows (the cache restaged whole) and a decode row (gathered
  // from the tiles), each row's keys random.
  const auto select = [&](int64_t rows, int64_t pos0, std::vector<std::vector<int64_t>>& keys) {
    TokenSelection sel;
    for (int64_t i = 0; i < rows; ++i) {
      std::vector<int64_t> row;
      for (int64_t j = 0; j <= pos0 + i; ++j)
        if (rng() % 3 == 0 || j == pos0 + i) row.push_back(j);
      keys.push_back(row);
      sel.add(row);
    }
    return sel;
  };
  std::vector<std::vector<int64_t>> pk, dk;
  const TokenSelection ps = select(L, 0, pk), ds = select(1, L - 1, dk);
  const Tensor tp =
      both("token-sparse prefill", qp.view(), [&](const PackedKV& kv, const TensorView& o) {
        attention_token_sparse(qp.view(), kv, o, ps);
      });
  expect_plain(qp.view(), p.k_stored, tp.view(), pk, "token-sparse prefill " + tag);
  const Tensor td =
      both("token-sparse decode", qd.view(), [&](const PackedKV& kv, const TensorView& o) {
        attention_token_sparse(qd.view(), kv, o, ds);
      });
  expect_plain(qd.view(), p.k_stored, td.view(), dk, "token-sparse decode " + tag);
}

INSTANTIATE_TEST_SUITE_P(Types, ValuesAreKeys,
                         ::testing::Values(Shape{KVType::f32, 40}, Shape{KVType::f16, 40},
                                           Shape{KVType::bf16, 40}, Shape{KVType::f32, 64},
                                           Shape{KVType::f16, 64}, Shape{KVType::bf16, 64},
                                           Shape{KVType::q8_0, 64}),
                         [](const auto& info) {
                           return std::string(kv_type_name(info.param.t)) + "_d" +
                                  std::to_string(info.param.d);
                         });

// Copies, truncations and appends keep the form: the bytes a fresh cache of the same keys holds.
TEST(ValuesAreKeys, CopyTruncateAndAppendKeepTheForm) {
  const int64_t d = 64, L = 200;
  const Tensor k = random_tensor(DType::f32, 1, L, d, 21);
  PackedKV a(1, d, DType::f32, 256, true, KVType::f16, KVType::f32, /*v_is_k=*/true);
  a.append(k.view(), k.view());
  PackedKV fresh(1, d, DType::f32, 256, true, KVType::f16, KVType::f32, /*v_is_k=*/true);
  fresh.append(k.view().rows(0, 130), k.view().rows(0, 130));
  EXPECT_EQ(test::packed_kv_difference(a.copy(130), fresh), "");
  a.truncate(130);
  EXPECT_EQ(test::packed_kv_difference(a, fresh), "");
  a.append(k.view().rows(130, 70), k.view().rows(130, 70));
  fresh.append(k.view().rows(130, 70), k.view().rows(130, 70));
  EXPECT_EQ(test::packed_kv_difference(a, fresh), "");
  EXPECT_TRUE(a.copy().v_is_k());
  // bf16 inputs that would take bf16 pairs keep the f32 operands (V is read from K's tiles).
  PackedKV b(1, d, DType::bf16, 64, true, KVType::bf16, KVType::bf16, /*v_is_k=*/true);
  EXPECT_FALSE(b.bf16_operands());
}

}  // namespace
}  // namespace spattn
