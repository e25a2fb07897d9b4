// attention_with_column_sums (attention and the column sums of its normalised weights in one
// pass) against its plain double twin, against the two-pass form it replaces (attention_dense
// then attention_weight_sums), in its dense and its block-diagonal causal form, on every SIMD
// target; and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "spattn/error.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/weight_sums.hpp"
#include "targets.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

// The keys row i sees: block-diagonal causal for chunk > 0 (floor(i / chunk) chunk .. i),
// else causal bottom-right (lk - lq + i) or every key.
std::vector<int64_t> plain_keys(int64_t i, int64_t lq, int64_t lk, bool causal, int64_t chunk) {
  const int64_t lo = chunk > 0 ? i / chunk * chunk : 0;
  const int64_t hi = causal ? lk - lq + i + 1 : lk;
  std::vector<int64_t> keys;
  for (int64_t j = lo; j < hi; ++j) keys.push_back(j);
  return keys;
}

// Output, LSE and column sums written plainly in double.
void expect_matches_plain(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const std::vector<float>& lse, const WeightSums& sums, bool causal,
                          int64_t chunk) {
  const int64_t hq = q.heads(), lq = q.seq(), lk = k.seq(), d = q.dim();
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> col(size_t(hq * lk), 0.0);
  double worst_o = 0, worst_lse = 0;
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 0; i < lq; ++i) {
      const std::vector<int64_t> keys = plain_keys(i, lq, lk, causal, chunk);
      double row_lse;
      const std::vector<double> o = test::row_over_keys(q, k, v, h, i, keys, 0, &row_lse);
      for (int64_t c = 0; c < d; ++c)
        worst_o = std::max(worst_o, std::abs(out.view().get(h, i, c) - o[size_t(c)]));
      worst_lse = std::max(worst_lse, std::abs(lse[size_t(h * lq + i)] - row_lse));
      for (int64_t j : keys) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c)
          s += double(q.view().get(h, i, c)) * k.view().get(h / (hq / k.heads()), j, c);
        col[size_t(h * lk + j)] += std::exp(s * scale - row_lse);
      }
    }
  EXPECT_LT(worst_o, 2e-5);
  EXPECT_LT(worst_lse, 2e-5);
  ASSERT_EQ(sums.column.size(), col.size());
  for (size_t i = 0; i < col.size(); ++i)
    ASSERT_NEAR(sums.column[i], col[i], 1e-5 + 1e-5 * col[i]) << "column " << i;
}

// Dense form: the plain twin, bit for bit the output and LSE of attention_dense, the sums of
// attention_weight_sums given that LSE (the same products, one pass), and the same sums bit for
// bit whatever the thread count.
TEST(ColumnSums, DenseFormIsTheTwoPassFormInOnePass) {
  const Tensor q = test::random_tensor(DType::f32, 4, 100, 16, 41, 2.0f);
  const Tensor k = test::random_tensor(DType::f32, 2, 150, 16, 42);
  const Tensor v = test::random_tensor(DType::f32, 2, 150, 16, 43);
  const PackedKV kv = PackedKV::pack(k, v);
  test::for_each_target([&] {
    for (bool causal : {true, false}) {
      std::vector<double> one_thread;
      for (int threads : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << "causal " << causal << " threads " << threads);
        AttnOptions opt;
        opt.causal = causal;
        opt.threads = threads;
        Tensor out(DType::f32, 4, 100, 16), ref(DType::f32, 4, 100, 16);
        std::vector<float> lse(4 * 100), lse_ref(4 * 100);
        WeightSums sums, sums_ref;
        Stats st, st_ref;
        attention_with_column_sums(q, kv, out, lse.data(), sums, opt, &st);
        attention_dense(q, kv, ref, opt, lse_ref.data(), &st_ref);
        attention_weight_sums(q, kv, lse_ref.data(), sums_ref, opt);
        EXPECT_EQ(test::diff(out, ref).max_abs, 0.0);
        EXPECT_EQ(std::memcmp(lse.data(), lse_ref.data(), lse.size() * 4), 0);
        ASSERT_EQ(sums.column.size(), sums_ref.column.size());
        // The same products; the double sums add in another order (item by item, not thread
        // by thread), and the f32 row sums may contract to FMA differently where inlined.
        double worst = 0;
        for (size_t i = 0; i < sums.column.size(); ++i)
          worst = std::max(worst, std::abs(sums.column[i] - sums_ref.column[i]) /
                                      std::max(1e-30, std::abs(sums_ref.column[i])));
        EXPECT_LT(worst, 1e-6);
        EXPECT_EQ(st.score_entries, st_ref.score_entries);
        expect_matches_plain(q, k, v, out, lse, sums, causal, 0);
        if (threads == 1)
          one_thread = sums.column;
        else
          EXPECT_EQ(std::memcmp(one_thread.data(), sums.column.data(), one_thread.size() * 8), 0);
      }
    }
  });
}

