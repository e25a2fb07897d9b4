// Context-parallel attention for one layer (spattn/context_parallel.hpp): the pass-KV ring of
// prefill and decode's merge of every rank's partial result. Transport-free: bytes move
// through a Group, so this file never sees MPI.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/attention_state.hpp"
#include "spattn/context_parallel.hpp"
#include "spattn/kv_type.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/token_sparse.hpp"

namespace spattn::dist {

// A shard travels as its K rows then its V rows ([rows, kv_heads, dim] each, the session's row
// layout; its K rows alone where the values are the keys, RingLayer::v_is_k) in the narrowest
// type that holds the cache's values exactly: f16 or bf16 when K and V are both stored so, else
// f32 (q8_0 values and mixed types).
DType wire_dtype(KVType k_type, KVType v_type);

// Buffers the ring reuses from layer to layer (sized on first use).
struct RingScratch {
  std::vector<unsigned char> buf[2];  // the shard in hand and the one arriving
  std::vector<float> k, v;            // a received shard widened to f32 for packing
  std::unique_ptr<PackedKV> shard;    // a received shard, packed with its positions
  std::vector<float> tmp_out, tmp_lse, lse;
  std::unique_ptr<PackedKV> sink;  // BLASST: the sink tile's keys, for the seed
  std::vector<unsigned char> sink_buf;
  std::vector<float> sink_k, carry;  // carry: BLASST's running max [run][Hq][run.len]
  std::unique_ptr<PackedKV> whole;   // gather: the layer's whole K/V
  std::vector<unsigned char> gathered;
  std::vector<unsigned char> own_wire;  // in order: the rank's two runs, each K rows then V rows
  AttnState state[2];                   // in order: each run's online softmax

  size_t bytes() const;
};

// One layer of a context-parallel prefill from position 0, on rank g.rank() of the zigzag z:
// q [rows, Hq, d], k and v [rows, Hkv, d] are the rank's rows (its two runs, as the cache
// rounded them), `own` the layer's cache holding exactly those rows at their positions; out
// [rows, Hq, d] receives attention over the whole prompt. opt gives threads and scale.
// Dense (no pattern, no blasst, no gather): the chunks in position order, not a ring. Each
// chunk goes from its owner to every rank whose queries see it (chunk c < P: every rank; a
// late chunk: the ranks whose late chunk lies after it), and every rank runs its two runs'
// online softmax (attention_dense_continue) over chunk 0, 1, ... up to the run's own, carrying
// each row's (m, l, O) from chunk to chunk: one process's tiles in one process's order, so
// its bits. Needs the zigzag on the 64-position tile grid (Zigzag::grid a multiple of 64, no
// empty run). Holds two received chunks at a time (the one in use and the next arriving).
// pattern: null for dense attention, else a_shape's static block pattern (blocks from
// position 0, as one process lays them when -ub is a multiple of block_q): each shard then
// travels with only the rows some rank other than its owner sees, and each query block
// attends to the pieces of its key ranges (a_shape_block_keys) the shard in hand holds.
struct RingPattern {
  int64_t sink = 0, local = 1, block_q = 64, block_k = 64;
};
// blasst: BLASST's skip rule across the ring (lambda in (0, 1]; RingLayer::blasst). Before the
// ring, each query tile's running max is seeded with its diagonal tile (on the rank) and the
// sink tile (positions 0..63, rank 0's first rows, sent to every rank: the seed's bytes); then
// every shard in hand runs attention_blasst_piece against that running max, which carries from
// shard to shard. Needs the zigzag on the 64-token grid (Zigzag::grid 64, no empty run), so
// query and key tiles are one process's.
struct RingBlasst {
  double lambda = 0;
};
struct RingLayer {
  const float *q, *k, *v;
  const PackedKV* own;
  int64_t q_heads, kv_heads, dim;
  KVType k_type, v_type;
  AttnOptions opt;
  float* out;
  const RingPattern* pattern = nullptr;
  const RingBlasst* blasst = nullptr;
  // Dense only: no ring; one all-gather of every rank's shard, the whole K/V packed in position
  // order as one process's cache packs it (own's format), and the rank's runs attend over it
  // with the one-process kernel: one process's bits (SessionOptions::cp_gather).
  bool gather = false;
  // With gather instead of dense: each run's rows attend over their own tokens of the whole
  // K/V (selection[0] the first run's rows, [1] the second's; positions, as one process's
  // cache indexes them): DSA's top-k across ranks.
  const TokenSelection* selection = nullptr;
  // The values are the keys (own->v_is_k(): the latent cache): a shard travels as its K rows
  // alone and is packed the same way.
  bool v_is_k = false;
};
void ring_prefill(Group& g, const Zigzag& z, const RingLayer& layer, RingScratch& s, Stats* stats);

// Every rank's rows of `width` floats (the rank's own: its two runs, in order) to every rank, in
// position order: out [z.n][width]. One all-gather, counted as the layer's ring bytes.
void gather_rows(Group& g, const Zigzag& z, const float* rows, int64_t width,
                 std::vector<float>& out);

// The positions of a prompt of z.n tokens that some rank other than their owner sees under
// `pattern`: what the sparse ring sends (1 per position).
std::vector<char> pattern_needed(const Zigzag& z, const RingPattern& pattern);

// One decoded query per q head (q, out [Hq, 1, d] views), at position opt.q_start: attention
// over `local` (this rank's tokens, possibly none), then one all-gather of every rank's (O,
// LSE) merged in rank order, so every rank gets the same bits. `token` rides along: ranks
// decoding different tokens (out of step) fail together with an Error naming them. keys: null
// for every key of local, else the row's keys of local (one row, slots of local, possibly
// none: DSA's chosen tokens that this rank holds).
void decode_merge(Group& g, const TensorView& q, const PackedKV& local, const TensorView& out,
                  const AttnOptions& opt, int32_t token, Stats* stats, std::vector<float>& scratch,
                  const TokenSelection* keys = nullptr);

}  // namespace spattn::dist
