// Shared helpers for the kernel tests: seeded inputs and comparisons against the reference.
#pragma once
#include <cstring>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "spattn/tensor.hpp"

namespace spattn::test {

// iid N(0, sigma^2) values, rounded to the tensor's dtype.
inline Tensor random_tensor(DType t, int64_t heads, int64_t seq, int64_t dim, uint64_t seed,
                            float sigma = 1.0f) {
  Tensor x(t, heads, seq, dim);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, sigma);
  TensorView v = x.view();
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t d = 0; d < dim; ++d) v.set(h, s, d, n(rng));
  return x;
}

struct Diff {
  double max_abs = 0, ref_max = 0, rel_l2 = 0;
};

inline Diff diff(const TensorView& a, const TensorView& ref) {
  Diff d;
  double num = 0, den = 0;
  for (int64_t h = 0; h < a.heads; ++h)
    for (int64_t s = 0; s < a.seq; ++s)
      for (int64_t c = 0; c < a.dim; ++c) {
        double x = a.get(h, s, c), y = ref.get(h, s, c);
        d.max_abs = std::max(d.max_abs, std::abs(x - y));
        d.ref_max = std::max(d.ref_max, std::abs(y));
        num += (x - y) * (x - y);
        den += y * y;
        if (!std::isfinite(x)) d.max_abs = INFINITY;
      }
  d.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return d;
}

// Every element of a and b (f32 views of one shape) has the same bits.
inline bool bitwise_equal(const TensorView& a, const TensorView& b) {
  for (int64_t h = 0; h < a.heads; ++h)
    for (int64_t s = 0; s < a.seq; ++s)
      for (int64_t c = 0; c < a.dim; ++c) {
        const float x = a.get(h, s, c), y = b.get(h, s, c);
        if (std::memcmp(&x, &y, 4) != 0) return false;
      }
  return true;
}

}  // namespace spattn::test

#include <vector>

#include "spattn/coverage.hpp"

namespace spattn::test {

// Exact attention (double) of row i of q head h over exactly the listed keys; the plain twin
// of every sparse kernel form. Writes the row's natural-log LSE (-inf for no keys) if asked.
inline std::vector<double> row_over_keys(const TensorView& q, const TensorView& k,
                                         const TensorView& v, int64_t h, int64_t i,
                                         const std::vector<int64_t>& keys, double scale = 0,
                                         double* lse = nullptr) {
  const int64_t d = q.dim, kh = h / (q.heads / k.heads);
  if (scale == 0) scale = 1.0 / std::sqrt(double(d));
  std::vector<double> s, o(size_t(d), 0.0);
  double m = -INFINITY, l = 0;
  for (int64_t j : keys) {
    double acc = 0;
    for (int64_t c = 0; c < d; ++c) acc += double(q.get(h, i, c)) * k.get(kh, j, c);
    s.push_back(acc * scale);
    m = std::max(m, s.back());
  }
  for (size_t n = 0; n < keys.size(); ++n) {
    const double p = std::exp(s[n] - m);
    l += p;
    for (int64_t c = 0; c < d; ++c) o[size_t(c)] += p * v.get(kh, keys[n], c);
  }
  for (double& x : o) x = l > 0 ? x / l : 0.0;
  if (lse) *lse = l > 0 ? m + std::log(l) : -INFINITY;
  return o;
}

inline std::vector<int64_t> coverage_keys(const Coverage& cov, int64_t h, int64_t i) {
  std::vector<KeyRange> r;
  cov.row_ranges(h, i, r);
  std::vector<int64_t> keys;
  for (const KeyRange& x : r)
    for (int64_t j = x.begin; j < x.end; ++j) keys.push_back(j);
  return keys;
}

}  // namespace spattn::test
