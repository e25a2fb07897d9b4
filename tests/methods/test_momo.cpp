// momo ("Measure Once, Mask Once: Delta Refined Block Sparse Attention", Algorithm 1): with a
// budget covering every block it is dense attention; its sampled rows are the query-sparse
// pass's rows bit for bit; with delta=off every row is exact attention over its coverage; the
// union and trim (Algorithm 2) keeps sink and local blocks and at most k_trim others; bad
// parameters are errors naming the parameter, also from the command line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "cli_run.hpp"
#include "masked_reference.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/sparse_attention.hpp"
#include "spattn/workload.hpp"
#include "test_util.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

Workload text(int64_t seq, int64_t heads, int64_t kv_heads, int64_t dim, DType dt, uint64_t seed,
              int64_t q_len = 0) {
  WorkloadConfig c;
  c.seq = seq, c.q_len = q_len, c.heads = heads, c.kv_heads = kv_heads, c.dim = dim;
  c.dtype = dt, c.seed = seed;
  return make_workload(c);
}

struct MomoRun {
  Tensor out;
  std::vector<float> lse;
  MethodReport report;
};

MomoRun run(const std::string& spec, const Workload& w, DType out_dtype = DType::f32) {
  MomoRun r{Tensor(out_dtype, w.q.heads(), w.q.seq(), w.q.dim()),
            std::vector<float>(size_t(w.q.heads() * w.q.seq())),
            {}};
  AttnOptions opt;
  opt.threads = 2;
  r.report = make_method(spec)->run(w.q, w.k, w.v, r.out, opt, r.lse.data());
  return r;
}

bool sampled(int64_t row, int64_t gamma, int64_t q_len) {
  return row % gamma == gamma - 1 || row == q_len - 1;
}

// A budget covering every block: the mask is every causal block, O_* is dense attention and
// the correction is (float-error) zero, so the output is dense attention, delta on or off.
TEST(MomoMethod, FullBudgetEqualsDenseWithAndWithoutDelta) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const Workload w = text(333, 4, 2, 32, dt, 7);  // GQA, odd length
    Tensor ref(DType::f32, 4, 333, 32), dense(DType::f32, 4, 333, 32);
    attention_reference(w.q, w.k, w.v, ref);
    AttnOptions opt;
    opt.threads = 2;
    attention_dense(w.q, w.k, w.v, dense, opt);
    for (const char* topk : {"hybrid", "exact", "tree", "estimate"})
      for (const char* delta : {"on", "off"})
        for (int beta : {64, 128}) {
          const std::string plain = std::string("momo:gamma=4,chi=16,k=100,topk=") + topk +
                                    ",beta=" + std::to_string(beta) + ",delta=" + delta;
          // k = 100 covers every block: the plain spec runs the dense kernel (dense_shortcut),
          // dense's bits; lambda=0 (which skips nothing, the same bits as no rule) keeps momo's
          // own passes, checked below.
          const MomoRun shortcut = run(plain, w);
          EXPECT_EQ(shortcut.report.dense_shortcut, "budget") << plain;
          EXPECT_EQ(test::diff(shortcut.out, dense).max_abs, 0.0) << plain << dtype_name(dt);
          const std::string spec = plain + ",lambda=0";
          const MomoRun r = run(spec, w);
          // Against the dense kernel (same operand path) tightly, the exact reference loosely.
          EXPECT_LT(test::diff(r.out, dense).max_abs, 2e-5) << spec << " " << dtype_name(dt);
          EXPECT_LT(test::diff(r.out, ref).max_abs, dt == DType::f32 ? 2e-5 : 1e-2)
              << spec << " " << dtype_name(dt);
          // Both passes' entries; the problem's causal entries counted once.
          EXPECT_EQ(r.report.stats.causal_entries, 4 * 333 * 334 / 2) << spec;
          EXPECT_GT(r.report.stats.score_entries, r.report.stats.causal_entries) << spec;
        }
  }
}

// The sampled rows are the query-sparse pass's rows, bitwise, output and LSE, in f32 and bf16.
TEST(MomoMethod, SampledRowsAreTheQuerySparseRowsBitwise) {
  for (DType dt : {DType::f32, DType::bf16})
    for (const char* delta : {"on", "off"}) {
      const Workload w = text(517, 4, 1, 64, dt, 3);
      const int64_t gamma = 8;
      const MomoRun r = run(std::string("momo:gamma=8,chi=32,k=2,k_exact=1,delta=") + delta, w, dt);
      const std::vector<int64_t> rows = strided_rows(517, gamma);
      Tensor og(dt, 4, int64_t(rows.size()), 64);
      std::vector<float> lse_g(4 * rows.size());
      AttnOptions opt;
      opt.threads = 2;
      attention_query_sparse(w.q, w.k, w.v, rows, og, opt, lse_g.data());
      const size_t row_bytes = 64 * dtype_size(dt);
      for (int64_t h = 0; h < 4; ++h)
        for (size_t ri = 0; ri < rows.size(); ++ri) {
          ASSERT_EQ(
              std::memcmp(r.out.view().ptr(h, rows[ri]), og.view().ptr(h, int64_t(ri)), row_bytes),
              0)
              << dtype_name(dt) << " head " << h << " row " << rows[ri];
          ASSERT_EQ(r.lse[size_t(h * 517 + rows[ri])], lse_g[h * rows.size() + ri]);
        }
    }
}

