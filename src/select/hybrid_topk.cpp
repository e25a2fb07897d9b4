// MOMO's hybrid (Section 3; Section 4.2 "Estimated vs. Exact k"): k_exact exact slots, then the
// estimate for the remaining k - k_exact, fed by what the exact part lets go.
#include <algorithm>

#include "select/select_common.hpp"

namespace spattn {

void HybridTopK::reset(int k, int k_exact, int64_t total_blocks) {
  topk_detail::check_k(k);
  topk_detail::check_k_exact(k_exact, k);
  topk_detail::check_total_blocks(total_blocks);
  exact_.init(k_exact);
  estimate_.init(k - k_exact, 0);
  reset(total_blocks);
}

void HybridTopK::reset(int64_t total_blocks) {
  topk_detail::check_total_blocks(total_blocks);
  exact_.reset();
  // The first k_exact blocks fill the exact part; each later push hands one block on.
  estimate_.reset(std::max<int64_t>(0, total_blocks - exact_.k()));
}

void HybridTopK::result(std::vector<BlockScore>& out) const {
  out.clear();
  for (int i = 0; i < exact_.size(); ++i)
    out.push_back(topk_detail::from_key(exact_.keys_[size_t(i)]));
  out.insert(out.end(), estimate_.held_.begin(), estimate_.held_.begin() + estimate_.size());
  std::sort(out.begin(), out.end(), ranks_before);
}

std::vector<BlockScore> HybridTopK::result() const {
  std::vector<BlockScore> out;
  result(out);
  return out;
}

}  // namespace spattn
