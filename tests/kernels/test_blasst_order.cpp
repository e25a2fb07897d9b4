// BLASST's visiting order (BlasstOrder): local_first visits the diagonal's tile, the sink's,
// then the rest nearest first. The skip rule is unchanged, so everything that holds in order
// must hold here too: the output is exact attention over the recorded coverage, lambda 0 is
// dense, one margin pass in the same order predicts every lambda, decode (both paths) alike.
#include <gtest/gtest.h>

#include "spec_error.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/flash_common.hpp"
#include "spattn/attention.hpp"
#include "spattn/blasst.hpp"
#include "spattn/calibration.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/workload.hpp"
#include "targets.hpp"
#include "test_util.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

using kernels::TileVisit;
using test::for_each_target;

std::string where(DType t) {
  return std::string(dtype_name(t)) + " target " + simd_target_name() +
         (kernels::bf16_dot_supported() ? "" : " (bf16 dot off)");
}

// ---------------------------------------------------------------------------------------
// The order itself.

std::vector<TileVisit> natural_tiles(int64_t tiles, int64_t kv_len) {
  std::vector<TileVisit> v;
  for (int64_t t = 0; t < tiles; ++t)
    v.push_back({t, 0, kv_len, t * 64, std::min(t * 64 + 64, kv_len) - 1});
  return v;
}
std::vector<int64_t> tiles_of(const std::vector<TileVisit>& v) {
  std::vector<int64_t> t;
  for (const TileVisit& x : v) t.push_back(x.tile);
  return t;
}

TEST(BlasstOrder, LocalFirstVisitsDiagonalSinkThenNearestFirst) {
  // Causal: the rows' newest position 600 is in tile 9; then the sink, then 8, 7, ..., 1.
  std::vector<TileVisit> v = natural_tiles(10, 601);
  kernels::blasst_local_first(v, 600);
  EXPECT_EQ(tiles_of(v), (std::vector<int64_t>{9, 0, 8, 7, 6, 5, 4, 3, 2, 1}));
  // Full attention, diagonal in the middle: the earlier of two equally near tiles first.
  v = natural_tiles(8, 512);
  kernels::blasst_local_first(v, 200);  // tile 3
  EXPECT_EQ(tiles_of(v), (std::vector<int64_t>{3, 0, 2, 4, 1, 5, 6, 7}));
  // The diagonal in the sink tile: plain nearest first.
  v = natural_tiles(3, 150);
  kernels::blasst_local_first(v, 10);
  EXPECT_EQ(tiles_of(v), (std::vector<int64_t>{0, 1, 2}));
  // Keys in a permuted order: tiles by the positions they hold (tile 1 holds position 0).
  v = {{0, 0, 192, 64, 127}, {1, 0, 192, 0, 63}, {2, 0, 192, 128, 190}};
  kernels::blasst_local_first(v, 190);
  EXPECT_EQ(tiles_of(v), (std::vector<int64_t>{2, 1, 0}));
}

