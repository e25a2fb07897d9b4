// Made-up llama-family models: a GGUF file of any shape with seeded random weights and a
// small made-up vocabulary, so tests need no download and benchmarks can run at realistic
// shapes (for example Llama-3.2-1B's). Tensor names, shapes and metadata keys are those
// llama.cpp writes for the `llama`, `qwen2`, `qwen3`, `qwen3moe`, `phi3`, `gemma3` and
// `gpt-oss` architectures.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spattn/gguf.hpp"

namespace spattn {

struct ModelShape {
  // "llama", "qwen2" (q/k/v biases), "qwen3" (q/k head norms), "qwen3moe" (qwen3 with a
  // mixture of experts: `experts` below), "phi3" (fused attn_qkv and
  // gate-up ffn_up matrices, rotate-half RoPE), "gemma3" (q/k head norms, post-attention and
  // post-FFN norms, GeGLU, sliding-window layers: every sixth global) or "gpt-oss" (biases,
  // attention sinks, every second layer global, experts with biases and OpenAI's SwiGLU)
  std::string arch = "llama";
  int64_t layers = 2;
  int64_t dim = 64;  // embedding length
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 0;  // 0: dim / heads
  int64_t ffn = 128;     // SwiGLU hidden size
  int64_t vocab = 512;
  int64_t context = 2048;
  gguf::GgmlType type = gguf::GgmlType::f32;  // matrices and embedding; norms/biases are f32
  bool tied = false;                          // no output.weight: the head reuses token_embd.weight
  float rope_base = 10000.0f;
  // "llama3": Llama 3.1's RoPE frequency scaling, written as rope_freqs.weight (what
  // llama.cpp's converter makes of HF's rope_scaling) from the four numbers below; "longrope"
  // (phi3): Phi-3's, written as rope_factors_long / rope_factors_short with the original
  // context and attn factor (longrope_factors below); "linear" (gemma3): rope.scaling.type
  // linear with rope.scaling.factor = rope_factor, which llama.cpp runs on global layers only;
  // "yarn" (llama, qwen2, qwen3, qwen3moe, gpt-oss): rope.scaling.type yarn with rope_factor and
  // rope_original_context (Qwen3's 128K setting: factor 4 from 32768); "": none.
  std::string rope_scaling;
  float rope_factor = 8.0f, rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f;
  int64_t rope_original_context = 8192;
  float rms_eps = 1e-5f;
  int64_t sliding_window = 1024;  // gemma3, gpt-oss: attention.sliding_window, local layers
  // Mixture of experts (qwen3moe and gpt-oss need it; llama takes it: Mixtral's layout):
  // `experts` experts of hidden size expert_ffn (qwen3moe, gpt-oss; llama's use `ffn`),
  // `experts_used` of them a token, chosen by a router (ffn_gate_inp). 0: a dense FFN.
  int64_t experts = 0, experts_used = 0, expert_ffn = 0;
  // deepseek2 (multi-head latent attention, DeepSeekMoE): head_dim is a k head's (non-rope
  // + rope_dim), v_head_dim a v head's; q_lora (0: q from one matrix) and kv_lora the latents;
  // the first dense_layers layers dense, shared_experts beside the routed ones, expert_groups
  // groups of which groups_used are routed to (0: no groups), sigmoid gating (else softmax),
  // weights normalized (weights_norm) and scaled (weights_scale) as the file says.
  int64_t rope_dim = 0, v_head_dim = 0, q_lora = 0, kv_lora = 0;
  int64_t dense_layers = 0, shared_experts = 0, expert_groups = 0, groups_used = 0;
  bool sigmoid_gating = true, weights_norm = true;
  float weights_scale = 1.0f;
  // deepseek2's YaRN: mscale_all_dim (written as rope.scaling.yarn_log_multiplier = 0.1 times
  // it, as llama.cpp's converter does; 0: not written).
  float yarn_log_mul = 0.0f;
  // deepseek2 in the absorbed layout (attn_k_b / attn_v_b and the _mla key lengths, as
  // deepseek32's and as llama.cpp's current converter writes DeepSeek V2/V3) rather than
  // attn_kv_b whole (deepseek32 and glm-dsa: always).
  bool mla_absorbed = false;
  // deepseek32 (DSA): the lightning indexer's heads, their size (a power of two from 64) and
  // the tokens a query keeps (attention.indexer.*).
  int64_t indexer_heads = 0, indexer_dim = 0, indexer_top_k = 0;
  // Per layer, 1 for a layer with its own indexer, 0 for one that attends over the last such
  // layer's selection (GLM-5.2's attention.indexer.types; the first must be 1); empty: no key,
  // every layer its own.
  std::vector<uint32_t> indexer_types;
  std::string tokenizer;  // "gpt2" or "llama"; empty: gpt2 when vocab >= 257, else llama
  uint64_t seed = 0;

