// MOMO Section 3, "Tournament Tree Exact Top-K": a winner tree over k leaves, O(log k) update.
#include "select/select_common.hpp"

namespace spattn {

void TournamentTopK::reset(int k) {
  topk_detail::check_k(k);
  k_ = k;
  node_key_.resize(2 * size_t(k));
  node_leaf_.resize(2 * size_t(k));
  reset();
}

void TournamentTopK::reset() {
  filled_ = 0;
  if (k_ == 0) return;
  // Every leaf empty (key 0, the paper's s = -inf): each internal node's winner can be any leaf
  // below it; take its left child's.
  std::fill(node_key_.begin() + 1, node_key_.end(), uint64_t(0));
  for (int l = 0; l < k_; ++l) node_leaf_[size_t(k_ + l)] = l;
  for (int i = k_ - 1; i >= 1; --i) node_leaf_[size_t(i)] = node_leaf_[2 * size_t(i)];
}

// The new key overwrites the leaf of the current minimum (the root's t') and the matches on
// that leaf's path to the root are replayed: each parent takes the smaller of its two children.
void TournamentTopK::replace(uint64_t key) {
  if (node_key_[1] == 0) ++filled_;  // the minimum was an empty leaf
  size_t i = size_t(k_ + node_leaf_[1]);
  node_key_[i] = key;
  uint64_t* nk = node_key_.data();
  int32_t* nl = node_leaf_.data();
  while (i > 1) {
    const size_t sibling = i ^ 1, parent = i >> 1;
    const size_t win = nk[sibling] < nk[i] ? sibling : i;
    nk[parent] = nk[win];
    nl[parent] = nl[win];
    i = parent;
  }
}

void TournamentTopK::result(std::vector<BlockScore>& out) const {
  out.clear();
  for (int l = 0; l < k_; ++l) {
    const uint64_t key = node_key_[size_t(k_ + l)];
    if (key != 0) out.push_back(topk_detail::from_key(key));
  }
  std::sort(out.begin(), out.end(), ranks_before);
}

std::vector<BlockScore> TournamentTopK::result() const {
  std::vector<BlockScore> out;
  result(out);
  return out;
}

}  // namespace spattn
