// The DSA model tests' probes (model/test_deepseek32.cpp, model/test_glm_dsa.cpp): a small
// model's logits under an attention backend, prefill or with the last row decoded, and the
// largest gap between two such runs over a range of rows.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "spattn/model.hpp"

namespace spattn::test {

// Logits of every prompt row (prefill), and of the last through decode, under `attn`; a decode
// past the indexer's top-k must read fewer keys than the cache holds.
inline std::vector<float> dsa_logits(const model::Model& m, const std::string& attn,
                                     const std::vector<int32_t>& toks, bool decode_last) {
  model::SessionOptions o;
  o.n_ctx = 128;
  o.attn = o.attn_decode = attn;
  model::Session s(m, o);
  const int64_t n = int64_t(toks.size()), V = m.config().n_vocab;
  std::vector<float> out(static_cast<size_t>(n * V));
  if (!decode_last) {
    s.prefill(toks, out.data(), 0);
    return out;
  }
  s.prefill(std::span(toks).first(size_t(n - 1)), nullptr, 0);
  s.decode(toks.back(), out.data() + (n - 1) * V);
  const model::Timings t = s.timings();
  EXPECT_LT(t.decode_keys_read, t.decode_keys_total) << "a decode past top-k reads fewer keys";
  return out;
}

// The largest |a - b| over rows [from, to) of V logits each.
inline double worst_gap(const std::vector<float>& a, const std::vector<float>& b, int64_t from,
                        int64_t to, int64_t V) {
  double w = 0;
  for (int64_t i = from * V; i < to * V; ++i)
    w = std::max(w, double(std::abs(a[size_t(i)] - b[size_t(i)])));
  return w;
}

}  // namespace spattn::test