// delta=off: every row is exact attention over exactly the keys the coverage lists (all causal
// keys for sampled rows, the trimmed mask's for the others), output and LSE.
TEST(MomoMethod, DeltaOffIsExactAttentionOverItsCoverage) {
  const Workload w = text(300, 4, 2, 32, DType::f32, 5);
  const MomoRun r = run("momo:gamma=4,chi=16,k=2,k_exact=1,k_trim=3,sink=1,local=1,delta=off", w);
  const Coverage& cov = *r.report.coverage;
  std::vector<std::vector<std::vector<int64_t>>> keys(4);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 300; ++i) keys[size_t(h)].push_back(test::coverage_keys(cov, h, i));
  const test::MaskedRef ref =
      test::masked_reference(w.q, w.k, w.v, true, [&](int64_t h, int64_t i, int64_t j) {
        const auto& k = keys[size_t(h)][size_t(i)];
        return std::binary_search(k.begin(), k.end(), j);
      });
  test::expect_matches(r.out, r.lse, ref, "delta=off");
  // Sampled rows cover every causal key; others at most 1 + 3 + 1 blocks of 64.
  for (int64_t i = 0; i < 300; ++i) {
    if (sampled(i, 4, 300)) {
      EXPECT_EQ(int64_t(keys[0][size_t(i)].size()), i + 1);
    } else {
      EXPECT_LE(int64_t(keys[0][size_t(i)].size()), 5 * 64);
    }
  }
}

// Eq. 2: with delta on, row i is O_*_i + (O_gamma - O_*) at the sampled row of its group (the
// first sampled row at or after i); O_* recomputed here from the reported mask, O_gamma is the
// output's own sampled row. The mask is the same with delta on or off.
TEST(MomoMethod, DeltaOnAddsTheSampledRowsDifferenceToItsGroup) {
  const int64_t L = 1000, gamma = 16;
  const Workload w = text(L, 2, 1, 64, DType::f32, 9);
  const MomoRun on = run("momo:gamma=16,k=4,delta=on", w);
  const MomoRun off = run("momo:gamma=16,k=4,delta=off", w);
  ASSERT_EQ(on.report.mask->to_dense(), off.report.mask->to_dense());
  Tensor os_t(DType::f32, 2, L, 64);
  const TensorView os = os_t.view();
  AttnOptions opt;
  opt.threads = 2;
  attention_block_sparse(w.q, w.k, w.v, os_t, *on.report.mask, opt);
  const TensorView o = on.out.view(), f = off.out.view();
  double moved = 0;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < L; ++i) {
      int64_t s = i;
      while (!sampled(s, gamma, L)) ++s;
      for (int64_t c = 0; c < 64; ++c) {
        if (s == i) {
          ASSERT_EQ(o.get(h, i, c), f.get(h, i, c));  // sampled: O_gamma either way
          continue;
        }
        ASSERT_EQ(f.get(h, i, c), os.get(h, i, c)) << "delta=off row " << i;  // O_* itself
        const double want = double(os.get(h, i, c)) + (double(o.get(h, s, c)) - os.get(h, s, c));
        ASSERT_NEAR(o.get(h, i, c), want, 1e-5) << "head " << h << " row " << i << " dim " << c;
        moved += std::abs(o.get(h, i, c) - f.get(h, i, c));
      }
    }
  EXPECT_GT(moved, 0.0);
}

// Algorithm 2: each query block keeps its sink and local blocks and at most k_trim others; the
// mask is causal and valid, and its geometry is (chi, beta).
TEST(MomoMethod, UnionAndTrimKeepSinkLocalAndAtMostKTrimOthers) {
  const Workload w = text(1500, 2, 1, 32, DType::f32, 11);
  for (const char* topk : {"hybrid", "exact", "tree", "estimate"}) {
    const MomoRun r = run(std::string("momo:gamma=8,chi=32,beta=128,k=3,k_exact=1,k_trim=4,sink=2,"
                                      "local=1,topk=") +
                              topk,
                          w);
    const BlockMask& m = *r.report.mask;
    ASSERT_NO_THROW(m.validate());
    EXPECT_EQ(m.block_q, 32);
    EXPECT_EQ(m.block_k, 128);
    EXPECT_TRUE(m.causal);
    int64_t above_forced = 0;
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
        const auto row = m.row(h, qb);
        const int64_t cb = m.causal_blocks(qb);
        std::vector<int32_t> forced;
        for (int32_t j = 0; j < std::min<int64_t>(2, cb); ++j) forced.push_back(j);
        if (cb - 1 >= 2) forced.push_back(int32_t(cb - 1));
        for (int32_t j : forced)
          EXPECT_TRUE(std::find(row.begin(), row.end(), j) != row.end())
              << topk << " head " << h << " qb " << qb << " lacks block " << j;
        const int64_t others = int64_t(row.size()) - int64_t(forced.size());
        EXPECT_LE(others, 4) << topk << " head " << h << " qb " << qb;
        above_forced += others;
      }
    EXPECT_GT(above_forced, 0) << topk;  // the selection did choose blocks
    const auto& x = r.report.extras;
    EXPECT_GT(x.at("k_sparse"), 0.0);
    EXPECT_GT(x.at("k_dense"), 0.0);
    EXPECT_LE(x.at("blocks_per_row"), 3.0);
    EXPECT_GT(x.at("blocks_per_qblock"), 0.0);
    EXPECT_GE(x.at("sparsity_eq9"), 0.0);
    EXPECT_LT(x.at("sparsity_eq9"), 1.0);
  }
}

