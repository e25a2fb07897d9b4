// Estimating mask builders (vertical-slash, mean-pool, oracle top-k) against their definitions
// computed plainly in double, and the kernels on their output against the masked reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <set>

#include "masked_reference.hpp"
#include "row_mass_twin.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn {
namespace {

struct Inputs {
  Tensor q, k, v;
  Inputs(int64_t hq, int64_t hkv, int64_t lq, int64_t lk, uint64_t seed)
      : q(test::random_tensor(DType::f32, hq, lq, 32, seed)),
        k(test::random_tensor(DType::f32, hkv, lk, 32, seed + 1)),
        v(test::random_tensor(DType::f32, hkv, lk, 32, seed + 2)) {}
};

double dot(const TensorView& a, int64_t ha, int64_t ia, const TensorView& b, int64_t hb,
           int64_t ib) {
  double s = 0;
  for (int64_t c = 0; c < a.dim; ++c) s += double(a.get(ha, ia, c)) * double(b.get(hb, ib, c));
  return s;
}

// `kept` holds the `want` indices of the best scores: nothing dropped beats anything kept
// (up to float rounding of the fast estimate).
void expect_top(const std::vector<double>& score, const std::vector<int64_t>& kept, int64_t want,
                const std::string& what) {
  ASSERT_EQ(int64_t(kept.size()), want) << what;
  ASSERT_TRUE(std::is_sorted(kept.begin(), kept.end())) << what;
  std::set<int64_t> in(kept.begin(), kept.end());
  ASSERT_EQ(in.size(), kept.size()) << what << ": repeated index";
  double worst_kept = INFINITY, best_dropped = -INFINITY;
  for (size_t j = 0; j < score.size(); ++j)
    (in.count(int64_t(j)) ? worst_kept = std::min(worst_kept, score[j])
                          : best_dropped = std::max(best_dropped, score[j]));
  EXPECT_GE(worst_kept, best_dropped - 1e-5 * std::max(1.0, std::abs(best_dropped))) << what;
}

// ---- vertical-slash ---------------------------------------------------------------------

// The estimate's scores, plainly: A_hat over the last n rows, summed per column and diagonal,
// with the forced columns and diagonals at +inf.
void vs_scores(const Inputs& in, int64_t h, const VerticalSlashConfig& c,
               std::vector<double>& vertical, std::vector<double>& slash) {
  const int64_t lq = in.q.seq(), lk = in.k.seq(), n = std::min(c.last_q, lq);
  const int64_t kh = h / (in.q.heads() / in.k.heads());
  vertical.assign(size_t(lk), 0.0);
  slash.assign(size_t(lk), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = lq - n + r, p = lk - lq + i;
    std::vector<double> s(size_t(p + 1));
    double m = -INFINITY, l = 0;
    for (int64_t j = 0; j <= p; ++j)
      m = std::max(m, s[size_t(j)] = dot(in.q, h, i, in.k, kh, j) / std::sqrt(32.0));
    for (double x : s) l += std::exp(x - m);
    for (int64_t j = 0; j <= p; ++j) {
      vertical[size_t(j)] += std::exp(s[size_t(j)] - m) / l;
      slash[size_t(p - j)] += std::exp(s[size_t(j)] - m) / l;
    }
  }
  for (int64_t j = 0; j < std::min(c.sink, lk); ++j) vertical[size_t(j)] = INFINITY;
  for (int64_t o = 0; o < std::min(c.local, lk); ++o) slash[size_t(o)] = INFINITY;
}

// What attention_vertical_slash computes, written out: row i of tile t sees, for each offset o,
// keys [pos(r0) - o, pos(r1 - 1) - o] of its tile [r0, r1), and every column; causal.
test::EntryPredicate vs_predicate(const VerticalSlashIndex& x, int64_t lq, int64_t lk) {
  return [&x, lq, lk](int64_t h, int64_t i, int64_t j) {
    const int64_t r0 = i / x.tile_rows * x.tile_rows, r1 = std::min(r0 + x.tile_rows, lq);
    const int64_t off = lk - lq;
    for (int64_t c : x.columns[size_t(h)])
      if (c == j) return true;
    for (int64_t o : x.offsets[size_t(h)])
      if (j >= off + r0 - o && j <= off + r1 - 1 - o) return true;
    return false;
  };
}

struct VsCase {
  int64_t lq, lk, tile_rows;
  VerticalSlashConfig cfg;
};
std::vector<VsCase> vs_cases() {
  auto cfg = [](int64_t vertical, int64_t slash, int64_t last_q, int64_t sink, int64_t local,
                int64_t tile) {
    VerticalSlashConfig c;
    c.vertical_size = vertical;
    c.slash_size = slash;
    c.last_q = last_q;
    c.sink = sink;
    c.local = local;
    c.tile_rows = tile;
    return c;
  };
  return {
      {1, 1, 64, cfg(10, 10, 64, 4, 8, 64)},           {63, 63, 64, cfg(10, 12, 64, 4, 8, 64)},
      {65, 65, 64, cfg(10, 12, 64, 4, 8, 64)},         {200, 200, 64, cfg(20, 30, 64, 4, 8, 64)},
      {200, 200, 32, cfg(20, 30, 16, 4, 8, 32)},       {200, 200, 128, cfg(5, 3, 64, 10, 8, 128)},
      {65, 200, 64, cfg(20, 30, 64, 0, 1, 64)},        {1, 200, 64, cfg(0, 1, 64, 0, 1, 64)},
      {200, 333, 64, cfg(1000, 2048, 64, 30, 100, 64)}};
}
std::string label(const VsCase& c) {
  return std::to_string(c.lq) + "x" + std::to_string(c.lk) + " tile " +
         std::to_string(c.tile_rows) + " vertical " + std::to_string(c.cfg.vertical_size) +
         " slash " + std::to_string(c.cfg.slash_size);
}

TEST(MaskVerticalSlash, IndexKeepsTheBestLinesAndTheForcedOnes) {
  for (const VsCase& c : vs_cases()) {
    Inputs in(4, 2, c.lq, c.lk, 31);
    const VerticalSlashIndex x = vertical_slash_index(in.q, in.k, c.cfg, {});
    ASSERT_EQ(x.heads, 4);
    ASSERT_EQ(x.tile_rows, c.tile_rows);
    for (int64_t h = 0; h < 4; ++h) {
      std::vector<double> vertical, slash;
      vs_scores(in, h, c.cfg, vertical, slash);
      const int64_t n_cols =
          std::min(c.lk, std::max(c.cfg.vertical_size, std::min(c.cfg.sink, c.lk)));
      const int64_t n_diag =
          std::min(c.lk, std::max(c.cfg.slash_size, std::min(c.cfg.local, c.lk)));
      expect_top(vertical, x.columns[size_t(h)], n_cols,
                 label(c) + " columns, head " + std::to_string(h));
      expect_top(slash, x.offsets[size_t(h)], n_diag,
                 label(c) + " diagonals, head " + std::to_string(h));
      for (int64_t j = 0; j < std::min(c.cfg.sink, c.lk); ++j)
        EXPECT_TRUE(
            std::binary_search(x.columns[size_t(h)].begin(), x.columns[size_t(h)].end(), j));
      for (int64_t o = 0; o < std::min(c.cfg.local, c.lk); ++o)
        EXPECT_TRUE(
            std::binary_search(x.offsets[size_t(h)].begin(), x.offsets[size_t(h)].end(), o));
    }
  }
}

// A key every late query attends to, and a diagonal the late queries attend along, are found.
TEST(MaskVerticalSlash, FindsAPlantedColumnAndDiagonal) {
  Inputs in(1, 1, 256, 256, 41);
  TensorView q = in.q, k = in.k;
  // Diagonal: keys j = i - 77 copy the estimate rows i (the last 64): offset 77.
  for (int64_t i = 192; i < 256; ++i)
    for (int64_t c = 0; c < 32; ++c) k.set(0, i - 77, c, 1.5f * q.get(0, i, c));
  // Column: dim 0 is 4 in every estimate row and nonzero only in key 40.
  for (int64_t j = 0; j < 256; ++j) k.set(0, j, 0, j == 40 ? 8.0f : 0.0f);
  for (int64_t i = 192; i < 256; ++i) q.set(0, i, 0, 4.0f);
  VerticalSlashConfig cfg;
  cfg.vertical_size = 3;  // the forced sink column 0 and two more
  cfg.slash_size = 3;     // the forced main diagonal and two more
  cfg.sink = 1;
  cfg.local = 1;
  const VerticalSlashIndex x = vertical_slash_index(in.q, in.k, cfg, {});
  EXPECT_TRUE(std::binary_search(x.columns[0].begin(), x.columns[0].end(), int64_t(40)));
  EXPECT_TRUE(std::binary_search(x.offsets[0].begin(), x.offsets[0].end(), int64_t(77)));
  EXPECT_EQ(x.columns[0].front(), 0);
  EXPECT_EQ(x.offsets[0].front(), 0);
}

TEST(MaskVerticalSlash, KernelMatchesMaskedReference) {
  for (const VsCase& c : vs_cases()) {
    Inputs in(4, 2, c.lq, c.lk, 51);
    const VerticalSlashIndex x = vertical_slash_index(in.q, in.k, c.cfg, {});
    Tensor out(DType::f32, 4, c.lq, 32);
    std::vector<float> lse(size_t(4 * c.lq));
    Stats st;
    attention_vertical_slash(in.q, in.k, in.v, out, x, {}, lse.data(), &st);
    const test::MaskedRef ref =
        test::masked_reference(in.q, in.k, in.v, true, vs_predicate(x, c.lq, c.lk));
    test::expect_matches(out, lse, ref, label(c));
    EXPECT_EQ(st.score_entries, ref.entries) << label(c);
  }
}

TEST(MaskVerticalSlash, CoverageIsWhatTheKernelComputes) {
  for (const VsCase& c : vs_cases()) {
    Inputs in(2, 1, c.lq, c.lk, 61);
    const VerticalSlashIndex x = vertical_slash_index(in.q, in.k, c.cfg, {});
    const auto cov = vertical_slash_coverage(x, c.lq, c.lk);
    const auto keep = vs_predicate(x, c.lq, c.lk);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < c.lq; ++i) {
        std::vector<KeyRange> r;
        cov->row_ranges(h, i, r);
        std::vector<uint8_t> got(size_t(c.lk), 0), want(size_t(c.lk), 0);
        for (size_t t = 0; t < r.size(); ++t) {
          ASSERT_LT(r[t].begin, r[t].end);
          if (t) {
            ASSERT_GT(r[t].begin, r[t - 1].end) << "ranges must be disjoint and coalesced";
          }
          for (int64_t j = r[t].begin; j < r[t].end; ++j) got[size_t(j)] = 1;
        }
        for (int64_t j = 0; j <= c.lk - c.lq + i; ++j) want[size_t(j)] = keep(h, i, j);
        ASSERT_EQ(got, want) << label(c) << " head " << h << " row " << i;
      }
  }
}

