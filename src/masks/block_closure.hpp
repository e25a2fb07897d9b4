// Rounding a token-level pattern outward to blocks, shared by the static mask builders.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "spattn/block_mask.hpp"
#include "spattn/coverage.hpp"
#include "spattn/masks.hpp"

namespace spattn::masks {

// Appends key intervals [begin, end) whose union is the set of keys that rows at positions
// p0..p1 (one query block) attend to under a token-level pattern; each key listed must be seen
// by some row of the block at or after its own position. Intervals may overlap or be empty.
using BlockIntervals = std::function<void(int64_t p0, int64_t p1, std::vector<KeyRange>& out)>;

// A causal mask, the same for every head, keeping each key block that an interval touches
// (intervals are clipped to [0, p1]). Throws Error on bad geometry, naming `who`.
BlockMask close_over_blocks(const char* who, const MaskGeometry& g, const BlockIntervals& fn);

// Marks in `keep` (one flag per key block) the blocks that keys [begin, end) touch.
void mark_blocks(int64_t begin, int64_t end, int64_t block_k, std::vector<uint8_t>& keep);

}  // namespace spattn::masks
