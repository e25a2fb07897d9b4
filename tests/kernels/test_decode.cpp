// The decode kernel (dense flash-decoding and BLASST's decode mode) against the exact
// reference, on every SIMD target this build dispatches to.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "kernels/flash_common.hpp"
#include "spattn/attention.hpp"
#include "spattn/blasst.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/workload.hpp"
#include "targets.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

using test::diff;
using test::random_tensor;

struct Case {
  DType dtype;
  int64_t hq, hkv, lq, lk, d;
  bool causal;
};

std::string name(const Case& c) {
  return std::string(dtype_name(c.dtype)) + " hq" + std::to_string(c.hq) + " hkv" +
         std::to_string(c.hkv) + " lq" + std::to_string(c.lq) + " lk" + std::to_string(c.lk) +
         " d" + std::to_string(c.d) + (c.causal ? " causal" : " full");
}

// Row chunks per kv head: whole q heads, at most 128 rows (group x q_len) each.
int64_t row_chunks(int64_t group, int64_t lq) {
  const int64_t max_heads = 128 / lq;
  return (group + max_heads - 1) / max_heads;
}

// Scores and P.V are accumulated in f32 from the stored operands (bf16 dot products are exact
// products of bf16 values), so every dtype gets the f32 budget.
constexpr double kTol = 2e-5;

// A case's inputs and exact reference, computed once and checked on every target.
struct Prepared {
  Case c;
  Tensor q, k, v, ref;
  std::vector<float> lse_ref;
};

Prepared prepare(const Case& c, uint64_t seed = 1) {
  Prepared p{c,
             random_tensor(c.dtype, c.hq, c.lq, c.d, seed),
             random_tensor(c.dtype, c.hkv, c.lk, c.d, seed + 1),
             random_tensor(c.dtype, c.hkv, c.lk, c.d, seed + 2),
             Tensor(DType::f32, c.hq, c.lq, c.d),
             std::vector<float>(size_t(c.hq * c.lq))};
  AttnOptions opt;
  opt.causal = c.causal;
  attention_reference(p.q, p.k, p.v, p.ref, opt, p.lse_ref.data());
  return p;
}

void check(const Prepared& p) {
  const Case& c = p.c;
  SCOPED_TRACE(name(c) + " target " + simd_target_name() +
               (kernels::bf16_dot_supported() ? "" : " (bf16 dot off)"));
  Tensor out(DType::f32, c.hq, c.lq, c.d);
  std::vector<float> lse(size_t(c.hq * c.lq));
  AttnOptions opt;
  opt.causal = c.causal;
  Stats st;
  attention_decode(p.q, p.k, p.v, out, opt, {}, lse.data(), &st);
  const test::Diff dd = diff(out, p.ref);
  EXPECT_LE(dd.max_abs, kTol * std::max(1.0, dd.ref_max));
  for (size_t i = 0; i < lse.size(); ++i)
    ASSERT_NEAR(lse[i], p.lse_ref[i], 1e-4 * std::max(1.0f, std::abs(p.lse_ref[i]))) << "row " << i;
  const int64_t entries = c.hq * attention_entries(c.lq, c.lk, c.causal);
  EXPECT_EQ(st.score_entries, entries);
  EXPECT_EQ(st.causal_entries, entries);
  EXPECT_EQ(st.tiles_skipped, 0);
  // One visit per 64-key block per (kv head, row chunk of <= 128 rows of group x q_len).
  EXPECT_EQ(st.tiles_visited, c.hkv * row_chunks(c.hq / c.hkv, c.lq) * ((c.lk + 63) / 64));
  EXPECT_DOUBLE_EQ(st.flops, 4.0 * double(c.d) * double(entries));
}

using test::for_each_target;

// Every dtype x q_len x kv length, with the GQA group, head dim and masking rotated through.
std::vector<Case> cases() {
  std::vector<Case> out;
  const int64_t groups[] = {1, 2, 4, 8}, dims[] = {64, 80, 128};
  int i = 0;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (int64_t lq : {1, 3, 16})
      for (int64_t lk : {1, 63, 65, 1000}) {
        const int64_t g = groups[i % 4], d = dims[i % 3];
        const int64_t hkv = g == 8 ? 1 : 2;
        const bool causal = lq <= lk && i % 5 != 0;  // q_len > kv_len only without the mask
        out.push_back({t, g * hkv, hkv, lq, lk, d, causal});
        ++i;
      }
  return out;
}

