// The architectures the runner reads, as a table in the shape of llama.cpp's llama-arch.cpp:
// one traits row per architecture (src/model/arch_table.cpp) says how its forward pass differs
// from llama's, and one tensor list (src/model/tensor_table.hpp) says which GGUF tensors it
// has. The reader (load_gguf.cpp), the validator (model.cpp), the maker (model_maker.cpp) and
// the forward pass read them; none of them names an architecture. How to add one:
// docs/development/add-an-architecture.md.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace spattn::model {

// An architecture: the index of its row in the traits table. The rows the code and the tests
// name have a name here (arch_table.cpp checks that they match); a row added after them needs
// none (find_arch finds it by its GGUF name).
enum class Arch : uint8_t { llama, qwen2, qwen3, qwen3moe, phi3, gemma3, gpt_oss };

// Whether a file of the architecture has a part: never (not read, never written), when the
// file has it (read if there; make-model writes it), or always (a file without it is refused).
enum class Presence : uint8_t { absent, optional, required };

// The FFN's gated activation, as llama.cpp's build_ffn / build_moe_ffn run it: SiLU(gate) * up
// (LLM_FFN_SILU), GELU(gate) * up with ggml's tanh-approximated GELU (LLM_FFN_GELU), or
// OpenAI's clamped SwiGLU (LLM_FFN_SWIGLU_OAI_MOE).
enum class FfnAct : uint8_t { silu, gelu, swiglu_oai };

// RoPE scalings a file may ask for (bits of ArchTraits::scalings): Llama 3.1's (divisors in
// rope_freqs.weight), Phi-3's LongRoPE (rope_factors_long / _short), linear (rope.scaling.type
// linear, global layers only) and YaRN with llama.cpp's default betas.
namespace rope_scaling {
inline constexpr unsigned llama3 = 1, longrope = 2, linear = 4, yarn = 8;
}

// How the softmax scale of the scores is set: 1 / sqrt(head dim), or gemma3's rule (1 /
// sqrt(head dim), except the 62-layer model's 1 / sqrt(n_embd / n_head), its
// query_pre_attn_scalar).
enum class AttnScale : uint8_t { inv_sqrt_head_dim, gemma3 };

