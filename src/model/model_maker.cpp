// Made-up llama-family GGUF models (see include/spattn/model_maker.hpp).
#include "spattn/model_maker.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "eval/prng.hpp"
#include "model/tensor_table.hpp"
#include "model/tokenizer_impl.hpp"
#include "spattn/arch.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"

namespace spattn {

namespace {

using gguf::GgmlType;

uint64_t name_hash(const std::string& s) {  // FNV-1a: a stable stream tag per tensor name
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  return h;
}

// Adds a tensor whose row r holds values drawn from stream (seed, name, r):
// centre + uniform with standard deviation `sd`.
void add_random(gguf::Writer& w, const std::string& name, GgmlType type, std::vector<int64_t> ne,
                uint64_t seed, float centre, float sd) {
  const int64_t n = ne[0];
  const uint64_t tensor_seed = eval::stream_seed(seed, name_hash(name));
  const double half = sd * std::sqrt(3.0);  // uniform on [-a, a] has sd a / sqrt(3)
  w.add_tensor(name, type, std::move(ne), [=](int64_t row, uint8_t* dst) {
    eval::Rng rng(eval::stream_seed(tensor_seed, uint64_t(row)));
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = centre + float(rng.uniform(-half, half));
    gguf::quantize_row(type, x.data(), dst, n);
  });
}

// A GPT-2 style byte-level vocabulary: <|endoftext|> (BOS/EOS), the 256 byte stand-ins, then
// merged tokens, each with its merge, made from pairs of letters and earlier merges.
void add_bpe_vocab(gguf::Writer& w, int64_t vocab, uint64_t seed) {
  std::vector<std::string> toks = {"<|endoftext|>"};
  std::vector<int32_t> types = {3};
  for (int b = 0; b < 256; ++b) {
    toks.push_back(byte_to_unicode(uint8_t(b)));
    types.push_back(1);
  }
  std::set<std::string> seen(toks.begin(), toks.end());
  std::vector<std::string> merges;
  // Parts merges are built from: lower-case letters, space + letter, then every merged token.
  std::vector<std::string> parts;
  for (char c = 'a'; c <= 'z'; ++c) parts.push_back(std::string(1, c));
  parts.push_back(byte_to_unicode(' '));
  eval::Rng rng(eval::stream_seed(seed, name_hash("vocab")));
  while (int64_t(toks.size()) < vocab) {
    const std::string& a = parts[size_t(rng.range(0, int64_t(parts.size()) - 1))];
    const std::string& b =
        parts[size_t(rng.range(0, std::min<int64_t>(25, int64_t(parts.size()) - 1)))];
    const std::string m = a + b;
    if (m.size() > 24 || !seen.insert(m).second) continue;
    merges.push_back(a + " " + b);
    toks.push_back(m);
    types.push_back(1);
    parts.push_back(m);
  }
  w.set("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.pre", "gpt-2");
  w.set("tokenizer.ggml.tokens", toks);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.merges", merges);
  w.set("tokenizer.ggml.bos_token_id", uint32_t(0));
  w.set("tokenizer.ggml.eos_token_id", uint32_t(0));
  w.set("tokenizer.ggml.add_bos_token", true);
}

// A SentencePiece style vocabulary: <unk>, <s>, </s>, the byte tokens when there is room,
// U+2581, printable ASCII, then pieces with falling scores.
// `specials` (control tokens) take the last ids, as a model's added tokens do.
void add_spm_vocab(gguf::Writer& w, int64_t vocab, uint64_t seed,
                   const std::vector<std::string>& specials = {}) {
  SPATTN_CHECK(vocab >= 3 + int64_t(specials.size()) + 1, "model: --vocab ", vocab,
               " leaves no room for the ", specials.size(), " special tokens");
  const int64_t base = vocab - int64_t(specials.size());
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  if (base >= 3 + 256 + 1) {
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      toks.push_back(buf);
      types.push_back(6);
    }
  }
  const std::string space = "\xe2\x96\x81";
  std::vector<std::string> parts = {space};
  for (char c = '!'; c <= '~'; ++c) parts.push_back(std::string(1, c));
  std::set<std::string> seen(toks.begin(), toks.end());
  for (const std::string& p : parts) {
    if (int64_t(toks.size()) >= base) break;
    toks.push_back(p);
    types.push_back(1);
    seen.insert(p);
  }
  eval::Rng rng(eval::stream_seed(seed, name_hash("vocab")));
  while (int64_t(toks.size()) < base) {
    const std::string& a = parts[size_t(rng.range(0, int64_t(parts.size()) - 1))];
    const std::string& b =
        parts[size_t(rng.range(1, std::min<int64_t>(95, int64_t(parts.size()) - 1)))];
    const std::string m = a + b;
    if (m.size() > 24 || !seen.insert(m).second) continue;
    toks.push_back(m);
    types.push_back(1);
    parts.push_back(m);
  }
  for (const std::string& t : specials) {
    toks.push_back(t);
    types.push_back(3);
  }
  std::vector<float> scores(toks.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -float(i);
  w.set("tokenizer.ggml.model", "llama");
  w.set("tokenizer.ggml.tokens", toks);
  w.set("tokenizer.ggml.scores", scores);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.bos_token_id", uint32_t(1));
  w.set("tokenizer.ggml.eos_token_id", uint32_t(2));
  w.set("tokenizer.ggml.unknown_token_id", uint32_t(0));
  w.set("tokenizer.ggml.add_bos_token", true);
}

uint32_t file_type(GgmlType t) {  // llama.cpp's LLAMA_FTYPE_* for "all f32", "mostly f16", ...
  // make-model writes only these types (a table, not a switch over ggml's every type).
  constexpr std::pair<GgmlType, uint32_t> kFileTypes[] = {
      {GgmlType::f32, 0}, {GgmlType::f16, 1}, {GgmlType::q8_0, 7}, {GgmlType::bf16, 32}};
  for (const auto& [type, ftype] : kFileTypes)
    if (type == t) return ftype;
  SPATTN_CHECK(false, "make-model: no llama.cpp file type for weights of type ",
               gguf::type_name(t));
  return 0;
}

}  // namespace

ModelShape llama_3_2_1b_shape() {
  ModelShape s;
  s.arch = "llama";
  s.layers = 16;
  s.dim = 2048;
  s.heads = 32;
  s.kv_heads = 8;
  s.head_dim = 64;
  s.ffn = 8192;
  s.vocab = 128256;
  s.context = 131072;
  s.type = GgmlType::f16;
  s.tied = true;
  s.rope_base = 500000.0f;
  return s;
}

ModelShape llama_3_1_8b_shape() {
  ModelShape s = llama_3_2_1b_shape();
  s.layers = 32;
  s.dim = 4096;
  s.heads = 32;
  s.kv_heads = 8;
  s.head_dim = 128;
  s.ffn = 14336;
  s.tied = false;  // Llama-3.1-8B stores output.weight
  s.rope_scaling = "llama3";
  s.rope_factor = 8.0f;
  s.rope_low_freq_factor = 1.0f;
  s.rope_high_freq_factor = 4.0f;
  s.rope_original_context = 8192;
  return s;
}

ModelShape phi_3_5_mini_shape() {
  ModelShape s;
  s.arch = "phi3";
  s.layers = 32;
  s.dim = 3072;
  s.heads = 32;
  s.kv_heads = 32;
  s.head_dim = 96;
  s.ffn = 8192;
  s.vocab = 32064;
  s.context = 131072;
  s.type = GgmlType::f16;
  s.tied = false;
  s.rope_base = 10000.0f;
  s.rope_scaling = "longrope";
  s.rope_original_context = 4096;
  s.tokenizer = "llama";
  return s;
}

ModelShape qwen3_4b_shape() {
  ModelShape s;
  s.arch = "qwen3";
  s.layers = 36;
  s.dim = 2560;
  s.heads = 32;
  s.kv_heads = 8;
  s.head_dim = 128;
  s.ffn = 9728;
  s.vocab = 151936;
  s.context = 40960;
  s.type = GgmlType::f16;
  s.tied = true;
  s.rope_base = 1000000.0f;
  s.rms_eps = 1e-6f;
  return s;
}

ModelShape mistral_7b_shape() {
  ModelShape s;
  s.arch = "llama";  // llama.cpp reads Mistral's dense models as llama
  s.layers = 32;
  s.dim = 4096;
  s.heads = 32;
  s.kv_heads = 8;
  s.head_dim = 128;
  s.ffn = 14336;
  s.vocab = 32768;
  s.context = 32768;
  s.type = GgmlType::f16;
  s.tied = false;
  s.rope_base = 1000000.0f;
  s.tokenizer = "llama";
  return s;
}

ModelShape gemma_3_4b_shape() {
  ModelShape s;
  s.arch = "gemma3";
  s.layers = 34;
  s.dim = 2560;
  s.heads = 8;
  s.kv_heads = 4;
  s.head_dim = 256;
  s.ffn = 10240;
  s.vocab = 262144;
  s.context = 131072;
  s.type = GgmlType::f16;
  s.tied = true;
  s.rope_base = 1000000.0f;
  s.rope_scaling = "linear";
  s.rope_factor = 8.0f;
  s.rms_eps = 1e-6f;
  s.sliding_window = 1024;
  s.tokenizer = "llama";
  return s;
}

ModelShape qwen3_30b_a3b_shape() {
  ModelShape s;
  s.arch = "qwen3moe";
  s.layers = 48;
  s.dim = 2048;
  s.heads = 32;
  s.kv_heads = 4;
  s.head_dim = 128;
  s.ffn = 6144;  // feed_forward_length as its file states it; the experts use expert_ffn
  s.experts = 128;
  s.experts_used = 8;
  s.expert_ffn = 768;
  s.vocab = 151936;
  s.context = 40960;
  s.type = GgmlType::f16;
  s.tied = false;
  s.rope_base = 1e6f;
  s.rms_eps = 1e-6f;
  return s;
}

ModelShape gpt_oss_20b_shape() {
  ModelShape s;
  s.arch = "gpt-oss";
  s.layers = 24;
  s.dim = 2880;
  s.heads = 64;
  s.kv_heads = 8;
  s.head_dim = 64;
  s.ffn = 2880;
  s.experts = 32;
  s.experts_used = 4;
  s.expert_ffn = 2880;
  s.vocab = 201088;
  s.context = 131072;
  s.type = GgmlType::f16;
  s.tied = false;
  s.rope_base = 150000.0f;
  s.rope_scaling = "yarn";
  s.rope_factor = 32.0f;
  s.rope_original_context = 4096;
  s.sliding_window = 128;
  return s;
}

ModelShape deepseek_v3_shape() {
  ModelShape s;
  s.arch = "deepseek2";
  s.layers = 61;
  s.dim = 7168;
  s.heads = 128;
  s.kv_heads = 128;
  s.head_dim = 192;
  s.rope_dim = 64;
  s.v_head_dim = 128;
  s.q_lora = 1536;
  s.kv_lora = 512;
  s.ffn = 18432;
  s.experts = 256;
  s.experts_used = 8;
  s.expert_ffn = 2048;
  s.dense_layers = 3;
  s.shared_experts = 1;
  s.expert_groups = 8;
  s.groups_used = 4;
  s.sigmoid_gating = true;
  s.weights_norm = true;
  s.weights_scale = 2.5f;
  s.vocab = 129280;
  s.context = 163840;
  s.type = GgmlType::f16;
  s.tied = false;
  s.rope_base = 10000.0f;
  s.rope_scaling = "yarn";
  s.rope_factor = 40.0f;
  s.rope_original_context = 4096;
  s.yarn_log_mul = 1.0f;
  s.rms_eps = 1e-6f;
  return s;
}

// DeepSeek V3.2: V3's shape in the absorbed layout plus the lightning indexer (64 heads of 128,
// 2048 tokens a query), as its HF config.json has it.
ModelShape deepseek_v3_2_shape() {
  ModelShape s = deepseek_v3_shape();
  s.arch = "deepseek32";
  s.indexer_heads = 64;
  s.indexer_dim = 128;
  s.indexer_top_k = 2048;
  return s;
}

// GLM-5 (zai-org/GLM-5's config.json, llama.cpp's glm-dsa): 78 layers (3 dense), dim 6144, 64
// heads of k 256 (rope 64) and v 256, q/kv latents 2048/512, 256 experts of FFN 2048 (8 a
// token, one group), one shared, sigmoid gating, routed scale 2.5, rope base 1e6 without
// scaling, the indexer's 32 heads of 128 and top-k 2048.
ModelShape glm_5_shape() {
  ModelShape s = deepseek_v3_2_shape();
  s.arch = "glm-dsa";
  s.layers = 78;
  s.dim = 6144;
  s.heads = 64;
  s.kv_heads = 64;
  s.head_dim = 256;
  s.rope_dim = 64;
  s.v_head_dim = 256;
  s.q_lora = 2048;
  s.kv_lora = 512;
  s.ffn = 12288;
  s.expert_groups = 0;
  s.groups_used = 0;
  s.vocab = 154880;
  s.context = 202752;
  s.rope_base = 1e6f;
  s.rope_scaling = "";
  s.yarn_log_mul = 0.0f;
  s.rms_eps = 1e-5f;
  s.indexer_heads = 32;
  s.indexer_dim = 128;
  s.indexer_top_k = 2048;
  return s;
}

ModelShape preset_shape(const std::string& name) {
  if (name == "llama-3.2-1b") return llama_3_2_1b_shape();
  if (name == "llama-3.1-8b") return llama_3_1_8b_shape();
  if (name == "phi-3.5-mini") return phi_3_5_mini_shape();
  if (name == "qwen3-4b") return qwen3_4b_shape();
  if (name == "mistral-7b") return mistral_7b_shape();
  if (name == "gemma-3-4b") return gemma_3_4b_shape();
  if (name == "qwen3-30b-a3b") return qwen3_30b_a3b_shape();
  if (name == "gpt-oss-20b") return gpt_oss_20b_shape();
  if (name == "deepseek-v3") return deepseek_v3_shape();
  if (name == "deepseek-v3.2") return deepseek_v3_2_shape();
  if (name == "glm-5") return glm_5_shape();
  detail::fail(
      "--preset must be llama-3.2-1b, llama-3.1-8b, phi-3.5-mini, qwen3-4b, "
      "mistral-7b, gemma-3-4b, qwen3-30b-a3b, gpt-oss-20b, deepseek-v3, deepseek-v3.2 or glm-5, "
      "got '",
      name, "'");
}

std::vector<float> longrope_factors(const ModelShape& s, bool long_factors) {
  const int64_t P = s.head_dim_or_default() / 2;
  const double stretch = std::max(1.0, double(s.context) / double(s.rope_original_context));
  std::vector<float> f;
  for (int64_t p = 0; p < P; ++p) {
    const double t = P > 1 ? double(p) / double(P - 1) : 0.0;  // 0: the fastest pair
    f.push_back(float(long_factors ? 1.0 + (stretch - 1.0) * t * t : 1.0 + 0.05 * t));
  }
  return f;
}

double longrope_attn_factor(const ModelShape& s) {
  const double stretch = double(s.context) / double(s.rope_original_context);
  return stretch > 1.0
             ? std::sqrt(1.0 + std::log(stretch) / std::log(double(s.rope_original_context)))
             : 1.0;
}

std::vector<float> llama3_rope_factors(const ModelShape& s) {
  const int64_t d = s.head_dim_or_default();
  const double low_wavelen = double(s.rope_original_context) / s.rope_low_freq_factor;
  const double high_wavelen = double(s.rope_original_context) / s.rope_high_freq_factor;
  std::vector<float> f;
  for (int64_t p = 0; p < d / 2; ++p) {
    const double freq = std::pow(double(s.rope_base), -2.0 * double(p) / double(d));
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      f.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      f.push_back(s.rope_factor);
    } else {
      const double sm = (double(s.rope_original_context) / wavelen - s.rope_low_freq_factor) /
                        (s.rope_high_freq_factor - s.rope_low_freq_factor);
      f.push_back(float(1.0 / ((1 - sm) / s.rope_factor + sm)));
    }
  }
  return f;
}

