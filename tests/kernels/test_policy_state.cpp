// Policies with per-thread state and a view of P: column sums of normalised attention weights
// (what H2O's heavy-hitter scores are) and per-block softmax mass, computed in a second pass
// that knows each row's final LSE (as FlashAttention's backward pass does), equal to the exact
// reference, with no atomics and bitwise the same run after run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/flash-inl.h"
#include "kernels/weight_sums_policy.hpp"
#include "spattn/error.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/weight_sums.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

namespace kn = kernels::HWY_NAMESPACE;

// Sink-free sparse coverage: the 100 nearest keys as a range, every third key gathered.
template <class Base>
struct RecentAndColumns : Base {
  struct KeySource : Base::KeySource {
    static constexpr bool kGather = true;
  };
  void key_ranges(const kernels::Problem&, int64_t, int64_t, int64_t limit,
                  std::vector<KeyRange>& out) const {
    out.push_back({limit - 100, limit});
  }
  void key_columns(const kernels::Problem&, int64_t, int64_t, int64_t limit,
                   std::vector<int64_t>& out) const {
    for (int64_t j = 0; j < limit; j += 3) out.push_back(j);
  }
};

// Keys row i of head h sees under the policy (the tile's limit comes from its last row).
std::vector<int64_t> keys_of(bool sparse, bool causal, int64_t i, int64_t lq, int64_t lk) {
  const int64_t row_lim = causal ? lk - lq + i + 1 : lk;
  const int64_t tile_last = std::min<int64_t>(lq, (i / 64 + 1) * 64) - 1;
  const int64_t tile_lim = causal ? lk - lq + tile_last + 1 : lk;
  std::vector<int64_t> keys;
  for (int64_t j = 0; j < row_lim; ++j)
    if (!sparse || j >= tile_lim - 100 || j % 3 == 0) keys.push_back(j);
  return keys;
}

// Exact column sums and block mass of the normalised weights over the keys keys_of admits.
void expect_sums(const Tensor& q, const Tensor& k, const Tensor& v, bool sparse, bool causal,
                 const WeightSums& got) {
  const int64_t hq = q.heads(), lq = q.seq(), lk = k.seq(), d = q.dim(), block = got.block_q;
  const int64_t n_qb = (lq + block - 1) / block, n_kb = (lk + got.block_k - 1) / got.block_k;
  std::vector<double> col(size_t(hq * lk), 0.0), mass(size_t(hq * n_qb * n_kb), 0.0);
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 0; i < lq; ++i) {
      const std::vector<int64_t> keys = keys_of(sparse, causal, i, lq, lk);
      double row_lse;
      test::row_over_keys(q, k, v, h, i, keys, 0, &row_lse);
      const double scale = 1.0 / std::sqrt(double(d));
      for (int64_t j : keys) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c)
          s += double(q.view().get(h, i, c)) * k.view().get(h / (hq / k.heads()), j, c);
        const double w = std::exp(s * scale - row_lse);
        col[size_t(h * lk + j)] += w;
        mass[size_t((h * n_qb + i / block) * n_kb + j / got.block_k)] += w;
      }
    }
  ASSERT_EQ(got.column.size(), col.size());
  ASSERT_EQ(got.block.size(), mass.size());
  for (size_t i = 0; i < col.size(); ++i)
    ASSERT_NEAR(got.column[i], col[i], 1e-5 + 1e-5 * col[i])
        << "column " << i << " causal " << causal;
  for (size_t i = 0; i < mass.size(); ++i)
    ASSERT_NEAR(got.block[i], mass[i], 1e-4 + 1e-5 * mass[i])
        << "block " << i << " causal " << causal;
  // Each row's weights sum to 1, so a head's column sums add up to its row count.
  double total = 0;
  for (int64_t j = 0; j < lk; ++j) total += got.column[size_t(j)];
  EXPECT_NEAR(total, double(lq), 1e-3);
}

struct Inputs {
  Tensor q = test::random_tensor(DType::f32, 4, 190, 64, 31, 2.0f),
         k = test::random_tensor(DType::f32, 2, 260, 64, 32),
         v = test::random_tensor(DType::f32, 2, 260, 64, 33), out{DType::f32, 4, 190, 64};
};

