// The forward pass's matrix work as ggml graphs over the session's row buffers, one graph
// between two attentions: layer l's tail (x += Attn Wo; h = RMSNorm(x) * ffn_norm;
// x += (SiLU(h Wgate) * (h Wup)) Wdown, or a mixture of experts' FFN; gemma3: GeGLU and the
// post-attention / post-FFN norms) and layer l+1's head (h = RMSNorm(x) * attn_norm; q, k, v =
// h Wq (+bq), h Wk (+bk), h Wv (+bv); qwen3, gemma3: q, k RMS-normed per head), or the model's
// head (logits, gemma3's soft-capping when the file sets it). One graph is one wake-up of the
// thread pool; llama.cpp runs the same ops (its products, RMSNorm and SwiGLU).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/threading.hpp"
#include "spattn/model.hpp"

namespace spattn::model {

// The session's scratch rows (row-major, n rows each): x [n, D] the residual stream, h [n, D],
// q [n, Hq d], k and v [n, Hkv d], att [n, Hq d] the attention output, g and u [n, F].
//
// With `pack`, products on spattn's kernel pack their input into a buffer whose values are dead
// by then, so they need no scratch of their own: the attention output (att, Wo's input) into q,
// which the attention has read; a normed input (h: the q / k / v, gate / up and logits
// products' input) into att, which Wo's packing has read; the FFN's activation (g) into u, which
// the activation has read. Each packing depends through the graph on every reader of what it
// overwrites. The session sizes q, att and u for the packed rows (padded to whole panels of 32,
// att for max(D, Hq d) columns): an xp buffer of its own took 16 MiB on the 1B shape at -ub 512.
//
// The latent attention (Config::is_mla) writes two more: kv_a [n, kv_lora + rope] (attn_kv_a_mqa's
// rows: the kv latent, then the token's rope key) and kv_b [n, Hq (nope + v)] (attn_kv_b's: each
// head's k_nope and v), from which the session assembles k and v; q's latent goes through g
// (packed into u), the normed kv latent through h (packed into att). Null otherwise.
//
// With `latent` (the session's latent KV cache, llama.cpp's absorbed form; DeepSeek-V2's paper,
// section 2.1.2, "Low-Rank Key-Value Joint Compression"), the head writes instead: kv_b [n, Hq
// (nope + rope)] the q heads before absorption (q = h Wq, or through the q latent); q [n, Hq
// (kv_lora + rope)] each head's q_nope Wk_b (into the latent) then its q_pe (not yet turned);
// kv_a as above and h [n, kv_lora] the normed kv latent, which the session caches with the
// turned rope key. The tail reads att as [n, Hq kv_lora] (each head's output in the latent),
// takes it through Wv_b into g [n, Hq v] and g through Wo.
//
// DSA's lightning indexer (Config::has_indexer) writes three more: idx_q [n, heads x dim] (from
// the normed q latent), idx_k [n, dim] (LayerNorm'd, with its bias) and idx_w [n, heads] (the
// per-head weights), before RoPE and the Hadamard rotation, which the session applies.
struct RowBuffers {
  float *x, *h, *q, *k, *v, *att, *g, *u;
  float *kv_a = nullptr, *kv_b = nullptr;
  float *idx_q = nullptr, *idx_k = nullptr, *idx_w = nullptr;
  bool pack = false;
  bool latent = false;
  bool operator==(const RowBuffers&) const = default;
};

// The fewest rows from which a product with w goes through spattn's prefill kernel
// (kernels/gemm_widen.hpp) rather than ggml's, or 0 where it never does (a format without a
// widening decoder, or a CPU it was not measured on). f16: two, where ggml also leaves its
// vector products for tinyBLAS, so that a row's bits do not depend on how many rows its call
// holds (test_batch_invariance.cpp); the quantized formats: kernels::gemm_widen_min_rows's
// (their shorter calls stay on ggml's 8-bit products, so there a row's bits do depend on which
// side of that count its call falls). Decode's single rows keep ggml's vector dot products
// (vector_product.hpp).
int64_t spattn_product_min_rows(const Model::Weight& w);

// Whether w's product on spattn's kernel is the bf16 one (kernels/gemm_bf16.hpp), whose rounded
// rows need their own room in an input's buffer.
bool spattn_product_bf16(const Model::Weight& w);

// Floats an input's buffer (RowBuffers) needs for spattn's products to prepare n rows of k
// values in it: the widened product's panels, the integer product's quantized rows, and with
// bf16 the bf16 product's rounded rows.
int64_t spattn_prepared_floats(int64_t n, int64_t k, bool bf16);

// What one graph computes for n rows: the tail of layer `tail` (none when < 0), then the head
// of layer `head` (none when < 0 or past the last layer), then, with `logits`, the model's
// output head over the n rows into logits [n, n_vocab]. (The session runs the last layer's
// tail over the rows whose logits it wants only.)
struct GraphStep {
  int64_t tail = -1, head = -1;
  float* logits = nullptr;
  bool operator==(const GraphStep&) const = default;
};

// The graphs one session runs, kept for the next call with the same rows, step and threads
// (each decode step repeats the last one's graphs; so does every full chunk of a prompt):
// building a step's graphs (their tensors, nodes and products' arguments) took 5-13 us of a
// code-tiny-8k decode step of about 476 us (8 layers; two profiles), and llama.cpp reuses its
// graph too. One graph a slot (a layer's tail, or none), replaced when its key changes. Not
// copyable: a forked session starts empty (its buffers are its own).
class LayerGraphCache {
 public:
  LayerGraphCache();
  ~LayerGraphCache();
  LayerGraphCache(const LayerGraphCache&) = delete;
  LayerGraphCache& operator=(const LayerGraphCache&) = delete;
  struct Entry;

 private:
  friend void run_layer_graph(const Model&, const RowBuffers&, int64_t, const GraphStep&, int,
                              LayerGraphCache&);
  std::vector<std::unique_ptr<Entry>> slots_;
};

void run_layer_graph(const Model& m, const RowBuffers& b, int64_t n, const GraphStep& step,
                     int threads, LayerGraphCache& cache);

}  // namespace spattn::model