// The exact selectors with k_trim = k at chi = gamma (one sampled row per query block): the
// block each row chose is the one with the highest block score S(j), checked against the exact
// reference's row LSE over the block.
TEST(MomoMethod, ExactSelectionPicksTheHighestBlockScore) {
  const Workload w = text(640, 1, 1, 32, DType::f32, 13);
  const MomoRun r =
      run("momo:gamma=16,chi=16,k=1,k_exact=1,topk=exact,sink=0,local=1,pool=block,blend=none", w);
  const BlockMask& m = *r.report.mask;
  for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
    const int64_t row = qb * 16 + 15, cb = m.causal_blocks(qb);
    if (cb < 2) continue;
    double best = -INFINITY, second = -INFINITY;
    int64_t best_j = -1;
    for (int64_t j = 0; j + 1 < cb; ++j) {
      std::vector<int64_t> keys;
      for (int64_t c = j * 64; c < (j + 1) * 64 && c <= row; ++c) keys.push_back(c);
      double lse = 0;
      test::row_over_keys(w.q, w.k, w.v, 0, row, keys, 0, &lse);
      if (lse > best) {
        second = best, best = lse, best_j = j;
      } else {
        second = std::max(second, lse);
      }
    }
    if (best - second < 1e-3) continue;  // a near tie: f32 may order it either way
    const auto got = m.row(0, qb);
    EXPECT_TRUE(std::find(got.begin(), got.end(), int32_t(best_j)) != got.end())
        << "qb " << qb << " best block " << best_j;
  }
}

// A sampled row's exact candidates (head 0, beta = 64, sink = 1, local = 1): the log-mass S(j)
// of each block of its own query block past the sink and before its local block, best first,
// and in *row_lse the row's LSE over every key it sees.
std::vector<std::pair<double, int32_t>> row_candidates(const Workload& w, const BlockMask& m,
                                                       int64_t row, int64_t chi, double* row_lse) {
  const int64_t own_cb = m.causal_blocks(row / chi);
  std::vector<int64_t> all;
  for (int64_t c = 0; c <= row; ++c) all.push_back(c);
  test::row_over_keys(w.q, w.k, w.v, 0, row, all, 0, row_lse);
  std::vector<std::pair<double, int32_t>> s;  // (S(j), j)
  for (int64_t j = 1; j < own_cb - 1 && j * 64 <= row; ++j) {
    std::vector<int64_t> keys;
    for (int64_t c = j * 64; c < (j + 1) * 64 && c <= row; ++c) keys.push_back(c);
    double lse = 0;
    test::row_over_keys(w.q, w.k, w.v, 0, row, keys, 0, &lse);
    s.push_back({lse, int32_t(j)});
  }
  std::sort(s.begin(), s.end(), [](auto a, auto b) { return a.first > b.first; });
  return s;
}

// Query block qb of m (sink and local one block each) keeps the sink, the local block and the
// candidates `chosen`, nothing else.
void expect_kept(const BlockMask& m, int64_t qb, std::vector<int32_t> chosen,
                 const std::string& what) {
  chosen.push_back(0);
  chosen.push_back(int32_t(m.causal_blocks(qb) - 1));
  std::sort(chosen.begin(), chosen.end());
  const auto got = m.row(0, qb);
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.end()), chosen) << what << " qb " << qb;
}

