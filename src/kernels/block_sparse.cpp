// Block-sparse attention: each query block computes exactly the key blocks its BlockMask row
// lists (causal mask inside diagonal blocks), through the dense loop's key-range hook.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/block_sparse.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/blasst_policy.hpp"
#include "kernels/flash-inl.h"
#include "spattn/sparse_attention.hpp"

#ifndef SPATTN_KERNELS_BLOCK_SPARSE_POLICY_
#define SPATTN_KERNELS_BLOCK_SPARSE_POLICY_
namespace spattn::kernels {

struct BlockSparsePolicy : DensePolicy {
  const BlockMask* mask = nullptr;
  int64_t tiles_per_block = 1;  // kernel query tiles per mask query block (chi)

  void key_ranges(const Problem&, int64_t h, int64_t t, int64_t, std::vector<KeyRange>& out) const {
    const int64_t bk = mask->block_k;
    for (int32_t b : mask->row(h, t / tiles_per_block)) out.push_back({b * bk, (b + 1) * bk});
  }
  int64_t cost(const Problem&, int64_t h, int64_t t, int64_t) const {
    return int64_t(mask->row(h, t / tiles_per_block).size()) * mask->block_k;
  }
};

// The largest tile height <= kMaxTileRows that divides the mask's query block.
inline int64_t tile_rows_for(int64_t block_q) {
  for (int64_t r = std::min(block_q, kMaxTileRows); r > 1; --r)
    if (block_q % r == 0) return r;
  return 1;
}

}  // namespace spattn::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
template <class Policy>
void RunBlockSparse(const Problem& p, const BlockMask* mask, Policy& pol, Stats* stats) {
  pol.mask = mask;
  pol.tile_rows = tile_rows_for(mask->block_q);
  pol.tiles_per_block = mask->block_q / pol.tile_rows;
  RunFlash(p, pol, stats);
}
void BlockSparseEntry(const Problem& p, const BlockMask* mask, Stats* stats,
                      const BlasstSetup* skip) {
  if (skip) {
    // BLASST's rule over the mask's blocks (MOMO's lambda).
    BlasstSkipping<BlasstOrdered<BlockSparsePolicy>> pol;
    apply_blasst(pol, *skip);
    RunBlockSparse(p, mask, pol, stats);
  } else {
    BlockSparsePolicy pol;
    RunBlockSparse(p, mask, pol, stats);
  }
}
}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "spattn/error.hpp"
#include "spattn/packed_kv.hpp"

namespace spattn {
namespace kernels {
HWY_EXPORT(BlockSparseEntry);
}

void attention_block_sparse(const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out, const BlockMask& mask, const AttnOptions& opt,
                            float* lse, Stats* stats) {
  const kernels::Problem p = kernels::make_problem(q, k, v, out, opt, lse);
  mask.check_matches(q.heads, q.seq, k.seq, opt.causal);
  mask.validate();
  HWY_DYNAMIC_DISPATCH(kernels::BlockSparseEntry)(p, &mask, stats, nullptr);
}

void attention_block_sparse(const TensorView& q, const PackedKV& kv, const TensorView& out,
                            const BlockMask& mask, const AttnOptions& opt, float* lse, Stats* stats,
                            const BlasstSkip* skip) {
  const kernels::Problem p = kernels::make_problem(q, kv.data(), out, opt, lse);
  // A BlockMask states causality by index, bottom-right. Over keys in another order (or queries
  // placed elsewhere) the mask is a plain set of packed blocks (causal = false) and the kernel
  // masks by the keys' positions.
  const bool natural = kv.data().identity && p.pos_offset == p.kv_len - p.q_len;
  SPATTN_CHECK(natural || !mask.causal,
               "block-sparse over a PackedKV in a permuted order (or with q_start): state the "
               "mask with causal = false; the kernel applies causality by key positions");
  mask.check_matches(q.heads, q.seq, kv.size(), natural ? opt.causal : false);
  mask.validate();
  if (!skip) {
    HWY_DYNAMIC_DISPATCH(kernels::BlockSparseEntry)(p, &mask, stats, nullptr);
    return;
  }
  const int64_t tile_rows = kernels::tile_rows_for(mask.block_q);
  const kernels::BlasstSetup s = kernels::blasst_setup(
      *skip, q.heads, (q.seq + tile_rows - 1) / tile_rows, tile_rows, "block_sparse");
  HWY_DYNAMIC_DISPATCH(kernels::BlockSparseEntry)(p, &mask, stats, &s);
  kernels::blasst_finish(s);
}
}  // namespace spattn
#endif
