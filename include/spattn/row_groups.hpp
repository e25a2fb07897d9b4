// Gathered query rows against packed key ranges: the kernel form behind MMInference's grid
// head and its modality boundaries ("MMInference: Modality-Aware Permutation Sparse
// Attention", section 3 and Appendix G, Algorithms 5-7). Rows and keys are permuted where the
// kernel picks them (which q rows form a tile, in which order keys were packed), never by
// copying the user's Q, K or V.
#pragma once
#include <cstdint>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/coverage.hpp"

namespace spattn {

class PackedKV;

// One group of query rows that attend to the same packed keys. Rows are q row indices in
// ascending order (a modality's rows, one residue class of a grid stride); keys are ranges of
// packed indices (the order the PackedKV was appended in). The causal rule compares each
// packed key's position with the row's position (AttnOptions::q_start, or bottom-right).
struct RowGroup {
  std::vector<int64_t> rows;
  std::vector<KeyRange> keys;
};

// Computes every listed row of every q head against its group's keys and writes its output
// (and LSE) at the row's own index: out is shaped like q. Rows in no group are left as they
// are. A row may appear in at most one group. Groups are cut into query tiles of at most 64
// rows; a tile's rows all see the group's keys. Throws Error on rows out of range, unsorted or
// repeated, and on key ranges outside [0, kv.size()).
void attention_row_groups(const TensorView& q, const PackedKV& kv,
                          const std::vector<RowGroup>& groups, const TensorView& out,
                          const AttnOptions& opt = {}, float* lse = nullptr,
                          Stats* stats = nullptr);

}  // namespace spattn
