// Oracle block top-k: the best block mask of a given size, from the exact softmax mass of every
// block. An upper bound for block selectors at the same budget (the MOMO paper compares against it);
// it needs full attention to build, so it is for evaluation only.
#include <algorithm>

#include "masks/top_k.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/metrics.hpp"

namespace spattn {

BlockMask oracle_topk_mask(const TensorView& q, const TensorView& k, const TensorView& v,
                           int64_t block_q, int64_t block_k, int64_t topk, const AttnOptions& opt) {
  SPATTN_CHECK(topk >= 1, "oracle_topk: topk must be >= 1, got ", topk);
  BlockMask m(q.heads, q.seq, k.seq, block_q, block_k, opt.causal);
  const int64_t nq = m.n_qb(), nk = m.n_kb();
  for (int64_t h = 0; h < q.heads; ++h) {
    BlockMassGrid g = block_mass(q, k, v, h, block_q, block_k, opt);
    for (int64_t qb = 0; qb < nq; ++qb) {
      const int64_t limit = m.causal_blocks(qb);
      for (int64_t kb : masks::top_indices(&g.mass[size_t(qb * nk)], limit, topk))
        m.blocks.push_back(int32_t(kb));
      m.offsets[size_t(h * nq + qb + 1)] = int64_t(m.blocks.size());
    }
  }
  return m;
}

}  // namespace spattn
