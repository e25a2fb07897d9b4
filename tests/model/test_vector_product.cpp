// Decode's one-row products (src/model/vector_product.hpp) and the range claims that split
// their rows (src/core/range_claims.hpp): every index exactly once on any thread count, over
// many calls on one object (nothing is reset between calls), with a delayed thread's range
// finished by the others; and each output with the bits of ggml's own one-row mul_mat for
// every weight type, thread count and row count, for one token's chosen experts with the bits
// of ggml's mul_mat_id, and for a batch of planes (one row each) with the bits of ggml's
// mul_mat.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/range_claims.hpp"
#include "core/thread_pool.hpp"
#include "ggml-cpu.h"
#include "ggml.h"
#include "model/vector_product.hpp"

namespace spattn {
namespace {

TEST(RangeClaims, EveryIndexOnceOverManyCallsOnOneObject) {
  // (piece 0: a row longer than a claim's bytes; the claims take one index at a time.)
  RangeClaims claims;  // one object through every call, as a graph node keeps it
  for (int threads : {1, 2, 3, 5})
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(64), int64_t(1001)})
      for (int64_t piece : {int64_t(0), int64_t(1), int64_t(3), int64_t(16), int64_t(5000)}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> bad{0};
        ThreadPool::get().run(threads, [&](int ith, int nth) {
          claims.run(n, piece, ith, nth, [&](int64_t b, int64_t e) {
            if (b < 0 || e > n || b >= e || e - b > std::max<int64_t>(piece, 1)) bad.fetch_add(1);
            for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
          });
        });
        EXPECT_EQ(bad.load(), 0) << threads << " threads, n " << n << ", piece " << piece;
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[size_t(i)].load(), 1)
              << "index " << i << ", " << threads << " threads, n " << n << ", piece " << piece;
      }
}

TEST(RangeClaims, TheOthersFinishADelayedThreadsRange) {
  // Thread 0 starts late: the others take its range's pieces from the back, so some of the
  // first half's indices run on another thread, and still each exactly once.
  RangeClaims claims;
  const int64_t n = 400;
  for (int round = 0; round < 3; ++round) {
    std::vector<std::atomic<int>> hits(n), by(n);
    ThreadPool::get().run(2, [&](int ith, int nth) {
      if (ith == 0 && nth == 2) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      claims.run(n, 4, ith, nth, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          hits[size_t(i)].fetch_add(1);
          by[size_t(i)].store(ith);
        }
      });
    });
    int64_t taken = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(hits[size_t(i)].load(), 1) << i;
      taken += i < n / 2 && by[size_t(i)].load() == 1;
    }
    if (ThreadPool::get().size() >= 2) {
      EXPECT_GT(taken, 0) << "round " << round;
    }
  }
}

// ggml's result `want` and the node's `got` computed in one graph, three times (the same node
// again: its claims ready for each call), every output bit for bit; frees ctx. `what` names the
// case in a failure.
template <class What>
void expect_same_bits(ggml_context* ctx, ggml_tensor* want, ggml_tensor* got, int threads,
                      What what) {
  ggml_cgraph* g = ggml_new_graph(ctx);
  ggml_build_forward_expand(g, want);
  ggml_build_forward_expand(g, got);
  for (int call = 0; call < 3; ++call) {
    std::memset(got->data, 0xff, ggml_nbytes(got));
    ThreadPool::get().compute(g, threads);
    for (int64_t i = 0; i < ggml_nelements(want); ++i) {
      const float a = static_cast<const float*>(got->data)[i];
      const float b = static_cast<const float*>(want->data)[i];
      ASSERT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b))
          << what() << " threads " << threads << " call " << call << ": output " << i << " " << a
          << " against ggml's " << b;
    }
  }
  ggml_free(ctx);
}

// A ggml context allocating in meta: room for `floats` values of tensors, and ggml's objects.
ggml_context* context_in(std::vector<uint8_t>& meta, int64_t floats) {
  meta.assign(size_t(floats) * sizeof(float) + (size_t(1) << 20), 0);
  ggml_init_params ip{meta.size(), meta.data(), false};
  return ggml_init(ip);
}

