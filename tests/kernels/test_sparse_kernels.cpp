// Query-sparse and vertical-slash kernels against the exact reference restricted to what they
// select.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "spattn/blasst.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/sparse_attention.hpp"
#include "spattn/workload.hpp"
#include "targets.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

void expect_close(const TensorView& out, int64_t h, int64_t row, const std::vector<double>& want,
                  double tol = 1e-4) {
  for (int64_t c = 0; c < out.dim; ++c)
    ASSERT_NEAR(out.get(h, row, c), want[size_t(c)], tol) << "head " << h << " row " << row;
}

TEST(QuerySparse, StridedRowsMatchReference) {
  for (DType t : {DType::f32, DType::bf16}) {
    const int64_t hq = 4, hk = 2, lq = 333, lk = 400, d = 64;
    Tensor q = test::random_tensor(t, hq, lq, d, 1), k = test::random_tensor(t, hk, lk, d, 2),
           v = test::random_tensor(t, hk, lk, d, 3);
    const std::vector<int64_t> rows = strided_rows(lq, 16);
    EXPECT_EQ(rows.front(), 15);
    EXPECT_EQ(rows.back(), lq - 1);
    Tensor out(DType::f32, hq, int64_t(rows.size()), d), ref(DType::f32, hq, lq, d);
    std::vector<float> lse(size_t(hq) * rows.size()), lse_ref(size_t(hq * lq));
    Stats st;
    attention_query_sparse(q, k, v, rows, out, {}, lse.data(), nullptr, &st);
    attention_reference(q, k, v, ref, {}, lse_ref.data());
    int64_t entries = 0;
    for (int64_t h = 0; h < hq; ++h)
      for (size_t r = 0; r < rows.size(); ++r) {
        std::vector<double> want(static_cast<size_t>(d));
        for (int64_t c = 0; c < d; ++c) want[size_t(c)] = ref.view().get(h, rows[r], c);
        expect_close(out, h, int64_t(r), want, t == DType::bf16 ? 2e-2 : 1e-5);
        EXPECT_NEAR(lse[size_t(h) * rows.size() + r], lse_ref[size_t(h * lq + rows[r])], 1e-3);
        entries += rows[r] + (lk - lq) + 1;
      }
    EXPECT_EQ(st.score_entries, entries);
  }
}

TEST(QuerySparse, ObserverSeesCompactRowsAndEveryCausalBlock) {
  const int64_t lq = 300, d = 64;
  Tensor q = test::random_tensor(DType::f32, 2, lq, d, 4),
         k = test::random_tensor(DType::f32, 1, lq, d, 5),
         v = test::random_tensor(DType::f32, 1, lq, d, 6);
  const std::vector<int64_t> rows = {0, 5, 64, 150, 299};
  struct Rec : BlockLseObserver {
    std::vector<std::vector<double>> mass;  // per (h, compact row): sum exp(block lse)
    void observe(int64_t h, int64_t r0, int64_t n, int64_t, const float* lse) override {
      for (int64_t r = 0; r < n; ++r)
        mass[size_t(h * 5 + r0 + r)].push_back(std::exp(double(lse[r])));
    }
  } rec;
  rec.mass.resize(10);
  Tensor out(DType::f32, 2, 5, d);
  std::vector<float> lse(10);
  attention_query_sparse(q, k, v, rows, out, {}, lse.data(), &rec);
  for (int64_t h = 0; h < 2; ++h)
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto& m = rec.mass[size_t(h * 5) + r];
      ASSERT_GE(m.size(), size_t(rows[r] / 64 + 1));
      double total = 0;
      for (double x : m) total += x;
      EXPECT_NEAR(std::log(total), lse[size_t(h * 5) + r], 1e-4);  // blocks add up to the row
    }
}