// The estimate runs heads in parallel batches (one per thread): the index is the same for any
// thread count, GQA groups and head counts that do not divide into batches included.
TEST(MaskVerticalSlash, IndexDoesNotDependOnThreads) {
  for (const VsCase& c : vs_cases()) {
    Inputs in(5, 1, c.lq, c.lk, 83);
    AttnOptions one, many;
    one.threads = 1;
    many.threads = 3;
    const VerticalSlashIndex a = vertical_slash_index(in.q, in.k, c.cfg, one);
    const VerticalSlashIndex b = vertical_slash_index(in.q, in.k, c.cfg, many);
    EXPECT_EQ(a.columns, b.columns) << label(c);
    EXPECT_EQ(a.offsets, b.offsets) << label(c);
  }
}

// The block version holds every computed entry, and every block it holds has one.
TEST(MaskVerticalSlash, BlockMaskIsTheIndexRoundedOut) {
  for (const VsCase& c : vs_cases())
    for (int64_t bk : {64, 32, 128}) {
      Inputs in(2, 2, c.lq, c.lk, 71);
      const VerticalSlashIndex x = vertical_slash_index(in.q, in.k, c.cfg, {});
      const BlockMask m = vertical_slash_block_mask(x, c.lq, c.lk, bk);
      m.validate();
      ASSERT_EQ(m.block_q, c.tile_rows);
      const auto keep = vs_predicate(x, c.lq, c.lk);
      std::vector<uint8_t> want(size_t(2 * m.n_qb() * m.n_kb()), 0);
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < c.lq; ++i)
          for (int64_t j = 0; j <= c.lk - c.lq + i; ++j)
            if (keep(h, i, j)) want[size_t((h * m.n_qb() + i / m.block_q) * m.n_kb() + j / bk)] = 1;
      EXPECT_EQ(m.to_dense(), want) << label(c) << " block_k " << bk;
      // Heads run in parallel: one thread gives the same mask.
      EXPECT_EQ(vertical_slash_block_mask(x, c.lq, c.lk, bk, 1).to_dense(), want) << label(c);
    }
}

