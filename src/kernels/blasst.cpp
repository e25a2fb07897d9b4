// BLASST prefill (the BLASST paper, Algorithm 1): the dense loop with a skip policy. After a
// tile's scores are known, the tile is dropped (no exp, no row sums, no P.V) when every row's
// tile max is more than ln(1/lambda) below its running max. The rule is per 64x64 tile, like
// the paper's per-block decision after a warp vote; the running max before the tile is the
// reference.
// The tiles run in the order the policy's order hook gives (BlasstOrder): in order, or the
// diagonal's tile, the sink's, then the rest nearest first.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/blasst.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/blasst_policy.hpp"
#include "kernels/flash-inl.h"
#include "spattn/blasst.hpp"
#include "spattn/error.hpp"

#ifndef SPATTN_KERNELS_BLASST_POLICY_
#define SPATTN_KERNELS_BLASST_POLICY_
namespace spattn::kernels {

// Never skips; records each tile's margin max_r(tile_max - m) (natural log) and its entries,
// visiting the tiles in the order being measured (a margin is relative to the tiles before).
struct MarginPolicy : BlasstOrdered<DensePolicy> {
  struct Observers : BlasstOrdered<DensePolicy>::Observers {
    static constexpr bool kMaySkip = true;
  };
  std::vector<std::vector<std::pair<float, int64_t>>>* per_item = nullptr;  // [h * q_tiles + t]
  int64_t q_tiles = 0;

  bool skip(Local&, const TileView& v) const {
    float margin = kNegInf;
    for (int64_t r = 0; r < v.n; ++r) {
      const float d = v.tile_max[r] - v.m[r];
      if (d == d) margin = std::max(margin, d);  // NaN: a row that saw nothing yet or here
    }
    (*per_item)[size_t(v.h * q_tiles + v.t)].push_back({margin * kLn2, v.entries});
    return false;
  }
};

// BLASST over one piece of each row's keys (attention_blasst_piece: the context-parallel ring's
// shard in hand). The running max enters from `carry` (seed_max) and leaves in it (finish);
// the tile holding the item's diagonal is never skipped, as one process visits it first,
// against nothing (with a seeded max it could fall below it).
struct PiecePolicy : BlasstPolicy {
  struct Observers : BlasstPolicy::Observers {
    static constexpr bool kFinish = true;
  };
  struct TileState : BlasstPolicy::TileState {
    static constexpr bool kSeedMax = true;
  };
  float* carry = nullptr;  // [Hq][q_len], log2 units
  int64_t q_len = 0;

  void seed_max(const Problem&, const TileView& v, float* m) const {
    for (int64_t r = 0; r < v.n; ++r) m[r] = carry[v.h * q_len + v.out_rows[r]];
  }
  template <class L>
  bool skip(L& local, const TileView& v) const {
    const int64_t pos = v.row_pos[v.n - 1];
    if (v.key_position(0) <= pos && pos <= v.key_position(v.n_keys - 1)) return false;
    return BlasstPolicy::skip(local, v);
  }
  template <class L>
  void finish(L&, const TileView& v, const float*) const {
    for (int64_t r = 0; r < v.n; ++r) carry[v.h * q_len + v.out_rows[r]] = v.m[r];
  }
};

// The seed of attention_blasst_piece (blasst_seed_max): each row's max scaled score over the
// item's diagonal tile (diagonal_only; the piece then holds the rows' own keys, on the tile
// grid) or over every key of the piece, raised into `carry`. Scores only: every tile is
// "skipped" once its max is read, so nothing else is computed and the maxima are the bits
// the loop itself computes.
struct SeedPolicy : DensePolicy {
  struct Observers : DensePolicy::Observers {
    static constexpr bool kMaySkip = true;
    static constexpr bool kOutput = false;
  };
  float* carry = nullptr;  // [Hq][q_len], log2 units
  int64_t q_len = 0;
  bool diagonal_only = false;

  void key_ranges(const Problem&, int64_t, int64_t, int64_t key_limit,
                  std::vector<KeyRange>& out) const {
    if (key_limit <= 0) return;
    out.push_back({diagonal_only ? (key_limit - 1) / kTileKeys * kTileKeys : 0, key_limit});
  }
  template <class L>
  bool skip(L&, const TileView& v) const {
    for (int64_t r = 0; r < v.n; ++r) {
      float& c = carry[v.h * q_len + v.out_rows[r]];
      c = std::max(c, v.tile_max[r]);
    }
    return true;
  }
};

}  // namespace spattn::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
void BlasstEntry(const Problem& p, const BlasstSetup& s, Stats* stats) {
  BlasstPolicy pol;
  apply_blasst(pol, s);
  RunFlash(p, pol, stats);
}
void PieceEntry(const Problem& p, const BlasstSetup& s, float* carry, Stats* stats) {
  PiecePolicy pol;
  apply_blasst(pol, s);
  pol.carry = carry;
  pol.q_len = p.q_len;
  RunFlash(p, pol, stats);
}
void SeedEntry(const Problem& p, bool diagonal_only, float* carry) {
  SeedPolicy pol;
  pol.carry = carry;
  pol.q_len = p.q_len;
  pol.diagonal_only = diagonal_only;
  Stats st;
  RunFlash(p, pol, &st);
}
void MarginEntry(const Problem& p, BlasstOrder order,
                 std::vector<std::vector<std::pair<float, int64_t>>>* items, Stats* stats) {
  MarginPolicy pol;
  pol.order = order;
  pol.per_item = items;
  pol.q_tiles = pol.num_tiles(p);
  RunFlash(p, pol, stats);
}
}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <cmath>