TEST(QuerySparse, BadInputRaisesError) {
  Tensor q = test::random_tensor(DType::f32, 1, 10, 8, 1);
  Tensor out(DType::f32, 1, 2, 8);
  EXPECT_THROW(attention_query_sparse(q, q, q, {3, 3}, out), Error);   // not increasing
  EXPECT_THROW(attention_query_sparse(q, q, q, {3, 10}, out), Error);  // out of range
  EXPECT_THROW(attention_query_sparse(q, q, q, {}, out), Error);
  EXPECT_THROW(attention_query_sparse(q, q, q, {1, 2, 3}, out), Error);  // out rows mismatch
  EXPECT_THROW(strided_rows(10, 0), Error);
}

// The keys row i (the `index`-th row the index computes, tile index / tile_rows) sees, by the
// kernel's own definition (vertical_slash_tile_keys), up to its position.
std::vector<int64_t> vs_row_keys(const VerticalSlashIndex& idx, int64_t h, int64_t index,
                                 int64_t pos, int64_t lq, int64_t lk) {
  std::vector<KeyRange> ranges;
  std::vector<int64_t> cols, keys;
  vertical_slash_tile_keys(idx, h, index / idx.tile_rows, lq, lk, ranges, cols);
  for (const KeyRange& r : ranges)
    for (int64_t j = r.begin; j < r.end && j <= pos; ++j) keys.push_back(j);
  for (int64_t c : cols)
    if (c <= pos) keys.push_back(c);
  return keys;
}

// Head h of `out` against the exact reference over each row's keys (vs_row_keys), and, when
// given, the coverage's keys against them; stops at the first row that fails. Returns the
// head's entries.
int64_t expect_vs_head(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                       const VerticalSlashIndex& idx, int64_t h, int64_t lq, int64_t lk, double tol,
                       const Coverage* cov) {
  int64_t entries = 0;
  for (int64_t i = 0; i < lq; ++i) {
    std::vector<int64_t> keys = vs_row_keys(idx, h, i, lk - lq + i, lq, lk);
    entries += int64_t(keys.size());
    std::sort(keys.begin(), keys.end());
    if (cov) {
      EXPECT_EQ(test::coverage_keys(*cov, h, i), keys);
    }
    expect_close(out, h, i, test::row_over_keys(q, k, v, h, i, keys), tol);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "head " << h << " row " << i;
      break;
    }
  }
  return entries;
}
// Columns packed once per head: more than one packed column tile (up to 130 columns), columns
// inside slash ranges (computed once, by the column tile), GQA, odd lengths, f32 and bf16.
TEST(VerticalSlash, MatchesReferenceOverTheSameKeys) {
  for (DType t : {DType::f32, DType::bf16})
    for (int64_t lq : {1, 65, 250}) {
      const int64_t hq = 4, hk = 2, lk = 301, d = 64;
      Tensor q = test::random_tensor(t, hq, lq, d, 7), k = test::random_tensor(t, hk, lk, d, 8),
             v = test::random_tensor(t, hk, lk, d, 9);
      VerticalSlashIndex idx;
      idx.heads = hq;
      idx.tile_rows = 64;
      for (int64_t h = 0; h < hq; ++h) {
        std::vector<int64_t> cols = {0, 1, 2, 3, 17 + h, 100, 101, 230, 300};
        for (int64_t c = 5 + h; c < 300; c += 2 + h) cols.push_back(c);  // 58..148 columns
        std::sort(cols.begin(), cols.end());
        cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
        idx.columns.push_back(cols);
        idx.offsets.push_back({0, 1, 2, 40 + 9 * h, 128});
      }
      Tensor out(DType::f32, hq, lq, d);
      Stats st;
      attention_vertical_slash(q, k, v, out, idx, {}, nullptr, &st);
      const std::unique_ptr<Coverage> cov = vertical_slash_coverage(idx, lq, lk);
      int64_t entries = 0;
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t i = 0; i < lq; ++i) {
          const int64_t pos = lk - lq + i;
          std::vector<int64_t> keys = vs_row_keys(idx, h, i, pos, lq, lk);
          entries += int64_t(keys.size());
          ASSERT_TRUE(std::find(keys.begin(), keys.end(), pos) != keys.end());  // slash 0
          std::sort(keys.begin(), keys.end());
          ASSERT_EQ(test::coverage_keys(*cov, h, i), keys) << "head " << h << " row " << i;
          expect_close(out, h, i, test::row_over_keys(q, k, v, h, i, keys),
                       t == DType::bf16 ? 2e-2 : 1e-4);
        }
      EXPECT_EQ(st.score_entries, entries) << dtype_name(t) << " lq " << lq;
    }
}

