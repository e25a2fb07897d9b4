// Target-independent pieces of the flash attention loop: the validated problem, the policy
// interface every kernel form implements, and the scratch sizes. The per-target loop itself
// is in flash-inl.h and its pieces.
//
// A policy answers the loop's questions (the contract is the FlashPolicy concept below):
//   rows:        which query rows form tile t, and which output rows they fill
//   key_ranges:  which packed keys tile t attends to; key_columns: single keys gathered;
//   head_columns: single keys of a whole q head, packed once per call (vertical lines)
//   skip:        may this key tile be dropped once its scores are known (BLASST)
//   observe:     what to do with the tile's P, running max and sum, and per-row LSE (MOMO's
//                online top-k, column sums, block mass), into per-thread state (Local)
//   finish:      what to do once an item's rows know their final LSE (column sums of the
//                normalised weights in the attention pass itself)
//   reduce:      how per-thread state combines, once, in thread order
//   visit_order: in which order the key tiles run (BLASST's local-first order)
//   seed_max:    what running max an item starts from (decode's key chunks under that order)
//   load_state / store_state: the rows' whole online-softmax state (m, l, O) taken from and
//                left to the caller instead of starting empty and normalising at the end, so
//                a caller holding a row's keys in pieces continues one loop across calls
// The dense policy answers "contiguous, all causal, never, nobody, nothing, in order, -inf"
// with compile-time constants, so the dense kernel pays nothing for the hooks.
#pragma once
#include <algorithm>
#include <cmath>
#include <concepts>
#include <type_traits>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/blasst.hpp"
#include "spattn/coverage.hpp"

namespace spattn::kernels {

inline constexpr int64_t kTileKeys = kKeyBlock;  // keys per tile (Bc)
inline constexpr int64_t kMaxTileRows = 128;     // largest query tile (Br) a policy may ask for
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct PackedKVData;  // kernels/packed_kv.hpp: K/V in the loop's tile layout

// Validated inputs shared by every kernel form.
struct Problem {
  TensorView q, k, v, out;
  float* lse = nullptr;  // [Hq, Lq] natural log, or null
  bool causal = true;
  float scale = 0;  // softmax scale (resolved, > 0)
  int threads = 1;
  bool bf16_dot = true;  // AttnOptions::bf16_dot: for a call that packs its own K/V
  int64_t group = 1;     // q heads per kv head
  int64_t q_len = 0, kv_len = 0, dim = 0;
  // Absolute position of query row i is i / rows_per_position + pos_offset (bottom-right causal
  // alignment). rows_per_position > 1: each query's rows are that many consecutive rows, one per
  // q head of a kv head (token-sparse attention's grouped rows, which share their keys).
  int64_t pos_offset = 0;
  int64_t rows_per_position = 1;

  // The absolute position of query row `row` (the causal mask's).
  int64_t row_position(int64_t row) const { return row / rows_per_position + pos_offset; }
  // AttnOptions::window: > 0, row i sees keys at positions > its own - window (a band).
  int64_t window = 0;
  // K/V packed by the caller (reused across calls, appended to, or in a chosen key order);
  // null: the loop packs k and v for this call.
  const PackedKVData* packed = nullptr;
};

// Resolves defaults and validates (throws Error). A sliding window (AttnOptions::window) is
// refused unless the form says it runs one (takes_window: the dense forms).
Problem make_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const AttnOptions& opt, float* lse,
                     bool takes_window = false);
// The same over a packed K/V (q_start or bottom-right against its newest key position).
Problem make_problem(const TensorView& q, const PackedKVData& kv, const TensorView& out,
                     const AttnOptions& opt, float* lse, bool takes_window = false);

// Throws Error naming `name` for an empty or null view, and (finite) for NaN/Inf values.
void check_tensor(const TensorView& t, const char* name, bool finite);
// Throws Error for a negative or non-finite scale or a negative thread count.
void check_scale_and_threads(const AttnOptions& opt);

