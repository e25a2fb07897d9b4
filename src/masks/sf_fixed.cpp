// Sparse Transformer "fixed" attention (Child et al. 2019), as the MMInference paper section 4.1 describes
// it: attention within each segment, plus every token attending to the segments' initial
// tokens. Child et al. use the last c tokens of each segment as the summary columns; the MMInference paper
// names the initial ones and gives only (local, vline_stride), so c = 1 here.
#include "masks/block_closure.hpp"
#include "spattn/error.hpp"

namespace spattn {

// Rows p0..p1 see, together, [segment start of p0, p1] and the columns m * vline_stride <= p1.
// A block keeps a column block when it holds a multiple of vline_stride (rounded out).
BlockMask sf_fixed_mask(const MaskGeometry& g, int64_t local, int64_t vline_stride) {
  SPATTN_CHECK(local >= 1, "sf_fixed: local (segment length) must be >= 1, got ", local);
  SPATTN_CHECK(vline_stride >= 1, "sf_fixed: vline_stride must be >= 1, got ", vline_stride);
  return masks::close_over_blocks(
      "sf_fixed", g, [&](int64_t p0, int64_t p1, std::vector<KeyRange>& out) {
        out.push_back({p0 / local * local, p1 + 1});
        // One interval per key block that holds a column: the first column at or after it.
        for (int64_t kb0 = 0; kb0 <= p1; kb0 += g.block_k) {
          const int64_t c = (kb0 + vline_stride - 1) / vline_stride * vline_stride;
          if (c < kb0 + g.block_k && c <= p1) out.push_back({c, c + 1});
        }
      });
}

}  // namespace spattn