// Off-grid slash ranges are packed piece by piece into gathered tiles. Offset pairs (64, 96)
// and (256, 288) on 64-row tiles that start on the grid: each pair is one 96-key range, a
// 32-key piece and a whole tile, so an item computes its range keys over 64 tiles (plus one
// column tile): 3 tiles, not 2 per range. Then an odd layout (q_len < kv_len, 48-row tiles,
// columns inside the ranges, pieces past some rows' positions, pieces split across gathered
// tiles): the same keys as the reference, f32 and bf16, GQA.
TEST(VerticalSlash, PacksRangePiecesIntoGatheredTiles) {
  for (DType t : {DType::f32, DType::bf16})
    for (const bool aligned : {true, false}) {
      const int64_t hq = 2, hk = 1, d = 64;
      const int64_t lk = aligned ? 640 : 677, lq = aligned ? 640 : 600;
      Tensor q = test::random_tensor(t, hq, lq, d, 27), k = test::random_tensor(t, hk, lk, d, 28),
             v = test::random_tensor(t, hk, lk, d, 29);
      VerticalSlashIndex idx;
      idx.heads = hq;
      idx.tile_rows = aligned ? 64 : 48;
      for (int64_t h = 0; h < hq; ++h) {
        if (aligned) {
          idx.columns.push_back({0});
          idx.offsets.push_back({64, 96, 256, 288});
        } else {
          idx.columns.push_back({0, 5, 70 + h, 71, 300, 301, 302, 640});
          idx.offsets.push_back({0, 1, 9 + h, 30, 77, 100, 101, 163, 250, 251, 252, 400});
        }
      }
      Tensor out(DType::f32, hq, lq, d);
      Stats st;
      attention_vertical_slash(q, k, v, out, idx, {}, nullptr, &st);
      const std::unique_ptr<Coverage> cov = vertical_slash_coverage(idx, lq, lk);
      int64_t entries = 0, want_tiles = 0;
      for (int64_t h = 0; h < hq; ++h) {
        entries +=
            expect_vs_head(out, q, k, v, idx, h, lq, lk, t == DType::bf16 ? 2e-2 : 1e-4, cov.get());
        for (int64_t tile = 0; tile < idx.num_tiles(lq); ++tile) {
          std::vector<KeyRange> ranges;
          std::vector<int64_t> cols;
          vertical_slash_tile_keys(idx, h, tile, lq, lk, ranges, cols);
          int64_t range_keys = 0;
          for (const KeyRange& r : ranges) range_keys += r.end - r.begin;
          want_tiles += (range_keys + kKeyBlock - 1) / kKeyBlock + 1;  // + the column tile
        }
      }
      EXPECT_EQ(st.score_entries, entries) << dtype_name(t) << " aligned " << aligned;
      if (aligned) {
        EXPECT_EQ(st.tiles_visited, want_tiles) << dtype_name(t);
      }
    }
}

