// BLASST's prefill policy: the dense loop plus the skip rule (blasst_skips), recording where it
// skipped. Shared by the prefill form (blasst.cpp) and decode over a packed cache.
#pragma once
#include "kernels/flash_common.hpp"
#include "spattn/blasst.hpp"

namespace spattn::kernels {

struct BlasstPolicy : DensePolicy {
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
