// A Model from a GGUF file, by llama.cpp's tensor and metadata names, for every architecture of
// the traits table (arch.hpp) and the tensors of the tensor list (tensor_table.hpp). The file
// is read through the memory-mapped reader and the Model keeps the mapping: its matrices are
// read in place.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/tensor_table.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model.hpp"

namespace spattn::model {

namespace {

// A 1-D or 2-D tensor as a WeightRef (3-D: experts', one matrix a plane); absent (null data)
// when optional and missing.
WeightRef ref(const gguf::File& f, const std::string& name, bool optional = false,
              bool experts = false) {
  const gguf::File::Tensor* t = f.find_tensor(name);
  if (!t) {
    SPATTN_CHECK(optional, f.name(), ": tensor ", name, " is missing");
    return {};
  }
  const size_t dims = experts ? 3 : 2;
  SPATTN_CHECK(!t->ne.empty() && t->ne.size() <= dims, f.name(), ": tensor ", name, " has ",
               t->ne.size(), " dimensions, expected ", experts ? "3" : "1 or 2");
  WeightRef r;
  r.type = t->type;
  r.data = t->data;
  r.cols = t->ne[0];
  r.rows = t->ne.size() >= 2 ? t->ne[1] : 1;
  r.planes = t->ne.size() == 3 ? t->ne[2] : 1;
  return r;
}

// Rows [r0, r0 + n) of a matrix, in place: a fused matrix's part (FusedSpec), row blocks one
// after another.
WeightRef row_block(const gguf::File& f, const std::string& name, const WeightRef& w, int64_t r0,
                    int64_t n, int64_t rows_expected) {
  SPATTN_CHECK(w.rows == rows_expected, f.name(), ": tensor ", name, " has ", w.rows,
               " rows, expected ", rows_expected);
  WeightRef r = w;
  r.rows = n;
  r.data = static_cast<const uint8_t*>(w.data) + size_t(r0) * gguf::row_bytes(w.type, w.cols);
  return r;
}

// A 1-D f32 tensor of n values (rope factors), copied; empty when absent.
std::vector<float> f32_values(const gguf::File& f, const std::string& name, int64_t n) {
  const gguf::File::Tensor* t = f.find_tensor(name);
  if (!t) return {};
  SPATTN_CHECK(t->type == gguf::GgmlType::f32 && t->ne.size() == 1, f.name(), ": ", name,
               " must be a 1-D f32 tensor, got ", t->ne.size(), "-D ", gguf::type_name(t->type));
  SPATTN_CHECK(t->ne[0] == n, f.name(), ": ", name, " has ", t->ne[0],
               " values, expected head dim / 2 = ", n);
  std::vector<float> v(static_cast<size_t>(n));
  std::memcpy(v.data(), t->data, v.size() * sizeof(float));
  return v;
}

// deepseek2's latent attention sizes (llama.cpp's llama_model_deepseek2::load_arch_hparams):
// the kv latent (required), the q latent (0 or absent: q from attn_q), the key and value
// lengths of a head and the rope part at the end of each. The expanded cache keeps a kv head
// a q head, whatever head_count_kv says.
void read_latent_attention(const gguf::File& f, const std::string& arch, const ArchTraits& t,
                           Config& c) {
  const auto key = [&](const char* k) { return arch + "." + k; };
  // The absorbed layout (attn_k_b / attn_v_b): deepseek32's and glm-dsa's always, deepseek2's
  // where the file gives the _mla key lengths, as current converters write it (llama.cpp's
  // deepseek2 loader: is_mla, read as deepseek32's; else attn_kv_b whole).
  c.mla_absorbed = t.mla_absorbed || f.has(key("attention.key_length_mla"));
  if (c.mla_absorbed) {
    // The heads' sizes in the _mla keys (key_length and value_length are the latent
    // attention's, kv latent + rope and kv latent).
    c.head_dim = int64_t(f.get_uint(key("attention.key_length_mla")));
    c.head_dim_v = int64_t(f.get_uint(key("attention.value_length_mla")));
  } else {
    SPATTN_CHECK(!f.find_tensor("blk.0.attn_k_b.weight"), f.name(), ": ", arch,
                 " has attn_k_b / attn_v_b without ", key("attention.key_length_mla"),
                 " (the absorbed layout gives the heads' sizes there)");
    if (f.has(key("attention.value_length")))
      c.head_dim_v = int64_t(f.get_uint(key("attention.value_length")));
  }
  c.kv_lora_rank = int64_t(f.get_uint(key("attention.kv_lora_rank")));
  if (f.has(key("attention.q_lora_rank")))
    c.q_lora_rank = int64_t(f.get_uint(key("attention.q_lora_rank")));
  c.n_rot = f.has(key("rope.dimension_count")) ? int64_t(f.get_uint(key("rope.dimension_count")))
                                               : c.head_dim;
  c.n_head_kv = c.n_head;
  if (t.indexer) {  // llama.cpp reads all three as required keys
    c.indexer_heads = int64_t(f.get_uint(key("attention.indexer.head_count")));
    c.indexer_dim = int64_t(f.get_uint(key("attention.indexer.key_length")));
    c.indexer_top_k = int64_t(f.get_uint(key("attention.indexer.top_k")));
    // GLM-5.2's layers that reuse the last full layer's selection (llama.cpp's glm-dsa and
    // dots3note: attention.indexer.types, one value for every layer or an integer a layer, 0
    // for a shared one). Without it a glm-dsa file of a context of 1M tokens or more takes
    // GLM-5.2's pattern (llama.cpp's GLM_5_2_DEFAULT_INDEXER_TYPES: layers 0 and 1 full, then
    // one in four from layer 2), any other every layer full.
    const std::string types = key("attention.indexer.types");
    std::vector<int64_t> full(size_t(c.n_layer), 1);
    if (f.has(types)) {
      if (f.type_of(types) != gguf::ValueType::array) {
        std::fill(full.begin(), full.end(), int64_t(f.get_uint(types)));
      } else {
        SPATTN_CHECK(f.array_type_of(types) != gguf::ValueType::boolean, f.name(), ": ", types,
                     " must hold integers (llama.cpp reads them as uint32), not booleans");
        full = f.get_int_array(types);
        SPATTN_CHECK(int64_t(full.size()) == c.n_layer, f.name(), ": ", types, " has ", full.size(),
                     " values for ", c.n_layer, " layers");
      }
    } else if (std::string_view(t.name) == "glm-dsa" && c.n_ctx_train >= 1048576) {
      for (int64_t l = 2; l < c.n_layer; ++l) full[size_t(l)] = (l - 2) % 4 == 0;
    }
    SPATTN_CHECK(c.n_layer == 0 || full[0] != 0, f.name(), ": ", types,
                 " makes layer 0 share a selection, but no layer before it selects");
    if (std::find(full.begin(), full.end(), 0) != full.end())
      for (int64_t x : full) c.indexer_shared.push_back(x == 0);
  }
}

// DeepSeek's mixture-of-experts keys (llama.cpp reads the same, with the same defaults:
// softmax gating where the file names none, weights neither normalized nor scaled).
void read_deepseek_moe(const gguf::File& f, const std::string& arch, const ArchTraits& t,
                       Config& c) {
  const auto key = [&](const char* k) { return arch + "." + k; };
  const auto count = [&](const char* k) {
    return f.has(key(k)) ? int64_t(f.get_uint(key(k))) : int64_t(0);
  };
  c.n_layer_dense_lead = count("leading_dense_block_count");
  c.n_expert_shared = int64_t(f.get_uint(key("expert_shared_count")));
  c.n_expert_groups = count("expert_group_count");
  c.n_group_used = count("expert_group_used_count");
  if (f.has(key("expert_weights_scale")))
    c.expert_weights_scale = f.get_float(key("expert_weights_scale"));
  if (f.has(key("expert_weights_norm")))
    c.expert_weights_norm = f.get_bool(key("expert_weights_norm"));
  // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE: 1 softmax, 2 sigmoid (0, none: softmax, or
  // sigmoid where the row says so: glm-dsa's loader).
  const int64_t gating = count("expert_gating_func");
  SPATTN_CHECK(gating <= 2, f.name(), ": ", key("expert_gating_func"), " ", gating,
               " is not supported (1 softmax, 2 sigmoid)");
  const bool sigmoid = gating == 2 || (gating == 0 && t.sigmoid_gating_by_default);
  c.gating = sigmoid ? Config::Gating::sigmoid : Config::Gating::softmax;
}

// DeepSeek's YaRN (llama.cpp's llama_context for deepseek2 and its graph, in float as they
// compute it): with mscale_all_dim L (rope.scaling.yarn_log_multiplier, which the converter
// writes as 0.1 L) and mscale m (L itself where L != 1, else 1; llama.cpp's special case for
// DeepSeek-V2), every cos and sin times get_mscale(s, m) / get_mscale(s, L), and the scores'
// scale (that factor times get_mscale(s, L))^2 / sqrt(key length), get_mscale(s, x) =
// 1 + 0.1 x ln s: the YaRN paper's sqrt(1/t) on q and k, section 3.4.
void deepseek_yarn(const gguf::File& f, const std::string& arch, double factor, Config& c) {
  const std::string lk = arch + ".rope.scaling.yarn_log_multiplier";
  const float L = f.has(lk) ? float(f.get_float(lk)) / 0.1f : 0.0f;
  const float s = float(factor);
  const auto get_mscale = [](float scale, float m) {
    return scale <= 1.0f ? 1.0f : 0.1f * m * logf(scale) + 1.0f;
  };
  float yarn_attn =
      L != 0.0f ? get_mscale(s, L != 1.0f ? L : 1.0f) / get_mscale(s, L) : get_mscale(s, 1.0f);
  yarn_attn *= 1.0f / (1.0f + 0.1f * logf(s));
  yarn_attn *= float(c.rope_attn_factor);
  // ggml's rope multiplies by 1 + 0.1 ln(1 / freq_scale) where YaRN runs.
  const float inv_freq_scale = 1.0f / (1.0f / s);
  const float rope_factor = yarn_attn * (1.0f + 0.1f * logf(inv_freq_scale));
  const float mscale = rope_factor * (1.0f + 0.1f * L * logf(inv_freq_scale));
  c.rope_attn_factor = rope_factor;
  c.attn_scale = double(mscale * mscale / sqrtf(float(c.head_dim)));
}

}  // namespace

Model load_model(std::shared_ptr<const gguf::File> file, const LoadOptions& load) {
  SPATTN_CHECK(file != nullptr, "load_model: no file");
  const gguf::File& f = *file;
  const std::string arch = f.get_string("general.architecture");
  const ArchTraits* found = find_arch(arch);
  if (!found)
    detail::fail(f.name(), ": architecture '", arch, "' is not supported (",
                 arch_names([](const ArchTraits&) { return true; }, ", "), ")");
  const ArchTraits& t = *found;
  Config c;
  c.arch = arch_id(t);
  auto key = [&](const char* k) { return arch + "." + k; };
  c.n_layer = int64_t(f.get_uint(key("block_count")));
  c.n_embd = int64_t(f.get_uint(key("embedding_length")));
  c.n_head = int64_t(f.get_uint(key("attention.head_count")));
  c.n_head_kv = f.has(key("attention.head_count_kv"))
                    ? int64_t(f.get_uint(key("attention.head_count_kv")))
                    : c.n_head;
  c.n_ff = int64_t(f.get_uint(key("feed_forward_length")));
  c.n_ctx_train = int64_t(f.get_uint(key("context_length")));
  // Experts (llama.cpp reads expert_count for every architecture; qwen3moe's experts have their
  // own hidden size, llama's (Mixtral's) the FFN's).
  if (f.has(key("expert_count"))) c.n_expert = int64_t(f.get_uint(key("expert_count")));
  SPATTN_CHECK(t.experts != Presence::required || c.n_expert > 0, f.name(), ": ", arch, " needs ",
               key("expert_count"), " > 0");
  if (c.n_expert > 0) {
    SPATTN_CHECK(t.experts != Presence::absent, f.name(), ": experts (", key("expert_count"),
                 ") in a ", arch, " model are not supported");
    c.n_expert_used = int64_t(f.get_uint(key("expert_used_count")));
    const bool own_ffn = t.own_expert_ffn;  // experts of their own hidden size
    const std::string fk = key("expert_feed_forward_length");
    SPATTN_CHECK(!f.has(fk) || f.type_of(fk) != gguf::ValueType::array, f.name(), ": ", fk,
                 " per layer (an array) is not supported");
    c.n_ff_exp = own_ffn && f.has(fk) ? int64_t(f.get_uint(fk))
                 : own_ffn            ? c.n_ff / std::max<int64_t>(c.n_expert_used, 1)
                                      : c.n_ff;
    // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT, without normalizing.
    if (t.gating_of_chosen) c.gating = Config::Gating::softmax_of_chosen;
  }
  c.rms_eps = f.get_float(key("attention.layer_norm_rms_epsilon"));
  c.rope_base = f.has(key("rope.freq_base")) ? f.get_float(key("rope.freq_base")) : 10000.0;
  SPATTN_CHECK(c.n_head > 0, f.name(), ": attention.head_count must be > 0");
  c.head_dim = f.has(key("attention.key_length")) ? int64_t(f.get_uint(key("attention.key_length")))
                                                  : c.n_embd / c.n_head;
  if (t.mla) {
    read_latent_attention(f, arch, t, c);
  } else if (f.has(key("rope.dimension_count"))) {
    SPATTN_CHECK(int64_t(f.get_uint(key("rope.dimension_count"))) == c.head_dim, f.name(),
                 ": partial RoPE (rope.dimension_count != head dim) is not supported");
  }
  if (t.deepseek_moe) read_deepseek_moe(f, arch, t, c);
  c.rope_neox = t.rope_neox;  // llama.cpp: LLAMA_ROPE_TYPE_NEOX, else _NORM
  // Scalings llama.cpp reads from metadata change every angle, so a file that asks for one
  // spattn does not run is refused rather than run unscaled. Run, where the row allows them:
  // linear scaling on the global layers (llama.cpp's default type when a factor is given:
  // positions divided by rope.scaling.factor), and YaRN (Qwen2.5's and Qwen3's long-context
  // setting, for example) where llama.cpp's graphs run it with the default betas: per-pair
  // divisors and a cos/sin factor (yarn_rope_divisors), set below once the original context
  // is read.
  const bool linear_ok = t.scalings & rope_scaling::linear;
  const bool yarn_ok = t.scalings & rope_scaling::yarn;
  std::string scaling = "none";
  if (f.has(key("rope.scaling.type")))
    scaling = f.get_string(key("rope.scaling.type"));
  else if (linear_ok && f.has(key("rope.scaling.factor")))
    scaling = "linear";
  SPATTN_CHECK(
      scaling == "none" || (linear_ok && scaling == "linear") || (yarn_ok && scaling == "yarn"),
      f.name(), ": ", key("rope.scaling.type"), " '", scaling,
      "' is not supported "
      "(spattn runs Llama 3.1's scaling, given as rope_freqs.weight, Phi-3's LongRoPE, ",
      arch_names_scaled(rope_scaling::linear, " and "), "'s linear, and yarn for ",
      arch_names_scaled(rope_scaling::yarn, " and "), ")");
  double yarn_factor = 0;
  if (scaling == "yarn") {
    yarn_factor = f.has(key("rope.scaling.factor")) ? f.get_float(key("rope.scaling.factor")) : 0;
    if (yarn_factor == 0.0) yarn_factor = 1.0;  // llama.cpp: 0 means none
  }
  if (scaling == "linear" && f.has(key("rope.scaling.factor"))) {
    const double factor = f.get_float(key("rope.scaling.factor"));
    c.rope_linear_factor = factor == 0.0 ? 1.0 : factor;  // llama.cpp: 0 means none
  }
  if (t.sliding_window != Presence::absent) {
    // llama.cpp's load_swa_pattern: a window > 0 makes every n-th layer global, n the row's
    // period (6 for gemma3, 2 for gpt-oss; sliding_window_pattern, when given, is the period;
    // an integer array, per-layer flags). gpt-oss requires the window (llama.cpp's get_key);
    // its local layers turn by its rope base (freq_base_swa when given) and its global
    // layers' scaling (swa_rope_scaled).
    if (t.sliding_window == Presence::required || f.has(key("attention.sliding_window")))
      c.sliding_window = int64_t(f.get_uint(key("attention.sliding_window")));
    if (c.sliding_window > 0) {
      const std::string pk = key("attention.sliding_window_pattern");
      if (f.has(pk) && f.type_of(pk) == gguf::ValueType::array) {
        const std::vector<int64_t> flags = f.get_int_array(pk);
        SPATTN_CHECK(int64_t(flags.size()) == c.n_layer, f.name(), ": ", pk, " has ", flags.size(),
                     " layer flags for ", c.n_layer, " layers");
        for (int64_t x : flags) c.swa_layers.push_back(x != 0);
      } else {
        const int64_t n = f.has(pk) ? int64_t(f.get_uint(pk)) : t.swa_period;
        for (int64_t l = 0; l < c.n_layer; ++l) c.swa_layers.push_back(n == 0 || l % n < n - 1);
      }
      if (t.swa_rope_scaled) c.rope_base_swa = c.rope_base;
      if (f.has(key("rope.freq_base_swa")))
        c.rope_base_swa = f.get_float(key("rope.freq_base_swa"));
      c.swa_rope_scaled = t.swa_rope_scaled;
    }
  }
  if (t.logit_softcap && f.has(key("final_logit_softcapping")))
    c.final_logit_softcap = f.get_float(key("final_logit_softcapping"));
  if (t.attn_scale == AttnScale::gemma3) {
    // llama.cpp's attention scale for gemma3: 1 / sqrt(head dim), except the 62-layer (27B)
    // model's 1 / sqrt(n_embd / n_head) (its query_pre_attn_scalar).
    c.attn_scale =
        double(1.0f / std::sqrt(float(c.n_layer == 62 ? c.n_embd / c.n_head : c.head_dim)));
  }
  // Llama 3.1's scaling: per-pair frequency divisors in rope_freqs.weight (llama.cpp's
  // LLM_TENSOR_ROPE_FREQS, which only its llama-family graphs read).
  if (t.scalings & rope_scaling::llama3)
    c.rope_freq_factors = f32_values(f, kRopeFreqs, c.head_dim / 2);
  // Phi-3's LongRoPE: long and short divisors and the original context that picks between
  // them.
  if (t.scalings & rope_scaling::longrope) {
    c.rope_factors_long = f32_values(f, kRopeFactorsLong, c.head_dim / 2);
    c.rope_factors_short = f32_values(f, kRopeFactorsShort, c.head_dim / 2);
  }
  if (f.has(key("rope.scaling.original_context_length")))
    c.n_ctx_orig = int64_t(f.get_uint(key("rope.scaling.original_context_length")));
  // The cos/sin factor, which llama.cpp applies for every architecture that has it.
  if (f.has(key("rope.scaling.attn_factor")))
    c.rope_attn_factor = f.get_float(key("rope.scaling.attn_factor"));
  // YaRN's ramp depends on the base: the local layers' scaling is the global layers' only when
  // both turn by one base (gpt-oss's files: no freq_base_swa).
  SPATTN_CHECK(!c.swa_rope_scaled || yarn_factor == 0 || c.rope_base_swa == c.rope_base, f.name(),
               ": yarn with a ", key("rope.freq_base_swa"), " (", c.rope_base_swa, ") other than ",
               key("rope.freq_base"), " (", c.rope_base, ") is not supported");
  if (yarn_factor > 0) {  // after rope_freqs (ggml divides by them before YaRN's blend)
    std::vector<float> d = yarn_rope_divisors(c.rot(), c.rope_base, yarn_factor,
                                              c.n_ctx_orig > 0 ? c.n_ctx_orig : c.n_ctx_train);
    for (size_t p = 0; p < c.rope_freq_factors.size() && p < d.size(); ++p)
      d[p] *= c.rope_freq_factors[p];
    c.rope_freq_factors = std::move(d);
    if (t.mla) {
      deepseek_yarn(f, arch, yarn_factor, c);
    } else {
      c.rope_attn_factor *= yarn_mscale(yarn_factor);
    }
  }
  const gguf::File::Tensor& emb = f.tensor(kTokenEmbd);
  SPATTN_CHECK(emb.ne.size() == 2, f.name(), ": ", kTokenEmbd, " must be 2-D");
  c.n_vocab = emb.ne[1];
  SPATTN_CHECK(c.n_layer <= 4096, f.name(), ": block_count ", c.n_layer, " is implausible");

  ModelRefs r;
  r.cfg = c;
  const ArchTraits lt = layout_traits(c);  // the tensors of the file's layout
  r.tok_embd = ref(f, kTokenEmbd);
  r.output_norm = ref(f, kOutputNorm);
  r.output = ref(f, kOutput, true);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    LayerRefs L;
    // A fused matrix the file has is split into its parts, whose own tensors are then not read.
    std::vector<WeightRef LayerRefs::*> split;
    const LayerKind kind = layer_kind(c, l);
    for (const FusedSpec& fs : fused_tensors()) {
      const Presence need = fs.need(lt, kind);
      const std::string n = b + fs.name;
      if (need == Presence::absent || (need == Presence::optional && !f.find_tensor(n))) continue;
      const WeightRef w = ref(f, n);
      int64_t rows = 0;
      for (const FusedSpec::Part& p : fs.parts) rows += dim(p.rows, c);
      int64_t r0 = 0;
      for (const FusedSpec::Part& p : fs.parts) {
        L.*p.ref = row_block(f, n, w, r0, dim(p.rows, c), rows);
        r0 += dim(p.rows, c);
        split.push_back(p.ref);
      }
    }
    for (const TensorSpec& s : layer_tensors()) {
      const Presence need = s.need(lt, kind);
      if (need == Presence::absent || std::find(split.begin(), split.end(), s.ref) != split.end())
        continue;
      L.*s.ref = ref(f, b + s.name, need == Presence::optional, s.planes != Dim::one);
    }
    r.layers.push_back(L);
  }
  return Model(r, std::move(file), load);
}

Model load_model(const std::string& path, const LoadOptions& load) {
  return load_model(std::make_shared<const gguf::File>(gguf::File::open(path)), load);
}

}  // namespace spattn::model
