// Shared by the selectors: parameter checks (one message per parameter) and the result order.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "spattn/error.hpp"
#include "spattn/select.hpp"

namespace spattn::topk_detail {

inline void check_k(int k) { SPATTN_CHECK(k > 0, "top-k: k must be > 0 (got ", k, ")"); }

inline void check_k_exact(int k_exact, int k) {
  SPATTN_CHECK(k_exact >= 0 && k_exact <= k,
               "top-k: k_exact must be in [0, k] (got k_exact = ", k_exact, " with k = ", k, ")");
}

inline void check_total_blocks(int64_t total_blocks) {
  SPATTN_CHECK(total_blocks >= 0, "top-k: total_blocks must be >= 0 (got ", total_blocks, ")");
}

// lo <= erfinv(float(x)) <= hi for x in [0, 1], from erfinv on a grid computed once (kZGrid
// steps, estimated_topk.cpp): the estimate's bounds on Eq. (6)'s z. hi is +inf near x = 1.
struct ZBounds {
  double lo, hi;
};
ZBounds erfinv_bounds(double x);

// out = the pairs of keys[0, n), best first. Key order is ranks_before's order.
inline void keys_to_result(const uint64_t* keys, int n, std::vector<BlockScore>& out) {
  out.clear();
  for (int i = 0; i < n; ++i) out.push_back(from_key(keys[i]));
  std::sort(out.begin(), out.end(), ranks_before);
}

}  // namespace spattn::topk_detail
