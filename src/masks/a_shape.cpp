// A-shape (StreamingLLM, Xiao et al. 2024): attention sinks plus a sliding window.
#include <algorithm>
#include <vector>

#include "masks/block_closure.hpp"
#include "spattn/error.hpp"

namespace spattn {

// Rows p0..p1 see the sinks [0, sink) and, together, the windows (p - local, p]: the interval
// (p0 - local, p1]. Rounded outward to blocks (close_over_blocks).
BlockMask a_shape_mask(const MaskGeometry& g, int64_t sink, int64_t local) {
  SPATTN_CHECK(sink >= 0, "a_shape: sink must be >= 0, got ", sink);
  SPATTN_CHECK(local >= 1, "a_shape: local must be >= 1 (each row sees itself), got ", local);
  return masks::close_over_blocks("a_shape", g,
                                  [&](int64_t p0, int64_t p1, std::vector<KeyRange>& out) {
                                    out.push_back({0, sink});
                                    out.push_back({p0 - local + 1, p1 + 1});
                                  });
}

std::vector<KeyRange> a_shape_block_keys(int64_t p0, int64_t p1, int64_t sink, int64_t local,
                                         int64_t block_k) {
  SPATTN_CHECK(sink >= 0 && local >= 1 && block_k >= 1 && p0 >= 0 && p1 >= p0,
               "a_shape_block_keys: sink ", sink, ", local ", local, ", block_k ", block_k,
               ", rows [", p0, ", ", p1, "]");
  // As close_over_blocks marks them: every block meeting [0, sink) or (p0 - local, p1], each
  // interval first cut at p1 + 1.
  const auto up = [&](int64_t x) { return (x + block_k - 1) / block_k * block_k; };
  const int64_t sink_end = up(std::min(sink, p1 + 1));
  const int64_t win = std::max<int64_t>(0, p0 - local + 1) / block_k * block_k;
  const int64_t end = up(p1 + 1);
  if (sink_end >= win) return {{0, end}};
  if (sink_end == 0) return {{win, end}};
  return {{0, sink_end}, {win, end}};
}

}  // namespace spattn
