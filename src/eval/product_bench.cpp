// bench_products (spattn/product_bench.hpp): the integer and widening prefill products timed on
// one shape, with the machine's peaks measured first in the same process.
#include "spattn/product_bench.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <random>
#include <thread>

#include "core/thread_pool.hpp"
#include "core/threading.hpp"
#include "ggml.h"
#include "kernels/gemm_bf16.hpp"
#include "kernels/gemm_int8.hpp"
#include "kernels/gemm_widen.hpp"
#include "model/ggml_repack.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"

namespace spattn {

namespace {

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// m rows of k values drawn from N(0, 0.05^2) (real weights' scale), quantized by ggml's own
// quantizer as llama-quantize writes them.
std::vector<uint8_t> weights(gguf::GgmlType t, int64_t m, int64_t k, int64_t row_bytes) {
  std::vector<uint8_t> w(size_t(m * row_bytes));
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < m; ++j) {
    for (float& v : row) v = g(rng);
    gguf::quantize_row(t, row.data(), w.data() + j * row_bytes, k);
  }
  return w;
}

// fn(i) on each of `threads` threads at once: the threads meet at a barrier first, so no
// thread takes a second share while another is still starting (parallel_for's counter would
// let it; a thread waiting at the barrier keeps its item).
template <class Fn>
void on_all_threads(int threads, Fn fn) {
  std::atomic<int> arrived{0};
  parallel_for(threads, threads, [&](int64_t i, int) {
    arrived.fetch_add(1);
    while (arrived.load() < threads) std::this_thread::yield();
    fn(int(i));
  });
}

// bf16 weights from N(0, 0.05^2), rounded as ggml rounds them; spattn's product, then ggml's
// mul_mat of the same matrix and rows on the process's pool (the runner's graphs' pool).
ProductBenchBf16 bench_bf16(const ProductBenchOptions& o, int threads,
                            const std::vector<float>& x) {
  ggml_init_params ip{};
  ip.mem_size = size_t(2 * o.m * o.k + 4 * o.n * o.k + 4 * o.n * o.m) + 8 * ggml_tensor_overhead() +
                ggml_graph_overhead() + (1 << 20);
  ggml_context* ctx = ggml_init(ip);
  SPATTN_CHECK(ctx != nullptr, "bench-products: ggml_init failed");
  ggml_tensor* w = ggml_new_tensor_2d(ctx, GGML_TYPE_BF16, o.k, o.m);
  ggml_tensor* xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, o.k, o.n);
  auto* wb = static_cast<ggml_bf16_t*>(w->data);
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 0.05f);
  for (int64_t i = 0; i < o.m * o.k; ++i) wb[i] = ggml_fp32_to_bf16(g(rng));
  std::copy(x.begin(), x.end(), static_cast<float*>(xt->data));
  ggml_tensor* y = ggml_mul_mat(ctx, w, xt);
  ggml_cgraph* gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, y);

  ProductBenchBf16 r;
  const double ops = 2.0 * double(o.n) * double(o.m) * double(o.k);
  const kernels::Bf16Weights bw{w->data, 2 * o.k, o.m};
  std::vector<uint16_t> xb(size_t(kernels::gemm_bf16_act_bytes(o.n, o.k) / 2));
  std::vector<float> c(size_t(o.n * o.m));
  double best = 0, best_r = 0, best_g = 0;
  for (int rep = 0; rep <= o.repeat; ++rep) {  // the first call warms up
    const auto t0 = std::chrono::steady_clock::now();
    on_all_threads(threads, [&](int i) {
      kernels::gemm_bf16_round(x.data(), o.n, o.k, o.k, xb.data(), i, threads);
    });
    const double q = seconds(t0);
    on_all_threads(threads, [&](int i) {
      kernels::gemm_bf16_run(bw, xb.data(), o.n, o.k, c.data(), o.m, i, threads);
    });
    const double s = seconds(t0);
    if (rep > 0 && (best == 0 || s < best)) best = s, best_r = q;
    const auto t1 = std::chrono::steady_clock::now();
    ThreadPool::get().compute(gf, threads);
    const double sg = seconds(t1);
    if (rep > 0 && (best_g == 0 || sg < best_g)) best_g = sg;
  }
  ggml_free(ctx);
  r.gflops = ops / best / 1e9;
  r.round_ms = best_r * 1e3;
  r.ggml_gflops = ops / best_g / 1e9;
  return r;
}

}  // namespace