// Ranges of 64 keys or more are computed as tiles that start on the range's first key, off the
// 64-key grid (shifted tiles, reading the two packed tiles they straddle), the last 48 or fewer
// keys as pieces in gathered tiles, and more than 48 as a tile with its tail masked. Random
// offsets on 64- to 128-row tiles put range starts at every residue mod 64 (odd ones too,
// where bf16 starts a tile one key early), merged ranges several tiles wide, tails of every
// length, ranges reaching the storage's last tile (lk 444: a shifted tile there would read past
// it), large logits; f32 and bf16, GQA, q_len < kv_len. The same keys as the reference, and
// (f32) never more tiles than each range's keys over 64 plus the column tiles.
TEST(VerticalSlash, ShiftedTilesMatchReferenceAtEveryOffset) {
  int target = 0;  // every SIMD target (its own shifted-tile code), bf16 dot path on and off
  test::for_each_target([&] {
    ++target;
    for (DType t : {DType::f32, DType::bf16})
      for (int trial = 0; trial < 8; ++trial) {
        const int64_t hq = 2, hk = 1, d = 64, lk = trial % 2 ? 444 : 421;
        const int64_t lq = trial % 4 < 2 ? lk : 300, tile = 64 + 32 * (trial % 3);
        const float sigma = trial == 5 ? 6.0f : 1.0f;  // logits up to ~ +-300 at trial 5
        const uint64_t seed = 100 + uint64_t(trial);
        Tensor q = test::random_tensor(t, hq, lq, d, seed, sigma),
               k = test::random_tensor(t, hk, lk, d, seed + 1, sigma),
               v = test::random_tensor(t, hk, lk, d, seed + 2);
        std::mt19937_64 rng(seed);
        VerticalSlashIndex idx;
        idx.heads = hq;
        idx.tile_rows = tile;
        for (int64_t h = 0; h < hq; ++h) {
          std::vector<int64_t> offs = {0}, cols = {0, int64_t(rng() % uint64_t(lk))};
          for (int i = 0; i < 12; ++i) offs.push_back(int64_t(rng() % uint64_t(lk)));
          std::sort(offs.begin(), offs.end());
          offs.erase(std::unique(offs.begin(), offs.end()), offs.end());
          std::sort(cols.begin(), cols.end());
          cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
          idx.offsets.push_back(offs);
          idx.columns.push_back(cols);
        }
        Tensor out(DType::f32, hq, lq, d);
        Stats st;
        attention_vertical_slash(q, k, v, out, idx, {}, nullptr, &st);
        const std::string what = std::string(dtype_name(t)) + " trial " + std::to_string(trial) +
                                 " target run " + std::to_string(target);
        int64_t entries = 0, max_tiles = 0;
        for (int64_t h = 0; h < hq; ++h) {
          entries +=
              expect_vs_head(out, q, k, v, idx, h, lq, lk, t == DType::bf16 ? 2e-2 : 1e-4, nullptr);
          if (::testing::Test::HasFailure()) {
            ADD_FAILURE() << what;
            return;
          }
          for (int64_t tt = 0; tt < idx.num_tiles(lq); ++tt) {
            std::vector<KeyRange> ranges;
            std::vector<int64_t> cols;
            vertical_slash_tile_keys(idx, h, tt, lq, lk, ranges, cols);
            for (const KeyRange& r : ranges)
              max_tiles += (r.end - r.begin + kKeyBlock - 1) / kKeyBlock;
            const int64_t last = lk - lq + std::min(lq, (tt + 1) * tile) - 1;
            const auto& hc = idx.columns[size_t(h)];
            const int64_t seen = std::upper_bound(hc.begin(), hc.end(), last) - hc.begin();
            max_tiles += (seen + kKeyBlock - 1) / kKeyBlock;
          }
        }
        EXPECT_EQ(st.score_entries, entries) << what;
        if (t == DType::f32) {
          EXPECT_LE(st.tiles_visited, max_tiles) << what;
        }
      }
  });
}

