// TEMPORARY: stand-in until the tiled kernel lands (same contract, reference speed).
#include <cmath>
#include <limits>
#include <vector>

#include "spattn/attention.hpp"

namespace spattn {

const char* simd_target_name() { return "tmp"; }

void attention_dense(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const AttnOptions& opt, float* lse, Stats* stats) {
  attention_reference(q, k, v, out, opt, lse);
  if (stats) {
    Stats s;
    s.causal_entries = s.score_entries = q.heads * attention_entries(q.seq, k.seq, opt.causal);
    s.flops = 4.0 * q.dim * s.score_entries;
    stats->add(s);
  }
}

void attention_dense_observed(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const AttnOptions& opt, float* lse,
                              BlockLseObserver& observer, Stats* stats) {
  attention_dense(q, k, v, out, opt, lse, stats);
  const int64_t d = q.dim, lq = q.seq, lk = k.seq, group = q.heads / k.heads;
  const double scale = opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(double(d));
  for (int64_t h = 0; h < q.heads; ++h)
    for (int64_t i = 0; i < lq; ++i) {
      int64_t visible = opt.causal ? lk - lq + i + 1 : lk;
      for (int64_t b = 0; b * kKeyBlock < visible; ++b) {
        double m = -INFINITY, l = 0;
        std::vector<double> s;
        for (int64_t j = b * kKeyBlock; j < std::min(visible, (b + 1) * kKeyBlock); ++j) {
          double acc = 0;
          for (int64_t c = 0; c < d; ++c) acc += double(q.get(h, i, c)) * k.get(h / group, j, c);
          s.push_back(acc * scale);
          m = std::max(m, acc * scale);
        }
        for (double x : s) l += std::exp(x - m);
        float val = float(m + std::log(l));
        observer.observe(h, i, 1, b, &val);
      }
    }
}

}  // namespace spattn