ProductBench bench_products(const ProductBenchOptions& o) {
  SPATTN_CHECK(o.m > 0 && o.m <= 65536 && o.k > 0 && o.k <= 65536 && o.k % 256 == 0 && o.n > 0 &&
                   o.n <= 8192 && o.repeat >= 1 && o.repeat <= 100,
               "bench-products: need 0 < m, k <= 65536 (k a multiple of 256), 0 < n <= 8192, "
               "1 <= repeat <= 100; got m ",
               o.m, ", k ", o.k, ", n ", o.n, ", repeat ", o.repeat);
  std::vector<kernels::Int8Format> formats;
  if (o.types.empty()) formats.assign(kernels::kInt8Formats.begin(), kernels::kInt8Formats.end());
  bool bf16 = o.types.empty();
  for (const std::string& name : o.types) {
    if (name == "bf16") {
      bf16 = true;
      continue;
    }
    std::optional<kernels::Int8Format> f;
    for (kernels::Int8Format g : kernels::kInt8Formats)
      if (name == gguf::type_name(kernels::ggml_type_of(g))) f = g;
    SPATTN_CHECK(f.has_value(), "bench-products: '", name,
                 "' is neither bf16 nor a type the integer products take");
    formats.push_back(*f);
  }
  const int threads = resolve_threads(o.threads);
  ProductBench out;
  out.peak = measure_machine_peak(threads, MachinePeakOptions{.read_bytes = 0, .sgemm = false});
  out.vnni = kernels::gemm_int8_vnni();
  out.bf16_dot = kernels::gemm_bf16_dot();

  std::vector<float> x(size_t(o.n * o.k));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (float& v : x) v = u(rng);
  std::vector<uint8_t> xq(size_t(kernels::gemm_int8_act_bytes(o.n, o.k)));
  std::vector<float> xp, c(size_t(o.n * o.m));
  const double ops = 2.0 * double(o.n) * double(o.m) * double(o.k);
  for (kernels::Int8Format f : formats) {
    const gguf::GgmlType t = kernels::ggml_type_of(f);
    const int64_t row_bytes = o.k / gguf::block_size(t) * gguf::block_bytes(t);
    const std::vector<uint8_t> w = weights(t, o.m, o.k, row_bytes);
    ProductBenchResult r;
    r.type = gguf::type_name(t);
    // The product (its GOP/s, its quantization's share) and its unpacking alone.
    const auto time_int8 = [&](const kernels::Int8Weights& iw, double& gops, double* quantize_ms,
                               double& unpack_ms) {
      double best = 0, best_q = 0, best_u = 0;
      for (int rep = 0; rep <= o.repeat; ++rep) {  // the first call warms up
        const auto t0 = std::chrono::steady_clock::now();
        on_all_threads(threads, [&](int i) {
          kernels::gemm_int8_quantize(x.data(), o.n, o.k, o.k, xq.data(), i, threads);
        });
        const double q = seconds(t0);
        on_all_threads(threads, [&](int i) {
          kernels::gemm_int8_run(iw, xq.data(), o.n, o.k, c.data(), o.m, i, threads);
        });
        const double s = seconds(t0);
        if (rep > 0 && (best == 0 || s < best)) best = s, best_q = q;
        const auto t1 = std::chrono::steady_clock::now();
        on_all_threads(threads,
                       [&](int i) { kernels::gemm_int8_unpack_only(iw, o.k, i, threads); });
        const double u = seconds(t1);
        if (rep > 0 && (best_u == 0 || u < best_u)) best_u = u;
      }
      gops = ops / best / 1e9;
      if (quantize_ms) *quantize_ms = best_q * 1e3;
      unpack_ms = best_u * 1e3;
    };
    time_int8({f, w.data(), row_bytes, o.m}, r.int8_gops, &r.quantize_ms, r.unpack_ms);
    if (kernels::gemm_int8_reads(f, kernels::Int8Layout::interleaved8)) {
      const std::vector<uint8_t> packed = model::ggml_repacked(t, w.data(), o.m, o.k);
      if (!packed.empty() &&
          kernels::gemm_int8_interleaved_matches(f, w.data(), packed.data(), row_bytes, o.m, o.k))
        time_int8({f, packed.data(), row_bytes, o.m, kernels::Int8Layout::interleaved8},
                  r.repacked_gops, nullptr, r.repacked_unpack_ms);
    }
    if (const auto wf = kernels::widen_format(t); wf && kernels::gemm_widen_min_rows(*wf) > 0) {
      const kernels::WeightRows ww{*wf, w.data(), row_bytes, o.m};
      xp.resize(size_t(kernels::gemm_widen_packed_floats(o.n, o.k)));
      double best = 0;
      for (int rep = 0; rep <= o.repeat; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        on_all_threads(threads, [&](int i) {
          kernels::gemm_widen_pack(x.data(), o.n, o.k, o.k, xp.data(), i, threads);
        });
        on_all_threads(threads, [&](int i) {
          kernels::gemm_widen_run(ww, xp.data(), o.n, o.k, c.data(), o.m, i, threads);
        });
        const double s = seconds(t0);
        if (rep > 0 && (best == 0 || s < best)) best = s;
      }
      r.widen_gflops = ops / best / 1e9;
    }
    out.results.push_back(r);
  }
  if (bf16) out.bf16 = bench_bf16(o, threads, x);
  return out;
}

}  // namespace spattn