TEST(BlasstOrder, NamesParseAndBadNamesRaise) {
  for (BlasstOrder o : {BlasstOrder::in_order, BlasstOrder::local_first})
    EXPECT_EQ(parse_blasst_order(blasst_order_name(o)), o);
  try {
    parse_blasst_order("sideways");
    ADD_FAILURE() << "accepted 'sideways'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sideways"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------
// Prefill.

// A text workload (structured scores: iid random ones leave nothing below lambda), GQA 6/2,
// 1000 keys (not a multiple of 64) and the last q_len of its queries (q_len < kv_len puts the
// query tiles across two key tiles each).
struct Prefill {
  Tensor q, k, v;
};
Prefill prefill(DType t, int64_t q_len, int64_t kv_len = 1000, int64_t dim = 64) {
  WorkloadConfig c;
  c.kind = WorkloadKind::text;
  c.seq = kv_len;
  c.heads = 6;
  c.kv_heads = 2;
  c.dim = dim;
  c.dtype = t;
  c.seed = 11;
  Workload w = make_workload(c);
  Prefill p{std::move(w.q), std::move(w.k), std::move(w.v)};
  if (q_len < kv_len) p.q = Tensor::copy_of(p.q.view().rows(kv_len - q_len, q_len));
  return p;
}

// The output is exact attention over blasst_coverage(skip), whose keys are exactly the entries
// Stats counted; the per-head counts add up to Stats; the lists are ascending.
void check_exact(const Prefill& in, const TensorView& out, const Stats& st, const SkipStats& skip,
                 bool causal, double tol) {
  const int64_t hq = in.q.heads(), lq = in.q.seq(), lk = in.k.seq(), d = in.q.dim();
  int64_t visited = 0, skipped = 0;
  for (size_t i = 0; i < skip.visited.size(); ++i) {
    visited += skip.visited[i];
    skipped += skip.skipped[i];
    const auto& list = skip.skipped_tiles[i];
    EXPECT_EQ(int64_t(list.size()), skip.skipped[i]);
    EXPECT_TRUE(std::adjacent_find(list.begin(), list.end(), std::greater_equal<>()) == list.end())
        << "item " << i << ": not strictly ascending";
  }
  EXPECT_EQ(visited, st.tiles_visited);
  EXPECT_EQ(skipped, st.tiles_skipped);
  const auto cov = blasst_coverage(skip, lq, lk, causal);
  int64_t entries = 0;
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 0; i < lq; ++i) {
      const std::vector<int64_t> keys = test::coverage_keys(*cov, h, i);
      entries += int64_t(keys.size());
      if (i % 5 != 0 && i != lq - 1) continue;  // the reference is slow: every 5th row
      const auto want = test::row_over_keys(in.q, in.k, in.v, h, i, keys);
      for (int64_t c = 0; c < d; ++c)
        ASSERT_NEAR(out.get(h, i, c), want[size_t(c)], tol) << "head " << h << " row " << i;
    }
  EXPECT_EQ(entries, st.score_entries);
}

TEST(BlasstOrder, LocalFirstIsExactOverItsCoverage) {
  for (DType t : {DType::f32, DType::bf16})
    for (bool causal : {true, false}) {
      const Prefill in = prefill(t, 333);
      for_each_target([&] {
        SCOPED_TRACE(where(t) + (causal ? " causal" : " full"));
        AttnOptions opt;
        opt.causal = causal;
        Tensor out(DType::f32, 6, 333, 64);
        Stats st;
        SkipStats skip;
        skip.record_tiles = true;
        attention_blasst(in.q, in.k, in.v, out, 1e-2, opt, nullptr, &st, &skip,
                         BlasstOrder::local_first);
        EXPECT_GT(skip.skipped_fraction(), 0.1);  // enough that a wrong list could not pass
        // The bf16 dot path rounds P to bf16 (as FlashAttention does on GPUs).
        const bool dot = t == DType::bf16 && kernels::bf16_dot_supported();
        check_exact(in, out, st, skip, causal, dot ? 2e-2 : 1e-4);
      });
    }
}

// Heads whose scores fall with distance (as real heads' do, the premise): in order the
// running max rises with every tile and nothing falls below it; local-first sees the diagonal
// first, and the far tiles fall below. Scores here are 10 cos(pi (i - j) / L) (scaled), from
// 2-D rotations of q and k, plus small noise in the other dims.
TEST(BlasstOrder, LocalFirstSkipsWhereInOrderCannot) {
  const int64_t L = 1000, d = 64;
  Tensor q = test::random_tensor(DType::f32, 2, L, d, 1, 0.1f),
         k = test::random_tensor(DType::f32, 1, L, d, 2, 0.1f),
         v = test::random_tensor(DType::f32, 1, L, d, 3);
  const double w = M_PI / double(L), a = std::sqrt(10.0 * 8.0);  // scale 1/8 at d = 64
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t h = 0; h < 2; ++h) {
      q.view().set(h, i, 0, float(a * std::cos(w * double(i))));
      q.view().set(h, i, 1, float(a * std::sin(w * double(i))));
    }
    k.view().set(0, i, 0, float(a * std::cos(w * double(i))));
    k.view().set(0, i, 1, float(a * std::sin(w * double(i))));
  }
  Tensor out(DType::f32, 2, L, d);
  Stats ordered, local;
  attention_blasst(q, k, v, out, 1e-2, {}, nullptr, &ordered, nullptr, BlasstOrder::in_order);
  attention_blasst(q, k, v, out, 1e-2, {}, nullptr, &local, nullptr, BlasstOrder::local_first);
  EXPECT_EQ(ordered.tiles_visited, local.tiles_visited);
  EXPECT_LT(double(ordered.tiles_skipped), 0.05 * double(ordered.tiles_visited));
  EXPECT_GT(double(local.tiles_skipped), 0.3 * double(local.tiles_visited));
}

