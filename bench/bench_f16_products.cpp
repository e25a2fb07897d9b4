// Prefill's f16-weight products: spattn's kernel (kernels/gemm_f16) against ggml's mul_mat
// (tinyBLAS) on the same weights and rows, at the Llama-3.2-1B layer's shapes, on 1 or 2
// threads (ggml's graph threads; spattn's pool, as the runner runs both).
// impl 0: ggml (its activation conversion to f16 included, as in a graph); impl 1: spattn
// (its packing included).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "bench_common.hpp"
#include "core/threading.hpp"
#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/gemm_f16.hpp"
#include "spattn/dtype.hpp"

namespace spattn::bench {
namespace {

// Args: {impl, m (weight rows), k, n (activation rows), threads}.
void BM_F16Product(benchmark::State& state) {
  const int impl = int(state.range(0));
  const int64_t m = state.range(1), k = state.range(2), n = state.range(3);
  const int threads = int(state.range(4));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> w(size_t(m * k));
  for (auto& b : w) b = f32_to_f16(u(rng) * 0.05f);
  std::vector<float> x(size_t(n * k)), c(size_t(n * m));
  for (auto& v : x) v = u(rng);

  ggml_init_params ip{size_t(1) << 20, nullptr, true};
  ggml_context* ctx = ggml_init(ip);
  ggml_tensor* wt = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, k, m);
  ggml_tensor* xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, n);
  wt->data = w.data();
  xt->data = x.data();
  ggml_tensor* ct = ggml_mul_mat(ctx, wt, xt);
  ct->data = c.data();
  ggml_cgraph* g = ggml_new_graph(ctx);
  ggml_build_forward_expand(g, ct);
  ggml_cplan plan = ggml_graph_plan(g, threads, nullptr);
  std::vector<uint8_t> work(plan.work_size);
  plan.work_data = work.data();
  std::vector<float> xp(size_t(kernels::gemm_f16_packed_floats(n, k)));

  const LoopTimer timer;
  for (auto _ : state) {
    if (impl == 0) {
      ggml_graph_compute(g, &plan);
    } else {
      parallel_for(threads, threads, [&](int64_t i, int) {
        kernels::gemm_f16_pack(x.data(), n, k, k, xp.data(), int(i), threads);
      });
      parallel_for(threads, threads, [&](int64_t i, int) {
        kernels::gemm_f16_run(w.data(), k, m, xp.data(), n, k, c.data(), m, int(i), threads);
      });
    }
    benchmark::DoNotOptimize(c.data());
  }
  report_flops(state, 2.0 * double(m) * double(n) * double(k), timer.seconds());
  ggml_free(ctx);
}

void product_sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"impl", "m", "k", "n", "threads"});
  // Llama-3.2-1B: q / o (2048 x 2048), k / v (512 x 2048), gate / up (8192 x 2048), down
  // (2048 x 8192); 512 rows (a -ub 512 chunk), and a few short chunks.
  const int64_t shapes[][2] = {{2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}};
  for (const auto& s : shapes)
    for (int threads : {1, 2})
      for (int impl : {0, 1}) b->Args({impl, s[0], s[1], 512, threads});
  for (int64_t n : {2, 8, 16, 20, 32, 64, 96, 128, 192})
    for (int threads : {1, 2})
      for (int impl : {0, 1}) b->Args({impl, 8192, 2048, n, threads});
}
BENCHMARK(BM_F16Product)->Apply(product_sizes)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace spattn::bench
