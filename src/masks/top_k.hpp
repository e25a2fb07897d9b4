// Deterministic top-k selection shared by the estimating mask builders.
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace spattn::masks {

// Indices of the `keep` largest of score[0, n), ascending. Ties go to the smaller index, so
// forced (+inf) entries and the result do not depend on the sort's internals.
template <class T>
std::vector<int64_t> top_indices(const T* score, int64_t n, int64_t keep) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  keep = std::clamp<int64_t>(keep, 0, n);
  auto better = [&](int64_t a, int64_t b) {
    return score[a] != score[b] ? score[a] > score[b] : a < b;
  };
  std::nth_element(idx.begin(), idx.begin() + keep, idx.end(), better);
  idx.resize(size_t(keep));
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace spattn::masks
