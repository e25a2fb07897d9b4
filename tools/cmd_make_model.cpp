// `spattn make-model`: write a made-up llama-family GGUF model (seeded random weights, a
// small made-up vocabulary) of any shape, for tests and benchmarks without a download.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "spattn/arch.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model_maker.hpp"

namespace spattn::cli {
namespace {

struct MakeModelOptions {
  ModelShape shape;
  std::string preset;
  std::string type = "f32";
  std::string out;
  // Flags given explicitly override the preset.
  CLI::Option *layers = nullptr, *dim = nullptr, *heads = nullptr, *kv_heads = nullptr,
              *head_dim = nullptr, *ffn = nullptr, *vocab = nullptr, *context = nullptr,
              *type_opt = nullptr, *rope = nullptr, *arch = nullptr, *rope_scaling = nullptr,
              *rope_factor = nullptr, *rope_low = nullptr, *rope_high = nullptr,
              *rope_orig = nullptr, *tokenizer = nullptr, *window = nullptr, *experts = nullptr,
              *experts_used = nullptr, *expert_ffn = nullptr;
  // deepseek2's sizes: (option, field) pairs, the preset's where not given.
  std::vector<std::pair<CLI::Option*, int64_t ModelShape::*>> latent;
  bool tied = false, untied = false;
};

gguf::GgmlType parse_type(const std::string& s) {
  if (s == "f32") return gguf::GgmlType::f32;
  if (s == "f16") return gguf::GgmlType::f16;
  if (s == "bf16") return gguf::GgmlType::bf16;
  if (s == "q8_0") return gguf::GgmlType::q8_0;
  detail::fail("--type must be f32, f16, bf16 or q8_0, got '", s, "'");
}

// ", sliding window W (every n-th layer global)" for an architecture with one (its row's
// default pattern, which make-model writes), else "".
std::string sliding_window_note(const ModelShape& s) {
  const model::ArchTraits* t = model::find_arch(s.arch);
  if (!t || t->sliding_window == model::Presence::absent) return {};
  static const char* const kOrdinal[] = {"", "", "second", "third", "fourth", "fifth", "sixth"};
  const int n = t->swa_period;
  return fmt::format(", sliding window {} (every {} layer global)", s.sliding_window,
                     n > 0 && n < 7 ? std::string(kOrdinal[n]) : fmt::format("{}th", n));
}

void run_make_model(MakeModelOptions& o) {
  SPATTN_CHECK(!o.out.empty(), "-o/--out: the model file to write is required");
  ModelShape s = o.shape;
  if (!o.preset.empty()) {
    const ModelShape p = preset_shape(o.preset);
    // The preset's fields, except those given on the command line.
    if (!o.arch->count()) s.arch = p.arch;
    if (!o.layers->count()) s.layers = p.layers;
    if (!o.dim->count()) s.dim = p.dim;
    if (!o.heads->count()) s.heads = p.heads;
    if (!o.kv_heads->count()) s.kv_heads = p.kv_heads;
    if (!o.head_dim->count()) s.head_dim = p.head_dim;
    if (!o.ffn->count()) s.ffn = p.ffn;
    if (!o.vocab->count()) s.vocab = p.vocab;
    if (!o.context->count()) s.context = p.context;
    if (!o.rope->count()) s.rope_base = p.rope_base;
    if (!o.rope_scaling->count()) s.rope_scaling = p.rope_scaling;
    if (!o.rope_factor->count()) s.rope_factor = p.rope_factor;
    if (!o.rope_low->count()) s.rope_low_freq_factor = p.rope_low_freq_factor;
    if (!o.rope_high->count()) s.rope_high_freq_factor = p.rope_high_freq_factor;
    if (!o.rope_orig->count()) s.rope_original_context = p.rope_original_context;
    if (!o.window->count()) s.sliding_window = p.sliding_window;
    if (!o.experts->count()) s.experts = p.experts;
    if (!o.experts_used->count()) s.experts_used = p.experts_used;
    if (!o.expert_ffn->count()) s.expert_ffn = p.expert_ffn;
    for (const auto& [opt, field] : o.latent)
      if (!opt->count()) s.*field = p.*field;
    s.sigmoid_gating = p.sigmoid_gating;
    s.weights_norm = p.weights_norm;
    s.weights_scale = p.weights_scale;
    s.yarn_log_mul = p.yarn_log_mul;
    s.rms_eps = p.rms_eps;
    if (!o.type_opt->count()) o.type = "f16";
    if (!o.tokenizer->count()) s.tokenizer = p.tokenizer;
    if (!o.untied) s.tied = p.tied;
  }
  if (o.tied) s.tied = true;
  if (o.untied) s.tied = false;
  s.type = parse_type(o.type);
  check_shape(s);
  make_model(o.out, s);
  fmt::print(
      "{}: {} {} layers, dim {}, heads {}/{} (head dim {}), ffn {}, vocab {}, context {}, "
      "{}{}{}{}{}, {:.1f}M parameters\n",
      o.out, s.arch, s.layers, s.dim, s.heads, s.kv_heads, s.head_dim_or_default(), s.ffn, s.vocab,
      s.context, o.type, s.tied ? ", tied head" : "",
      s.experts > 0 ? fmt::format(", {} experts ({} a token, ffn {})", s.experts, s.experts_used,
                                  s.expert_ffn_or_default())
                    : std::string(),
      sliding_window_note(s),
      s.rope_scaling == "llama3"
          ? fmt::format(", llama3 rope scaling (factor {}, low/high {}/{}, original "
                        "context {})",
                        s.rope_factor, s.rope_low_freq_factor, s.rope_high_freq_factor,
                        s.rope_original_context)
      : s.rope_scaling == "longrope"
          ? fmt::format(", LongRoPE (original context {}, attn factor {:.4f})",
                        s.rope_original_context, longrope_attn_factor(s))
      : s.rope_scaling == "linear"
          ? fmt::format(", linear rope scaling {} (global layers)", s.rope_factor)
      : s.rope_scaling == "yarn" ? fmt::format(", yarn rope scaling {} from original context {}",
                                               s.rope_factor, s.rope_original_context)
                                 : std::string(),
      double(parameter_count(s)) / 1e6);
}

}  // namespace

void add_make_model_command(CLI::App& root) {
  auto o = std::make_shared<MakeModelOptions>();
  ModelShape& s = o->shape;
  CLI::App* cmd = root.add_subcommand(
      "make-model", "write a made-up llama-family GGUF model (seeded random weights)");
  cmd->add_option("-o,--out", o->out, "GGUF file to write")->required();
  cmd->add_option("--preset", o->preset,
                  "start from a known shape: llama-3.2-1b (16 layers, dim 2048, 32/8 heads, head "
                  "dim 64, ffn 8192, vocab 128256, f16, tied) or llama-3.1-8b (32 layers, dim "
                  "4096, 32/8 heads, head dim 128, ffn 14336, untied, llama3 rope scaling 8 / 1 "
                  "/ 4 / 8192) or phi-3.5-mini (phi3, 32 layers, dim 3072, 32/32 heads, head dim "
                  "96, ffn 8192, vocab 32064, untied, LongRoPE from 4096), qwen3-4b (36 layers, "
                  "dim 2560, 32/8 heads, head dim 128, ffn 9728, vocab 151936, tied) or "
                  "mistral-7b (llama, 32 layers, dim 4096, 32/8 heads, ffn 14336, vocab 32768, "
                  "rope base 1e6) or gemma-3-4b (gemma3, 34 layers, dim 2560, 8/4 heads, head "
                  "dim 256, ffn 10240, vocab 262144, tied, window 1024, linear rope scaling 8 "
                  "on global layers) or qwen3-30b-a3b (qwen3moe, 48 layers, dim 2048, 32/4 heads, "
                  "head dim 128, 128 experts of ffn 768, 8 a token, vocab 151936) or gpt-oss-20b "
                  "(gpt-oss, 24 layers, dim 2880, 64/8 heads, head dim 64, 32 experts of ffn "
                  "2880, 4 a token, vocab 201088, yarn 32 from 4096, window 128) or deepseek-v3 "
                  "(deepseek2, 61 layers (3 dense), dim 7168, 128 heads, head dim 192 (rope 64), "
                  "v 128, q/kv latents 1536/512, 256 experts of ffn 2048 in 8 groups (4 used), "
                  "8 a token, 1 shared, sigmoid gating, scale 2.5, vocab 129280) or "
                  "deepseek-v3.2 (deepseek32: deepseek-v3's shape in the absorbed layout with "
                  "the lightning indexer, 64 heads of 128, top-k 2048) or glm-5 (glm-dsa, 78 "
                  "layers (3 dense), dim 6144, 64 heads, head dim 256 (rope 64), v 256, q/kv "
                  "latents 2048/512, ffn 12288, 256 experts of ffn 2048 (8 a token, 1 shared), "
                  "rope base 1e6, indexer 32 heads of 128, top-k 2048, vocab 154880); other "
                  "flags override it");
  o->arch =
      cmd->add_option("--arch", s.arch, spattn::model::arch_summaries())->capture_default_str();
  o->layers = cmd->add_option("--layers", s.layers, "transformer blocks")->capture_default_str();
  o->dim = cmd->add_option("--dim", s.dim, "embedding length")->capture_default_str();
  o->heads = cmd->add_option("--heads", s.heads, "query heads")->capture_default_str();
  o->kv_heads = cmd->add_option("--kv-heads", s.kv_heads, "key/value heads")->capture_default_str();
  o->head_dim = cmd->add_option("--head-dim", s.head_dim, "head dimension (0: dim / heads)")
                    ->capture_default_str();
  o->ffn = cmd->add_option("--ffn", s.ffn, "SwiGLU hidden size")->capture_default_str();
  o->vocab = cmd->add_option("--vocab", s.vocab, "vocabulary size")->capture_default_str();
  o->context = cmd->add_option("--context", s.context, "training context length (metadata)")
                   ->capture_default_str();
  o->type_opt = cmd->add_option("--type", o->type, "weight type: f32, f16, bf16, q8_0")
                    ->capture_default_str();
  o->rope =
      cmd->add_option("--rope-base", s.rope_base, "RoPE frequency base")->capture_default_str();
  o->rope_scaling = cmd->add_option("--rope-scaling", s.rope_scaling,
                                    "none, llama3 (Llama 3.1's: writes rope_freqs.weight), "
                                    "longrope (phi3: rope_factors_long / _short), linear "
                                    "(gemma3's global layers: --rope-factor) or yarn (llama, "
                                    "qwen2, qwen3, qwen3moe, gpt-oss: --rope-factor, "
                                    "--rope-original-context)");
  o->rope_factor = cmd->add_option("--rope-factor", s.rope_factor, "llama3, linear, yarn: factor")
                       ->capture_default_str();
  o->rope_low = cmd->add_option("--rope-low-freq-factor", s.rope_low_freq_factor,
                                "llama3: low frequency factor")
                    ->capture_default_str();
  o->rope_high = cmd->add_option("--rope-high-freq-factor", s.rope_high_freq_factor,
                                 "llama3: high frequency factor")
                     ->capture_default_str();
  o->rope_orig = cmd->add_option("--rope-original-context", s.rope_original_context,
                                 "llama3, longrope, yarn: original context length")
                     ->capture_default_str();
  o->window = cmd->add_option("--sliding-window", s.sliding_window,
                              "gemma3, gpt-oss: the local layers' window (gemma3: five local "
                              "to each global; gpt-oss: one)")
                  ->capture_default_str();
  o->experts =
      cmd->add_option("--experts", s.experts,
                      "qwen3moe, gpt-oss, deepseek2, llama: experts a layer (0: a dense FFN)")
          ->capture_default_str();
  o->experts_used =
      cmd->add_option("--experts-used", s.experts_used, "experts a token")->capture_default_str();
  o->expert_ffn = cmd->add_option("--expert-ffn", s.expert_ffn,
                                  "qwen3moe, gpt-oss, deepseek2: an expert's hidden size")
                      ->capture_default_str();
  const auto latent = [&](const char* name, int64_t ModelShape::*field, const char* what) {
    o->latent.emplace_back(cmd->add_option(name, s.*field, what)->capture_default_str(), field);
  };
  latent("--rope-dim", &ModelShape::rope_dim, "deepseek2: the rope part of a k head");
  latent("--v-head-dim", &ModelShape::v_head_dim, "deepseek2: a v head's size");
  latent("--q-lora", &ModelShape::q_lora, "deepseek2: the q latent's size (0: none)");
  latent("--kv-lora", &ModelShape::kv_lora, "deepseek2: the kv latent's size");
  latent("--dense-layers", &ModelShape::dense_layers, "deepseek2: leading layers with a dense FFN");
  latent("--indexer-heads", &ModelShape::indexer_heads,
         "deepseek32: the lightning indexer's heads");
  latent("--indexer-dim", &ModelShape::indexer_dim,
         "deepseek32: an indexer head's size (a power of two from 64)");
  latent("--indexer-top-k", &ModelShape::indexer_top_k,
         "deepseek32: the tokens each query attends to (attention.indexer.top_k)");
  cmd->add_option("--indexer-types", s.indexer_types,
                  "deepseek32, glm-dsa: 1 or 0 a layer, comma-separated: its own indexer, or the "
                  "last such layer's selection (GLM-5.2's attention.indexer.types; the first 1)")
      ->delimiter(',');
  latent("--shared-experts", &ModelShape::shared_experts, "deepseek2: shared experts");
  latent("--expert-groups", &ModelShape::expert_groups,
         "deepseek2: groups of experts for group-limited routing (0: none)");
  latent("--groups-used", &ModelShape::groups_used, "deepseek2: the groups a token routes to");
  o->tokenizer = cmd->add_option(
      "--tokenizer", s.tokenizer,
      "gpt2 (byte-level BPE) or llama (SentencePiece); default gpt2 when --vocab >= 257");
  cmd->add_flag("--mla-absorbed", s.mla_absorbed,
                "deepseek2: the latent attention in the absorbed layout (attn_k_b / attn_v_b and "
                "the _mla key lengths, as current converters write it) rather than attn_kv_b");
  cmd->add_flag("--tied", o->tied, "no output.weight: the head reuses the token embedding");
  cmd->add_flag("--untied", o->untied, "write output.weight (overrides a preset's tied head)");
  cmd->add_option("--seed", s.seed, "weight seed")->capture_default_str();
  cmd->callback([o] { run_make_model(*o); });
}

}  // namespace spattn::cli
