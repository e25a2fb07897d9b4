// XAttention's block importance ("XAttention: Block Sparse Attention with Antidiagonal
// Scoring", Sec. 2.1-2.2), the estimate of a block's softmax mass that xattention selects by and
// mean_pool's mass budgets read: inside each S x S sub-block the antidiagonal's sum stands for
// the sub-block (every query row and key column touched once, so a vertical line or a slash
// cannot hide, as it can in pooled means); per strided query row the softmax of those sums over
// its visible key groups; a block's importance the sum of the probabilities over its sub-blocks.
#pragma once
#include <cstdint>
#include <functional>

#include "masks/block_budget.hpp"
#include "spattn/attention.hpp"
#include "spattn/tensor.hpp"

namespace spattn::masks {

struct AntidiagonalConfig {
  int64_t stride = 8;  // S; divides block_q and block_k
  int64_t block_q = 128, block_k = 128;
  bool dot_bf16 = true;  // products from bf16-rounded q and k where the CPU has AVX512_BF16
  bool rows = false;     // also hand each strided row's masses to the caller (topp per row)
};

// Called once per (q head h, query block qb), from opt.threads threads at once (each call its
// own pair): mass[kb] for kb < the query block's causal blocks (every block when not causal),
// the block's importance; the caller normalises by their sum. With c.rows, `rows` holds the
// query block's strided rows (block_q / S, fewer at the end), each row's probabilities by block
// (summing to 1 over its visible blocks; mass is their sum, in row order); else it is empty.
// The values do not depend on the thread count.
using BlockMassUse =
    std::function<void(int64_t h, int64_t qb, const double* mass, const RowMasses& rows)>;

// Throws Error on bad shapes or a stride that does not divide the block sizes.
void antidiagonal_block_mass(const TensorView& q, const TensorView& k, const AttnOptions& opt,
                             const AntidiagonalConfig& c, const BlockMassUse& use);

}  // namespace spattn::masks
