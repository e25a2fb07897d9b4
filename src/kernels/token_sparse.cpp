// Token-sparse attention (spattn/token_sparse.hpp): each query row reads its own keys, gathered
// 64 at a time through the dense loop's key-column hook (from the packed cache, or in prefill
// from a token-major copy of its keys made once for the call); runs of rows
// that see every causal key share dense tiles of up to 64 rows. A query's keys are the same for
// every q head of a kv head, so the loop runs on grouped rows (query i's heads as consecutive
// rows of their kv head): one gather serves up to 64 heads, where a row a head would gather the
// same keys once per head (128 times a query for DeepSeek's absorbed latent attention). More
// heads than that (the latent's 128: two tiles) have the listed keys staged once for the call.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/token_sparse.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/flash-inl.h"
#include "spattn/token_sparse.hpp"

#ifndef SPATTN_KERNELS_TOKEN_SPARSE_POLICY_
#define SPATTN_KERNELS_TOKEN_SPARSE_POLICY_
namespace spattn::kernels {

// A tile: grouped rows [first, first + n); a run of rows reading every causal key, or rows of
// one query (the selection's row `query`) reading its list.
struct TokenTile {
  int64_t first = 0, n = 0, query = 0;
  bool all = false;
};

struct TokenSparsePolicy : DensePolicy {
  struct KeySource : DensePolicy::KeySource {
    static constexpr bool kGather = true;
  };
  const TokenSelection* sel = nullptr;
  const std::vector<TokenTile>* tiles = nullptr;
  // The cache's keys token-major ([kv_heads][keys][dim], key_rows) where the call staged them.
  const float* k_rows = nullptr;

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
    const int64_t* keys = sel->row(tt.query);
    out.insert(out.end(), keys, keys + sel->count(tt.query));
  }
  const float* gather_key_rows(const Problem& p, int64_t kvh) const {
    return k_rows ? k_rows + kvh * p.packed->size * p.dim : nullptr;
  }
  int64_t cost(const Problem& p, int64_t, int64_t t, int64_t last_q_row) const {
    const TokenTile& tt = (*tiles)[size_t(t)];
    return tt.all ? p.row_position(last_q_row) + 1 : sel->count(tt.query);
  }
};

}  // namespace spattn::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
void TokenSparseEntry(const Problem& p, const TokenSelection* sel,
                      const std::vector<TokenTile>* tiles, const float* k_rows, Stats* stats) {
  TokenSparsePolicy pol;
  pol.sel = sel;
  pol.tiles = tiles;
  pol.k_rows = k_rows;
  RunFlash(p, pol, stats);
}

