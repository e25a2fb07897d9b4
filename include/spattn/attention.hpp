// Attention entry points: the exact reference and the fast dense kernel.
//
// Shapes: q [Hq, Lq, d], k and v [Hkv, Lkv, d], out [Hq, Lq, d]; Hq a multiple of Hkv
// (GQA/MQA: q head h reads kv head h / (Hq / Hkv)). Causal attention aligns bottom-right:
// query row i sits at absolute position Lkv - Lq + i and sees keys 0..Lkv-Lq+i.
// LSE, when asked for, is the natural-log log-sum-exp of each row's scaled scores,
// laid out [Hq, Lq] contiguous; a row that sees no key gets -inf and an output of 0.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "spattn/tensor.hpp"

namespace spattn {

struct ModalityLayout;  // spattn/modality.hpp

struct AttnOptions {
  bool causal = true;
  float scale = 0.0f;        // softmax scale; 0 means 1/sqrt(d)
  int threads = 0;           // 0: all hardware threads
  bool check_finite = true;  // reject NaN/Inf in q, k, v (one pass over the inputs)
  // bf16 inputs: true takes the bf16 dot-product path (bf16 operand pairs, vdpbf16ps for Q K^T
  // and P V, P rounded to bf16) where the CPU has AVX512_BF16; false widens them to f32 (the
  // path every other CPU takes). Per call: nothing process-wide decides it. A call over a
  // PackedKV computes in the format the PackedKV was built with (packed_kv.hpp).
  bool bf16_dot = true;
  // Position of query row 0 in calls over a PackedKV; -1: bottom-right (see packed_kv.hpp).
  int64_t q_start = -1;
  // Per-token modality of the keys and the frame size (spattn/modality.hpp), for methods that
  // use them (MMInference's heads, frame-sized baselines such as sf_fixed:local=frame); the
  // kernels ignore it. Null: not given. Shared so that copies of the options stay valid.
  std::shared_ptr<const ModalityLayout> modality = nullptr;
  // Sliding window (Gemma 3's local layers; llama.cpp's LLAMA_SWA_TYPE_STANDARD): > 0, a row at
  // position p sees only the keys at positions p - window < j <= p, a band the dense kernel
  // runs as such (key tiles below every row's band are never visited: O(Lq * window) work).
  // Causal only; attention_dense and attention_reference take it, other forms refuse it.
  // 0: none.
  int64_t window = 0;
  // The CUDA stream (a cudaStream_t) a method's GPU path runs on, for callers that order work
  // on their own stream (torch's current stream, from Python); null: the default stream. The
  // host kernels ignore it.
  void* stream = nullptr;
};

// The softmax scale: opt.scale, or 1/sqrt(d) when it is 0. The one place this default lives;
// the reference and the estimates use the same float value the kernels use.
float softmax_scale(const AttnOptions& opt, int64_t dim);

// Bottom-right alignment: query row `row` of q_len sits at absolute position kv_len - q_len + row,
// so the last query sees every key. With causal_limit below, the one place the causal rule lives.
inline int64_t query_position(int64_t row, int64_t q_len, int64_t kv_len) {
  return kv_len - q_len + row;
}

// Keys [0, causal_limit) query row `row` may see (up to its own position, clamped to
// [0, kv_len]); every key when not causal.
inline int64_t causal_limit(int64_t row, int64_t q_len, int64_t kv_len, bool causal = true) {
  if (!causal) return kv_len;
  const int64_t lim = query_position(row, q_len, kv_len) + 1;
  return lim < 0 ? 0 : (lim > kv_len ? kv_len : lim);
}

// The first key a causal row at position `pos` sees under a sliding window of `window` keys
// (0: none, key 0): the band's lower edge, with causal_limit its upper one.
inline int64_t window_start(int64_t pos, int64_t window) {
  return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

// What a kernel really did, summed over heads. Score entries are counted after masking:
// causal entries a tile held but did not need are not counted.
struct Stats {
  int64_t score_entries = 0;   // q.k products that entered the softmax
  int64_t causal_entries = 0;  // all entries the dense causal (or full) problem holds
  int64_t tiles_visited = 0;   // key tiles whose scores were computed
  int64_t tiles_skipped = 0;   // of those, tiles whose exp and P.V were skipped
  double flops = 0;            // 4 * d * score_entries (QK^T and PV)
  // The largest copy of the cache one call made for itself and freed (token-sparse prefill's
  // widened tiles and token-major keys): the most of it held at once, so add() keeps the max.
  int64_t staged_bytes = 0;
  double sparsity() const {
    return causal_entries > 0 ? 1.0 - double(score_entries) / double(causal_entries) : 0.0;
  }
  void add(const Stats& o);
};

// Number of (query, key) pairs the full problem holds: causal or not.
int64_t attention_entries(int64_t q_len, int64_t kv_len, bool causal);

// Throws Error naming the argument when shapes, dtypes, data pointers or values are wrong.
void validate_attention_args(const TensorView& q, const TensorView& k, const TensorView& v,
                             const TensorView& out, const AttnOptions& opt);

// Exact attention with double accumulation. For tests and metrics only: O(Lq*Lkv*d).
void attention_reference(const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& out, const AttnOptions& opt = {}, float* lse = nullptr);

// Tiled FlashAttention-2-style kernel (SIMD, runtime dispatch, threads over (head, q tile)).
void attention_dense(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const AttnOptions& opt = {}, float* lse = nullptr,
                     Stats* stats = nullptr);

// Name of the SIMD target the kernels dispatch to on this machine ("AVX3+BF16", "AVX2", ...).
const char* simd_target_name();

}  // namespace spattn

namespace spattn {

// Keys per kernel tile; also the key-block size the observer reports in (beta in MOMO).
inline constexpr int64_t kKeyBlock = 64;

// Largest head dim the kernels take (a multiple of 8): the latent attention's absorbed form
// over DeepSeek's MLA cache, one kv head of the 512-wide kv latent then the 64-wide rope key
// (DeepSeek-V2's paper, section 2.1.2; llama.cpp's MQA over its MLA cache), which every
// DeepSeek V2 / V3 / V3.2 and GLM-5 file carries.
inline constexpr int64_t kMaxHeadDim = 576;

// Sees, for each computed key tile, every row's log-sum-exp over that tile's keys (natural
// log of sum exp(scaled score)), for causal-visible keys only (-inf if a row saw none).
// Called from worker threads, but a given (q_head, row) is only ever reported by one thread,
// in increasing key-block order (unless a BLASST skip rule with another visiting order is
// given to the pass: spattn/blasst.hpp, BlasstSkip).
//
// The kernels report tiles in batches, observe_tiles(): the tiles a work item (one q head, one
// run of output rows) computed, in the order it computed them, tile i's key block
// key_blocks[i] and its rows' LSE at block_lse[i * stride, i * stride + rows). The default
// hands them to observe() one tile at a time, in that order; an observer may instead take the
// whole batch in one call (BlockSelectObserver dispatches on its selector kind once a batch).
class BlockLseObserver {
 public:
  virtual ~BlockLseObserver() = default;
  virtual void observe(int64_t q_head, int64_t row_begin, int64_t rows, int64_t key_block,
                       const float* block_lse) = 0;
  virtual void observe_tiles(int64_t q_head, int64_t row_begin, int64_t rows,
                             const int64_t* key_blocks, int64_t tiles, const float* block_lse,
                             int64_t stride) {
    for (int64_t i = 0; i < tiles; ++i)
      observe(q_head, row_begin, rows, key_blocks[i], block_lse + i * stride);
  }
};

// attention_dense that also reports per-(row, key block) LSE to `observer`.
void attention_dense_observed(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const AttnOptions& opt, float* lse,
                              BlockLseObserver& observer, Stats* stats = nullptr);

}  // namespace spattn
