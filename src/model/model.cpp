// Model: shapes and types checked against the config; matrices kept in their stored type as
// ggml tensors over the mapped file (or over copied bytes), repacked where ggml has a faster
// layout for this CPU; norms and biases as f32.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "core/threading.hpp"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/gemm_int8.hpp"
#include "model/ggml_repack.hpp"
#include "spattn/attention.hpp"
#include "spattn/error.hpp"
#include "model/tensor_table.hpp"
#include "model/weight_pages.hpp"
#include "spattn/model.hpp"

namespace spattn::model {

void Config::validate() const {
  auto pos = [](int64_t v, const char* name) {
    SPATTN_CHECK(v > 0, "model: ", name, " must be > 0, got ", v);
  };
  pos(n_layer, "block_count");
  pos(n_embd, "embedding_length");
  pos(n_head, "attention.head_count");
  pos(n_head_kv, "attention.head_count_kv");
  pos(head_dim, "head dim");
  pos(n_ff, "feed_forward_length");
  pos(n_vocab, "vocabulary size");
  SPATTN_CHECK(n_head % n_head_kv == 0, "model: head_count (", n_head,
               ") must be a multiple of head_count_kv (", n_head_kv, ")");
  SPATTN_CHECK(head_dim % 8 == 0 && head_dim <= kMaxHeadDim,
               "model: head dim must be a multiple of 8 up to ", kMaxHeadDim,
               " (the kernels' layout), got ", head_dim);
  SPATTN_CHECK(rms_eps > 0 && rms_eps < 1, "model: layer_norm_rms_epsilon must be in (0, 1), got ",
               rms_eps);
  SPATTN_CHECK(rope_base > 1, "model: rope.freq_base must be > 1, got ", rope_base);
  SPATTN_CHECK(rope_freq_factors.empty() || int64_t(rope_freq_factors.size()) == rot() / 2,
               "model: ", kRopeFreqs, " has ", rope_freq_factors.size(),
               " values, expected the rope dims / 2 = ", rot() / 2);
  auto factors = [&](const std::vector<float>& v, const char* name) {
    SPATTN_CHECK(v.empty() || int64_t(v.size()) == rot() / 2, "model: ", name, " has ", v.size(),
                 " values, expected the rope dims / 2 = ", rot() / 2);
    for (float f : v)
      SPATTN_CHECK(std::isfinite(f) && f > 0, "model: ", name, " holds ", f,
                   " (frequency divisors must be finite and > 0)");
  };
  factors(rope_freq_factors, kRopeFreqs);
  factors(rope_factors_long, kRopeFactorsLong);
  factors(rope_factors_short, kRopeFactorsShort);
  SPATTN_CHECK(rope_factors_long.empty() == rope_factors_short.empty(), "model: ", kRopeFactorsLong,
               " and ", kRopeFactorsShort, " come together");
  SPATTN_CHECK(n_ctx_orig >= 0, "model: rope.scaling.original_context_length must be >= 0, got ",
               n_ctx_orig);
  SPATTN_CHECK(std::isfinite(rope_attn_factor) && rope_attn_factor > 0 && rope_attn_factor < 16,
               "model: rope.scaling.attn_factor must be in (0, 16), got ", rope_attn_factor);
  SPATTN_CHECK(sliding_window >= 0, "model: attention.sliding_window must be >= 0, got ",
               sliding_window);
  SPATTN_CHECK(swa_layers.empty() || int64_t(swa_layers.size()) == n_layer,
               "model: ", swa_layers.size(), " sliding-window layer flags for ", n_layer,
               " layers");
  SPATTN_CHECK(rope_base_swa > 1, "model: rope.freq_base_swa must be > 1, got ", rope_base_swa);
  SPATTN_CHECK(std::isfinite(rope_linear_factor) && rope_linear_factor > 0,
               "model: rope.scaling.factor must be finite and > 0, got ", rope_linear_factor);
  SPATTN_CHECK(std::isfinite(attn_scale) && attn_scale >= 0,
               "model: attention scale must be finite and >= 0, got ", attn_scale);
  SPATTN_CHECK(std::isfinite(final_logit_softcap) && final_logit_softcap >= 0,
               "model: final_logit_softcapping must be finite and >= 0, got ", final_logit_softcap);
  // llama.cpp's bound (LLAMA_MAX_EXPERTS) on expert_count.
  SPATTN_CHECK(n_expert >= 0 && n_expert <= 512, "model: expert_count must be in [0, 512], got ",
               n_expert);
  SPATTN_CHECK(arch_traits(arch).experts != Presence::required || n_expert > 0,
               "model: ", arch_name(arch), " needs expert_count > 0");
  if (n_expert > 0) {
    SPATTN_CHECK(n_expert_used >= 1 && n_expert_used <= n_expert,
                 "model: expert_used_count must be in [1, expert_count = ", n_expert, "], got ",
                 n_expert_used);
    pos(n_ff_exp, "expert_feed_forward_length");
  }
  SPATTN_CHECK(n_layer_dense_lead >= 0 && n_layer_dense_lead <= n_layer,
               "model: leading_dense_block_count must be in [0, block_count = ", n_layer, "], got ",
               n_layer_dense_lead);
  SPATTN_CHECK(n_expert_shared >= 0 && n_expert_shared <= 64,
               "model: expert_shared_count must be in [0, 64], got ", n_expert_shared);
  SPATTN_CHECK(std::isfinite(expert_weights_scale) && expert_weights_scale >= 0,
               "model: expert_weights_scale must be finite and >= 0, got ", expert_weights_scale);
  if (n_expert_groups > 1) {  // llama.cpp's asserts on them, as errors
    SPATTN_CHECK(n_expert % n_expert_groups == 0 && n_expert / n_expert_groups >= 2,
                 "model: expert_group_count (", n_expert_groups, ") must divide expert_count (",
                 n_expert, ") into groups of 2 or more");
    SPATTN_CHECK(n_group_used >= 1 && n_group_used < n_expert_groups,
                 "model: expert_group_used_count must be in [1, expert_group_count = ",
                 n_expert_groups, "), got ", n_group_used);
    SPATTN_CHECK(n_group_used * (n_expert / n_expert_groups) >= n_expert_used, "model: the ",
                 n_group_used, " groups used hold fewer experts than the ", n_expert_used,
                 " a token uses");
  }
  SPATTN_CHECK(n_rot >= 0 && n_rot <= head_dim && n_rot % 2 == 0, "model: rope.dimension_count ",
               n_rot, " must be even and at most the head dim ", head_dim);
  SPATTN_CHECK(head_dim_v >= 0 && head_dim_v <= head_dim, "model: attention.value_length ",
               head_dim_v, " must be at most the key length ", head_dim);
  if (arch_traits(arch).indexer) {
    // DSA's lightning indexer (llama.cpp's deepseek32 graph): its queries come from the q
    // latent; RoPE turns the first rot() values of a head; llama.cpp's Hadamard rotation of its
    // queries and keys is one matrix of the head's size, a power of two from 64.
    SPATTN_CHECK(q_lora_rank > 0, "model: ", arch_name(arch),
                 "'s lightning indexer reads the q latent: attention.q_lora_rank must be > 0");
    SPATTN_CHECK(indexer_heads > 0 && indexer_heads <= 4096,
                 "model: attention.indexer.head_count must be in [1, 4096], got ", indexer_heads);
    SPATTN_CHECK(indexer_dim >= 64 && indexer_dim <= 4096 && (indexer_dim & (indexer_dim - 1)) == 0,
                 "model: attention.indexer.key_length must be a power of two in [64, 4096] (the "
                 "Hadamard rotation's size), got ",
                 indexer_dim);
    SPATTN_CHECK(rot() <= indexer_dim, "model: the rope part (rope.dimension_count ", rot(),
                 ") is longer than the indexer's key (attention.indexer.key_length ", indexer_dim,
                 ")");
    SPATTN_CHECK(indexer_top_k > 0, "model: attention.indexer.top_k must be > 0, got ",
                 indexer_top_k);
    SPATTN_CHECK(n_ctx_train <= 0 || indexer_top_k <= n_ctx_train,
                 "model: attention.indexer.top_k (", indexer_top_k,
                 ") is larger than the context length (", n_ctx_train, ")");
    SPATTN_CHECK(
        indexer_shared.empty() || (int64_t(indexer_shared.size()) == n_layer && !indexer_shared[0]),
        "model: ", indexer_shared.size(), " shared-indexer flags for ", n_layer,
        " layers, or layer 0 shares a selection no layer before it made");
  } else {
    SPATTN_CHECK(
        indexer_heads == 0 && indexer_dim == 0 && indexer_top_k == 0 && indexer_shared.empty(),
        "model: lightning indexer sizes in a ", arch_name(arch), " model");
  }
  if (arch_traits(arch).mla) {
    // The latents' sizes against each other and the heads (inconsistent lora ranks, a rope
    // part as large as the head, ...).
    SPATTN_CHECK(kv_lora_rank > 0, "model: ", arch_name(arch),
                 " needs attention.kv_lora_rank > 0, got ", kv_lora_rank);
    SPATTN_CHECK(q_lora_rank >= 0, "model: attention.q_lora_rank must be >= 0, got ", q_lora_rank);
    SPATTN_CHECK(rot() < head_dim, "model: ", arch_name(arch), "'s rope part (",
                 "rope.dimension_count ", rot(), ") must leave a non-rope part of the key length ",
                 head_dim);
    SPATTN_CHECK(n_head_kv == n_head,
                 "internal: the expanded latent attention keeps a kv head "
                 "a q head");
  } else {
    SPATTN_CHECK(
        q_lora_rank == 0 && kv_lora_rank == 0 && n_rot == 0 && head_dim_v == 0 && !mla_absorbed,
        "model: latent attention sizes in a ", arch_name(arch), " model");
  }
}

const std::vector<float>& Config::rope_factors(int64_t n_ctx) const {
  if (!rope_freq_factors.empty()) return rope_freq_factors;
  const int64_t orig = n_ctx_orig > 0 ? n_ctx_orig : n_ctx_train;
  return n_ctx > orig ? rope_factors_long : rope_factors_short;
}

std::vector<float> yarn_rope_divisors(int64_t head_dim, double base, double factor,
                                      int64_t n_ctx_orig) {
  SPATTN_CHECK(std::isfinite(factor) && factor > 0,
               "model: rope.scaling.factor must be finite "
               "and > 0 for yarn, got ",
               factor);
  SPATTN_CHECK(n_ctx_orig > 0, "model: yarn needs an original context > 0, got ", n_ctx_orig);
  SPATTN_CHECK(head_dim >= 2 && head_dim % 2 == 0 && head_dim <= 1024,
               "model: yarn needs an even head dim in [2, 1024], got ", head_dim);
  SPATTN_CHECK(std::isfinite(base) && base > 1, "model: rope.freq_base must be > 1, got ", base);
  // ggml_rope_yarn_corr_dim(s), in float: the pair index where a pair makes n_rot turns over
  // the original context.
  const auto corr = [&](float n_rot) {
    return float(head_dim) * logf(float(n_ctx_orig) / (n_rot * 2 * float(M_PI))) /
           (2 * logf(float(base)));
  };
  const float low = std::max(0.0f, floorf(corr(32.0f)));
  const float high = std::min(float(head_dim - 1), ceilf(corr(1.0f)));
  std::vector<float> d(size_t(head_dim / 2));
  for (int64_t p = 0; p < head_dim / 2; ++p) {
    const float y = (float(p) - low) / std::max(0.001f, high - low);
    const double mix = 1.0 - std::min(1.0f, std::max(0.0f, y));  // 1: extrapolate (keep)
    d[size_t(p)] = float(1.0 / ((1.0 - mix) / factor + mix));
  }
  return d;
}

double yarn_mscale(double factor) { return factor > 1 ? 1.0 + 0.1 * std::log(factor) : 1.0; }

namespace {

// ggml's default logger prints every level, so each load printed a line per repacked matrix
// (ggml's debug level); llama.cpp's logger drops debug unless asked. Info and above go to
// stderr, with the lines that continue them.
void ggml_log_info_and_above(ggml_log_level level, const char* text, void*) {
  static thread_local ggml_log_level last = GGML_LOG_LEVEL_INFO;
  if (level != GGML_LOG_LEVEL_CONT) last = level;
  if (last >= GGML_LOG_LEVEL_INFO) std::fputs(text, stderr);
}

// Whether gguf::dequantize_row converts the type (its rows are looked up, its norms read).
bool has_f32(WeightType t) {
  return t == WeightType::f32 || ggml_get_type_traits(ggml_type(t))->to_float != nullptr;
}

}  // namespace

struct Model::Impl {
  Config cfg;
  bool tied = false;
  std::shared_ptr<const gguf::File> mapping;
  std::vector<std::vector<uint8_t>> owned;  // matrix bytes when there is no mapping
  ggml_context* ctx = nullptr;              // the matrices' tensors (no data of its own)
  ggml_context* repack_ctx = nullptr;       // tensors of the repacked matrices
  ggml_backend_buffer_t repack_buf = nullptr;
  ggml_context* copy_ctx = nullptr;  // tensors of the matrices copied out of the mapping
  ggml_backend_buffer_t copy_buf = nullptr;
  Weight tok_embd, output;
  size_t embd_row_bytes = 0;
  std::vector<float> output_norm;
  std::vector<Layer> layers;
  Memory mem;
  // The latent attention's forms (use_mla_form): each made at most once; `built` guards mem
  // and the context's tensor list against a session's memory() read meanwhile.
  std::once_flag expanded_once, absorbed_once;
  mutable std::mutex built;
  // A legacy file's attn_kv_b as stored (before any repack), each layer's: the absorbed form's
  // source. (An absorbed file's attn_k_b / attn_v_b are never repacked: read from the layers.)
  std::vector<WeightRef> kv_b_stored;

