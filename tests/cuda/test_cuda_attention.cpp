// The CUDA kernels (spattn/cuda.hpp) against their plain twins on the host: the double
// reference (attention_reference) for dense, the CPU kernels for the sparse forms
// (block-sparse, query-sparse, BLASST: same outputs within bf16/f16 rounding, the same score
// entries, the same skipped tiles modulo ties), over both dtypes, head dims 64 and 128, GQA,
// causal and not, odd lengths, extreme logits and rows that see no key. Every test skips
// without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <cstdlib>
#include <string>
#include <vector>

#include "assets.hpp"
#include "device_buffers.hpp"
#include "cuda/device_buffers.hpp"
#include "cuda/text_workload.hpp"
#include "spattn/attention.hpp"
#include "spattn/blasst.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/merge.hpp"
#include "spattn/sparse_attention.hpp"
#include "spattn/workload.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

using test::DeviceFloats;
using test::DeviceTensor;
using test::text_workload;

// Output tolerance: rounding of P and of the output to the input dtype, relative to the largest
// |v| (an output row is a convex combination of v rows).
double out_tol(DType t) { return t == DType::bf16 ? 1.6e-2 : 2.5e-3; }

void expect_close(const Tensor& got, const Tensor& ref, const std::vector<float>& lse,
                  const std::vector<float>& lse_ref, DType t, const std::string& what) {
  const test::Diff d = test::diff(got.view(), ref.view());
  EXPECT_LE(d.max_abs, out_tol(t) * std::max(1.0, d.ref_max)) << what;
  ASSERT_EQ(lse.size(), lse_ref.size());
  int bad = 0;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lse_ref[i])) {
      bad += !(std::isinf(lse[i]) && lse[i] < 0);
    } else {
      bad += !(std::abs(lse[i] - lse_ref[i]) <= 2e-3 * std::max(1.0f, std::abs(lse_ref[i])));
    }
  }
  EXPECT_EQ(bad, 0) << what << ": LSE rows off";
}

struct Case {
  DType t;
  int64_t d, hq, hkv, lq, lkv;
  bool causal;
  float q_sigma = 1.0f;
};
std::string name(const Case& c) {
  return std::string(dtype_name(c.t)) + " d" + std::to_string(c.d) + " " + std::to_string(c.hq) +
         "/" + std::to_string(c.hkv) + " heads " + std::to_string(c.lq) + "x" +
         std::to_string(c.lkv) + (c.causal ? " causal" : " full") +
         (c.q_sigma != 1.0f ? " q_sigma " + std::to_string(c.q_sigma) : "");
}

std::vector<Case> dense_cases() {
  std::vector<Case> cs;
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128})
      for (bool causal : {true, false}) {
        cs.push_back({t, d, 4, 2, 77, 77, causal});
        cs.push_back({t, d, 2, 2, 1, 1, causal});
        cs.push_back({t, d, 4, 1, 130, 333, causal});  // prefix: queries are the last rows
        if (!causal) cs.push_back({t, d, 2, 1, 200, 100, causal});  // more queries than keys
        cs.push_back({t, d, 8, 2, 3, 1000, causal});                // decode-like
        cs.push_back({t, d, 2, 2, 129, 129, causal});
      }
  // Extreme logits: scores in the thousands (bf16 keeps the range; f16 would overflow q).
  cs.push_back({DType::bf16, 128, 2, 1, 150, 150, true, 60.0f});
  cs.push_back({DType::bf16, 64, 2, 2, 100, 300, false, 60.0f});
  return cs;
}