// What the skip and observe hooks see of one key tile of one work item (q head h, query tile t).
// Keys are packed indices (the order the caller packed them in); key_pos are their original
// positions, which the causal mask compares with row_pos.
struct TileView {
  int64_t h = 0, t = 0;
  int64_t n = 0;                       // query rows of the tile
  const int64_t* q_rows = nullptr;     // their rows in q
  const int64_t* out_rows = nullptr;   // the output rows they fill
  const int64_t* row_pos = nullptr;    // their absolute positions
  int64_t key_tile = -1;               // packed 64-key tile, or -1 for a gathered tile
  int64_t n_keys = 0;                  // keys in the tile (columns past n_keys are padding)
  const int64_t* gathered = nullptr;   // gathered tiles: the packed index of each column
  const int64_t* positions = nullptr;  // original position of each packed index; null: identity
  int64_t entries = 0;                 // unmasked (row, key) entries
  const float* tile_max = nullptr;     // per row, max scaled score x = S c (log2 units)
  const float* m = nullptr;    // running max per row: before the tile in skip(), after in observe()
  const float* l = nullptr;    // observe(): running sum per row after the tile
  const float* p = nullptr;    // observe(): P = 2^(x - m), [n][kTileKeys], 0 where masked
  const float* lse = nullptr;  // observe(): per-row natural-log LSE over this tile's keys

  int64_t key(int64_t jj) const { return gathered ? gathered[jj] : key_tile * kTileKeys + jj; }
  int64_t key_position(int64_t jj) const { return positions ? positions[key(jj)] : key(jj); }
};

// One key tile as a work item visits it: packed tile `tile`, with the keys of the range
// [begin, end) (packed indices) that brought it in, whose original positions span
// [first_pos, last_pos].
struct TileVisit {
  int64_t tile = 0, begin = 0, end = 0;
  int64_t first_pos = 0, last_pos = 0;
};
// Tile jt of keys in natural order (position = index) among kv_len keys.
inline TileVisit natural_visit(int64_t jt, int64_t begin, int64_t end, int64_t kv_len) {
  const int64_t j0 = jt * kTileKeys;
  return {jt, begin, end, j0, std::min(j0 + kTileKeys, kv_len) - 1};
}

// The dense policy: contiguous query tiles of `tile_rows`, every causal key, no skipping,
// no observer. Other policies derive from it and override what they change; the loop calls
// the hooks statically, so an unused hook costs nothing.
//
// Hooks are const: what a policy accumulates while the loop runs lives in its Local, one per
// worker thread. Hooks that write to shared memory may only write what belongs to their own
// work item (rows of (h, t)). A policy whose Locals must be combined sets Observers::kReduce:
// the loop then assigns items to threads by a fixed rule (not first come, first served) and
// calls reduce(locals) once at the end with the Locals in thread order, so the result is
// bitwise the same on every run with the same thread count.
struct DensePolicy {
  // The loop's static choices, grouped by the decision each is part of. A policy overrides a
  // choice by deriving the group from its base's and setting the flags that change, e.g.
  //   struct KeySource : DensePolicy::KeySource { static constexpr bool kGather = true; };
  //
  // Where an item's keys come from, besides its ranges (key_ranges), and in which order.
  struct KeySource {
    static constexpr bool kGather = false;         // key_columns(): keys gathered per tile
    static constexpr bool kPackedColumns = false;  // head_columns(): once per q head
    // The keys of ranges off whole 64-key tiles (short pieces at a range's ends) are copied
    // together into gathered tiles of 64 (in the plain, unordered loop only; not with kOrder).
    static constexpr bool kPackFragments = false;
    static constexpr bool kOrder = false;  // visit_order() reorders an item's key tiles
  };
  // What observes a tile's scores and P, and what becomes of them.
  struct Observers {
    static constexpr bool kMaySkip = false;  // skip() after each tile's scores
    static constexpr bool kObserve = false;  // observe() after each tile's P.V
    static constexpr bool kFinish = false;   // finish() once per work item, after its tiles
    static constexpr bool kKeepP = false;    // p_buffer() says where each tile's S / P goes
    static constexpr bool kReduce = false;   // reduce() with every thread's Local
    static constexpr bool kOutput = true;    // false: no P.V and no output (a pass that wants P)
  };
  // What state an item carries across its tiles beyond the online softmax's own.
  struct TileState {
    static constexpr bool kSeedMax = false;  // seed_max() before an item's first key tile
    // Calls load_state() before an item's first key tile and store_state() after its last,
    // instead of Finalize (no O / l, no LSE written to the problem's out).
    static constexpr bool kCarry = false;
  };
  struct Local {};
  int64_t tile_rows = 64;

