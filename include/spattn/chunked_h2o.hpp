// chunked_h2o: "Chunked Sparse Attention for Prefill Optimization" — a prompt is prefilled in
// chunks C_c of S tokens (llama.cpp's -ub); each chunk attends causally to itself (intra) and,
// instead of to every earlier token, only to a memory set M_{c-1} of L + H earlier tokens
// (inter): the tail L tokens of the previous chunk (Local) and the H tokens with the highest
// accumulated attention scores (Heavy, H2O's heavy hitters), chosen per q head.
//
// Per logical batch of B tokens (llama.cpp's -b), split into chunks of S from its start:
//   Phase 1: intra-chunk causal attention of every chunk of the batch (the block-diagonal
//            causal mask), caching each row's (O, LSE) — the paper's (m, l, o) — and setting
//            the chunk's token scores to the intra column sums (Appendix B, initial scores).
//   Phase 2: chunk by chunk, inter-attention of C_c against M_{c-1} (no mask), score(j) +=
//            column sums of the inter weights for j in M_{c-1} (once per chunk), the exact
//            (O, LSE) merge with the cached intra state, and M_c = Local_c u Heavy_c with
//            Heavy_c = top-H by score of (M_{c-1} u C_c) \ Local_c. The prompt's last chunk
//            builds no memory set. A prompt of one chunk is plain causal attention.
// Scores and memory sets live per q head; the state carries from one logical batch to the
// next, as llama.cpp's KV cache does from one llama_decode call to the next.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

struct ChunkedH2OParams {
  int64_t chunk = 1024;  // S (-ub)
  int64_t batch = 2048;  // B (-b), llama.cpp's default; chunks restart at each batch's start
  int64_t local = 256;   // L: tail tokens of a chunk always kept (at most S)
  int64_t heavy = 256;   // H: heavy hitters kept by score
  // The memory set carries from one logical batch to the next (the paper's flow, pseudocode
  // and complexity formula: inter-attention for every chunk after the first). false: each
  // logical batch starts without memory, its first chunk intra-only — the accounting behind
  // the paper's quoted 4.6x (N = 8192) and 9.1x (N = 16384) at B = 4096, S = 1024, M = 512.
  bool carry = true;
  // Throws Error naming the parameter. The paper's regime is L + H < S; larger memories are
  // accepted (with L + H covering every earlier token the method is dense chunked prefill).
  void validate() const;
};

// Local_c: the tail min(L, |C_c|) positions of chunk [chunk_begin, chunk_end), ascending.
std::vector<int64_t> h2o_local_window(int64_t chunk_begin, int64_t chunk_end, int64_t local);

// M_c for one head (Task 4): Local_c u top-`heavy` of (prev u [chunk_begin, chunk_end)) minus
// Local_c by scores[position] (ties: the earlier position), sorted ascending. prev (M_{c-1})
// must be sorted and lie before chunk_begin.
std::vector<int64_t> h2o_build_memory(std::span<const int64_t> prev, int64_t chunk_begin,
                                      int64_t chunk_end, std::span<const double> scores,
                                      int64_t local, int64_t heavy);

// What a prefill chose, for tests and analysis: every memory set built, per chunk and q head.
struct ChunkedH2OTrace {
  std::vector<int64_t> chunk_begin;                       // per chunk c: its first position
  std::vector<char> inter;                                // per chunk c: attended to M_{c-1}
  std::vector<std::vector<std::vector<int64_t>>> memory;  // [c][q head]: M_c (empty if not built)
};

// The buffers a logical batch uses only while it passes through a layer (the batch's packed
// K/V, the memory set's packed K/V, the inter O, LSEs, column sums): layers of one shape may
// share one, as long as they never run at the same time.
struct ChunkedH2OScratch;

// What later batches read of a layer's state at a chunk boundary, to continue a prompt from
// there exactly as a prefill running on from that boundary would (a server's prefix reuse):
// the position and counters, M_{c-1} per q head with its tokens' scores and raw K/V rows.
// Scores of tokens outside M_{c-1} are left out: no later chunk reads them (a token that
// left the memory set never returns to it, h2o_build_memory draws from M_{c-1} u C_c).
struct ChunkedH2OSnapshot {
  int64_t pos = 0, chunks = 0, updates = 0;
  bool have_mem = false;
  std::vector<std::vector<int64_t>> mem;        // [Hq]: M_{c-1}, sorted
  std::vector<std::vector<double>> mem_scores;  // [Hq]: score of each position in mem
  std::vector<char> mem_k, mem_v;               // [Hq][|M|][d] rows, as the layer stores them
  size_t bytes() const;
};