// With a row list (one modality's queries), tile t holds listed rows t * tile_rows.., which may
// lie in several query blocks: each block gets the blocks of the keys its own rows compute
// (the list's tiles once marked whole tiles' blocks in every query block they touched, past
// some rows' positions: an invalid causal mask).
TEST(MaskVerticalSlash, BlockMaskOfListedRows) {
  const int64_t lq = 300, lk = 300;
  Inputs in(3, 1, lq, lk, 73);
  VerticalSlashConfig cfg;
  cfg.vertical_size = 9;
  cfg.slash_size = 7;
  cfg.tile_rows = 32;
  VerticalSlashIndex x = vertical_slash_index(in.q, in.k, cfg, {});
  std::vector<int64_t> rows;
  for (int64_t r = 3; r < lq; r += 3 + r % 5) rows.push_back(r);
  x.rows = rows;
  for (int threads : {1, 3}) {
    const BlockMask m = vertical_slash_block_mask(x, lq, lk, 64, threads);
    m.validate();
    std::vector<uint8_t> want(size_t(3 * m.n_qb() * m.n_kb()), 0);
    for (int64_t h = 0; h < 3; ++h)
      for (size_t i = 0; i < rows.size(); ++i) {
        std::vector<KeyRange> ranges;
        std::vector<int64_t> cols;
        vertical_slash_tile_keys(x, h, int64_t(i) / x.tile_rows, lq, lk, ranges, cols);
        const int64_t qb = rows[i] / x.tile_rows, pos = rows[i];  // q_len == kv_len
        for (const KeyRange& r : ranges)
          for (int64_t j = r.begin; j < r.end && j <= pos; ++j)
            want[size_t((h * m.n_qb() + qb) * m.n_kb() + j / 64)] = 1;
        for (int64_t j : cols)
          if (j <= pos) want[size_t((h * m.n_qb() + qb) * m.n_kb() + j / 64)] = 1;
      }
    EXPECT_EQ(m.to_dense(), want) << threads << " threads";
  }
  EXPECT_THROW(vertical_slash_block_mask(x, lq, lk, 64, -1), Error);  // a negative thread count
}

