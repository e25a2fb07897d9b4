// The traits table: one row per architecture, listing only what it has (every default is
// "none"). Values from llama.cpp's loader and graph for each (llama-model.cpp's hparams and
// rope type, src/models/<arch>.cpp). docs/development/add-an-architecture.md: how to add a row.
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "spattn/arch.hpp"
#include "spattn/error.hpp"

namespace spattn::model {

namespace {

using P = Presence;
namespace rs = rope_scaling;

// A table: rows grouped by hand, not one field a line.
// clang-format off
constexpr ArchTraits kArchs[] = {
    {.name = "llama", .scalings = rs::llama3 | rs::yarn, .experts = P::optional},
    {.name = "qwen2", .summary = "q/k/v biases", .rope_neox = true, .scalings = rs::yarn,
     .qkv_bias = P::required},
    {.name = "qwen3", .summary = "per-head q/k RMSNorm", .rope_neox = true,
     .scalings = rs::yarn, .qk_norm = true},
    {.name = "qwen3moe", .summary = "qwen3 with experts", .rope_neox = true,
     .scalings = rs::yarn, .qk_norm = true, .experts = P::required, .own_expert_ffn = true},
    // Phi-3's sliding window (attention.sliding_window) is not read, as llama.cpp's SWA for
    // phi3 is disabled.
    {.name = "phi3", .summary = "fused qkv and gate-up", .rope_neox = true,
     .scalings = rs::longrope, .fused_qkv = P::optional, .fused_gate_up = true,
     .spm_specials = "<|endoftext|> <|assistant|> <|system|> <|end|> <|user|>"},
    {.name = "gemma3", .summary = "sliding-window layers, GeGLU, post norms",
     .rope_neox = true, .scalings = rs::linear, .qk_norm = true, .post_norms = true,
     .ffn_act = FfnAct::gelu, .sliding_window = P::optional, .swa_period = 6,
     .embd_scale = true, .logit_softcap = true, .attn_scale = AttnScale::gemma3,
     .spm_space_prefix = false},
    // llama.cpp's LLM_ARCH_OPENAI_MOE. Its q, k, v biases are optional, as llama.cpp reads them.
    {.name = "gpt-oss", .summary = "biases, attention sinks, every second layer sliding, experts",
     .rope_neox = true, .scalings = rs::yarn, .qkv_bias = P::optional, .out_bias = P::required,
     .ffn_norm_named_post_attention = true,
     .ffn_act = FfnAct::swiglu_oai, .experts = P::required, .own_expert_ffn = true,
     .expert_biases = true, .gating_of_chosen = true, .sliding_window = P::required,
     .swa_period = 2, .swa_rope_scaled = true, .sinks = true},
    // ByteDance's Seed-OSS (llama.cpp's llama_model_seed_oss): qwen2's graph, its q/k/v biases
    // optional and its FFN norm stored as post_attention_norm.
    {.name = "seed_oss", .summary = "qwen2's layout, FFN norm renamed",
     .rope_neox = true, .qkv_bias = P::optional, .ffn_norm_named_post_attention = true},
    // DeepSeek V2 / V3 / R1, Kimi K2 (llama.cpp's llama_model_deepseek2; adjacent-pair RoPE),
    // in the layout of attn_kv_b (one matrix for every head's k_nope and v).
    {.name = "deepseek2", .summary = "latent attention, shared experts, leading dense layers",
     .scalings = rs::yarn, .experts = P::required, .own_expert_ffn = true, .mla = true, .deepseek_moe = true},
    // DeepSeek V3.2 (llama.cpp's llama_model_deepseek32): deepseek2's layers in the absorbed
    // layout (attn_k_b / attn_v_b, a q latent required) plus DSA's lightning indexer.
    {.name = "deepseek32", .summary = "deepseek2 with DSA's lightning indexer (sparse attention)",
     .scalings = rs::yarn, .experts = P::required, .own_expert_ffn = true, .mla = true,
     .deepseek_moe = true, .mla_absorbed = true, .indexer = true, .indexer_rope_neox = true,
     .indexer_norm_eps = 1e-6f},
    // GLM-5 (llama.cpp's llama_model_glm_dsa): deepseek32's graph with the indexer's RoPE in
    // adjacent pairs, its key's LayerNorm without epsilon, sigmoid gating by default, and no
    // DeepSeek YaRN (its loader reads no yarn_log_multiplier). GLM-5.2's layers sharing another
    // layer's selection (attention.indexer.types) are Config::indexer_shared, any indexer row's.
    {.name = "glm-dsa", .summary = "GLM-5: deepseek32's layout, the indexer's RoPE in adjacent pairs",
     .experts = P::required, .own_expert_ffn = true, .mla = true, .deepseek_moe = true,
     .mla_absorbed = true, .indexer = true, .sigmoid_gating_by_default = true},
};
// clang-format on

// The named ids (arch.hpp) are their rows' indices.
constexpr bool named(Arch a, std::string_view name) {
  return size_t(a) < std::size(kArchs) && name == kArchs[size_t(a)].name;
}
static_assert(named(Arch::llama, "llama") && named(Arch::qwen2, "qwen2") &&
                  named(Arch::qwen3, "qwen3") && named(Arch::qwen3moe, "qwen3moe") &&
                  named(Arch::phi3, "phi3") && named(Arch::gemma3, "gemma3") &&
                  named(Arch::gpt_oss, "gpt-oss"),
              "kArchs: the rows of the named Arch ids, in the enum's order");

// "a, b or c" (last: " or ", " and ", ", ").
std::string join(const std::vector<std::string>& names, const char* last) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "" : i + 1 == names.size() ? last : ", ") + names[i];
  return s;
}

}  // namespace

const ArchTraits& arch_traits(Arch a) {
  SPATTN_CHECK(size_t(a) < std::size(kArchs), "internal: architecture id ", int(a), " has no row");
  return kArchs[size_t(a)];
}

const ArchTraits* find_arch(std::string_view name) {
  for (const ArchTraits& t : kArchs)
    if (name == t.name) return &t;
  return nullptr;
}

Arch arch_id(const ArchTraits& t) { return Arch(&t - kArchs); }

const char* arch_name(Arch a) { return arch_traits(a).name; }

std::string arch_names(bool (*keep)(const ArchTraits&), const char* last) {
  std::vector<std::string> names;
  for (const ArchTraits& t : kArchs)
    if (keep(t)) names.push_back(t.name);
  return join(names, last);
}

std::string arch_names_scaled(unsigned scaling, const char* last) {
  std::vector<std::string> names;
  for (const ArchTraits& t : kArchs)
    if (t.scalings & scaling) names.push_back(t.name);
  return join(names, last);
}

std::string arch_summaries() {
  std::vector<std::string> names;
  for (const ArchTraits& t : kArchs)
    names.push_back(t.summary.empty() ? std::string(t.name)
                                      : std::string(t.name) + " (" + std::string(t.summary) + ")");
  return join(names, " or ");
}

}  // namespace spattn::model
