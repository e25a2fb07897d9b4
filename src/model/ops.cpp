#include "model/ops.hpp"

#include <cblas.h>

#include <cmath>

namespace spattn::model {

void matmul(const float* x, int64_t n, const Matrix& w, float* y, bool accumulate) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(w.rows), int(w.cols), 1.0f, x,
              int(w.cols), w.data.data(), int(w.cols), accumulate ? 1.0f : 0.0f, y, int(w.rows));
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

void add_bias(float* y, int64_t n, const Matrix& bias) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < bias.cols; ++c) y[i * bias.cols + c] += bias.data[size_t(c)];
}

void silu_mul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

}  // namespace spattn::model
