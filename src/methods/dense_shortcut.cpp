#include "methods/dense_shortcut.hpp"

#include <memory>
#include <utility>

#include "spattn/coverage.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"

namespace spattn {

bool budget_covers_context(int64_t blocks, int64_t kv_len, int64_t block_k) {
  SPATTN_CHECK(block_k >= 1, "budget_covers_context: block_k must be >= 1, got ", block_k);
  return blocks >= 0 && blocks >= (kv_len + block_k - 1) / block_k;
}

bool keeps_every_block(const BlockMask& m) {
  const int64_t nq = m.n_qb();
  for (int64_t h = 0; h < m.heads; ++h)
    for (int64_t qb = 0; qb < nq; ++qb)
      // A valid list is sorted, without repeats and inside [0, causal_blocks): its length says it.
      if (int64_t(m.row(h, qb).size()) < m.causal_blocks(qb)) return false;
  return true;
}

void run_dense_instead(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const AttnOptions& opt, float* lse, const char* why,
                       bool on_device, std::shared_ptr<const BlockMask> mask, int64_t block_q,
                       int64_t block_k, MethodReport& r) {
  // Added to what the run already counted (momo's fused pass, when its estimate decided), the
  // problem's entries counted once.
  Stats dense;
  if (on_device)
    cuda::attention_dense(q, k, v, out, opt, lse, &dense, opt.stream);
  else
    attention_dense(q, k, v, out, opt, lse, &dense);
  r.stats.add(dense);
  r.stats.causal_entries = dense.causal_entries;
  r.path = KernelPath::prefill;
  r.dense_shortcut = why;
  r.coverage = std::make_shared<FullCoverage>(q.seq, k.seq, opt.causal);
  if (!mask) {
    // The mask it stands for, for callers that show or plan from one (spattn mask, the C API):
    // an int per causal block, small beside the dense pass it replaces.
    mask = std::make_shared<const BlockMask>(
        BlockMask::full(q.heads, q.seq, k.seq, block_q, block_k, opt.causal));
  }
  r.mask = std::move(mask);
}

}  // namespace spattn