  ~Impl() {
    if (repack_buf) ggml_backend_buffer_free(repack_buf);
    if (copy_buf) ggml_backend_buffer_free(copy_buf);
    if (copy_ctx) ggml_free(copy_ctx);
    if (repack_ctx) ggml_free(repack_ctx);
    if (ctx) ggml_free(ctx);
  }

  const uint8_t* bytes_of(const WeightRef& w, size_t n) {
    if (mapping) {
      mem.mapped += n;
      return static_cast<const uint8_t*>(w.data);
    }
    const auto* s = static_cast<const uint8_t*>(w.data);
    owned.emplace_back(s, s + n);
    mem.owned += n;
    return owned.back().data();
  }

  void check(const WeightRef& w, const std::string& name, int64_t rows, int64_t cols,
             int64_t planes = 1) {
    SPATTN_CHECK(w.data != nullptr, "model: tensor ", name, " is missing");
    SPATTN_CHECK(w.rows == rows && w.cols == cols && w.planes == planes, "model: tensor ", name,
                 " has shape [", w.cols, ", ", w.rows, ", ", w.planes, "], expected [", cols, ", ",
                 rows, ", ", planes, "] (ggml order)");
    SPATTN_CHECK(gguf::is_known_type(uint32_t(w.type)), "model: tensor ", name,
                 " has unknown type ", uint32_t(w.type));
    SPATTN_CHECK(cols % gguf::block_size(w.type) == 0, "model: tensor ", name, " rows of ", cols,
                 " values are not whole ", gguf::type_name(w.type), " blocks of ",
                 gguf::block_size(w.type));
  }