// Block-diagonal causal form (chunked prefill's intra pass): chunks on and off the 64-key
// tile grid, one row per chunk, one chunk for everything, a short last chunk; GQA; 1 and 2
// threads. Each chunk's rows equal attention_dense over that chunk alone.
TEST(ColumnSums, DiagonalFormIsCausalAttentionPerChunk) {
  const int64_t n = 200;
  const Tensor q = test::random_tensor(DType::f32, 4, n, 16, 51, 2.0f);
  const Tensor k = test::random_tensor(DType::f32, 2, n, 16, 52);
  const Tensor v = test::random_tensor(DType::f32, 2, n, 16, 53);
  const PackedKV kv = PackedKV::pack(k, v);
  test::for_each_target([&] {
    for (int64_t chunk : {int64_t(1), int64_t(50), int64_t(128), int64_t(1000)})
      for (int threads : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << "chunk " << chunk << " threads " << threads);
        AttnOptions opt;
        opt.threads = threads;
        Tensor out(DType::f32, 4, n, 16);
        std::vector<float> lse(size_t(4 * n));
        WeightSums sums;
        Stats st;
        attention_with_column_sums(q, kv, out, lse.data(), sums, opt, &st, chunk);
        expect_matches_plain(q, k, v, out, lse, sums, true, chunk);
        int64_t entries = 0;  // sum over chunks of |C|(|C| + 1) / 2 per head
        for (int64_t c0 = 0; c0 < n; c0 += chunk) {
          const int64_t len = std::min(chunk, n - c0);
          entries += len * (len + 1) / 2;
          if (chunk % 64 != 0 && chunk < n) continue;  // tiles on the grid: the same bits
          Tensor o1(DType::f32, 4, len, 16);
          attention_dense(q.view().rows(c0, len), k.view().rows(c0, len), v.view().rows(c0, len),
                          o1, opt);
          EXPECT_EQ(test::diff(o1, out.view().rows(c0, len)).max_abs, 0.0) << c0;
        }
        EXPECT_EQ(st.score_entries, 4 * entries);
      }
  });
}

TEST(ColumnSums, BadInputRaises) {
  const Tensor q = test::random_tensor(DType::f32, 4, 100, 16, 61);
  const Tensor k = test::random_tensor(DType::f32, 2, 120, 16, 62);
  const PackedKV kv = PackedKV::pack(k, k);
  Tensor out(DType::f32, 4, 100, 16);
  const auto expect_error = [&](WeightSums w, int64_t chunk, const TensorView& qv,
                                const TensorView& ov, const char* mention) {
    try {
      attention_with_column_sums(qv, kv, ov, nullptr, w, {}, nullptr, chunk);
      ADD_FAILURE() << "accepted: " << mention;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
    }
  };
  WeightSums blocks;
  blocks.want_blocks = true;
  expect_error(blocks, 0, q, out, "want_blocks");
  expect_error({}, -1, q, out, "diagonal_chunk");
  expect_error({}, 64, q, out, "self-attention");               // 100 queries over 120 keys
  Tensor q3 = test::random_tensor(DType::f32, 3, 100, 16, 63);  // 3 q heads over 2 kv heads
  Tensor out3(DType::f32, 3, 100, 16);
  expect_error({}, 0, q3, out3, "multiple");
  Tensor nan_q = test::random_tensor(DType::f32, 4, 100, 16, 64);
  nan_q.view().set(1, 7, 3, NAN);
  expect_error({}, 0, nan_q, out, "q");
}

}  // namespace
}  // namespace spattn
