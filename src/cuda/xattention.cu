// XAttention on the device ("XAttention: Block Sparse Attention with Antidiagonal Scoring",
// Sec. 2; the method and its parameters are src/methods/xattention.cpp's, whose run_cuda calls
// this): the antidiagonal estimate (antidiagonal.cu), per query block the sink block and the
// blocks of each row's `local` recent keys (the diagonal blocks at least) kept and then the
// budget over the estimate (tau, the paper's threshold, as topp; or min_share; or topk), and the
// block-sparse pass over the kept blocks (block_select.cu), one
// stream and no copy to the host between them.
#include "cuda/antidiagonal.hpp"
#include "cuda/block_select.hpp"
#include "cuda/inputs.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda {

void xattention_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, const XAttentionGpuPlan& plan,
                          const AttnOptions& opt, float* lse, BlockSelectResult& result,
                          void* stream) {
  const char* who = "cuda xattention";
  check_select_inputs(q, k, v, out, lse, opt, plan.block_q, plan.block_k, who);
  const GpuBlockBudget& b = plan.budget;
  SPATTN_CHECK(b.topk >= 0 && b.topp >= 0 && b.topp <= 1 && b.min_share >= 0 && b.min_share < 1 &&
                   !(b.topp > 0 && b.min_share > 0),
               who, ": one budget, topp (tau), min_share or topk (topk ", b.topk, ", topp ", b.topp,
               ", min_share ", b.min_share, ")");
  const cudaStream_t s = stream_of(stream, opt);
  const int64_t nqb = (q.seq + plan.block_q - 1) / plan.block_q;
  const int64_t nkb = (k.seq + plan.block_k - 1) / plan.block_k;
  DeviceBuffer<double> mass;
  mass.alloc(size_t(q.heads) * size_t(nqb) * size_t(nkb), s);
  antidiagonal_mass(q, k, opt, plan.stride, plan.block_q, plan.block_k, mass.get(), s);
  BlockSelect sel;
  sel.mass = mass.get();
  sel.block_q = plan.block_q, sel.block_k = plan.block_k;
  sel.sink = 1, sel.local = plan.local;  // the sink block, and each row's local recent keys
  sel.rule.topk = b.topk, sel.rule.topp = b.topp, sel.rule.min_share = b.min_share;
  run_selected(q, k, v, out, opt, lse, sel, result, s);
}

}  // namespace spattn::cuda
