// Decode over a packed KV cache (the cache a model runner appends to chunk by chunk): the flash
// loop with the cache's key chunks as work items (flash-decoding), each chunk's partial (O, LSE)
// merged exactly in chunk order. Nothing is repacked per call. With lambda > 0 the BLASST rule
// skips 64-key tiles against the running max before each tile (the prefill form of the rule;
// the raw-tensor decode kernel in decode-inl.h compares with the max after a batch instead).
//
// Visiting order local_first: chunks run in parallel and each has its own running max, so a
// chunk would only see its own tiles before deciding. A first pass therefore computes, per q
// head, the rows' maxima over the two tiles local-first visits first (the diagonal's, i.e. the
// newest key's, and the sink's), and every chunk starts its running max there and then visits
// its own tiles nearest first. As if each chunk were visited after those two tiles: the same
// rule, with the two tiles' scores computed once more (per q head, not per chunk).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/decode_packed.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/blasst_policy.hpp"
#include "kernels/flash-inl.h"

#ifndef SPATTN_KERNELS_DECODE_PACKED_POLICY_
#define SPATTN_KERNELS_DECODE_PACKED_POLICY_
namespace spattn::kernels {

// Keys per work item; fixed (not derived from the thread count) so output is bitwise stable.
inline constexpr int64_t kSplitKeys = 2048;

// Tile t is key chunk t for all q_len rows; its partial result goes to output rows
// t * q_len + r of a scratch tensor.
template <class Base>
struct SplitKeys : Base {
  int64_t q_len = 1, splits = 1;
  int64_t num_tiles(const Problem&) const { return splits; }
  int64_t rows(const Problem&, int64_t t, int64_t* q_rows, int64_t* out_rows) const {
    for (int64_t r = 0; r < q_len; ++r) q_rows[r] = r, out_rows[r] = t * q_len + r;
    return q_len;
  }
  void key_ranges(const Problem&, int64_t, int64_t t, int64_t limit,
                  std::vector<KeyRange>& out) const {
    out.push_back({t * kSplitKeys, std::min((t + 1) * kSplitKeys, limit)});
  }
  int64_t cost(const Problem&, int64_t, int64_t, int64_t) const { return kSplitKeys; }
};

// SplitKeys starting each chunk's running max at seed[q head][row] (log2 units).
template <class Base>
struct SeededSplitKeys : SplitKeys<Base> {
  struct TileState : SplitKeys<Base>::TileState {
    static constexpr bool kSeedMax = true;
  };
  const float* seed = nullptr;
  void seed_max(const Problem&, const TileView& rows, float* m) const {
    std::copy_n(seed + rows.h * this->q_len, rows.n, m);
  }
};

// The local-first seed: one item per q head (all q_len rows) visiting only the diagonal's and
// the sink's tile (blasst_anchors), keeping the rows' tile maxima in seed[q head][row] (-inf on
// entry) and skipping both tiles, so no exp or P.V runs. Only its skip hook's view is used; the
// rows it finalizes (zeros) are written over by the chunk pass.
struct AnchorMaxPolicy : DensePolicy {
  struct Observers : DensePolicy::Observers {
    static constexpr bool kMaySkip = true;
  };
  int64_t q_len = 1;
  float* seed = nullptr;
  int64_t num_tiles(const Problem&) const { return 1; }
  int64_t rows(const Problem&, int64_t, int64_t* q_rows, int64_t* out_rows) const {
    for (int64_t r = 0; r < q_len; ++r) q_rows[r] = out_rows[r] = r;
    return q_len;
  }
  void key_ranges(const Problem& p, int64_t, int64_t, int64_t limit,
                  std::vector<KeyRange>& out) const {
    const PackedKVData& d = *p.packed;
    const int64_t pos = blasst_row_position(p, q_len - 1);
    std::vector<TileVisit> tiles;
    for (int64_t jt = 0; jt * kTileKeys < limit; ++jt) {
      const TileVisit v = d.visit(jt, jt * kTileKeys, limit);
      if (!p.causal || v.first_pos <= pos) tiles.push_back(v);
    }
    const BlasstAnchors a = blasst_anchors(tiles, pos);
    for (int64_t jt : {a.diagonal, a.sink})
      if (jt >= 0) out.push_back({jt * kTileKeys, std::min((jt + 1) * kTileKeys, limit)});
  }
  bool skip(Local&, const TileView& v) const {
    float* s = seed + v.h * q_len;
    for (int64_t r = 0; r < v.n; ++r) s[r] = std::max(s[r], v.tile_max[r]);
    return true;
  }
};

// Decode restricted to chosen keys (a page-selecting method such as Quest): one item per q head
// holding all q_len rows, attending to that head's key ranges (packed indices) only. Ranges are
// pages of 16..64 keys, rarely on the 64-key grid: kPackFragments computes a range 64 keys at a
// time from its first key and copies the short remainders together into gathered tiles, so the
// tiles computed are about the keys kept over 64, and unselected keys are never read.
struct KeyRangesPolicy : DensePolicy {
  struct KeySource : DensePolicy::KeySource {
    static constexpr bool kPackFragments = true;
  };
  int64_t q_len = 1;
  const std::vector<std::vector<KeyRange>>* ranges = nullptr;  // per q head, ascending
  int64_t num_tiles(const Problem&) const { return 1; }
  int64_t rows(const Problem&, int64_t, int64_t* q_rows, int64_t* out_rows) const {
    for (int64_t r = 0; r < q_len; ++r) q_rows[r] = out_rows[r] = r;
    return q_len;
  }
  void key_ranges(const Problem&, int64_t h, int64_t, int64_t, std::vector<KeyRange>& out) const {
    const auto& r = (*ranges)[size_t(h)];
    out.insert(out.end(), r.begin(), r.end());
  }
  int64_t cost(const Problem&, int64_t h, int64_t, int64_t) const {
    int64_t n = 0;
    for (const KeyRange& r : (*ranges)[size_t(h)]) n += r.end - r.begin;
    return n;
  }
};

}  // namespace spattn::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
void DecodePackedEntry(const Problem& p, int64_t splits, float log2_lambda, BlasstOrder order,
                       SkipStats* record, Stats* stats) {
  // Every form splits the same keys the same way; BLASST's forms add the rule and its record.
  const auto split = [&](auto& pol) {
    pol.tile_rows = pol.q_len = p.q_len;
    pol.splits = splits;
  };
  const auto blasst = [&](auto& pol) {
    split(pol);
    pol.threshold = log2_lambda;
    pol.record = record;
    pol.order = order;
  };
  if (log2_lambda == kNegInf && !record) {
    SplitKeys<DensePolicy> pol;
    split(pol);
    RunFlash(p, pol, stats);
  } else if (order == BlasstOrder::local_first) {
    std::vector<float> seed(size_t(p.q.heads * p.q_len), kNegInf);
    AnchorMaxPolicy anchors;
    anchors.tile_rows = anchors.q_len = p.q_len;
    anchors.seed = seed.data();
    Problem pa = p;
    pa.lse = nullptr;
    // One thread: two tiles per q head against a chunk's 32, and starting threads for them
    // (parallel_for starts its own each call) cost more than it saves at decode's sizes.
    pa.threads = 1;
    RunFlash(pa, anchors, nullptr);  // not counted: the chunks visit these tiles again
    SeededSplitKeys<BlasstPolicy> pol;
    blasst(pol);
    pol.seed = seed.data();
    RunFlash(p, pol, stats);
  } else {
    SplitKeys<BlasstPolicy> pol;
    blasst(pol);
    RunFlash(p, pol, stats);
  }
}
void DecodeRangesEntry(const Problem& p, const std::vector<std::vector<KeyRange>>* ranges,
                       Stats* stats) {
  KeyRangesPolicy pol;
  pol.tile_rows = pol.q_len = p.q_len;
  pol.ranges = ranges;
  RunFlash(p, pol, stats);
}
}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/merge.hpp"
#include "spattn/packed_kv.hpp"