TEST(DecodeKernel, MatchesReferenceAcrossDtypesShapesTargets) {
  std::vector<Prepared> all;
  for (const Case& c : cases()) all.push_back(prepare(c));
  for_each_target([&] {
    for (const Prepared& p : all) check(p);
  });
}

TEST(DecodeKernel, EveryGroupSizeAndHeadDim) {
  std::vector<Prepared> all;
  for (int64_t g : {1, 2, 4, 8})
    for (int64_t d : {8, 64, 72, 80, 128, 256})
      all.push_back(prepare({DType::f32, g, 1, 3, 130, d, true}));
  all.push_back(prepare({DType::bf16, 8, 1, 16, 200, 72, true}));  // bf16 dot tail: 72 = 2 x 32 + 8
  // The widest head dim (kMaxHeadDim), and DeepSeek's absorbed latent attention as the runner
  // decodes it: 128 q heads over one kv head of 576.
  all.push_back(prepare({DType::f32, 4, 1, 3, 130, kMaxHeadDim, true}));
  all.push_back(prepare({DType::bf16, 128, 1, 1, 150, kMaxHeadDim, true}));
  for_each_target([&] {
    for (const Prepared& p : all) check(p);
  });
}

TEST(DecodeKernel, RowChunksBeyond128Rows) {
  // group 16 x q_len 16 = 256 rows: two row chunks per kv head.
  check(prepare({DType::f32, 16, 1, 16, 300, 64, true}));
  check(prepare({DType::bf16, 32, 2, 5, 100, 64, false}));  // 80 rows, 2 kv heads
  // group 9 x q_len 15 = 135 rows: chunks of 5 and 4 whole q heads (75 and 60 rows).
  check(prepare({DType::f32, 9, 1, 15, 200, 64, true}));
}

TEST(DecodeKernelSlow, LongCachesSplitAndMerge) {
  // 4097 keys: 65 blocks in three splits, the last block holding one key.
  std::vector<Prepared> all;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    all.push_back(prepare({t, 4, 1, 16, 4097, 128, true}));
  all.push_back(prepare({DType::f32, 2, 2, 1, 4097, 80, false}));
  for_each_target([&] {
    for (const Prepared& p : all) check(p);
  });
}

TEST(DecodeKernel, StridedSeqMajorViewsAndBf16Output) {
  // [seq, heads, dim] buffers read in place (stride_dim 1) and fully strided views (staged).
  const int64_t h = 4, hk = 2, lq = 3, lk = 300, d = 64;
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor qb = random_tensor(t, 1, lq, h * d, 11);
    Tensor kb = random_tensor(t, 1, lk, hk * d, 12);
    Tensor vb = random_tensor(t, 1, lk, hk * d, 13);
    TensorView q = TensorView::shd(qb.data(), t, h, lq, d);
    TensorView k = TensorView::shd(kb.data(), t, hk, lk, d);
    TensorView v = TensorView::shd(vb.data(), t, hk, lk, d);
    Tensor out(DType::bf16, h, lq, d), ref(DType::f32, h, lq, d);
    attention_decode(q, k, v, out, {});
    attention_reference(q, k, v, ref, {});
    EXPECT_LE(diff(out, ref).max_abs, 1e-2);

    // dim-major storage: element (h, s, c) at c * (heads * seq) + h * seq + s.
    Tensor kt(t, 1, 1, hk * lk * d), vt(t, 1, 1, hk * lk * d);
    TensorView ks = k, vs = v;
    ks.data = kt.data();
    vs.data = vt.data();
    ks.stride_dim = vs.stride_dim = hk * lk;
    ks.stride_head = vs.stride_head = lk;
    ks.stride_seq = vs.stride_seq = 1;
    copy_into(k, ks);
    copy_into(v, vs);
    Tensor out2(DType::f32, h, lq, d);
    attention_decode(q, ks, vs, out2, {});
    EXPECT_LE(diff(out2, ref).max_abs, 2e-5 * std::max(1.0, diff(out2, ref).ref_max));
  }
}