  int64_t num_tiles(const Problem& p) const { return (p.q_len + tile_rows - 1) / tile_rows; }
  // Writes the q rows of tile t (ascending) and the output rows they go to; returns how many.
  int64_t rows(const Problem& p, int64_t t, int64_t* q_rows, int64_t* out_rows) const {
    int64_t b = t * tile_rows, n = std::min(tile_rows, p.q_len - b);
    for (int64_t r = 0; r < n; ++r) q_rows[r] = out_rows[r] = b + r;
    return n;
  }
  // Appends the key ranges (packed indices) q head h's tile t attends to; the kernel clips them
  // to key_limit (the keys the tile's last row may see) and to kv_len, sorts and coalesces them.
  void key_ranges(const Problem& p, int64_t h, int64_t t, int64_t key_limit,
                  std::vector<KeyRange>& out) const {
    out.push_back({0, key_limit});
  }
  // Appends single key columns (kGather): the kernel drops those beyond key_limit or inside a
  // range, and gathers the rest 64 at a time from the packed K/V.
  void key_columns(const Problem&, int64_t, int64_t, int64_t, std::vector<int64_t>&) const {}
  // (kGather) Kv head kvh's keys token-major (dim f32 a key, every key of the packed cache), or
  // null: gathered keys' K is then read from these rows, not from the packed tiles' columns.
  const float* gather_key_rows(const Problem&, int64_t /*kvh*/) const { return nullptr; }
  // (kPackedColumns) Appends the single key columns (packed indices) every tile of q head h
  // attends to. The loop copies them once per call into tiles of their own (sorted, duplicates
  // dropped) and runs each item's causally visible ones after its ranges; range tiles leave
  // those keys out, so every (row, key) entry is computed once. Cheaper than key_columns when
  // the columns are the same for every tile: nothing is gathered per tile.
  void head_columns(const Problem&, int64_t /*h*/, std::vector<int64_t>&) const {}
  // (kOrder) The key tiles of the item `rows` (its h, t, rows and positions; no keys yet), in
  // the order they would run: ascending, range by range. The policy may permute them (not add
  // or drop any); gathered columns (kGather) still run after them.
  void visit_order(const Problem&, const TileView& /*rows*/, std::vector<TileVisit>&) const {}
  // (kSeedMax) The running max (log2 units) of rows [0, rows.n) before the first tile, -inf on
  // entry: a policy may raise it to a max it knows from keys another item computes. The item's
  // output is the same softmax (O and l scale with m); only the skip rule sees it sooner.
  void seed_max(const Problem&, const TileView& /*rows*/, float* /*m*/) const {}
  // (kCarry) Rows [0, rows.n)'s running max m (log2 units), sum l and unnormalised O (rows of
  // dp floats, padding [dim, dp) zero) before the first tile, on entry -inf, 0 and 0; and
  // after the last tile, to keep for the next call.
  void load_state(const Problem&, const TileView& /*rows*/, float* /*o*/, float* /*m*/,
                  float* /*l*/, int64_t /*dp*/) const {}
  void store_state(const Problem&, const TileView& /*rows*/, const float* /*o*/, const float* /*m*/,
                   const float* /*l*/, int64_t /*dp*/) const {}
  // Scheduling weight of (h, t): the keys it may see. Items run longest first.
  int64_t cost(const Problem& p, int64_t h, int64_t t, int64_t last_q_row) const {
    return p.causal ? p.row_position(last_q_row) + 1 : p.kv_len;
  }
  // After a tile's scores are known (kMaySkip): true drops it (no exp, no P.V). The defaults
  // take any Local, so a derived policy may bring its own.
  template <class L>
  bool skip(L&, const TileView&) const {
    return false;
  }
  // After a tile's P.V (kObserve): P, m, l and the tile's per-row LSE.
  template <class L>
  void observe(L&, const TileView&) const {}
  // After an item's last tile (kFinish): its rows (h, t, n, q_rows, out_rows; no key tile)
  // and each row's final natural-log LSE (-inf for a row that saw no key), the normaliser that
  // every P the item observed is now known against (column sums in the same pass).
  template <class L>
  void finish(L&, const TileView&, const float* /*row_lse*/) const {}
  // (kKeepP) Where the next tile's scores and P go: npad x kTileKeys floats, 64-byte aligned,
  // that stay the policy's (an observer that keeps P then copies nothing). Called once per
  // tile, right before its scores; the loop's own buffer is used otherwise.
  template <class L>
  float* p_buffer(L&, int64_t /*npad*/) const {
    return nullptr;
  }
  // Once after the run (kReduce): every thread's Local, in thread order.
  template <class L>
  void reduce(std::vector<L>&) {}
};