  int64_t head_dim_or_default() const { return head_dim > 0 ? head_dim : dim / heads; }
  // An expert's hidden size: expert_ffn where the architecture's experts have their own
  // (qwen3moe's, gpt-oss's: ArchTraits::own_expert_ffn); ffn for llama's.
  int64_t expert_ffn_or_default() const;
};

// Llama-3.2-1B's shape: 16 layers, dim 2048, 32 heads, 8 kv heads, head dim 64, FFN 8192,
// vocab 128256, rope base 500000, tied head, f16.
ModelShape llama_3_2_1b_shape();
// Llama-3.1-8B's shape: 32 layers, dim 4096, 32 heads, 8 kv heads, head dim 128, FFN 14336,
// vocab 128256, rope base 500000, untied head, f16, llama3 rope scaling (factor 8, low / high
// frequency factors 1 / 4, original context 8192: its config.json's rope_scaling).
ModelShape llama_3_1_8b_shape();
// Phi-3.5-mini's shape: 32 layers, dim 3072, 32 heads, 32 kv heads, head dim 96, FFN 8192,
// vocab 32064 (SentencePiece), context 131072, untied, f16, LongRoPE from original context 4096.
ModelShape phi_3_5_mini_shape();
// Qwen3-4B's shape: 36 layers, dim 2560, 32 heads, 8 kv heads, head dim 128 (heads x head dim
// 4096 != dim), FFN 9728, vocab 151936, context 40960, rope base 1e6, rms eps 1e-6, tied, f16.
ModelShape qwen3_4b_shape();
// Mistral-7B-v0.3's shape (llama): 32 layers, dim 4096, 32 heads, 8 kv heads, head dim 128,
// FFN 14336, vocab 32768 (SentencePiece), context 32768, rope base 1e6, untied, f16.
ModelShape mistral_7b_shape();
// Gemma-3-4B's text shape (gemma3): 34 layers, dim 2560, 8 heads, 4 kv heads, head dim 256,
// FFN 10240, vocab 262144 (SentencePiece; the converter drops the embedding's unused rows),
// context 131072, sliding window 1024 (five local layers to each global one), rope base 1e6
// on global layers with linear scaling 8, rms eps 1e-6, tied, f16.
ModelShape gemma_3_4b_shape();
// Qwen3-30B-A3B's shape (qwen3moe): 48 layers, dim 2048, 32 heads, 4 kv heads, head dim 128,
// 128 experts of FFN 768, 8 a token, vocab 151936, context 40960, rope base 1e6, rms eps
// 1e-6, untied, f16 (about 61 GB: give --layers for a part of it).
ModelShape qwen3_30b_a3b_shape();
// gpt-oss-20b's shape (gpt-oss): 24 layers, dim 2880, 64 heads, 8 kv heads, head dim 64, 32
// experts of FFN 2880, 4 a token, vocab 201088, context 131072, rope base 150000 with YaRN
// (factor 32 from 4096), sliding window 128 on every second layer, untied, f16 (its release
// stores the experts in MXFP4: llama-quantize ... MXFP4_MOE).
ModelShape gpt_oss_20b_shape();
// DeepSeek-V3's shape (deepseek2; R1 and Kimi K2 share it but for Kimi's 64 heads and 384
// experts): 61 layers (the first 3 dense), dim 7168, 128 heads, head dim 192 (128 + 64 rope),
// v head dim 128, q latent 1536, kv latent 512, FFN 18432, 256 experts of FFN 2048 in 8
// groups (4 routed to), 8 a token, one shared, sigmoid gating, weights normalized and scaled
// by 2.5, vocab 129280, context 163840, YaRN 40 from 4096 (mscale_all_dim 1), rms eps 1e-6,
// untied, f16.
ModelShape deepseek_v3_shape();
// A preset by name ("llama-3.2-1b", "llama-3.1-8b", "phi-3.5-mini", "qwen3-4b",
// "mistral-7b", "gemma-3-4b", "qwen3-30b-a3b", "gpt-oss-20b", "deepseek-v3", "deepseek-v3.2",
// "glm-5": GLM-5's glm-dsa shape, model_maker.cpp's glm_5_shape); Error for any other.
ModelShape preset_shape(const std::string& name);

// Llama 3.1's per-pair RoPE frequency divisors (head dim / 2 of them) for the shape's base,
// head dim and llama3 numbers, as llama.cpp's converter computes rope_freqs: pair p's
// wavelength 2 pi / base^(-2p/d) below original_context / high_freq_factor keeps its
// frequency (1), above original_context / low_freq_factor is slowed by `factor`, and in
// between is blended: 1 / ((1 - s) / factor + s), s = (orig / wavelength - low) / (high - low).
std::vector<float> llama3_rope_factors(const ModelShape& s);

// Made-up LongRoPE divisors (head dim / 2 of them) for a shape with rope_scaling "longrope":
// Phi-3's are searched per model, so these only have their form: short ones near 1, long ones
// rising from 1 at the fastest pair to the stretch context / original context at the slowest.
std::vector<float> longrope_factors(const ModelShape& s, bool long_factors);
// LongRoPE's attention factor for the shape (llama.cpp's converter): sqrt(1 + ln(s) / ln(orig))
// for the stretch s = context / original context when s > 1, else 1.
double longrope_attn_factor(const ModelShape& s);

// Throws Error naming the field when the shape is not one a llama model can have.
void check_shape(const ModelShape& s);

// Number of weights (all tensors) in a model of this shape.
int64_t parameter_count(const ModelShape& s);

// Writes the model. Weights are uniform with standard deviation 1/sqrt(fan_in) (so
// activations keep their scale through the layers), norms 1 + small noise, biases small;
// each tensor row is drawn from its own seeded stream, so the file is the same on every
// machine and for any write order.
void make_model(const std::string& path, const ModelShape& s);

}  // namespace spattn
