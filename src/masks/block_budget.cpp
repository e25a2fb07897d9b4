#include "masks/block_budget.hpp"

#include <algorithm>

namespace spattn::masks {

void keep_top_mass(const double* mass, int64_t limit, double p, std::vector<uint8_t>& keep,
                   std::vector<int64_t>& order) {
  double total = 0, kept = 0;
  order.clear();
  for (int64_t kb = 0; kb < limit; ++kb) {
    total += mass[kb];
    if (keep[size_t(kb)])
      kept += mass[kb];
    else
      order.push_back(kb);
  }
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return mass[a] != mass[b] ? mass[a] > mass[b] : a < b; });
  const double need = p * total;
  for (size_t i = 0; i < order.size() && kept < need; ++i) {
    keep[size_t(order[i])] = 1;
    kept += mass[order[i]];
  }
}

void keep_top_count(const double* mass, int64_t limit, int64_t k, std::vector<uint8_t>& keep,
                    std::vector<int64_t>& order) {
  order.clear();
  for (int64_t kb = 0; kb < limit; ++kb)
    if (!keep[size_t(kb)]) order.push_back(kb);
  const auto first = [&](int64_t a, int64_t b) {
    return mass[a] != mass[b] ? mass[a] > mass[b] : a < b;
  };
  const size_t take = size_t(std::min<int64_t>(k, int64_t(order.size())));
  std::partial_sort(order.begin(), order.begin() + take, order.end(), first);
  for (size_t i = 0; i < take; ++i) keep[size_t(order[i])] = 1;
}

void keep_min_share(const double* mass, int64_t limit, double t, std::vector<uint8_t>& keep) {
  double total = 0;
  for (int64_t kb = 0; kb < limit; ++kb) total += mass[kb];
  for (int64_t kb = 0; kb < limit; ++kb)
    if (mass[kb] >= t * total) keep[size_t(kb)] = 1;
}

}  // namespace spattn::masks
