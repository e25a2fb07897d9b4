// TopKKind names and TopKSelector, the run-time choice among the four selectors.
#include <string>

#include "select/select_common.hpp"

namespace spattn {

TopKKind parse_topk_kind(std::string_view s) {
  if (s == "exact") return TopKKind::exact;
  if (s == "tree") return TopKKind::tree;
  if (s == "estimate") return TopKKind::estimate;
  if (s == "hybrid") return TopKKind::hybrid;
  detail::fail("unknown top-k kind '", std::string(s),
               "' (expected exact, tree, estimate or hybrid)");
}

const char* topk_kind_name(TopKKind kind) {
  switch (kind) {
    case TopKKind::exact: return "exact";
    case TopKKind::tree: return "tree";
    case TopKKind::estimate: return "estimate";
    case TopKKind::hybrid: return "hybrid";
  }
  return "?";
}

TopKSelector::TopKSelector(const TopKParams& p) {
  topk_detail::check_k(p.k);
  topk_detail::check_k_exact(p.k_exact, p.k);
  topk_detail::check_total_blocks(p.total_blocks);
  switch (p.kind) {
    case TopKKind::exact: impl_.emplace<ExactTopK>(p.k); break;
    case TopKKind::tree: impl_.emplace<TournamentTopK>(p.k); break;
    case TopKKind::estimate: impl_.emplace<EstimatedTopK>(p.k, p.total_blocks); break;
    case TopKKind::hybrid: impl_.emplace<HybridTopK>(p.k, p.k_exact, p.total_blocks); break;
    default:
      detail::fail("top-k: kind must be exact, tree, estimate or hybrid (got ", int(p.kind), ")");
  }
}

void TopKSelector::reset(int64_t total_blocks) {
  topk_detail::check_total_blocks(total_blocks);
  switch (kind()) {
    case TopKKind::exact: std::get<ExactTopK>(impl_).reset(); break;
    case TopKKind::tree: std::get<TournamentTopK>(impl_).reset(); break;
    case TopKKind::estimate: std::get<EstimatedTopK>(impl_).reset(total_blocks); break;
    case TopKKind::hybrid: std::get<HybridTopK>(impl_).reset(total_blocks); break;
  }
}

int TopKSelector::k() const {
  return std::visit([](const auto& s) { return s.k(); }, impl_);
}

int TopKSelector::size() const {
  return std::visit([](const auto& s) { return s.size(); }, impl_);
}

void TopKSelector::result(std::vector<BlockScore>& out) const {
  std::visit([&](const auto& s) { s.result(out); }, impl_);
}

std::vector<BlockScore> TopKSelector::result() const {
  std::vector<BlockScore> out;
  result(out);
  return out;
}

}  // namespace spattn
