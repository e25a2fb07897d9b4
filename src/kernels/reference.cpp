// Exact attention in double precision: the plain twin every fast kernel is checked against.
#include <cmath>
#include <limits>
#include <vector>

#include "core/threading.hpp"
#include "spattn/attention.hpp"

namespace spattn {

void attention_reference(const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& out, const AttnOptions& opt, float* lse) {
  validate_attention_args(q, k, v, out, opt);
  const int64_t d = q.dim, lq = q.seq, lk = k.seq, group = q.heads / k.heads;
  const double scale = softmax_scale(opt, d);
  parallel_for(q.heads * lq, resolve_threads(opt.threads), [&](int64_t item, int) {
    const int64_t h = item / lq, i = item % lq, kh = h / group;
    const int64_t visible = causal_limit(i, lq, lk, opt.causal);
    // A sliding window starts the row's keys later; first >= visible: no key.
    const int64_t first = opt.causal ? window_start(query_position(i, lq, lk), opt.window) : 0;
    std::vector<double> qi(static_cast<size_t>(d)), o(static_cast<size_t>(d), 0.0);
    std::vector<double> s(static_cast<size_t>(std::max<int64_t>(visible, 1)));
    for (int64_t c = 0; c < d; ++c) qi[size_t(c)] = q.get(h, i, c);
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = first; j < visible; ++j) {
      double acc = 0;
      for (int64_t c = 0; c < d; ++c) acc += qi[size_t(c)] * double(k.get(kh, j, c));
      s[size_t(j)] = acc * scale;
      m = std::max(m, s[size_t(j)]);
    }
    double l = 0;
    for (int64_t j = first; j < visible; ++j) {
      double p = std::exp(s[size_t(j)] - m);
      l += p;
      for (int64_t c = 0; c < d; ++c) o[size_t(c)] += p * double(v.get(kh, j, c));
    }
    for (int64_t c = 0; c < d; ++c)
      out.set(h, i, c, visible > first ? float(o[size_t(c)] / l) : 0.0f);
    if (lse)
      lse[h * lq + i] =
          visible > first ? float(m + std::log(l)) : -std::numeric_limits<float>::infinity();
  });
}

}  // namespace spattn
