// Metrics that judge a sparse method against exact attention.
#pragma once
#include <cstdint>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/coverage.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

struct OutputError {
  double rel_l2 = 0;      // ||out - ref||_2 / ||ref||_2 over all elements
  double cosine_min = 1;  // worst row cosine similarity (rows where both are zero count 1)
  double cosine_mean = 1;
  double max_abs = 0;
};
OutputError compare_outputs(const TensorView& out, const TensorView& ref);

// The rows metrics evaluate: every row when q_len <= max_rows, else max_rows evenly spaced
// rows (always including the first and the last).
std::vector<int64_t> sample_rows(int64_t q_len, int64_t max_rows);

// compare_outputs against the exact (double) reference computed only at sampled rows of every
// head: what `spattn bench` reports at lengths where a full reference would take minutes.
OutputError sampled_output_error(const TensorView& out, const TensorView& q, const TensorView& k,
                                 const TensorView& v, const AttnOptions& opt,
                                 int64_t max_rows = 256);

struct Recall {
  double mean = 1;   // mean over sampled rows of softmax mass held by computed entries
  double worst = 1;  // the lowest row
  int64_t rows = 0;  // rows evaluated (per head, summed over heads)
};
// Evaluates every row when Lq <= max_rows, else max_rows evenly spaced rows per head
// (always including the last). Exact, double accumulation.
Recall attention_recall(const TensorView& q, const TensorView& k, const Coverage& cov,
                        const AttnOptions& opt, int64_t max_rows = 256);

// Softmax mass of one q head per (query block, key block), averaged over the rows of the
// query block: mass[qb * n_kb + kb]. Rows sum to 1 over key blocks.
struct BlockMassGrid {
  int64_t block_q = 64, block_k = kKeyBlock, n_qb = 0, n_kb = 0;
  std::vector<float> mass;
  // Key blocks that hold at least one causal entry for query block qb.
  int64_t causal_blocks(int64_t qb) const;
  int64_t q_len = 0, kv_len = 0;
  bool causal = true;
};
// block_k must be a multiple of kKeyBlock; uses the fast kernel's block observer.
BlockMassGrid block_mass(const TensorView& q, const TensorView& k, const TensorView& v,
                         int64_t q_head, int64_t block_q, int64_t block_k, const AttnOptions& opt);

// Oracle block top-k: mean over query blocks of the mass held by its best key blocks, with
// a per-row budget k = max(1, ceil(budget_fraction * causal blocks of that row)).
double oracle_topk_mass(const BlockMassGrid& g, double budget_fraction);
// Same with a fixed k per query block.
double oracle_topk_mass_k(const BlockMassGrid& g, int64_t k);

// FLOPs of attention over `entries` score entries at head dim d (QK^T and PV: 4*d each).
inline double attention_flops(int64_t entries, int64_t dim) {
  return 4.0 * double(dim) * double(entries);
}

}  // namespace spattn
