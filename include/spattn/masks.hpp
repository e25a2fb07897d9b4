// Mask builders for the classic sparse-attention baselines (the MMInference paper section 4.1 and appendix
// C; MOMO, Eq. 1), and the coverage of what a mask computes, for attention recall.
//
// Static patterns are defined per token and rounded outward to blocks: a key block is kept for
// a query block when it holds a key that one of the query block's rows would attend to under the
// token-level rule (and may see causally). So token-unit parameters (sink, local, bottom,
// vline_stride) are rounded up to whole blocks, never down. Positions are absolute and causal
// alignment is bottom-right: query row i sits at kv_len - q_len + i.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/coverage.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn {

// The problem a static (input-independent, causal) mask is built for.
struct MaskGeometry {
  int64_t heads = 1;  // q heads
  int64_t q_len = 0, kv_len = 0;
  int64_t block_q = 64;  // chi: query rows per block
  int64_t block_k = 64;  // beta: keys per block
};

// A-shape / StreamingLLM (Xiao et al.): the first `sink` keys and the `local` most recent keys
// (row at position p sees keys j < sink and p - local < j <= p). Needs sink >= 0, local >= 1.
BlockMask a_shape_mask(const MaskGeometry& g, int64_t sink, int64_t local);
// The same pattern at absolute positions, for a caller holding the keys in pieces (context
// parallelism, src/dist/ring_attention.cpp): the keys a_shape_mask gives the query block of
// rows [p0, p1] (whole key blocks of block_k from position 0), before each row's causal limit,
// as at most two ascending disjoint ranges ending at or before p1 + 1 rounded up to a block.
std::vector<KeyRange> a_shape_block_keys(int64_t p0, int64_t p1, int64_t sink, int64_t local,
                                         int64_t block_k);

// Tri-shape: A-shape, plus every causal key for the last `bottom` query rows. bottom >= 0.
BlockMask tri_shape_mask(const MaskGeometry& g, int64_t sink, int64_t local, int64_t bottom);

// Sparse Transformer "fixed" (Child et al.; as the MMInference paper describes it): each row sees its own
// segment of `local` positions (floor(j / local) == floor(p / local)) and the segment-initial
// keys j = 0, vline_stride, 2 vline_stride, ... (vertical lines). Both >= 1.
BlockMask sf_fixed_mask(const MaskGeometry& g, int64_t local, int64_t vline_stride);

// Sparse Transformer "strided": a local window of `local` keys (p - local < j <= p) and dilated
// attention to every vline_stride-th earlier key ((p - j) % vline_stride == 0: slash lines).
// Both >= 1.
BlockMask sf_strided_mask(const MaskGeometry& g, int64_t local, int64_t vline_stride);

// MInference's vertical-slash estimate (the MMInference paper appendix C.3): A_hat = softmax of the last
// `last_q` query rows against all keys (causal); columns are ranked by their summed A_hat,
// diagonals (offset o = p - j) by A_hat summed along them. Keeps the top vertical_size columns
// and slash_size diagonals, always including the first `sink` columns and the `local` nearest
// diagonals (as MInference forces columns < 30 and diagonals < 100 by giving them +inf).
struct VerticalSlashConfig {
  int64_t vertical_size = 1000;  // columns kept per head (forced sink columns included)
  int64_t slash_size = 2048;     // diagonals kept per head (forced local diagonals included)
  int64_t last_q = 64;           // query rows of the estimate (the MMInference paper section 4.1)
  int64_t sink = 30;             // columns always kept (MInference's code)
  int64_t local = 100;           // diagonals always kept, offsets 0..local-1 (MInference's code)
  int64_t tile_rows = 64;        // query rows per kernel tile of the index
};
// Throws Error on out-of-range config values and non-causal options.
void check_vertical_slash_config(const VerticalSlashConfig& c);
VerticalSlashIndex vertical_slash_index(const TensorView& q, const TensorView& k,
                                        const VerticalSlashConfig& c, const AttnOptions& opt);
// The index rounded to blocks of tile_rows queries x block_k keys: every block holding an
// entry attention_vertical_slash computes. For pictures and block-level comparisons. Heads
// run on `threads` threads (0: every core); the mask does not depend on it.
BlockMask vertical_slash_block_mask(const VerticalSlashIndex& index, int64_t q_len, int64_t kv_len,
                                    int64_t block_k = 64, int threads = 0);