// Keys keys[0, n) of src (ascending slots) into slots 0.. of dst (f32 tiles, capacity n): the
// values the gather writes into its tiles for them, widened the same way (a 16-bit tile's
// listed keys a key group at a time, anything else a key at a time). Where V is K, dst's V is
// its K too: each key's one row widened (the loop scores it as rows: ScoresOverRows).
void StageListedEntry(const PackedKVData* src, const int64_t* keys, int64_t n, PackedKVData* dst,
                      int threads) {
  const PackedKVData& s = *src;
  const int64_t tiles = (n + kTileKeys - 1) / kTileKeys;
  const int64_t value_bytes = traits(s.v_type).value_bytes();
  parallel_for(s.kv_heads * tiles, threads, [&](int64_t item, int) {
    const int64_t kvh = item / tiles, first = item % tiles * kTileKeys;
    const int64_t count = std::min(kTileKeys, n - first);
    float* gk = dst->k_tile<float>(kvh, first / kTileKeys);
    float* gv = dst->v_tile<float>(kvh, first / kTileKeys);
    if (s.v_is_k) {
      // Each key's row (scattered over the cache), the next eight keys' coming meanwhile.
      for (int64_t i = 0; i < count; ++i) {
        if (i + 8 < count) {
          const int64_t j = keys[first + i + 8];
          PrefetchL2(s.k_bytes(kvh, j / kTileKeys) + (j % kTileKeys) * s.v_row() * value_bytes,
                     s.v_row() * value_bytes);
        }
        const int64_t j = keys[first + i];
        const unsigned char* tile = s.k_bytes(kvh, j / kTileKeys);
        if (dst->v_row() == s.dp) {  // rows unpadded either way (dims a multiple of 16)
          WidenStridedV(s.v_type, tile, j % kTileKeys, 1, s.v_row(), s.dp, gv, i);
        } else {
          HWY_ALIGN float row[kMaxHeadDim + 16];
          WidenStridedV(s.v_type, tile, j % kTileKeys, 1, s.v_row(), s.dp, row, 0);
          std::copy_n(row, s.dim, gv + i * s.dim);
        }
      }
      return;
    }
    int32_t slots[kTileKeys];
    for (int64_t jj = 0; jj < count;) {
      const int64_t jt = keys[first + jj] / kTileKeys;
      int64_t m = 0;
      for (; jj + m < count && keys[first + jj + m] / kTileKeys == jt; ++m)
        slots[m] = int32_t(keys[first + jj + m] % kTileKeys);
      if (!WidenListedK(s.k_type, s.k_bytes(kvh, jt), slots, m, s.dim, gk, jj))
        for (int64_t a = 0; a < m; ++a)
          WidenKeysK(s.k_type, s.k_bytes(kvh, jt), slots[a], 1, s.dim, gk, jj + a);
      for (int64_t a = 0; a < m; ++a) WidenKeysVOf(s, kvh, jt, slots[a], 1, gv, jj + a);
      jj += m;
    }
  });
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
HWY_EXPORT(StageListedEntry);

namespace {
// Rows of a tile: the dense loop's key tile width, so a run of rows reading every key is as
// tall as it is wide.
constexpr int64_t kTileRows = kTileKeys;

// Where q head h's query i stands among the grouped rows: kv head h / G, row i * G + h % G.
struct GroupedRow {
  int64_t head, row;
};
GroupedRow grouped_row(int64_t h, int64_t i, int64_t G) { return {h / G, i * G + h % G}; }

// Keys of the packed tiles the gather reads for sel: each tile a row's list touches, whole, once
// per tile of (up to kTileRows) grouped rows of its query (consecutive reads of a tile reuse it).
int64_t gathered_tile_keys(const TokenSelection& sel, int64_t G) {
  const int64_t row_tiles = (G + kTileRows - 1) / kTileRows;
  int64_t tiles = 0;
  for (int64_t i = 0; i < sel.rows(); ++i) {
    const int64_t* keys = sel.row(i);
    for (int64_t j = 0; j < sel.count(i); ++j)
      tiles += j == 0 || keys[j] / kTileKeys != keys[j - 1] / kTileKeys;
  }
  return tiles * row_tiles * kTileKeys;
}

// t [H, L, d] as grouped rows [H / G, L * G, d] (grouped_row), in place where t's heads of a
// query are contiguous in steps of one head (token-major rows, one kv head), else into `copy`,
// `fill` choosing whether t's values are copied in.
TensorView grouped(const TensorView& t, int64_t G, std::vector<unsigned char>& copy, bool fill) {
  TensorView g = t;
  g.heads = t.heads / G, g.seq = t.seq * G;
  if (t.stride_seq == G * t.stride_head) {
    g.stride_head = G * t.stride_head, g.stride_seq = t.stride_head;
    return g;
  }
  copy.assign(size_t(t.heads * t.seq * t.dim) * dtype_size(t.dtype), 0);
  g = TensorView::hsd(copy.data(), t.dtype, g.heads, g.seq, t.dim);
  if (fill)
    for (int64_t h = 0; h < t.heads; ++h)
      for (int64_t i = 0; i < t.seq; ++i) {
        const GroupedRow r = grouped_row(h, i, G);
        for (int64_t c = 0; c < t.dim; ++c) g.set(r.head, r.row, c, t.get(h, i, c));
      }
  return g;
}

// A call whose every row lists its keys, over an f32-operand cache not restaged: each query's
// rows span G / 64 row tiles, and each tile would gather and widen the query's keys for itself
// (DeepSeek's absorbed latent decode: 128 heads, two tiles, one a thread, each reading the same
// 2,048 keys' lines of a 32K cache). The keys the rows list are then staged once, in parallel,
// into f32 tiles of their own (dst, their positions kept), and each row's list becomes slots of
// that copy; a row listing all of them reads it as a dense cache. False: left as it is.
bool stage_listed(const PackedKVData& src, const TokenSelection& sel, int64_t G, int threads,
                  PackedKVData& dst, TokenSelection& dst_sel) {
  if (G <= kTileRows || src.ops != Operands::f32 || sel.rows() == 0) return false;
  if (std::any_of(sel.all.begin(), sel.all.end(), [](uint8_t a) { return a != 0; })) return false;
  std::vector<int64_t> keys(sel.keys);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  const int64_t n = int64_t(keys.size());
  if (n == 0) return false;
  init_packed(dst, Operands::f32, src.dtype, src.kv_heads, src.dim, n, /*zero_all=*/false,
              KVType::f32, KVType::f32, src.v_is_k);
  HWY_DYNAMIC_DISPATCH(StageListedEntry)(&src, keys.data(), n, &dst, threads);
  std::vector<int64_t> pos(keys);
  if (!src.identity)
    for (int64_t& j : pos) j = src.positions[size_t(j)];
  add_positions(dst, pos.data(), n);
  for (int64_t i = 0; i < sel.rows(); ++i) {
    if (sel.count(i) == n) {
      dst_sel.add_all();
      continue;
    }
    std::vector<int64_t> slots(sel.row(i), sel.row(i) + sel.count(i));
    for (int64_t& j : slots) j = std::lower_bound(keys.begin(), keys.end(), j) - keys.begin();
    dst_sel.add(std::move(slots));
  }
  return true;
}
}  // namespace
}  // namespace kernels

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
  // Keys at ascending positions (a context-parallel rank's cache: its positions with gaps) as
  // well as natural order: the causal prefix of a row's position is then a prefix of slots,
  // which the loop cuts each row's listed keys to.
  SPATTN_CHECK(kv.data().ascending, "token-sparse attention: keys in ascending positions only");
  for (int64_t i = 0; i < sel.rows(); ++i) {
    const int64_t* keys = sel.row(i);
    for (int64_t j = 0; j < sel.count(i); ++j)
      SPATTN_CHECK(keys[j] >= 0 && keys[j] < kv.size() && (j == 0 || keys[j] > keys[j - 1]),
                   "token-sparse attention: row ", i, "'s key ", keys[j],
                   " is outside the cache's ", kv.size(), " keys or out of order");
  }
  // A key's column of a packed K tile ([dim][64]) spans dim lines, and a tile stored as f16 /
  // bf16 / q8_0 is widened whole for the few keys a row reads in it: a gather from the tiles reads
  // about every line of every tile a row touches. Prefill gathers from each tile once per query
  // (and per 64 of its rows), so there the cache is restaged once for the call: widened whole to
  // f32, and its keys copied token-major (key_rows), so that a row reads only its keys' lines.
  // Decode reads each tile a few times at most, where restaging would cost more than it saves;
  // but where a query's rows fill more than one tile, its listed keys alone are staged once
  // (stage_listed), not gathered by each tile.
  kernels::PackedKVData wide;
  std::vector<float> k_rows;
  const kernels::PackedKVData* d = &kv.data();
  if (d->ops == kernels::Operands::f32 && d->size * d->dim < (int64_t(1) << 31) &&
      kernels::gathered_tile_keys(sel, q.heads / d->kv_heads) >= 4 * d->size) {
    if (d->widened()) {
      kernels::widen_packed(*d, wide);
      d = &wide;
    }
    kernels::key_rows(*d, k_rows);
  }
  const kernels::Problem p = kernels::make_problem(q, *d, out, opt, lse);
  const int64_t G = p.group;
  kernels::PackedKVData staged;
  TokenSelection staged_sel;
  const TokenSelection* rows_sel = &sel;
  kernels::Problem run = p;
  if (k_rows.empty() && kernels::stage_listed(*d, sel, G, p.threads, staged, staged_sel)) {
    AttnOptions at = opt;
    at.q_start = p.pos_offset;  // the rows' positions, not the staged keys' bottom right
    run = kernels::make_problem(q, staged, out, at, lse);
    rows_sel = &staged_sel;
  }
  // The loop's problem over grouped rows (G of them a query), its output and LSE in that order.
  std::vector<unsigned char> q_copy, out_copy;
  std::vector<float> lse_rows(lse && G > 1 ? size_t(q.heads * q.seq) : 0);
  kernels::Problem gp = run;
  if (G > 1) {
    gp.q = kernels::grouped(q, G, q_copy, true);
    gp.out = kernels::grouped(out, G, out_copy, false);
    gp.lse = lse ? lse_rows.data() : nullptr;
    gp.q_len = q.seq * G;
    gp.group = 1;
    gp.rows_per_position = G;
  }
  // Runs of rows reading every causal key, up to 64 to a tile; a listed query's rows in tiles
  // of up to 64.
  std::vector<kernels::TokenTile> tiles;
  for (int64_t i = 0; i < rows_sel->rows(); ++i) {
    const bool all = rows_sel->all[size_t(i)] != 0;
    for (int64_t g0 = 0; g0 < G; g0 += kernels::kTileRows) {
      const int64_t n = std::min(kernels::kTileRows, G - g0);
      if (all && !tiles.empty() && tiles.back().all && tiles.back().n + n <= kernels::kTileRows)
        tiles.back().n += n;
      else
        tiles.push_back({i * G + g0, n, i, all});
    }
  }
  Stats grouped_stats;
  HWY_DYNAMIC_DISPATCH(kernels::TokenSparseEntry)
  (gp, rows_sel, &tiles, k_rows.empty() ? nullptr : k_rows.data(), &grouped_stats);
  // Causal entries are counted over the caller's queries, not the grouped rows.
  if (stats) {
    kernels::add_kernel_stats(p, {grouped_stats}, stats);
    const size_t bytes = (d == &wide ? wide.bytes() : 0) + k_rows.size() * sizeof(float) +
                         (rows_sel == &staged_sel ? staged.bytes() : 0);
    stats->staged_bytes = std::max(stats->staged_bytes, int64_t(bytes));
  }
  if (G == 1) return;
  for (int64_t h = 0; h < q.heads; ++h)
    for (int64_t i = 0; i < q.seq; ++i) {
      const kernels::GroupedRow r = kernels::grouped_row(h, i, G);
      if (!out_copy.empty())
        for (int64_t c = 0; c < q.dim; ++c) out.set(h, i, c, gp.out.get(r.head, r.row, c));
      if (lse) lse[h * q.seq + i] = lse_rows[size_t(r.head * gp.q_len + r.row)];
    }
}

}  // namespace spattn
#endif
