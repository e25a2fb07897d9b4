// Exact merge of (O, LSE) partial results (see merge.hpp for the identity).
#include "spattn/merge.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "spattn/error.hpp"

namespace spattn {

void merge_row(float* o_a, float& lse_a, const float* o_b, float lse_b, int64_t dim) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (lse_b == kNegInf) return;  // B saw no key
  if (lse_a == kNegInf) {
    std::copy(o_b, o_b + dim, o_a);
    lse_a = lse_b;
    return;
  }
  const float m = std::max(lse_a, lse_b);
  const float wa = std::exp(lse_a - m), wb = std::exp(lse_b - m);
  const float inv = 1.0f / (wa + wb);
  for (int64_t c = 0; c < dim; ++c) o_a[c] = (wa * o_a[c] + wb * o_b[c]) * inv;
  lse_a = m + std::log(wa + wb);
}

void merge_attention(const TensorView& o_a, const float* lse_a, const TensorView& o_b,
                     const float* lse_b, const TensorView& out, float* lse_out) {
  auto same = [](const TensorView& x, const TensorView& y) {
    return x.heads == y.heads && x.seq == y.seq && x.dim == y.dim;
  };
  SPATTN_CHECK(same(o_a, o_b) && same(o_a, out), "merge: shapes differ (a ", o_a.shape_str(),
               ", b ", o_b.shape_str(), ", out ", out.shape_str(), ")");
  SPATTN_CHECK(lse_a && lse_b, "merge: lse_a and lse_b must not be null");
  SPATTN_CHECK(o_a.data && o_b.data && out.data, "merge: null data");
  const auto f32_rows = [](const TensorView& t) {
    return t.dtype == DType::f32 && t.stride_dim == 1;
  };
  // f32 rows merge in place in out (the same arithmetic); other dtypes through f32 copies.
  const bool direct = f32_rows(o_a) && f32_rows(o_b) && f32_rows(out);
  std::vector<float> row_a(direct ? 0 : size_t(o_a.dim)), row_b(direct ? 0 : size_t(o_a.dim));
  for (int64_t h = 0; h < o_a.heads; ++h)
    for (int64_t s = 0; s < o_a.seq; ++s) {
      const int64_t i = h * o_a.seq + s;
      SPATTN_CHECK(!std::isnan(lse_a[i]) && !std::isnan(lse_b[i]), "merge: lse is NaN at head ", h,
                   " row ", s);
      float* a = row_a.data();
      const float* b = row_b.data();
      if (direct) {
        a = static_cast<float*>(out.ptr(h, s));
        const float* src = static_cast<const float*>(o_a.ptr(h, s));
        if (a != src) std::copy_n(src, o_a.dim, a);
        b = static_cast<const float*>(o_b.ptr(h, s));
      } else {
        for (int64_t c = 0; c < o_a.dim; ++c) {
          row_a[size_t(c)] = o_a.get(h, s, c);
          row_b[size_t(c)] = o_b.get(h, s, c);
        }
      }
      float lse = lse_a[i];
      merge_row(a, lse, b, lse_b[i], o_a.dim);
      if (!direct)
        for (int64_t c = 0; c < o_a.dim; ++c) out.set(h, s, c, row_a[size_t(c)]);
      if (lse_out) lse_out[i] = lse;
    }
}

void merge_sinks(const TensorView& out, float* lse, const float* sinks) {
  SPATTN_CHECK(out.dtype == DType::f32 && out.stride_dim == 1 && out.data && lse && sinks,
               "merge_sinks: out must be f32 rows, lse and sinks non-null");
  const std::vector<float> zero(size_t(out.dim), 0.0f);  // the sink's value
  for (int64_t h = 0; h < out.heads; ++h)
    for (int64_t s = 0; s < out.seq; ++s)
      merge_row(static_cast<float*>(out.ptr(h, s)), lse[h * out.seq + s], zero.data(), sinks[h],
                out.dim);
}

}  // namespace spattn
