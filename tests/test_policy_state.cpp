// Policies with per-thread state and a view of P: column sums of normalised attention weights
// (what H2O's heavy-hitter scores are) and per-block softmax mass, computed in a second pass
// that knows each row's final LSE (as FlashAttention's backward pass does), equal to the exact
// reference, with no atomics and bitwise the same run after run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/flash-inl.h"
#include "test_util.hpp"

namespace spattn {
namespace {

namespace kn = kernels::HWY_NAMESPACE;

// Per thread: column sums [Hq][Lkv] and block mass [Hq][n_qb][n_kb]; reduce() adds the threads'
// parts in thread order.
struct ColumnMassPolicy : kernels::DensePolicy {
  static constexpr bool kObserve = true;
  static constexpr bool kReduce = true;
  struct Local {
    std::vector<double> col, block;
  };
  const float* row_lse = nullptr;  // [Hq][Lq] final natural-log LSE from a first pass
  int64_t heads = 0, q_len = 0, kv_len = 0, n_qb = 0, n_kb = 0, block = 64;
  std::vector<double> col, mass;  // the reduced result

  void observe(Local& loc, const kernels::TileView& v) const {
    if (loc.col.empty()) {
      loc.col.assign(size_t(heads * kv_len), 0.0);
      loc.block.assign(size_t(heads * n_qb * n_kb), 0.0);
    }
    for (int64_t r = 0; r < v.n; ++r) {
      // P = 2^(x - m); the normalised weight is 2^(x - lse log2 e) = P 2^(m - lse log2 e).
      const double lse2 = double(row_lse[v.h * q_len + v.out_rows[r]]) * kernels::kLog2e;
      const double f = std::exp2(double(v.m[r]) - lse2);
      const int64_t qb = v.q_rows[r] / block;
      for (int64_t jj = 0; jj < v.n_keys; ++jj) {
        const double w = double(v.p[r * kernels::kTileKeys + jj]) * f;
        const int64_t j = v.key(jj);
        loc.col[size_t(v.h * kv_len + j)] += w;
        loc.block[size_t((v.h * n_qb + qb) * n_kb + j / block)] += w;
      }
    }
  }
  void reduce(std::vector<Local>& locals) {
    col.assign(size_t(heads * kv_len), 0.0);
    mass.assign(size_t(heads * n_qb * n_kb), 0.0);
    for (const Local& l : locals) {
      if (l.col.empty()) continue;
      for (size_t i = 0; i < col.size(); ++i) col[i] += l.col[i];
      for (size_t i = 0; i < mass.size(); ++i) mass[i] += l.block[i];
    }
  }
};

// Sink-free sparse coverage: the 100 nearest keys as a range, every third key gathered.
template <class Base>
struct RecentAndColumns : Base {
  static constexpr bool kGather = true;
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

template <class Policy>
void check_column_mass(bool sparse) {
  const int64_t hq = 4, hk = 2, lq = 190, lk = 260, d = 64, block = 64;
  Tensor q = test::random_tensor(DType::f32, hq, lq, d, 31, 2.0f),
         k = test::random_tensor(DType::f32, hk, lk, d, 32),
         v = test::random_tensor(DType::f32, hk, lk, d, 33), out(DType::f32, hq, lq, d);
  for (bool causal : {true, false}) {
    AttnOptions opt;
    opt.causal = causal;
    opt.threads = 2;
    std::vector<float> lse(size_t(hq * lq));
    kernels::Problem p = kernels::make_problem(q, k, v, out, opt, lse.data());
    // Pass 1: the rows' final LSE, from the same coverage without the observer.
    if (sparse) {
      RecentAndColumns<kernels::DensePolicy> first;
      kn::RunFlash(p, first, nullptr);
    } else {
      kernels::DensePolicy first;
      kn::RunFlash(p, first, nullptr);
    }
    // Pass 2: the column sums and block mass of the normalised weights.
    std::vector<std::vector<double>> runs;
    Policy pol;
    for (int rep = 0; rep < 2; ++rep) {
      pol.row_lse = lse.data();
      pol.heads = hq, pol.q_len = lq, pol.kv_len = lk;
      pol.n_qb = (lq + block - 1) / block, pol.n_kb = (lk + block - 1) / block;
      p.lse = nullptr;
      kn::RunFlash(p, pol, nullptr);
      p.lse = lse.data();
      runs.push_back(pol.col);
    }
    // Bitwise the same: the fixed schedule and ordered reduction, not luck.
    ASSERT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * 8), 0);

    std::vector<double> col(size_t(hq * lk), 0.0), mass(size_t(hq * pol.n_qb * pol.n_kb), 0.0);
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < lq; ++i) {
        const std::vector<int64_t> keys = keys_of(sparse, causal, i, lq, lk);
        double row_lse;
        test::row_over_keys(q, k, v, h, i, keys, 0, &row_lse);
        const double scale = 1.0 / std::sqrt(double(d));
        for (int64_t j : keys) {
          double s = 0;
          for (int64_t c = 0; c < d; ++c) s += double(q.view().get(h, i, c)) * k.view().get(h / 2, j, c);
          const double w = std::exp(s * scale - row_lse);
          col[size_t(h * lk + j)] += w;
          mass[size_t((h * pol.n_qb + i / block) * pol.n_kb + j / block)] += w;
        }
      }
    for (size_t i = 0; i < col.size(); ++i)
      ASSERT_NEAR(pol.col[i], col[i], 1e-5 + 1e-5 * col[i]) << "column " << i << " causal " << causal;
    for (size_t i = 0; i < mass.size(); ++i)
      ASSERT_NEAR(pol.mass[i], mass[i], 1e-4 + 1e-5 * mass[i]) << "block " << i << " causal " << causal;
    // Each row's weights sum to 1, so the column sums of a head add up to the row count.
    double total = 0;
    for (int64_t j = 0; j < lk; ++j) total += pol.col[size_t(j)];
    EXPECT_NEAR(total, double(lq), 1e-3);
  }
}

TEST(PolicyState, ColumnSumsAndBlockMassFromPHook) { check_column_mass<ColumnMassPolicy>(false); }

TEST(PolicyState, ColumnSumsSeeGatheredKeyIds) {
  check_column_mass<RecentAndColumns<ColumnMassPolicy>>(true);
}

// A policy whose hook has the wrong signature does not satisfy the contract (and RunFlash's
// static_assert names it).
struct WrongSkip : kernels::DensePolicy {
  static constexpr bool kMaySkip = true;
  bool skip(int64_t key_tile) const { return key_tile > 0; }
};
static_assert(kernels::FlashPolicy<kernels::DensePolicy>);
static_assert(kernels::FlashPolicy<ColumnMassPolicy>);
static_assert(!kernels::FlashPolicy<WrongSkip>);

}  // namespace
}  // namespace spattn
