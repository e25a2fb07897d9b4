#include "masks/block_budget.hpp"

#include <algorithm>
#include <limits>

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

void keep_row_mass(const RowMasses& rows, int64_t limit, double p, std::vector<uint8_t>& keep,
                   RowMassScratch& scratch) {
  const int64_t n_rows = rows.n, row_stride = rows.stride;
  // share[r]: row r's kept share; a row met (or of no mass) is marked done with +inf.
  constexpr double kDone = std::numeric_limits<double>::infinity();
  std::vector<double>& share = scratch.share;
  std::vector<double>& total = scratch.total;
  share.assign(size_t(n_rows), kDone);
  total.assign(size_t(n_rows), 0.0);
  // Row r's blocks not yet kept, as a max-heap by mass (ties: the smaller index first), built
  // when the row is first the worst: its top, once blocks kept since for other rows are popped,
  // is the block holding most of its missing mass, without a scan of every block per block
  // added (a decode step's pages number thousands).
  scratch.heap.resize(size_t(n_rows * limit));
  scratch.size.assign(size_t(n_rows), -1);
  for (int64_t r = 0; r < n_rows; ++r) {
    const double* row = rows.data + r * row_stride;
    double t = 0, kept = 0;
    for (int64_t kb = 0; kb < limit; ++kb) {
      t += row[kb];
      if (keep[size_t(kb)]) kept += row[kb];
    }
    total[size_t(r)] = t;
    if (t > 0 && kept < p * t) share[size_t(r)] = kept / t;
  }
  for (;;) {
    const auto worst = std::min_element(share.begin(), share.end());
    if (worst == share.end() || *worst == kDone) return;
    const int64_t r = worst - share.begin();
    const double* row = rows.data + r * row_stride;
    int32_t* heap = scratch.heap.data() + r * limit;
    int64_t& size = scratch.size[size_t(r)];
    const auto after = [row](int32_t a, int32_t b) {  // a leaves the heap after b
      return row[a] != row[b] ? row[a] < row[b] : a > b;
    };
    if (size < 0) {
      size = 0;
      for (int64_t kb = 0; kb < limit; ++kb)
        if (!keep[size_t(kb)] && row[kb] > 0) heap[size++] = int32_t(kb);
      std::make_heap(heap, heap + size, after);
    }
    int64_t best = -1;
    while (size > 0 && best < 0) {
      std::pop_heap(heap, heap + size, after);
      const int32_t top = heap[--size];
      if (!keep[size_t(top)]) best = top;
    }
    if (best < 0) {  // nothing of the row is left out: rounding alone kept it short of p
      share[size_t(r)] = kDone;
      continue;
    }
    keep[size_t(best)] = 1;
    for (int64_t i = 0; i < n_rows; ++i) {
      double& s = share[size_t(i)];
      if (s == kDone) continue;
      s += rows.data[i * row_stride + best] / total[size_t(i)];
      if (s >= p) s = kDone;
    }
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
