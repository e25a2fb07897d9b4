// The vertical-slash estimate behind vertical_slash_index and its per-modality form (private
// to src/masks).
#pragma once
#include <cstdint>
#include <vector>

#include "spattn/masks.hpp"

namespace spattn::masks {

// Estimates from q rows `est_rows` (sorted) against the candidate keys `keys` (ascending
// positions; null: every key) which columns and diagonals carry the attention (see
// vertical_slash.cpp). `forced` are indices into the candidates always kept as columns. The
// returned columns are key positions; its rows are left absent (every row).
VerticalSlashIndex estimate_vertical_slash(const TensorView& q, const TensorView& k,
                                           const VerticalSlashConfig& c, const AttnOptions& opt,
                                           const std::vector<int64_t>& est_rows,
                                           const std::vector<int64_t>* keys,
                                           const std::vector<int64_t>& forced);

}  // namespace spattn::masks
