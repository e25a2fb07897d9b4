// MMInference's modality-boundary heads ("MMInference: Modality-Aware Permutation Sparse
// Attention", section 3.2, Algorithms 2, 3, 6 and 7).
//
// Both are lists of pieces, each a (query modality, key modality) pair with its own vertical
// columns and slash diagonals in original positions:
//
// Q-boundary (Algorithm 2): one piece per query modality against every key (k_modality =
// kAnyModality), its index built from that modality's own last queries; the rows of one
// modality are one piece, so each row is computed once.
//
// 2D-boundary (Algorithm 3): one piece per (query modality, key modality) pair, the
// cross-modality pairs included; a piece keeps only keys of its key modality, and its index
// comes from the query modality's last queries against the key modality's keys alone.
//
// Each piece runs on the row-groups kernel over a PackedKV holding its keys (its columns first,
// then the rest in position order, each with its original position, so the causal rule is the
// original one and the columns are one contiguous range); query tiles are at most 64
// consecutive rows of the query modality, picked by the kernel and written back to their own
// rows. The pieces of a row hold disjoint keys and are merged exactly by (O, LSE).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/coverage.hpp"
#include "spattn/masks.hpp"
#include "spattn/modality.hpp"

namespace spattn {

inline constexpr uint8_t kAnyModality = 255;  // a piece over every key (Q-boundary)

// One piece of a boundary head (one q head).
struct ModalityPairIndex {
  uint8_t q_modality = 0, k_modality = 0;
  std::vector<int64_t> columns;  // key positions, all of k_modality, ascending, unique
  std::vector<int64_t> offsets;  // diagonals pos(row) - pos(key) >= 0, ascending, unique
};

// The pieces of one q head from a vertical-slash config: per query modality present in the
// rows (and with split_keys, per key modality present), the estimate of the query modality's
// last min(last_q, rows) queries against the piece's keys (softmax over those keys), the
// piece's first `sink` keys forced as columns and diagonals 0..local-1 forced. q, k: one head.
// split_keys false: a Q-boundary head; true: a 2D-boundary head.
std::vector<ModalityPairIndex> vertical_slash_pairs(const TensorView& q, const TensorView& k,
                                                    const ModalityLayout& layout,
                                                    const VerticalSlashConfig& c,
                                                    const AttnOptions& opt, bool split_keys);

// One piece's estimate, given the query modality's last rows `est_rows` (ascending) and the
// piece's candidate keys `keys` (positions, ascending): the index of one head whose columns are
// key positions, the first min(sink, keys) candidates forced (the host's form is what
// vertical_slash_pairs above runs; the device's is cuda::vertical_slash_estimate).
using PieceEstimate = std::function<VerticalSlashIndex(const std::vector<int64_t>& est_rows,
                                                       const std::vector<int64_t>& keys)>;
// vertical_slash_pairs with the estimate given: which rows and keys each piece reads is decided
// here, once, for both.
std::vector<ModalityPairIndex> vertical_slash_pairs(const ModalityLayout& layout, int64_t q_len,
                                                    const VerticalSlashConfig& c, bool split_keys,
                                                    const PieceEstimate& estimate);
// A-shape per piece (static): the key modality's own first `sink` keys (for a Q-boundary piece,
// the query modality's own first `sink` tokens, as a_shape_index_for_modality: a video's sink
// is its first patches) and diagonals 0..local-1.
std::vector<ModalityPairIndex> a_shape_pairs(const ModalityLayout& layout, int64_t q_len,
                                             int64_t sink, int64_t local, bool split_keys);

// The plan of one pair on the kernel: keys packed in `order` (the columns, then the key
// modality's other keys ascending), query tiles of at most 64 consecutive rows of the query
// modality, each with its packed key ranges. Tile rows share the ranges; the causal rule
// (original positions) cuts each row.
struct PairTile {
  std::vector<int64_t> rows;
  std::vector<KeyRange> keys;  // packed indices, sorted, disjoint
};
struct PairPlan {
  std::vector<int64_t> order;  // packed index -> key position
  std::vector<PairTile> tiles;
};
// Throws Error naming the problem on columns of another modality, unsorted lists or negative
// offsets. Positions: q row r at kv_len - q_len + r.
PairPlan pair_plan(const ModalityPairIndex& p, const ModalityLayout& layout, int64_t q_len);

// Every piece's plan, in order.
std::vector<PairPlan> pair_plans(const std::vector<ModalityPairIndex>& pairs,
                                 const ModalityLayout& layout, int64_t q_len);

// out (and lse) = attention of each row over the union of its pieces' keys (a row in no piece:
// zeros, LSE -inf). One head: q, k, v, out are [1, L, d]. Causal only. plans from pair_plans.
void attention_modality_pairs(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const std::vector<PairPlan>& plans,
                              const AttnOptions& opt, float* lse = nullptr, Stats* stats = nullptr);

// Exactly the entries attention_modality_pairs computes with `plans`, in original coordinates
// (head 0).
std::unique_ptr<Coverage> modality_pairs_coverage(std::vector<PairPlan> plans, int64_t q_len,
                                                  int64_t kv_len);

}  // namespace spattn