TEST(DecodeKernel, LambdaZeroAndTinyLambdaAreDense) {
  for_each_target([&] {
    for (DType t : {DType::f32, DType::bf16}) {
      Tensor q = random_tensor(t, 8, 2, 128, 41), k = random_tensor(t, 2, 3000, 128, 42),
             v = random_tensor(t, 2, 3000, 128, 43);
      Tensor dense(DType::f32, 8, 2, 128), zero(DType::f32, 8, 2, 128), tiny(DType::f32, 8, 2, 128),
          prefill(DType::f32, 8, 2, 128);
      Stats st0, st1;
      attention_decode(q, k, v, dense, {});
      attention_decode(q, k, v, zero, {}, {0.0, 4}, nullptr, &st0);
      attention_decode(q, k, v, tiny, {}, {1e-30, 4}, nullptr, &st1);
      EXPECT_EQ(std::memcmp(dense.data(), zero.data(), dense.nbytes()), 0);
      EXPECT_EQ(std::memcmp(dense.data(), tiny.data(), dense.nbytes()), 0);
      EXPECT_EQ(st0.tiles_skipped, 0);
      EXPECT_EQ(st1.tiles_skipped, 0);
      EXPECT_EQ(st1.score_entries, st0.score_entries);
      attention_dense(q, k, v, prefill, {});
      EXPECT_LE(diff(dense, prefill).max_abs, 2e-2);  // prefill rounds P to bf16 on bf16 dot
    }
  });
}

// Scores built exactly: q = (sqrt(d), 0, ...), k = (beta, noise...), so the scaled score of a
// key is beta. Block 0 holds the hot key (10), blocks 5 and 11 a warm one (9), every other key
// scores 3 below the hot one. At lambda = 0.1 (ln = -2.3) cold blocks are skipped, warm ones
// are not; and the cold blocks hold most of the softmax mass, so skipping them shows.
struct SkipInput {
  Tensor q, k, v;
  int64_t lk;
  std::vector<int64_t> kept_blocks{0, 5, 11};
};

SkipInput skip_input(DType t, int64_t lk, int64_t d) {
  SkipInput in{Tensor(t, 2, 1, d), random_tensor(t, 1, lk, d, 51), random_tensor(t, 1, lk, d, 52),
               lk};
  for (int64_t h = 0; h < 2; ++h) in.q.view().set(h, 0, 0, std::sqrt(float(d)));
  for (int64_t j = 0; j < lk; ++j) in.k.view().set(0, j, 0, 7.0f);
  in.k.view().set(0, 5, 0, 10.0f);
  in.k.view().set(0, 5 * 64 + 17, 0, 9.0f);
  in.k.view().set(0, 11 * 64 + 63, 0, 9.0f);
  return in;
}