// What the loop requires of a policy; RunFlash static_asserts it, so a policy with a missing
// or misspelt hook fails to compile here rather than deep inside the loop.
template <class P>
concept FlashPolicy = requires(const P& pol, P& mpol, const Problem& p, int64_t* rows,
                               std::vector<KeyRange>& ranges, std::vector<int64_t>& cols,
                               typename P::Local& local, const TileView& tile,
                               std::vector<typename P::Local>& locals,
                               std::vector<TileVisit>& visits, float* m) {
  requires std::is_default_constructible_v<typename P::Local>;
  { P::KeySource::kGather } -> std::convertible_to<bool>;
  { P::KeySource::kPackedColumns } -> std::convertible_to<bool>;
  { P::KeySource::kPackFragments } -> std::convertible_to<bool>;
  { P::KeySource::kOrder } -> std::convertible_to<bool>;
  { P::Observers::kMaySkip } -> std::convertible_to<bool>;
  { P::Observers::kObserve } -> std::convertible_to<bool>;
  { P::Observers::kFinish } -> std::convertible_to<bool>;
  { P::Observers::kKeepP } -> std::convertible_to<bool>;
  { P::Observers::kReduce } -> std::convertible_to<bool>;
  { P::Observers::kOutput } -> std::convertible_to<bool>;
  { P::TileState::kSeedMax } -> std::convertible_to<bool>;
  { P::TileState::kCarry } -> std::convertible_to<bool>;
  { pol.tile_rows } -> std::convertible_to<int64_t>;
  { pol.num_tiles(p) } -> std::same_as<int64_t>;
  { pol.rows(p, int64_t{}, rows, rows) } -> std::same_as<int64_t>;
  {pol.key_ranges(p, int64_t{}, int64_t{}, int64_t{}, ranges)};
  {pol.key_columns(p, int64_t{}, int64_t{}, int64_t{}, cols)};
  {pol.head_columns(p, int64_t{}, cols)};
  { pol.cost(p, int64_t{}, int64_t{}, int64_t{}) } -> std::same_as<int64_t>;
  { pol.skip(local, tile) } -> std::same_as<bool>;
  {pol.observe(local, tile)};
  {pol.finish(local, tile, m)};
  { pol.p_buffer(local, int64_t{}) } -> std::same_as<float*>;
  {pol.visit_order(p, tile, visits)};
  {pol.seed_max(p, tile, m)};
  {pol.load_state(p, tile, m, m, m, int64_t{})};
  {pol.store_state(p, tile, m, m, m, int64_t{})};
  {mpol.reduce(locals)};
};

// A policy plus a BlockLseObserver (per-(row, packed key tile) log-sum-exp), for the public
// observed forms. Output rows of a tile are contiguous in every policy this wraps. Tiles are
// reported kBatch at a time (observe_tiles), and what is left at the end of each work item: one
// virtual call and one dispatch on the observer's side per batch, not per tile.
template <class Base>
struct LseObserved : Base {
  static_assert(!Base::Observers::kFinish, "LseObserved reports an item's last batch in finish()");
  struct Observers : Base::Observers {
    static constexpr bool kObserve = true;
    static constexpr bool kFinish = true;
  };
  static constexpr int kBatch = 16;
  struct Local : Base::Local {
    int tiles = 0;
    int64_t key_tile[kBatch];
    alignas(64) float lse[kBatch * kMaxTileRows];
  };
  BlockLseObserver* observer = nullptr;
  // Queues one tile's per-row LSE (n rows of v); gathered tiles (key_tile < 0) are not reported.
  template <class L>
  void report(L& local, const TileView& v, const float* lse) const {
    if (v.key_tile < 0) return;
    local.key_tile[local.tiles] = v.key_tile;
    std::copy(lse, lse + v.n, local.lse + local.tiles * kMaxTileRows);
    if (++local.tiles == kBatch) flush(local, v);
  }
  template <class L>
  void flush(L& local, const TileView& v) const {
    if (local.tiles == 0) return;
    observer->observe_tiles(v.h, v.out_rows[0], v.n, local.key_tile, local.tiles, local.lse,
                            kMaxTileRows);
    local.tiles = 0;
  }
  template <class L>
  void observe(L& local, const TileView& v) const {
    report(local, v, v.lse);
  }
  template <class L>
  void finish(L& local, const TileView& v, const float*) const {
    flush(local, v);
  }
};
using ObservedDensePolicy = LseObserved<DensePolicy>;