namespace {

// The shape's traits row; Error naming the rows for an architecture without one.
// The architecture's row, in the latent attention's layout the shape asks for
// (ModelShape::mla_absorbed).
model::ArchTraits traits_of(const ModelShape& s) {
  const model::ArchTraits* t = model::find_arch(s.arch);
  SPATTN_CHECK(t != nullptr, "model: --arch must be ",
               model::arch_names([](const model::ArchTraits&) { return true; }), ", got '", s.arch,
               "'");
  SPATTN_CHECK(!s.mla_absorbed || t->mla, "model: --mla-absorbed is for --arch ",
               model::arch_names([](const model::ArchTraits& a) { return a.mla; }));
  model::ArchTraits r = *t;
  r.mla_absorbed = r.mla_absorbed || s.mla_absorbed;
  return r;
}

}  // namespace

int64_t ModelShape::expert_ffn_or_default() const {
  const model::ArchTraits* t = model::find_arch(arch);
  return t && t->own_expert_ffn ? expert_ffn : ffn;
}

void check_shape(const ModelShape& s) {
  using model::Presence;
  namespace rs = model::rope_scaling;
  const model::ArchTraits& t = traits_of(s);
  SPATTN_CHECK(s.experts >= 0 && s.experts <= 512, "model: --experts must be in [0, 512], got ",
               s.experts);
  SPATTN_CHECK(t.experts != Presence::required || s.experts > 0, "model: ", s.arch,
               " needs --experts > 0");
  // Those that need experts, then those that take them.
  SPATTN_CHECK(
      s.experts == 0 || t.experts != Presence::absent, "model: --experts is for --arch ",
      model::arch_names(
          [](const model::ArchTraits& a) { return a.experts == model::Presence::required; }, ", "),
      " or ", model::arch_names([](const model::ArchTraits& a) {
        return a.experts == model::Presence::optional;
      }),
      ", got '", s.arch, "'");
  if (s.experts > 0) {
    SPATTN_CHECK(s.experts_used >= 1 && s.experts_used <= s.experts,
                 "model: --experts-used must be in [1, --experts = ", s.experts, "], got ",
                 s.experts_used);
    SPATTN_CHECK(s.expert_ffn_or_default() >= 1 && s.expert_ffn_or_default() <= 1 << 20,
                 "model: --expert-ffn must be in [1, 2^20], got ", s.expert_ffn_or_default());
  }
  SPATTN_CHECK(s.layers >= 1 && s.layers <= 1024, "model: --layers must be in [1, 1024], got ",
               s.layers);
  SPATTN_CHECK(s.dim >= 1 && s.dim <= 65536, "model: --dim must be in [1, 65536], got ", s.dim);
  SPATTN_CHECK(s.heads >= 1 && s.heads <= 1024, "model: --heads must be in [1, 1024], got ",
               s.heads);
  SPATTN_CHECK(s.kv_heads >= 1 && s.kv_heads <= s.heads && s.heads % s.kv_heads == 0,
               "model: --kv-heads must divide --heads (", s.heads, "), got ", s.kv_heads);
  SPATTN_CHECK(s.head_dim > 0 || s.dim % s.heads == 0, "model: --dim (", s.dim,
               ") is not a multiple of --heads (", s.heads, "); give --head-dim");
  const int64_t hd = s.head_dim_or_default();
  SPATTN_CHECK(hd >= 2 && hd % 2 == 0 && hd <= 1024,
               "model: head dim must be even and in [2, 1024] (RoPE rotates pairs), got ", hd);
  SPATTN_CHECK(s.ffn >= 1 && s.ffn <= 1 << 20, "model: --ffn must be in [1, 2^20], got ", s.ffn);
  SPATTN_CHECK(s.vocab >= 4 && s.vocab <= 1 << 22, "model: --vocab must be in [4, 2^22], got ",
               s.vocab);
  SPATTN_CHECK(s.context >= 1 && s.context <= 1 << 24,
               "model: --context must be in [1, 2^24], got ", s.context);
  SPATTN_CHECK(s.rope_base > 0 && std::isfinite(s.rope_base), "model: --rope-base must be > 0");
  SPATTN_CHECK(s.rms_eps > 0 && std::isfinite(s.rms_eps), "model: rms eps must be > 0");
  SPATTN_CHECK(s.rope_scaling.empty() || s.rope_scaling == "none" || s.rope_scaling == "llama3" ||
                   s.rope_scaling == "longrope" || s.rope_scaling == "linear" ||
                   s.rope_scaling == "yarn",
               "model: --rope-scaling must be none, llama3, longrope, linear or yarn, got '",
               s.rope_scaling, "'");
  if (s.rope_scaling == "yarn") {
    SPATTN_CHECK(t.scalings & rs::yarn, "model: yarn rope scaling is for --arch ",
                 model::arch_names_scaled(rs::yarn), ", got '", s.arch, "'");
    SPATTN_CHECK(std::isfinite(s.rope_factor) && s.rope_factor >= 1,
                 "model: --rope-factor must be >= 1, got ", s.rope_factor);
    SPATTN_CHECK(s.rope_original_context >= 1 && s.rope_original_context <= 1 << 24,
                 "model: --rope-original-context must be in [1, 2^24], got ",
                 s.rope_original_context);
  }
  if (s.rope_scaling == "linear") {
    SPATTN_CHECK(t.scalings & rs::linear, "model: linear rope scaling is for --arch ",
                 model::arch_names_scaled(rs::linear), " (its global layers), got '", s.arch, "'");
    SPATTN_CHECK(std::isfinite(s.rope_factor) && s.rope_factor >= 1,
                 "model: --rope-factor must be >= 1, got ", s.rope_factor);
  }
  if (t.sliding_window != Presence::absent)
    SPATTN_CHECK(s.sliding_window >= 1 && s.sliding_window <= 1 << 24,
                 "model: --sliding-window must be in [1, 2^24], got ", s.sliding_window);
  if (s.rope_scaling == "longrope") {
    SPATTN_CHECK(t.scalings & rs::longrope, "model: longrope scaling is for --arch ",
                 model::arch_names_scaled(rs::longrope), " (llama.cpp reads ",
                 model::kRopeFactorsLong, " / ", model::kRopeFactorsShort, " there), got '", s.arch,
                 "'");
    SPATTN_CHECK(s.rope_original_context >= 2 && s.rope_original_context <= 1 << 24,
                 "model: --rope-original-context must be in [2, 2^24], got ",
                 s.rope_original_context);
  }
  if (s.rope_scaling == "llama3") {
    SPATTN_CHECK(t.scalings & rs::llama3, "model: llama3 rope scaling is for --arch ",
                 model::arch_names_scaled(rs::llama3), " (llama.cpp reads ", model::kRopeFreqs,
                 " there), got '", s.arch, "'");
    SPATTN_CHECK(std::isfinite(s.rope_factor) && s.rope_factor >= 1,
                 "model: --rope-factor must be >= 1, got ", s.rope_factor);
    SPATTN_CHECK(std::isfinite(s.rope_low_freq_factor) && s.rope_low_freq_factor > 0 &&
                     std::isfinite(s.rope_high_freq_factor) &&
                     s.rope_high_freq_factor > s.rope_low_freq_factor,
                 "model: rope frequency factors need 0 < low < high, got low ",
                 s.rope_low_freq_factor, ", high ", s.rope_high_freq_factor);
    SPATTN_CHECK(s.rope_original_context >= 1 && s.rope_original_context <= 1 << 24,
                 "model: --rope-original-context must be in [1, 2^24], got ",
                 s.rope_original_context);
  }
  if (t.mla) {
    SPATTN_CHECK(s.rope_dim >= 2 && s.rope_dim % 2 == 0 && s.rope_dim < hd,
                 "model: --rope-dim must be even, >= 2 and below the head dim ", hd, ", got ",
                 s.rope_dim);
    SPATTN_CHECK(s.v_head_dim >= 1 && s.v_head_dim <= hd, "model: --v-head-dim must be in [1, ",
                 "head dim ", hd, "], got ", s.v_head_dim);
    SPATTN_CHECK(s.kv_lora >= 1 && s.kv_lora <= 65536,
                 "model: --kv-lora must be in [1, 65536], "
                 "got ",
                 s.kv_lora);
    SPATTN_CHECK(s.q_lora >= 0 && s.q_lora <= 65536, "model: --q-lora must be in [0, 65536], got ",
                 s.q_lora);
    SPATTN_CHECK(s.kv_heads == s.heads, "model: ", s.arch, " has a kv head a q head (--kv-heads ",
                 s.heads, "), got ", s.kv_heads);
  } else {
    SPATTN_CHECK(s.rope_dim == 0 && s.v_head_dim == 0 && s.q_lora == 0 && s.kv_lora == 0,
                 "model: --rope-dim, --v-head-dim, --q-lora and --kv-lora are for --arch ",
                 model::arch_names([](const model::ArchTraits& a) { return a.mla; }));
  }
  if (t.indexer) {
    SPATTN_CHECK(s.q_lora >= 1, "model: ", s.arch, "'s indexer reads the q latent: --q-lora >= 1");
    SPATTN_CHECK(s.indexer_heads >= 1 && s.indexer_heads <= 4096,
                 "model: --indexer-heads must be in [1, 4096], got ", s.indexer_heads);
    SPATTN_CHECK(s.indexer_dim >= 64 && s.indexer_dim <= 4096 &&
                     (s.indexer_dim & (s.indexer_dim - 1)) == 0 && s.rope_dim <= s.indexer_dim,
                 "model: --indexer-dim must be a power of two in [64, 4096], at least --rope-dim, "
                 "got ",
                 s.indexer_dim);
    SPATTN_CHECK(s.indexer_top_k >= 1 && s.indexer_top_k <= s.context,
                 "model: --indexer-top-k must be in [1, --context = ", s.context, "], got ",
                 s.indexer_top_k);
    SPATTN_CHECK(s.indexer_types.empty() ||
                     (int64_t(s.indexer_types.size()) == s.layers && s.indexer_types[0] == 1 &&
                      std::all_of(s.indexer_types.begin(), s.indexer_types.end(),
                                  [](uint32_t x) { return x <= 1; })),
                 "model: --indexer-types takes a 0 or 1 a layer (", s.layers,
                 "), the first 1, got ", s.indexer_types.size(), " values");
  } else {
    SPATTN_CHECK(s.indexer_heads == 0 && s.indexer_dim == 0 && s.indexer_top_k == 0 &&
                     s.indexer_types.empty(),
                 "model: --indexer-heads, --indexer-dim, --indexer-top-k and --indexer-types are "
                 "for --arch ",
                 model::arch_names([](const model::ArchTraits& a) { return a.indexer; }));
  }
  if (t.deepseek_moe) {
    SPATTN_CHECK(s.dense_layers >= 0 && s.dense_layers < s.layers,
                 "model: --dense-layers must be in [0, --layers = ", s.layers, "), got ",
                 s.dense_layers);
    SPATTN_CHECK(s.shared_experts >= 0 && s.shared_experts <= 64,
                 "model: --shared-experts must be in [0, 64], got ", s.shared_experts);
    if (s.expert_groups > 1)
      SPATTN_CHECK(s.experts % s.expert_groups == 0 && s.experts / s.expert_groups >= 2 &&
                       s.groups_used >= 1 && s.groups_used < s.expert_groups &&
                       s.groups_used * (s.experts / s.expert_groups) >= s.experts_used,
                   "model: --expert-groups must divide --experts into groups of 2 or more and "
                   "--groups-used in [1, groups) must hold --experts-used experts");
  } else {
    SPATTN_CHECK(s.dense_layers == 0 && s.shared_experts == 0 && s.expert_groups == 0,
                 "model: --dense-layers, --shared-experts and --expert-groups are for --arch ",
                 model::arch_names([](const model::ArchTraits& a) { return a.deepseek_moe; }));
  }
  SPATTN_CHECK(s.tokenizer.empty() || s.tokenizer == "gpt2" || s.tokenizer == "llama",
               "model: --tokenizer must be gpt2 or llama, got '", s.tokenizer, "'");
  SPATTN_CHECK(s.tokenizer != "gpt2" || s.vocab >= 257,
               "model: a gpt2 vocabulary needs --vocab >= 257 (the 256 bytes and <|endoftext|>)");
  if (s.type == GgmlType::q8_0)
    SPATTN_CHECK(s.dim % 32 == 0 && s.ffn % 32 == 0 && (s.heads * hd) % 32 == 0 &&
                     (s.experts == 0 || s.expert_ffn_or_default() % 32 == 0),
                 "model: q8_0 needs --dim, --ffn, --expert-ffn and heads x head dim to be "
                 "multiples of 32");
}