TEST(CudaAttention, DenseMatchesDoubleReference) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 1;
  for (const Case& c : dense_cases()) {
    const Tensor q = test::random_tensor(c.t, c.hq, c.lq, c.d, seed++, c.q_sigma);
    const Tensor k = test::random_tensor(c.t, c.hkv, c.lkv, c.d, seed++);
    const Tensor v = test::random_tensor(c.t, c.hkv, c.lkv, c.d, seed++);
    AttnOptions opt;
    opt.causal = c.causal;
    Tensor ref(DType::f32, c.hq, c.lq, c.d);
    std::vector<float> lse_ref(size_t(c.hq * c.lq));
    attention_reference(q, k, v, ref, opt, lse_ref.data());

    DeviceTensor dq(q), dk(k), dv(v), dout(c.t, c.hq, c.lq, c.d);
    DeviceFloats dlse(size_t(c.hq * c.lq));
    Stats st;
    cuda::attention_dense(dq.view, dk.view, dv.view, dout.view, opt, dlse.ptr, &st);
    expect_close(dout.to_host(), ref, dlse.to_host(), lse_ref, c.t, name(c));
    Stats cpu;
    Tensor cpu_out(DType::f32, c.hq, c.lq, c.d);
    attention_dense(q, k, v, cpu_out, opt, nullptr, &cpu);
    EXPECT_EQ(st.score_entries, cpu.score_entries) << name(c);
    EXPECT_EQ(st.causal_entries, cpu.causal_entries) << name(c);
  }
}

TEST(CudaAttention, StridedViewsAndNonDefaultScale) {
  SKIP_WITHOUT_GPU();
  // [seq, heads, dim] buffers, as models keep QKV, read in place.
  const int64_t hq = 4, hkv = 2, l = 150, d = 64;
  const Tensor q = test::random_tensor(DType::bf16, 1, l, hq * d, 5);
  const Tensor k = test::random_tensor(DType::bf16, 1, l, hkv * d, 6);
  const Tensor v = test::random_tensor(DType::bf16, 1, l, hkv * d, 7);
  auto shd = [&](const Tensor& x, int64_t h) {
    return TensorView::shd(x.data(), DType::bf16, h, l, d);
  };
  AttnOptions opt;
  opt.scale = 0.3f;
  Tensor ref(DType::f32, hq, l, d);
  std::vector<float> lse_ref(size_t(hq * l));
  attention_reference(shd(q, hq), shd(k, hkv), shd(v, hkv), ref, opt, lse_ref.data());
  DeviceTensor dq(q), dk(k), dv(v), dout(DType::bf16, 1, l, hq * d);
  DeviceFloats dlse(size_t(hq * l));
  auto dshd = [&](const DeviceTensor& x, int64_t h) {
    return TensorView::shd(x.ptr, DType::bf16, h, l, d);
  };
  cuda::attention_dense(dshd(dq, hq), dshd(dk, hkv), dshd(dv, hkv), dshd(dout, hq), opt, dlse.ptr);
  const Tensor got_shd = dout.to_host();
  Tensor got(DType::f32, hq, l, d);
  copy_into(TensorView::shd(got_shd.data(), DType::bf16, hq, l, d), got);
  expect_close(got, ref, dlse.to_host(), lse_ref, DType::bf16, "shd views");
}

// A random block mask with about `density` of the causal blocks, always the diagonal one, and
// some query blocks with nothing at all.
BlockMask random_mask(int64_t heads, int64_t lq, int64_t lkv, int64_t bq, int64_t bk, bool causal,
                      double density, uint64_t seed) {
  BlockMask full = BlockMask::full(heads, lq, lkv, bq, bk, causal);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::vector<int32_t>> lists;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t qb = 0; qb < full.n_qb(); ++qb) {
      std::vector<int32_t> l;
      const auto row = full.row(h, qb);
      const bool empty = u(rng) < 0.1;
      for (size_t i = 0; i < row.size(); ++i)
        if (!empty && (i + 1 == row.size() || u(rng) < density)) l.push_back(row[i]);
      lists.push_back(l);
    }
  BlockMask m = BlockMask::from_lists(heads, lq, lkv, bq, bk, causal, lists);
  m.validate();
  return m;
}

