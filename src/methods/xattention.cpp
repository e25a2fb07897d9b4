// xattention: block-sparse prefill with antidiagonal scoring ("XAttention: Block Sparse
// Attention with Antidiagonal Scoring", Xu et al. 2025). The whole method is this file.
//
// Sec. 2.1 (importance prediction): inside each S x S sub-block of the attention matrix, the
// sum along one antidiagonal, q[gS + S-1-t] . k[jS + t] for t < S, stands for the sub-block:
// every query row and every key column of it is touched once, so a vertical line or a slash
// through the sub-block cannot be missed, as the pooled scores of mean_pool can miss them
// (masks/antidiagonal_mass.cpp, shared with mean_pool's mass budgets).
// Sec. 2.2 (threshold block selection): per strided query row, the softmax of the antidiagonal
// averages (sum / S, times the softmax scale) over its causally visible key groups; a block's
// importance is the sum of those probabilities over its (B/S) x (B/S) sub-blocks. Per query
// block the sink block (keys 0..B-1) and the diagonal blocks (those holding the block's own
// positions) are kept, their importance counted first, then the other blocks in descending
// importance (ties: the smaller index) until the kept importance reaches tau of the row's
// total (masks::keep_top_mass). `min_share=T` (beyond the paper) instead keeps, beside the
// sink and diagonal, every block whose importance is at least T of its query block's total:
// one threshold across blocks, the density-optimal budget for mean recall
// (masks/block_budget.hpp). `topk=K` (beyond the paper) keeps, beside them, the K blocks of
// largest importance: a count on the same estimate, the budget topp and min_share are judged
// against at equal density.
//
// `local=W` (beyond the paper; default 1, the paper's diagonal) keeps, with the diagonal, the
// blocks of each row's W most recent keys. A query block's first rows see few keys of its
// diagonal block, and where they read their recent keys (in the block before) while the rest
// of the block reads the diagonal, any per-query-block budget can leave them almost nothing:
// on code-tiny-8k's layer 6 a topp on the exact block masses left such rows 0.01% of their mass
// (docs/benchmarks/log/2026-12-03-a-query-blocks-first-rows-and-the-local-window.md).
// local=B gives every row its last B keys.
//
// `per=row` (beyond the paper; default `block`, the paper's) holds every strided row of the
// estimate, not the query block's sum, to tau (masks::keep_row_mass): the same estimate read
// row by row, where a row whose mass lies outside the block's heaviest blocks is no longer
// outvoted by the rest of its block.
//
// Defaults as the paper's language-model runs (its code's xattn_estimate): stride S = 8, tau =
// 0.9, blocks of B = 128 queries and keys. `topp=P` is accepted as another name for tau, the
// mass budget every block-selecting method takes. `dot=bf16` (default; the paper's kernels run
// in bf16 too) computes the estimate's products from bf16-rounded q and k with vdpbf16ps where
// the CPU has AVX512_BF16 (f32 elsewhere), `dot=f32` in f32; both on the flash kernel's score
// micro-kernels (kernels/long_row_scores.hpp). On CUDA tensors the estimate, the budget and the
// block-sparse pass run on the device (src/cuda/xattention.cu), the same rules.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/long_row_scores.hpp"
#include "masks/antidiagonal_mass.hpp"
#include "masks/block_budget.hpp"
#include "masks/block_closure.hpp"
#include "methods/block_mask_method.hpp"
#include "methods/fraction.hpp"
#include "methods/registry.hpp"
#include "spattn/attention.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

class XAttention final : public BlockMaskMethod {
 public:
  explicit XAttention(const MethodSpec& spec) {
    ParamReader r(spec);
    stride_ = r.get_int("stride", 8, 1, 1024);
    SPATTN_CHECK(!(r.has("tau") && r.has("topp")),
                 "xattention: give tau or topp (the same mass budget), not both");
    SPATTN_CHECK(
        int(r.has("tau") || r.has("topp")) + int(r.has("min_share")) + int(r.has("topk")) <= 1,
        "xattention: give one budget: tau (topp, a mass), min_share (a threshold) or "
        "topk (blocks)");
    const char* key = r.has("topp") ? "topp" : "tau";
    tau_ = get_fraction(r, spec.name, key, 0.9, Fraction::up_to_one);
    if (r.has("min_share"))
      min_share_ = get_fraction(r, spec.name, "min_share", 0.5, Fraction::below_one);
    if (r.has("topk")) topk_ = r.get_int("topk", 0, 0, int64_t(1) << 40);
    block_q_ = r.get_int("block_q", 128, 1, 1 << 20);
    block_k_ = r.get_int("block_k", 128, 1, 1 << 20);
    local_ = r.get_int("local", 1, 1, int64_t(1) << 40);
    per_row_ = read_per_row(r, spec.name, min_share_ > 0 || topk_ >= 0);
    SPATTN_CHECK(block_q_ % stride_ == 0 && block_k_ % stride_ == 0, "xattention: stride=", stride_,
                 " must divide block_q=", block_q_, " and block_k=", block_k_,
                 " (an antidiagonal's S x S sub-block lies in one block)");
    const std::string dot = r.get_string("dot", "bf16");
    SPATTN_CHECK(dot == "bf16" || dot == "f32", "xattention: dot='", dot, "' must be bf16 or f32");
    dot_bf16_ = dot == "bf16";
    r.finish();
  }
  std::string name() const override { return "xattention"; }
  int64_t block_budget() const override { return topk_; }