// One attention layer's chunked_h2o state across the logical batches of one prompt.
class ChunkedH2OLayer {
 public:
  // capacity: the longest prompt; dtype: of the k, v given to prefill_batch; bf16_dot: the
  // operand format of the K/V it packs (PackedKV, AttnOptions::bf16_dot), fixed here.
  // scratch: another layer's scratch() to share (same shape and parameters, else Error), or
  // null for one of its own.
  ChunkedH2OLayer(const ChunkedH2OParams& p, int64_t q_heads, int64_t kv_heads, int64_t dim,
                  DType dtype, int64_t capacity, bool bf16_dot = true,
                  std::shared_ptr<ChunkedH2OScratch> scratch = nullptr);
  ChunkedH2OLayer(ChunkedH2OLayer&&) noexcept;
  ~ChunkedH2OLayer();

  // One logical batch: q [Hq, n, d], k, v [Hkv, n, d] (post-RoPE) at positions position() ..
  // position() + n - 1, 1 <= n <= batch; out [Hq, n, d]; lse [Hq, n] when non-null. `last`:
  // the prompt ends with this batch (its last chunk builds no memory set). opt.causal must be
  // true. Stats: the attention passes' entries (the paper's dot products), causal_entries of
  // dense causal attention over the same rows. The column sums come from the attention passes
  // themselves (attention_with_column_sums): no entry is computed twice.
  // packed: optional, the batch's k, v already packed (exactly these n rows at positions
  // 0 .. n - 1, as a KV cache holds them after the prompt's first batch); Phase 1 then runs
  // over it instead of packing them again (the same operands, so the same result).
  void prefill_batch(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const AttnOptions& opt, bool last, float* lse = nullptr,
                     Stats* stats = nullptr, const PackedKV* packed = nullptr);
  // A new prompt: position 0, scores zero, no memory.
  void reset();
  // The state after the batches done so far, and back to it: a prefill_batch after restore
  // computes, bit for bit, what it computed after the batch that snapshot() followed. Only
  // a state whose last batch was not `last` can go on (its last chunk built its memory set).
  // After restore, scores() of positions outside the memory set read 0 (see the snapshot).
  ChunkedH2OSnapshot snapshot() const;
  void restore(const ChunkedH2OSnapshot& snap);

  int64_t position() const;
  int64_t chunks_done() const;
  // Score accumulations from inter-attention so far (one per chunk that had a memory set).
  int64_t score_updates() const;
  std::span<const int64_t> memory(int64_t q_head) const;  // M of the last chunk done
  std::span<const double> scores(int64_t q_head) const;   // per position, [0, position())
  void set_trace(ChunkedH2OTrace* trace);                 // null: record nothing
  // Called inside prefill_batch after each chunk that built its memory set M_c, with the
  // position the chunk ends at: snapshot() then is the state a batch ending there leaves, so a
  // prefill restored from it and batched from there on the same chunk grid computes the same
  // state (a server's prefix reuse at -ub granularity); the same bits where the chunk ends a
  // multiple of kKeyBlock keys into its batch (Phase 1 packs a batch's keys in tiles from its
  // start). Empty: nothing is called.
  void set_on_memory(std::function<void(int64_t end)> f);
  std::shared_ptr<ChunkedH2OScratch> scratch() const;
  // Bytes held: the layer's own state kept across batches (scores, memory sets and their raw
  // K/V rows), and its scratch (shared ones counted once by the caller).
  size_t state_bytes() const;
  size_t scratch_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// A whole prompt through one layer: q [Hq, N, d], k, v [Hkv, N, d] (causal self-attention),
// in logical batches of p.batch.
void attention_chunked_h2o(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const ChunkedH2OParams& p,
                           const AttnOptions& opt = {}, float* lse = nullptr,
                           Stats* stats = nullptr, ChunkedH2OTrace* trace = nullptr);

// Dot products (query-key entries per head) of chunked_h2o over a prompt of n tokens, from the
// chunk and memory sizes alone: intra sum |C_c|(|C_c|+1)/2 plus inter |C_c| |M_{c-1}|
// (the paper's complexity table, Section 1.2.7).
int64_t chunked_h2o_entries(int64_t n, const ChunkedH2OParams& p);

}  // namespace spattn
