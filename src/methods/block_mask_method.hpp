// The shape every block-sparse baseline shares: build a BlockMask from the inputs (step 1),
// run attention_block_sparse with it (step 2), and report exactly that mask as coverage.
#pragma once
#include <memory>
#include <string>

#include "spattn/masks.hpp"
#include "spattn/method.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn {

class BlockMaskMethod : public Method {
 public:
  // Building the mask is part of run(), so a caller timing run() times the estimate too.
  void run(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
           const AttnOptions& opt, float* lse, Stats* stats) override {
    mask_ = BlockMask();  // a failed run leaves no stale mask behind
    mask_ = build_mask(q, k, v, opt);
    attention_block_sparse(q, k, v, out, mask_, opt, lse, stats);
  }
  std::unique_ptr<Coverage> coverage(int64_t q_len, int64_t kv_len, bool causal) const override {
    if (mask_.offsets.empty()) return Method::coverage(q_len, kv_len, causal);  // not run yet
    return block_mask_coverage(mask_);
  }
  const BlockMask* last_mask() const override { return mask_.offsets.empty() ? nullptr : &mask_; }

 protected:
  virtual BlockMask build_mask(const TensorView& q, const TensorView& k, const TensorView& v,
                               const AttnOptions& opt) const = 0;
  // The geometry of a static (causal, input-independent) pattern for these inputs.
  MaskGeometry geometry(const TensorView& q, const TensorView& k, const AttnOptions& opt) const;

  int64_t block_q_ = 64;  // chi
  int64_t block_k_ = 64;  // beta

 private:
  BlockMask mask_;
};

// Reads block_q and block_k (both default 64) into the method.
void read_block_sizes(ParamReader& r, int64_t& block_q, int64_t& block_k);

}  // namespace spattn