namespace spattn {
namespace kernels {
HWY_EXPORT(DecodePackedEntry);
HWY_EXPORT(DecodeRangesEntry);
}  // namespace kernels

namespace {
// The chunked decode itself: q [Hq, Lq, d] with Lq up to 64 rows (rows_per_item's items), each
// key chunk of every q head a work item, merged by LSE.
void decode_chunks(const TensorView& q, const PackedKV& kv, const TensorView& out,
                   const AttnOptions& opt, const DecodeOptions& dopt, float* lse, Stats* stats,
                   SkipStats* skip) {
  const float log2_lambda = kernels::blasst_log2_threshold(dopt.lambda, "decode");
  kernels::check_blasst_order(dopt.order, "decode");
  // At lambda 0 nothing is skipped: in order, as dense decode.
  const BlasstOrder order = dopt.lambda == 0 ? BlasstOrder::in_order : dopt.order;
  kernels::Problem p = kernels::make_problem(q, kv.data(), out, opt, nullptr);
  const int64_t splits = (kv.size() + kernels::kSplitKeys - 1) / kernels::kSplitKeys;
  const int64_t hq = q.heads, lq = q.seq, d = q.dim;
  // One chunk of keys has nothing to merge: its rows go straight to out (and lse), the same bits
  // as through the partial tensor, without allocating that and copying it value by value (a
  // short cache's decode step spent about as long on those as on its keys).
  const bool direct = splits == 1 && out.dtype == DType::f32;
  Tensor part;
  std::vector<float> part_lse;
  if (direct) {
    p.lse = lse;
  } else {
    part = Tensor(DType::f32, hq, splits * lq, d);
    part_lse.resize(size_t(hq * splits * lq));
    p.out = part;
    p.lse = part_lse.data();
  }
  SkipStats per_split;
  per_split.record_tiles = skip && skip->record_tiles;
  if (skip) per_split.reset(hq, splits);
  HWY_DYNAMIC_DISPATCH(kernels::DecodePackedEntry)
  (p, splits, log2_lambda, order, skip ? &per_split : nullptr, stats);
  if (!direct) {  // exact merge of each row's chunks, in chunk order
    std::vector<float> o(static_cast<size_t>(d));
    const TensorView pv = part;
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < lq; ++i) {
        float l = part_lse[size_t(h * splits * lq + i)];
        std::copy_n(static_cast<const float*>(pv.ptr(h, i)), d, o.data());
        for (int64_t s = 1; s < splits; ++s)
          merge_row(o.data(), l, static_cast<const float*>(pv.ptr(h, s * lq + i)),
                    part_lse[size_t(h * splits * lq + s * lq + i)], d);
        for (int64_t c = 0; c < d; ++c) out.set(h, i, c, o[size_t(c)]);
        if (lse) lse[h * lq + i] = l;
      }
  }
  if (skip) {  // one query tile per q head, as attention_decode records it
    skip->reset(hq, 1);
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t s = 0; s < splits; ++s) {
        const size_t i = size_t(h * splits + s);
        skip->visited[size_t(h)] += per_split.visited[i];
        skip->skipped[size_t(h)] += per_split.skipped[i];
        if (skip->record_tiles)
          skip->skipped_tiles[size_t(h)].insert(skip->skipped_tiles[size_t(h)].end(),
                                                per_split.skipped_tiles[i].begin(),
                                                per_split.skipped_tiles[i].end());
      }
    // Recorded as visited: ascending for every order.
    if (skip->record_tiles && order != BlasstOrder::in_order)
      for (auto& tiles : skip->skipped_tiles) std::sort(tiles.begin(), tiles.end());
  }
}

