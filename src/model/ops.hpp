// The forward pass's row operations: matrix products (ggml's, on the process's thread pool),
// RMSNorm, SwiGLU's gate.
#pragma once
#include <cstdint>
#include <vector>

#include "spattn/model.hpp"

namespace spattn::model {

// y[n, w.rows] = x[n, w.cols] W^T (+ y when accumulate: the residual add folded in), with
// ggml's product for W's stored type (activations converted to the type's dot-product partner,
// as llama.cpp does: f16 for f16 weights, q8_0 or q8_K blocks for quantized ones), on
// `threads` threads of the pool.
void matmul(const float* x, int64_t n, const Model::Weight& w, float* y, bool accumulate = false,
            int threads = 1);
// y[i] = x[i] / sqrt(mean(x[i]^2) + eps) * weight, for n rows of dim values.
void rms_norm(const float* x, int64_t n, int64_t dim, const float* weight, double eps, float* y);
// Adds a bias row to each of n rows.
void add_bias(float* y, int64_t n, const std::vector<float>& bias);
// g = SiLU(g) * u over n values.
void silu_mul(float* g, const float* u, int64_t n);

}  // namespace spattn::model
