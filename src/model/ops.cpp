#include "model/ops.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "core/threading.hpp"

namespace spattn::model {

void matmul(const float* x, int64_t n, const Matrix& w, float* y, bool accumulate, int threads) {
  // Output features [r0, r1): one sgemm over those rows of W, into those columns of y.
  const auto part = [&](int64_t r0, int64_t r1) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(r1 - r0), int(w.cols), 1.0f,
                x, int(w.cols), w.data.data() + r0 * w.cols, int(w.cols),
                accumulate ? 1.0f : 0.0f, y + r0, int(w.rows));
  };
  const int64_t parts = std::min<int64_t>(std::max(threads, 1), w.rows / 64);
  if (parts <= 1) {
    part(0, w.rows);
    return;
  }
  // Slices of whole 16-feature groups, so every slice keeps the kernel's full-width columns.
  const int64_t groups = (w.rows + 15) / 16;
  parallel_for(parts, int(parts), [&](int64_t i, int) {
    part(std::min(w.rows, groups * i / parts * 16), std::min(w.rows, groups * (i + 1) / parts * 16));
  });
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
