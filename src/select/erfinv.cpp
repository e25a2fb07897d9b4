// erf^-1, which the C++ library lacks, for the threshold of MOMO's Eq. (6).
#include <cmath>
#include <limits>

#include "spattn/select.hpp"

namespace spattn {

// M. Giles, "Approximating the erfinv function" (GPU Computing Gems Jade, 2011), the
// single-precision version: with w = -log(1 - x^2), erfinv(x) = x p(w), p a polynomial in
// w - 2.5 for w < 5 (|x| < 0.9966) and in sqrt(w) - 3 in the tails.
float erfinv(float x) {
  if (!(std::fabs(x) < 1.0f)) {
    if (std::fabs(x) == 1.0f) return std::copysign(std::numeric_limits<float>::infinity(), x);
    return std::numeric_limits<float>::quiet_NaN();
  }
  float w = -std::log((1.0f - x) * (1.0f + x));
  float p;
  if (w < 5.0f) {
    w -= 2.5f;
    p = 2.81022636e-08f;
    p = 3.43273939e-07f + p * w;
    p = -3.5233877e-06f + p * w;
    p = -4.39150654e-06f + p * w;
    p = 0.00021858087f + p * w;
    p = -0.00125372503f + p * w;
    p = -0.00417768164f + p * w;
    p = 0.246640727f + p * w;
    p = 1.50140941f + p * w;
  } else {
    w = std::sqrt(w) - 3.0f;
    p = -0.000200214257f;
    p = 0.000100950558f + p * w;
    p = 0.00134934322f + p * w;
    p = -0.00367342844f + p * w;
    p = 0.00573950773f + p * w;
    p = -0.0076224613f + p * w;
    p = 0.00943887047f + p * w;
    p = 1.00167406f + p * w;
    p = 2.83297682f + p * w;
  }
  return p * x;
}

}  // namespace spattn