TEST(CudaAttention, BlockSparseMatchesCpuKernel) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128})
      for (bool causal : {true, false})
        for (auto [bq, bk] :
             {std::pair<int64_t, int64_t>{64, 64}, {128, 64}, {64, 128}, {128, 128}}) {
          const int64_t hq = 4, hkv = 2, lq = 333, lkv = causal ? 461 : 333;
          const Tensor q = test::random_tensor(t, hq, lq, d, seed++);
          const Tensor k = test::random_tensor(t, hkv, lkv, d, seed++);
          const Tensor v = test::random_tensor(t, hkv, lkv, d, seed++);
          const BlockMask mask = random_mask(hq, lq, lkv, bq, bk, causal, 0.4, seed++);
          AttnOptions opt;
          opt.causal = causal;
          opt.bf16_dot = false;  // the CPU twin in f32 arithmetic
          Tensor ref(DType::f32, hq, lq, d);
          std::vector<float> lse_ref(size_t(hq * lq));
          Stats cpu;
          attention_block_sparse(q, k, v, ref, mask, opt, lse_ref.data(), &cpu);
          DeviceTensor dq(q), dk(k), dv(v), dout(t, hq, lq, d);
          DeviceFloats dlse(size_t(hq * lq));
          Stats gpu;
          cuda::attention_block_sparse(dq.view, dk.view, dv.view, dout.view, mask, opt, dlse.ptr,
                                       &gpu);
          const std::string what = std::string(dtype_name(t)) + " d" + std::to_string(d) +
                                   (causal ? " causal " : " full ") + std::to_string(bq) + "x" +
                                   std::to_string(bk);
          expect_close(dout.to_host(), ref, dlse.to_host(), lse_ref, t, what);
          EXPECT_EQ(gpu.score_entries, cpu.score_entries) << what;
        }
}

TEST(CudaAttention, QuerySparseMatchesCpuKernel) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 300;
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128})
      for (bool causal : {true, false})
        for (int kind = 0; kind < 2; ++kind) {
          const int64_t hq = 4, hkv = 2, lq = 333, lkv = causal ? 461 : 333;
          // Every 16th row (MOMO's gamma) and the last, or a random subset of 150 rows.
          std::vector<int64_t> rows;
          if (kind == 0) {
            rows = strided_rows(lq, 16);
          } else {
            std::mt19937_64 rng(seed);
            for (int64_t r = 0; r < lq; ++r)
              if (rng() % 20 < 9) rows.push_back(r);
          }
          const int64_t n = int64_t(rows.size());
          const Tensor q = test::random_tensor(t, hq, lq, d, seed++);
          const Tensor k = test::random_tensor(t, hkv, lkv, d, seed++);
          const Tensor v = test::random_tensor(t, hkv, lkv, d, seed++);
          AttnOptions opt;
          opt.causal = causal;
          opt.bf16_dot = false;
          Tensor ref(DType::f32, hq, n, d);
          std::vector<float> lse_ref(size_t(hq * n));
          Stats cpu;
          attention_query_sparse(q, k, v, rows, ref, opt, lse_ref.data(), nullptr, &cpu);
          DeviceTensor dq(q), dk(k), dv(v), dout(t, hq, n, d);
          DeviceFloats dlse(size_t(hq * n));
          Stats gpu;
          cuda::attention_query_sparse(dq.view, dk.view, dv.view, rows, dout.view, opt, dlse.ptr,
                                       &gpu);
          const std::string what = std::string(dtype_name(t)) + " d" + std::to_string(d) +
                                   (causal ? " causal" : " full") +
                                   (kind == 0 ? " strided" : " random") + " rows";
          expect_close(dout.to_host(), ref, dlse.to_host(), lse_ref, t, what);
          EXPECT_EQ(gpu.score_entries, cpu.score_entries) << what;
          EXPECT_EQ(gpu.causal_entries, cpu.causal_entries) << what;
        }
}