// Union and trim against a plain reference: per query block, each sampled row's exact top-k
// candidate blocks (by the reference's block LSE S(j)), pooled, a block several rows chose
// ranked by the sum of its row shares exp(S(j) - LSE_row) (trim=mass) or the mean of its S(j)
// (trim=mean), the top k_trim kept beside sink and local (blend=none: the union alone). Query
// blocks whose ranking has a near tie at the cut are skipped (f32 may order those either way).
// pool=above also pools the last sampled row above the block, its choices outside the block's
// candidates dropped.
TEST(MomoMethod, TrimRanksTheUnionByRowMassOrMeanScore) {
  const Workload w = text(1400, 1, 1, 32, DType::f32, 17);
  const int64_t gamma = 8, chi = 32, L = 1400;
  std::vector<std::vector<uint8_t>> masks;  // the row above changes some block's choice
  for (const char* pool : {"block", "above"})
    for (const char* trim : {"mass", "mean"}) {
      const MomoRun r =
          run(std::string("momo:gamma=8,chi=32,k=3,k_trim=2,sink=1,local=1,topk=exact,"
                          "blend=none,pool=") +
                  pool + ",trim=" + trim,
              w);
      const BlockMask& m = *r.report.mask;
      masks.push_back(m.to_dense());
      int64_t checked = 0;
      for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
        const int64_t cb = m.causal_blocks(qb);
        if (cb < 6) continue;  // fewer candidates than the union keeps: nothing to rank
        std::vector<double> sum(size_t(cb), 0.0);
        std::vector<int> cnt(size_t(cb), 0);
        const int64_t first = std::string(pool) == "above" ? qb * chi - 1 : qb * chi;
        for (int64_t row = first; row < std::min(L, (qb + 1) * chi); ++row) {
          if (!sampled(row, gamma, L)) continue;
          double row_lse = 0;
          const auto s = row_candidates(w, m, row, chi, &row_lse);
          for (size_t i = 0; i < std::min<size_t>(3, s.size()); ++i) {
            const auto [score, j] = s[i];
            if (j >= cb - 1) continue;  // the row above chose a block this block keeps anyway
            sum[size_t(j)] += std::string(trim) == "mass" ? std::exp(score - row_lse) : score;
            ++cnt[size_t(j)];
          }
        }
        std::vector<std::pair<double, int32_t>> rank;
        for (int32_t j = 0; j < cb; ++j)
          if (cnt[size_t(j)] > 0)
            rank.push_back(
                {std::string(trim) == "mass" ? sum[size_t(j)] : sum[size_t(j)] / cnt[size_t(j)],
                 j});
        std::sort(rank.begin(), rank.end(), [](auto a, auto b) { return a.first > b.first; });
        if (rank.size() < 3) continue;
        const double gap = rank[1].first - rank[2].first;
        if (gap < 1e-3 * std::max(1.0, std::fabs(rank[1].first))) continue;
        expect_kept(m, qb, {rank[0].second, rank[1].second}, std::string(pool) + " " + trim);
        ++checked;
      }
      EXPECT_GT(checked, 20) << pool << " " << trim;
    }
  EXPECT_NE(masks[0], masks[2]);  // mass: block against above
  EXPECT_NE(masks[1], masks[3]);  // mean
}

// The blend's score of every causal block of query block qb (head 0 of a one-head workload;
// sink = 1, local = 1, beta = 64, topk=exact with kk blocks a row) as momo's union computes it,
// in plain double arithmetic: each block's share of the pooled estimate's softmax over the
// causal blocks (with moments, the second-order term), plus, for the candidates (neither sink
// nor local), the pooled rows' shares above their kk-th, over the rows pooled.
std::vector<double> blend_scores(const Workload& w, const BlockMask& m, int64_t qb, int64_t gamma,
                                 int64_t chi, int64_t kk, bool moments, bool above) {
  const int64_t L = w.q.seq(), d = w.q.dim(), cb = m.causal_blocks(qb);
  const double scale = softmax_scale(AttnOptions{}, d);
  const float* Q = w.q.data_as<float>();
  const float* K = w.k.data_as<float>();
  // Per-channel mean and variance of rows [r0, r1) of X.
  auto moments_of = [&](const float* X, int64_t r0, int64_t r1, std::vector<double>& mean,
                        std::vector<double>& var) {
    mean.assign(size_t(d), 0.0), var.assign(size_t(d), 0.0);
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t c = 0; c < d; ++c) mean[size_t(c)] += X[i * d + c] / double(r1 - r0);
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t c = 0; c < d; ++c) {
        const double x = X[i * d + c] - mean[size_t(c)];
        var[size_t(c)] += x * x / double(r1 - r0);
      }
  };
  // The pooled estimate's share of each causal block.
  std::vector<double> qm, vq, km, vk, score(size_t(cb), 0.0);
  std::vector<double> logit(static_cast<size_t>(cb));
  const int64_t r0 = qb * chi, r1 = std::min(L, (qb + 1) * chi);
  moments_of(Q, r0, r1, qm, vq);
  double mx = -1e300;
  for (int64_t j = 0; j < cb; ++j) {
    moments_of(K, j * 64, std::min(L, (j + 1) * 64), km, vk);
    double dot = 0, spread = 0;
    for (int64_t c = 0; c < d; ++c) {
      const size_t u = size_t(c);
      dot += qm[u] * km[u];
      spread += qm[u] * qm[u] * vk[u] + vq[u] * (km[u] * km[u] + vk[u]);
    }
    logit[size_t(j)] = scale * dot + (moments ? 0.5 * scale * scale * spread : 0.0);
    mx = std::max(mx, logit[size_t(j)]);
  }
  double tot = 0;
  for (int64_t j = 0; j < cb; ++j) tot += score[size_t(j)] = std::exp(logit[size_t(j)] - mx);
  for (double& x : score) x /= tot;
  // The pooled rows' votes.
  const int64_t first = above ? r0 - 1 : r0;
  int rows = 0;
  for (int64_t row = first; row < r1; ++row) rows += sampled(row, gamma, L);
  for (int64_t row = first; row < r1; ++row) {
    if (!sampled(row, gamma, L)) continue;
    double row_lse = 0;
    const auto s = row_candidates(w, m, row, chi, &row_lse);
    const size_t n = std::min<size_t>(size_t(kk), s.size());
    if (n == 0) continue;
    const double cut = std::exp(s[n - 1].first - row_lse);
    for (size_t i = 0; i < n; ++i)
      if (s[i].second < cb - 1)  // the row above's choices this block keeps anyway: dropped
        score[size_t(s[i].second)] += (std::exp(s[i].first - row_lse) - cut) / rows;
  }
  return score;
}