// lambda 0 skips nothing whatever the order: both orders run the dense kernel's sums, bit for
// bit. A lambda too small to skip anything makes local_first reorder the sums: dense to float
// error. Slow: two dtypes on every SIMD target, a minute under ASan, which
// LocalFirstIsExactOverItsCoverage's smaller shapes cover there.
TEST(BlasstOrder, LambdaZeroIsDenseAndTinyLambdaIsDenseToFloatErrorSlow) {
  for (DType t : {DType::f32, DType::bf16}) {
    // iid scores: no tile lies 1e-30 (69 nats) below anything.
    const Tensor q = test::random_tensor(t, 6, 333, 64, 1),
                 k = test::random_tensor(t, 2, 1000, 64, 2),
                 v = test::random_tensor(t, 2, 1000, 64, 3);
    for_each_target([&] {
      SCOPED_TRACE(where(t));
      Tensor dense(DType::f32, 6, 333, 64), out(DType::f32, 6, 333, 64);
      std::vector<float> ld(6 * 333), lo(6 * 333);
      attention_dense(q, k, v, dense, {}, ld.data());
      for (BlasstOrder o : {BlasstOrder::in_order, BlasstOrder::local_first}) {
        Stats st;
        attention_blasst(q, k, v, out, 0.0, {}, lo.data(), &st, nullptr, o);
        EXPECT_EQ(std::memcmp(dense.data(), out.data(), out.nbytes()), 0) << blasst_order_name(o);
        EXPECT_EQ(std::memcmp(ld.data(), lo.data(), ld.size() * 4), 0) << blasst_order_name(o);
      }
      Stats st;
      attention_blasst(q, k, v, out, 1e-30, {}, lo.data(), &st, nullptr, BlasstOrder::local_first);
      EXPECT_EQ(st.tiles_skipped, 0);
      // The bf16 dot path rounds P to bf16 against the running max of the moment, which the
      // order changes: the two sums differ by that rounding, not by f32 rounding alone.
      const bool dot = t == DType::bf16 && kernels::bf16_dot_supported();
      EXPECT_LT(test::diff(out, dense).max_abs, dot ? 2e-3 : 1e-5);
      for (size_t i = 0; i < ld.size(); ++i) ASSERT_NEAR(lo[i], ld[i], 1e-5) << i;
    });
  }
}

// Skipping never changes the running maxima in either order, so one margin pass visiting the
// tiles in local-first order gives local_first's exact sparsity at every lambda (and differs
// from the in-order pass's). Slow: seven lambdas on every SIMD target, three minutes under ASan.
TEST(BlasstOrder, LocalFirstMarginsPredictSparsityForEveryLambdaSlow) {
  for (DType t : {DType::f32, DType::bf16}) {
    const Prefill in = prefill(t, 700, 1111);
    for_each_target([&] {
      SCOPED_TRACE(where(t));
      const TileMargins local = blasst_tile_margins(in.q, in.k, in.v, {}, BlasstOrder::local_first);
      const TileMargins ordered = blasst_tile_margins(in.q, in.k, in.v, {}, BlasstOrder::in_order);
      EXPECT_GT(local.sparsity_at(1e-2), ordered.sparsity_at(1e-2));
      for (double lambda : {1e-6, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0}) {
        Tensor out(DType::f32, 6, 700, 64);
        Stats st;
        attention_blasst(in.q, in.k, in.v, out, lambda, {}, nullptr, &st, nullptr,
                         BlasstOrder::local_first);
        EXPECT_NEAR(local.sparsity_at(lambda), st.sparsity(), 1e-12) << lambda;
      }
    });
  }
}

// ---------------------------------------------------------------------------------------
// Decode: raw tensors (decode-inl.h) and a PackedKV (the flash loop with key chunks).

struct Decode {
  Tensor q, k, v;
};
// GQA 6/2, lq queries at the end of lk keys (text workload), queries at half scale so skipped
// blocks hold visible mass.
Decode decode_problem(DType t, int64_t lq, int64_t lk) {
  WorkloadConfig c;
  c.kind = WorkloadKind::text;
  c.seq = lk;
  c.q_len = lq;
  c.heads = 6;
  c.kv_heads = 2;
  c.dim = 64;
  c.dtype = t;
  c.seed = 5;
  Workload w = make_workload(c);
  TensorView q = w.q.view();
  for (int64_t h = 0; h < q.heads; ++h)
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t x = 0; x < q.dim; ++x) q.set(h, i, x, 0.5f * q.get(h, i, x));
  return {std::move(w.q), std::move(w.k), std::move(w.v)};
}