// The q heads a grouped decode item takes (see attention_decode): the whole group when it fits
// a prefill query tile (64 rows), else the largest even share of it that does (DeepSeek's
// latent attention: 128 q heads over one cached head, two items a key chunk). Fixed, not
// derived from the thread count, so BLASST's skips (per item) are too; a short cache's one
// chunk still makes two items for two threads.
int64_t rows_per_item(int64_t group) {
  constexpr int64_t kItemRows = 64;
  static_assert(kItemRows <= kernels::kMaxTileRows);
  for (int64_t parts = (group + kItemRows - 1) / kItemRows;; ++parts)
    if (group % parts == 0) return group / parts;
}
}  // namespace

void attention_decode(const TensorView& q, const PackedKV& kv, const TensorView& out,
                      const AttnOptions& opt, const DecodeOptions& dopt, float* lse, Stats* stats,
                      SkipStats* skip) {
  SPATTN_CHECK(q.seq >= 1 && q.seq <= kMaxDecodeQueries, "decode: q_len must be in [1, ",
               kMaxDecodeQueries, "], got ", q.seq);
  // Decode of one query per q head that sees every key (the newest token's, as a model runner
  // decodes): the q heads of a kv head's group become the rows of one item (up to a query
  // tile's, rows_per_item), as raw decode does, so each key tile is read (and, stored as f16 /
  // bf16 / q8_0, widened) once per item instead of once per q head, and a micro-kernel strip
  // holds real rows. Dense, rows are independent and each entry is the same dot product in the
  // same order: the same bits. With BLASST's rule the item's heads are one query tile, as
  // prefill's rows are: a tile is skipped when every q head of the item is below the threshold
  // (BLASST, Section 3: the rule per query block), and its V is then read by none of them.
  const int64_t group = kv.kv_heads() > 0 ? q.heads / kv.kv_heads() : 0;
  const int64_t q_pos = opt.q_start >= 0 ? opt.q_start : kv.max_position();
  if (q.seq == 1 && group > 1 && q.heads % kv.kv_heads() == 0 && kv.size() > 0 &&
      (!opt.causal || q_pos >= kv.max_position()) && out.heads == q.heads && out.seq == 1) {
    const int64_t rows = rows_per_item(group);
    const auto grouped = [&](const TensorView& t) {
      TensorView g = t;
      g.heads = t.heads / rows;
      g.seq = rows;
      g.stride_seq = t.stride_head;
      g.stride_head = t.stride_head * rows;
      return g;
    };
    AttnOptions all = opt;
    all.causal = false;  // every key is visible to these queries
    all.q_start = -1;
    SkipStats per_item;
    per_item.record_tiles = skip && skip->record_tiles;
    decode_chunks(grouped(q), kv, grouped(out), all, dopt, lse, stats, skip ? &per_item : nullptr);
    if (skip) {  // per q head, as the ungrouped call records it: each its item's tiles
      skip->reset(q.heads, 1);
      for (int64_t h = 0; h < q.heads; ++h) {
        skip->visited[size_t(h)] = per_item.visited[size_t(h / rows)];
        skip->skipped[size_t(h)] = per_item.skipped[size_t(h / rows)];
        if (skip->record_tiles)
          skip->skipped_tiles[size_t(h)] = per_item.skipped_tiles[size_t(h / rows)];
      }
    }
    return;
  }
  decode_chunks(q, kv, out, opt, dopt, lse, stats, skip);
}

void attention_decode_ranges(const TensorView& q, const PackedKV& kv, const TensorView& out,
                             const std::vector<std::vector<KeyRange>>& ranges,
                             const AttnOptions& opt, float* lse, Stats* stats) {
  SPATTN_CHECK(q.seq >= 1 && q.seq <= kMaxDecodeQueries, "decode: q_len must be in [1, ",
               kMaxDecodeQueries, "], got ", q.seq);
  SPATTN_CHECK(int64_t(ranges.size()) == q.heads, "decode: key ranges for ", ranges.size(),
               " q heads, q has ", q.heads);
  SPATTN_CHECK(kv.data().identity, "decode: key ranges need keys in natural order");
  for (const auto& head : ranges)
    for (const KeyRange& r : head)
      SPATTN_CHECK(r.begin >= 0 && r.begin < r.end && r.end <= kv.size(), "decode: key range [",
                   r.begin, ", ", r.end, ") outside the cache's ", kv.size(), " keys");
  const kernels::Problem p = kernels::make_problem(q, kv.data(), out, opt, lse);
  HWY_DYNAMIC_DISPATCH(kernels::DecodeRangesEntry)(p, &ranges, stats);
}

}  // namespace spattn
#endif  // HWY_ONCE