// The candidates of a query block (every causal block but the sink, 0, and the local, cb - 1),
// best blend score first.
std::vector<std::pair<double, int32_t>> ranked_candidates(const std::vector<double>& score) {
  std::vector<std::pair<double, int32_t>> rank;
  for (int32_t j = 1; j + 1 < int32_t(score.size()); ++j) rank.push_back({score[size_t(j)], j});
  std::sort(rank.begin(), rank.end(), [](auto a, auto b) { return a.first > b.first; });
  return rank;
}

// The budget tests' runs: momo with one sampled row in 8 and query blocks of 32 (gamma = 8,
// chi = 32), k = 3 exact blocks a row, sink and local one block each; and what the budgets read
// of query block qb under that spec: every causal block's blend score (blend=moments,
// pool=above, the defaults), the candidates ranked, and the total over the causal blocks.
const std::string kBudgetSpec = "momo:gamma=8,chi=32,k=3,sink=1,local=1,topk=exact";
struct BlendEstimate {
  std::vector<double> score;
  std::vector<std::pair<double, int32_t>> rank;
  double total = 0;
};
BlendEstimate budget_estimate(const Workload& w, const BlockMask& m, int64_t qb) {
  BlendEstimate e;
  e.score = blend_scores(w, m, qb, /*gamma=*/8, /*chi=*/32, /*kk=*/3, true, true);
  e.rank = ranked_candidates(e.score);
  for (double x : e.score) e.total += x;
  return e;
}

// The blend (blend=moments, the default with trim=mass, and blend=mean_pool) against a plain
// reference: per query block, each pooled sampled row's exact top-k candidate blocks by S(j),
// each voting its share exp(S(j) - LSE_row) less its k-th share (the row's bound on every block
// it left out), the votes averaged over the pooled rows (pool=above: the last sampled row above
// the block too, its choices outside the block's candidates dropped); every candidate adds its
// share of the softmax over the query block's causal blocks of the pooled estimate: mean_pool
// scale * qm . km (qm, km the means of the block's q rows and the key block's k rows); moments
// that plus scale^2 / 2 sum_c (qm_c^2 vk_c + vq_c (km_c^2 + vk_c)) (vq, vk the per-channel
// variances over the same rows); the top k_trim of the candidates by that sum kept beside sink
// and local. Near ties at the cut skipped.
TEST(MomoMethod, BlendRanksByRowVotesAboveTheirCutPlusPooledShare) {
  const Workload w = text(1400, 1, 1, 32, DType::f32, 19);
  const int64_t gamma = 8, chi = 32, kk = 3;
  const std::string base = "momo:gamma=8,chi=32,k=3,k_trim=2,sink=1,local=1,topk=exact";
  const MomoRun none = run(base + ",blend=none", w);
  std::vector<std::vector<uint8_t>> masks;
  for (const char* pool : {"block", "above"})
    for (const char* blend : {"moments", "mean_pool"}) {
      const bool moments = std::string(blend) == "moments", above = std::string(pool) == "above";
      // The defaults are blend=moments, pool=above.
      const MomoRun r =
          run(moments && above ? base : base + ",blend=" + blend + ",pool=" + pool, w);
      const BlockMask& m = *r.report.mask;
      masks.push_back(m.to_dense());
      EXPECT_NE(m.to_dense(), none.report.mask->to_dense());  // the blend changes some choice
      int64_t checked = 0;
      for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
        const int64_t cb = m.causal_blocks(qb);
        if (cb < 5) continue;  // at most k_trim candidates: nothing to rank
        const auto rank = ranked_candidates(blend_scores(w, m, qb, gamma, chi, kk, moments, above));
        const double gap = rank[1].first - rank[2].first;
        if (gap < 1e-4 * std::max(1e-3, rank[1].first)) continue;
        expect_kept(m, qb, {rank[0].second, rank[1].second}, std::string(blend) + " " + pool);
        ++checked;
      }
      EXPECT_GT(checked, 20) << blend << " " << pool;
    }
  EXPECT_NE(masks[0], masks[1]);  // moments against mean_pool
  EXPECT_NE(masks[0], masks[2]);  // above against block
}

