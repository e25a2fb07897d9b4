#include <algorithm>
#include <cmath>

#include "spattn/calibration.hpp"
#include "spattn/error.hpp"

namespace spattn {

TargetMiss target_miss(const std::vector<double>& reached, double target) {
  SPATTN_CHECK(!reached.empty(), "target_miss: no workloads");
  TargetMiss m;
  m.workloads = int64_t(reached.size());
  double sum = 0;
  for (double x : reached) sum += x;
  m.mean = sum / double(m.workloads);
  m.miss = m.mean - target;
  if (m.workloads > 1) {
    double ss = 0;  // around the mean: two passes, no cancellation
    for (double x : reached) ss += (x - m.mean) * (x - m.mean);
    m.standard_error = std::sqrt(ss / double(m.workloads - 1) / double(m.workloads));
  }
  const auto [lo, hi] = std::minmax_element(reached.begin(), reached.end());
  m.min = *lo, m.max = *hi;
  return m;
}

}  // namespace spattn
