// Exact attention restricted to a per-entry predicate, in double: the plain twin every mask
// builder and sparse method is checked against.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/tensor.hpp"
#include "test_util.hpp"

namespace spattn::test {

// keep(h, i, j): whether q head h's row i computes key j (asked only for causally visible j).
using EntryPredicate = std::function<bool(int64_t h, int64_t i, int64_t j)>;

struct MaskedRef {
  std::vector<double> out;  // [Hq, Lq, d]
  std::vector<double> lse;  // [Hq, Lq], -inf where a row keeps nothing
  int64_t entries = 0;      // kept entries, all heads
};

inline MaskedRef masked_reference(const TensorView& q, const TensorView& k, const TensorView& v,
                                  bool causal, const EntryPredicate& keep) {
  const int64_t d = q.dim;
  MaskedRef r;
  r.out.assign(size_t(q.heads * q.seq * d), 0.0);
  r.lse.assign(size_t(q.heads * q.seq), -std::numeric_limits<double>::infinity());
  std::vector<int64_t> keys;
  for (int64_t h = 0; h < q.heads; ++h)
    for (int64_t i = 0; i < q.seq; ++i) {
      const int64_t visible = causal ? k.seq - q.seq + i + 1 : k.seq;
      keys.clear();
      for (int64_t j = 0; j < visible; ++j)
        if (keep(h, i, j)) keys.push_back(j);
      r.entries += int64_t(keys.size());
      const std::vector<double> o =
          row_over_keys(q, k, v, h, i, keys, 0, &r.lse[size_t(h * q.seq + i)]);
      std::copy(o.begin(), o.end(), r.out.begin() + (h * q.seq + i) * d);
    }
  return r;
}

// The entries a block mask holds (the kernel applies causality inside blocks).
inline EntryPredicate mask_predicate(const BlockMask& m) {
  return [&m](int64_t h, int64_t i, int64_t j) {
    for (int32_t kb : m.row(h, i / m.block_q))
      if (kb == j / m.block_k) return true;
    return false;
  };
}

// Kernel output and LSE against the masked reference, within the f32 kernel's error budget.
inline void expect_matches(const TensorView& out, const std::vector<float>& lse,
                           const MaskedRef& ref, const std::string& what) {
  SCOPED_TRACE(what);
  const int64_t lq = out.seq, d = out.dim;
  for (int64_t h = 0; h < out.heads; ++h)
    for (int64_t i = 0; i < lq; ++i) {
      const double want_lse = ref.lse[size_t(h * lq + i)];
      if (std::isinf(want_lse)) {
        ASSERT_TRUE(std::isinf(lse[size_t(h * lq + i)]) && lse[size_t(h * lq + i)] < 0)
            << "head " << h << " row " << i << " keeps nothing but has LSE "
            << lse[size_t(h * lq + i)];
      } else {
        ASSERT_NEAR(lse[size_t(h * lq + i)], want_lse, 1e-3 * std::max(1.0, std::abs(want_lse)))
            << "head " << h << " row " << i;
      }
      for (int64_t c = 0; c < d; ++c) {
        const double want = ref.out[size_t((h * lq + i) * d + c)];
        ASSERT_NEAR(out.get(h, i, c), want, 2e-4 * std::max(1.0, std::abs(want)))
            << "head " << h << " row " << i << " dim " << c;
      }
    }
}

}  // namespace spattn::test