// topp: per query block the sink, the local window and the fewest candidates, best blend score
// first, whose scores with the forced blocks' reach topp of every causal block's, at most
// k_trim of them, against the scalar twin of the blend's scores. Query blocks where a partial
// sum lands within float error of the goal, or the last kept ties the next, are not judged.
TEST(MomoMethod, ToppKeepsTheFewestCandidatesWhoseBlendMassReachesP) {
  const Workload w = text(1400, 1, 1, 32, DType::f32, 19);
  for (const double p : {0.5, 0.8, 0.95})
    for (const int64_t k_trim : {int64_t(1000), int64_t(3)}) {
      const std::string spec =
          kBudgetSpec + ",k_trim=" + std::to_string(k_trim) + ",topp=" + std::to_string(p);
      const MomoRun r = run(spec, w);
      const BlockMask& m = *r.report.mask;
      int64_t checked = 0, below_cap = 0;
      for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
        const int64_t cb = m.causal_blocks(qb);
        if (cb < 3) continue;  // no candidates
        const auto [score, rank, total] = budget_estimate(w, m, qb);
        double kept = score[0] + score[size_t(cb - 1)];
        bool close = std::abs(kept - p * total) < 1e-5 * total;
        size_t n = 0;
        for (; n < rank.size() && int64_t(n) < k_trim && kept < p * total; ++n) {
          kept += rank[n].first;
          close |= std::abs(kept - p * total) < 1e-5 * total;
        }
        if (close || (n > 0 && n < rank.size() &&
                      rank[n - 1].first - rank[n].first < 1e-5 * std::max(1e-3, rank[n].first)))
          continue;
        std::vector<int32_t> chosen;
        for (size_t i = 0; i < n; ++i) chosen.push_back(rank[i].second);
        expect_kept(m, qb, chosen, spec);
        ++checked;
        below_cap += int64_t(n) < std::min<int64_t>(k_trim, int64_t(rank.size()));
      }
      EXPECT_GT(checked, 20) << spec;
      if (k_trim == 1000) {
        EXPECT_GT(below_cap, 10) << spec;  // the mass, not the cap, decided
      }
    }
}

// min_share: per query block the sink, the local window and every candidate whose blend score
// is at least min_share of every causal block's (the best k_trim of them if more), against the
// scalar twin of the blend's scores; candidates within float error of the threshold are not
// judged. Across query blocks the threshold is one, so blocks of spread attention keep fewer.
TEST(MomoMethod, MinShareKeepsEveryCandidateAboveTheThreshold) {
  const Workload w = text(1400, 1, 1, 32, DType::f32, 19);
  for (const double t : {0.01, 0.03, 0.1})
    for (const int64_t k_trim : {int64_t(1000), int64_t(2)}) {
      const std::string spec =
          kBudgetSpec + ",k_trim=" + std::to_string(k_trim) + ",min_share=" + std::to_string(t);
      const MomoRun r = run(spec, w);
      const BlockMask& m = *r.report.mask;
      int64_t checked = 0, kept_some = 0, kept_none = 0;
      for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
        const int64_t cb = m.causal_blocks(qb);
        if (cb < 3) continue;  // no candidates
        const auto [score, rank, total] = budget_estimate(w, m, qb);
        bool close = false;
        std::vector<int32_t> chosen;
        for (size_t i = 0; i < rank.size(); ++i) {
          close |= std::abs(rank[i].first - t * total) < 1e-5 * total;
          if (rank[i].first >= t * total && int64_t(i) < k_trim) chosen.push_back(rank[i].second);
        }
        if (close) continue;
        expect_kept(m, qb, chosen, spec);
        ++checked;
        (chosen.empty() ? kept_none : kept_some) += 1;
      }
      EXPECT_GT(checked, 20) << spec;
      EXPECT_GT(kept_some, 0) << spec;  // the threshold keeps blocks in some query blocks
      if (t == 0.1) {
        EXPECT_GT(kept_none, 0) << spec;  // and none in others
      }
    }
}

// lambda=0 (BLASST's rule that skips nothing) is momo without the rule bit for bit: output, LSE
// and mask, every selector, both block sizes, f32 and bf16, either visiting order named.
TEST(MomoLambda, LambdaZeroIsBitwiseNoLambda) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const Workload w = text(700, 2, 1, 64, dt, 21);
    for (const char* topk : {"hybrid", "exact", "tree", "estimate"})
      for (int beta : {64, 128}) {
        const std::string base = std::string("momo:gamma=8,chi=32,k=3,k_exact=1,topk=") + topk +
                                 ",beta=" + std::to_string(beta);
        const MomoRun off = run(base, w, dt);
        for (const char* rule : {",lambda=0", ",lambda=0,order=in_order"}) {
          const MomoRun on = run(base + rule, w, dt);
          const std::string what = base + rule + " " + dtype_name(dt);
          ASSERT_EQ(std::memcmp(on.out.data(), off.out.data(), off.out.nbytes()), 0) << what;
          ASSERT_EQ(std::memcmp(on.lse.data(), off.lse.data(), off.lse.size() * sizeof(float)), 0)
              << what;
          EXPECT_EQ(on.report.mask->to_dense(), off.report.mask->to_dense()) << what;
          EXPECT_EQ(on.report.extras.at("skipped_fused"), 0.0) << what;
          EXPECT_EQ(on.report.extras.at("skipped_sparse"), 0.0) << what;
          EXPECT_EQ(on.report.stats.score_entries, off.report.stats.score_entries) << what;
        }
      }
  }
}

