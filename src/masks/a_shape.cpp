// A-shape (StreamingLLM, Xiao et al. 2024): attention sinks plus a sliding window.
#include "masks/block_closure.hpp"
#include "spattn/error.hpp"

namespace spattn {

// Rows p0..p1 see the sinks [0, sink) and, together, the windows (p - local, p]: the interval
// (p0 - local, p1]. Rounded outward to blocks (close_over_blocks).
BlockMask a_shape_mask(const MaskGeometry& g, int64_t sink, int64_t local) {
  SPATTN_CHECK(sink >= 0, "a_shape: sink must be >= 0, got ", sink);
  SPATTN_CHECK(local >= 1, "a_shape: local must be >= 1 (each row sees itself), got ", local);
  return masks::close_over_blocks("a_shape", g, [&](int64_t p0, int64_t p1, std::vector<KeyRange>& out) {
    out.push_back({0, sink});
    out.push_back({p0 - local + 1, p1 + 1});
  });
}

}  // namespace spattn