// BLASST's skip rule ("BLASST: Dynamic Blocked Attention Sparsity via Softmax Thresholding",
// section 3, Algorithm 1): a tile is skipped when, for every row, its max scaled score lies
// more than ln(1/lambda) below the row's running max before the tile:
//     max_j x[r][j] - m[r] < log2(lambda)        (x, m in log2 units)
// A row with no key in the tile (tile max -inf) never keeps it alive. The prefill and decode
// loops both call this; log2_lambda = -inf (lambda 0) never skips.
inline bool blasst_skips(const float* tile_max, const float* m, int64_t n, float log2_lambda) {
  if (log2_lambda == kNegInf) return false;
  for (int64_t r = 0; r < n; ++r)
    if (tile_max[r] - m[r] >= log2_lambda) return false;
  return true;
}

// BLASST's local-first visiting order (BlasstOrder::local_first in spattn/blasst.hpp) of one
// work item's key tiles, given in ascending order, for rows whose newest position is `pos`:
// the tile nearest pos (holding the diagonal), then the tile holding position 0 (the sink),
// then the rest from nearest to farthest (equals: the earlier first). The skip rule is
// unchanged (blasst_skips); only what the running max has seen before each tile changes. The
// prefill loop, the margin recorder and both decode paths all order their tiles here.
//
// Distance of a tile from pos: 0 when its positions span pos, else the gap to the nearer end.
inline int64_t blasst_tile_distance(const TileVisit& v, int64_t pos) {
  return v.last_pos < pos ? pos - v.last_pos : v.first_pos > pos ? v.first_pos - pos : 0;
}
// The two tiles local-first visits first (-1 where there is none): the nearest to pos (the
// first of equals) and the one holding position 0.
struct BlasstAnchors {
  int64_t diagonal = -1, sink = -1;
};
inline BlasstAnchors blasst_anchors(const std::vector<TileVisit>& visits, int64_t pos) {
  BlasstAnchors a;
  int64_t nearest = std::numeric_limits<int64_t>::max();
  for (const TileVisit& v : visits) {
    const int64_t dist = blasst_tile_distance(v, pos);
    if (dist < nearest) nearest = dist, a.diagonal = v.tile;
    if (v.first_pos == 0) a.sink = v.tile;
  }
  return a;
}
// Position of q row `row` that the order measures nearness from: the causal position, and
// for full attention (where positions mask nothing and rows sit at 0) bottom-right as well,
// so the last query is next to the last key as in the causal convention.
inline int64_t blasst_row_position(const Problem& p, int64_t row) {
  return p.causal ? p.row_position(row) : row + std::max<int64_t>(p.kv_len - p.q_len, 0);
}
inline void blasst_local_first(std::vector<TileVisit>& visits, int64_t pos) {
  const BlasstAnchors a = blasst_anchors(visits, pos);
  const auto key = [&](const TileVisit& v) {
    const int rank = v.tile == a.diagonal ? 0 : v.tile == a.sink ? 1 : 2;
    return std::tuple(rank, blasst_tile_distance(v, pos), v.tile, v.begin);
  };
  // The key is unique per visit (a tile visited for two ranges differs in begin), so the
  // order is total and std::sort is deterministic.
  std::sort(visits.begin(), visits.end(),
            [&](const TileVisit& a, const TileVisit& b) { return key(a) < key(b); });
}

// The decode plan both devices run (decode-inl.h, src/cuda/decode.cu), so that BLASST's decode
// skips the same tiles on both: the key axis in as few splits as give at most 32 tiles (2048
// keys) each, evenly sized, each split with its own running max; and the rows (q head, query)
// of a kv head's group in chunks of whole q heads of at most max_rows rows, evenly sized.
struct DecodeSplits {
  int64_t splits = 0, split_tiles = 0;
};
inline DecodeSplits decode_splits(int64_t tiles) {
  constexpr int64_t kSplitTiles = 32;
  DecodeSplits d;
  d.splits = (tiles + kSplitTiles - 1) / kSplitTiles;
  d.split_tiles = d.splits > 0 ? (tiles + d.splits - 1) / d.splits : 0;
  d.splits = d.split_tiles > 0 ? (tiles + d.split_tiles - 1) / d.split_tiles : 0;
  return d;
}
struct DecodeChunks {
  int64_t chunks = 0, chunk_heads = 0;
};
inline DecodeChunks decode_chunks(int64_t group, int64_t q_len, int64_t max_rows) {
  const int64_t max_heads = max_rows / q_len;
  DecodeChunks c;
  c.chunks = (group + max_heads - 1) / max_heads;
  c.chunk_heads = (group + c.chunks - 1) / c.chunks;
  return c;
}