TEST(MaskVerticalSlash, RejectsBadConfig) {
  Inputs in(1, 1, 64, 64, 1);
  auto with = [](auto set) {
    VerticalSlashConfig c;
    set(c);
    return c;
  };
  EXPECT_THROW(check_vertical_slash_config(with([](auto& c) { c.slash_size = 0; })), Error);
  EXPECT_THROW(check_vertical_slash_config(with([](auto& c) { c.vertical_size = -1; })), Error);
  EXPECT_THROW(check_vertical_slash_config(with([](auto& c) { c.sink = -1; })), Error);
  EXPECT_THROW(check_vertical_slash_config(with([](auto& c) { c.local = 0; })), Error);
  EXPECT_THROW(check_vertical_slash_config(with([](auto& c) { c.last_q = 0; })), Error);
  EXPECT_THROW(check_vertical_slash_config(with([](auto& c) { c.tile_rows = 129; })), Error);
  EXPECT_THROW(vertical_slash_index(in.q, in.k, with([](auto& c) { c.slash_size = 0; }), {}),
               Error);
  AttnOptions full;
  full.causal = false;
  EXPECT_THROW(vertical_slash_index(in.q, in.k, VerticalSlashConfig{}, full), Error);
}

// ---- mean-pool --------------------------------------------------------------------------

