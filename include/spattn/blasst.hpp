// BLASST ("BLASST: Dynamic Blocked Attention Sparsity via Softmax Thresholding", section 3):
// skip attention tiles whose scores fall ln(lambda) below the running max.
//
// Rule (per 64-key tile of a 64-row query tile, after its scores are known): skip the tile's
// exponentials, row sums and P.V when, for every row r of the tile,
//     max_j s[r][j] - m[r] < ln(lambda)
// where s are scaled scores and m[r] the row's running max before the tile. A skipped tile's
// max is below the running max, so skipping never changes the running maxima: the skip
// decisions for every lambda can be read off one dense pass (blasst_tile_margins) that visits
// the tiles in the same order.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/coverage.hpp"

namespace spattn {

// The order in which a query tile visits its key tiles. The rule compares each tile with the
// running max of the tiles visited before it, so the order decides what can be skipped; the
// rule itself is the same for both.
//   in_order     from the first key tile to the diagonal, as FlashAttention's loop runs (and
//                as the paper's Algorithm 1 is written).
//   local_first  the tile holding the diagonal, then the sink tile (the one holding position
//                0), then the rest from nearest to farthest. Real heads score their nearest
//                keys and the sink highest, so after two tiles the running max is close to its
//                final value; in order it rises with almost every tile, and almost nothing
//                falls ln(1/lambda) below it (docs/methods/blasst.md has the measurements).
// At lambda = 0 nothing can be skipped and both orders run in order (bitwise dense).
enum class BlasstOrder : uint8_t { in_order, local_first };
// "in_order" / "local_first".
const char* blasst_order_name(BlasstOrder order);
// The inverse; throws Error naming the unknown name.
BlasstOrder parse_blasst_order(const std::string& name);

// Where tiles were skipped: per q head and per (q head, query tile).
struct SkipStats {
  int64_t heads = 0, q_tiles = 0;
  int64_t tile_rows = 64;        // query rows per tile
  std::vector<int64_t> visited;  // [heads * q_tiles]
  std::vector<int64_t> skipped;  // [heads * q_tiles]
  // Set record_tiles before the call to also get, per (head, q tile), the 64-key tiles skipped
  // (ascending, whatever the visiting order).
  bool record_tiles = false;
  std::vector<std::vector<int32_t>> skipped_tiles;
  // Empty counts for `heads` x `q_tiles` query tiles; keeps record_tiles.
  void reset(int64_t heads, int64_t q_tiles, int64_t tile_rows = 64);
  double skipped_fraction() const;
  double head_skipped_fraction(int64_t h) const;
  double tile_skipped_fraction(int64_t h, int64_t t) const;
};

// BLASST's rule inside another kernel form (MOMO's lambda option: the query-sparse and
// block-sparse passes over a PackedKV take one): the same rule (blasst_skips), threshold
// lambda in [0, 1], tiles visited in `order` (lambda 0 runs in order and skips nothing: the
// form's output bit for bit). `record`, if set, is reset for the form's query tiles (its
// tile_rows: 64 sampled rows for query-sparse, the mask's tile height for block-sparse) and
// filled as attention_blasst fills it.
struct BlasstSkip {
  double lambda = 0.0;
  BlasstOrder order = BlasstOrder::local_first;
  SkipStats* record = nullptr;
};

// ranges[from, end) (sorted, disjoint keys) minus the 64-key tiles `tiles` (ascending): what
// a row computed when its query tile skipped those tiles.
void subtract_skipped_tiles(const std::vector<int32_t>& tiles, std::vector<KeyRange>& ranges,
                            size_t from = 0);

// lambda in [0, 1]; 0 computes every tile through the same code path as attention_dense
// (bitwise identical output, for either order). Throws Error on lambda < 0, > 1 or NaN.
// `order`: see BlasstOrder; in_order (the default) is the kernel as it always ran.
void attention_blasst(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, double lambda, const AttnOptions& opt = {},
                      float* lse = nullptr, Stats* stats = nullptr, SkipStats* skip = nullptr,
                      BlasstOrder order = BlasstOrder::in_order);

class PackedKV;

// BLASST over one piece of each row's keys, for a caller that visits a row's keys piece by
// piece and merges the pieces' (out, lse) (context parallelism's pass-KV ring,
// src/dist/ring_attention.cpp). running_max [q.heads][q.seq] is each row's running max before
// the piece, in the rule's units (log2 of e^(scale q.k): max_j q.k_j scale / ln 2), -inf for
// none; it receives the max after the piece. The piece's tiles run local-first (BlasstOrder)
// against it; the 64-key tile holding a query tile's last row (its diagonal, when the piece
// holds it) is never skipped, as one process visits it first against nothing. out and lse are
// the piece's own softmax (rows that kept no key: lse -inf). opt.q_start places q against
// kv's positions. At lambda 0 nothing is skipped (the tiles then run in order).
void attention_blasst_piece(const TensorView& q, const PackedKV& kv, const TensorView& out,
                            double lambda, float* running_max, const AttnOptions& opt = {},
                            float* lse = nullptr, Stats* stats = nullptr);
// The seed for attention_blasst_piece: raises running_max to each row's max over `kv`'s
// visible keys (the sink tile, sent whole), or, diagonal_only, over the 64-key tile of kv
// holding the query tile's last row (kv: the rows' own keys, packed on the 64-position grid).
// The max after both is the one a single process has after local-first's first two tiles.
void blasst_seed_max(const TensorView& q, const PackedKV& kv, bool diagonal_only,
                     float* running_max, const AttnOptions& opt = {});

// What a BLASST prefill run computed (for recall): every causal key except the skipped
// tiles. Needs a SkipStats filled with record_tiles = true; the coverage keeps its own copy
// (move one in to avoid it).
std::unique_ptr<Coverage> blasst_coverage(SkipStats skip, int64_t q_len, int64_t kv_len,
                                          bool causal);

// One dense pass recording, for every visited tile, its margin max_r(tile_max[r] - m[r]) in
// natural-log units (+inf for a row's first tile) and its score entries. Tiles are visited in
// `order`, so a tile is skipped at lambda exactly when margin < ln(lambda) in an
// attention_blasst run with the same order.
struct TileMargins {
  std::vector<float> margin;
  std::vector<int64_t> entries;
  int64_t causal_entries = 0;  // entries of the whole problem
  // Fraction of causal entries in tiles that lambda would skip.
  double sparsity_at(double lambda) const;
};
TileMargins blasst_tile_margins(const TensorView& q, const TensorView& k, const TensorView& v,
                                const AttnOptions& opt = {},
                                BlasstOrder order = BlasstOrder::in_order);

}  // namespace spattn