  // A norm or bias as f32 values (`rows` of n: experts' biases, one row an expert).
  std::vector<float> vec(const WeightRef& w, const std::string& name, int64_t n, int64_t rows = 1) {
    check(w, name, rows, n);
    SPATTN_CHECK(has_f32(w.type), "model: tensor ", name, " has type ", gguf::type_name(w.type),
                 " (", n, " values in ", gguf::row_bytes(w.type, n),
                 " bytes), which has no f32 conversion");
    std::vector<float> v(static_cast<size_t>(n * rows));
    for (int64_t r = 0; r < rows; ++r)
      gguf::dequantize_row(
          w.type, static_cast<const uint8_t*>(w.data) + size_t(r) * gguf::row_bytes(w.type, n),
          v.data() + r * n, n);
    mem.owned += v.size() * sizeof(float);
    return v;
  }

  // A matrix (or `planes` of them: experts') as a ggml tensor over its stored bytes.
  Weight mat(const WeightRef& w, const std::string& name, int64_t rows, int64_t cols,
             int64_t planes = 1) {
    check(w, name, rows, cols, planes);
    const ggml_type t = ggml_type(w.type);
    SPATTN_CHECK(ggml_get_type_traits_cpu(t)->vec_dot != nullptr && has_f32(w.type),
                 "model: tensor ", name, " has type ", gguf::type_name(w.type), " ([", cols, ", ",
                 rows, "] = ", cols * rows, " values in ",
                 gguf::row_bytes(w.type, cols) * size_t(rows),
                 " bytes), which ggml's CPU backend cannot multiply");
    ggml_tensor* g = ggml_new_tensor_3d(ctx, t, cols, rows, planes);
    ggml_set_name(g, name.c_str());
    g->data = const_cast<uint8_t*>(bytes_of(w, ggml_nbytes(g)));
    return Weight{g, w.type, rows, cols, false, false};
  }