// A row lists only what it has: every default is "none" (a plain decoder, SiLU-gated FFN).
struct ArchTraits {
  const char* name = "";          // general.architecture, and the prefix of its metadata keys
  std::string_view summary = {};  // what it has, for make-model --help (empty: plain llama-like)
  // Rotate-half pairs (llama.cpp's LLAMA_ROPE_TYPE_NEOX); false: adjacent pairs (_NORM).
  bool rope_neox = false;
  unsigned scalings = 0;                 // rope_scaling bits the loader runs and make-model writes
  Presence qkv_bias = Presence::absent;  // attn_q / attn_k / attn_v .bias
  Presence out_bias = Presence::absent;  // attn_output.bias
  bool qk_norm = false;     // per-head RMSNorm of q and k (attn_q_norm, attn_k_norm) before RoPE
  bool post_norms = false;  // RMSNorm of the attention's, the FFN's output before its add
  // The FFN's input norm is stored as post_attention_norm (llama.cpp's ATTN_POST_NORM), not
  // ffn_norm.
  bool ffn_norm_named_post_attention = false;
  // Wq, Wk, Wv as one attn_qkv matrix (optional: or as three).
  Presence fused_qkv = Presence::absent;
  bool fused_gate_up = false;  // Wgate, Wup as one ffn_up matrix, gate's rows first
  FfnAct ffn_act = FfnAct::silu;
  // Experts (expert_count): refused, taken (llama: Mixtral's layout), or needed. With
  // own_expert_ffn their hidden size is expert_feed_forward_length, else the FFN's.
  Presence experts = Presence::absent;
  bool own_expert_ffn = false;
  bool expert_biases = false;     // biases on the router and each expert's matrices
  bool gating_of_chosen = false;  // weights: the softmax of the chosen logits (llama.cpp's
                                  // SOFTMAX_WEIGHT); else the softmax over all, renormalized
  // attention.sliding_window: not read, read when given, or needed; swa_period: every n-th
  // layer is global when the file gives no pattern (llama.cpp's set_swa_pattern).
  Presence sliding_window = Presence::absent;
  int swa_period = 0;
  // The local layers turn by the global layers' base unless freq_base_swa is given, with
  // their scaling; false: by freq_base_swa (default 10000), unscaled.
  bool swa_rope_scaled = false;
  bool sinks = false;          // attn_sinks: one logit a q head in every softmax's sum
  bool embd_scale = false;     // the embeddings times sqrt(n_embd)
  bool logit_softcap = false;  // final_logit_softcapping is read
  // Multi-head latent attention (DeepSeek-V2 section 2.1): q through a low-rank latent
  // (attention.q_lora_rank; 0: one attn_q matrix), k and v from a shared kv latent
  // (attention.kv_lora_rank) through attn_kv_b, RoPE on the last rope.dimension_count values
  // of each head with one rope key a token shared by every head, k and v heads of their own
  // sizes (attention.key_length, value_length); an expanded cache of n_head kv heads.
  bool mla = false;
  // DeepSeek's mixture of experts (DeepSeekMoE): the first leading_dense_block_count layers
  // dense, shared experts (ffn_*_shexp) beside the routed ones, a selection bias
  // (exp_probs_b), sigmoid or softmax gating, group-limited routing, normalized and scaled
  // weights as the file's expert_* keys say.
  bool deepseek_moe = false;
  // The latent attention's k and v matrices in the absorbed layout (attn_k_b, each head's
  // [kv latent, k_nope] matrix, and attn_v_b, its [v, kv latent] one; attention.key_length_mla
  // and value_length_mla the heads' sizes) instead of attn_kv_b, always. (A deepseek2 file may
  // hold either layout, as llama.cpp reads it: Config::mla_absorbed is the file's.)
  bool mla_absorbed = false;
  // DeepSeek's sparse attention (DSA): a lightning indexer in every layer (indexer.attn_q_b
  // from the q latent, indexer.attn_k with its LayerNorm, indexer.proj's per-head weights;
  // attention.indexer.head_count, key_length, top_k), whose top-k tokens each query reads.
  bool indexer = false;
  // The indexer's RoPE (on the first rope.dimension_count values of its query heads and key):
  // in NeoX pairs (deepseek32) or adjacent ones (glm-dsa), whatever the attention's type.
  bool indexer_rope_neox = false;
  // The epsilon of the indexer key's LayerNorm: llama.cpp's f_norm_eps, which deepseek32's
  // loader sets to 1e-6 and glm-dsa's leaves at 0.
  float indexer_norm_eps = 0.0f;
  // DeepSeekMoE's gating where the file names none (expert_gating_func absent or 0): sigmoid
  // (glm-dsa's loader) rather than softmax.
  bool sigmoid_gating_by_default = false;
  AttnScale attn_scale = AttnScale::inv_sqrt_head_dim;
  // make-model only: the SentencePiece vocabulary's last tokens (space-separated; llama.cpp's
  // loader looks some up by name) and whether it adds a space before the text.
  std::string_view spm_specials = {};
  bool spm_space_prefix = true;
};

// The row of an architecture.
const ArchTraits& arch_traits(Arch a);
// The row whose general.architecture is `name`, or null.
const ArchTraits* find_arch(std::string_view name);
Arch arch_id(const ArchTraits& t);  // the row's index
const char* arch_name(Arch a);
// The names of the rows `keep` selects, for messages: "a, b or c" (`last`: " or ", " and ").
std::string arch_names(bool (*keep)(const ArchTraits&), const char* last = " or ");
// The names of the rows whose scalings have the rope_scaling bit `scaling`.
std::string arch_names_scaled(unsigned scaling, const char* last = " or ");
// Every row's name and summary: "llama, qwen2 (q/k/v biases), ... or gpt-oss (...)".
std::string arch_summaries();

}  // namespace spattn::model