namespace {

// The dimensions the tensor list's shapes are given in.
model::Config dims_of(const ModelShape& s) {
  model::Config c;
  c.n_embd = s.dim;
  c.n_head = s.heads;
  c.n_head_kv = s.kv_heads;
  c.head_dim = s.head_dim_or_default();
  c.n_ff = s.ffn;
  c.n_expert = s.experts;
  c.n_ff_exp = s.expert_ffn_or_default();
  c.n_expert_shared = s.shared_experts;
  c.n_layer_dense_lead = s.dense_layers;
  c.q_lora_rank = s.q_lora;
  c.kv_lora_rank = s.kv_lora;
  c.head_dim_v = s.v_head_dim;
  c.n_rot = s.rope_dim;
  c.indexer_heads = s.indexer_heads;
  c.indexer_dim = s.indexer_dim;
  for (uint32_t x : s.indexer_types) c.indexer_shared.push_back(x == 0);
  return c;
}

// A tensor make-model writes in a layer: a name after "blk.N.", its shape in ggml's order
// (ne), how it is stored and make-model's centre and sd for its values.
struct Written {
  const char* name;
  std::vector<int64_t> ne;
  model::Store store;
  float centre, sd;
};

// Every tensor of layer `layer` of the shape, in the order written: the tensor list's that the
// architecture has (the optional ones too), a fused matrix in place of its parts.
std::vector<Written> layer_tensors_of(const ModelShape& s, int64_t layer) {
  using model::Dim;
  using model::Presence;
  const model::ArchTraits& t = traits_of(s);
  const model::Config c = dims_of(s);
  const model::LayerKind kind = model::layer_kind(c, layer);
  const auto ne = [&](Dim rows, Dim cols, Dim planes) {
    std::vector<int64_t> v = {model::dim(cols, c)};
    if (rows != Dim::one) v.push_back(model::dim(rows, c));
    if (planes != Dim::one) v.push_back(model::dim(planes, c));
    return v;
  };
  std::vector<Written> out;
  std::vector<model::WeightRef model::LayerRefs::*> fused_parts;
  for (const model::TensorSpec& ts : model::layer_tensors()) {
    const model::FusedSpec* fused = nullptr;
    for (const model::FusedSpec& f : model::fused_tensors())
      if (f.need(t, kind) != Presence::absent && f.parts.front().ref == ts.ref) fused = &f;
    if (fused) {  // written where its first part would be
      int64_t rows = 0;
      for (const model::FusedSpec::Part& part : fused->parts) {
        rows += model::dim(part.rows, c);
        fused_parts.push_back(part.ref);
      }
      out.push_back({fused->name, {model::dim(fused->cols, c), rows}, model::Store::matrix, 0, 0});
    }
    if (ts.need(t, kind) == Presence::absent ||
        std::find(fused_parts.begin(), fused_parts.end(), ts.ref) != fused_parts.end())
      continue;
    out.push_back({ts.name, ne(ts.rows, ts.cols, ts.planes), ts.store, ts.centre, ts.sd});
  }
  return out;
}

int64_t elements(const std::vector<int64_t>& ne) {
  int64_t n = 1;
  for (int64_t x : ne) n *= x;
  return n;
}

}  // namespace

