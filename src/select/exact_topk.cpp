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
    if (filled_ == k) rescan();
    return 0;
  }
  const uint64_t out = keys_[size_t(min_pos_)];
  keys_[size_t(min_pos_)] = key;
  rescan();
  return out;
}

// The O(k) step of the paper's exact top-k. Four running minima keep the compare chains
// independent; the position is then found by one search for the minimum's key (keys are
// unique, as block indices are).
void ExactTopK::rescan() {
  const uint64_t* p = keys_.data();
  const int k = int(keys_.size());
  uint64_t m0 = p[0], m1 = m0, m2 = m0, m3 = m0;
  int i = 0;
  for (; i + 4 <= k; i += 4) {
    m0 = std::min(m0, p[i]);
    m1 = std::min(m1, p[i + 1]);
    m2 = std::min(m2, p[i + 2]);
    m3 = std::min(m3, p[i + 3]);
  }
  for (; i < k; ++i) m0 = std::min(m0, p[i]);
  min_key_ = std::min(std::min(m0, m1), std::min(m2, m3));
  min_pos_ = int(std::find(p, p + k, min_key_) - p);
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
