// The softmax numerators of one row in double, for the A_hat estimates of vertical-slash, the
// grid head (masks/vertical_slash.cpp), XAttention and FlexPrefill: an exp per key and
// estimate row was most of the estimate's time as a libm call per element.
#pragma once
#include <cstdint>

namespace spattn::kernels {

// e[j] = exp(scale * (double(x[j]) - m)) for j < n (x finite, m >= every x[j], scale > 0);
// returns the sum of e.
// Vector exp (Highway's, within an ulp or two of libm's) and vector partial sums, so the
// last bits differ from a scalar loop's.
double exp_row_f64(const float* x, int64_t n, double m, double* e, double scale = 1.0);

}  // namespace spattn::kernels
