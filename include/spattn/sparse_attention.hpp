// Sparse kernel forms: block-sparse, token-level vertical-slash, and query-sparse. All run the
// dense kernel's loop through its policy hooks (src/kernels/flash-inl.h).
#pragma once
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/coverage.hpp"

namespace spattn {

// Computes exactly the listed blocks (causal mask inside diagonal blocks). Rows whose list is
// empty get output 0 and LSE -inf. The mask's heads must equal q heads.
void attention_block_sparse(const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out, const BlockMask& mask,
                            const AttnOptions& opt = {}, float* lse = nullptr,
                            Stats* stats = nullptr);

// MInference's token-level form, per (q head, query tile of `tile_rows` rows): key columns
// (vertical lines, any positions) and diagonals (slash lines, as offsets i - j >= 0: the tile's
// rows [r0, r1) with offset o cover keys [pos(r0) - o, pos(r1 - 1) - o]). Nothing is
// materialised: each tile attends to the union of its diagonals' key ranges plus its columns,
// gathered 64 at a time. Causal only.
struct VerticalSlashIndex {
  int64_t heads = 0;       // q heads
  int64_t tile_rows = 64;  // query rows per tile (<= 128)
  // Per q head: sorted unique key columns and sorted unique slash offsets, shared by all its
  // tiles (MInference estimates them once per head).
  std::vector<std::vector<int64_t>> columns;
  std::vector<std::vector<int64_t>> offsets;
  // The query rows computed, sorted and unique, for every head; tile t is the rows
  // rows[t * tile_rows, (t + 1) * tile_rows), and its diagonals span its first row's position to
  // its last's. Rows not listed are left untouched in out and lse (one modality's queries, say:
  // MMInference's Q-boundary heads run one index per modality). Absent: every row, tile t
  // being rows [t * tile_rows, (t + 1) * tile_rows).
  std::optional<std::vector<int64_t>> rows;
  int64_t num_tiles(int64_t q_len) const;
  // Throws Error unless the index fits q's heads and lengths: one list per head, columns and
  // offsets in [0, kv_len), tile_rows in [1, 128], rows sorted, unique and in [0, q_len).
  void validate(int64_t q_heads, int64_t q_len, int64_t kv_len) const;
  // The first and last q row of tile t (rows of the tile in between are the listed ones).
  std::pair<int64_t, int64_t> tile_span(int64_t t, int64_t q_len) const;
};
void attention_vertical_slash(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const VerticalSlashIndex& index,
                              const AttnOptions& opt = {}, float* lse = nullptr,
                              Stats* stats = nullptr);

// The keys tile `tile` of q head h computes, before each row's causal limit: the sorted,
// coalesced slash ranges and the columns outside them. Rows r of the tile see the
// keys here that are <= their own position. (What coverage/recall must use.)
void vertical_slash_tile_keys(const VerticalSlashIndex& index, int64_t h, int64_t tile,
                              int64_t q_len, int64_t kv_len, std::vector<KeyRange>& ranges,
                              std::vector<int64_t>& columns);

// A subset of query rows against all causal keys: either every `stride`-th row (gamma in MOMO;
// rows stride-1, 2*stride-1, ..., so the last row of each group is computed, and always the last
// row), or an explicit sorted list of rows. Output and LSE are compact: out is
// [Hq, rows.size(), d] and row r of out is query row rows[r]. The observer, if given, sees
// per-(row, 64-key block) LSE with compact row indices.
std::vector<int64_t> strided_rows(int64_t q_len, int64_t stride);
// Whether row is one of strided_rows(q_len, stride).
inline bool is_strided_row(int64_t row, int64_t q_len, int64_t stride) {
  return row % stride == stride - 1 || row == q_len - 1;
}
void attention_query_sparse(const TensorView& q, const TensorView& k, const TensorView& v,
                            const std::vector<int64_t>& rows, const TensorView& out,
                            const AttnOptions& opt = {}, float* lse = nullptr,
                            BlockLseObserver* observer = nullptr, Stats* stats = nullptr);

}  // namespace spattn
