// The shape every block-sparse baseline shares: build a BlockMask from the inputs (step 1),
// run attention_block_sparse with it (step 2), and report that mask, which is also exactly the
// coverage. When the budget alone covers every key block, or the mask keeps every block, the
// dense kernel runs instead (dense_shortcut.hpp).
#pragma once
#include <memory>
#include <string>

#include "spattn/cuda.hpp"
#include "spattn/masks.hpp"
#include "spattn/method.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn {

class BlockMaskMethod : public Method {
 public:
  // Building the mask is part of run(), so a caller timing run() times the estimate too.
  MethodReport run_host(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override;
  // On the GPU: a method with a device estimate (run_device_estimate: xattention, mean_pool,
  // flexprefill)
  // estimates, selects and runs on the device, and reports the mask it read back (extras
  // "mask_device" 1); a static pattern is built from the shapes alone; any other mask is built
  // on the host from copies of q, k and v (extras "mask_host_ms"). The block-sparse kernel runs
  // on the device. The budget's dense shortcut holds on both devices; the estimate's (a mask
  // that keeps every block) only where the mask is built on the host, since deciding it on the
  // device would wait for the selection: there the block-sparse pass runs every block.
  MethodReport run_cuda(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override;

 protected:
  virtual BlockMask build_mask(const TensorView& q, const TensorView& k, const TensorView& v,
                               const AttnOptions& opt) const = 0;
  // build_mask, for a method with choices to report (flexprefill's per-head pattern): run()
  // builds the mask through this and returns `report` with the kernel's stats added.
  virtual BlockMask build_mask_reported(const TensorView& q, const TensorView& k,
                                        const TensorView& v, const AttnOptions& opt,
                                        MethodReport& report) const {
    (void)report;
    return build_mask(q, k, v, opt);
  }
  // The key blocks per query block a count budget keeps on top of the forced ones (mean_pool's
  // and oracle_topk's topk), or -1 when no count decides (a mass, a threshold, a pattern): when
  // it covers every key block at a length (budget_covers_context), run() skips build_mask and
  // runs dense.
  virtual int64_t block_budget() const { return -1; }
  // The method's whole GPU pipeline (src/cuda/), where it has one: runs the estimate, the
  // selection and the block-sparse pass into out and lse, fills `result` (the lists, the
  // pass's stats) and returns true; false (the default) where it has none.
  virtual bool run_device_estimate(const TensorView& q, const TensorView& k, const TensorView& v,
                                   const TensorView& out, const AttnOptions& opt, float* lse,
                                   cuda::BlockSelectResult& result) const {
    (void)q, (void)k, (void)v, (void)out, (void)opt, (void)lse, (void)result;
    return false;
  }
  // Whether the mask is a static pattern (from the shapes alone, never reading q, k or v):
  // then the GPU path copies nothing to the host.
  virtual bool static_pattern() const { return false; }
  // The geometry of a static (causal, input-independent) pattern for these inputs.
  MaskGeometry geometry(const TensorView& q, const TensorView& k, const AttnOptions& opt) const;

  int64_t block_q_ = 64;  // chi
  int64_t block_k_ = 64;  // beta
};

// Reads block_q and block_k (both default 64) into the method.
void read_block_sizes(ParamReader& r, int64_t& block_q, int64_t& block_k);

}  // namespace spattn
