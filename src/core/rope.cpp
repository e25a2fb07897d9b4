#include "core/rope.hpp"

#include <cmath>
#include <utility>

#include "spattn/error.hpp"

namespace spattn {

RopeTable::RopeTable(int64_t max_pos, int64_t dim, double theta, RopeStyle style,
                     std::vector<float> freq_factors, double mscale)
    : max_pos_(max_pos),
      dim_(dim),
      theta_(theta),
      factors_(std::move(freq_factors)),
      first_(style == RopeStyle::adjacent ? 2 : 1),
      second_(style == RopeStyle::adjacent ? 1 : dim / 2) {
  SPATTN_CHECK(dim > 0 && dim % 2 == 0, "RoPE needs an even head dim, got ", dim);
  SPATTN_CHECK(theta > 1.0 && std::isfinite(theta), "rope_theta must be > 1, got ", theta);
  SPATTN_CHECK(max_pos >= 0, "RoPE table length must be >= 0");
  SPATTN_CHECK(factors_.empty() || int64_t(factors_.size()) == dim / 2, "RoPE: ", factors_.size(),
               " frequency factors for ", dim / 2, " pairs");
  for (float f : factors_)
    SPATTN_CHECK(std::isfinite(f) && f > 0, "RoPE: frequency factor ", f, " is not > 0");
  SPATTN_CHECK(std::isfinite(mscale) && mscale > 0, "RoPE: scale ", mscale, " is not > 0");
  const int64_t P = pairs();
  cos_.resize(size_t(max_pos * P));
  sin_.resize(size_t(max_pos * P));
  for (int64_t p = 0; p < P; ++p) {
    const double w = frequency(p);
    for (int64_t pos = 0; pos < max_pos; ++pos) {
      const double a = double(pos) * w;
      cos_[size_t(pos * P + p)] = float(mscale * std::cos(a));
      sin_[size_t(pos * P + p)] = float(mscale * std::sin(a));
    }
  }
}

double RopeTable::frequency(int64_t pair) const {
  const double w = std::pow(theta_, -2.0 * double(pair) / double(dim_));
  return factors_.empty() ? w : w / double(factors_[size_t(pair)]);
}

void RopeTable::rotate_add(float* dst, const float* src, int64_t pos, float coef,
                           int64_t pair_begin, int64_t pair_end) const {
  SPATTN_CHECK(pos >= 0 && pos < max_pos_, "RoPE position ", pos, " outside [0, ", max_pos_, ")");
  const int64_t P = pairs();
  const float* c = &cos_[size_t(pos * P)];
  const float* s = &sin_[size_t(pos * P)];
  for (int64_t p = pair_begin; p < pair_end; ++p) {
    const int64_t i = p * first_, j = i + second_;
    const float x = src[i], y = src[j];
    dst[i] += coef * (x * c[p] - y * s[p]);
    dst[j] += coef * (x * s[p] + y * c[p]);
  }
}

void RopeTable::rotate_inplace(float* x, int64_t pos) const {
  SPATTN_CHECK(pos >= 0 && pos < max_pos_, "RoPE position ", pos, " outside [0, ", max_pos_, ")");
  const int64_t P = pairs();
  const float* c = &cos_[size_t(pos * P)];
  const float* s = &sin_[size_t(pos * P)];
  for (int64_t p = 0; p < P; ++p) {
    const int64_t i = p * first_, j = i + second_;
    const float a = x[i], b = x[j];
    x[i] = a * c[p] - b * s[p];
    x[j] = a * s[p] + b * c[p];
  }
}

}  // namespace spattn
