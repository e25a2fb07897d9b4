// MMInference's grid head ("MMInference: Modality-Aware Permutation Sparse Attention",
// section 3.1, Algorithms 1 and 5; Table 3's grid options): vertical lines (key columns), horizontal
// lines (query rows that attend to everything) and slash lines (diagonals) evenly spaced at a
// stride sigma from a phase, found online from the last last_q queries.
//
// Computed on the permuted layout: keys are packed grouped by their residue class
// c = (j - phase) mod stride (ascending positions inside a class) and query rows are taken
// class by class, so the grid becomes contiguous blocks: class 0 holds the vertical lines (one
// key range for every row), a row's own class holds its slash lines (one range), and class-0
// rows are the horizontal lines (every key). Nothing copies Q, K or V in a permuted order; the
// packer gathers the keys and the kernel picks the rows (attention_row_groups).
//
// Every row also computes, in natural order, its sink tiles and a local band of whole 64-key
// tiles (Algorithm 1's "last and rightmost block"): the grid pass only adds keys outside both, so
// the two passes are disjoint and merge exactly by (O, LSE). Coverage is reported in original
// coordinates, entry for entry.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/coverage.hpp"
#include "spattn/row_groups.hpp"

namespace spattn {

struct GridConfig {
  bool hline = true, vline = true, slash = true;  // Table 3's use_hline, use_vline, use_slash
  int64_t frame_stride = 0;   // tokens per frame when known (0: none): its stride and whole
                              // fractions of it join the stride space
  int64_t max_stride = 1024;  // Table 3's max stride
  int64_t min_stride = 16;    // smallest generic stride searched (powers of two up to max)
  int64_t last_q = 64;        // query rows of the estimate (section 4.1)
  int64_t sink_blocks = 1;    // 64-key tiles from position 0 every row computes
  int64_t local_blocks = 1;   // 64-key tiles before a row's own tile it computes
  // Stride choice: maximise captured share - density_weight * density (see grid_estimate).
  double density_weight = 1.0;
};
// Throws Error naming the field on values out of range.
void check_grid_config(const GridConfig& c);

// One head's grid: stride sigma >= 1 and phase in [0, stride).
struct GridLines {
  int64_t stride = 0, phase = 0;
};
// Throws Error unless 1 <= stride <= kv_len and 0 <= phase < stride.
void check_grid_lines(const GridLines& g, int64_t kv_len);

// The strides searched: the frame stride and its halves, quarters and eighths (>= 8), and the
// powers of two from min_stride to max_stride; all <= max_stride and <= kv_len, ascending.
std::vector<int64_t> grid_stride_space(const GridConfig& c, int64_t kv_len);

// Algorithm 1's online search, per q head. A_hat = softmax of the last last_q rows against
// their causal keys; only the mass outside the sink and local tiles counts (the rest is
// computed anyway). For each stride s of the space, the vertical lines' mass per phase
// p (sum of A_hat over keys j = p mod s) picks the phase (the largest; ties: the smaller p),
// and the captured share = (vline mass at p + slash mass on diagonals i - j = 0 mod s) /
// total. The stride with the largest captured share - density_weight * (lines on) / s wins
// (ties: the smaller stride). Deterministic: one sgemm, sums in double, fixed order.
std::vector<GridLines> grid_estimate(const TensorView& q, const TensorView& k, const GridConfig& c,
                                     const AttnOptions& opt);

// Algorithm 1's choice from A_hat's sums (the half of grid_estimate the device's estimate,
// cuda::grid_estimate, shares): vert[j] and slash[o] (kv_len each) summed over the keys the
// grid pass could add (keys from grid_sink_end, before each row's local band: tile(pos) -
// local_blocks tiles), total their sum; strides from grid_stride_space; bucket is scratch.
GridLines grid_choose_lines(const double* vert, const double* slash, double total,
                            const GridConfig& c, int64_t kv_len,
                            const std::vector<int64_t>& strides, std::vector<double>& bucket);
// The first key past the sink tiles every row computes anyway.
int64_t grid_sink_end(const GridConfig& c, int64_t kv_len);

// The permuted layout of one head: which keys are packed in which order with which positions,
// and the row groups over them. Key positions are not the keys' own: a key enters the grid pass
// at the first query position whose local band no longer holds it, 64 * (tile(j) +
// local_blocks + 1), so the kernel's causal rule (key position <= row position) leaves out
// exactly the band and everything after it. Keys in the sink tiles are not packed.
struct GridLayout {
  std::vector<int64_t> order;      // packed index -> key row
  std::vector<int64_t> positions;  // packed index -> position the causal rule compares
  std::vector<RowGroup> groups;    // one per residue class of the query rows
};
// q rows sit at positions pos_offset + r (pos_offset = kv_len - q_len, a multiple of 64).
GridLayout grid_layout(const GridLines& g, const GridConfig& c, int64_t q_len, int64_t kv_len);

// The natural-order pass: per query block of 64 rows, the sink tiles and the local band.
BlockMask grid_band_mask(const GridConfig& c, int64_t heads, int64_t q_len, int64_t kv_len);

// Exactly the entries the two passes compute, per q head's lines, in original coordinates.
std::unique_ptr<Coverage> grid_coverage(std::vector<GridLines> lines, const GridConfig& c,
                                        int64_t q_len, int64_t kv_len);

// Both passes and their merge: out (and lse) as attention over the grid head's entries.
// lines has one entry per q head. Causal only; q_len must leave kv_len - q_len a multiple of
// 64 (prefill).
void attention_grid(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& out, const std::vector<GridLines>& lines, const GridConfig& c,
                    const AttnOptions& opt = {}, float* lse = nullptr, Stats* stats = nullptr);

}  // namespace spattn