  // The absorbed layout's attn_k_b and attn_v_b as attn_kv_b, in f32 (their values exactly):
  // head h's rows are its k_nope (attn_k_b's plane h transposed: k_nope = W^T c for the
  // latent c, as q_nope . W^T c is llama.cpp's (W q_nope) . c) and then its v (attn_v_b's
  // plane h). The expanded form's products read it as they read attn_kv_b.
  Weight expand_kv_b(const WeightRef& wk_b, const WeightRef& wv_b, const std::string& b) {
    const int64_t H = cfg.n_head, lora = cfg.kv_lora_rank, nope = cfg.head_dim - cfg.rot(),
                  dv = cfg.v_dim();
    const auto rows_of = [](const WeightRef& w, int64_t n) {
      std::vector<float> v(size_t(n * w.cols));
      const size_t rb = gguf::row_bytes(w.type, w.cols);
      for (int64_t i = 0; i < n; ++i)
        gguf::dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + size_t(i) * rb,
                             v.data() + i * w.cols, w.cols);
      return v;
    };
    const std::vector<float> kb = rows_of(wk_b, H * lora), vb = rows_of(wv_b, H * dv);
    std::vector<uint8_t>& bytes = owned.emplace_back(size_t(H * (nope + dv) * lora) * 4);
    float* out = reinterpret_cast<float*>(bytes.data());
    for (int64_t h = 0; h < H; ++h) {
      float* head = out + h * (nope + dv) * lora;
      for (int64_t d = 0; d < nope; ++d)
        for (int64_t c = 0; c < lora; ++c)
          head[d * lora + c] = kb[size_t((h * lora + c) * nope + d)];
      std::copy_n(vb.data() + h * dv * lora, dv * lora, head + nope * lora);
    }
    mem.owned += bytes.size();
    const WeightRef w{WeightType::f32, bytes.data(), H * (nope + dv), lora, 1};
    ggml_tensor* g = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, lora, H * (nope + dv));
    ggml_set_name(g, (b + "attn_kv_b.weight (from attn_k_b, attn_v_b)").c_str());
    g->data = const_cast<void*>(w.data);
    return Weight{g, w.type, w.rows, w.cols, false, false};
  }

  // attn_kv_b's rows as the absorbed form's wk_b and wv_b, in f32 (their values exactly): plane
  // h of wk_b is head h's k_nope rows transposed ([kv latent rows, nope cols]: q_nope's product
  // into the latent), of wv_b its v rows ([v rows, kv latent cols]), as llama.cpp's converter
  // splits attn_kv_b (convert_hf_to_gguf.py, DeepseekV2Model: kv_b into k_b and v_b).
  std::pair<Weight, Weight> split_kv_b(const WeightRef& kv_b, const std::string& b) {
    const int64_t H = cfg.n_head, lora = cfg.kv_lora_rank, nope = cfg.head_dim - cfg.rot(),
                  dv = cfg.v_dim();
    std::vector<float> row(static_cast<size_t>(lora));
    const size_t rb = gguf::row_bytes(kv_b.type, lora);
    // (The inner vectors' bytes stay where they are as `owned` grows; references to its
    // elements do not.)
    float* kb = reinterpret_cast<float*>(owned.emplace_back(size_t(H * lora * nope) * 4).data());
    float* vb = reinterpret_cast<float*>(owned.emplace_back(size_t(H * dv * lora) * 4).data());
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < nope + dv; ++r) {
        gguf::dequantize_row(
            kv_b.type, static_cast<const uint8_t*>(kv_b.data) + size_t(h * (nope + dv) + r) * rb,
            row.data(), lora);
        if (r < nope) {
          for (int64_t c = 0; c < lora; ++c) kb[(h * lora + c) * nope + r] = row[size_t(c)];
        } else {
          std::copy(row.begin(), row.end(), vb + (h * dv + (r - nope)) * lora);
        }
      }
    mem.owned += size_t(H * lora * (nope + dv)) * 4;
    const auto planes = [&](float* data, int64_t cols, int64_t rows, const char* name) {
      ggml_tensor* g = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, cols, rows, H);
      ggml_set_name(g, (b + name).c_str());
      g->data = data;
      return Weight{g, WeightType::f32, rows, cols, false, false};
    };
    return {planes(kb, nope, lora, "attn_k_b.weight (from attn_kv_b)"),
            planes(vb, lora, dv, "attn_v_b.weight (from attn_kv_b)")};
  }

  std::vector<Weight*> matrices() {
    std::vector<Weight*> v;
    for (Layer& L : layers)
      for (Weight* w :
           {&L.wq,       &L.wk,     &L.wv,        &L.wo,         &L.gate,      &L.up,
            &L.down,     &L.router, &L.gate_exps, &L.up_exps,    &L.down_exps, &L.wq_a,
            &L.wq_b,     &L.wkv_a,  &L.wkv_b,     &L.gate_shexp, &L.up_shexp,  &L.down_shexp,
            &L.idx_proj, &L.idx_k,  &L.idx_q_b})
        if (w->t) v.push_back(w);
    if (!tied) v.push_back(&output);
    return v;
  }

  // The weights the products read where they lie (in the mapping, unless copied): the matrices
  // ggml did not repack, the absorbed latent's per-head planes where the file holds that form,
  // and a tied head's embedding (an untied one's rows are only looked up).
  std::vector<Weight*> read_in_place() {
    std::vector<Weight*> v;
    for (Weight* w : matrices())
      if (!w->repacked) v.push_back(w);
    for (Layer& L : layers)
      for (Weight* w : {&L.wk_b, &L.wv_b})
        if (w->t) v.push_back(w);
    if (tied) v.push_back(&tok_embd);
    return v;
  }

  // Maps in, at load, the file's pages of every weight the products read in place
  // (read_in_place), as llama.cpp's loader does (MAP_POPULATE): else the first prefill faults
  // the weights in inside its timed products (one fault per 64 KiB at best, the kernel's
  // fault-around): the 1B shape's f16 pp512 took 5% longer, a 100-160 ms longer load against
  // 340-1430 ms less prefill on a Zen 3 (BENCHMARKS.md). The embedding of an untied head stays
  // unmapped until its rows are looked up.
  void populate_mapped(int threads) {
    if (!mapping || copy_buf) return;  // copied out of it: nothing read from the mapping
    const std::vector<Weight*> todo = read_in_place();
    parallel_for(int64_t(todo.size()), threads, [&](int64_t i, int) {
      const ggml_tensor* t = todo[size_t(i)]->t;
      populate(t->data, ggml_nbytes(t));
    });
  }

  // Copies the weights the products read in place (read_in_place) out of the mapping into one
  // buffer in huge pages (LoadOptions::mmap false), releasing the mapping's pages of each.
  // Nothing where THP is off: 4 KiB pages of anonymous memory stalled a plain read as the
  // mapping's did (log entry "The weights in huge pages").
  void copy_out_of_mapping(int threads) {
    if (!mapping || !huge_pages_offered()) return;
    const std::vector<Weight*> todo = read_in_place();
    if (todo.empty()) return;
    ggml_init_params ip{(todo.size() + 1) * ggml_tensor_overhead(), nullptr, true};
    copy_ctx = ggml_init(ip);
    SPATTN_CHECK(copy_ctx != nullptr, "model: ggml_init failed");
    std::vector<ggml_tensor*> dst;
    for (Weight* w : todo) dst.push_back(ggml_dup_tensor(copy_ctx, w->t));
    copy_buf = ggml_backend_alloc_ctx_tensors_from_buft(copy_ctx, ggml_backend_cpu_buffer_type());
    SPATTN_CHECK(copy_buf != nullptr, "model: could not allocate the weights' buffer (",
                 "--mmap reads them from the file instead)");
    ggml_backend_buffer_set_usage(copy_buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    advise_huge_pages(copy_buf);
    parallel_for(int64_t(todo.size()), threads, [&](int64_t i, int) {
      const ggml_tensor* src = todo[size_t(i)]->t;
      const size_t n = ggml_nbytes(src);
      populate(src->data, n);  // one call, not a fault per few pages
      std::memcpy(dst[size_t(i)]->data, src->data, n);
      release_mapped(src->data, n);
    });
    for (size_t i = 0; i < todo.size(); ++i) {
      const size_t n = ggml_nbytes(todo[i]->t);
      mem.mapped -= n;
      mem.owned += n;
      todo[i]->t = dst[i];
    }
    if (tied) output.t = tok_embd.t;
  }

  // Moves the matrices ggml repacks on this CPU into a repack buffer (llama.cpp's default:
  // faster products). The token embedding stays: its rows are looked up, and a tied head
  // reads it in place. The mapped pages of a repacked matrix are released afterwards, so
  // resident memory holds each weight once.
  void repack(int threads) {
    ggml_backend_buffer_type_t buft = repack_buffer_type();
    if (!buft) return;
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(ggml_backend_cpu_reg(), 0);
    ggml_backend_buffer_t probe = ggml_backend_buft_alloc_buffer(buft, 0);
    std::vector<Weight*> todo;
    {
      ggml_init_params ip{16 * ggml_tensor_overhead(), nullptr, true};
      ggml_context* tmp = ggml_init(ip);
      for (Weight* w : matrices()) {
        // ggml's own test: would a product with this weight in the repack buffer run there?
        // (Experts' matrices: the product that picks a plane per token, as llama.cpp asks.)
        ggml_tensor* a = ggml_dup_tensor(tmp, w->t);
        a->buffer = probe;
        ggml_tensor* op = nullptr;
        if (w->experts) {
          ggml_tensor* x = ggml_new_tensor_3d(tmp, GGML_TYPE_F32, w->cols, 1, 1);
          ggml_tensor* ids = ggml_new_tensor_2d(tmp, GGML_TYPE_I32, 1, 1);
          op = ggml_mul_mat_id(tmp, a, x, ids);
        } else {
          op = ggml_mul_mat(tmp, a, ggml_new_tensor_2d(tmp, GGML_TYPE_F32, w->cols, 1));
        }
        // A matrix ggml repacks stays repacked (its decode products are faster so: 4-8% at
        // tg64 on the 1B shape's Q4_K_M, Zen 5); prefill's integer products read ggml's
        // repacked copy where it is in the layout they know (below: int8_interleaved).
        if (probe && ggml_backend_dev_supports_op(dev, op)) todo.push_back(w);
        ggml_reset(tmp);
      }
      ggml_free(tmp);
    }
    if (probe) ggml_backend_buffer_free(probe);
    if (todo.empty()) return;
    ggml_init_params ip{(todo.size() + 1) * ggml_tensor_overhead(), nullptr, true};
    repack_ctx = ggml_init(ip);
    std::vector<ggml_tensor*> dst;
    for (Weight* w : todo) dst.push_back(ggml_dup_tensor(repack_ctx, w->t));
    repack_buf = ggml_backend_alloc_ctx_tensors_from_buft(repack_ctx, buft);
    SPATTN_CHECK(repack_buf != nullptr, "model: could not allocate ",
                 "the repacked weights' buffer");
    ggml_backend_buffer_set_usage(repack_buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    advise_huge_pages(repack_buf);
    std::vector<char> interleaved(todo.size(), 0);
    parallel_for(int64_t(todo.size()), threads, [&](int64_t i, int) {
      ggml_tensor* src = todo[size_t(i)]->t;
      const size_t n = ggml_nbytes(src);
      if (mapping) populate(src->data, n);  // before the copy reads them
      ggml_backend_tensor_set(dst[size_t(i)], src->data, 0, n);
      // Whether the copy is in the 8-row layout prefill's integer products read (ggml picks its
      // layout per CPU; checked against the original rows while they are at hand).
      const auto f = kernels::int8_format(gguf::GgmlType(src->type));  // ggml's numbers
      interleaved[size_t(i)] =
          f && kernels::gemm_int8_reads(*f, kernels::Int8Layout::interleaved8) &&
          !todo[size_t(i)]->experts && ggml_is_contiguous(src) &&
          kernels::gemm_int8_interleaved_matches(*f, src->data, dst[size_t(i)]->data,
                                                 int64_t(src->nb[1]), src->ne[1], src->ne[0]);
      if (mapping) release_mapped(src->data, n);  // as soon as it is repacked
    });
    for (size_t i = 0; i < todo.size(); ++i) {
      Weight& w = *todo[i];
      const size_t n = ggml_nbytes(w.t);
      if (mapping) mem.mapped -= n;
      mem.repacked += n;
      w.t = dst[i];
      w.repacked = true;
      w.int8_interleaved = interleaved[i] != 0;
    }
  }
};

Model::Model(const ModelRefs& refs, std::shared_ptr<const gguf::File> mapping,
             const LoadOptions& load)
    : p_(std::make_unique<Impl>()) {
  Impl& m = *p_;
  m.cfg = refs.cfg;
  m.mapping = std::move(mapping);
  const Config& c = m.cfg;
  c.validate();
  const int64_t D = c.n_embd;
  SPATTN_CHECK(int64_t(refs.layers.size()) == c.n_layer, "model: ", refs.layers.size(),
               " layers given for block_count ", c.n_layer);
  ggml_init_params ip{size_t(26 * c.n_layer + 4) * ggml_tensor_overhead(), nullptr, true};
  m.ctx = ggml_init(ip);
  SPATTN_CHECK(m.ctx != nullptr, "model: ggml_init failed");
  m.tok_embd = m.mat(refs.tok_embd, kTokenEmbd, c.n_vocab, D);
  m.embd_row_bytes = gguf::row_bytes(m.tok_embd.type, D);
  m.output_norm = m.vec(refs.output_norm, kOutputNorm, D);
  m.tied = refs.output.data == nullptr;
  m.output = m.tied ? m.tok_embd : m.mat(refs.output, kOutput, c.n_vocab, D);
  const ArchTraits t = layout_traits(c);  // the tensors of the file's layout
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerRefs& r = refs.layers[size_t(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    Layer L;
    // Every tensor the architecture has, checked under the name the file gives it (a fused
    // matrix's parts under their own: the reader split them); an optional one only when given.
    for (const TensorSpec& s : layer_tensors()) {
      const LayerKind kind = layer_kind(c, l);
      const Presence need = std::max(s.need(t, kind), fused_part_need(t, kind, s.ref));
      const WeightRef& w = r.*s.ref;
      if (need == Presence::absent || (need == Presence::optional && !w.data)) continue;
      const int64_t rows = dim(s.rows, c), cols = dim(s.cols, c);
      if (!s.matrix && !s.values) continue;  // read into another below
      if (s.store == Store::values) {
        L.*s.values = m.vec(w, b + s.name, cols, rows);
      } else {
        Weight& mw = L.*s.matrix;
        mw = m.mat(w, b + s.name, rows, cols, dim(s.planes, c));
        mw.experts = s.planes != Dim::one;
      }
    }
    // The latent attention's other form is made from these when a session runs it
    // (use_mla_form); its conversion to f32 is checked here, at load.
    if (t.mla_absorbed) {
      const int64_t H = c.n_head, lora = c.kv_lora_rank, nope = c.head_dim - c.rot();
      L.wk_b = m.mat(r.wk_b, b + "attn_k_b.weight", lora, nope, H);
      L.wv_b = m.mat(r.wv_b, b + "attn_v_b.weight", c.v_dim(), lora, H);
      for (const WeightRef* w : {&r.wk_b, &r.wv_b})
        SPATTN_CHECK(has_f32(w->type), "model: tensor ", b, w == &r.wk_b ? "attn_k_b" : "attn_v_b",
                     " has type ", gguf::type_name(w->type), ", which has no f32 conversion");
    } else if (t.mla) {
      SPATTN_CHECK(has_f32(r.wkv_b.type), "model: tensor ", b, "attn_kv_b has type ",
                   gguf::type_name(r.wkv_b.type), ", which has no f32 conversion");
      // The bytes the products would read before a repack moves them (the mapping's, or ours).
      m.kv_b_stored.push_back(
          {r.wkv_b.type, L.wkv_b.t->data, r.wkv_b.rows, r.wkv_b.cols, r.wkv_b.planes});
    }
    m.layers.push_back(std::move(L));
  }
  static std::once_flag log_once;
  std::call_once(log_once, [] { ggml_log_set(ggml_log_info_and_above, nullptr); });
  m.repack(resolve_threads(0));
  if (!load.mmap) m.copy_out_of_mapping(resolve_threads(0));
  m.populate_mapped(resolve_threads(0));
}

Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

const void* Model::Weight::data() const { return t ? t->data : nullptr; }

const Config& Model::config() const { return p_->cfg; }
bool Model::tied_output() const { return p_->tied; }
const Model::Layer& Model::layer(int64_t i) const { return p_->layers[size_t(i)]; }
const std::vector<float>& Model::output_norm() const { return p_->output_norm; }
const Model::Weight& Model::output() const { return p_->output; }
Model::Memory Model::memory() const {
  const std::lock_guard<std::mutex> lock(p_->built);
  return p_->mem;
}

void Model::use_mla_form(bool absorbed) const {
  Impl& m = *p_;
  const Config& c = m.cfg;
  if (!c.is_mla() || absorbed == c.mla_absorbed) return;  // the file's own form
  std::call_once(absorbed ? m.absorbed_once : m.expanded_once, [&] {
    const std::lock_guard<std::mutex> lock(m.built);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      Layer& L = m.layers[size_t(l)];
      const std::string b = "blk." + std::to_string(l) + ".";
      if (absorbed) {
        std::tie(L.wk_b, L.wv_b) = m.split_kv_b(m.kv_b_stored[size_t(l)], b);
      } else {
        const auto stored = [](const Weight& w) {
          return WeightRef{w.type, w.t->data, w.rows, w.cols, w.t->ne[2]};
        };
        L.wkv_b = m.expand_kv_b(stored(L.wk_b), stored(L.wv_b), b);
      }
    }
  });
}

void Model::embed(int32_t token, float* dst) const {
  SPATTN_CHECK(token >= 0 && token < p_->cfg.n_vocab, "token id ", token,
               " is outside the vocabulary [0, ", p_->cfg.n_vocab, ")");
  const auto* row =
      static_cast<const uint8_t*>(p_->tok_embd.t->data) + size_t(token) * p_->embd_row_bytes;
  gguf::dequantize_row(p_->tok_embd.type, row, dst, p_->cfg.n_embd);
}

}  // namespace spattn::model
