// Decode's one-row products: ggml's mul_mat against spattn's node (model/vector_product), the
// same vector dot products with the rows split differently, over four Llama-3.2-1B layers'
// matrices (q, k, v, o, gate, up, down: 464 MB in f16, far past the caches), one graph each,
// on the process's pool as the runner runs them; and the ceiling: the same bytes read with
// plain vector loads, one contiguous half per thread. GB/s counts the weights' bytes.
// impl 0: ggml; impl 1: spattn's node (q8_0: eight rows at a time, kernels/q8_0_dot_rows.hpp);
// impl 2: the plain read.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <vector>

#include "bench_common.hpp"
#include "core/range_claims.hpp"
#include "core/thread_pool.hpp"
#include "core/threading.hpp"
#include "ggml.h"
#include "model/vector_product.hpp"
#include "spattn/gguf.hpp"

namespace spattn::bench {
namespace {

constexpr int kLayers = 4;
constexpr int64_t kShapes[][2] = {{2048, 2048}, {512, 2048},  {512, 2048}, {2048, 2048},
                                  {8192, 2048}, {8192, 2048}, {2048, 8192}};  // {rows, cols}

// Args: {impl, ggml type, threads}.
void BM_DecodeProduct(benchmark::State& state) {
  const int impl = int(state.range(0));
  const auto type = ggml_type(state.range(1));
  const int threads = int(state.range(2));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  // One layer's weights quantized, copied to the other layers (the bytes differ by address
  // only, which is what the memory sees).
  std::vector<size_t> offset;
  size_t layer_bytes = 0;
  for (const auto& s : kShapes) {
    offset.push_back(layer_bytes);
    layer_bytes += ggml_row_size(type, s[1]) * size_t(s[0]);
  }
  std::vector<uint8_t> w(layer_bytes * kLayers);
  {
    std::vector<float> row(8192);
    for (size_t i = 0; i < std::size(kShapes); ++i) {
      const size_t rb = ggml_row_size(type, kShapes[i][1]);
      for (int64_t r = 0; r < kShapes[i][0]; ++r) {
        for (int64_t j = 0; j < kShapes[i][1]; ++j) row[size_t(j)] = u(rng) * 0.05f;
        gguf::quantize_row(gguf::GgmlType(type), row.data(), w.data() + offset[i] + size_t(r) * rb,
                           kShapes[i][1]);
      }
    }
    for (int l = 1; l < kLayers; ++l)
      std::memcpy(w.data() + size_t(l) * layer_bytes, w.data(), layer_bytes);
  }
  std::vector<float> x(8192), y(8192 * 3);
  for (auto& v : x) v = u(rng);

  std::vector<uint8_t> meta(size_t(4) << 20);
  ggml_init_params ip{meta.size(), meta.data(), true};
  ggml_context* ctx = ggml_init(ip);
  ggml_cgraph* g = ggml_new_graph(ctx);
  std::deque<RangeClaims> claims;
  for (int l = 0; l < kLayers; ++l)
    for (size_t i = 0; i < std::size(kShapes); ++i) {
      model::Model::Weight mw;
      mw.t = ggml_new_tensor_2d(ctx, type, kShapes[i][1], kShapes[i][0]);
      mw.t->data = w.data() + size_t(l) * layer_bytes + offset[i];
      ggml_tensor* xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kShapes[i][1], 1);
      xt->data = x.data();
      ggml_tensor* yt =
          impl == 0 ? ggml_mul_mat(ctx, mw.t, xt) : model::vector_product(ctx, mw, xt, claims);
      yt->data = y.data() + 8192 * (i % 3);
      ggml_build_forward_expand(g, yt);
    }
  const int64_t words = int64_t(w.size() / 64);
  std::vector<float> sums(size_t(threads) * 16);
  const LoopTimer timer;
  for (auto _ : state) {
    if (impl < 2) {
      ThreadPool::get().compute(g, threads);
    } else {
      ThreadPool::get().run(threads, [&](int ith, int nth) {
        const auto* p = reinterpret_cast<const float*>(w.data());
        float acc[16] = {};
        for (int64_t i = words * ith / nth; i < words * (ith + 1) / nth; ++i)
          for (int j = 0; j < 16; ++j) acc[j] += p[i * 16 + j];
        std::memcpy(&sums[size_t(ith) * 16], acc, sizeof acc);
      });
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GB/s"] = double(w.size()) * double(state.iterations()) / timer.seconds() / 1e9;
  ggml_free(ctx);
}

// The absorbed latent attention's per-head products of one token (DeepSeek V3's shapes: 128
// heads; Wk_b a head's 128 nope values to the 512-wide latent, Wv_b the latent back to 128), over
// eight layers' planes (Q8_0: 142 MB, past the caches): ggml's mul_mat over the permuted heads
// (impl 0) against plane_vector_product (impl 1). GB/s counts the weights' bytes.
// Args: {impl, ggml type, threads}.
void BM_PlaneProduct(benchmark::State& state) {
  const int impl = int(state.range(0));
  const auto type = ggml_type(state.range(1));
  const int threads = int(state.range(2));
  constexpr int kPlaneLayers = 8;
  constexpr int64_t kHeads = 128, kNope = 128, kRope = 64, kLatent = 512;
  const int64_t shapes[2][2] = {{kNope, kLatent}, {kLatent, kNope}};  // {k, m}: Wk_b, Wv_b
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::vector<uint8_t>> planes;
  for (const auto& s : shapes) {
    const size_t rb = ggml_row_size(type, s[0]);
    std::vector<uint8_t>& w = planes.emplace_back(rb * size_t(s[1] * kHeads) * kPlaneLayers);
    std::vector<float> row(static_cast<size_t>(s[0]));
    for (int64_t r = 0; r < s[1] * kHeads * kPlaneLayers; ++r) {
      for (float& v : row) v = u(rng) * 0.05f;
      gguf::quantize_row(gguf::GgmlType(type), row.data(), w.data() + size_t(r) * rb, s[0]);
    }
  }
  // One token's q (each head's nope and rope values) and its latent attention output.
  std::vector<float> q(size_t(kHeads * (kNope + kRope))), att(size_t(kHeads * kLatent));
  for (auto& v : q) v = u(rng);
  for (auto& v : att) v = u(rng);
  std::vector<float> y(size_t(kHeads * kLatent));

  std::vector<uint8_t> meta(size_t(4) << 20);
  ggml_init_params ip{meta.size(), meta.data(), true};
  ggml_context* ctx = ggml_init(ip);
  ggml_cgraph* g = ggml_new_graph(ctx);
  std::deque<RangeClaims> claims;
  const size_t f = sizeof(float);
  for (int l = 0; l < kPlaneLayers; ++l)
    for (int i = 0; i < 2; ++i) {
      const int64_t k = shapes[i][0], m = shapes[i][1];
      model::Model::Weight mw;
      mw.t = ggml_new_tensor_3d(ctx, type, k, m, kHeads);
      mw.t->data = planes[size_t(i)].data() + size_t(l) * ggml_nbytes(mw.t);
      // As the runner views them: Wk_b reads each head's nope values out of q's rows.
      ggml_tensor* rows = i == 0
                              ? ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kHeads * (kNope + kRope), 1)
                              : ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kHeads * kLatent, 1);
      rows->data = i == 0 ? q.data() : att.data();
      const size_t head = size_t(i == 0 ? kNope + kRope : kLatent) * f;
      ggml_tensor* heads = ggml_view_3d(ctx, rows, k, kHeads, 1, head, head * kHeads, 0);
      ggml_tensor* xt = ggml_permute(ctx, heads, 0, 2, 1, 3);
      ggml_tensor* yt = impl == 0 ? ggml_mul_mat(ctx, mw.t, xt)
                                  : model::plane_vector_product(ctx, mw, xt, claims);
      yt->data = y.data();
      ggml_build_forward_expand(g, yt);
    }
  const LoopTimer timer;
  for (auto _ : state) {
    ThreadPool::get().compute(g, threads);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = double(planes[0].size() + planes[1].size()) *
                           double(state.iterations()) / timer.seconds() / 1e9;
  ggml_free(ctx);
}
BENCHMARK(BM_PlaneProduct)
    ->ArgNames({"impl", "type", "threads"})
    ->ArgsProduct({{0, 1}, {GGML_TYPE_Q8_0, GGML_TYPE_F16}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void decode_product_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"impl", "type", "threads"});
  for (int type : {GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q6_K})
    for (int threads : {1, 2})
      for (int impl : {0, 1, 2}) b->Args({impl, type, threads});
}
BENCHMARK(BM_DecodeProduct)
    ->Apply(decode_product_args)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace spattn::bench
