// Intra-modality heads ("MMInference: Modality-Aware Permutation Sparse Attention", §3.2 and
// appendix C.3): an index built from one modality's own queries extrapolates across that
// modality's segments, not across modalities. Each function returns a token-level
// VerticalSlashIndex restricted to the modality's query rows (index.rows), which
// attention_vertical_slash computes over the unpermuted Q/K/V and writes to those rows only:
// running one index per modality fills every row once (a Q-boundary head), and
// vertical_slash_coverage gives each piece's exact coverage.
//
// Positions follow the causal convention (query row i at kv_len - q_len + i); `layout` gives
// one modality id per key token (ModalityLayout::validate(kv_len) is checked).
#pragma once
#include <cstdint>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/masks.hpp"
#include "spattn/modality.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn {

// Key positions of `modality`, ascending.
std::vector<int64_t> modality_positions(const ModalityLayout& layout, uint8_t modality);
// Query rows (of q_len, bottom-right aligned) whose token is of `modality`, ascending.
std::vector<int64_t> modality_rows(const ModalityLayout& layout, uint8_t modality, int64_t q_len);

// A-shape inside one modality, as vertical and slash lines: every row of `modality` sees the
// modality's own first `sink` tokens (vertical lines at those positions: the modality's sink,
// e.g. a video's first patches, not the prompt's first tokens) and its `local` most recent keys
// (diagonals 0..local-1). Static: no estimate. heads = q heads; sink >= 0, local >= 1.
VerticalSlashIndex a_shape_index_for_modality(const ModalityLayout& layout, uint8_t modality,
                                              int64_t heads, int64_t q_len, int64_t kv_len,
                                              int64_t sink, int64_t local, int64_t tile_rows = 64);

// Vertical-slash from one modality's own last queries: A_hat is estimated from the last
// min(last_q, rows of the modality) query rows of `modality` against the keys of `modality`
// only (softmax over those keys), columns are chosen among the modality's keys (its first
// `sink` tokens forced) and diagonals from same-modality pairs (0..local-1 forced).
VerticalSlashIndex vertical_slash_index_for_modality(const TensorView& q, const TensorView& k,
                                                     const ModalityLayout& layout, uint8_t modality,
                                                     const VerticalSlashConfig& c,
                                                     const AttnOptions& opt);

}  // namespace spattn
