#include "methods/block_mask_method.hpp"

#include <chrono>
#include <memory>
#include <utility>

#include "methods/dense_shortcut.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"

namespace spattn {

MethodReport BlockMaskMethod::run_host(const TensorView& q, const TensorView& k,
                                       const TensorView& v, const TensorView& out,
                                       const AttnOptions& opt, float* lse) const {
  // Inputs checked before the estimate reads them: a NaN would otherwise reach a ranking's
  // sort (undefined order) before the kernel could refuse it. The kernel need not scan again.
  validate_attention_args(q, k, v, out, opt);
  MethodReport r;
  AttnOptions checked = opt;
  checked.check_finite = false;
  if (budget_covers_context(block_budget(), k.seq, block_k_)) {
    run_dense_instead(q, k, v, out, checked, lse, kDenseByBudget, false, nullptr, block_q_,
                      block_k_, r);
    return r;
  }
  auto mask = std::make_shared<const BlockMask>(build_mask_reported(q, k, v, opt, r));
  if (keeps_every_block(*mask)) {
    run_dense_instead(q, k, v, out, checked, lse, kDenseByEstimate, false, std::move(mask),
                      block_q_, block_k_, r);
    return r;
  }
  attention_block_sparse(q, k, v, out, *mask, checked, lse, &r.stats);
  r.coverage = block_mask_coverage(mask);
  r.mask = std::move(mask);
  return r;
}

MethodReport BlockMaskMethod::run_cuda(const TensorView& q, const TensorView& k,
                                       const TensorView& v, const TensorView& out,
                                       const AttnOptions& opt, float* lse) const {
  const auto t0 = std::chrono::steady_clock::now();
  MethodReport r;
  if (budget_covers_context(block_budget(), k.seq, block_k_)) {
    run_dense_instead(q, k, v, out, opt, lse, kDenseByBudget, true, nullptr, block_q_, block_k_, r);
    return r;
  }
  std::shared_ptr<const BlockMask> mask;
  cuda::BlockSelectResult sel;
  if (!static_pattern() && run_device_estimate(q, k, v, out, opt, lse, sel)) {
    auto m = std::make_shared<BlockMask>(
        BlockMask::from_lists(q.heads, q.seq, k.seq, block_q_, block_k_, opt.causal, sel.lists));
    m->validate();
    mask = std::move(m);
    r.stats = sel.stats;
    r.per_head = std::move(sel.per_head);
    r.extras = std::move(sel.extras);
    r.extras["mask_device"] = 1.0;
    r.coverage = block_mask_coverage(mask);
    r.mask = std::move(mask);
    return r;
  }
  if (static_pattern()) {
    // The shapes are all it reads; the device kernel checks them.
    mask = std::make_shared<const BlockMask>(build_mask_reported(q, k, v, opt, r));
  } else {
    const Tensor hq = cuda::to_host(q, opt.stream), hk = cuda::to_host(k, opt.stream),
                 hv = cuda::to_host(v, opt.stream);
    validate_attention_args(hq, hk, hv, hq, opt);  // NaN checks, as on the host path
    AttnOptions checked = opt;
    checked.check_finite = false;
    mask = std::make_shared<const BlockMask>(build_mask_reported(hq, hk, hv, checked, r));
  }
  r.extras["mask_host_ms"] =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (keeps_every_block(*mask)) {
    run_dense_instead(q, k, v, out, opt, lse, kDenseByEstimate, true, std::move(mask), block_q_,
                      block_k_, r);
    return r;
  }
  cuda::attention_block_sparse(q, k, v, out, *mask, opt, lse, &r.stats, opt.stream);
  r.coverage = block_mask_coverage(mask);
  r.mask = std::move(mask);
  return r;
}

MaskGeometry BlockMaskMethod::geometry(const TensorView& q, const TensorView& k,
                                       const AttnOptions& opt) const {
  // A-shape, tri-shape and the SF patterns are defined by causal positions.
  SPATTN_CHECK(opt.causal, name(), ": needs causal attention");
  MaskGeometry g;
  g.heads = q.heads;
  g.q_len = q.seq;
  g.kv_len = k.seq;
  g.block_q = block_q_;
  g.block_k = block_k_;
  return g;
}

void read_block_sizes(ParamReader& r, int64_t& block_q, int64_t& block_k) {
  block_q = r.get_int("block_q", 64, 1, 1 << 20);
  block_k = r.get_int("block_k", 64, 1, 1 << 20);
}

}  // namespace spattn
