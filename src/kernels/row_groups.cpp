// Row groups over a packed K/V: each query tile is up to 64 rows of one group (gathered rows,
// as FlashDecoding loads a sparse set of queries in MMInference's Algorithm 5), and attends to
// the group's packed key ranges (the permuted keys of Algorithms 5-7). Outputs go back to the
// rows' own indices. The loop is the dense one; only the rows and key-range hooks change.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/row_groups.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/flash-inl.h"
#include "spattn/row_groups.hpp"

#ifndef SPATTN_KERNELS_ROW_GROUPS_POLICY_
#define SPATTN_KERNELS_ROW_GROUPS_POLICY_
namespace spattn::kernels {

// One query tile: rows [begin, begin + n) of group g.
struct GroupTile {
  int64_t group = 0, begin = 0, n = 0;
};

struct RowGroupsPolicy : DensePolicy {
  const std::vector<RowGroup>* groups = nullptr;
  std::vector<GroupTile> tiles;

  int64_t num_tiles(const Problem&) const { return int64_t(tiles.size()); }
  int64_t rows(const Problem&, int64_t t, int64_t* q_rows, int64_t* out_rows) const {
    const GroupTile& gt = tiles[size_t(t)];
    const auto& rows = (*groups)[size_t(gt.group)].rows;
    for (int64_t r = 0; r < gt.n; ++r) q_rows[r] = out_rows[r] = rows[size_t(gt.begin + r)];
    return gt.n;
  }
  void key_ranges(const Problem&, int64_t, int64_t t, int64_t, std::vector<KeyRange>& out) const {
    const auto& keys = (*groups)[size_t(tiles[size_t(t)].group)].keys;
    out.insert(out.end(), keys.begin(), keys.end());
  }
  // Keys listed (the causal rule may cut them): enough to order items longest first.
  int64_t cost(const Problem&, int64_t, int64_t t, int64_t) const {
    int64_t c = 0;
    for (const KeyRange& r : (*groups)[size_t(tiles[size_t(t)].group)].keys) c += r.end - r.begin;
    return c;
  }
};

}  // namespace spattn::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
void RowGroupsEntry(const Problem& p, const std::vector<RowGroup>* groups, Stats* stats) {
  RowGroupsPolicy pol;
  pol.groups = groups;
  for (size_t g = 0; g < groups->size(); ++g) {
    const int64_t n = int64_t((*groups)[g].rows.size());
    for (int64_t b = 0; b < n; b += pol.tile_rows)
      pol.tiles.push_back({int64_t(g), b, std::min(pol.tile_rows, n - b)});
  }
  RunFlash(p, pol, stats);
}
}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "spattn/error.hpp"
#include "spattn/packed_kv.hpp"

namespace spattn {
namespace kernels {
HWY_EXPORT(RowGroupsEntry);
}

void attention_row_groups(const TensorView& q, const PackedKV& kv,
                          const std::vector<RowGroup>& groups, const TensorView& out,
                          const AttnOptions& opt, float* lse, Stats* stats) {
  const kernels::Problem p = kernels::make_problem(q, kv.data(), out, opt, lse);
  std::vector<uint8_t> seen(size_t(q.seq), 0);
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& rows = groups[g].rows;
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t r = rows[i];
      SPATTN_CHECK(r >= 0 && r < q.seq, "row_groups: row ", r, " of group ", g, " outside [0, ",
                   q.seq, ")");
      SPATTN_CHECK(i == 0 || r > rows[i - 1], "row_groups: rows of group ", g,
                   " must be strictly increasing (", rows[i - 1], " then ", r, ")");
      SPATTN_CHECK(!seen[size_t(r)], "row_groups: row ", r, " is in two groups");
      seen[size_t(r)] = 1;
    }
    for (const KeyRange& k : groups[g].keys)
      SPATTN_CHECK(k.begin >= 0 && k.begin <= k.end && k.end <= kv.size(),
                   "row_groups: key range [", k.begin, ", ", k.end, ") of group ", g,
                   " outside the ", kv.size(), " packed keys");
  }
  HWY_DYNAMIC_DISPATCH(kernels::RowGroupsEntry)(p, &groups, stats);
}
}  // namespace spattn
#endif
