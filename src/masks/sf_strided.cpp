// Sparse Transformer "strided" attention (Child et al. 2019): a local window plus dilated
// attention to every vline_stride-th earlier token, i.e. slash lines at offsets that are
// multiples of vline_stride.
#include "masks/block_closure.hpp"
#include "spattn/error.hpp"

namespace spattn {

// Rows p0..p1 see, together, (p0 - local, p1] and, per offset o = m * vline_stride, the keys
// [p0 - o, p1 - o] of that diagonal. Rounded outward to blocks.
BlockMask sf_strided_mask(const MaskGeometry& g, int64_t local, int64_t vline_stride) {
  SPATTN_CHECK(local >= 1, "sf_strided: local must be >= 1 (each row sees itself), got ", local);
  SPATTN_CHECK(vline_stride >= 1, "sf_strided: vline_stride must be >= 1, got ", vline_stride);
  return masks::close_over_blocks("sf_strided", g,
                                  [&](int64_t p0, int64_t p1, std::vector<KeyRange>& out) {
                                    out.push_back({p0 - local + 1, p1 + 1});
                                    for (int64_t o = vline_stride; o <= p1; o += vline_stride)
                                      out.push_back({p0 - o, p1 - o + 1});
                                  });
}

}  // namespace spattn
