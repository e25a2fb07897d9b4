// MOMO Section 3, "Estimated Online Top-K": a Gaussian acceptance threshold, Eqs. (5)-(6).
#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <limits>

#include "select/select_common.hpp"

namespace spattn {

void EstimatedTopK::reset(int k, int64_t total_blocks) {
  topk_detail::check_k(k);
  topk_detail::check_total_blocks(total_blocks);
  init(k, total_blocks);
}

void EstimatedTopK::init(int k, int64_t total_blocks) {
  k_ = k;
  held_.resize(size_t(k));  // shrinking keeps the capacity: per-row resets do not allocate
  reset(total_blocks);
}

void EstimatedTopK::reset(int64_t total_blocks) {
  topk_detail::check_total_blocks(total_blocks);
  total_ = total_blocks;
  taken_ = 0;
  seen_ = 0;
  n_ = 0;
  mean_ = 0.0;
  m2_ = 0.0;
  lo_remaining_ = INT64_MAX;
  lo_2z2_ = 0.0;
  hi_slots_ = -1;
  hi_2z2_ = 0.0;
}

double EstimatedTopK::sigma() const { return n_ >= 2 ? std::sqrt(m2_ / double(n_ - 1)) : 0.0; }

namespace {

// z = erfinv(x) on the grid x = i / kZGrid, i in [0, kZGrid] (then +inf), computed once: bounds
// on Eq. (6)'s z for any x in [0, 1) without evaluating erfinv, which (through its logf) was
// about a third of the hybrid's selection time at k = 128 in a profile, when it ran once per
// take and per bound renewal.
constexpr int kZGrid = 4096;  // a power of two: every grid point i / kZGrid is a float

const std::array<float, kZGrid + 3>& z_grid() {
  static const std::array<float, kZGrid + 3> grid = [] {
    std::array<float, kZGrid + 3> g{};
    for (int i = 0; i <= kZGrid; ++i) g[size_t(i)] = erfinv(float(i) / float(kZGrid));
    g[kZGrid + 1] = g[kZGrid + 2] = std::numeric_limits<float>::infinity();
    return g;
  }();
  return grid;
}

}  // namespace

// With i / kZGrid <= x < (i + 1) / kZGrid, float(x) lies in the same closed interval (its ends
// are floats), so erfinv(float(x)) lies between the grid's values at i and i + 1; one more
// point on each side covers erfinv's approximation not being monotone to the last bit.
topk_detail::ZBounds topk_detail::erfinv_bounds(double x) {
  const auto& g = z_grid();
  const int i = std::min(int(x * kZGrid), kZGrid);
  return {i >= 1 ? double(g[size_t(i - 1)]) : 0.0, double(g[size_t(i + 2)])};
}

// Called with 0 < slots < remaining, so p = 1 - slots / remaining lies in (0, 1) and
// erfinv(2p - 1) is finite. Pr(S > s_th) = slots / remaining under S ~ N(m, sigma^2) (Eq. 5)
// gives s_th = sqrt(2) sigma erfinv(2p - 1) + m (Eq. 6, Appendix A).
bool EstimatedTopK::exceeds_threshold_exact(float score, int slots, int64_t remaining) {
  // No m yet: the row's first block is taken. In causal rows it holds the sink tokens; on the
  // text workload, not taking it cuts the estimate's captured mass at k = 64 from 0.96 to 0.23.
  if (n_ == 0) return true;
  const double m = mean_;
  const double x = 1.0 - 2.0 * double(slots) / double(remaining);  // 2p - 1
  // The sign of erfinv(2p - 1) is the sign of 2p - 1: scores on the far side of m are decided
  // without evaluating it.
  if (x >= 0.0 && score <= m) return false;
  if (x <= 0.0 && score > m) return true;
  const double s = sigma();
  if (s == 0.0) return score > m;  // one score so far, or all equal: s_th = m
  if (x >= 0.0) {
    if (remaining < lo_remaining_) {
      // z_lo at r_lo a sixteenth of the remaining blocks ahead (kept at or above 2 slots,
      // where p_lo = 1/2 and z_lo = 0): close enough that few scores fall between the bounds,
      // far enough that it is seldom renewed.
      const int64_t r_lo =
          std::max<int64_t>(2 * int64_t(slots), remaining - std::max<int64_t>(1, remaining / 16));
      const double z_lo = topk_detail::erfinv_bounds(1.0 - 2.0 * double(slots) / double(r_lo)).lo;
      lo_remaining_ = r_lo;
      lo_2z2_ = 2.0 * z_lo * z_lo;
    }
    // The grid's bounds decide all but the scores within a few grid steps of s_th; the upper
    // one is cached as z_hi (z only falls until the next take).
    const topk_detail::ZBounds z = topk_detail::erfinv_bounds(x);
    const double dev = double(score) - m, a = dev * dev * double(n_ - 1);  // dev > 0 here
    if (a <= 2.0 * z.lo * z.lo * m2_) return false;
    hi_slots_ = slots;
    hi_2z2_ = 2.0 * z.hi * z.hi;
    if (a > hi_2z2_ * m2_) return true;
  }
  const double z = erfinv(float(x));
  if (x >= 0.0) hi_2z2_ = 2.0 * z * z;  // the tightest z_hi there is: this block's z
  const double s_th = std::sqrt(2.0) * s * z + m;
  return score > s_th;
}

void EstimatedTopK::result(std::vector<BlockScore>& out) const {
  out.assign(held_.begin(), held_.begin() + taken_);
  std::sort(out.begin(), out.end(), ranks_before);
}

std::vector<BlockScore> EstimatedTopK::result() const {
  std::vector<BlockScore> out;
  result(out);
  return out;
}

}  // namespace spattn
