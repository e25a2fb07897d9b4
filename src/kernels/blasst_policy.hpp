// BLASST's prefill policy: the dense loop plus the skip rule (blasst_skips), recording where it
// skipped, and the visiting order (BlasstOrder) as the loop's order hook. Shared by the prefill
// form (blasst.cpp), its margin recorder and decode over a packed cache.
#pragma once
#include "kernels/flash_common.hpp"
#include "spattn/blasst.hpp"

namespace spattn::kernels {

// The visiting order as a policy (kOrder): in_order leaves the loop's ascending list as it is,
// so the run is the in-order kernel bit for bit; local_first reorders it (blasst_local_first)
// around the item's newest row.
template <class Base>
struct BlasstOrdered : Base {
  static constexpr bool kOrder = true;
  BlasstOrder order = BlasstOrder::in_order;

  void visit_order(const Problem& p, const TileView& rows, std::vector<TileVisit>& visits) const {
    if (order == BlasstOrder::local_first)
      blasst_local_first(visits, blasst_row_position(p, rows.q_rows[rows.n - 1]));
  }
};

struct BlasstPolicy : BlasstOrdered<DensePolicy> {
  static constexpr bool kMaySkip = true;
  float threshold = kNegInf;  // log2(lambda): tile_max and m are in log2 units
  SkipStats* record = nullptr;  // written only at this item's (h, t)

  bool skip(Local&, const TileView& v) const {
    const bool below = blasst_skips(v.tile_max, v.m, v.n, threshold);
    if (record) {
      const size_t i = size_t(v.h * record->q_tiles + v.t);
      ++record->visited[i];
      if (below) {
        ++record->skipped[i];
        if (record->record_tiles) record->skipped_tiles[i].push_back(int32_t(v.key_tile));
      }
    }
    return below;
  }
};

}  // namespace spattn::kernels