int64_t parameter_count(const ModelShape& s) {
  const int64_t hd = s.head_dim_or_default();
  int64_t layers = 0;
  for (int64_t l = 0; l < s.layers; ++l)
    for (const Written& w : layer_tensors_of(s, l)) layers += elements(w.ne);
  const int64_t rope_freqs = s.rope_scaling == "llama3"     ? hd / 2
                             : s.rope_scaling == "longrope" ? hd
                                                            : 0;
  return s.vocab * s.dim * (s.tied ? 1 : 2) + s.dim + layers + rope_freqs;
}

void make_model(const std::string& path, const ModelShape& s) {
  check_shape(s);
  const model::ArchTraits& t = traits_of(s);
  const std::string& a = s.arch;
  const int64_t hd = s.head_dim_or_default();
  gguf::Writer w;
  w.set("general.architecture", a);
  w.set("general.name", "spattn-made-up-" + a);
  w.set("general.file_type", file_type(s.type));
  w.set(a + ".context_length", uint32_t(s.context));
  w.set(a + ".embedding_length", uint32_t(s.dim));
  w.set(a + ".block_count", uint32_t(s.layers));
  w.set(a + ".feed_forward_length", uint32_t(s.ffn));
  w.set(a + ".attention.head_count", uint32_t(s.heads));
  // The absorbed layout's cache holds one latent a token: llama.cpp's converter writes one kv
  // head (the expanded form keeps a kv head a q head, whatever the file says).
  w.set(a + ".attention.head_count_kv", uint32_t(t.mla_absorbed ? 1 : s.kv_heads));
  if (t.mla_absorbed) {
    // As llama.cpp's converter writes the absorbed layout: the latent attention's lengths
    // (kv latent + rope, kv latent) and the heads' in the _mla keys.
    w.set(a + ".attention.key_length", uint32_t(s.kv_lora + s.rope_dim));
    w.set(a + ".attention.value_length", uint32_t(s.kv_lora));
    w.set(a + ".attention.key_length_mla", uint32_t(hd));
    w.set(a + ".attention.value_length_mla", uint32_t(s.v_head_dim));
  } else {
    w.set(a + ".attention.key_length", uint32_t(hd));
    w.set(a + ".attention.value_length", uint32_t(t.mla ? s.v_head_dim : hd));
  }
  if (t.indexer) {
    w.set(a + ".attention.indexer.head_count", uint32_t(s.indexer_heads));
    w.set(a + ".attention.indexer.key_length", uint32_t(s.indexer_dim));
    w.set(a + ".attention.indexer.top_k", uint32_t(s.indexer_top_k));
    if (!s.indexer_types.empty()) w.set(a + ".attention.indexer.types", s.indexer_types);
  }
  w.set(a + ".attention.layer_norm_rms_epsilon", s.rms_eps);
  w.set(a + ".rope.freq_base", s.rope_base);
  w.set(a + ".rope.dimension_count", uint32_t(t.mla ? s.rope_dim : hd));
  if (t.mla) {  // as llama.cpp's converter writes a DeepSeek V2/V3 (q_lora_rank 0: none)
    w.set(a + ".attention.q_lora_rank", uint32_t(s.q_lora));
    w.set(a + ".attention.kv_lora_rank", uint32_t(s.kv_lora));
  }
  if (t.deepseek_moe) {
    w.set(a + ".leading_dense_block_count", uint32_t(s.dense_layers));
    w.set(a + ".expert_shared_count", uint32_t(s.shared_experts));
    w.set(a + ".expert_weights_scale", s.weights_scale);
    w.set(a + ".expert_weights_norm", s.weights_norm);
    w.set(a + ".expert_gating_func", uint32_t(s.sigmoid_gating ? 2 : 1));
    if (s.expert_groups > 1) {
      w.set(a + ".expert_group_count", uint32_t(s.expert_groups));
      w.set(a + ".expert_group_used_count", uint32_t(s.groups_used));
    }
  }
  w.set(a + ".vocab_size", uint32_t(s.vocab));
  if (s.experts > 0) {
    w.set(a + ".expert_count", uint32_t(s.experts));
    w.set(a + ".expert_used_count", uint32_t(s.experts_used));
    if (t.own_expert_ffn) w.set(a + ".expert_feed_forward_length", uint32_t(s.expert_ffn));
  }
  if (s.rope_scaling == "longrope") {
    w.set(a + ".rope.scaling.original_context_length", uint32_t(s.rope_original_context));
    w.set(a + ".rope.scaling.attn_factor", float(longrope_attn_factor(s)));
  }
  if (s.rope_scaling == "linear" || s.rope_scaling == "yarn") {
    w.set(a + ".rope.scaling.type", s.rope_scaling);
    w.set(a + ".rope.scaling.factor", s.rope_factor);
  }
  if (s.rope_scaling == "yarn")  // as llama.cpp's converter writes HF's rope_scaling
    w.set(a + ".rope.scaling.original_context_length", uint32_t(s.rope_original_context));
  if (s.rope_scaling == "yarn" && t.mla && s.yarn_log_mul != 0)
    w.set(a + ".rope.scaling.yarn_log_multiplier", 0.1f * s.yarn_log_mul);
  // The window (llama.cpp's default pattern then makes every swa_period-th layer global).
  if (t.sliding_window != model::Presence::absent)
    w.set(a + ".attention.sliding_window", uint32_t(s.sliding_window));
  const std::string tok = !s.tokenizer.empty() ? s.tokenizer : s.vocab >= 257 ? "gpt2" : "llama";
  if (tok == "gpt2") {
    add_bpe_vocab(w, s.vocab, s.seed);
  } else {
    // The row's added tokens end the vocabulary (llama.cpp's loader also sets attributes on
    // Phi-3's <|endoftext|> by name for models it takes for Phi-3, and fails without it).
    std::vector<std::string> specials;
    for (std::string_view rest = t.spm_specials; !rest.empty();) {
      const size_t sp = rest.find(' ');
      specials.emplace_back(rest.substr(0, sp));
      rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
    }
    add_spm_vocab(w, s.vocab, s.seed, specials);
    // Gemma's SentencePiece vocabulary adds no space before the text (its converter says so).
    if (!t.spm_space_prefix) w.set("tokenizer.ggml.add_space_prefix", false);
  }

  const GgmlType f32 = GgmlType::f32;
  const float in_sd = 1.0f / std::sqrt(float(s.dim));
  // Embeddings scaled by sqrt(dim) (embd_scale): rows of sd 1 / sqrt(dim) start at sd 1.
  add_random(w, model::kTokenEmbd, s.type, {s.dim, s.vocab}, s.seed, 0.0f,
             t.embd_scale ? in_sd : 1.0f);
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    for (const Written& x : layer_tensors_of(s, l))  // matrices: sd 1 / sqrt(fan-in)
      add_random(w, b + x.name, x.store == model::Store::matrix ? s.type : f32, x.ne, s.seed,
                 x.centre, x.sd > 0 ? x.sd : 1.0f / std::sqrt(float(x.ne[0])));
  }
  add_random(w, model::kOutputNorm, f32, {s.dim}, s.seed, 1.0f, 0.1f);
  auto add_values = [&](const std::string& name, const std::vector<float>& f) {
    w.add_tensor(name, f32, {int64_t(f.size())}, [f](int64_t, uint8_t* dst) {
      std::memcpy(dst, f.data(), f.size() * sizeof(float));
    });
  };
  if (s.rope_scaling == "llama3") add_values(model::kRopeFreqs, llama3_rope_factors(s));
  if (s.rope_scaling == "longrope") {
    add_values(model::kRopeFactorsLong, longrope_factors(s, true));
    add_values(model::kRopeFactorsShort, longrope_factors(s, false));
  }
  if (!s.tied) add_random(w, model::kOutput, s.type, {s.dim, s.vocab}, s.seed, 0.0f, in_sd);
  w.write(path);
}

}  // namespace spattn