  MethodReport run_host(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    MethodReport r = BlockMaskMethod::run_host(q, k, v, out, opt, lse);
    r.extras["stride"] = double(stride_);
    r.extras["local"] = double(local_);
    if (per_row_) r.extras["per_row"] = 1.0;
    if (min_share_ > 0)
      r.extras["min_share"] = min_share_;
    else if (topk_ >= 0)
      r.extras["topk"] = double(topk_);
    else
      r.extras["tau"] = tau_;
    r.extras["dot_bf16"] = dot_bf16_ && kernels::long_row_bf16_supported() ? 1.0 : 0.0;
    return r;
  }

 protected:
  // The same estimate, budget and mask on the device (src/cuda/xattention.cu); dot there is the
  // inputs' own dtype in f32 products (bf16 inputs: dot=bf16's values).
  bool run_device_estimate(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const AttnOptions& opt, float* lse,
                           cuda::BlockSelectResult& result) const override {
    if (per_row_) return false;  // the device's budget is per block: the host builds the mask
    cuda::XAttentionGpuPlan p;
    p.stride = stride_, p.block_q = block_q_, p.block_k = block_k_, p.local = local_;
    if (min_share_ > 0)
      p.budget = {0, 0.0, min_share_};
    else if (topk_ >= 0)
      p.budget = {topk_, 0.0, 0.0};
    else
      p.budget = {0, tau_, 0.0};
    cuda::xattention_attention(q, k, v, out, p, opt, lse, result, opt.stream);
    return true;
  }

  BlockMask build_mask(const TensorView& q, const TensorView& k, const TensorView&,
                       const AttnOptions& opt) const override {
    BlockMask m(q.heads, q.seq, k.seq, block_q_, block_k_, opt.causal);
    const int64_t nq = m.n_qb(), nk = m.n_kb();
    const int64_t off = query_position(0, q.seq, k.seq);
    std::vector<std::vector<int32_t>> lists(static_cast<size_t>(q.heads * nq));
    masks::AntidiagonalConfig c;
    c.stride = stride_, c.block_q = block_q_, c.block_k = block_k_, c.dot_bf16 = dot_bf16_;
    c.rows = per_row_;
    masks::antidiagonal_block_mass(
        q, k, opt, c, [&](int64_t h, int64_t qb, const double* bs, const masks::RowMasses& rows) {
          std::vector<uint8_t> keep(static_cast<size_t>(nk));
          std::vector<int64_t> order;
          masks::RowMassScratch share;
          const int64_t limit = m.causal_blocks(qb);
          const int64_t p0 = off + qb * block_q_,
                        p1 = off + std::min((qb + 1) * block_q_, q.seq) - 1;
          if (limit > 0) keep[0] = 1;  // the sink
          // the diagonal, and each row's local_ most recent keys
          masks::mark_blocks(p0 - local_ + 1, std::min(p1 + 1, k.seq), block_k_, keep);
          if (min_share_ > 0)
            masks::keep_min_share(bs, limit, min_share_, keep);
          else if (topk_ >= 0)
            masks::keep_top_count(bs, limit, topk_, keep, order);
          else if (per_row_)
            masks::keep_row_mass(rows, limit, tau_, keep, share);
          else
            masks::keep_top_mass(bs, limit, tau_, keep, order);
          auto& list = lists[size_t(h * nq + qb)];
          for (int64_t kb = 0; kb < limit; ++kb)
            if (keep[size_t(kb)]) list.push_back(int32_t(kb));
        });
    return BlockMask::from_lists(q.heads, q.seq, k.seq, block_q_, block_k_, opt.causal, lists);
  }

 private:
  int64_t stride_ = 8;
  int64_t local_ = 1;  // each row's most recent keys kept (1: its own, the diagonal blocks)
  double tau_ = 0.9;
  double min_share_ = 0;  // 0: the tau (topp) budget; else the share threshold in (0, 1)
  int64_t topk_ = -1;     // -1: a mass budget; else the count beside sink and diagonal
  bool per_row_ = false;  // tau holds every strided row, not the query block's sum
  bool dot_bf16_ = true;
};

}  // namespace

std::unique_ptr<Method> make_xattention(const MethodSpec& spec) {
  return std::make_unique<XAttention>(spec);
}

}  // namespace spattn
