// Llama-family decoder models (architectures `llama`, `qwen2`, `qwen3`, `qwen3moe`, `phi3`,
// `gemma3` and `gpt-oss`) and a session that runs one prompt through them: prefill in chunks
// (dense, chunked_h2o, or any library method), then token-by-token decode (dense, Quest or
// BLASST) over a pre-allocated KV cache; each layer's attention is a backend from the method
// registry (src/methods/layer_backend.hpp).
//
// Forward pass per layer (llama.cpp's llm_build_llama / llm_build_qwen2):
//   h = RMSNorm(x) * attn_norm;  q, k, v = h Wq (+bq), h Wk (+bk), h Wv (+bv)   (qwen2: biases)
//   qwen3: q, k = RMSNorm(q) * q_norm, RMSNorm(k) * k_norm per head (no biases)
//   q, k = RoPE(q, k) at global positions (llama: adjacent pairs; qwen2, qwen3(moe), phi3:
//          rotate-half; phi3: LongRoPE divisors and cos/sin factor)
//   phi3: Wq/Wk/Wv and Wgate/Wup stored fused (attn_qkv, ffn_up), split into row blocks at load
//   x += Attention(q, k, v) Wo   (GQA: q head h reads kv head h / (Hq / Hkv))
//   h = RMSNorm(x) * ffn_norm;   x += (SiLU(h Wgate) * (h Wup)) Wdown
//   logits = RMSNorm(x) * output_norm Wout   (Wout = token embedding when output.weight is absent)
// Mixture of experts (qwen3moe, and llama files with experts: Mixtral; llama.cpp's build_moe_ffn
//   with softmax gating and normalized weights): the FFN is
//   p = softmax(h Wrouter); E = the n_expert_used largest p; w_e = p_e / sum_{E} p
//   x += sum_{e in E} w_e (SiLU(h Wgate_e) * (h Wup_e)) Wdown_e
// gemma3 (llama.cpp's llm_build_gemma3): x0 = embedding * sqrt(n_embd); q/k per-head RMSNorm;
//   sliding-window layers (attention over the last `sliding_window` positions, RoPE base
//   rope.freq_base_swa) interleaved with global ones (rope.freq_base, linear rope scaling);
//   x += RMSNorm(Attention Wo) * attn_post_norm; x += RMSNorm(GeGLU FFN) * ffn_post_norm, GeGLU
//   = GELU(h Wgate) * (h Wup) with ggml's tanh-approximated GELU; scores scaled by
//   Config::attn_scale; logits soft-capped when final_logit_softcapping is set.
// Matrices stay in the type the file stores them in (f16, q8_0, q4_K, iq4_xs, ...: any type
// ggml's CPU backend multiplies), read in place from the memory-mapped GGUF file or, where ggml
// has a faster interleaved layout for the type on this CPU (q4_0, q4_K, iq4_nl, ... on AVX2 /
// AVX-512), repacked once at load, as llama.cpp does; products are ggml's (model/ops.hpp).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "spattn/arch.hpp"
#include "spattn/attention.hpp"
#include "spattn/chunked_h2o.hpp"
#include "spattn/context_parallel.hpp"
#include "spattn/gguf.hpp"
#include "spattn/kv_type.hpp"

struct ggml_tensor;