#include "spattn/packed_kv.hpp"

namespace spattn {
namespace kernels {
HWY_EXPORT(BlasstEntry);
HWY_EXPORT(MarginEntry);
HWY_EXPORT(PieceEntry);
HWY_EXPORT(SeedEntry);
}  // namespace kernels

const char* blasst_order_name(BlasstOrder order) {
  switch (order) {
    case BlasstOrder::in_order: return "in_order";
    case BlasstOrder::local_first: return "local_first";
  }
  return "?";
}

BlasstOrder parse_blasst_order(const std::string& name) {
  for (BlasstOrder o : {BlasstOrder::in_order, BlasstOrder::local_first})
    if (name == blasst_order_name(o)) return o;
  detail::fail("unknown BLASST order '", name, "' (expected in_order or local_first)");
}

void attention_blasst(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, double lambda, const AttnOptions& opt, float* lse,
                      Stats* stats, SkipStats* skip, BlasstOrder order) {
  const kernels::Problem p = kernels::make_problem(q, k, v, out, opt, lse);
  const kernels::DensePolicy tiles;
  const kernels::BlasstSetup s = kernels::blasst_setup(
      BlasstSkip{lambda, order, skip}, q.heads, tiles.num_tiles(p), tiles.tile_rows, "blasst");
  HWY_DYNAMIC_DISPATCH(kernels::BlasstEntry)(p, s, stats);
  kernels::blasst_finish(s);
}

void attention_blasst_piece(const TensorView& q, const PackedKV& kv, const TensorView& out,
                            double lambda, float* running_max, const AttnOptions& opt, float* lse,
                            Stats* stats) {
  SPATTN_CHECK(running_max, "attention_blasst_piece: running_max is null");
  const kernels::Problem p = kernels::make_problem(q, kv.data(), out, opt, lse);
  // Local-first, the order the seed assumes; nothing to record (Stats counts the tiles).
  const kernels::BlasstSetup s =
      kernels::blasst_setup(BlasstSkip{lambda, BlasstOrder::local_first, nullptr}, q.heads,
                            kernels::DensePolicy{}.num_tiles(p), 64, "blasst");
  HWY_DYNAMIC_DISPATCH(kernels::PieceEntry)(p, s, running_max, stats);
}

void blasst_seed_max(const TensorView& q, const PackedKV& kv, bool diagonal_only,
                     float* running_max, const AttnOptions& opt) {
  SPATTN_CHECK(running_max, "blasst_seed_max: running_max is null");
  if (kv.size() == 0) return;
  Tensor out(DType::f32, q.heads, q.seq, q.dim);  // validated, never written
  const kernels::Problem p = kernels::make_problem(q, kv.data(), out, opt, nullptr);
  HWY_DYNAMIC_DISPATCH(kernels::SeedEntry)(p, diagonal_only, running_max);
}

namespace kernels {
BlasstSetup blasst_setup(const BlasstSkip& skip, int64_t heads, int64_t q_tiles, int64_t tile_rows,
                         const char* who) {
  BlasstSetup s;
  s.threshold = blasst_log2_threshold(skip.lambda, who);
  check_blasst_order(skip.order, who);
  // Nothing is skipped at lambda 0, so the order changes nothing but rounding: run in order,
  // the form's own sums bit for bit.
  s.order = skip.lambda == 0 ? BlasstOrder::in_order : skip.order;
  s.record = skip.record;
  if (s.record) s.record->reset(heads, q_tiles, tile_rows);
  return s;
}

void blasst_finish(const BlasstSetup& s) {
  // Tiles were recorded as visited; the lists are kept ascending for every order.
  if (s.record && s.order != BlasstOrder::in_order)
    for (auto& tiles : s.record->skipped_tiles) std::sort(tiles.begin(), tiles.end());
}
}  // namespace kernels

TileMargins blasst_tile_margins(const TensorView& q, const TensorView& k, const TensorView& v,
                                const AttnOptions& opt, BlasstOrder order) {
  kernels::check_blasst_order(order, "blasst");
  Tensor out(DType::f32, q.heads, q.seq, q.dim);
  const kernels::Problem p = kernels::make_problem(q, k, v, out, opt, nullptr);
  const int64_t q_tiles = kernels::DensePolicy{}.num_tiles(p);
  std::vector<std::vector<std::pair<float, int64_t>>> items(size_t(q.heads * q_tiles));
  Stats st;
  HWY_DYNAMIC_DISPATCH(kernels::MarginEntry)(p, order, &items, &st);
  TileMargins tm;
  tm.causal_entries = st.causal_entries;
  for (const auto& item : items)
    for (const auto& [margin, entries] : item) {
      tm.margin.push_back(margin);
      tm.entries.push_back(entries);
    }
  return tm;
}

double TileMargins::sparsity_at(double lambda) const {
  kernels::blasst_log2_threshold(lambda, "blasst");  // validates
  if (lambda == 0 || causal_entries == 0) return 0.0;
  const double ln_lambda = std::log(lambda);
  int64_t skipped = 0;
  for (size_t i = 0; i < margin.size(); ++i)
    if (double(margin[i]) < ln_lambda) skipped += entries[i];
  return double(skipped) / double(causal_entries);
}

void SkipStats::reset(int64_t heads_, int64_t q_tiles_, int64_t tile_rows_) {
  const bool record = record_tiles;
  *this = SkipStats{};
  record_tiles = record;
  heads = heads_, q_tiles = q_tiles_, tile_rows = tile_rows_;
  const size_t n = size_t(heads * q_tiles);
  visited.assign(n, 0);
  skipped.assign(n, 0);
  if (record) skipped_tiles.assign(n, {});
}

double SkipStats::skipped_fraction() const {
  int64_t v = 0, s = 0;
  for (size_t i = 0; i < visited.size(); ++i) v += visited[i], s += skipped[i];
  return v ? double(s) / double(v) : 0.0;
}

double SkipStats::head_skipped_fraction(int64_t h) const {
  SPATTN_CHECK(h >= 0 && h < heads, "head ", h, " out of range [0, ", heads, ")");
  int64_t v = 0, s = 0;
  for (int64_t t = 0; t < q_tiles; ++t)
    v += visited[size_t(h * q_tiles + t)], s += skipped[size_t(h * q_tiles + t)];
  return v ? double(s) / double(v) : 0.0;
}

double SkipStats::tile_skipped_fraction(int64_t h, int64_t t) const {
  SPATTN_CHECK(h >= 0 && h < heads && t >= 0 && t < q_tiles, "tile (", h, ", ", t,
               ") out of range");
  const size_t i = size_t(h * q_tiles + t);
  return visited[i] ? double(skipped[i]) / double(visited[i]) : 0.0;
}

namespace {
// Causal keys of each row minus the 64-key tiles its query tile skipped.
class BlasstCoverage final : public Coverage {
 public:
  BlasstCoverage(SkipStats s, int64_t q_len, int64_t kv_len, bool causal)
      : s_(std::move(s)), q_len_(q_len), kv_len_(kv_len), causal_(causal) {
    for (auto& tiles : s_.skipped_tiles) std::sort(tiles.begin(), tiles.end());
  }
  void row_ranges(int64_t h, int64_t row, std::vector<KeyRange>& out) const override {
    const int64_t limit = causal_limit(row, q_len_, kv_len_, causal_);
    const size_t from = out.size();
    if (limit > 0) out.push_back({0, limit});
    subtract_skipped_tiles(s_.skipped_tiles[size_t(h * s_.q_tiles + row / s_.tile_rows)], out,
                           from);
  }