// A [k, m, planes] tensor of `type` in ctx, its values normal draws from rng, with one extreme
// weight (the f16 / q8 rounding paths see a large scale) at the start of plane 1 (of plane 0
// where it is the only one).
ggml_tensor* random_planes(ggml_context* ctx, ggml_type type, int64_t k, int64_t m, int64_t planes,
                           std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(k * m * planes));
  for (float& v : wf) v = nd(rng);
  wf[planes > 1 ? size_t(k * m) : 0] = 60000.0f;
  ggml_tensor* w = ggml_new_tensor_3d(ctx, type, k, m, planes);
  if (type == GGML_TYPE_F32)
    std::memcpy(w->data, wf.data(), wf.size() * sizeof(float));
  else
    ggml_quantize_chunk(type, wf.data(), w->data, 0, m * planes, k, nullptr);
  return w;
}

// ggml's mul_mat of w by x and `node` (vector_product or plane_vector_product, which `applies`
// must take) over the same, in one graph, bit for bit; frees ctx.
using Applies = bool (*)(const model::Model::Weight&, const ggml_tensor*, int);
using Node = ggml_tensor* (*)(ggml_context*, const model::Model::Weight&, ggml_tensor*,
                              std::deque<RangeClaims>&);
template <class What>
void expect_mul_mat_bits(ggml_context* ctx, ggml_tensor* w, ggml_tensor* x, int threads,
                         Applies applies, Node node, What what) {
  model::Model::Weight mw;
  mw.t = w;
  ASSERT_TRUE(applies(mw, x, threads));
  std::deque<RangeClaims> claims;
  ggml_tensor* want = ggml_mul_mat(ctx, w, x);
  ggml_tensor* got = node(ctx, mw, x, claims);
  ASSERT_TRUE(ggml_are_same_shape(want, got));
  expect_same_bits(ctx, want, got, threads, what);
}

// ggml's own one-row mul_mat and vector_product over the same weights and row, in one graph.
void expect_ggml_bits(ggml_type type, int64_t k, int64_t m, int threads, std::mt19937& rng) {
  // The tensors' bytes (weights at most f32) and ggml's objects: a buffer zeroed per call.
  std::vector<uint8_t> meta;
  ggml_context* ctx = context_in(meta, k * (m + 2) + m * 2);
  ASSERT_NE(ctx, nullptr);
  ggml_tensor* w = random_planes(ctx, type, k, m, 1, rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> xf(static_cast<size_t>(k));
  for (float& v : xf) v = nd(rng);
  ggml_tensor* x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, 1);
  std::memcpy(x->data, xf.data(), xf.size() * sizeof(float));
  expect_mul_mat_bits(ctx, w, x, threads, model::vector_product_applies, model::vector_product,
                      [&] {
                        return std::string(ggml_type_name(type)) + " k " + std::to_string(k) +
                               " m " + std::to_string(m);
                      });
}

TEST(VectorProduct, GgmlsBitsForEveryTypeThreadCountAndRowCount) {
  const ggml_type types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,    GGML_TYPE_BF16,  GGML_TYPE_Q8_0,
                             GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,   GGML_TYPE_Q5_0,  GGML_TYPE_Q5_1,
                             GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,   GGML_TYPE_Q4_K,  GGML_TYPE_Q5_K,
                             GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};
  std::mt19937 rng(7);
  for (ggml_type t : types)
    for (int threads : {1, 2, 3})
      for (int64_t m : {int64_t(1), int64_t(37), int64_t(301)})
        expect_ggml_bits(t, 512, m, threads, rng);
  // A matrix larger than one claim (32 KB) per thread, so the pieces are many.
  expect_ggml_bits(GGML_TYPE_F16, 2048, 200, 2, rng);
}