TEST(CudaAttention, BlasstLambdaZeroIsTheDenseKernel) {
  SKIP_WITHOUT_GPU();
  const Workload w = text_workload(700, 128, 3);
  DeviceTensor dq(w.q), dk(w.k), dv(w.v), a(DType::bf16, 4, 700, 128), b(DType::bf16, 4, 700, 128);
  DeviceFloats la(4 * 700), lb(4 * 700);
  cuda::attention_dense(dq.view, dk.view, dv.view, a.view, {}, la.ptr);
  Stats st;
  cuda::attention_blasst(dq.view, dk.view, dv.view, b.view, 0.0, {}, lb.ptr, &st);
  const Tensor ha = a.to_host(), hb = b.to_host();
  EXPECT_EQ(std::memcmp(ha.data(), hb.data(), ha.nbytes()), 0);
  EXPECT_EQ(la.to_host(), lb.to_host());
  EXPECT_EQ(st.tiles_skipped, 0);
}

// The GPU and the CPU skip the same tiles; a decision may differ only where the margin sits
// within rounding of ln(lambda) (the scores differ in the last bits): counted, and few.
// SPATTN_CUDA_BLASST_ROWS for the scope of one check (the library reads it at each call).
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// Both tile heights: 128 rows (two groups sharing their tiles) and 64 (one group a block,
// SPATTN_CUDA_BLASST_ROWS=64), each group's decisions the CPU's.
TEST(CudaAttention, BlasstSkipsTheCpuTiles) {
  SKIP_WITHOUT_GPU();
  for (const char* rows : {static_cast<const char*>(nullptr), "64"})
    for (BlasstOrder order : {BlasstOrder::in_order, BlasstOrder::local_first})
      for (int64_t d : {64, 128}) {
        const ScopedEnv env("SPATTN_CUDA_BLASST_ROWS", rows);
        const Workload w = text_workload(2000, d, 7);
        for (double lambda : {1e-4, 1e-2}) {
          AttnOptions opt;
          opt.bf16_dot = false;
          Tensor ref(DType::f32, 4, 2000, d);
          std::vector<float> lse_ref(4 * 2000);
          SkipStats cpu;
          cpu.record_tiles = true;
          Stats cst;
          attention_blasst(w.q, w.k, w.v, ref, lambda, opt, lse_ref.data(), &cst, &cpu, order);
          DeviceTensor dq(w.q), dk(w.k), dv(w.v), dout(DType::bf16, 4, 2000, d);
          DeviceFloats dlse(4 * 2000);
          SkipStats gpu;
          gpu.record_tiles = true;
          Stats gst;
          cuda::attention_blasst(dq.view, dk.view, dv.view, dout.view, lambda, opt, dlse.ptr, &gst,
                                 &gpu, order);
          const std::string what = std::string(blasst_order_name(order)) + " d" +
                                   std::to_string(d) + " lambda " + std::to_string(lambda) +
                                   " rows " + (rows ? rows : "128");
          ASSERT_EQ(gpu.visited.size(), cpu.visited.size()) << what;
          EXPECT_EQ(gpu.visited, cpu.visited) << what;
          int64_t differ = 0;
          for (size_t i = 0; i < cpu.skipped_tiles.size(); ++i) {
            const std::set<int32_t> a(cpu.skipped_tiles[i].begin(), cpu.skipped_tiles[i].end());
            const std::set<int32_t> b(gpu.skipped_tiles[i].begin(), gpu.skipped_tiles[i].end());
            for (int32_t x : a) differ += !b.count(x);
            for (int32_t x : b) differ += !a.count(x);
          }
          std::printf(
              "[ BLASST  ] %s: skipped %lld of %lld tiles (CPU %lld), %lld decisions differ\n",
              what.c_str(), (long long)gst.tiles_skipped, (long long)gst.tiles_visited,
              (long long)cst.tiles_skipped, (long long)differ);
          EXPECT_GT(cst.tiles_skipped, 0) << what;
          EXPECT_LE(differ, std::max<int64_t>(2, cst.tiles_visited / 200)) << what;
          if (differ == 0) {
            expect_close(dout.to_host(), ref, dlse.to_host(), lse_ref, DType::bf16, what);
            EXPECT_EQ(gst.score_entries, cst.score_entries) << what;
          }
        }
      }
}

