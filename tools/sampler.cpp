#include "sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "spattn/error.hpp"

namespace spattn::cli {

void SamplingParams::validate() const {
  SPATTN_CHECK(std::isfinite(temperature) && temperature >= 0, "temperature must be >= 0, got ",
               temperature);
  SPATTN_CHECK(top_k >= 0, "top_k must be >= 0, got ", top_k);
  SPATTN_CHECK(std::isfinite(top_p) && top_p > 0 && top_p <= 1, "top_p must be in (0, 1], got ",
               top_p);
  SPATTN_CHECK(std::isfinite(min_p) && min_p >= 0 && min_p <= 1, "min_p must be in [0, 1], got ",
               min_p);
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) { p_.validate(); }

int32_t Sampler::sample(const std::vector<float>& logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[size_t(best)]) best = int32_t(i);
  if (p_.temperature <= 0) return best;
  const double top = logits[size_t(best)], t = p_.temperature;
  // The candidates in the order the draw walks them: every token in id order, or, when top-k
  // top-p or min-p cut, the kept ones from most to least likely (llama.cpp's order: top-k,
  // top-p, min-p, then temperature).
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const bool cut = (p_.top_k > 0 && p_.top_k < int64_t(ids.size())) || p_.top_p < 1 || p_.min_p > 0;
  if (cut) {
    const size_t k = p_.top_k > 0 ? std::min(ids.size(), size_t(p_.top_k)) : ids.size();
    // Ties keep id order, so the same logits always give the same candidates.
    std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(k), ids.end(),
                      [&](int32_t a, int32_t b) {
                        return logits[size_t(a)] > logits[size_t(b)] ||
                               (logits[size_t(a)] == logits[size_t(b)] && a < b);
                      });
    ids.resize(k);
  }
  std::vector<double> p(ids.size());
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    sum += (p[i] = std::exp((double(logits[size_t(ids[i])]) - top) / t));
  if (cut && p_.top_p < 1) {
    double kept = 0;
    size_t n = 0;
    while (n < p.size() && kept < p_.top_p * sum) kept += p[n++];
    p.resize(std::max<size_t>(n, 1));
    sum = std::accumulate(p.begin(), p.end(), 0.0);
  }
  if (p_.min_p > 0) {
    // On the logits, before temperature: l >= l_max + ln(min_p). The top token always stays.
    const double floor = top + std::log(p_.min_p);
    size_t n = 1;
    while (n < p.size() && double(logits[size_t(ids[n])]) >= floor) ++n;
    p.resize(n);
    sum = std::accumulate(p.begin(), p.end(), 0.0);
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double x = u(rng_);
  for (size_t i = 0; i < p.size(); ++i)
    if ((x -= p[i]) <= 0) return ids[i];
  return best;  // rounding left x above 0: the most likely token, which every cut keeps
}

}  // namespace spattn::cli