// Exact over the coverage (out and LSE), entries as Stats counted, lists ascending. tol: 2e-5
// where scores and P.V accumulate in f32 from the stored operands (raw decode, every dtype),
// more where P is rounded to bf16 (the flash loop's bf16 dot path, which packed decode runs).
void check_decode_exact(const Decode& in, const TensorView& out, const std::vector<float>& lse,
                        const Stats& st, const SkipStats& skip, double tol) {
  const int64_t hq = in.q.heads(), lq = in.q.seq(), lk = in.k.seq(), d = in.q.dim();
  ASSERT_EQ(skip.q_tiles, 1);
  const auto cov = blasst_coverage(skip, lq, lk, true);
  int64_t entries = 0;
  for (int64_t h = 0; h < hq; ++h) {
    const auto& list = skip.skipped_tiles[size_t(h)];
    EXPECT_EQ(int64_t(list.size()), skip.skipped[size_t(h)]);
    EXPECT_EQ(skip.visited[size_t(h)], (lk + 63) / 64);
    EXPECT_TRUE(std::adjacent_find(list.begin(), list.end(), std::greater_equal<>()) == list.end())
        << "head " << h << ": not strictly ascending";
    for (int64_t i = 0; i < lq; ++i) {
      const std::vector<int64_t> keys = test::coverage_keys(*cov, h, i);
      entries += int64_t(keys.size());
      double want_lse = 0;
      const auto want = test::row_over_keys(in.q, in.k, in.v, h, i, keys, 0, &want_lse);
      ASSERT_NEAR(lse[size_t(h * lq + i)], want_lse, 1e-4 * std::max(1.0, std::abs(want_lse)));
      for (int64_t c = 0; c < d; ++c)
        ASSERT_NEAR(out.get(h, i, c), want[size_t(c)],
                    tol * std::max(1.0, std::abs(want[size_t(c)])))
            << "head " << h << " row " << i;
    }
  }
  // Stats count the kept entries once per q head here (raw decode: per unit and row, the same
  // sum; packed decode: per q head).
  EXPECT_EQ(entries, st.score_entries);
}

TEST(BlasstOrder, DecodeLocalFirstIsExactOverItsCoverage) {
  const int64_t lk = 5001;  // 79 blocks in three splits of the raw kernel, three 2048-key chunks
  for (DType t : {DType::f32, DType::bf16})
    for (int64_t lq : {1, 7}) {
      const Decode in = decode_problem(t, lq, lk);
      for_each_target([&] {
        const PackedKV kv = PackedKV::pack(in.k, in.v);  // in this target's operand format
        const bool dot = t == DType::bf16 && kernels::bf16_dot_supported();
        for (bool packed : {false, true})
          for (int64_t batch : {1, 4}) {
            if (packed && batch != 4) continue;  // packed decode has no batches
            SCOPED_TRACE(where(t) + " lq " + std::to_string(lq) + (packed ? " packed" : " raw") +
                         " batch " + std::to_string(batch));
            Tensor out(DType::f32, 6, lq, 64);
            std::vector<float> lse(size_t(6 * lq));
            Stats st;
            SkipStats skip;
            skip.record_tiles = true;
            DecodeOptions d;
            d.lambda = 0.05, d.batch = batch, d.order = BlasstOrder::local_first;
            if (packed)
              attention_decode(in.q, kv, out, {}, d, lse.data(), &st, &skip);
            else
              attention_decode(in.q, in.k, in.v, out, {}, d, lse.data(), &st, &skip);
            EXPECT_GT(skip.skipped_fraction(), 0.2);
            EXPECT_LT(skip.skipped_fraction(), 1.0);
            check_decode_exact(in, out, lse, st, skip, packed && dot ? 1e-2 : 2e-5);
          }
      });
    }
}

// lambda 0: dense decode bit for bit in either order, on both paths.
TEST(BlasstOrder, DecodeLambdaZeroIsDense) {
  const Decode in = decode_problem(DType::f32, 3, 3001);
  for_each_target([&] {
    const PackedKV kv = PackedKV::pack(in.k, in.v);
    SCOPED_TRACE(where(DType::f32));
    Tensor dense(DType::f32, 6, 3, 64), dense_packed(DType::f32, 6, 3, 64),
        out(DType::f32, 6, 3, 64);
    attention_decode(in.q, in.k, in.v, dense);
    attention_decode(in.q, kv, dense_packed);
    DecodeOptions d;
    d.order = BlasstOrder::local_first;
    attention_decode(in.q, in.k, in.v, out, {}, d);
    EXPECT_EQ(std::memcmp(dense.data(), out.data(), out.nbytes()), 0);
    attention_decode(in.q, kv, out, {}, d);
    EXPECT_EQ(std::memcmp(dense_packed.data(), out.data(), out.nbytes()), 0);
  });
}

