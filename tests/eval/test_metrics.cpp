// Metrics against hand-computed cases and direct double computations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "eval/prng.hpp"
#include "spattn/spattn.hpp"

using namespace spattn;

namespace {

Tensor random_tensor(int64_t heads, int64_t seq, int64_t dim, uint64_t seed, double sd = 1.0) {
  Tensor t(DType::f32, heads, seq, dim);
  eval::Rng rng(seed);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float(sd * rng.normal());
  return t;
}

Tensor from_rows(int64_t heads, int64_t seq, int64_t dim, const std::vector<float>& x) {
  Tensor t(DType::f32, heads, seq, dim);
  std::copy(x.begin(), x.end(), t.data_as<float>());
  return t;
}

// The same key ranges for every row.
class FixedCoverage final : public Coverage {
 public:
  explicit FixedCoverage(std::vector<KeyRange> r) : r_(std::move(r)) {}
  void row_ranges(int64_t, int64_t, std::vector<KeyRange>& out) const override {
    out.insert(out.end(), r_.begin(), r_.end());
  }

 private:
  std::vector<KeyRange> r_;
};

// The first half (rounded down) of each row's causal keys.
class HalfCausalCoverage final : public Coverage {
 public:
  HalfCausalCoverage(int64_t q_len, int64_t kv_len) : q_len_(q_len), kv_len_(kv_len) {}
  void row_ranges(int64_t, int64_t row, std::vector<KeyRange>& out) const override {
    out.push_back({0, (kv_len_ - q_len_ + row + 1) / 2});
  }

 private:
  int64_t q_len_, kv_len_;
};

// Block mass computed the slow obvious way: full softmax rows in double, summed per block.
std::vector<double> direct_block_mass(const Tensor& q, const Tensor& k, int64_t h, int64_t bq,
                                      int64_t bk, bool causal) {
  const int64_t lq = q.seq(), lk = k.seq(), d = q.dim(), kh = h / (q.heads() / k.heads());
  const int64_t nqb = (lq + bq - 1) / bq, nkb = (lk + bk - 1) / bk;
  std::vector<double> mass(size_t(nqb * nkb), 0.0);
  std::vector<int64_t> rows(size_t(nqb), 0);
  const TensorView Q = q, K = k;
  for (int64_t i = 0; i < lq; ++i) {
    const int64_t vis = causal ? std::clamp<int64_t>(lk - lq + i + 1, 0, lk) : lk;
    if (vis == 0) continue;
    std::vector<double> s(static_cast<size_t>(vis));
    double m = -std::numeric_limits<double>::infinity(), l = 0;
    for (int64_t j = 0; j < vis; ++j) {
      double a = 0;
      for (int64_t c = 0; c < d; ++c) a += double(Q.get(h, i, c)) * K.get(kh, j, c);
      s[size_t(j)] = a / std::sqrt(double(d));
      m = std::max(m, s[size_t(j)]);
    }
    for (double x : s) l += std::exp(x - m);
    for (int64_t j = 0; j < vis; ++j)
      mass[size_t((i / bq) * nkb + j / bk)] += std::exp(s[size_t(j)] - m) / l;
    ++rows[size_t(i / bq)];
  }
  for (int64_t qb = 0; qb < nqb; ++qb)
    for (int64_t kb = 0; kb < nkb; ++kb)
      if (rows[size_t(qb)]) mass[size_t(qb * nkb + kb)] /= double(rows[size_t(qb)]);
  return mass;
}

}  // namespace

TEST(Metrics, CompareIdenticalIsExact) {
  const Tensor a = random_tensor(2, 7, 16, 1);
  const OutputError e = compare_outputs(a, a);
  EXPECT_EQ(e.rel_l2, 0.0);
  EXPECT_EQ(e.max_abs, 0.0);
  EXPECT_NEAR(e.cosine_min, 1.0, 1e-12);
  EXPECT_NEAR(e.cosine_mean, 1.0, 1e-12);
}