// local_first is the CPU's order for every 64-row group, also the first of a 128-row kernel
// block, whose diagonal tile the block's shared order reaches only after the sink. A sink that
// outscores every other key by far: the CPU keeps each group's diagonal (its first tile) and
// the sink and skips the rest, every margin far from ln(lambda), so no decision is a rounding
// tie and none may differ.
TEST(CudaAttention, BlasstLocalFirstKeepsEachGroupsDiagonal) {
  SKIP_WITHOUT_GPU();
  const int64_t L = 1000, d = 64;
  Tensor q = test::random_tensor(DType::bf16, 2, L, d, 11, 0.1f);
  Tensor k = test::random_tensor(DType::bf16, 1, L, d, 12, 0.1f);
  const Tensor v = test::random_tensor(DType::bf16, 1, L, d, 13);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < d; ++j) q.view().set(h, i, j, q.view().get(h, i, j) + 0.5f);
  for (int64_t j = 0; j < d; ++j) k.view().set(0, 0, j, 4.0f);  // q.k_0 / sqrt(d) ~ 16
  const double lambda = 1e-2;                                   // ln: -4.6
  AttnOptions opt;
  opt.bf16_dot = false;
  Tensor ref(DType::f32, 2, L, d);
  std::vector<float> lse_ref(2 * L);
  SkipStats cpu, gpu;
  cpu.record_tiles = gpu.record_tiles = true;
  Stats cst, gst;
  attention_blasst(q, k, v, ref, lambda, opt, lse_ref.data(), &cst, &cpu, BlasstOrder::local_first);
  DeviceTensor dq(q), dk(k), dv(v), dout(DType::bf16, 2, L, d);
  DeviceFloats dlse(2 * L);
  cuda::attention_blasst(dq.view, dk.view, dv.view, dout.view, lambda, opt, dlse.ptr, &gst, &gpu,
                         BlasstOrder::local_first);
  // Per 64-row tile t (its diagonal is key tile t), in both heads: every tile but t and 0.
  int64_t want = 0;
  for (int64_t t = 0; t < (L + 63) / 64; ++t) want += 2 * std::max<int64_t>(0, t - 1);
  EXPECT_EQ(cst.tiles_skipped, want);
  EXPECT_EQ(gpu.visited, cpu.visited);
  ASSERT_EQ(gpu.skipped_tiles.size(), cpu.skipped_tiles.size());
  int64_t differ = 0;
  for (size_t i = 0; i < cpu.skipped_tiles.size(); ++i)
    differ += gpu.skipped_tiles[i] != cpu.skipped_tiles[i];
  EXPECT_EQ(differ, 0) << "query tiles whose skipped key tiles differ from the CPU's";
  EXPECT_EQ(gst.tiles_skipped, cst.tiles_skipped);
  expect_close(dout.to_host(), ref, dlse.to_host(), lse_ref, DType::bf16, "sink-dominated");
}