// ggml's mul_mat_id for one token and expert_vector_product over the same experts' planes,
// chosen experts (in the router's order, not sorted) and input rows: one row every expert reads
// (x_rows 1) or one a chosen expert (x_rows = chosen), in one graph, called three times.
void expect_expert_bits(ggml_type type, int64_t k, int64_t m, int64_t n_expert,
                        const std::vector<int32_t>& chosen, int64_t x_rows, int threads,
                        std::mt19937& rng) {
  std::vector<uint8_t> meta;
  ggml_context* ctx =
      context_in(meta, k * (m * n_expert + 2 * x_rows) + 2 * m * int64_t(chosen.size()));
  ASSERT_NE(ctx, nullptr);
  ggml_tensor* w = random_planes(ctx, type, k, m, n_expert, rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> xf(size_t(k * x_rows));
  for (float& v : xf) v = nd(rng);
  ggml_tensor* x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, k, x_rows, 1);
  std::memcpy(x->data, xf.data(), xf.size() * sizeof(float));
  ggml_tensor* ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, int64_t(chosen.size()), 1);
  std::memcpy(ids->data, chosen.data(), chosen.size() * sizeof(int32_t));
  model::Model::Weight mw;
  mw.t = w;
  mw.experts = true;
  ASSERT_TRUE(model::expert_vector_product_applies(mw, x, ids, threads));
  std::deque<RangeClaims> claims;
  ggml_tensor* want = ggml_mul_mat_id(ctx, w, x, ids);
  ggml_tensor* got = model::expert_vector_product(ctx, mw, x, ids, claims);
  ASSERT_TRUE(ggml_are_same_shape(want, got));
  expect_same_bits(ctx, want, got, threads, [&] {
    return std::string(ggml_type_name(type)) + " m " + std::to_string(m) + " chosen " +
           std::to_string(chosen.size()) + " x rows " + std::to_string(x_rows);
  });
}

TEST(VectorProduct, ChosenExpertsHaveGgmlsMulMatIdBits) {
  const ggml_type types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,    GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                             GGML_TYPE_Q4_0, GGML_TYPE_Q5_1,   GGML_TYPE_Q3_K, GGML_TYPE_Q4_K,
                             GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4};
  std::mt19937 rng(11);
  const std::vector<int32_t> one = {3}, some = {5, 1, 6}, all = {2, 0, 7, 1, 3, 6, 4, 5};
  for (ggml_type t : types)
    for (int threads : {1, 2, 3})
      for (const auto* chosen : {&one, &some, &all})
        for (int64_t x_rows : {int64_t(1), int64_t(chosen->size())})
          for (int64_t m : {int64_t(1), int64_t(45)})
            expect_expert_bits(t, 256, m, 8, *chosen, x_rows, threads, rng);
  // Experts larger than one claim (32 KB) per thread.
  expect_expert_bits(GGML_TYPE_Q8_0, 2048, 96, 4, {2, 0}, 2, 2, rng);
}

// ggml's mul_mat over a batch of planes, one row of x a plane, and plane_vector_product over the
// same weights and rows, the rows read as the latent attention reads them: each plane's row a
// strided piece of one token's heads (head h's k values at h * row_stride floats, the rest of
// its row in between), viewed [k, 1, planes] as llama.cpp's permute gives them.
void expect_plane_bits(ggml_type type, int64_t k, int64_t m, int64_t planes, int64_t row_stride,
                       int threads, std::mt19937& rng) {
  std::vector<uint8_t> meta;
  ggml_context* ctx = context_in(meta, k * m * planes + row_stride * planes + 2 * m * planes);
  ASSERT_NE(ctx, nullptr);
  ggml_tensor* w = random_planes(ctx, type, k, m, planes, rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ggml_tensor* token = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, row_stride * planes, 1);
  for (int64_t i = 0; i < row_stride * planes; ++i) static_cast<float*>(token->data)[i] = nd(rng);
  ggml_tensor* heads = ggml_view_3d(ctx, token, k, planes, 1, size_t(row_stride) * sizeof(float),
                                    size_t(row_stride * planes) * sizeof(float), 0);
  ggml_tensor* x = ggml_permute(ctx, heads, 0, 2, 1, 3);  // [k, 1, planes]
  expect_mul_mat_bits(ctx, w, x, threads, model::plane_vector_product_applies,
                      model::plane_vector_product, [&] {
                        return std::string(ggml_type_name(type)) + " k " + std::to_string(k) +
                               " m " + std::to_string(m) + " planes " + std::to_string(planes);
                      });
}