TEST(MaskMeanPool, KeepsForcedBlocksAndTheBestPooledScores) {
  struct Case {
    int64_t lq, lk, bq, bk, topk, sink, local;
    bool causal;
  };
  const Case cases[] = {{1, 1, 64, 64, 2, 0, 1, true},       {63, 63, 64, 64, 1, 64, 64, true},
                        {65, 65, 64, 64, 1, 0, 1, true},     {200, 200, 64, 64, 1, 64, 64, true},
                        {200, 200, 32, 32, 2, 10, 20, true}, {200, 333, 128, 64, 2, 0, 1, true},
                        {65, 200, 64, 128, 1, 1, 1, true},   {200, 200, 32, 64, 2, 0, 1, false},
                        {200, 100, 32, 32, 0, 40, 1, false}};
  for (const Case& c : cases) {
    const std::string what = std::to_string(c.lq) + "x" + std::to_string(c.lk) + " blocks " +
                             std::to_string(c.bq) + "x" + std::to_string(c.bk) + " topk " +
                             std::to_string(c.topk) + (c.causal ? "" : " non-causal");
    Inputs in(4, 2, c.lq, c.lk, 81);
    AttnOptions opt;
    opt.causal = c.causal;
    const BlockMask m = mean_pool_mask(in.q, in.k, c.bq, c.bk, c.topk, c.sink, c.local, opt);
    m.validate();
    ASSERT_EQ(m.causal, c.causal);
    const TensorView q = in.q, k = in.k;
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
        const int64_t r0 = qb * c.bq, r1 = std::min(r0 + c.bq, c.lq), off = c.lk - c.lq;
        const int64_t p0 = off + r0, p1 = off + r1 - 1, limit = m.causal_blocks(qb);
        // Forced: blocks holding a sink key or a key of some row's local window (visible).
        std::set<int64_t> forced;
        for (int64_t p = p0; p <= p1; ++p)
          for (int64_t j = 0; j < (c.causal ? p + 1 : c.lk); ++j)
            if (j < c.sink || (j > p - c.local && j <= p)) forced.insert(j / c.bk);
        std::vector<double> score;  // pooled scores of the other candidate blocks
        std::vector<int64_t> index;
        for (int64_t kb = 0; kb < limit; ++kb) {
          if (forced.count(kb)) continue;
          const int64_t k0 = kb * c.bk, k1 = std::min(k0 + c.bk, c.lk);
          double s = 0;
          for (int64_t d = 0; d < 32; ++d) {
            double qm = 0, km = 0;
            for (int64_t i = r0; i < r1; ++i) qm += q.get(h, i, d) / double(r1 - r0);
            for (int64_t j = k0; j < k1; ++j) km += k.get(h / 2, j, d) / double(k1 - k0);
            s += qm * km;
          }
          score.push_back(s / std::sqrt(32.0));
          index.push_back(kb);
        }
        std::vector<int64_t> picked;  // positions in `index` of the kept non-forced blocks
        auto row = m.row(h, qb);
        for (int64_t kb : forced)
          EXPECT_TRUE(std::find(row.begin(), row.end(), kb) != row.end())
              << what << " forced " << kb;
        for (int32_t kb : row)
          if (!forced.count(kb))
            picked.push_back(std::find(index.begin(), index.end(), kb) - index.begin());
        expect_top(score, picked, std::min<int64_t>(c.topk, int64_t(index.size())),
                   what + " head " + std::to_string(h) + " query block " + std::to_string(qb));
      }
  }
}

