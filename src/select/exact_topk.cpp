// MOMO Section 3, "Online Exact Top-K": k slots with the argmin mu kept after every update.
#include <algorithm>

#include "select/select_common.hpp"

namespace spattn {

void ExactTopK::reset(int k) {
  topk_detail::check_k(k);
  init(k);
}

void ExactTopK::init(int k) {
  keys_.resize(size_t(k));  // shrinking keeps the capacity: per-row resets do not allocate
  group_min_.resize(size_t((k + kGroup - 1) / kGroup));
  group_arg_.resize(group_min_.size());
  reset();
}

void ExactTopK::reset() {
  filled_ = 0;
  min_pos_ = 0;
  // Empty slots are the argmin (s = -inf), so any block enters; with no slot, none does.
  min_key_ = keys_.empty() ? ~uint64_t(0) : 0;
}

void ExactTopK::replace(uint64_t key) { (void)exchange(key); }

uint64_t ExactTopK::exchange(uint64_t key) {
  const int k = int(keys_.size());
  if (filled_ < k) {
    keys_[size_t(filled_++)] = key;
    if (filled_ == k) {
      for (int g = 0; g < int(group_min_.size()); ++g) rescan_group(g);
      find_min();
    }
    return 0;
  }
  const uint64_t out = keys_[size_t(min_pos_)];
  keys_[size_t(min_pos_)] = key;
  rescan_group(min_pos_ / kGroup);
  find_min();
  return out;
}

namespace {
// The least of p[0, n), n >= 1: four running minima keep the compare chains independent.
uint64_t min_of(const uint64_t* p, int n) {
  uint64_t m0 = p[0], m1 = m0, m2 = m0, m3 = m0;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    m0 = std::min(m0, p[i]);
    m1 = std::min(m1, p[i + 1]);
    m2 = std::min(m2, p[i + 2]);
    m3 = std::min(m3, p[i + 3]);
  }
  for (; i < n; ++i) m0 = std::min(m0, p[i]);
  return std::min(std::min(m0, m1), std::min(m2, m3));
}
// The position of `key` in p[0, n), where it occurs exactly once: summed without a branch, as
// the position is random and a search loop's exit would mispredict.
int position_of(const uint64_t* p, int n, uint64_t key) {
  int pos = 0;
  for (int i = 0; i < n; ++i) pos += int(p[i] == key) * i;
  return pos;
}
}  // namespace

void ExactTopK::rescan_group(int g) {
  const int b = g * kGroup, n = std::min(kGroup, int(keys_.size()) - b);
  const uint64_t m = min_of(keys_.data() + b, n);
  group_min_[size_t(g)] = m;
  group_arg_[size_t(g)] = uint8_t(position_of(keys_.data() + b, n, m));
}

// The O(k) step of the paper's exact top-k, in two levels: the least group minimum and its
// group (keys are unique, as block indices are), whose argmin is kept: the keys of that group
// are not read, so an update touches only the lines of the group it wrote and the minima.
void ExactTopK::find_min() {
  const uint64_t* gm = group_min_.data();
  const int groups = int(group_min_.size());
  if (groups == 1) {  // k <= kGroup (the hybrid's 8 exact slots): the group's argmin is mu
    min_key_ = gm[0];
    min_pos_ = group_arg_[0];
    return;
  }
  min_key_ = min_of(gm, groups);
  const int g = position_of(gm, groups, min_key_);
  min_pos_ = g * kGroup + group_arg_[size_t(g)];
}

void ExactTopK::result(std::vector<BlockScore>& out) const {
  topk_detail::keys_to_result(keys_.data(), filled_, out);
}

std::vector<BlockScore> ExactTopK::result() const {
  std::vector<BlockScore> out;
  result(out);
  return out;
}

}  // namespace spattn
