// The forward pass's row operations: sgemm over a chunk's rows, RMSNorm, SwiGLU's gate.
#pragma once
#include <cstdint>

#include "spattn/model.hpp"

namespace spattn::model {

// y[n, w.rows] = x[n, w.cols] W^T (+ y when accumulate: the residual add folded into sgemm).
// threads > 1: the output features split over that many of our threads, one sgemm each (call
// it with OpenBLAS single-threaded; see Session's forward for why).
void matmul(const float* x, int64_t n, const Matrix& w, float* y, bool accumulate = false,
            int threads = 1);
// y[i] = x[i] / sqrt(mean(x[i]^2) + eps) * weight, for n rows of dim values.
void rms_norm(const float* x, int64_t n, int64_t dim, const float* weight, double eps, float* y);
// Adds a bias row to each of n rows.
void add_bias(float* y, int64_t n, const Matrix& bias);
// g = SiLU(g) * u over n values.
void silu_mul(float* g, const float* u, int64_t n);

}  // namespace spattn::model