TEST(CudaAttention, MergeMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::bf16, DType::f16, DType::f32}) {
    const Tensor a = test::random_tensor(t, 3, 37, 64, 1), b = test::random_tensor(t, 3, 37, 64, 2);
    std::vector<float> la(3 * 37), lb(3 * 37);
    std::mt19937_64 rng(3);
    std::normal_distribution<float> n(0.f, 3.f);
    for (size_t i = 0; i < la.size(); ++i) la[i] = n(rng), lb[i] = n(rng);
    la[0] = -INFINITY;          // one side empty
    la[1] = lb[1] = -INFINITY;  // both empty
    Tensor ref(t, 3, 37, 64);
    std::vector<float> lref(la.size());
    merge_attention(a, la.data(), b, lb.data(), ref, lref.data());
    DeviceTensor da(a), db(b);
    DeviceFloats dla(la), dlb(lb);
    // In place into a, as the CPU merge allows.
    cuda::merge_attention(da.view, dla.ptr, db.view, dlb.ptr, da.view, dla.ptr);
    const Tensor got = da.to_host();
    const std::vector<float> lgot = dla.to_host();
    const test::Diff d = test::diff(got.view(), ref.view());
    EXPECT_LE(d.max_abs, (t == DType::f32 ? 1e-5 : out_tol(t)) * std::max(1.0, d.ref_max))
        << dtype_name(t);
    for (size_t i = 0; i < lref.size(); ++i) {
      if (std::isinf(lref[i]))
        EXPECT_TRUE(std::isinf(lgot[i]) && lgot[i] < 0) << i;
      else
        EXPECT_NEAR(lgot[i], lref[i], 1e-5 * std::max(1.f, std::abs(lref[i]))) << i;
    }
  }
}

TEST(CudaAttention, BadInputIsANamedError) {
  SKIP_WITHOUT_GPU();
  const Tensor q = test::random_tensor(DType::bf16, 2, 10, 64, 1);
  DeviceTensor dq(q), dk(q), dv(q), dout(DType::bf16, 2, 10, 64);
  auto expect_error = [](auto&& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one naming '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // A host tensor where a device one is needed.
  expect_error([&] { cuda::attention_dense(q, dk.view, dv.view, dout.view); }, "host tensor");
  // Unsupported head dim and dtype.
  const Tensor q96 = test::random_tensor(DType::bf16, 2, 10, 96, 1);
  DeviceTensor d96(q96);
  expect_error([&] { cuda::attention_dense(d96.view, d96.view, d96.view, d96.view); },
               "head dim 64 or 128");
  const Tensor q32 = test::random_tensor(DType::f32, 2, 10, 64, 1);
  DeviceTensor d32(q32);
  expect_error([&] { cuda::attention_dense(d32.view, d32.view, d32.view, d32.view); },
               "bf16 or f16");
  expect_error([&] { cuda::attention_blasst(dq.view, dk.view, dv.view, dout.view, 1.5); },
               "lambda");
  // A host LSE array.
  std::vector<float> lse(20);
  expect_error([&] { cuda::attention_dense(dq.view, dk.view, dv.view, dout.view, {}, lse.data()); },
               "lse");
  // Causal attention with more queries than keys (the CPU refuses it too).
  const Tensor q20 = test::random_tensor(DType::bf16, 2, 20, 64, 1);
  DeviceTensor d20(q20), d20o(DType::bf16, 2, 20, 64);
  expect_error([&] { cuda::attention_dense(d20.view, dk.view, dv.view, d20o.view); },
               "q_len <= kv_len");
  // Query-sparse rows out of order, and an out of the wrong row count.
  expect_error(
      [&] {
        cuda::attention_query_sparse(dq.view, dk.view, dv.view, {3, 2}, dout.view);
      },
      "strictly increasing");
  expect_error(
      [&] {
        cuda::attention_query_sparse(dq.view, dk.view, dv.view, {1, 2}, dout.view);
      },
      "out");
  // A mask of another geometry.
  const BlockMask m = BlockMask::full(2, 20, 20, 64, 64, true);
  expect_error([&] { cuda::attention_block_sparse(dq.view, dk.view, dv.view, dout.view, m); },
               "mask");
  // Nothing was left broken: a good call still runs.
  EXPECT_NO_THROW(cuda::attention_dense(dq.view, dk.view, dv.view, dout.view));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace spattn