// Under the rule (lambda > 0, tiles skipped in both passes) the coverage is still exactly what
// was computed: with delta=off every row is exact attention over the keys its coverage lists
// (sampled rows: causal keys less the fused pass's skipped tiles; the others: the mask's less
// the block-sparse pass's), output and LSE. Both orders, beta one tile and two (blocks folded
// from tiles arriving out of order under local-first).
TEST(MomoLambda, CoverageIsExactUnderTheSkipRule) {
  const int64_t L = 1200;
  const Workload w = text(L, 2, 1, 32, DType::f32, 23);
  for (const char* order : {"local_first", "in_order"})
    for (int beta : {64, 128}) {
      const std::string spec = std::string(
                                   "momo:gamma=4,chi=64,k=6,k_exact=2,delta=off,"
                                   "lambda=0.2,order=") +
                               order + ",beta=" + std::to_string(beta);
      const MomoRun r = run(spec, w);
      EXPECT_GT(r.report.extras.at("skipped_fused"), 0.0) << spec;
      EXPECT_GT(r.report.extras.at("skipped_sparse"), 0.0) << spec;
      EXPECT_GT(r.report.stats.tiles_skipped, 0) << spec;
      const Coverage& cov = *r.report.coverage;
      std::vector<std::vector<std::vector<int64_t>>> keys(2);
      int64_t short_rows = 0;
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < L; ++i) {
          keys[size_t(h)].push_back(test::coverage_keys(cov, h, i));
          if (sampled(i, 4, L) && int64_t(keys[size_t(h)].back().size()) < i + 1) ++short_rows;
        }
      EXPECT_GT(short_rows, 0) << spec << ": no sampled row lost a skipped tile";
      const test::MaskedRef ref =
          test::masked_reference(w.q, w.k, w.v, true, [&](int64_t h, int64_t i, int64_t j) {
            const auto& k = keys[size_t(h)][size_t(i)];
            return std::binary_search(k.begin(), k.end(), j);
          });
      test::expect_matches(r.out, r.lse, ref, spec.c_str());
    }
}

// gamma=auto (the default): the smallest stride 16 * 2^i dividing chi whose dense sampled rows
// take at most 1/32 of Eq. 9's per-row budget (chi if none); the rows it reports are the rows
// that attend densely, and a given gamma is used as given.
TEST(MomoMethod, AutoGammaBoundsTheDenseRowsShareOfTheBudget) {
  const int64_t L = 2048;
  const Workload w = text(L, 2, 1, 32, DType::f32, 21);
  auto share = [&](double g, double k) { return (L / g) / (64 * (k + 1 + 3) + L / g); };  // Eq. 9
  int64_t last = 0;
  // Smaller budgets, larger strides; each selects (2048 keys are 32 blocks: a k covering them
  // would run dense).
  for (int k : {24, 12, 4, 1}) {
    const std::string spec = "momo:k=" + std::to_string(k);
    const MomoRun r = run(spec, w);
    const int64_t g = int64_t(r.report.extras.at("gamma"));
    EXPECT_TRUE(g == 16 || g == 32 || g == 64 || g == 128) << spec << ": gamma " << g;
    EXPECT_TRUE(g == 128 || share(double(g), k) <= 1.0 / 32) << spec << ": gamma " << g;
    EXPECT_TRUE(g == 16 || share(double(g) / 2, k) > 1.0 / 32) << spec << ": gamma " << g;
    EXPECT_GE(g, last) << spec;
    last = g;
    for (int64_t i = 0; i < L; ++i) {
      std::vector<KeyRange> kr;
      r.report.coverage->row_ranges(1, i, kr);
      const bool dense = kr.size() == 1 && kr[0].begin == 0 && kr[0].end == i + 1;
      if (sampled(i, g, L)) {
        ASSERT_TRUE(dense) << spec << " row " << i;
      }
    }
    EXPECT_EQ(run(spec + ",gamma=auto", w).report.extras.at("gamma"), double(g));
  }
  EXPECT_GT(last, 16);
  EXPECT_EQ(run("momo:k=1,gamma=16", w).report.extras.at("gamma"), 16.0);
}

// Decode-sized queries run dense decode.
TEST(MomoMethod, DecodeFallsBackToDenseDecode) {
  const Workload w = text(1000, 4, 2, 64, DType::f32, 17, 5);
  const MomoRun r = run("momo", w);
  EXPECT_EQ(r.report.path, KernelPath::decode);
  EXPECT_EQ(r.report.mask, nullptr);
  Tensor want(DType::f32, 4, 5, 64);
  AttnOptions opt;
  opt.threads = 2;
  attention_decode(w.q, w.k, w.v, want, opt);
  EXPECT_EQ(std::memcmp(r.out.data(), want.data(), want.nbytes()), 0);
}

