// Token-sparse attention (spattn/token_sparse.hpp): each query row reads its own keys, gathered
// 64 at a time from the packed cache through the dense loop's key-column hook; runs of rows
// that see every causal key share dense tiles of up to 64 rows.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/token_sparse.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/flash-inl.h"
#include "spattn/token_sparse.hpp"

#ifndef SPATTN_KERNELS_TOKEN_SPARSE_POLICY_
#define SPATTN_KERNELS_TOKEN_SPARSE_POLICY_
namespace spattn::kernels {

// A query tile: rows [first, first + n); a run of rows reading every causal key, or one row
// reading its list.
struct TokenTile {
  int64_t first = 0, n = 0;
  bool all = false;
};

struct TokenSparsePolicy : DensePolicy {
  struct KeySource : DensePolicy::KeySource {
    static constexpr bool kGather = true;
  };
  const TokenSelection* sel = nullptr;
  const std::vector<TokenTile>* tiles = nullptr;

  int64_t num_tiles(const Problem&) const { return int64_t(tiles->size()); }
  int64_t rows(const Problem&, int64_t t, int64_t* q_rows, int64_t* out_rows) const {
    const TokenTile& tt = (*tiles)[size_t(t)];
    for (int64_t r = 0; r < tt.n; ++r) q_rows[r] = out_rows[r] = tt.first + r;
    return tt.n;
  }
  void key_ranges(const Problem&, int64_t, int64_t t, int64_t limit,
                  std::vector<KeyRange>& out) const {
    if ((*tiles)[size_t(t)].all) out.push_back({0, limit});
  }
  void key_columns(const Problem&, int64_t, int64_t t, int64_t, std::vector<int64_t>& out) const {
    const TokenTile& tt = (*tiles)[size_t(t)];
    if (tt.all) return;
    const int64_t* keys = sel->row(tt.first);
    out.insert(out.end(), keys, keys + sel->count(tt.first));
  }
  int64_t cost(const Problem& p, int64_t, int64_t t, int64_t last_q_row) const {
    const TokenTile& tt = (*tiles)[size_t(t)];
    return tt.all ? last_q_row + p.pos_offset + 1 : sel->count(tt.first);
  }
};

}  // namespace spattn::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
void TokenSparseEntry(const Problem& p, const TokenSelection* sel,
                      const std::vector<TokenTile>* tiles, Stats* stats) {
  TokenSparsePolicy pol;
  pol.sel = sel;
  pol.tiles = tiles;
  RunFlash(p, pol, stats);
}
}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>

#include "spattn/error.hpp"
#include "spattn/packed_kv.hpp"

namespace spattn {
namespace kernels {
HWY_EXPORT(TokenSparseEntry);
}

void TokenSelection::add(std::vector<int64_t> row) {
  std::sort(row.begin(), row.end());
  keys.insert(keys.end(), row.begin(), row.end());
  offsets.push_back(int64_t(keys.size()));
  all.push_back(0);
}

void attention_token_sparse(const TensorView& q, const PackedKV& kv, const TensorView& out,
                            const TokenSelection& sel, const AttnOptions& opt, float* lse,
                            Stats* stats) {
  SPATTN_CHECK(sel.rows() == q.seq && int64_t(sel.offsets.size()) == q.seq + 1,
               "token-sparse attention: a selection of ", sel.rows(), " rows for ", q.seq,
               " queries");
  SPATTN_CHECK(kv.data().identity, "token-sparse attention: keys in natural order only");
  for (int64_t i = 0; i < sel.rows(); ++i) {
    const int64_t* keys = sel.row(i);
    for (int64_t j = 0; j < sel.count(i); ++j)
      SPATTN_CHECK(keys[j] >= 0 && keys[j] < kv.size() && (j == 0 || keys[j] > keys[j - 1]),
                   "token-sparse attention: row ", i, "'s key ", keys[j],
                   " is outside the cache's ", kv.size(), " keys or out of order");
  }
  const kernels::Problem p = kernels::make_problem(q, kv.data(), out, opt, lse);
  // Runs of rows reading every causal key, 64 to a tile; every other row a tile of its own.
  std::vector<kernels::TokenTile> tiles;
  for (int64_t i = 0; i < sel.rows(); ++i) {
    const bool all = sel.all[size_t(i)] != 0;
    if (all && !tiles.empty() && tiles.back().all && tiles.back().n < kernels::kTileKeys)
      ++tiles.back().n;
    else
      tiles.push_back({i, 1, all});
  }
  HWY_DYNAMIC_DISPATCH(kernels::TokenSparseEntry)(p, &sel, &tiles, stats);
}

}  // namespace spattn
#endif
