// The heavy-hitter analysis of "Chunked Sparse Attention for Prefill Optimization" (Task 8.4,
// attention pattern analysis; the Jaccard stability check of its verification metrics) over
// traces (spattn/h2o_trace.hpp): whether the attention sink survives in the memory sets, how
// stable the heavy-hitter sets are from chunk to chunk, between heads and between two runs or
// prompts, and a picture of the selected positions per chunk.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "spattn/h2o_trace.hpp"
#include "spattn/image.hpp"

namespace spattn {

// |a n b| / |a u b| of two sorted position lists; 1 when both are empty.
double jaccard(std::span<const int64_t> a, std::span<const int64_t> b);

// Heavy_c of one head: M_c without Local_c (the chunk's last L positions, kept whatever their
// score), so only what the scores chose is compared.
std::vector<int64_t> h2o_heavy_set(const H2OTraceLayer& t, size_t chunk, int64_t head);

struct MeanMin {
  double mean = 0, min = 0;
  int64_t n = 0;  // pairs averaged (0: none, mean and min meaningless)
};

struct H2OLayerStats {
  int64_t layer = 0;
  int64_t sets = 0;       // memory sets (chunks x heads)
  double sink_first = 0;  // share of memory sets holding position 0
  double sink_all = 0;    // share holding every one of the first `sink` positions
  MeanMin consecutive;    // J(Heavy_c, Heavy_{c+1}) per head
  MeanMin heads;          // J(Heavy_c of head a, of head b), a < b, per chunk
  MeanMin compare;        // J(Heavy_c here, Heavy_c of the other trace), per chunk and head
};

// other (may be null): the same layer of another run or prompt; Error unless it has the same
// heads and chunk boundaries (the sets are compared position for position).
H2OLayerStats h2o_layer_stats(const H2OTraceLayer& t, int64_t sink,
                              const H2OTraceLayer* other = nullptr);

// One layer's figure: per head (stacked top to bottom) a panel with a row per chunk and a
// column per position (pooled to at most `max_width` pixels, a pixel showing the most
// important state among its positions): heavy hitters dark, the local window orange,
// positions seen and dropped light grey, positions not yet reached white.
Image h2o_figure(const H2OTraceLayer& t, int64_t max_width = 1024);

}  // namespace spattn