TEST(MaskMeanPool, KernelMatchesMaskedReference) {
  for (bool causal : {true, false})
    for (int64_t lq : {1, 63, 65, 200}) {
      Inputs in(4, 2, lq, 200, 91);
      AttnOptions opt;
      opt.causal = causal;
      const BlockMask m = mean_pool_mask(in.q, in.k, 32, 64, 1, 0, 1, opt);
      Tensor out(DType::f32, 4, lq, 32);
      std::vector<float> lse(size_t(4 * lq));
      attention_block_sparse(in.q, in.k, in.v, out, m, opt, lse.data());
      test::expect_matches(
          out, lse, test::masked_reference(in.q, in.k, in.v, causal, test::mask_predicate(m)),
          "mean_pool lq " + std::to_string(lq) + (causal ? "" : " non-causal"));
    }
}

TEST(MaskMeanPool, RejectsBadParameters) {
  Inputs in(1, 1, 64, 64, 1);
  EXPECT_THROW(mean_pool_mask(in.q, in.k, 64, 64, -1, 0, 1, {}), Error);
  EXPECT_THROW(mean_pool_mask(in.q, in.k, 64, 64, 1, -1, 1, {}), Error);
  EXPECT_THROW(mean_pool_mask(in.q, in.k, 64, 64, 1, 0, 0, {}), Error);
  EXPECT_THROW(mean_pool_mask(in.q, in.k, 0, 64, 1, 0, 1, {}), Error);
}

// pool_row_moments (momo's blend=moments) against a plain two-pass mean and variance per block,
// f32 and bf16 (the generic path), a partial last block, and a block of equal rows (variance 0,
// not a rounding below it).
TEST(MaskMeanPool, RowMomentsAreThePlainMeanAndVariance) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor t = test::random_tensor(dt, 2, 100, 32, 91);
    for (int64_t block : {1, 7, 64, 128}) {
      const std::vector<float> got = pool_row_moments(t.view(), 1, block);
      const int64_t nb = (100 + block - 1) / block, d = 32;
      ASSERT_EQ(int64_t(got.size()), nb * 2 * d);
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t s0 = b * block, s1 = std::min<int64_t>(100, s0 + block);
        for (int64_t c = 0; c < d; ++c) {
          double m = 0, v = 0;
          for (int64_t s = s0; s < s1; ++s) m += double(t.view().get(1, s, c));
          m /= double(s1 - s0);
          for (int64_t s = s0; s < s1; ++s) {
            const double x = double(t.view().get(1, s, c)) - m;
            v += x * x;
          }
          v /= double(s1 - s0);
          EXPECT_NEAR(got[size_t(b * 2 * d + c)], m, 1e-5) << block << " " << b << " " << c;
          EXPECT_NEAR(got[size_t(b * 2 * d + d + c)], v, 1e-5) << block << " " << b << " " << c;
        }
      }
    }
  }
  Tensor same(DType::f32, 1, 5, 4);
  for (int64_t s = 0; s < 5; ++s)
    for (int64_t c = 0; c < 4; ++c) same.view().set(0, s, c, 0.1f * float(c + 1));
  for (float x : std::vector<float>(pool_row_moments(same.view(), 0, 5))) EXPECT_GE(x, 0.0f);
  EXPECT_EQ(pool_row_moments(same.view(), 0, 5)[4], 0.0f);
  EXPECT_THROW(pool_row_moments(same.view(), 0, 0), Error);
}