// Each bad parameter is an Error whose message names it.
TEST(MomoParams, BadParametersNameTheParameter) {
  const std::pair<const char*, const char*> cases[] = {
      {"momo:gamma=0", "gamma"},
      {"momo:gamma=256", "gamma"},
      {"momo:gamma=48", "gamma"},
      {"momo:chi=100,gamma=16", "chi"},
      {"momo:beta=96", "beta"},
      {"momo:beta=32", "beta"},
      {"momo:k=0", "k="},
      {"momo:k=4,k_exact=8", "k_exact"},
      {"momo:topk=heap", "topk"},
      {"momo:sink=-1", "sink"},
      {"momo:local=-2", "local"},
      {"momo:delta=maybe", "delta"},
      {"momo:k_trim=0", "k_trim"},
      {"momo:lambda=1.5", "lambda"},
      {"momo:lambda=-0.1", "lambda"},
      {"momo:lambda=nan", "lambda"},
      {"momo:lambda=x", "lambda"},
      {"momo:order=in_order", "order"},
      {"momo:lambda=0.1,order=sideways", "order"},
      {"momo:trim=max", "trim"},
      {"momo:gamma=x", "gamma"},
      {"momo:chi=24", "chi"},
      {"momo:gamma=auto,chi=200", "chi"},
      {"momo:pool=left", "pool"},
      {"momo:blend=max", "blend"},
      {"momo:trim=mean,blend=mean_pool", "blend"},
      {"momo:trim=mean,blend=moments", "blend"},
      {"momo:topp=0", "topp"},
      {"momo:topp=1.01", "topp"},
      {"momo:topp=-0.5", "topp"},
      {"momo:topp=nan", "topp"},
      {"momo:blend=none,topp=0.9", "topp needs blend"},
      {"momo:trim=mean,topp=0.9", "topp needs blend"},
      {"momo:min_share=0", "min_share"},
      {"momo:min_share=1", "min_share"},
      {"momo:min_share=-0.1", "min_share"},
      {"momo:blend=none,min_share=0.01", "min_share needs blend"},
      {"momo:topp=0.9,min_share=0.01", "not both"},
  };
  for (const auto& [spec, name] : cases) {
    try {
      make_method(spec);
      ADD_FAILURE() << spec << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << spec << ": " << e.what();
    }
  }
  EXPECT_NO_THROW(make_method("momo:gamma=16,chi=128,beta=128,k=64,k_exact=64,topk=tree"));
  EXPECT_NO_THROW(make_method("momo:lambda=1"));
  EXPECT_NO_THROW(make_method("momo:gamma=auto,chi=64"));
  EXPECT_NO_THROW(make_method("momo:gamma=8,chi=24"));
  EXPECT_NO_THROW(make_method("momo:lambda=0.01,order=in_order"));
  EXPECT_NO_THROW(make_method("momo:trim=mean"));  // blend defaults to none there
  EXPECT_NO_THROW(make_method("momo:topp=1"));
  EXPECT_NO_THROW(make_method("momo:topp=0.9,k_trim=4,blend=mean_pool"));
}

TEST(MomoParams, NonCausalIsAnError) {
  const Workload w = text(256, 2, 2, 32, DType::f32, 1);
  Tensor out(DType::f32, 2, 256, 32);
  AttnOptions opt;
  opt.causal = false;
  EXPECT_THROW(make_method("momo")->run(w.q, w.k, w.v, out, opt), Error);
}

// The command line: a bad parameter exits 2 naming it; a run and a mask figure work.
TEST(MomoCli, BadParameterExits2AndRunsWork) {
  namespace fs = std::filesystem;
  const test::TempDir dir("spattn_momo_cli");
  const std::string small = "bench --seq 512 --heads 2 --dim 64 --repeat 1 --workload text ";
  for (const char* p : {"gamma=0", "gamma=256", "beta=100", "k=0", "k_exact=200", "topk=x",
                        "sink=-1", "local=-1", "chi=100", "lambda=2"}) {
    const test::CliRun r = test::run_spattn(small + "--method momo:" + p, dir);
    ASSERT_TRUE(r.exited()) << r.err;
    EXPECT_EQ(r.code(), 2) << p << ": " << r.err;
    const std::string name = std::string(p).substr(0, std::string(p).find('='));
    EXPECT_NE(r.err.find(name), std::string::npos) << r.err;
  }
  const test::CliRun ok = test::run_spattn(small + "--method momo", dir);
  EXPECT_EQ(ok.code(), 0) << ok.err;
  EXPECT_NE(ok.out.find("momo"), std::string::npos) << ok.out;
  const test::CliRun mask = test::run_spattn(
      "mask --seq 1024 --heads 1 --dim 64 --workload text --method momo:gamma=16,chi=64,k=4 "
      "--out " +
          (dir / "m.png").string(),
      dir);
  EXPECT_EQ(mask.code(), 0) << mask.err;
  EXPECT_TRUE(fs::exists(dir / "m.png"));
  // select-diag: the selector tables, the recall comparison, and bad input exits 2.
  const std::string diag = "select-diag --seq 2048 --heads 2 --dim 64 --workload text ";
  const test::CliRun d =
      test::run_spattn(diag + "--k 4,8 --trace " + (dir / "t.tsv").string(), dir);
  EXPECT_EQ(d.code(), 0) << d.err;
  for (const char* col : {"exact", "hybrid", "estimate_shuffled", "trim_sum_p", "full_at"})
    EXPECT_NE(d.out.find(col), std::string::npos) << col << "\n" << d.out;
  EXPECT_TRUE(fs::exists(dir / "t.tsv"));
  const test::CliRun rc = test::run_spattn(diag + "--recall momo:k=4", dir);
  EXPECT_EQ(rc.code(), 0) << rc.err;
  EXPECT_NE(rc.out.find("oracle_topk:topk="), std::string::npos) << rc.out;
  for (const char* bad :
       {"--k 0", "--k-exact -1", "--chi 100", "--beta 32", "--row-step 0", "--recall momo:k=0"}) {
    const test::CliRun r = test::run_spattn(diag + bad, dir);
    EXPECT_EQ(r.code(), 2) << bad << ": " << r.err;
  }
}

}  // namespace
}  // namespace spattn