TEST(VectorProduct, EachPlanesOwnRowHasGgmlsMulMatBits) {
  const ggml_type types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16,
                             GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K};
  std::mt19937 rng(13);
  for (ggml_type t : types)
    for (int threads : {1, 2, 3})
      for (int64_t planes : {int64_t(1), int64_t(5)})
        for (int64_t m : {int64_t(1), int64_t(70)}) {
          expect_plane_bits(t, 256, m, planes, 256, threads, rng);  // rows back to back
          expect_plane_bits(t, 256, m, planes, 320, threads, rng);  // q_nope's: rope between
        }
  // The latent attention's Wk_b and Wv_b as DeepSeek V3 has them (128 heads; nope 128 of each
  // head's 192 values; latent 512), Q8_0: many planes to a claim, and rows of 512.
  expect_plane_bits(GGML_TYPE_Q8_0, 128, 512, 128, 192, 2, rng);
  expect_plane_bits(GGML_TYPE_Q8_0, 512, 128, 128, 512, 2, rng);
}

TEST(VectorProduct, LeavesWhatItDoesNotCover) {
  std::vector<uint8_t> meta(1 << 20);
  ggml_init_params ip{meta.size(), meta.data(), true};
  ggml_context* ctx = ggml_init(ip);
  model::Model::Weight mw;
  mw.t = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, 64, 8);
  ggml_tensor* one = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 64, 1);
  ggml_tensor* two = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 64, 2);
  EXPECT_TRUE(model::vector_product_applies(mw, one, 2));
  EXPECT_FALSE(model::vector_product_applies(mw, two, 2));  // prefill's products are others'
  EXPECT_FALSE(model::vector_product_applies(mw, one, RangeClaims::kMaxThreads + 1));
  mw.repacked = true;  // ggml's repacked layout has its own vector products
  EXPECT_FALSE(model::vector_product_applies(mw, one, 2));
  // Experts: one token's rows only, not repacked.
  model::Model::Weight ew;
  ew.t = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, 64, 8, 4);
  ew.experts = true;
  ggml_tensor* ids1 = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 2, 1);
  ggml_tensor* ids2 = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 2, 2);  // two tokens: prefill
  ggml_tensor* x3 = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 64, 3, 1);
  EXPECT_TRUE(model::expert_vector_product_applies(ew, one, ids1, 2));
  EXPECT_TRUE(model::expert_vector_product_applies(ew, two, ids1, 2));  // a row per expert
  EXPECT_FALSE(model::expert_vector_product_applies(ew, one, ids2, 2));
  EXPECT_FALSE(model::expert_vector_product_applies(ew, x3, ids1, 2));
  ew.repacked = true;
  EXPECT_FALSE(model::expert_vector_product_applies(ew, one, ids1, 2));
  // Planes: one row a plane, as many rows as planes; not experts' planes.
  model::Model::Weight pw;
  pw.t = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, 64, 8, 4);
  ggml_tensor* row_a_plane = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 64, 1, 4);
  ggml_tensor* two_a_plane = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 64, 2, 4);  // prefill
  ggml_tensor* fewer = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 64, 1, 3);
  EXPECT_TRUE(model::plane_vector_product_applies(pw, row_a_plane, 2));
  EXPECT_FALSE(model::plane_vector_product_applies(pw, two_a_plane, 2));
  EXPECT_FALSE(model::plane_vector_product_applies(pw, fewer, 2));
  model::Model::Weight experts_planes = pw;
  experts_planes.experts = true;
  EXPECT_FALSE(model::plane_vector_product_applies(experts_planes, row_a_plane, 2));
  ggml_free(ctx);
}

}  // namespace
}  // namespace spattn