// The public form: dense coverage, raw tensors and a PackedKV, bitwise repeatable.
TEST(PolicyState, ColumnSumsAndBlockMassFromPHook) {
  Inputs in;
  const PackedKV kv = PackedKV::pack(in.k, in.v);
  for (bool causal : {true, false}) {
    AttnOptions opt;
    opt.causal = causal;
    opt.threads = 2;
    std::vector<float> lse(4 * 190);
    attention_dense(in.q, in.k, in.v, in.out, opt, lse.data());
    WeightSums a;
    a.want_blocks = true;
    a.block_k = 128;
    WeightSums b = a, c = a;
    attention_weight_sums(in.q, in.k, in.v, lse.data(), a, opt);
    attention_weight_sums(in.q, in.k, in.v, lse.data(), b, opt);
    attention_weight_sums(in.q, kv, lse.data(), c, opt);
    // Bitwise the same: the fixed schedule and ordered reduction, not luck.
    ASSERT_EQ(std::memcmp(a.column.data(), b.column.data(), a.column.size() * 8), 0);
    ASSERT_EQ(std::memcmp(a.block.data(), c.block.data(), a.block.size() * 8), 0);
    expect_sums(in.q, in.k, in.v, false, causal, a);
  }
}

// attention_weight_sums refuses what it cannot use, naming it.
TEST(PolicyState, WeightSumsBadInput) {
  Inputs in;
  std::vector<float> lse(4 * 190);
  attention_dense(in.q, in.k, in.v, in.out, {}, lse.data());
  const auto expect_error = [&](const WeightSums& w, const float* row_lse, const char* mention) {
    WeightSums out = w;
    try {
      attention_weight_sums(in.q, in.k, in.v, row_lse, out);
      ADD_FAILURE() << "accepted: " << mention;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
    }
  };
  WeightSums ok;
  expect_error(ok, nullptr, "row_lse");
  WeightSums none;
  none.want_columns = false;
  expect_error(none, lse.data(), "columns or blocks");
  WeightSums bad_block;
  bad_block.want_blocks = true;
  bad_block.block_q = 0;
  expect_error(bad_block, lse.data(), "block_q");
  Tensor k3 = test::random_tensor(DType::f32, 3, 260, 64, 1);  // 4 q heads over 3 kv heads
  WeightSums out;
  EXPECT_THROW(attention_weight_sums(in.q, k3, k3, lse.data(), out), Error);
}

// The same policy over a sparse coverage with gathered columns: key ids of gathered tiles.
TEST(PolicyState, ColumnSumsSeeGatheredKeyIds) {
  Inputs in;
  for (bool causal : {true, false}) {
    AttnOptions opt;
    opt.causal = causal;
    opt.threads = 2;
    std::vector<float> lse(4 * 190);
    kernels::Problem p = kernels::make_problem(in.q, in.k, in.v, in.out, opt, lse.data());
    RecentAndColumns<kernels::DensePolicy> first;  // pass 1: the rows' final LSE
    kn::RunFlash(p, first, nullptr);
    WeightSums got;
    got.want_blocks = true;
    RecentAndColumns<kernels::WeightSumsPolicy> pol;
    pol.row_lse = lse.data();
    pol.out = &got;
    pol.heads = 4, pol.q_len = 190, pol.kv_len = 260, pol.n_qb = 3, pol.n_kb = 5;
    p.lse = nullptr;
    kn::RunFlash(p, pol, nullptr);
    expect_sums(in.q, in.k, in.v, true, causal, got);
  }
}
// A policy whose hook has the wrong signature does not satisfy the contract (and RunFlash's
// static_assert names it).
struct WrongSkip : kernels::DensePolicy {
  struct Observers : kernels::DensePolicy::Observers {
    static constexpr bool kMaySkip = true;
  };
  bool skip(int64_t key_tile) const { return key_tile > 0; }
};
static_assert(kernels::FlashPolicy<kernels::DensePolicy>);
static_assert(kernels::FlashPolicy<kernels::WeightSumsPolicy>);
static_assert(!kernels::FlashPolicy<WrongSkip>);

}  // namespace
}  // namespace spattn
