// Tri-shape (Li et al. 2025; Acharya et al. 2024): A-shape, plus dense attention for the last
// `bottom` query rows (the part of the prompt closest to what is generated next).
#include <algorithm>

#include "masks/block_closure.hpp"
#include "spattn/error.hpp"

namespace spattn {

// A query block holding any of the last `bottom` rows keeps every causal block: rounded out.
BlockMask tri_shape_mask(const MaskGeometry& g, int64_t sink, int64_t local, int64_t bottom) {
  SPATTN_CHECK(sink >= 0, "tri_shape: sink must be >= 0, got ", sink);
  SPATTN_CHECK(local >= 1, "tri_shape: local must be >= 1 (each row sees itself), got ", local);
  SPATTN_CHECK(bottom >= 0, "tri_shape: bottom must be >= 0, got ", bottom);
  const int64_t first_dense =
      g.kv_len - std::min(bottom, g.q_len);  // position of the first dense row
  return masks::close_over_blocks("tri_shape", g,
                                  [&](int64_t p0, int64_t p1, std::vector<KeyRange>& out) {
                                    if (p1 >= first_dense) {
                                      out.push_back({0, p1 + 1});
                                      return;
                                    }
                                    out.push_back({0, sink});
                                    out.push_back({p0 - local + 1, p1 + 1});
                                  });
}

}  // namespace spattn