// A row subset (one modality's queries): listed rows in tiles of their own, the rest untouched.
TEST(VerticalSlash, RowSubsetComputesOnlyItsRows) {
  for (DType t : {DType::f32, DType::bf16}) {
    const int64_t hq = 2, hk = 1, lq = 200, lk = 230, d = 32;
    Tensor q = test::random_tensor(t, hq, lq, d, 17), k = test::random_tensor(t, hk, lk, d, 18),
           v = test::random_tensor(t, hk, lk, d, 19);
    VerticalSlashIndex idx;
    idx.heads = hq;
    idx.tile_rows = 16;
    idx.columns = {{0, 3, 50, 51, 52, 120}, {7, 90}};
    idx.offsets = {{0, 1, 5}, {0, 33}};
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < lq; ++r)
      if ((r / 23) % 2 == 1 || r == lq - 1) rows.push_back(r);  // segments of 23 rows
    idx.rows = rows;
    Tensor out(DType::f32, hq, lq, d);
    for (int64_t i = 0; i < out.numel(); ++i) out.data_as<float>()[i] = 7.0f;
    std::vector<float> lse(size_t(hq * lq), 9.0f);
    Stats st;
    attention_vertical_slash(q, k, v, out, idx, {}, lse.data(), &st);
    const std::unique_ptr<Coverage> cov = vertical_slash_coverage(idx, lq, lk);
    int64_t entries = 0;
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < lq; ++i) {
        const auto it = std::lower_bound(rows.begin(), rows.end(), i);
        if (it == rows.end() || *it != i) {
          EXPECT_EQ(out.view().get(h, i, 0), 7.0f);
          EXPECT_EQ(lse[size_t(h * lq + i)], 9.0f);
          EXPECT_TRUE(test::coverage_keys(*cov, h, i).empty());
          continue;
        }
        const int64_t pos = lk - lq + i;
        std::vector<int64_t> keys = vs_row_keys(idx, h, int64_t(it - rows.begin()), pos, lq, lk);
        entries += int64_t(keys.size());
        std::sort(keys.begin(), keys.end());
        ASSERT_EQ(test::coverage_keys(*cov, h, i), keys);
        expect_close(out, h, i, test::row_over_keys(q, k, v, h, i, keys),
                     t == DType::bf16 ? 2e-2 : 1e-4);
      }
    EXPECT_EQ(st.score_entries, entries);
  }
}

TEST(VerticalSlash, BadIndexRaisesError) {
  Tensor q = test::random_tensor(DType::f32, 1, 10, 8, 1), out(DType::f32, 1, 10, 8);
  VerticalSlashIndex idx;
  idx.heads = 1;
  idx.columns = {{11}};
  idx.offsets = {{0}};
  EXPECT_THROW(attention_vertical_slash(q, q, q, out, idx), Error);  // column out of range
  idx.columns = {{1}};
  idx.offsets = {{-1}};
  EXPECT_THROW(attention_vertical_slash(q, q, q, out, idx), Error);  // negative offset
  idx.offsets = {{0}};
  idx.heads = 2;
  EXPECT_THROW(attention_vertical_slash(q, q, q, out, idx), Error);  // heads mismatch
  idx.heads = 1;
  idx.rows = std::vector<int64_t>{3, 3};
  EXPECT_THROW(attention_vertical_slash(q, q, q, out, idx), Error);  // rows not increasing
  idx.rows = std::vector<int64_t>{10};
  EXPECT_THROW(attention_vertical_slash(q, q, q, out, idx), Error);  // row out of range
  idx.rows.reset();
  AttnOptions full;
  full.causal = false;
  EXPECT_THROW(attention_vertical_slash(q, q, q, out, idx, full), Error);
}

