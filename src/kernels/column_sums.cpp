// Attention and the column sums of its normalised weights in one pass (spattn/weight_sums.hpp):
// the dense loop, or its block-diagonal causal form (rows and keys in blocks of `chunk`, each
// attending causally to its own block only), under ColumnSumsPolicy.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/column_sums.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/flash-inl.h"
#include "kernels/weight_sums_policy.hpp"

#ifndef SPATTN_KERNELS_COLUMN_SUMS_DIAGONAL_
#define SPATTN_KERNELS_COLUMN_SUMS_DIAGONAL_
namespace spattn::kernels {
// The block-diagonal causal mask of chunked prefill's intra pass ("Chunked Sparse Attention for
// Prefill Optimization", Section 1.2: chunk_start(i) = floor(i / S) S): query row i sees keys
// [chunk_start(i), i]. Query tiles never straddle a block (a block's last tile may be short),
// so each tile's keys are one range. Needs q and keys at the same positions (pos_offset 0).
struct ChunkDiagonalPolicy : DensePolicy {
  int64_t chunk = 1;            // S
  int64_t tiles_per_chunk = 1;  // ceil(S / tile_rows)

  int64_t num_tiles(const Problem& p) const {
    return (p.q_len + chunk - 1) / chunk * tiles_per_chunk;
  }
  int64_t rows(const Problem& p, int64_t t, int64_t* q_rows, int64_t* out_rows) const {
    const int64_t c = t / tiles_per_chunk;
    const int64_t b = c * chunk + t % tiles_per_chunk * tile_rows;
    const int64_t e = std::min({b + tile_rows, (c + 1) * chunk, p.q_len});
    for (int64_t r = 0; r < e - b; ++r) q_rows[r] = out_rows[r] = b + r;
    return std::max<int64_t>(e - b, 0);
  }
  void key_ranges(const Problem&, int64_t, int64_t t, int64_t key_limit,
                  std::vector<KeyRange>& out) const {
    out.push_back({t / tiles_per_chunk * chunk, key_limit});
  }
  int64_t cost(const Problem&, int64_t, int64_t t, int64_t last_q_row) const {
    return last_q_row + 1 - t / tiles_per_chunk * chunk;
  }
};
}  // namespace spattn::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
template <class Policy>
void RunColumnSums(const Problem& p, Policy& pol, WeightSums* out, Stats* stats) {
  pol.tiles = pol.num_tiles(p);
  pol.slots.resize(size_t(p.q.heads * pol.tiles));
  RunFlash(p, pol, stats);
  pol.sum_into(out->column, p.q.heads, p.kv_len);
}

void ColumnSumsEntry(const Problem& p, int64_t chunk, WeightSums* out, Stats* stats) {
  if (chunk > 0) {
    ColumnSumsPolicy<ChunkDiagonalPolicy> pol;
    pol.chunk = chunk;
    pol.tiles_per_chunk = (chunk + pol.tile_rows - 1) / pol.tile_rows;
    RunColumnSums(p, pol, out, stats);
  } else {
    ColumnSumsPolicy<DensePolicy> pol;
    RunColumnSums(p, pol, out, stats);
  }
}
}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "spattn/error.hpp"
#include "spattn/packed_kv.hpp"

namespace spattn {
namespace kernels {
HWY_EXPORT(ColumnSumsEntry);
}  // namespace kernels

void attention_with_column_sums(const TensorView& q, const PackedKV& kv, const TensorView& out,
                                float* lse, WeightSums& sums, const AttnOptions& opt, Stats* stats,
                                int64_t diagonal_chunk) {
  SPATTN_CHECK(sums.want_columns && !sums.want_blocks,
               "attention_with_column_sums: computes column sums only (want_columns, not "
               "want_blocks)");
  SPATTN_CHECK(diagonal_chunk >= 0,
               "attention_with_column_sums: diagonal_chunk must be >= 0, "
               "got ",
               diagonal_chunk);
  const kernels::Problem p = kernels::make_problem(q, kv.data(), out, opt, lse);
  if (diagonal_chunk > 0)
    SPATTN_CHECK(p.causal && p.pos_offset == 0 && p.kv_len == p.q_len && kv.data().identity,
                 "attention_with_column_sums: diagonal_chunk needs causal self-attention (q at "
                 "the keys' own positions: ",
                 p.q_len, " rows over ", p.kv_len, " keys)");
  HWY_DYNAMIC_DISPATCH(kernels::ColumnSumsEntry)(p, diagonal_chunk, &sums, stats);
}

}  // namespace spattn
#endif  // HWY_ONCE