namespace spattn::model {

struct Config {
  Arch arch = Arch::llama;
  int64_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0;
  int64_t n_vocab = 0, n_ctx_train = 0;
  double rms_eps = 1e-5;
  double rope_base = 10000.0;
  bool rope_neox = false;  // rotate-half pairs (qwen2, qwen3(moe), phi3); false: adjacent (llama)
  // Per-pair divisors of the RoPE frequencies (head_dim / 2 of them), or empty: the file's
  // rope_freqs.weight, which is how Llama 3.1's "llama3" rope scaling reaches a GGUF (the
  // converter turns factor, low / high frequency factors and original context into it).
  std::vector<float> rope_freq_factors;
  // Phi-3's LongRoPE (llama.cpp's rope_factors_long / rope_factors_short tensors): per-pair
  // divisors for a context past n_ctx_orig (long) or within it (short), and the factor that
  // scales every cos and sin (rope.scaling.attn_factor: sqrt(1 + ln(s) / ln(orig)) for a
  // context stretch s, so scores grow by its square). Empty / 1: none.
  std::vector<float> rope_factors_long, rope_factors_short;
  int64_t n_ctx_orig = 0;  // rope.scaling.original_context_length; 0: n_ctx_train
  double rope_attn_factor = 1.0;
  // gemma3, gpt-oss: the sliding window of the local layers (attention.sliding_window; 0:
  // none) and which layers are local (llama.cpp's set_swa_pattern: with pattern n, layer l is
  // local when l % n < n - 1, so every n-th is global; empty: none). gemma3's local layers turn by
  // rope_base_swa, unscaled; global ones by rope_base with positions divided by
  // rope_linear_factor (rope.scaling.factor of "linear" scaling, as llama.cpp's freq_scale).
  // gpt-oss's local layers turn by rope_base_swa with the global layers' scaling (llama.cpp
  // copies freq_scale to them): swa_rope_scaled.
  int64_t sliding_window = 0;
  std::vector<uint8_t> swa_layers;
  double rope_base_swa = 10000.0;
  double rope_linear_factor = 1.0;
  bool swa_rope_scaled = false;
  double attn_scale = 0.0;           // softmax scale of the scores; 0: 1 / sqrt(head_dim)
  double final_logit_softcap = 0.0;  // logits = c tanh(logits / c); 0: none
  // Mixture of experts (expert_count, expert_used_count; 0: a dense FFN): each token's FFN is
  // the weighted sum of the n_expert_used experts its router scores highest, each a SwiGLU of
  // hidden size n_ff_exp (qwen3moe: expert_feed_forward_length; llama: feed_forward_length).
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  bool is_moe() const { return n_expert > 0; }
  // How the chosen experts' weights are computed (llama.cpp's expert gating func): softmax
  // over all experts, the chosen ones' probabilities normalized to sum 1 (qwen3moe, Mixtral);
  // or the softmax of the chosen experts' logits alone (gpt-oss's SOFTMAX_WEIGHT). The same
  // experts (the largest logits) and, in exact arithmetic, the same weights; the ops are
  // llama.cpp's for each, so the bits are too.
  // DeepSeek's (deepseek_moe, the file's expert_gating_func): softmax or sigmoid of the
  // logits, the chosen ones normalized when expert_weights_norm says so.
  enum class Gating { softmax_normalized, softmax_of_chosen, softmax, sigmoid };
  Gating gating = Gating::softmax_normalized;
  bool expert_weights_norm = false;  // softmax / sigmoid: the chosen weights normalized
  double expert_weights_scale = 0;   // the chosen weights times this (0 or 1: not scaled)
  // Group-limited routing (expert_group_count, expert_group_used_count; 0: none): the experts
  // in n_expert_groups groups, each scored by its two best selection scores, the experts
  // chosen among the n_group_used best groups' only.
  int64_t n_expert_groups = 0, n_group_used = 0;
  int64_t n_expert_shared = 0;     // shared experts' count (their FFN: n_ff_exp times it)
  int64_t n_layer_dense_lead = 0;  // leading_dense_block_count: layers with a dense FFN
  bool layer_moe(int64_t layer) const { return is_moe() && layer >= n_layer_dense_lead; }
  bool normalizes_weights() const {
    return gating == Gating::softmax_normalized ||
           (expert_weights_norm && (gating == Gating::softmax || gating == Gating::sigmoid));
  }
  // Multi-head latent attention (ArchTraits::mla): q_lora_rank (0: q from one matrix) and
  // kv_lora_rank, the latents' sizes; head_dim is a k head's (nope + rope), head_dim_v a v
  // head's (0: head_dim); n_rot the rope part at the end of each head (0: all of it).
  int64_t q_lora_rank = 0, kv_lora_rank = 0, head_dim_v = 0, n_rot = 0;
  bool is_mla() const { return kv_lora_rank > 0; }
  // The file's latent attention is in the absorbed layout (attn_k_b / attn_v_b and the _mla
  // key lengths: deepseek32 and glm-dsa always, deepseek2 as current converters write it,
  // llama.cpp's is_mla), not attn_kv_b whole.
  bool mla_absorbed = false;
  // DeepSeek's sparse attention (ArchTraits::indexer): the lightning indexer's heads, their
  // size (RoPE on the first rot() values, NeoX pairs) and the tokens each query keeps.
  int64_t indexer_heads = 0, indexer_dim = 0, indexer_top_k = 0;
  // Per layer, 1 where the layer has no indexer of its own and attends over the tokens the last
  // layer with one selected (GLM-5.2: attention.indexer.types 0); empty: every layer has one.
  std::vector<uint8_t> indexer_shared;
  bool has_indexer() const { return indexer_top_k > 0; }
  bool shares_indexer(int64_t layer) const {
    return size_t(layer) < indexer_shared.size() && indexer_shared[size_t(layer)];
  }
  int64_t v_dim() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  int64_t rot() const { return n_rot > 0 ? n_rot : head_dim; }
  bool is_swa(int64_t layer) const {
    return sliding_window > 0 && size_t(layer) < swa_layers.size() && swa_layers[size_t(layer)];
  }
  int64_t window(int64_t layer) const { return is_swa(layer) ? sliding_window : 0; }
  // The per-pair divisors a session with context n_ctx runs (llama.cpp's get_rope_factors:
  // rope_freqs if any, else long past the original context, else short).
  const std::vector<float>& rope_factors(int64_t n_ctx) const;
  // Throws Error naming the field when a size is not positive or heads do not divide.
  void validate() const;
};

// YaRN's RoPE scaling (rope.scaling.type yarn; llama.cpp's ggml_rope_ext with ext_factor 1,
// beta_fast 32, beta_slow 1), as per-pair frequency divisors and a cos/sin factor: pair p's
// angle is the unscaled one's blend of 1/factor (interpolation) and 1 (extrapolation), all
// interpolation below the pair ggml's corr dims call low, none from high on (corr dims of
// head_dim, base and the original context n_ctx_orig, in float as ggml computes them); every
// cos and sin times 1 + 0.1 ln(factor) (factor > 1; llama.cpp's get_mscale, which its context
// divides out and ggml's rope multiplies back in).
std::vector<float> yarn_rope_divisors(int64_t head_dim, double base, double factor,
                                      int64_t n_ctx_orig);
double yarn_mscale(double factor);

// A weight's storage type: ggml's (gguf::GgmlType).
using WeightType = gguf::GgmlType;

// A matrix as stored: `rows` rows of `cols` elements (ggml: ne[0] = cols, ne[1] = rows); a
// vector is one row. data null: absent (a tied output head, a missing bias).
struct WeightRef {
  WeightType type = WeightType::f32;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t planes = 1;  // experts' matrices: one [rows, cols] matrix an expert (ggml's ne[2])
};
struct LayerRefs {
  WeightRef attn_norm, wq, wk, wv, wo, bq, bk, bv, ffn_norm, gate, up, down;
  WeightRef q_norm, k_norm;  // qwen3, gemma3: per-head RMSNorm weights (head_dim values each)
  WeightRef attn_post_norm, ffn_post_norm;  // gemma3: RMSNorm of the attention and FFN outputs
  WeightRef bo;                             // gpt-oss: Wo's bias
  WeightRef sinks;  // gpt-oss: each q head's sink logit (attn_sinks, n_head values)
  // Mixture of experts (instead of gate, up, down): the router [n_expert, D] and the experts'
  // matrices, n_expert planes each (ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps).
  WeightRef router, gate_exps, up_exps, down_exps;
  // gpt-oss: the router's bias [n_expert] and each expert's biases, one row an expert
  // ([n_expert, F] for gate and up, [n_expert, D] for down).
  WeightRef router_b, gate_exps_b, up_exps_b, down_exps_b;
  // deepseek2: the latent attention's matrices and norms (attn_q_a, attn_q_a_norm, attn_q_b;
  // attn_kv_a_mqa, attn_kv_a_norm, attn_kv_b), the experts' selection bias (exp_probs_b) and
  // the shared experts' FFN (ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp).
  WeightRef wq_a, q_a_norm, wq_b, wkv_a, kv_a_norm, wkv_b, exp_probs_b;
  WeightRef gate_shexp, up_shexp, down_shexp;
  // The absorbed layout's k and v matrices (attn_k_b, attn_v_b: one plane a head), which the
  // reader also turns into wkv_b (the expanded form's).
  WeightRef wk_b, wv_b;
  // DSA's lightning indexer (indexer.k_norm weight and bias, indexer.proj, indexer.attn_k,
  // indexer.attn_q_b).
  WeightRef idx_k_norm, idx_k_norm_b, idx_proj, idx_k, idx_q_b;
};
// Where a loaded model keeps the matrices its products read in place (those ggml does not
// repack into a buffer of its own).
struct LoadOptions {
  // true (the default; --mmap): read from the mapping, as llama.cpp does by default: no copy
  // at load, and a model larger than memory still runs from the page cache. false
  // (--no-mmap): copied out of the mapped file into memory advised into transparent huge pages
  // (where the system offers them; else they stay mapped), as the repacked ones are: a decode
  // step reads every weight once, and read through the file's 4 KiB pages its steps stalled
  // now and then for tens of milliseconds on a KVM guest (docs/runner.md, "The weights in huge
  // pages").
  bool mmap = true;
};

struct ModelRefs {
  Config cfg;
  WeightRef tok_embd, output_norm, output;
  std::vector<LayerRefs> layers;
};

class Model {
 public:
  // Checks every shape against cfg and every matrix's type (Error names the tensor; a type the
  // CPU backend cannot multiply is refused naming it). Norms and biases become f32; matrices
  // keep their type. With `mapping`, the refs point into it and matrices are read in place
  // or copied out of it as `load` says (the model keeps the mapping alive); without, their
  // bytes are copied.
  explicit Model(const ModelRefs& refs, std::shared_ptr<const gguf::File> mapping = nullptr,
                 const LoadOptions& load = {});
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const Config& config() const;
  bool tied_output() const;

