// Prefill's products: spattn's kernel (kernels/gemm_widen) against ggml's mul_mat on the same
// weights and rows, at the Llama-3.2-1B layer's shapes, on 1 or 2 threads (ggml's graph
// threads; spattn's pool, as the runner runs both), for each weight format the kernel reads.
// impl 0: ggml (its activation conversion to f16 or 8-bit blocks included, as in a graph);
// impl 1: spattn (its packing included). (Repacked q4_K and iq4_xs, where ggml's 8-bit products
// were faster, stay ggml's: BENCHMARKS.md.) And bf16 weights on kernels/gemm_bf16, below.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "bench_common.hpp"
#include "core/threading.hpp"
#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/gemm_bf16.hpp"
#include "kernels/gemm_widen.hpp"
#include "spattn/gguf.hpp"

namespace spattn::bench {
namespace {

// Args: {impl, ggml type, m (weight rows), k, n (activation rows), threads}.
void BM_PrefillProduct(benchmark::State& state) {
  const int impl = int(state.range(0));
  const auto type = ggml_type(state.range(1));
  const int64_t m = state.range(2), k = state.range(3), n = state.range(4);
  const int threads = int(state.range(5));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const size_t row_bytes = ggml_row_size(type, k);
  std::vector<uint8_t> w(row_bytes * size_t(m));
  {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t j = 0; j < m; ++j) {
      for (auto& v : row) v = u(rng) * 0.05f;
      gguf::quantize_row(gguf::GgmlType(type), row.data(), w.data() + size_t(j) * row_bytes, k);
    }
  }
  std::vector<float> x(size_t(n * k)), c(size_t(n * m));
  for (auto& v : x) v = u(rng);

  ggml_init_params ip{size_t(1) << 20, nullptr, true};
  ggml_context* ctx = ggml_init(ip);
  ggml_tensor* wt = ggml_new_tensor_2d(ctx, type, k, m);
  const auto format = kernels::widen_format(gguf::GgmlType(type));
  if (!format) {
    state.SkipWithError("a format the kernel does not read");
    ggml_free(ctx);
    return;
  }
  const kernels::WeightRows rows{*format, w.data(), int64_t(row_bytes), m};
  wt->data = w.data();
  ggml_tensor* xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, n);
  xt->data = x.data();
  ggml_tensor* ct = ggml_mul_mat(ctx, wt, xt);
  ct->data = c.data();
  ggml_cgraph* g = ggml_new_graph(ctx);
  ggml_build_forward_expand(g, ct);
  ggml_cplan plan = ggml_graph_plan(g, threads, nullptr);
  std::vector<uint8_t> work(plan.work_size);
  plan.work_data = work.data();
  std::vector<float> xp(size_t(kernels::gemm_widen_packed_floats(n, k)));

  const LoopTimer timer;
  for (auto _ : state) {
    if (impl == 0) {
      ggml_graph_compute(g, &plan);
    } else {
      parallel_for(threads, threads, [&](int64_t i, int) {
        kernels::gemm_widen_pack(x.data(), n, k, k, xp.data(), int(i), threads);
      });
      parallel_for(threads, threads, [&](int64_t i, int) {
        kernels::gemm_widen_run(rows, xp.data(), n, k, c.data(), m, int(i), threads);
      });
    }
    benchmark::DoNotOptimize(c.data());
  }
  report_flops(state, 2.0 * double(m) * double(n) * double(k), timer.seconds());
  ggml_free(ctx);
}

void product_sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"impl", "type", "m", "k", "n", "threads"});
  // Llama-3.2-1B: q / o (2048 x 2048), k / v (512 x 2048), gate / up (8192 x 2048), down
  // (2048 x 8192); 512 rows (a -ub 512 chunk), and shorter chunks.
  const int64_t shapes[][2] = {{2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}};
  for (int type : {GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q6_K, GGML_TYPE_Q5_K, GGML_TYPE_Q3_K})
    for (const auto& s : shapes)
      for (int threads : {1, 2})
        for (int impl : {0, 1}) b->Args({impl, type, s[0], s[1], 512, threads});
  for (int type : {GGML_TYPE_F16, GGML_TYPE_Q8_0, GGML_TYPE_Q6_K, GGML_TYPE_Q5_K, GGML_TYPE_Q3_K})
    for (int64_t n : {2, 8, 16, 20, 32, 64, 96, 128, 192})
      for (int threads : {1, 2})
        for (int impl : {0, 1}) b->Args({impl, type, 8192, 2048, n, threads});
}
BENCHMARK(BM_PrefillProduct)->Apply(product_sizes)->Unit(benchmark::kMillisecond);

// bf16 weights: ggml's mul_mat (impl 0: tinyBLAS on vdpbf16ps where ggml is built for it, its
// rounding of the rows to bf16 included) against spattn's (impl 1: kernels/gemm_bf16, its
// rounding included), on one thread (the CPU column is that thread's time, the figure that holds
// on a shared machine). Args: {impl, m, k, n}.
void BM_PrefillBf16Product(benchmark::State& state) {
  const int impl = int(state.range(0));
  const int64_t m = state.range(1), k = state.range(2), n = state.range(3);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<ggml_bf16_t> w(size_t(m * k));
  for (auto& v : w) v = ggml_fp32_to_bf16(u(rng) * 0.05f);
  std::vector<float> x(size_t(n * k)), c(size_t(n * m));
  for (auto& v : x) v = u(rng);
  ggml_init_params ip{size_t(1) << 20, nullptr, true};
  ggml_context* ctx = ggml_init(ip);
  ggml_tensor* wt = ggml_new_tensor_2d(ctx, GGML_TYPE_BF16, k, m);
  wt->data = w.data();
  ggml_tensor* xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, n);
  xt->data = x.data();
  ggml_tensor* ct = ggml_mul_mat(ctx, wt, xt);
  ct->data = c.data();
  ggml_cgraph* g = ggml_new_graph(ctx);
  ggml_build_forward_expand(g, ct);
  ggml_cplan plan = ggml_graph_plan(g, 1, nullptr);
  std::vector<uint8_t> work(plan.work_size);
  plan.work_data = work.data();
  const kernels::Bf16Weights bw{w.data(), 2 * k, m};
  std::vector<uint16_t> xb(size_t(kernels::gemm_bf16_act_bytes(n, k) / 2));
  const LoopTimer timer;
  for (auto _ : state) {
    if (impl == 0) {
      ggml_graph_compute(g, &plan);
    } else {
      kernels::gemm_bf16_round(x.data(), n, k, k, xb.data(), 0, 1);
      kernels::gemm_bf16_run(bw, xb.data(), n, k, c.data(), m, 0, 1);
    }
    benchmark::DoNotOptimize(c.data());
  }
  report_flops(state, 2.0 * double(m) * double(n) * double(k), timer.seconds());
  ggml_free(ctx);
}

void bf16_sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"impl", "m", "k", "n"});
  const int64_t shapes[][2] = {{2048, 2048}, {8192, 2048}, {2048, 8192}};
  for (const auto& s : shapes)
    for (int impl : {0, 1}) b->Args({impl, s[0], s[1], 512});
  for (int64_t n : {8, 16, 32, 64, 128, 256})
    for (int impl : {0, 1}) b->Args({impl, 2048, 2048, n});
}
BENCHMARK(BM_PrefillBf16Product)->Apply(bf16_sizes)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace spattn::bench