// ---- oracle top-k -----------------------------------------------------------------------

// Each row's exact softmax mass per key block, plainly: [lq][n_kb].
std::vector<std::vector<double>> direct_row_mass(const Inputs& in, int64_t h, const BlockMask& m) {
  const int64_t lq = in.q.seq(), lk = in.k.seq(), kh = h / (in.q.heads() / in.k.heads());
  std::vector<std::vector<double>> rows(size_t(lq), std::vector<double>(size_t(m.n_kb()), 0.0));
  for (int64_t i = 0; i < lq; ++i) {
    const int64_t vis = m.causal ? lk - lq + i + 1 : lk;
    std::vector<double> s(static_cast<size_t>(vis));
    double mx = -INFINITY, l = 0;
    for (int64_t j = 0; j < vis; ++j)
      mx = std::max(mx, s[size_t(j)] = dot(in.q, h, i, in.k, kh, j) / std::sqrt(32.0));
    for (double x : s) l += std::exp(x - mx);
    for (int64_t j = 0; j < vis; ++j)
      rows[size_t(i)][size_t(j / m.block_k)] += std::exp(s[size_t(j)] - mx) / l;
  }
  return rows;
}

// Mass of (query block, key block) averaged over the block's rows, in double.
std::vector<double> direct_mass(const Inputs& in, int64_t h, const BlockMask& m) {
  const int64_t lq = in.q.seq();
  const auto rows = direct_row_mass(in, h, m);
  std::vector<double> mass(size_t(m.n_qb() * m.n_kb()), 0.0);
  for (int64_t i = 0; i < lq; ++i) {
    const int64_t qb = i / m.block_q, n = std::min((qb + 1) * m.block_q, lq) - qb * m.block_q;
    for (int64_t kb = 0; kb < m.n_kb(); ++kb)
      mass[size_t(qb * m.n_kb() + kb)] += rows[size_t(i)][size_t(kb)] / double(n);
  }
  return mass;
}

TEST(MaskOracle, KeepsTheHeaviestBlocks) {
  for (bool causal : {true, false})
    for (auto [lq, lk, bq, bk] : {std::array<int64_t, 4>{1, 1, 64, 64},
                                  {63, 63, 64, 64},
                                  {65, 200, 32, 64},
                                  {200, 200, 64, 128},
                                  {200, 333, 128, 64}}) {
      Inputs in(2, 1, lq, lk, 101);
      AttnOptions opt;
      opt.causal = causal;
      const BlockMask m = oracle_topk_mask(in.q, in.k, in.v, bq, bk, 2, opt);
      m.validate();
      for (int64_t h = 0; h < 2; ++h) {
        const std::vector<double> mass = direct_mass(in, h, m);
        for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
          const int64_t limit = m.causal_blocks(qb);
          std::vector<double> row(mass.begin() + qb * m.n_kb(),
                                  mass.begin() + qb * m.n_kb() + limit);
          auto r = m.row(h, qb);
          expect_top(row, std::vector<int64_t>(r.begin(), r.end()), std::min<int64_t>(2, limit),
                     "oracle " + std::to_string(lq) + "x" + std::to_string(lk) + " head " +
                         std::to_string(h) + " query block " + std::to_string(qb));
        }
      }
    }
}

