// Decode attention: q_len 1..16 new queries at the end of a long KV cache (bottom-right causal).
//
// The q heads of one GQA group are processed together against their shared kv head, so each
// K/V byte is read once per group. The key sequence is split across threads (flash-decoding)
// and the partial (O, LSE) results are merged exactly. K and V are read in place (no packing:
// at q_len <= 16 reading the cache is the whole cost).
//
// With lambda > 0 this is BLASST's decode kernel: scores of `batch` 64-key blocks are computed
// back to back, the running max is updated with their maxima, and only the value blocks whose
// max is not ln(lambda) below it are loaded and multiplied. Skipped V blocks are never read.
#pragma once
#include "spattn/attention.hpp"
#include <vector>

#include "spattn/blasst.hpp"
#include "spattn/coverage.hpp"

namespace spattn {

// The most query rows attention_decode takes; methods send longer queries to prefill kernels.
inline constexpr int64_t kMaxDecodeQueries = 16;

struct DecodeOptions {
  double lambda = 0.0;  // BLASST threshold in [0, 1]; 0: dense decode
  int64_t batch = 4;    // key blocks scored back to back before their V blocks are loaded
  // The order key blocks are visited in (BlasstOrder, spattn/blasst.hpp); both decode paths
  // take either. Key splits run in parallel, each with its own running max; under local_first
  // each split starts its running max at the rows' maxima over the newest key block and the
  // sink block (scored once per row block beforehand) and then visits its own blocks nearest
  // first. Moot at lambda 0 (dense decode, bitwise).
  BlasstOrder order = BlasstOrder::in_order;
};

// q [Hq, Lq, d] with 1 <= Lq <= 16, k/v [Hkv, Lkv, d], out [Hq, Lq, d]. Stats count score
// entries of V blocks that were used (skipped blocks: tiles_skipped).
//
// skip, if given, is filled as attention_blasst fills it, so blasst_coverage reads it the same
// way: heads = Hq, one query tile (q_tiles 1, tile_rows 64: all Lq <= 16 rows are tile 0),
// visited/skipped per q head, and with record_tiles the skipped 64-key blocks (key / 64,
// ascending). A block is skipped or kept for all rows of a (kv head, row chunk) unit at once:
// the whole GQA group when group x Lq <= 128, else chunks of whole q heads. So the q heads of a
// unit get the same counts and lists, and blasst_coverage(skip) is exactly what was computed.
//
// Stats count one tile per unit, SkipStats one per q head: each q head visits ceil(Lkv / 64)
// blocks, and with one unit per kv head, sum over q heads of skipped = group x tiles_skipped.
void attention_decode(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const AttnOptions& opt = {},
                      const DecodeOptions& dopt = {}, float* lse = nullptr, Stats* stats = nullptr,
                      SkipStats* skip = nullptr);

class PackedKV;
// Decode over a PackedKV (the KV cache a runner appends to; nothing is repacked): q
// [Hq, Lq <= 16, d] at the bottom right of the cache (or at opt.q_start). Key chunks of 2048 are
// work items merged exactly by LSE. With lambda > 0, BLASST's prefill rule skips 64-key tiles
// (against the running max before each tile; dopt.batch does not apply, dopt.order does: the
// newest and the sink tile are found by the keys' positions). skip is filled as above: one
// query tile per q head, the skipped tiles' packed indices ascending.
void attention_decode(const TensorView& q, const PackedKV& kv, const TensorView& out,
                      const AttnOptions& opt = {}, const DecodeOptions& dopt = {},
                      float* lse = nullptr, Stats* stats = nullptr, SkipStats* skip = nullptr);

// Decode over a PackedKV restricted to chosen keys: q head h attends to the packed keys of
// ranges[h] only (each [begin, end) inside the cache, keys in natural order), causally at
// opt.q_start or the bottom right. One work item per q head; the keys outside the ranges are
// never read. Exactly attention over the gathered keys, up to float rounding (the sum order
// differs). A head with no range gets output 0 and LSE -inf.
void attention_decode_ranges(const TensorView& q, const PackedKV& kv, const TensorView& out,
                             const std::vector<std::vector<KeyRange>>& ranges,
                             const AttnOptions& opt = {}, float* lse = nullptr,
                             Stats* stats = nullptr);

}  // namespace spattn