  // A matrix for model/ops.hpp's matmul: a ggml tensor over the stored (or repacked) bytes.
  struct Weight {
    ggml_tensor* t = nullptr;
    WeightType type = WeightType::f32;
    int64_t rows = 0, cols = 0;
    bool repacked = false;
    // Repacked by ggml into the 8-row layout prefill's integer products also read
    // (kernels::Int8Layout::interleaved8).
    bool int8_interleaved = false;
    bool experts = false;      // one matrix an expert (t->ne[2] of them), products pick one a token
    const void* data() const;  // the bytes products read: in the mapping, or repacked
  };
  struct Layer {
    std::vector<float> attn_norm, ffn_norm, bq, bk, bv;  // bq/bk/bv empty: no biases
    std::vector<float> q_norm, k_norm;  // empty: no per-head q/k norm (qwen3 has them)
    std::vector<float> attn_post_norm, ffn_post_norm;  // empty: none (gemma3 has them)
    std::vector<float> bo;                             // empty: no Wo bias (gpt-oss has one)
    std::vector<float> sinks;  // empty: no attention sinks (gpt-oss: one logit a q head)
    // gpt-oss: the router's bias and the experts' biases (rows of F or D values, one an expert)
    std::vector<float> router_b, gate_exps_b, up_exps_b, down_exps_b;
    Weight wq, wk, wv, wo, gate, up, down;         // gate, up, down absent (t null) in a MoE layer
    Weight router, gate_exps, up_exps, down_exps;  // a MoE layer's (Config::layer_moe)
    // deepseek2 (LayerRefs says which): wq absent where q has a latent (wq_a, wq_b); wk, wv
    // absent (wkv_a, wkv_b); the shared experts in a MoE layer.
    std::vector<float> q_a_norm, kv_a_norm, exp_probs_b;
    Weight wq_a, wq_b, wkv_a, wkv_b, gate_shexp, up_shexp, down_shexp;
    // The latent attention's absorbed form (llama.cpp's wk_b, wv_b; ggml [nope, kv_lora, H] and
    // [kv_lora, v, H], one plane a head): q_nope into the kv latent, the latent attention's
    // output out of it. The file's attn_k_b / attn_v_b, or made from attn_kv_b (f32) by
    // use_mla_form; wkv_b likewise the file's or made from these.
    Weight wk_b, wv_b;
    // deepseek32's lightning indexer: its key's LayerNorm, the per-head weights' matrix, its
    // key's and (from the q latent) its queries' matrices.
    std::vector<float> idx_k_norm, idx_k_norm_b;
    Weight idx_proj, idx_k, idx_q_b;
  };
  const Layer& layer(int64_t i) const;
  const std::vector<float>& output_norm() const;
  const Weight& output() const;  // the token embedding when tied
  // Row `token` of the token embedding, as f32 (n_embd values).
  void embed(int32_t token, float* dst) const;