TEST(DecodeKernel, SkippedBlocksAreNotComputed) {
  const int64_t lk = 1000, d = 64, blocks = (lk + 63) / 64;  // one split (<= 2048 keys)
  for_each_target([&] {
    for (DType t : {DType::f32, DType::bf16})
      for (int64_t batch : {1, 4, 64}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " batch " + std::to_string(batch));
        SkipInput in = skip_input(t, lk, d);
        Tensor out(DType::f32, 2, 1, d), ref(DType::f32, 2, 1, d), full(DType::f32, 2, 1, d);
        std::vector<float> lse(2), lse_ref(2);
        Stats st;
        SkipStats skip;
        skip.record_tiles = true;
        attention_decode(in.q, in.k, in.v, out, {}, {0.1, batch}, lse.data(), &st, &skip);
        EXPECT_EQ(st.tiles_visited, blocks);
        EXPECT_EQ(st.tiles_skipped, blocks - 3);
        EXPECT_EQ(st.score_entries, 2 * 3 * 64);
        EXPECT_NEAR(st.sparsity(), 1.0 - 3.0 * 64 / lk, 1e-12);
        // Both q heads (one GQA group) record every block but the planted ones as skipped.
        std::vector<int32_t> want;
        for (int32_t b = 0; b < int32_t(blocks); ++b)
          if (std::find(in.kept_blocks.begin(), in.kept_blocks.end(), b) == in.kept_blocks.end())
            want.push_back(b);
        ASSERT_EQ(skip.heads, 2);
        ASSERT_EQ(skip.q_tiles, 1);
        for (size_t h = 0; h < 2; ++h) {
          EXPECT_EQ(skip.visited[h], blocks);
          EXPECT_EQ(skip.skipped[h], blocks - 3);
          EXPECT_EQ(skip.skipped_tiles[h], want) << "head " << h;
        }

        // The reference over the keys of the kept blocks only.
        Tensor kk(t, 1, 3 * 64, d), vv(t, 1, 3 * 64, d);
        for (size_t b = 0; b < in.kept_blocks.size(); ++b) {
          copy_into(in.k.view().rows(in.kept_blocks[b] * 64, 64),
                    kk.view().rows(int64_t(b) * 64, 64));
          copy_into(in.v.view().rows(in.kept_blocks[b] * 64, 64),
                    vv.view().rows(int64_t(b) * 64, 64));
        }
        AttnOptions opt;
        opt.causal = false;  // the one query row sees the whole cache anyway
        opt.scale = 1.0f / std::sqrt(float(d));
        attention_reference(in.q, kk, vv, ref, opt, lse_ref.data());
        const test::Diff dd = diff(out, ref);
        EXPECT_LE(dd.max_abs, kTol * std::max(1.0, dd.ref_max));
        EXPECT_NEAR(lse[0], lse_ref[0], 1e-4);
        // ... which is far from dense attention: the skipped blocks held most of the mass.
        attention_reference(in.q, in.k, in.v, full, opt);
        EXPECT_GT(diff(out, full).max_abs, 0.05);
      }
  });
}

TEST(DecodeKernel, LambdaOneKeepsOnlyBlocksHoldingTheRunningMax) {
  SkipInput in = skip_input(DType::f32, 1000, 64);
  Tensor out(DType::f32, 2, 1, 64);
  Stats st;
  attention_decode(in.q, in.k, in.v, out, {}, {1.0, 64}, nullptr, &st);
  EXPECT_EQ(st.tiles_visited - st.tiles_skipped, 1);  // block 0, with the max of the batch
}

