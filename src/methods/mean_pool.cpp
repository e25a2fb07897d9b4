// mean_pool: block top-k from mean-pooled Q and K ("Measure Once, Mask Once", Eq. 1), the
// block-sparse estimate of MInference and SeerAttention. Pooling and scoring run inside
// run(): part of its time.
// Default topk = 128 key blocks of 64 (beta): the per-row block budget MOMO compares
// every selector at (k = 128); the first block (sink) and the blocks of each row's own 64
// most recent keys (local) are kept on top of it. Instead of topk, a mass budget (beyond the
// paper): `topp=P`, the fewest blocks whose estimated mass reaches P per query block, sink and
// local counted first; or `min_share=T`, every block whose estimated share of its query block's
// mass is at least T (masks/block_budget.hpp says when to use which). Their estimate is
// `est=antidiagonal` (default; XAttention's antidiagonal at `stride=4`, which reads 1/4 of the
// entries dense attention does: at stride 8, XAttention's, topp missed issue 61's bar on
// code-small-32k layer 5, and at the same P stride 4 keeps about P of the true mass where 8
// kept more blocks than P needs, so it costs less in all; docs/methods/mean_pool.md) or
// `est=pooled` (the pooled scores' softmax, the first version):
// the pooled scores come before the exponential, so they cannot see how spread a query block's
// attention is, and on real attention topp on them lost to the counts on both mean and worst
// row (BENCHMARKS.md, "Mass and threshold budgets against counts"). `per=row` holds every
// strided row of the antidiagonal estimate to P rather than the query block's sum
// (masks::keep_row_mass). spattn/masks.hpp. On CUDA tensors every estimate and budget runs on
// the device (src/cuda/mean_pool.cu), but per=row's, whose mask the host builds.
#include <cmath>

#include "methods/block_mask_method.hpp"
#include "methods/fraction.hpp"
#include "methods/registry.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

class MeanPool final : public BlockMaskMethod {
 public:
  explicit MeanPool(const MethodSpec& spec) {
    ParamReader r(spec);
    const int64_t big = int64_t(1) << 40;
    SPATTN_CHECK(int(r.has("topk")) + int(r.has("topp")) + int(r.has("min_share")) <= 1,
                 "mean_pool: give one budget: topk (blocks), topp (a mass) or min_share (a "
                 "threshold)");
    budget_.topk = r.get_int("topk", 128, 0, big);
    if (r.has("topp")) budget_.topp = get_fraction(r, spec.name, "topp", 1.0, Fraction::up_to_one);
    if (r.has("min_share"))
      budget_.min_share = get_fraction(r, spec.name, "min_share", 0.5, Fraction::below_one);
    const bool mass = budget_.topp > 0 || budget_.min_share > 0;
    SPATTN_CHECK(mass || (!r.has("est") && !r.has("stride")),
                 "mean_pool: est and stride go with topp or min_share (the mass estimate)");
    const std::string est = r.get_string("est", "antidiagonal");
    SPATTN_CHECK(est == "antidiagonal" || est == "pooled", "mean_pool: est='", est,
                 "' must be antidiagonal or pooled");
    const int64_t stride = r.get_int("stride", 4, 1, 1024);
    SPATTN_CHECK(est == "antidiagonal" || !r.has("stride"),
                 "mean_pool: stride goes with est=antidiagonal");
    budget_.stride = est == "antidiagonal" ? stride : 0;
    budget_.per_row = read_per_row(r, spec.name, !r.has("topp"));
    SPATTN_CHECK(!budget_.per_row || budget_.stride > 0,
                 "mean_pool: per=row reads the antidiagonal estimate's rows (est=antidiagonal)");
    sink_ = r.get_int("sink", 64, 0, big);
    local_ = r.get_int("local", 64, 1, big);
    read_block_sizes(r, block_q_, block_k_);
    r.finish();
    SPATTN_CHECK(budget_.stride == 0 || !mass ||
                     (block_q_ % budget_.stride == 0 && block_k_ % budget_.stride == 0),
                 "mean_pool: stride=", budget_.stride, " must divide block_q=", block_q_,
                 " and block_k=", block_k_, " (an antidiagonal's sub-block lies in one block)");
  }
  std::string name() const override { return "mean_pool"; }
  int64_t block_budget() const override {
    return budget_.topp > 0 || budget_.min_share > 0 ? -1 : budget_.topk;
  }

 protected:
  // The same estimates, budgets and mask on the device (src/cuda/mean_pool.cu).
  bool run_device_estimate(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const AttnOptions& opt, float* lse,
                           cuda::BlockSelectResult& result) const override {
    if (budget_.per_row) return false;  // the device's budgets are per block: a host mask
    cuda::MeanPoolGpuPlan p;
    p.block_q = block_q_, p.block_k = block_k_, p.sink = sink_, p.local = local_;
    p.budget = {budget_.topk, budget_.topp, budget_.min_share};
    p.stride = budget_.stride;
    cuda::mean_pool_attention(q, k, v, out, p, opt, lse, result, opt.stream);
    return true;
  }

  BlockMask build_mask(const TensorView& q, const TensorView& k, const TensorView&,
                       const AttnOptions& opt) const override {
    return mean_pool_mask(q, k, block_q_, block_k_, sink_, local_, opt, budget_);
  }

 private:
  MeanPoolBudget budget_;
  int64_t sink_, local_;
};

}  // namespace

std::unique_ptr<Method> make_mean_pool(const MethodSpec& spec) {
  return std::make_unique<MeanPool>(spec);
}

}  // namespace spattn
