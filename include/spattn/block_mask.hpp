// BlockMask: which key blocks each query block of each q head computes.
//
// Per (q head h, query block qb) a sorted list of key blocks, stored CSR-style. Block sizes are
// part of the mask: block_q rows per query block (chi in MOMO) and block_k keys per key block
// (beta). Causality follows the attention convention (bottom-right): query row i sits at
// position kv_len - q_len + i. Rows of the last query block and keys of the last key block may
// be partial.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace spattn {

struct BlockMask {
  int64_t heads = 0;  // q heads
  int64_t q_len = 0, kv_len = 0;
  int64_t block_q = 64;  // chi: query rows per block
  int64_t block_k = 64;  // beta: keys per block
  bool causal = true;
  std::vector<int64_t> offsets;  // heads * n_qb() + 1 entries
  std::vector<int32_t> blocks;   // key block indices, row after row

  BlockMask() = default;
  // An empty mask (no blocks) of the given geometry; throws Error on bad sizes.
  BlockMask(int64_t heads, int64_t q_len, int64_t kv_len, int64_t block_q, int64_t block_k,
            bool causal);

  int64_t n_qb() const { return (q_len + block_q - 1) / block_q; }
  int64_t n_kb() const { return (kv_len + block_k - 1) / block_k; }
  std::span<const int32_t> row(int64_t h, int64_t qb) const {
    const size_t i = size_t(h * n_qb() + qb);
    return {blocks.data() + offsets[i], size_t(offsets[i + 1] - offsets[i])};
  }
  // Key blocks a query block may see at all: [0, causal_blocks(qb)).
  int64_t causal_blocks(int64_t qb) const;

  // Builds a mask from per-(h, qb) lists, given row by row (h major); sorts nothing: call
  // validate() to check.
  static BlockMask from_lists(int64_t heads, int64_t q_len, int64_t kv_len, int64_t block_q,
                              int64_t block_k, bool causal,
                              const std::vector<std::vector<int32_t>>& lists);
  // Dense boolean grid [heads][n_qb][n_kb] <-> mask.
  static BlockMask from_dense(int64_t heads, int64_t q_len, int64_t kv_len, int64_t block_q,
                              int64_t block_k, bool causal, const std::vector<uint8_t>& grid);
  std::vector<uint8_t> to_dense() const;
  // Every causal block (the dense problem as a mask).
  static BlockMask full(int64_t heads, int64_t q_len, int64_t kv_len, int64_t block_q,
                        int64_t block_k, bool causal);

  // Throws Error naming the head, query block and block when a list is unsorted, repeats a
  // block, leaves [0, n_kb), or (causal) holds a block entirely after the query block's last
  // row; or when offsets/geometry are inconsistent.
  void validate() const;
  // Throws Error unless the mask's geometry fits attention of q [heads, q_len] over kv_len.
  void check_matches(int64_t q_heads, int64_t q_len, int64_t kv_len, bool causal) const;

  // Score entries the mask covers after causal masking (what a kernel computes), all heads.
  int64_t entries() const;
  // Blocks listed, all heads.
  int64_t block_count() const { return int64_t(blocks.size()); }
};

}  // namespace spattn
