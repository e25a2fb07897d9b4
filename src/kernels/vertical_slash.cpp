// MInference's token-level vertical-slash attention: per query tile, the union of its slash
// lines' key ranges plus the head's vertical columns, packed once per head. No mask is
// materialised.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/vertical_slash.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/flash-inl.h"
#include "spattn/error.hpp"
#include "spattn/sparse_attention.hpp"

#ifndef SPATTN_KERNELS_VERTICAL_SLASH_POLICY_
#define SPATTN_KERNELS_VERTICAL_SLASH_POLICY_
namespace spattn::kernels {

// A slash with offset o crosses tile rows at positions [p0, p1] on keys [p0 - o, p1 - o].
inline void slash_ranges(const VerticalSlashIndex& idx, int64_t h, int64_t p0, int64_t p1,
                         std::vector<KeyRange>& out) {
  for (int64_t o : idx.offsets[size_t(h)])
    if (p1 - o >= 0) out.push_back({std::max<int64_t>(0, p0 - o), p1 - o + 1});
}

// The vertical columns are the same for every tile of a head: packed once per call into
// tiles of their own (kPackedColumns), they stream like any key tile; slash tiles leave them
// out. (Gathering them per query tile, as this kernel once did, cost more than they saved.)
struct VerticalSlashPolicy : DensePolicy {
  struct KeySource : DensePolicy::KeySource {
    static constexpr bool kPackedColumns = true;
    // A slash line's range is as wide as the query tile and rarely on the 64-key grid, so most
    // ranges are one or two short pieces of tiles: packed together into gathered tiles, they cost
    // about their keys over 64 tiles instead of two tiles each (at 32K on `text`, 1.56 computed
    // entries per entry kept before this).
    static constexpr bool kPackFragments = true;
  };
  const VerticalSlashIndex* idx = nullptr;

  int64_t num_tiles(const Problem& p) const { return idx->num_tiles(p.q_len); }
  int64_t rows(const Problem& p, int64_t t, int64_t* q_rows, int64_t* out_rows) const {
    if (!idx->rows) return DensePolicy::rows(p, t, q_rows, out_rows);
    const auto& list = *idx->rows;
    const int64_t b = t * tile_rows, n = std::min<int64_t>(tile_rows, int64_t(list.size()) - b);
    for (int64_t r = 0; r < n; ++r) q_rows[r] = out_rows[r] = list[size_t(b + r)];
    return n;
  }
  void key_ranges(const Problem& p, int64_t h, int64_t t, int64_t,
                  std::vector<KeyRange>& out) const {
    const auto [r0, r1] = idx->tile_span(t, p.q_len);
    slash_ranges(*idx, h, r0 + p.pos_offset, r1 + p.pos_offset, out);
  }
  void head_columns(const Problem&, int64_t h, std::vector<int64_t>& out) const {
    const auto& c = idx->columns[size_t(h)];
    out.insert(out.end(), c.begin(), c.end());
  }
  int64_t cost(const Problem& p, int64_t h, int64_t t, int64_t) const {
    return int64_t(idx->offsets[size_t(h)].size() * size_t(tile_rows) +
                   idx->columns[size_t(h)].size());
  }
};

}  // namespace spattn::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
void VerticalSlashEntry(const Problem& p, const VerticalSlashIndex* idx, Stats* stats) {
  VerticalSlashPolicy pol;
  pol.idx = idx;
  pol.tile_rows = idx->tile_rows;
  RunFlash(p, pol, stats);
}
}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spattn {
namespace kernels {
HWY_EXPORT(VerticalSlashEntry);
}

void attention_vertical_slash(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const VerticalSlashIndex& index,
                              const AttnOptions& opt, float* lse, Stats* stats) {
  const kernels::Problem p = kernels::make_problem(q, k, v, out, opt, lse);
  SPATTN_CHECK(opt.causal, "vertical_slash: only causal attention is supported");
  index.validate(q.heads, q.seq, k.seq);
  HWY_DYNAMIC_DISPATCH(kernels::VerticalSlashEntry)(p, &index, stats);
}

void VerticalSlashIndex::validate(int64_t q_heads, int64_t q_len, int64_t kv_len) const {
  SPATTN_CHECK(heads == q_heads, "vertical_slash: index has ", heads, " heads, q has ", q_heads);
  SPATTN_CHECK(tile_rows >= 1 && tile_rows <= kernels::kMaxTileRows,
               "vertical_slash: tile_rows must be in [1, ", kernels::kMaxTileRows, "], got ",
               tile_rows);
  SPATTN_CHECK(columns.size() == size_t(q_heads) && offsets.size() == size_t(q_heads),
               "vertical_slash: columns and offsets need one list per q head");
  if (rows) {
    for (size_t i = 0; i < rows->size(); ++i)
      SPATTN_CHECK((*rows)[i] >= 0 && (*rows)[i] < q_len && (i == 0 || (*rows)[i] > (*rows)[i - 1]),
                   "vertical_slash: rows must be sorted, unique and in [0, ", q_len, "); row ",
                   (*rows)[i], " at index ", i, " is not");
  }
  for (int64_t h = 0; h < q_heads; ++h) {
    for (int64_t c : columns[size_t(h)])
      SPATTN_CHECK(c >= 0 && c < kv_len, "vertical_slash: head ", h, " column ", c, " outside [0, ",
                   kv_len, ")");
    for (int64_t o : offsets[size_t(h)])
      SPATTN_CHECK(o >= 0 && o < kv_len, "vertical_slash: head ", h, " slash offset ", o,
                   " outside [0, ", kv_len, ")");
  }
}

int64_t VerticalSlashIndex::num_tiles(int64_t q_len) const {
  const int64_t n = rows ? int64_t(rows->size()) : q_len;
  return (n + tile_rows - 1) / tile_rows;
}

std::pair<int64_t, int64_t> VerticalSlashIndex::tile_span(int64_t t, int64_t q_len) const {
  const int64_t n = rows ? int64_t(rows->size()) : q_len;
  const int64_t a = t * tile_rows, b = std::min(n, a + tile_rows) - 1;
  return rows ? std::pair((*rows)[size_t(a)], (*rows)[size_t(b)]) : std::pair(a, b);
}

void vertical_slash_tile_keys(const VerticalSlashIndex& index, int64_t h, int64_t tile,
                              int64_t q_len, int64_t kv_len, std::vector<KeyRange>& ranges,
                              std::vector<int64_t>& columns) {
  const int64_t off = query_position(0, q_len, kv_len);
  const auto [r0, r1] = index.tile_span(tile, q_len);
  const int64_t limit = std::min(kv_len, r1 + off + 1);
  ranges.clear();
  columns.clear();
  kernels::slash_ranges(index, h, r0 + off, r1 + off, ranges);
  kernels::NormalizeRanges(ranges, limit);
  columns = index.columns[size_t(h)];
  kernels::NormalizeColumns(columns, ranges, limit);
}
}  // namespace spattn
#endif