 private:
  SkipStats s_;
  int64_t q_len_, kv_len_;
  bool causal_;
};
}  // namespace

void subtract_skipped_tiles(const std::vector<int32_t>& tiles, std::vector<KeyRange>& ranges,
                            size_t from) {
  if (tiles.empty() || from >= ranges.size()) return;
  const std::vector<KeyRange> in(ranges.begin() + ptrdiff_t(from), ranges.end());
  ranges.resize(from);
  size_t t = 0;
  for (KeyRange r : in) {
    // Tiles wholly before r are done with; each tile inside r splits it.
    while (t < tiles.size() && (int64_t(tiles[t]) + 1) * kernels::kTileKeys <= r.begin) ++t;
    for (; t < tiles.size(); ++t) {
      const int64_t b = int64_t(tiles[t]) * kernels::kTileKeys, e = b + kernels::kTileKeys;
      if (b >= r.end) break;
      if (b > r.begin) ranges.push_back({r.begin, b});
      r.begin = std::max(r.begin, e);
      if (r.begin >= r.end) break;
    }
    if (r.begin < r.end) ranges.push_back(r);
  }
}

std::unique_ptr<Coverage> blasst_coverage(SkipStats skip, int64_t q_len, int64_t kv_len,
                                          bool causal) {
  SPATTN_CHECK(skip.record_tiles && skip.skipped_tiles.size() == size_t(skip.heads * skip.q_tiles),
               "blasst_coverage needs SkipStats filled with record_tiles = true");
  return std::make_unique<BlasstCoverage>(std::move(skip), q_len, kv_len, causal);
}

}  // namespace spattn
#endif