// local=W keeps the blocks of each row's W most recent keys, and beside them the topk heaviest
// of the others.
TEST(MaskOracle, KeepsEachRowsRecentKeysBesideTheCount) {
  for (auto [lq, lk, bq, bk, local] : {std::array<int64_t, 5>{200, 200, 64, 64, 64},
                                       {65, 300, 32, 64, 100},
                                       {200, 333, 128, 64, 1}}) {
    Inputs in(2, 1, lq, lk, 103);
    AttnOptions opt;
    const BlockMask m = oracle_topk_mask(in.q, in.k, in.v, bq, bk, 2, opt, local);
    m.validate();
    for (int64_t h = 0; h < 2; ++h) {
      const std::vector<double> mass = direct_mass(in, h, m);
      for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
        const int64_t limit = m.causal_blocks(qb), p0 = lk - lq + qb * bq;
        const int64_t first_forced = std::max<int64_t>(p0 - local + 1, 0) / bk;
        auto r = m.row(h, qb);
        const std::set<int64_t> have(r.begin(), r.end());
        std::vector<double> others;  // the masses of the blocks not forced, in index order
        std::vector<int64_t> kept_others;
        for (int64_t kb = 0; kb < limit; ++kb) {
          if (kb >= first_forced) {
            EXPECT_TRUE(have.count(kb)) << "local block " << kb << " of query block " << qb;
            continue;
          }
          if (have.count(kb)) kept_others.push_back(int64_t(others.size()));
          others.push_back(mass[size_t(qb * m.n_kb() + kb)]);
        }
        expect_top(others, kept_others, std::min<int64_t>(2, int64_t(others.size())),
                   "oracle local " + std::to_string(local) + " " + std::to_string(lq) + "x" +
                       std::to_string(lk) + " head " + std::to_string(h) + " query block " +
                       std::to_string(qb));
      }
    }
  }
}

// topp per row on the exact masses: each query block keeps what the plain rule keeps from each
// row's exact masses (its local blocks first), every row reaching P where a choice differs.
TEST(MaskOracle, PerRowKeepsEveryRowsShare) {
  int64_t blocks = 0, exact = 0;
  for (bool causal : {true, false})
    for (auto [lq, lk, bq, bk, local] : {std::array<int64_t, 5>{200, 200, 64, 64, 0},
                                         {65, 300, 32, 64, 100},
                                         {200, 333, 128, 64, 64}})
      for (double p : {0.5, 0.9, 0.99}) {
        Inputs in(2, 1, lq, lk, 107);
        AttnOptions opt;
        opt.causal = causal;
        const BlockMask m = oracle_mass_mask(in.q, in.k, in.v, bq, bk, p, 0, opt, local, true);
        m.validate();
        for (int64_t h = 0; h < 2; ++h) {
          const auto rows = direct_row_mass(in, h, m);
          for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
            const int64_t limit = m.causal_blocks(qb), p0 = lk - lq + qb * bq;
            const int64_t p1 = lk - lq + std::min((qb + 1) * bq, lq) - 1;
            std::set<int64_t> forced;
            for (int64_t pos = std::max<int64_t>(p0 - local + 1, 0); local > 0 && pos <= p1; ++pos)
              if (pos < limit * bk) forced.insert(pos / bk);
            std::vector<std::vector<double>> mine;
            for (int64_t i = qb * bq; i < std::min((qb + 1) * bq, lq); ++i)
              mine.emplace_back(rows[size_t(i)].begin(), rows[size_t(i)].begin() + limit);
            auto r = m.row(h, qb);
            const std::set<int64_t> have(r.begin(), r.end());
            ++blocks;
            if (have == test::row_mass_twin(mine, limit, forced, p)) {
              ++exact;
              continue;
            }
            EXPECT_TRUE(test::every_row_reaches(mine, limit, have, p, 1e-4))
                << lq << "x" << lk << " p " << p << " head " << h << " query block " << qb;
          }
        }
      }
  EXPECT_GE(double(exact), 0.95 * double(blocks)) << exact << " of " << blocks;
}

TEST(MaskOracle, RejectsBadParameters) {
  Inputs in(1, 1, 64, 64, 1);
  EXPECT_THROW(oracle_topk_mask(in.q, in.k, in.v, 64, 64, 0, {}), Error);
  EXPECT_THROW(oracle_topk_mask(in.q, in.k, in.v, 64, 32, 1, {}), Error);  // block_mass: 64s
  EXPECT_THROW(oracle_topk_mask(in.q, in.k, in.v, 64, 64, 1, {}, -1), Error);
}

}  // namespace
}  // namespace spattn