// lambda in [0, 1] as the rule's log2 threshold (-inf for 0); throws Error naming `who` else.
float blasst_log2_threshold(double lambda, const char* who);
// Throws Error naming `who` unless `order` is one of BlasstOrder's values.
void check_blasst_order(BlasstOrder order, const char* who);

// A row's natural-log LSE from its running max m (log2 units) and sum l; -inf for no key.
// Finalize, the finish hook and attention_state_finish all take it from here, so they agree
// bit for bit.
inline float RowLse(float m, float l) { return l > 0 ? (m + std::log2(l)) * kLn2 : kNegInf; }

// Sorted, clipped to [0, limit), adjacent/overlapping ranges merged.
inline void NormalizeRanges(std::vector<KeyRange>& r, int64_t limit) {
  for (auto& x : r) {
    x.begin = std::max<int64_t>(x.begin, 0);
    x.end = std::min(x.end, limit);
  }
  r.erase(std::remove_if(r.begin(), r.end(), [](const KeyRange& x) { return x.end <= x.begin; }),
          r.end());
  std::sort(r.begin(), r.end(),
            [](const KeyRange& a, const KeyRange& b) { return a.begin < b.begin; });
  size_t w = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (w > 0 && r[i].begin <= r[w - 1].end)
      r[w - 1].end = std::max(r[w - 1].end, r[i].end);
    else
      r[w++] = r[i];
  }
  r.resize(w);
}

// Drops columns beyond limit or inside a range; sorts and dedups the rest.
inline void NormalizeColumns(std::vector<int64_t>& cols, const std::vector<KeyRange>& ranges,
                             int64_t limit) {
  std::sort(cols.begin(), cols.end());
  cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
  size_t w = 0, ri = 0;
  for (int64_t c : cols) {
    if (c < 0 || c >= limit) continue;
    while (ri < ranges.size() && ranges[ri].end <= c) ++ri;
    if (ri < ranges.size() && ranges[ri].begin <= c) continue;
    cols[w++] = c;
  }
  cols.resize(w);
}

// Sums the per-thread Stats of one call into *stats (if given), with the whole problem's
// entries and the FLOPs of the entries computed.
void add_kernel_stats(const Problem& p, const std::vector<Stats>& parts, Stats* stats);

// out[h, row, :] = src[0..dim) * scale, in out's dtype and strides.
void store_row(const TensorView& out, int64_t h, int64_t row, const float* src, int64_t dim,
               float scale);

// Whether the bf16 dot-product path can run here: the CPU has AVX512_BF16 and no test has
// hidden it. Which path a call takes is its own choice (AttnOptions::bf16_dot, PackedKV's
// format); nothing in the library changes this.
bool bf16_dot_supported();
bool cpu_has_bf16_dot();
// Test hook, like hwy::SetSupportedTargetsForTest: false makes bf16_dot_supported() false, as
// on a CPU without AVX512_BF16 (the widen path for every call). Process-wide, so for
// single-threaded tests only; the library and the tools never call it.
void set_bf16_dot_supported_for_test(bool supported);

// Which operand path bf16 inputs take, chosen by measurement rather than by CPU flag alone.
struct Bf16PathChoice {
  bool dot = false;     // the bf16 dot-product path was the faster (pass it as bf16_dot)
  double dot_ms = 0;    // median time of the probe on each path; both 0 when nothing was
  double widen_ms = 0;  // timed (the CPU lacks AVX512_BF16, so only widening can run)
};
// Times attention_dense on a causal bf16 problem of 2 heads x seq x dim with the dot path and
// the widened path (AttnOptions::bf16_dot true and false), one warm-up each and then `reps`
// runs round-robin (dot, widen, dot, ...), and returns the faster by median. It sets nothing:
// the caller passes the choice on in its own options. About 2 (reps + 1) dense calls.
Bf16PathChoice choose_bf16_path(int threads, int64_t dim = 128, int64_t seq = 2048, int reps = 5);

}  // namespace spattn::kernels
