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
  struct KeySource : Base::KeySource {
    static constexpr bool kOrder = true;
  };
  BlasstOrder order = BlasstOrder::in_order;

  void visit_order(const Problem& p, const TileView& rows, std::vector<TileVisit>& visits) const {
    if (order == BlasstOrder::local_first)
      blasst_local_first(visits, blasst_row_position(p, rows.q_rows[rows.n - 1]));
  }
};

// The skip rule (blasst_skips) as a policy mixin over any loop form (Base): the dense loop for
// BLASST itself, MOMO's query-sparse and block-sparse passes for its lambda option. Records, in
// `record`, the visited and skipped tiles of this item's (h, t).
template <class Base>
struct BlasstSkipping : Base {
  struct Observers : Base::Observers {
    static constexpr bool kMaySkip = true;
  };
  float threshold = kNegInf;    // log2(lambda): tile_max and m are in log2 units
  SkipStats* record = nullptr;  // written only at this item's (h, t)

  template <class L>
  bool skip(L&, const TileView& v) const {
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

struct BlasstPolicy : BlasstSkipping<BlasstOrdered<DensePolicy>> {};

// A skip rule (BlasstSkip) resolved for one call of a form whose query tiles number q_tiles of
// tile_rows rows: the log2 threshold, the order that runs (in order at lambda 0, where nothing
// can be skipped: the form's own sums bit for bit), and the record reset to this geometry.
// Throws Error naming `who` for a bad lambda or order.
struct BlasstSetup {
  float threshold = kNegInf;
  BlasstOrder order = BlasstOrder::in_order;
  SkipStats* record = nullptr;
};
BlasstSetup blasst_setup(const BlasstSkip& skip, int64_t heads, int64_t q_tiles, int64_t tile_rows,
                         const char* who);
// After the call: recorded tile lists ascending, whatever the visiting order.
void blasst_finish(const BlasstSetup& setup);

// Sets a mixed-in policy's rule from a setup.
template <class P>
void apply_blasst(P& pol, const BlasstSetup& s) {
  pol.threshold = s.threshold;
  pol.order = s.order;
  pol.record = s.record;
}

}  // namespace spattn::kernels
