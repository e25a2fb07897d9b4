// attention_dense_continue and attention_state_finish (spattn/attention_state.hpp): the dense
// loop's online softmax carried across calls, as context parallelism's prefill runs it (each
// rank visits the prompt's chunks in position order). Against one attention_dense call over
// every key (the same bits: the same tiles meet the same state) and against the plain
// reference twin (attention_reference, double sums).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "spattn/attention_state.hpp"
#include "spattn/error.hpp"
#include "test_util.hpp"

using namespace spattn;

namespace {

constexpr int64_t Hq = 4, Hkv = 2, d = 64, n = 700;  // 11 tiles, the last one partial

struct Rows {
  Tensor q = test::random_tensor(DType::f32, Hq, n, d, 1);
  Tensor k = test::random_tensor(DType::f32, Hkv, n, d, 2);
  Tensor v = test::random_tensor(DType::f32, Hkv, n, d, 3);
};

// Positions [a, b) of k, v packed with their positions, in the given format.
PackedKV piece(const Rows& x, const std::vector<std::pair<int64_t, int64_t>>& runs, KVType t,
               bool bf16_dot) {
  std::vector<int64_t> pos;
  for (auto [a, b] : runs)
    for (int64_t i = a; i < b; ++i) pos.push_back(i);
  const int64_t m = int64_t(pos.size());
  Tensor k(DType::f32, Hkv, m, d), v(DType::f32, Hkv, m, d);
  for (int64_t h = 0; h < Hkv; ++h)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < d; ++c) {
        k.view().set(h, i, c, x.k.view().get(h, pos[size_t(i)], c));
        v.view().set(h, i, c, x.v.view().get(h, pos[size_t(i)], c));
      }
  PackedKV kv(Hkv, d, DType::f32, m, bf16_dot, t, t);
  kv.append(k.view(), v.view(), pos, 1);
  return kv;
}

AttnOptions at(int64_t q_start) {
  AttnOptions o;
  o.threads = 2;
  o.q_start = q_start;
  return o;
}

TensorView rows_of(const Tensor& q, int64_t a, int64_t b) { return q.view().rows(a, b - a); }

// Query rows [a, b) through chunks on the 64-position grid, in position order (the last one
// the rows' own: the rank's cache holding two runs, read through a key range), against one
// call over every key packed in position order: output and LSE the same bits.
void same_bits(KVType t, bool bf16_dot) {
  Rows x;
  const PackedKV all = piece(x, {{0, n}}, t, bf16_dot);
  // Chunks 0 | 1 | 2 (two pieces of the cache: rows [128, 192) and [448, 700)) | 3.
  const PackedKV c0 = piece(x, {{0, 128}}, t, bf16_dot);
  const PackedKV own = piece(x, {{128, 192}, {448, 700}}, t, bf16_dot);
  const PackedKV c2 = piece(x, {{192, 448}}, t, bf16_dot);
  struct Run {
    int64_t a, b;
  };
  for (const Run run : {Run{128, 192}, Run{448, 700}}) {
    const int64_t m = run.b - run.a;
    const TensorView q = rows_of(x.q, run.a, run.b);
    Tensor one(DType::f32, Hq, m, d), carried(DType::f32, Hq, m, d);
    std::vector<float> lse_one(size_t(Hq * m)), lse_carried(size_t(Hq * m));
    attention_dense(q, all, one.view(), at(run.a), lse_one.data());
    AttnState st;
    st.reset(Hq, m, d);
    attention_dense_continue(q, c0, {0, c0.size()}, st, at(run.a));
    attention_dense_continue(q, own, {0, 64}, st, at(run.a));
    if (run.a == 448) {
      attention_dense_continue(q, c2, {0, c2.size()}, st, at(run.a));
      attention_dense_continue(q, own, {64, own.size()}, st, at(run.a));
    }
    attention_state_finish(st, carried.view(), lse_carried.data());
    EXPECT_EQ(std::memcmp(one.data(), carried.data(), size_t(Hq * m * d) * sizeof(float)), 0)
        << "rows [" << run.a << ", " << run.b << "): max |diff| "
        << test::diff(carried.view(), one.view()).max_abs;
    EXPECT_EQ(std::memcmp(lse_one.data(), lse_carried.data(), lse_one.size() * sizeof(float)), 0);
    // The plain twin: exact attention over the same keys.
    Tensor ref(DType::f32, Hq, m, d);
    // (Over raw k, v the queries sit bottom-right: the last row at the last key, run.b - 1.)
    attention_reference(q, x.k.view().rows(0, run.b), x.v.view().rows(0, run.b), ref.view());
    // Against the unrounded rows: the cache type's rounding (bf16 operands round q and P too).
    const double tol = t == KVType::f32 ? 2e-6 : t == KVType::f16 ? 2e-3 : 1e-2;
    EXPECT_LT(test::diff(carried.view(), ref.view()).max_abs, tol);
  }
}