// BLASST's rule inside the two sparse forms over a PackedKV (MOMO's lambda): lambda 0 is the form
// without the rule bit for bit (in either order named); under a real lambda the observer sees
// every tile once (skipped ones with LSE -inf) and does not change the output, each form's
// record counts skips, and a bad lambda is an Error naming it.
TEST(SparseSkipRule, LambdaZeroIsBitwiseAndObserverSeesEveryTile) {
  const int64_t lq = 700, d = 64;
  // The text workload: random tensors have flat scores, where nothing falls below lambda.
  WorkloadConfig c;
  c.seq = lq, c.heads = 2, c.kv_heads = 1, c.dim = d, c.seed = 7;
  const Workload w = make_workload(c);
  const TensorView q = w.q, k = w.k, v = w.v;
  const PackedKV kv = PackedKV::pack(k, v);
  const std::vector<int64_t> rows = strided_rows(lq, 4);
  const int64_t R = int64_t(rows.size());
  struct Count : BlockLseObserver {
    std::vector<int64_t> tiles;  // per (h, compact row): tiles reported
    int64_t rows = 0;
    void observe(int64_t h, int64_t r0, int64_t n, int64_t, const float*) override {
      for (int64_t r = 0; r < n; ++r) ++tiles[size_t(h * rows + r0 + r)];
    }
  };
  Tensor plain(DType::f32, 2, R, d), ruled(DType::f32, 2, R, d), observed(DType::f32, 2, R, d);
  attention_query_sparse(q, kv, rows, plain);
  for (BlasstOrder order : {BlasstOrder::in_order, BlasstOrder::local_first}) {
    BlasstSkip zero{0.0, order, nullptr};
    attention_query_sparse(q, kv, rows, ruled, {}, nullptr, nullptr, nullptr, &zero);
    EXPECT_EQ(std::memcmp(plain.data(), ruled.data(), plain.nbytes()), 0);
  }
  SkipStats rec;
  BlasstSkip rule{0.3, BlasstOrder::local_first, &rec};
  attention_query_sparse(q, kv, rows, ruled, {}, nullptr, nullptr, nullptr, &rule);
  EXPECT_GT(rec.skipped_fraction(), 0.0);
  Count count;
  count.rows = R;
  count.tiles.assign(size_t(2 * R), 0);
  attention_query_sparse(q, kv, rows, observed, {}, nullptr, &count, nullptr, &rule);
  EXPECT_EQ(std::memcmp(observed.data(), ruled.data(), ruled.nbytes()), 0);
  // Every tile the row's query tile visits: those up to its tile's last row's causal limit.
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t last = rows[size_t(std::min(R - 1, (r / 64) * 64 + 63))];
      EXPECT_EQ(count.tiles[size_t(h * R + r)], last / 64 + 1) << "head " << h << " row " << r;
    }

  const int64_t blk = 64;
  std::vector<std::vector<int32_t>> lists;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t qb = 0; qb < (lq + blk - 1) / blk; ++qb) {
      std::vector<int32_t> l;
      for (int64_t j = 0; j <= qb; ++j) l.push_back(int32_t(j));
      lists.push_back(l);
    }
  const BlockMask mask = BlockMask::from_lists(2, lq, lq, blk, blk, true, lists);
  Tensor a(DType::f32, 2, lq, d), b(DType::f32, 2, lq, d);
  attention_block_sparse(q, kv, a, mask);
  BlasstSkip zero{0.0, BlasstOrder::local_first, nullptr};
  attention_block_sparse(q, kv, b, mask, {}, nullptr, nullptr, &zero);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
  SkipStats brec;
  BlasstSkip brule{0.3, BlasstOrder::local_first, &brec};
  attention_block_sparse(q, kv, b, mask, {}, nullptr, nullptr, &brule);
  EXPECT_GT(brec.skipped_fraction(), 0.0);

  BlasstSkip bad{1.5, BlasstOrder::local_first, nullptr};
  for (auto call :
       {std::function<void()>([&] {
          attention_query_sparse(q, kv, rows, ruled, {}, nullptr, nullptr, nullptr, &bad);
        }),
        std::function<void()>(
            [&] { attention_block_sparse(q, kv, b, mask, {}, nullptr, nullptr, &bad); })}) {
    try {
      call();
      ADD_FAILURE() << "lambda 1.5 accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("lambda"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace spattn
