#include "model/ops.hpp"

#include <cmath>

#include "core/thread_pool.hpp"
#include "ggml.h"
#include "spattn/error.hpp"

namespace spattn::model {

void matmul(const float* x, int64_t n, const Model::Weight& w, float* y, bool accumulate,
            int threads) {
  // A graph of one product (and the residual add) in a context over thread-local memory: no
  // allocation per call; every tensor's data is the caller's or the scratch's.
  constexpr int kNodes = 4;
  thread_local std::vector<uint8_t> meta(kNodes * ggml_tensor_overhead() +
                                         ggml_graph_overhead_custom(kNodes, false));
  thread_local std::vector<float> scratch;
  ggml_init_params ip{meta.size(), meta.data(), true};
  ggml_context* ctx = ggml_init(ip);
  SPATTN_CHECK(ctx != nullptr, "matmul: ggml_init failed");
  ggml_tensor* xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, w.cols, n);
  xt->data = const_cast<float*>(x);
  ggml_tensor* prod = ggml_mul_mat(ctx, w.t, xt);  // [n rows of w.rows]
  ggml_tensor* out = prod;
  if (accumulate) {
    if (scratch.size() < size_t(n * w.rows)) scratch.resize(size_t(n * w.rows));
    prod->data = scratch.data();
    ggml_tensor* yt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, w.rows, n);
    yt->data = y;
    out = ggml_add(ctx, yt, prod);  // element for element, so writing y in place is safe
  }
  out->data = y;
  ggml_cgraph* g = ggml_new_graph_custom(ctx, kNodes, false);
  ggml_build_forward_expand(g, out);
  try {
    ThreadPool::get().compute(g, threads);
  } catch (...) {
    ggml_free(ctx);
    throw;
  }
  ggml_free(ctx);
}

void rms_norm(const float* x, int64_t n, int64_t dim, const float* weight, double eps, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * dim;
    double ss = 0;  // ggml sums in double too
    for (int64_t c = 0; c < dim; ++c) ss += double(xi[c]) * xi[c];
    const float scale = float(1.0 / std::sqrt(ss / double(dim) + eps));
    float* yi = y + i * dim;
    for (int64_t c = 0; c < dim; ++c) yi[c] = xi[c] * scale * weight[c];
  }
}

void add_bias(float* y, int64_t n, const std::vector<float>& bias) {
  const int64_t cols = int64_t(bias.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < cols; ++c) y[i * cols + c] += bias[size_t(c)];
}

void silu_mul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

}  // namespace spattn::model