  // Bytes of the weights: read in place from the mapping, repacked into memory of ours, and
  // copied (models built from refs without a mapping; norms and biases as f32; the latent
  // attention's other form, once a session runs it: use_mla_form).
  struct Memory {
    size_t mapped = 0, repacked = 0, owned = 0;
  };
  Memory memory() const;

  // The latent attention (Config::is_mla) in the form a session runs: the absorbed form reads
  // Layer::wk_b / wv_b, the expanded form Layer::wkv_b. The form the file's layout does not
  // hold is made from the other, in f32, by the first session that runs it (once, whichever
  // thread; Session's constructor calls this): an absorbed file's expanded attn_kv_b (about
  // 4 GB for DeepSeek V3.2) is never built while every session runs absorbed, nor a legacy
  // file's split one while every session runs expanded. Until then the weights of that form
  // are absent (t null). Nothing for a model without latent attention.
  void use_mla_form(bool absorbed) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

// Loads a `llama` (dense or with experts), `qwen2`, `qwen3`, `qwen3moe`, `phi3`, `gemma3` or
// `gpt-oss` GGUF model (llama.cpp's tensor names, any matrix type ggml's CPU backend
// multiplies: f32, f16, bf16, q4_0 ... q8_0, q2_K ... q6_K, iq4_nl, iq4_xs, mxfp4, ...).
// Matrices are read from the mapping, which the model keeps open, or copied out of it
// (LoadOptions).
Model load_model(const std::string& path, const LoadOptions& load = {});
Model load_model(std::shared_ptr<const gguf::File> file, const LoadOptions& load = {});

// --attn / --attn-decode's default: the model's own attention (dsa for a model with a
// lightning indexer, DeepSeek V3.2's deepseek32; dense otherwise).
inline constexpr const char* kModelAttention = "auto";
struct Config;
// The spec a session runs for `spec`: kModelAttention resolved for the model (dsa or dense),
// any other spec as given.
std::string model_attention(const std::string& spec, const Config& cfg);

struct SessionOptions {
  int64_t n_ctx = 4096;    // -c: KV cache capacity (tokens)
  int64_t n_batch = 2048;  // -b: logical batch
  int64_t n_ubatch = 512;  // -ub: chunk
  // --attn: how a prompt's attention is computed, any method of the registry (spattn/method.hpp:
  // MethodInfo::prefills): "dense", "chunked_h2o" (its sizes: -b, -ub, --h2o-local and
  // --h2o-heavy), or a library method's spec run over the cache per -ub chunk; "auto"
  // (kModelAttention): the model's own.
  std::string attn = kModelAttention;
  int64_t h2o_local = 256, h2o_heavy = 256;  // --h2o-local, --h2o-heavy
  // chunked_h2o: how many chunk boundaries of the prompts prefilled keep the layers' state
  // (the most recent ones; every -ub chunk end when -ub is a multiple of 64, as the default
  // 512, else those a multiple of 64 tokens into their -b batch, and the batch ends), so a later
  // prompt that starts with the same tokens goes on from there bit for bit (Session::
  // reuse_point). Each holds every layer's memory set and its rows (about 2 (L + H) Hq d 4 bytes
  // a layer); 0 keeps none: one-shot prompts (`run`, `perplexity`) never go back, so only a
  // server's slots ask for some (serve: 2).
  int64_t h2o_keep = 0;
  int threads = 2;  // -t: matrix products, attention kernels and methods
  // -ctk / -ctv: how the KV cache stores keys and values (llama.cpp's default f16). Every
  // token's K and V rows are rounded to these types before any attention reads them, so
  // prefill (every mode) and decode see the values the cache holds.
  KVType cache_type_k = KVType::f16, cache_type_v = KVType::f16;
  // --attn-decode: how decode attends, a registry method with a decode form (MethodInfo::
  // decodes): dense, quest[:...] (page summaries kept with the cache), blasst:lambda=X /
  // blasst:sparsity=S,calib=FILE or dsa; "auto" (kModelAttention): the model's own. Prefill is
  // unaffected.
  std::string attn_decode = kModelAttention;
  // With a quest decode: page summaries in every layer, not only in those Quest decodes
  // (spattn perplexity --decode-recall measures what its choice would keep in the dense ones).
  bool quest_pages_every_layer = false;
  // --cp P: context parallelism (spattn/context_parallel.hpp): this session is one rank of the
  // group, holding only the tokens the zigzag split (prefill) and decode give it; every rank
  // runs the same calls with the same tokens. Null: one process. First stage: dense prefill
  // from position 0 (a fresh or reset session), dense decode, -ctk / -ctv any type.
  std::shared_ptr<dist::Group> cp;
  // --cp-gather: a dense prefill gathers the layer's whole K/V on every rank (one all-gather
  // instead of the pass-KV ring, held for that layer only; each rank's cache keeps its own
  // tokens) and runs the one-process kernel over it in position order, so every row gets the
  // bits one process gives it (docs/context-parallel.md: the ring's (O, LSE) merges round
  // differently, and the f16 weight products turn that rounding into f16 steps). Costs the
  // layer's K/V on every rank and the ring's overlap of communication with compute.
  bool cp_gather = false;
  // The latent attention (Config::is_mla): false (the default) caches each token's kv latent
  // and rope key (kv_lora_rank + rope values a layer, llama.cpp's MLA cache) and attends in the
  // absorbed form, q in the latent space and one kv head for every q head, as llama.cpp's
  // deepseek2 graph; true caches every head's expanded k and v (2 x heads x head dim) and
  // attends as multi-head attention (the reference the absorbed form is tested against). A
  // latent wider than the attention kernels' heads (kv_lora_rank + rope > 256: DeepSeek-V3's
  // 576) runs expanded, and so does a file in the legacy layout (attn_kv_b whole, deepseek2),
  // which llama.cpp also runs expanded (is_mla false: llama-model.cpp), unless
  // mla_latent_legacy asks for the absorbed form over its split attn_kv_b (the tests' way to
  // hold both forms to each other on one file).
  bool mla_expanded = false;
  bool mla_latent_legacy = false;
  void validate() const;
};

struct Timings {
  double prefill_ms = 0, prefill_attn_ms = 0, decode_ms = 0;
  int64_t prefill_tokens = 0, decode_tokens = 0;
  Stats prefill_stats;  // attention entries of prefill
  // Decode's attention: time, entries, and keys read against the keys visible, summed over
  // layers and kv heads (Quest reads fewer; dense and BLASST read every key's K).
  double decode_attn_ms = 0;
  Stats decode_stats;
  int64_t decode_keys_read = 0, decode_keys_total = 0;
  int64_t decode_pages_read = 0, decode_pages_total = 0;  // Quest's layers only
  double decode_select_ms = 0;  // Quest's page choice, part of decode_attn_ms
  // prefill_attn_ms per layer (empty before the first prefill): a sliding-window layer's band
  // against a global layer's attention in the same run.
  std::vector<double> prefill_layer_attn_ms;
  // decode_attn_ms per layer (empty before the first decoded token): Quest's dense layers
  // against its sparse ones in the same run.
  std::vector<double> decode_layer_attn_ms;
  // decode_ms and decode_attn_ms per decoded token, in order: the first tokens after a prompt
  // pay one-time costs (weights the prefill never read, the decode path's first calls) that a
  // mean over a few tokens folds into every token.
  std::vector<double> decode_token_ms, decode_token_attn_ms;
  // Context parallelism (SessionOptions::cp): this rank's communication in prefill and decode.
  dist::CommStats prefill_comm, decode_comm;
};

// What one layer's attention runs in a session (spattn run --json "layers"): a sliding-window
// layer (gemma3's local ones) runs its band whatever the session's methods, since a window is
// already sparse; a global layer runs what the options say.
struct LayerAttention {
  bool sliding = false;
  int64_t window = 0;   // sliding: the band's width in keys
  std::string prefill;  // "dense", "chunked_h2o", the --attn spec, or "band"
  std::string decode;   // "dense", the --attn-decode spec, or "band"
};

// Called with a layer's post-RoPE q [n, Hq, d], k, v [n, Hkv, d] (f32, row-major) and the
// positions of the n rows, as prefill computes them (--dump-qkv); Hq, Hkv and d are
// Session::attention_shape()'s.
using QkvTap = std::function<void(int64_t layer, int64_t pos0, int64_t n, const float* q,
                                  const float* k, const float* v)>;

class KVCache;  // src/model/kv_cache.hpp

// Called during a prefill after each layer of each piece of the prompt (a -ub chunk; a -b
// logical batch with chunked_h2o) with the prompt tokens done and the call's total: a server
// streams it as progress. A piece's tokens count in proportion to the layers it has passed
// (all of them once it is through the last layer), so a long piece still reports every few
// hundred milliseconds. It may throw (a client gone): the prefill then rolls back as after any
// other error.
using PrefillProgress = std::function<void(int64_t done, int64_t total)>;

// One sequence's state: its KV cache (every token's K and V per layer, whichever call computed
// them) and n_past, the tokens it holds. prefill and decode are all or nothing: a call that
// throws leaves n_past, every layer's cache and what later calls compute exactly as they were.
// Not for use from two threads at once; two sessions (or a session and its fork) may run in
// parallel over one Model.
class Session {
 public:
  Session(const Model& model, const SessionOptions& opt);
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();
  // Forgets every token: a fresh prompt at position 0 (truncate(0)).
  void reset();
  int64_t n_past() const;
  // Keeps the first n tokens (0 <= n <= n_past()): later calls compute what they would have
  // after a prefill of those n tokens alone. chunked_h2o: at n = 0, or at a chunk boundary
  // whose state is kept (reuse_point), the layers' state goes back to what it was there and
  // the next prefill goes on with chunked_h2o exactly as the prefill that passed n did; at any
  // other n that state is dropped and the next prefill is dense (as a prefill after decode is).
  void truncate(int64_t n);
  // The longest prefix of at most n (<= n_past()) tokens that a prefill can go on from and
  // compute what one prefill of the whole prompt computes: dense, n (the prefix's rows are the
  // same whichever call computed them; the logits then differ by the order of sums only);
  // chunked_h2o, the largest chunk boundary <= n whose layer state is kept (SessionOptions::
  // h2o_keep), bit for bit with the same -b / -ub, else 0; method mode, 0 (a method runs per
  // -ub chunk and decoded rows are dense).
  int64_t reuse_point(int64_t n) const;
  // A new session over the same model and options holding this one's first n tokens (all when
  // -1), for prefix reuse: the cache's tiles are copied, nothing is recomputed; the methods
  // (method mode) are shared, the tap copied, the timings fresh; chunked_h2o's kept states up
  // to n are copied and the fork's layers set as truncate(n) sets them.
  Session fork(int64_t n = -1) const;