TEST(AttnState, ChunksInPositionOrderGiveOneCallsBitsF32) { same_bits(KVType::f32, false); }
TEST(AttnState, ChunksInPositionOrderGiveOneCallsBitsF16Cache) { same_bits(KVType::f16, false); }
TEST(AttnState, ChunksInPositionOrderGiveOneCallsBitsBf16Operands) {
  same_bits(KVType::bf16, true);
}

// Out of position order the state still computes attention (to rounding), but not one
// call's bits: the order is what the bits depend on, so the tests above can fail.
TEST(AttnState, ChunksOutOfOrderStillComputeAttention) {
  Rows x;
  const PackedKV c0 = piece(x, {{0, 320}}, KVType::f32, false);
  const PackedKV c1 = piece(x, {{320, 700}}, KVType::f32, false);
  const TensorView q = rows_of(x.q, 640, 700);
  AttnState st;
  st.reset(Hq, 60, d);
  attention_dense_continue(q, c1, {0, c1.size()}, st, at(640));
  attention_dense_continue(q, c0, {0, c0.size()}, st, at(640));
  Tensor out(DType::f32, Hq, 60, d), ref(DType::f32, Hq, 60, d);
  attention_state_finish(st, out.view());
  attention_reference(q, x.k.view(), x.v.view(), ref.view());  // rows 640.. bottom-right
  EXPECT_LT(test::diff(out.view(), ref.view()).max_abs, 2e-6);
  const PackedKV all = piece(x, {{0, n}}, KVType::f32, false);
  Tensor one(DType::f32, Hq, 60, d);
  attention_dense(q, all, one.view(), at(640));
  EXPECT_NE(std::memcmp(one.data(), out.data(), size_t(Hq * 60 * d) * sizeof(float)), 0);
}

TEST(AttnState, BadStateOrRangeIsANamedError) {
  Rows x;
  const PackedKV c0 = piece(x, {{0, 128}}, KVType::f32, false);
  const TensorView q = rows_of(x.q, 0, 128);
  AttnState st;
  st.reset(Hq, 127, d);
  EXPECT_THROW(
      {
        try {
          attention_dense_continue(q, c0, {0, 128}, st, at(0));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("attention_dense_continue: the state holds"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  st.reset(Hq, 128, d);
  EXPECT_THROW(attention_dense_continue(q, c0, {64, 129}, st, at(0)), Error);
  EXPECT_THROW(attention_dense_continue(q, c0, {65, 64}, st, at(0)), Error);
  Tensor wrong(DType::f32, Hq, 64, d);
  EXPECT_THROW(attention_state_finish(st, wrong.view()), Error);
  // An empty range leaves the state as it was: no key seen, output 0, LSE -inf.
  attention_dense_continue(q, c0, {3, 3}, st, at(0));
  Tensor out(DType::f32, Hq, 128, d);
  std::vector<float> lse(size_t(Hq * 128));
  attention_state_finish(st, out.view(), lse.data());
  EXPECT_EQ(out.view().get(1, 5, 7), 0.0f);
  EXPECT_EQ(lse[9], -std::numeric_limits<float>::infinity());
}

}  // namespace