// Mean-pool block top-k (MInference / SeerAttention; MOMO, Eq. 1): A_hat[m][n] =
// scale * mean(Q rows of block m) . mean(K rows of block n); each query block keeps its `topk`
// best causal key blocks, plus the blocks holding the first `sink` keys and the blocks holding
// its rows' `local` most recent keys (rounded out to blocks as above). topk >= 0, sink >= 0,
// local >= 1. Honors opt.causal.
// Means of consecutive `block` rows (positions) of head h of t, the last block possibly
// partial: [ceil(seq / block), dim], row-major. mean_pool_mask's rho; momo's blend uses it too.
std::vector<float> mean_pool_rows(const TensorView& t, int64_t h, int64_t block);
// Per block of `block` consecutive rows of head h of t (the last possibly partial): the mean of
// each channel, then its (population) variance: [ceil(seq / block), 2 * dim], row-major (mean in
// the first dim columns). momo's blend=moments, the pooled estimate's second-order term.
std::vector<float> pool_row_moments(const TensorView& t, int64_t h, int64_t block);
// topp > 0 replaces the topk budget by a mass budget: the fewest blocks (forced ones counted
// first) whose estimated mass, the softmax of the pooled scores weighted by each block's visible
// keys, reaches topp of the query block's total; topp must lie in [0, 1] (0: topk).
BlockMask mean_pool_mask(const TensorView& q, const TensorView& k, int64_t block_q, int64_t block_k,
                         int64_t topk, int64_t sink, int64_t local, const AttnOptions& opt,
                         double topp = 0);
// mean_pool's budgets, one of: topk (blocks, by pooled score), topp (a mass, in (0, 1]) or
// min_share (a threshold in (0, 1): every block whose estimated share of its query block's mass
// is at least it). The mass budgets read the antidiagonal estimate (XAttention, Sec. 2.1) at
// `stride` (it divides both block sizes), or with stride 0 the pooled one above: pooled scores
// come before the exponential, so they misjudge how spread a query block's attention is, and a
// mass budget on them lost to the counts on real attention, worst row included (BENCHMARKS.md,
// "Mass and threshold budgets against counts").
struct MeanPoolBudget {
  int64_t topk = 128;
  double topp = 0, min_share = 0;  // 0: not that budget
  int64_t stride = 0;              // the mass budgets' estimate: 0 pooled, else antidiagonal
  bool dot_bf16 = true;            // the antidiagonal's products as xattention's dot=bf16
  bool per_row = false;  // topp holds each strided row of the antidiagonal estimate, not the sum
};
BlockMask mean_pool_mask(const TensorView& q, const TensorView& k, int64_t block_q, int64_t block_k,
                         int64_t sink, int64_t local, const AttnOptions& opt,
                         const MeanPoolBudget& budget);

// Oracle block top-k: each query block keeps the `topk` key blocks holding the most exact
// softmax mass (block_mass, averaged over the block's rows). Evaluation only: it computes full
// attention twice to know the mass. block_k a multiple of 64; topk >= 1. `local` > 0 keeps, beside
// the topk, the blocks of each row's `local` most recent keys (0: no forced blocks).
BlockMask oracle_topk_mask(const TensorView& q, const TensorView& k, const TensorView& v,
                           int64_t block_q, int64_t block_k, int64_t topk, const AttnOptions& opt,
                           int64_t local = 0);
// The oracle's mass budgets: each query block keeps, from the same exact masses, the fewest
// blocks reaching topp of its mass (topp > 0) or every block holding at least min_share of it
// (min_share > 0; give exactly one), by the rules every estimating selector uses
// (masks/block_budget.hpp), with no forced blocks but each row's `local` most recent keys'
// (0: none). What those budgets keep with no estimate's error: the ceiling of a
// per-query-block mass budget against oracle_topk's count. per_row (with topp): every row of the
// query block keeps topp of its own exact mass (masks::keep_row_mass), not the block's sum.
BlockMask oracle_mass_mask(const TensorView& q, const TensorView& k, const TensorView& v,
                           int64_t block_q, int64_t block_k, double topp, double min_share,
                           const AttnOptions& opt, int64_t local = 0, bool per_row = false);

// Exactly the entries attention_block_sparse computes with `mask` (causal clipping included).
std::unique_ptr<Coverage> block_mask_coverage(BlockMask mask);
std::unique_ptr<Coverage> block_mask_coverage(std::shared_ptr<const BlockMask> mask);  // shares it
// Exactly the entries attention_vertical_slash computes with `index`: for row i in tile t,
// every diagonal's tile range and every column, clipped to keys <= the row's position.
std::unique_ptr<Coverage> vertical_slash_coverage(VerticalSlashIndex index, int64_t q_len,
                                                  int64_t kv_len);

}  // namespace spattn

namespace spattn {
// Every block of `block` x `block` entries that holds an entry of `cov` (for pictures of
// token-level or permuted patterns: the grid head, mminference). Causal.
BlockMask coverage_block_mask(const Coverage& cov, int64_t heads, int64_t q_len, int64_t kv_len,
                              int64_t block = 64);
}  // namespace spattn