TEST(DecodeKernel, BitwiseDeterministic) {
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor q = random_tensor(t, 8, 4, 128, 61), k = random_tensor(t, 2, 5000, 128, 62),
           v = random_tensor(t, 2, 5000, 128, 63);
    for (double lambda : {0.0, 1e-3}) {
      Tensor first(DType::f32, 8, 4, 128);
      for (int threads : {1, 2, 3}) {
        AttnOptions opt;
        opt.threads = threads;
        for (int rep = 0; rep < 3; ++rep) {
          Tensor a(DType::f32, 8, 4, 128);
          attention_decode(q, k, v, a, opt, {lambda, 4});
          if (threads == 1 && rep == 0) first = Tensor::copy_of(a);
          // The split plan depends on kv_len only: the same bits for every thread count.
          EXPECT_EQ(std::memcmp(a.data(), first.data(), a.nbytes()), 0)
              << dtype_name(t) << " lambda " << lambda << " threads " << threads;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// SkipStats: where the decode kernel skipped, per q head.

// A decode problem with structured scores (a text workload: iid random scores leave nothing
// below lambda) whose queries are the last lq positions, scaled by q_scale.
Workload decode_workload(DType t, int64_t hq, int64_t hkv, int64_t lq, int64_t lk,
                         uint64_t seed = 5, float q_scale = 1.0f) {
  WorkloadConfig c;
  c.kind = WorkloadKind::text;
  c.seq = lk;
  c.q_len = lq;
  c.heads = hq;
  c.kv_heads = hkv;
  c.dim = 64;
  c.dtype = t;
  c.seed = seed;
  Workload w = make_workload(c);
  if (q_scale != 1.0f) {
    TensorView q = w.q.view();
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < lq; ++i)
        for (int64_t x = 0; x < q.dim; ++x) q.set(h, i, x, q_scale * q.get(h, i, x));
  }
  return w;
}

// The counts and lists are consistent with each other and with Stats: every q head visits
// every block; the q heads of one row chunk (here: of one GQA group) share one decision per
// block, so their counts and lists are equal; lists are ascending, without repeats.
void check_skip_layout(const SkipStats& skip, const Stats& st, int64_t hq, int64_t hkv, int64_t lq,
                       int64_t lk) {
  const int64_t group = hq / hkv, blocks = (lk + 63) / 64;
  ASSERT_EQ(skip.heads, hq);
  ASSERT_EQ(skip.q_tiles, 1);
  ASSERT_EQ(skip.tile_rows, 64);
  ASSERT_EQ(skip.visited.size(), size_t(hq));
  ASSERT_EQ(skip.skipped.size(), size_t(hq));
  ASSERT_EQ(skip.skipped_tiles.size(), size_t(hq));
  ASSERT_EQ(row_chunks(group, lq), 1) << "the relations below assume one chunk per kv head";
  int64_t group_skipped = 0;  // one q head per group: Stats' unit is (kv head, chunk)
  for (int64_t h = 0; h < hq; ++h) {
    const auto& list = skip.skipped_tiles[size_t(h)];
    EXPECT_EQ(skip.visited[size_t(h)], blocks) << "head " << h;
    EXPECT_EQ(skip.skipped[size_t(h)], int64_t(list.size())) << "head " << h;
    EXPECT_TRUE(std::adjacent_find(list.begin(), list.end(), std::greater_equal<>()) == list.end())
        << "head " << h << ": not strictly ascending";
    EXPECT_TRUE(list.empty() || (list.front() >= 0 && list.back() < blocks)) << "head " << h;
    const int64_t first = h / group * group;  // the group's first q head
    EXPECT_EQ(skip.skipped[size_t(h)], skip.skipped[size_t(first)]) << "head " << h;
    EXPECT_EQ(list, skip.skipped_tiles[size_t(first)]) << "head " << h;
    if (h == first) group_skipped += skip.skipped[size_t(h)];
  }
  EXPECT_EQ(st.tiles_visited, hkv * blocks);
  EXPECT_EQ(group_skipped, st.tiles_skipped);
  EXPECT_NEAR(skip.skipped_fraction(), double(st.tiles_skipped) / double(st.tiles_visited), 1e-12);
}

// The kernel's output equals exact attention over blasst_coverage(skip) (the keys of the
// blocks it recorded as kept), row by row, and LSE too; and those keys are exactly the score
// entries Stats counted.
void check_exact_coverage(const Workload& w, const TensorView& out, const std::vector<float>& lse,
                          const SkipStats& skip, const Stats& st, bool causal) {
  const int64_t hq = w.q.heads(), lq = w.q.seq(), lk = w.k.seq(), d = w.q.dim();
  const auto cov = blasst_coverage(skip, lq, lk, causal);
  int64_t entries = 0;
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 0; i < lq; ++i) {
      const std::vector<int64_t> keys = test::coverage_keys(*cov, h, i);
      entries += int64_t(keys.size());
      double want_lse = 0;
      const std::vector<double> want = test::row_over_keys(w.q, w.k, w.v, h, i, keys, 0, &want_lse);
      ASSERT_NEAR(lse[size_t(h * lq + i)], want_lse, 1e-4 * std::max(1.0, std::abs(want_lse)))
          << "head " << h << " row " << i;
      for (int64_t c = 0; c < d; ++c)
        ASSERT_NEAR(out.get(h, i, c), want[size_t(c)],
                    kTol * std::max(1.0, std::abs(want[size_t(c)])))
            << "head " << h << " row " << i << " dim " << c;
    }
  EXPECT_EQ(entries, st.score_entries);
}

TEST(DecodeSkipStats, RecordedBlocksGiveExactCoverage) {
  // GQA 8/2, an odd cache (4097 keys: 65 blocks in three splits, the last holding one key).
  const int64_t hq = 8, hkv = 2, lk = 4097;
  for (DType t : {DType::f32, DType::bf16})
    for (int64_t lq : {1, 5}) {
      // Queries at half scale flatten the scores, so the skipped blocks hold visible mass.
      const Workload w = decode_workload(t, hq, hkv, lq, lk, 5, 0.5f);
      for_each_target([&] {
        SCOPED_TRACE(std::string(dtype_name(t)) + " lq " + std::to_string(lq) + " target " +
                     simd_target_name() + (kernels::bf16_dot_supported() ? "" : " (bf16 dot off)"));
        Tensor out(DType::f32, hq, lq, 64);
        std::vector<float> lse(size_t(hq * lq));
        Stats st;
        SkipStats skip;
        skip.record_tiles = true;
        attention_decode(w.q, w.k, w.v, out, {}, {0.1, 4}, lse.data(), &st, &skip);
        // Enough is skipped that a wrong list could not pass.
        EXPECT_GT(skip.skipped_fraction(), 0.2);
        EXPECT_LT(skip.skipped_fraction(), 1.0);
        check_skip_layout(skip, st, hq, hkv, lq, lk);
        check_exact_coverage(w, out, lse, skip, st, true);
        // ... and the skipped blocks matter: full attention is far outside the tolerance.
        Tensor full(DType::f32, hq, lq, 64);
        attention_reference(w.q, w.k, w.v, full);
        EXPECT_GT(diff(out, full).max_abs, 100 * kTol);
      });
    }
}

// Chunks hold whole q heads, so the per-head lists stay exact when a group's rows take two
// chunks (group 16 x q_len 16 = 256 rows) or do not divide evenly by rows (group 9 x q_len 15
// = 135 rows: chunks of 5 and 4 heads).
TEST(DecodeSkipStats, ExactAcrossRowChunks) {
  struct Shape {
    int64_t hq, hkv, lq;
  };
  for (const Shape& s : {Shape{16, 1, 16}, Shape{9, 1, 15}}) {
    SCOPED_TRACE("hq " + std::to_string(s.hq) + " lq " + std::to_string(s.lq));
    const int64_t lk = 3000;
    const Workload w = decode_workload(DType::f32, s.hq, s.hkv, s.lq, lk, 9);
    Tensor out(DType::f32, s.hq, s.lq, 64);
    std::vector<float> lse(size_t(s.hq * s.lq));
    Stats st;
    SkipStats skip;
    skip.record_tiles = true;
    attention_decode(w.q, w.k, w.v, out, {}, {0.03, 4}, lse.data(), &st, &skip);
    EXPECT_GT(skip.skipped_fraction(), 0.1);
    check_exact_coverage(w, out, lse, skip, st, true);
    // Stats count per (kv head, chunk) unit; each q head of a unit carries the unit's counts.
    const int64_t chunks = row_chunks(s.hq / s.hkv, s.lq), blocks = (lk + 63) / 64;
    EXPECT_EQ(chunks, 2);
    EXPECT_EQ(st.tiles_visited, s.hkv * chunks * blocks);
    const int64_t per_chunk = (s.hq + chunks - 1) / chunks;
    int64_t unit_skipped = 0;
    for (int64_t h = 0; h < s.hq; ++h) {
      EXPECT_EQ(skip.visited[size_t(h)], blocks);
      const int64_t first = h / per_chunk * per_chunk;
      EXPECT_EQ(skip.skipped_tiles[size_t(h)], skip.skipped_tiles[size_t(first)]) << "head " << h;
      if (h == first) unit_skipped += skip.skipped[size_t(h)];
    }
    EXPECT_EQ(unit_skipped, st.tiles_skipped);
  }
}

TEST(DecodeSkipStats, SameForEveryThreadCount) {
  const Workload w = decode_workload(DType::bf16, 8, 2, 5, 3000);
  SkipStats first;
  Tensor first_out(DType::f32, 8, 5, 64);
  for (int threads : {1, 2}) {
    AttnOptions opt;
    opt.threads = threads;
    Tensor out(DType::f32, 8, 5, 64);
    SkipStats skip;
    skip.record_tiles = true;
    attention_decode(w.q, w.k, w.v, out, opt, {0.03, 4}, nullptr, nullptr, &skip);
    if (threads == 1) {
      EXPECT_GT(skip.skipped_fraction(), 0.2);
      first = skip;
      first_out = Tensor::copy_of(out);
      continue;
    }
    EXPECT_EQ(skip.visited, first.visited);
    EXPECT_EQ(skip.skipped, first.skipped);
    EXPECT_EQ(skip.skipped_tiles, first.skipped_tiles);
    EXPECT_EQ(std::memcmp(out.data(), first_out.data(), out.nbytes()), 0);
  }
}

// Recording changes nothing computed; without record_tiles only the counts are filled; at
// lambda 0 nothing is skipped; the layout is reset on every call.
TEST(DecodeSkipStats, RecordingChangesNoOutput) {
  const Workload w = decode_workload(DType::f32, 8, 2, 3, 3000);
  for (double lambda : {0.0, 0.03}) {
    Tensor plain(DType::f32, 8, 3, 64), counted(DType::f32, 8, 3, 64), listed(DType::f32, 8, 3, 64);
    Stats s0, s1, s2;
    SkipStats counts, lists;
    lists.record_tiles = true;
    attention_decode(w.q, w.k, w.v, plain, {}, {lambda, 4}, nullptr, &s0);
    attention_decode(w.q, w.k, w.v, counted, {}, {lambda, 4}, nullptr, &s1, &counts);
    attention_decode(w.q, w.k, w.v, listed, {}, {lambda, 4}, nullptr, &s2, &lists);
    EXPECT_EQ(std::memcmp(plain.data(), counted.data(), plain.nbytes()), 0) << lambda;
    EXPECT_EQ(std::memcmp(plain.data(), listed.data(), plain.nbytes()), 0) << lambda;
    EXPECT_EQ(s1.tiles_skipped, s0.tiles_skipped);
    EXPECT_EQ(s2.tiles_skipped, s0.tiles_skipped);
    EXPECT_FALSE(counts.record_tiles);
    EXPECT_TRUE(counts.skipped_tiles.empty());
    EXPECT_EQ(counts.visited, lists.visited);
    EXPECT_EQ(counts.skipped, lists.skipped);
    check_skip_layout(lists, s2, 8, 2, 3, 3000);
    if (lambda == 0)
      EXPECT_EQ(lists.skipped_fraction(), 0.0);
    else
      EXPECT_GT(lists.skipped_fraction(), 0.0);
  }
  // A SkipStats from an earlier, larger call is laid out afresh.
  SkipStats reused;
  reused.record_tiles = true;
  reused.heads = 99;
  reused.visited.assign(5, 7);
  Tensor out(DType::f32, 8, 3, 64);
  Stats st;
  attention_decode(w.q, w.k, w.v, out, {}, {0.03, 4}, nullptr, &st, &reused);
  check_skip_layout(reused, st, 8, 2, 3, 3000);
}

TEST(DecodeKernel, BadInputRaisesError) {
  auto expect_error = [](int64_t lq, DecodeOptions dopt, const char* what) {
    Tensor q = random_tensor(DType::f32, 2, std::max<int64_t>(lq, 1), 64, 1);
    TensorView qv = q.view();
    qv.seq = lq;
    Tensor k = random_tensor(DType::f32, 2, 100, 64, 2);
    Tensor out(DType::f32, 2, std::max<int64_t>(lq, 1), 64);
    TensorView ov = out.view();
    ov.seq = lq;
    try {
      attention_decode(qv, k, k, ov, {}, dopt);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error(0, {}, "q_len");
  expect_error(17, {}, "q_len");
  expect_error(1, {-0.1, 4}, "lambda");
  expect_error(1, {std::nan(""), 4}, "lambda");
  expect_error(1, {1.5, 4}, "lambda");
  expect_error(1, {0.5, 0}, "batch");
  expect_error(1, {0.5, 65}, "batch");
}

}  // namespace
}  // namespace spattn
