// mean_pool on the device (the method is src/methods/mean_pool.cpp, its mask the host's
// mean_pool_mask in src/masks/mean_pool.cpp, which this mirrors): the sink and local keys kept,
// then either topk more blocks by the pooled scores scale * mean(Q block) . mean(K block)
// ("Measure Once, Mask Once", Eq. 1), or a mass budget (topp, min_share) over the antidiagonal
// estimate (antidiagonal.cu) or the pooled scores' masses; then the block-sparse pass over the
// kept blocks (block_select.cu), one stream and no copy to the host between them.
#include "cuda/antidiagonal.hpp"
#include "cuda/block_select.hpp"
#include "cuda/inputs.hpp"
#include "cuda/pool_rows.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda {
void mean_pool_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& out, const MeanPoolGpuPlan& plan, const AttnOptions& opt,
                         float* lse, BlockSelectResult& result, void* stream) {
  const char* who = "cuda mean_pool";
  check_select_inputs(q, k, v, out, lse, opt, plan.block_q, plan.block_k, who);
  const GpuBlockBudget& b = plan.budget;
  SPATTN_CHECK(b.topk >= 0 && b.topp >= 0 && b.topp <= 1 && b.min_share >= 0 && b.min_share < 1 &&
                   !(b.topp > 0 && b.min_share > 0) && plan.sink >= 0 && plan.local >= 1 &&
                   plan.stride >= 0,
               who, ": bad budget (topk ", b.topk, ", topp ", b.topp, ", min_share ", b.min_share,
               "), sink ", plan.sink, ", local ", plan.local, " or stride ", plan.stride);
  const cudaStream_t s = stream_of(stream, opt);
  const bool mass_budget = b.topp > 0 || b.min_share > 0;
  const int64_t nqb = (q.seq + plan.block_q - 1) / plan.block_q;
  const int64_t nkb = (k.seq + plan.block_k - 1) / plan.block_k;
  BlockSelect sel;
  sel.block_q = plan.block_q, sel.block_k = plan.block_k;
  sel.sink = plan.sink, sel.local = plan.local;
  sel.rule.topk = b.topk, sel.rule.topp = b.topp, sel.rule.min_share = b.min_share;
  DeviceBuffer<double> mass;
  DeviceBuffer<float> qpool, kpool;
  if (mass_budget && plan.stride > 0) {
    mass.alloc(size_t(q.heads) * size_t(nqb) * size_t(nkb), s);
    antidiagonal_mass(q, k, opt, plan.stride, plan.block_q, plan.block_k, mass.get(), s);
    sel.mass = mass.get();
  } else {
    qpool.alloc(size_t(q.heads) * size_t(nqb) * size_t(q.dim), s);
    kpool.alloc(size_t(k.heads) * size_t(nkb) * size_t(k.dim), s);
    pool_rows(q, plan.block_q, qpool.get(), s);
    pool_rows(k, plan.block_k, kpool.get(), s);
    sel.qpool = qpool.get(), sel.kpool = kpool.get();
    sel.scale = softmax_scale(opt, q.dim);
    sel.pooled_mass = mass_budget;
  }
  run_selected(q, k, v, out, opt, lse, sel, result, s);
}

}  // namespace spattn::cuda