  // Prefills tokens at positions n_past() .. n_past() + n - 1. logits (when non-null) receives
  // [n - logits_from, n_vocab] rows: the logits after tokens logits_from .. n - 1.
  void prefill(std::span<const int32_t> tokens, float* logits, int64_t logits_from,
               const PrefillProgress& progress = {});
  // One token, attending over the cache as SessionOptions::attn_decode says; logits [n_vocab].
  void decode(int32_t token, float* logits);

  const Timings& timings() const;
  void reset_timings();
  // Per layer, what its attention runs in prefill and decode.
  std::vector<LayerAttention> layer_attention() const;
  // What the last prefill's global layers ran: the --attn spec's name as layer_attention()
  // gives it, or "dense" where a stateful method ran dense (chunked_h2o on a prompt of one
  // chunk, or going on from a position whose state was not kept).
  std::string prefill_ran() const;

  // Bytes this session holds besides the model's weights: the KV cache (every layer's
  // PackedKV at capacity), the raw K/V copies method mode keeps, the row buffers, and
  // chunked_h2o's per-layer state (scores, memory sets, and the kept batch boundaries' states)
  // and its one shared batch scratch.
  // The attention's shape in every layer: q heads, kv heads and head dim as the KV cache and
  // the attention kernels hold them (the latent attention's absorbed form: Hq, 1, kv_lora_rank
  // + rope; else the model's), and whether that is the latent cache.
  struct AttentionShape {
    int64_t q_heads = 0, kv_heads = 0, dim = 0;
    bool latent = false;
  };
  AttentionShape attention_shape() const;
  struct Memory {
    // kv_cache_per_token: the KV cache's bytes a token takes over every layer (K and V tiles
    // as stored, and the token's position), kv_cache / capacity.
    size_t kv_cache_per_token = 0;
    size_t kv_cache = 0, method_kv = 0, scratch = 0, h2o_state = 0, h2o_scratch = 0;
    size_t decode_pages = 0;  // Quest's page summaries (--attn-decode quest)
    size_t indexer_keys = 0;  // DSA's indexer keys (f32, room for the context) and packed copies
    size_t cp_ring = 0;       // --cp: the prefill's buffers (own rows on the wire, the chunks
                              // or shards in hand and arriving, packed, the runs' state)
    // The largest copy of a layer's cache one attention call made and freed since the timings'
    // reset (Stats::staged_bytes: dsa prefill's widened tiles and token-major keys).
    size_t attention_staging = 0;
  };
  Memory memory() const;
  // The tap sees layer `layer`'s post-RoPE rows, or every layer's with kTapAllLayers.
  static constexpr int64_t kTapAllLayers = -1;
  void set_qkv_tap(int64_t layer, QkvTap tap);
  const KVCache& cache() const;  // for tests and tools
  // chunked_h2o only: every memory set the layers build from now on is recorded in
  // (*traces)[layer] (resized to the layer count), for the heavy-hitter analysis; null stops.
  // Records accumulate over prefills: clear them between prompts.
  void set_h2o_traces(std::vector<ChunkedH2OTrace>* traces);

 private:
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> p_;
};

}  // namespace spattn::model