// Each split starts from the newest block's and the sink's maxima, so a split far from both
// skips blocks that in order (its own running max from scratch) it would keep.
TEST(BlasstOrder, DecodeLocalFirstSkipsMoreThanInOrder) {
  const Decode in = decode_problem(DType::f32, 1, 8192);
  const PackedKV kv = PackedKV::pack(in.k, in.v);
  for (bool packed : {false, true}) {
    Stats st[2];
    for (BlasstOrder o : {BlasstOrder::in_order, BlasstOrder::local_first}) {
      Tensor out(DType::f32, 6, 1, 64);
      DecodeOptions d;
      d.lambda = 1e-2, d.order = o;
      if (packed)
        attention_decode(in.q, kv, out, {}, d, nullptr, &st[int(o)]);
      else
        attention_decode(in.q, in.k, in.v, out, {}, d, nullptr, &st[int(o)]);
    }
    EXPECT_GT(st[1].tiles_skipped, st[0].tiles_skipped) << (packed ? "packed" : "raw");
  }
}

TEST(BlasstOrder, DecodeBadOrderRaises) {
  const Decode in = decode_problem(DType::f32, 1, 100);
  Tensor out(DType::f32, 6, 1, 64);
  DecodeOptions d;
  d.lambda = 0.1, d.order = BlasstOrder(7);
  EXPECT_THROW(attention_decode(in.q, in.k, in.v, out, {}, d), Error);
  EXPECT_THROW(
      attention_blasst(in.q, in.k, in.v, out, 0.1, {}, nullptr, nullptr, nullptr, BlasstOrder(7)),
      Error);
}

// ---------------------------------------------------------------------------------------
// The method and calibration.

using test::expect_spec_error;

// order= picks the kernel's order; the default is local_first.
TEST(BlasstOrder, MethodSpecPicksTheOrder) {
  expect_spec_error("blasst:lambda=0.01,order=sideways", "sideways");
  const Prefill in = prefill(DType::f32, 1000);
  Tensor out(DType::f32, 6, 1000, 64);
  for (BlasstOrder o : {BlasstOrder::in_order, BlasstOrder::local_first}) {
    Stats st;
    attention_blasst(in.q, in.k, in.v, out, 1e-2, {}, nullptr, &st, nullptr, o);
    const auto m = make_method(std::string("blasst:lambda=0.01,order=") + blasst_order_name(o));
    EXPECT_EQ(m->run(in.q, in.k, in.v, out, {}).stats.tiles_skipped, st.tiles_skipped);
    if (o == BlasstOrder::local_first) {
      EXPECT_EQ(
          make_method("blasst:lambda=0.01")->run(in.q, in.k, in.v, out, {}).stats.tiles_skipped,
          st.tiles_skipped);
    }
  }
}

// A calibration measures its margins in its order and records it; the method then runs that
// order, and refuses another.
TEST(BlasstOrder, CalibrationRecordsItsOrder) {
  CalibrationOptions o;
  o.order = BlasstOrder::local_first;
  o.fit_min = 0.1, o.fit_max = 0.6;
  o.gamma = 1.0;  // the paper's form: two parameters, so two short samples determine it
  BlasstCalibrator cal(o);
  const Prefill a = prefill(DType::f32, 1000), b = prefill(DType::f32, 1500, 1500);
  cal.add(a.q, a.k, a.v);
  cal.add(b.q, b.k, b.v);
  // The calibrator's sparsity is the local-first margins' (exact for local_first runs).
  const TileMargins tm = blasst_tile_margins(a.q, a.k, a.v, {}, BlasstOrder::local_first);
  EXPECT_NEAR(cal.sparsity_at(1000, 1e-2), tm.sparsity_at(1e-2), 1e-12);
  const Calibration c = cal.fit();
  EXPECT_EQ(c.order, BlasstOrder::local_first);
  EXPECT_EQ(calibration_from_json(calibration_to_json(c)).order, BlasstOrder::local_first);
  const test::TempDir dir("spattn_order_calib");
  const std::string path = dir.file("calib.json");
  save_calibration(path, c);
  expect_spec_error("blasst:sparsity=0.5,calib=" + path + ",order=in_order", "in_order");
  EXPECT_NO_THROW(make_method("blasst:sparsity=0.5,calib=" + path + ",order=local_first"));
  EXPECT_NO_THROW(make_method("blasst:sparsity=0.5,calib=" + path));
}

}  // namespace
}  // namespace spattn
