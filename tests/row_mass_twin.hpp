// topp per row, plainly: masks::keep_row_mass's twin for the tests of the rule and of the
// methods that spend it (xattention, mean_pool, oracle_topk with per=row).
#pragma once
#include <cstdint>
#include <set>
#include <vector>

namespace spattn::test {

// Each step recomputes every row's kept share from scratch; among the rows (of positive total)
// short of p, the least share (ties: the smaller row) gets its largest block not yet kept
// (ties: the smaller index), until no row is short or a short row has nothing left to take.
inline std::set<int64_t> row_mass_twin(const std::vector<std::vector<double>>& rows, int64_t limit,
                                       std::set<int64_t> keep, double p) {
  std::set<size_t> stuck;  // rows short of p with nothing of theirs left out
  for (;;) {
    size_t worst = rows.size();
    double least = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      double total = 0, kept = 0;
      for (int64_t kb = 0; kb < limit; ++kb) {
        total += rows[r][size_t(kb)];
        if (keep.count(kb)) kept += rows[r][size_t(kb)];
      }
      if (total <= 0 || kept >= p * total || stuck.count(r)) continue;
      if (worst == rows.size() || kept / total < least) worst = r, least = kept / total;
    }
    if (worst == rows.size()) return keep;
    int64_t best = -1;
    for (int64_t kb = 0; kb < limit; ++kb)
      if (!keep.count(kb) && rows[worst][size_t(kb)] > 0 &&
          (best < 0 || rows[worst][size_t(kb)] > rows[worst][size_t(best)]))
        best = kb;
    if (best < 0)
      stuck.insert(worst);
    else
      keep.insert(best);
  }
}

// Whether every row of positive total keeps at least p - eps of it (or has nothing left out).
inline bool every_row_reaches(const std::vector<std::vector<double>>& rows, int64_t limit,
                              const std::set<int64_t>& keep, double p, double eps) {
  for (const auto& row : rows) {
    double total = 0, kept = 0;
    bool left_out = false;
    for (int64_t kb = 0; kb < limit; ++kb) {
      total += row[size_t(kb)];
      if (keep.count(kb))
        kept += row[size_t(kb)];
      else if (row[size_t(kb)] > 0)
        left_out = true;
    }
    if (total > 0 && left_out && kept < (p - eps) * total) return false;
  }
  return true;
}

}  // namespace spattn::test
