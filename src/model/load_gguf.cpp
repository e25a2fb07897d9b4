// A Model from a GGUF file, by llama.cpp's tensor and metadata names (LLM_ARCH_LLAMA,
// LLM_ARCH_QWEN2, LLM_ARCH_QWEN3, LLM_ARCH_QWEN3MOE, LLM_ARCH_PHI3, LLM_ARCH_GEMMA3,
// LLM_ARCH_OPENAI_MOE). The file
// is read through the memory-mapped reader and the Model keeps the mapping: its matrices are
// read in place.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

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

// Rows [r0, r0 + n) of a matrix, in place: Phi-3 stores Wq, Wk, Wv as one attn_qkv matrix and
// Wgate, Wup as one ffn_up matrix, row blocks one after another (llama.cpp's build_qkv views
// and ggml_swiglu's halves: gate first).
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

}  // namespace

Model load_model(std::shared_ptr<const gguf::File> file) {
  SPATTN_CHECK(file != nullptr, "load_model: no file");
  const gguf::File& f = *file;
  const std::string arch = f.get_string("general.architecture");
  Config c;
  if (arch == "llama") {
    c.arch = Arch::llama;
  } else if (arch == "qwen2") {
    c.arch = Arch::qwen2;
  } else if (arch == "qwen3") {
    c.arch = Arch::qwen3;
  } else if (arch == "qwen3moe") {
    c.arch = Arch::qwen3moe;
  } else if (arch == "phi3") {
    c.arch = Arch::phi3;
  } else if (arch == "gemma3") {
    c.arch = Arch::gemma3;
  } else if (arch == "gpt-oss") {
    c.arch = Arch::gpt_oss;
  } else {
    detail::fail(f.name(), ": architecture '", arch,
                 "' is not supported (llama, qwen2, qwen3, qwen3moe, phi3, gemma3, gpt-oss)");
  }
  const bool oss = c.arch == Arch::gpt_oss;
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
  SPATTN_CHECK((c.arch != Arch::qwen3moe && !oss) || c.n_expert > 0, f.name(), ": ", arch,
               " needs ", key("expert_count"), " > 0");
  if (c.n_expert > 0) {
    SPATTN_CHECK(c.arch == Arch::llama || c.arch == Arch::qwen3moe || oss, f.name(),
                 ": experts (", key("expert_count"), ") in a ", arch, " model are not supported");
    c.n_expert_used = int64_t(f.get_uint(key("expert_used_count")));
    const bool own_ffn = c.arch == Arch::qwen3moe || oss;  // experts of their own hidden size
    const std::string fk = key("expert_feed_forward_length");
    SPATTN_CHECK(!f.has(fk) || f.type_of(fk) != gguf::ValueType::array, f.name(), ": ", fk,
                 " per layer (an array) is not supported");
    c.n_ff_exp = own_ffn && f.has(fk) ? int64_t(f.get_uint(fk))
                 : own_ffn            ? c.n_ff / std::max<int64_t>(c.n_expert_used, 1)
                                      : c.n_ff;
    // gpt-oss: llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT, without normalizing.
    if (oss) c.gating = Config::Gating::softmax_of_chosen;
  }
  c.rms_eps = f.get_float(key("attention.layer_norm_rms_epsilon"));
  c.rope_base = f.has(key("rope.freq_base")) ? f.get_float(key("rope.freq_base")) : 10000.0;
  SPATTN_CHECK(c.n_head > 0, f.name(), ": attention.head_count must be > 0");
  c.head_dim = f.has(key("attention.key_length")) ? int64_t(f.get_uint(key("attention.key_length")))
                                                  : c.n_embd / c.n_head;
  if (f.has(key("rope.dimension_count")))
    SPATTN_CHECK(int64_t(f.get_uint(key("rope.dimension_count"))) == c.head_dim, f.name(),
                 ": partial RoPE (rope.dimension_count != head dim) is not supported");
  c.rope_neox = c.arch != Arch::llama;  // llama.cpp: LLAMA_ROPE_TYPE_NORM / _NEOX
  // Scalings llama.cpp reads from metadata change every angle, so a file that asks for one
  // spattn does not run is refused rather than run unscaled. Run: gemma3's linear scaling on
  // its global layers (llama.cpp's default type when a factor is given: positions divided by
  // rope.scaling.factor), and YaRN (Qwen2.5's and Qwen3's long-context setting, for example)
  // on the architectures whose llama.cpp graphs run it with the default betas: per-pair
  // divisors and a cos/sin factor (yarn_rope_divisors), set below once the original context
  // is read.
  const bool linear_ok = c.arch == Arch::gemma3;
  const bool yarn_ok = c.arch == Arch::llama || c.arch == Arch::qwen2 || c.arch == Arch::qwen3 ||
                       c.arch == Arch::qwen3moe || oss;
  std::string scaling = "none";
  if (f.has(key("rope.scaling.type"))) scaling = f.get_string(key("rope.scaling.type"));
  else if (linear_ok && f.has(key("rope.scaling.factor"))) scaling = "linear";
  SPATTN_CHECK(scaling == "none" || (linear_ok && scaling == "linear") ||
                   (yarn_ok && scaling == "yarn"),
               f.name(), ": ", key("rope.scaling.type"), " '", scaling, "' is not supported "
               "(spattn runs Llama 3.1's scaling, given as rope_freqs.weight, Phi-3's LongRoPE, "
               "gemma3's linear, and yarn for llama, qwen2, qwen3, qwen3moe and gpt-oss)");
  double yarn_factor = 0;
  if (scaling == "yarn") {
    yarn_factor = f.has(key("rope.scaling.factor")) ? f.get_float(key("rope.scaling.factor")) : 0;
    if (yarn_factor == 0.0) yarn_factor = 1.0;  // llama.cpp: 0 means none
  }
  if (scaling == "linear" && f.has(key("rope.scaling.factor"))) {
    const double factor = f.get_float(key("rope.scaling.factor"));
    c.rope_linear_factor = factor == 0.0 ? 1.0 : factor;  // llama.cpp: 0 means none
  }
  if (c.arch == Arch::gemma3 || oss) {
    // llama.cpp's load_swa_pattern: a window > 0 makes every n-th layer global, n = 6 for
    // gemma3 and 2 for gpt-oss (sliding_window_pattern, when given, is the period; an integer
    // array, per-layer flags). gpt-oss requires the window (llama.cpp's get_key); its local
    // layers turn by its rope base (freq_base_swa when given) and its global layers' scaling.
    if (oss || f.has(key("attention.sliding_window")))
      c.sliding_window = int64_t(f.get_uint(key("attention.sliding_window")));
    if (c.sliding_window > 0) {
      const std::string pk = key("attention.sliding_window_pattern");
      if (f.has(pk) && f.type_of(pk) == gguf::ValueType::array) {
        const std::vector<int64_t> flags = f.get_int_array(pk);
        SPATTN_CHECK(int64_t(flags.size()) == c.n_layer, f.name(), ": ", pk, " has ",
                     flags.size(), " layer flags for ", c.n_layer, " layers");
        for (int64_t x : flags) c.swa_layers.push_back(x != 0);
      } else {
        const int64_t n = f.has(pk) ? int64_t(f.get_uint(pk)) : oss ? 2 : 6;
        for (int64_t l = 0; l < c.n_layer; ++l) c.swa_layers.push_back(n == 0 || l % n < n - 1);
      }
      if (oss) c.rope_base_swa = c.rope_base;
      if (f.has(key("rope.freq_base_swa")))
        c.rope_base_swa = f.get_float(key("rope.freq_base_swa"));
      c.swa_rope_scaled = oss;
    }
  }
  if (c.arch == Arch::gemma3) {
    if (f.has(key("final_logit_softcapping")))
      c.final_logit_softcap = f.get_float(key("final_logit_softcapping"));
    // llama.cpp's attention scale for gemma3: 1 / sqrt(head dim), except the 62-layer (27B)
    // model's 1 / sqrt(n_embd / n_head) (its query_pre_attn_scalar).
    c.attn_scale = double(1.0f / std::sqrt(float(c.n_layer == 62 ? c.n_embd / c.n_head
                                                                  : c.head_dim)));
  }
  // Llama 3.1's scaling: per-pair frequency divisors in rope_freqs.weight (llama.cpp's
  // LLM_TENSOR_ROPE_FREQS, which only its llama-family graphs read).
  if (c.arch == Arch::llama) c.rope_freq_factors = f32_values(f, "rope_freqs.weight", c.head_dim / 2);
  // Phi-3's LongRoPE: long and short divisors and the original context that picks between
  // them. Its sliding window (attention.sliding_window) is ignored, as llama.cpp does (its SWA
  // for phi3 is disabled).
  if (c.arch == Arch::phi3) {
    c.rope_factors_long = f32_values(f, "rope_factors_long.weight", c.head_dim / 2);
    c.rope_factors_short = f32_values(f, "rope_factors_short.weight", c.head_dim / 2);
  }
  if (f.has(key("rope.scaling.original_context_length")))
    c.n_ctx_orig = int64_t(f.get_uint(key("rope.scaling.original_context_length")));
  // The cos/sin factor, which llama.cpp applies for every architecture that has it.
  if (f.has(key("rope.scaling.attn_factor")))
    c.rope_attn_factor = f.get_float(key("rope.scaling.attn_factor"));
  // YaRN's ramp depends on the base: the local layers' scaling is the global layers' only when
  // both turn by one base (gpt-oss's files: no freq_base_swa).
  SPATTN_CHECK(!c.swa_rope_scaled || yarn_factor == 0 || c.rope_base_swa == c.rope_base,
               f.name(), ": yarn with a ", key("rope.freq_base_swa"), " (", c.rope_base_swa,
               ") other than ", key("rope.freq_base"), " (", c.rope_base, ") is not supported");
  if (yarn_factor > 0) {  // after rope_freqs (ggml divides by them before YaRN's blend)
    std::vector<float> d = yarn_rope_divisors(
        c.head_dim, c.rope_base, yarn_factor, c.n_ctx_orig > 0 ? c.n_ctx_orig : c.n_ctx_train);
    for (size_t p = 0; p < c.rope_freq_factors.size() && p < d.size(); ++p)
      d[p] *= c.rope_freq_factors[p];
    c.rope_freq_factors = std::move(d);
    c.rope_attn_factor *= yarn_mscale(yarn_factor);
  }
  const gguf::File::Tensor& emb = f.tensor("token_embd.weight");
  SPATTN_CHECK(emb.ne.size() == 2, f.name(), ": token_embd.weight must be 2-D");
  c.n_vocab = emb.ne[1];
  SPATTN_CHECK(c.n_layer <= 4096, f.name(), ": block_count ", c.n_layer, " is implausible");

  ModelRefs r;
  r.cfg = c;
  r.tok_embd = ref(f, "token_embd.weight");
  r.output_norm = ref(f, "output_norm.weight");
  r.output = ref(f, "output.weight", true);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    LayerRefs L;
    L.attn_norm = ref(f, b + "attn_norm.weight");
    const int64_t dq = c.n_head * c.head_dim, dkv = c.n_head_kv * c.head_dim;
    if (c.arch == Arch::phi3 && f.find_tensor(b + "attn_qkv.weight")) {
      const std::string n = b + "attn_qkv.weight";
      const WeightRef qkv = ref(f, n);
      L.wq = row_block(f, n, qkv, 0, dq, dq + 2 * dkv);
      L.wk = row_block(f, n, qkv, dq, dkv, dq + 2 * dkv);
      L.wv = row_block(f, n, qkv, dq + dkv, dkv, dq + 2 * dkv);
    } else {
      L.wq = ref(f, b + "attn_q.weight");
      L.wk = ref(f, b + "attn_k.weight");
      L.wv = ref(f, b + "attn_v.weight");
    }
    L.wo = ref(f, b + "attn_output.weight");
    if (c.arch == Arch::qwen2 || oss) {  // gpt-oss: optional, as llama.cpp reads them
      L.bq = ref(f, b + "attn_q.bias", oss);
      L.bk = ref(f, b + "attn_k.bias", oss);
      L.bv = ref(f, b + "attn_v.bias", oss);
    }
    if (oss) {
      L.bo = ref(f, b + "attn_output.bias");
      L.sinks = ref(f, b + "attn_sinks.weight");
    }
    if (c.arch == Arch::qwen3 || c.arch == Arch::qwen3moe || c.arch == Arch::gemma3) {
      L.q_norm = ref(f, b + "attn_q_norm.weight");
      L.k_norm = ref(f, b + "attn_k_norm.weight");
    }
    if (c.arch == Arch::gemma3) {
      L.attn_post_norm = ref(f, b + "post_attention_norm.weight");
      L.ffn_post_norm = ref(f, b + "post_ffw_norm.weight");
    }
    // gpt-oss names its FFN's input norm post_attention_norm (llama.cpp's attn_post_norm).
    L.ffn_norm = ref(f, b + (oss ? "post_attention_norm.weight" : "ffn_norm.weight"));
    if (c.is_moe()) {
      L.router = ref(f, b + "ffn_gate_inp.weight");
      L.gate_exps = ref(f, b + "ffn_gate_exps.weight", false, true);
      L.up_exps = ref(f, b + "ffn_up_exps.weight", false, true);
      L.down_exps = ref(f, b + "ffn_down_exps.weight", false, true);
      if (oss) {
        L.router_b = ref(f, b + "ffn_gate_inp.bias");
        L.gate_exps_b = ref(f, b + "ffn_gate_exps.bias");
        L.up_exps_b = ref(f, b + "ffn_up_exps.bias");
        L.down_exps_b = ref(f, b + "ffn_down_exps.bias");
      }
    } else if (c.arch == Arch::phi3) {
      const std::string n = b + "ffn_up.weight";
      const WeightRef gu = ref(f, n);
      L.gate = row_block(f, n, gu, 0, c.n_ff, 2 * c.n_ff);
      L.up = row_block(f, n, gu, c.n_ff, c.n_ff, 2 * c.n_ff);
    } else {
      L.gate = ref(f, b + "ffn_gate.weight");
      L.up = ref(f, b + "ffn_up.weight");
    }
    if (!c.is_moe()) L.down = ref(f, b + "ffn_down.weight");
    r.layers.push_back(L);
  }
  return Model(r, std::move(file));
}

Model load_model(const std::string& path) {
  return load_model(std::make_shared<const gguf::File>(gguf::File::open(path)));
}

}  // namespace spattn::model