TEST(Metrics, CompareHandComputed) {
  // Rows: out (1,0) vs ref (1,0); out (0,2) vs ref (0,1); out (1,0) vs ref (0,1); both zero.
  const Tensor out = from_rows(1, 4, 2, {1, 0, 0, 2, 1, 0, 0, 0});
  const Tensor ref = from_rows(1, 4, 2, {1, 0, 0, 1, 0, 1, 0, 0});
  const OutputError e = compare_outputs(out, ref);
  // ||out - ref||^2 = 0 + 1 + 2 + 0 = 3; ||ref||^2 = 3.
  EXPECT_NEAR(e.rel_l2, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(e.max_abs, 1.0);
  EXPECT_NEAR(e.cosine_min, 0.0, 1e-12);
  EXPECT_NEAR(e.cosine_mean, (1.0 + 1.0 + 0.0 + 1.0) / 4.0, 1e-12);
}

TEST(Metrics, CompareReadsLowPrecisionAndRejectsShapeMismatch) {
  const Tensor a = random_tensor(2, 5, 8, 3);
  const Tensor b = Tensor::copy_of(a.view(), DType::bf16);
  const OutputError e = compare_outputs(b, a);
  EXPECT_GT(e.rel_l2, 0.0);   // bf16 rounding is visible
  EXPECT_LT(e.rel_l2, 1e-2);  // and small
  EXPECT_GT(e.cosine_min, 0.9999);
  const Tensor c = from_rows(1, 2, 2, {1, 2, 3, 4});
  EXPECT_THROW(compare_outputs(a, c), Error);
}

TEST(Metrics, SampleRowsAllWhenFew) {
  EXPECT_EQ(sample_rows(5, 8), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(sample_rows(0, 8), std::vector<int64_t>{});
  EXPECT_EQ(sample_rows(3, 3), (std::vector<int64_t>{0, 1, 2}));
}

TEST(Metrics, SampleRowsEvenlySpacedWithEnds) {
  EXPECT_EQ(sample_rows(9, 3), (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(sample_rows(10, 1), std::vector<int64_t>{9});
  for (int64_t q_len : {257, 1000, 32768}) {
    const auto r = sample_rows(q_len, 256);
    ASSERT_EQ(r.size(), 256u);
    EXPECT_EQ(r.front(), 0);
    EXPECT_EQ(r.back(), q_len - 1);
    for (size_t i = 1; i < r.size(); ++i) EXPECT_LT(r[i - 1], r[i]);
  }
  EXPECT_THROW(sample_rows(10, 0), Error);
  EXPECT_THROW(sample_rows(-1, 4), Error);
}

TEST(Metrics, SampledOutputErrorMatchesReference) {
  // GQA 4 -> 2, decode-like (q_len < kv_len), causal and not, default and explicit scale.
  const Tensor q = random_tensor(4, 24, 16, 10), k = random_tensor(2, 40, 16, 11),
               v = random_tensor(2, 40, 16, 12);
  for (bool causal : {true, false})
    for (float scale : {0.0f, 0.3f}) {
      AttnOptions opt;
      opt.causal = causal;
      opt.scale = scale;
      Tensor ref(DType::f32, 4, 24, 16);
      attention_reference(q, k, v, ref, opt);
      const OutputError same = sampled_output_error(ref, q, k, v, opt, 5);
      EXPECT_LT(same.rel_l2, 1e-6);
      EXPECT_GT(same.cosine_min, 1 - 1e-9);
      // With every row sampled it is compare_outputs against the reference.
      Tensor noisy = Tensor::copy_of(ref.view());
      for (int64_t i = 0; i < noisy.numel(); i += 7) noisy.data_as<float>()[i] += 0.25f;
      const OutputError all = sampled_output_error(noisy, q, k, v, opt, 1000);
      const OutputError direct = compare_outputs(noisy, ref);
      EXPECT_NEAR(all.rel_l2, direct.rel_l2, 1e-6);
      EXPECT_NEAR(all.max_abs, direct.max_abs, 1e-6);
      EXPECT_NEAR(all.cosine_min, direct.cosine_min, 1e-6);
    }
}

TEST(Metrics, SampledOutputErrorSeesOnlySampledRows) {
  const Tensor q = random_tensor(1, 9, 8, 20), k = random_tensor(1, 9, 8, 21),
               v = random_tensor(1, 9, 8, 22);
  Tensor out(DType::f32, 1, 9, 8);
  attention_reference(q, k, v, out);
  out.view().set(0, 3, 0, 100.0f);  // row 3 is not among rows {0, 4, 8}
  EXPECT_LT(sampled_output_error(out, q, k, v, {}, 3).max_abs, 1e-6);
  out.view().set(0, 4, 0, 100.0f);
  EXPECT_GT(sampled_output_error(out, q, k, v, {}, 3).max_abs, 50.0);
}

TEST(Metrics, RecallHalfCoverageOnUniformIsHalf) {
  // q = 0: every score is 0, so attention is exactly uniform over the visible keys.
  const Tensor q(DType::f32, 2, 16, 8), k = random_tensor(1, 64, 8, 30);
  AttnOptions full;
  full.causal = false;
  const Recall r = attention_recall(q, k, FixedCoverage({{0, 16}, {40, 56}}), full);
  EXPECT_NEAR(r.mean, 0.5, 1e-12);
  EXPECT_NEAR(r.worst, 0.5, 1e-12);
  EXPECT_EQ(r.rows, 32);
  // Causal rows see 49..64 keys; even counts split exactly in half.
  const Tensor q2(DType::f32, 1, 16, 8);
  const Recall c = attention_recall(q2, k, HalfCausalCoverage(16, 64), {});
  EXPECT_LT(c.mean, 0.5);
  EXPECT_NEAR(c.worst, 24.0 / 49.0, 1e-12);  // row 0: 24 of 49 keys
}

TEST(Metrics, RecallFullCoverageIsOneAndEmptyIsZero) {
  const Tensor q = random_tensor(4, 33, 16, 40, 2.0), k = random_tensor(2, 50, 16, 41, 2.0);
  const Recall r = attention_recall(q, k, FullCoverage(33, 50, true), {}, 10);
  EXPECT_NEAR(r.mean, 1.0, 1e-12);
  EXPECT_NEAR(r.worst, 1.0, 1e-12);
  EXPECT_EQ(r.rows, 4 * 10);
  const Recall none = attention_recall(q, k, FixedCoverage({}), {}, 10);
  EXPECT_EQ(none.mean, 0.0);
  EXPECT_EQ(none.worst, 0.0);
}

TEST(Metrics, RecallOfOneKeyIsItsSoftmaxWeight) {
  // Two keys, scores 0 and log(3) after scaling: softmax weights 1/4 and 3/4.
  Tensor q(DType::f32, 1, 1, 8), k(DType::f32, 1, 2, 8);
  q.view().set(0, 0, 0, float(std::log(3.0)));
  k.view().set(0, 1, 0, 1.0f);
  AttnOptions opt;
  opt.scale = 1.0f;
  EXPECT_NEAR(attention_recall(q, k, FixedCoverage({{1, 2}}), opt).mean, 0.75, 1e-6);
  EXPECT_NEAR(attention_recall(q, k, FixedCoverage({{0, 1}}), opt).mean, 0.25, 1e-6);
}

TEST(Metrics, RecallRejectsBadRanges) {
  const Tensor q = random_tensor(1, 4, 8, 50), k = random_tensor(1, 8, 8, 51);
  EXPECT_THROW(attention_recall(q, k, FixedCoverage({{0, 4}, {2, 6}}), {}), Error);  // overlap
  EXPECT_THROW(attention_recall(q, k, FixedCoverage({{4, 6}, {0, 2}}), {}), Error);  // unsorted
  EXPECT_THROW(attention_recall(q, k, FixedCoverage({{0, 9}}), {}), Error);          // past kv_len
  const Tensor k3 = random_tensor(3, 8, 8, 52), q2 = random_tensor(2, 4, 8, 53);
  EXPECT_THROW(attention_recall(q2, k3, FullCoverage(4, 8, true), {}), Error);  // 2 % 3 != 0
}

TEST(Metrics, BlockMassMatchesDirectDouble) {
  const Tensor q = random_tensor(4, 200, 16, 60, 1.5), k = random_tensor(2, 300, 16, 61, 1.5),
               v = random_tensor(2, 300, 16, 62);
  for (bool causal : {true, false})
    for (int64_t bk : {int64_t(64), int64_t(128)})
      for (int64_t h : {int64_t(0), int64_t(3)}) {
        AttnOptions opt;
        opt.causal = causal;
        const BlockMassGrid g = block_mass(q, k, v, h, 32, bk, opt);
        ASSERT_EQ(g.n_qb, 7);
        ASSERT_EQ(g.n_kb, (300 + bk - 1) / bk);
        const auto want = direct_block_mass(q, k, h, 32, bk, causal);
        for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(g.mass[i], want[i], 2e-5) << i;
        for (int64_t qb = 0; qb < g.n_qb; ++qb) {
          double sum = 0;
          for (int64_t kb = 0; kb < g.n_kb; ++kb) sum += g.mass[size_t(qb * g.n_kb + kb)];
          EXPECT_NEAR(sum, 1.0, 1e-5);
        }
      }
}

TEST(Metrics, BlockMassRejectsBadArguments) {
  const Tensor q = random_tensor(2, 64, 8, 70), k = random_tensor(1, 64, 8, 71),
               v = random_tensor(1, 64, 8, 72);
  EXPECT_THROW(block_mass(q, k, v, 0, 64, 32, {}), Error);  // not a multiple of kKeyBlock
  EXPECT_THROW(block_mass(q, k, v, 0, 64, 0, {}), Error);
  EXPECT_THROW(block_mass(q, k, v, 2, 64, 64, {}), Error);  // no such q head
  EXPECT_THROW(block_mass(q, k, v, 0, 0, 64, {}), Error);
}

TEST(Metrics, CausalBlocksBottomRightAligned) {
  BlockMassGrid g;
  g.block_q = 64;
  g.block_k = 64;
  g.q_len = 128;
  g.kv_len = 256;
  g.n_qb = 2;
  g.n_kb = 4;
  // Row 63 sits at position 191: keys 0..191 = 3 blocks; row 127 sees all 256 = 4 blocks.
  EXPECT_EQ(g.causal_blocks(0), 3);
  EXPECT_EQ(g.causal_blocks(1), 4);
  g.causal = false;
  EXPECT_EQ(g.causal_blocks(0), 4);
  g.causal = true;
  g.q_len = g.kv_len = 100;
  g.n_qb = g.n_kb = 2;
  EXPECT_EQ(g.causal_blocks(0), 1);
  EXPECT_EQ(g.causal_blocks(1), 2);
  EXPECT_THROW(g.causal_blocks(2), Error);
}

TEST(Metrics, OracleTopkHandGrid) {
  BlockMassGrid g;
  g.q_len = 128;
  g.kv_len = 256;
  g.n_qb = 2;
  g.n_kb = 4;
  g.mass = {0.5f, 0.1f, 0.4f, 0.0f,   // 3 causal blocks
            0.1f, 0.2f, 0.3f, 0.4f};  // 4 causal blocks
  // Budget 0.05: k = 1 for both rows.
  EXPECT_NEAR(oracle_topk_mass(g, 0.05), (0.5 + 0.4) / 2, 1e-6);
  // Budget 0.5: k = ceil(1.5) = 2 and ceil(2) = 2.
  EXPECT_NEAR(oracle_topk_mass(g, 0.5), (0.9 + 0.7) / 2, 1e-6);
  EXPECT_NEAR(oracle_topk_mass(g, 1.0), 1.0, 1e-6);
  EXPECT_NEAR(oracle_topk_mass_k(g, 3), (1.0 + 0.9) / 2, 1e-6);
  EXPECT_NEAR(oracle_topk_mass_k(g, 100), 1.0, 1e-6);
  EXPECT_THROW(oracle_topk_mass(g, 1.5), Error);
  EXPECT_THROW(oracle_topk_mass_k(g, 0), Error);
}

TEST(Metrics, OracleFullBudgetHoldsAllMass) {
  const Tensor q = random_tensor(1, 256, 16, 80, 2.0), k = random_tensor(1, 256, 16, 81, 2.0),
               v = random_tensor(1, 256, 16, 82);
  const BlockMassGrid g = block_mass(q, k, v, 0, 64, 64, {});
  EXPECT_NEAR(oracle_topk_mass(g, 1.0), 1.0, 1e-5);
  EXPECT_NEAR(oracle_topk_mass_k(g, g.n_kb), 1.0, 1e-5);
  EXPECT_LT(oracle_topk_mass_k(g, 1), 1.0);
  EXPECT_DOUBLE_EQ(attention_flops(10, 128), 4.0 * 128 * 10);
}
