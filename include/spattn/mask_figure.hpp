// One head's block mask drawn beside the oracle top-k mask and the block-mass heat map, the
// picture `spattn mask` writes. Masks come as plain per-query-block lists so any source (a
// BlockMask row, an oracle, a test) can be drawn.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spattn/block_mask.hpp"
#include "spattn/image.hpp"
#include "spattn/metrics.hpp"

namespace spattn {

// rows[qb]: the key blocks query block qb keeps, for one head.
using BlockRows = std::vector<std::vector<int32_t>>;

// One head of a BlockMask as per-query-block lists.
BlockRows head_rows(const BlockMask& m, int64_t head);

// Per query block, the min(k[qb], causal blocks) key blocks with the most mass (ties go to the
// lower index), in increasing order: the best any mask with that many blocks per row can do.
BlockRows oracle_topk_rows(const BlockMassGrid& g, const std::vector<int64_t>& k);

// Mean over query blocks that see any key of the mass the listed blocks hold: the quantity
// oracle_topk_mass averages, so the two are comparable. Throws Error on a block outside the grid.
double mass_captured(const BlockMassGrid& g, const BlockRows& rows);
// Listed causal blocks / all causal blocks.
double block_density(const BlockMassGrid& g, const BlockRows& rows);

struct MaskFigureText {
  std::string title;        // top line: problem and head
  std::string method;       // the method spec, under "method"
  std::string oracle_rule;  // how many blocks the oracle got, under "oracle top-k"
};

// Three panels over (query block rows, key block columns), query block 0 at the top:
// the method's mask, the oracle's mask (kept blocks bright, skipped causal blocks dark,
// non-causal blocks grey) and log10 block mass in the magma colormap with a colour bar.
// Panels are max-pooled to at most 1024 px a side and small grids are upscaled.
Image render_mask_figure(const BlockMassGrid& g, const BlockRows& method, const BlockRows& oracle,
                         const MaskFigureText& text);

}  // namespace spattn
