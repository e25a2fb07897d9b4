// The latent attention's cache and absorbed form (SessionOptions::mla_expanded false, the
// default): each layer caches a token's kv latent and rope key, one kv head of kv_lora_rank +
// rope values, and attends as multi-query attention over it with q taken into the latent by
// Wk_b and the output out of it by Wv_b (llama.cpp's deepseek2 graph, is_mla). The reference
// twin is the same file run in the expanded form (every head's k and v cached, multi-head
// attention), which computes the same function in another order: prefill's and decode's logits
// agree to rounding, for deepseek2 (attn_kv_b split into Wk_b / Wv_b, and a file in the
// absorbed layout; with a q latent and without), deepseek32 and glm-dsa (attn_k_b / attn_v_b
// as the file has them), dense and with DSA's selection below the context. The form the file
// does not hold is made only for a session that runs it. The cache's bytes a token: (kv_lora_rank + rope) values a
// layer for K and as many for V, against 2 x heads x head dim expanded.
// Against llama.cpp: ArchVsLlamaCpp.* (scripts/deepseek2_vs_llama.sh and the others).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "model/kv_cache.hpp"
#include "spattn/attention.hpp"
#include "spattn/model.hpp"
#include "spattn/model_maker.hpp"
#include "temp_dir.hpp"

#include <nlohmann/json.hpp>

namespace {

using spattn::ModelShape;
namespace model = spattn::model;

// A latent attention of kv latent 32 and rope 8 (the absorbed head: 40 values, a multiple of 8
// the kernels take), 4 heads of k 24 and v 16, 3 layers (the first dense).
ModelShape tiny(const char* preset) {
  ModelShape s = spattn::preset_shape(preset);
  s.layers = 3, s.dim = 64, s.heads = 4, s.kv_heads = 4, s.head_dim = 24, s.rope_dim = 8;
  s.v_head_dim = 16, s.q_lora = 32, s.kv_lora = 32, s.ffn = 96, s.experts = 8;
  s.experts_used = 2, s.expert_ffn = 32, s.dense_layers = 1, s.expert_groups = 0;
  s.groups_used = 0, s.vocab = 300, s.context = 512, s.type = spattn::gguf::GgmlType::f32;
  if (s.indexer_top_k > 0) s.indexer_heads = 2, s.indexer_dim = 64, s.indexer_top_k = 12;
  return s;
}

std::vector<int32_t> prompt(int64_t n) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(int32_t((i * 37 + 11) % 300));
  return t;
}

// Every prompt row's logits (prefill; chunks of 16 rows, so later chunks read the cache), then
// the logits of `decoded` more tokens decoded one by one, appended.
std::vector<float> logits(const model::Model& m, bool expanded, const std::string& attn,
                          const std::vector<int32_t>& toks, int64_t decoded) {
  model::SessionOptions o;
  o.n_ctx = 128;
  o.n_ubatch = 16;
  o.cache_type_k = o.cache_type_v = spattn::KVType::f32;
  o.mla_expanded = expanded;
  o.mla_latent_legacy = true;  // deepseek2's attn_kv_b layout too
  o.attn = o.attn_decode = attn;
  model::Session s(m, o);
  EXPECT_EQ(s.attention_shape().latent, !expanded);
  const int64_t n = int64_t(toks.size()) - decoded, V = m.config().n_vocab;
  std::vector<float> out(toks.size() * size_t(V));
  s.prefill(std::span(toks).first(size_t(n)), out.data(), 0);
  for (int64_t i = n; i < int64_t(toks.size()); ++i) s.decode(toks[size_t(i)], out.data() + i * V);
  return out;
}

double worst_gap(const std::vector<float>& a, const std::vector<float>& b) {
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(std::isfinite(a[i]));
    w = std::max(w, double(std::abs(a[i] - b[i])));
  }
  return w;
}

// Both forms over the same file and tokens: prefill's rows and decode's steps agree to f32
// rounding (the two forms sum the same products in other orders), and the absorbed run is not
// the expanded one's bits (it did run another form).
void expect_forms_agree(const ModelShape& s, const std::string& attn) {
  SCOPED_TRACE(s.arch + " q_lora " + std::to_string(s.q_lora) + " --attn " + attn);
  const spattn::test::TempDir d("spattn_mla_latent");
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, s);
  const model::Model m = model::load_model(p);
  const std::vector<int32_t> toks = prompt(48);
  const std::vector<float> latent = logits(m, false, attn, toks, 8),
                           expanded = logits(m, true, attn, toks, 8);
  const double gap = worst_gap(latent, expanded);
  EXPECT_LT(gap, 2e-4);
  EXPECT_GT(gap, 0.0);
}

TEST(MlaLatent, AbsorbedEqualsExpandedDeepSeek2) {
  ModelShape s = tiny("deepseek-v3");
  expect_forms_agree(s, "dense");
  s.q_lora = 0;  // V2-Lite's one q matrix
  expect_forms_agree(s, "dense");
}

// DSA's selection (top-k 12 of up to 47 predecessors) applies in both forms: the same tokens
// selected (the indexer does not depend on the form), so the same logits.
TEST(MlaLatent, AbsorbedEqualsExpandedWithDsaSelection) {
  for (const char* preset : {"deepseek-v3.2", "glm-5"}) {
    expect_forms_agree(tiny(preset), "dense");
    expect_forms_agree(tiny(preset), "dsa");
  }
}

// The real models' latent width: DeepSeek V3 / V3.2's and GLM-5's kv latent of 512 and rope key
// of 64 (one kv head of 576, spattn::kMaxHeadDim) runs absorbed, over the latent cache.
TEST(MlaLatent, RealLatentWidthRunsAbsorbed) {
  ModelShape s = tiny("deepseek-v3.2");
  s.kv_lora = 512, s.rope_dim = 64, s.head_dim = 96, s.v_head_dim = 32;
  ASSERT_EQ(s.kv_lora + s.rope_dim, spattn::kMaxHeadDim);
  expect_forms_agree(s, "dense");
  expect_forms_agree(s, "dsa");
}

// deepseek2 in the absorbed layout (attn_k_b / attn_v_b and the _mla key lengths, as current
// converters write DeepSeek V2/V3): read as deepseek32's layout, run absorbed by default as
// llama.cpp runs it (is_mla), and the two forms agree on it, with a q latent and without.
TEST(MlaLatent, DeepSeek2InTheAbsorbedLayoutRunsAbsorbed) {
  ModelShape s = tiny("deepseek-v3");
  s.mla_absorbed = true;
  for (int64_t q_lora : {32, 0}) {
    s.q_lora = q_lora;
    expect_forms_agree(s, "dense");
    const spattn::test::TempDir d("spattn_mla_latent");
    const std::string p = (d / "m.gguf").string();
    spattn::make_model(p, s);
    const model::Model m = model::load_model(p);
    EXPECT_TRUE(m.config().mla_absorbed);
    model::SessionOptions o;
    o.n_ctx = 64;
    EXPECT_TRUE(model::Session(m, o).attention_shape().latent);
  }
  // The same shape in the legacy layout (attn_kv_b) runs expanded by default.
  s.mla_absorbed = false;
  const spattn::test::TempDir d("spattn_mla_latent");
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, s);
  const model::Model m = model::load_model(p);
  EXPECT_FALSE(m.config().mla_absorbed);
  model::SessionOptions o;
  o.n_ctx = 64;
  EXPECT_FALSE(model::Session(m, o).attention_shape().latent);
}

// The form the file does not hold is made (f32) by the first session that runs it, not at
// load: sessions of an absorbed file that run absorbed never hold the expanded attn_kv_b
// (heads x (nope + v) rows of the kv latent a layer: about 4 GB on DeepSeek V3.2), nor do a
// legacy file's expanded sessions hold its split attn_k_b / attn_v_b. Model::memory's owned
// bytes (spattn run --json's weights_owned_bytes) grow by it then, once.
TEST(MlaLatent, TheOtherFormIsMadeOnlyForASessionThatRunsIt) {
  for (const bool absorbed_file : {true, false}) {
    SCOPED_TRACE(absorbed_file ? "absorbed layout" : "attn_kv_b");
    const spattn::test::TempDir d("spattn_mla_latent");
    const std::string p = (d / "m.gguf").string();
    spattn::make_model(p, tiny(absorbed_file ? "deepseek-v3.2" : "deepseek-v3"));
    const model::Model m = model::load_model(p);
    const model::Config& c = m.config();
    const size_t other =
        size_t(c.n_layer * c.n_head * (c.head_dim - c.rot() + c.v_dim()) * c.kv_lora_rank) *
        sizeof(float);
    const size_t at_load = m.memory().owned;
    const auto made = [&] {
      bool all = true, none = true;
      for (int64_t l = 0; l < c.n_layer; ++l) {
        const model::Model::Layer& L = m.layer(l);
        const bool has = absorbed_file ? L.wkv_b.t != nullptr : L.wk_b.t && L.wv_b.t;
        all = all && has;
        none = none && !has;
      }
      EXPECT_TRUE(all || none);
      return all;
    };
    EXPECT_FALSE(made());
    model::SessionOptions o;
    o.n_ctx = 64;
    {
      const model::Session own(m, o);  // the default: the file's own form
      EXPECT_EQ(own.attention_shape().latent, absorbed_file);
    }
    EXPECT_FALSE(made());
    EXPECT_EQ(m.memory().owned, at_load);
    o.mla_expanded = absorbed_file;
    o.mla_latent_legacy = !absorbed_file;
    const model::Session a(m, o);
    EXPECT_EQ(a.attention_shape().latent, !absorbed_file);
    EXPECT_TRUE(made());
    EXPECT_EQ(m.memory().owned, at_load + other);
    const model::Session b(m, o);
    EXPECT_EQ(m.memory().owned, at_load + other);
  }
}

// A decode past the top-k reads 12 keys of its kv head a layer in the latent cache (one head),
// not every head's. The prefill's gathers staged the cache (its f32 K and V, and K token-major)
// and the memory report says how large that copy was; dense attention stages nothing.
TEST(MlaLatent, DsaDecodeReadsTheSelectedLatentRows) {
  const spattn::test::TempDir d("spattn_mla_latent");
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, tiny("deepseek-v3.2"));
  const model::Model m = model::load_model(p);
  model::SessionOptions o;
  o.n_ctx = 128;
  model::Session s(m, o);
  const std::vector<int32_t> toks = prompt(40);
  s.prefill(std::span(toks).first(39), nullptr, 0);
  const int64_t w = m.config().kv_lora_rank + m.config().rot();
  EXPECT_GE(s.memory().attention_staging, size_t(3 * 39 * w) * sizeof(float));
  o.attn = "dense";
  model::Session dense(m, o);
  dense.prefill(std::span(toks).first(39), nullptr, 0);
  EXPECT_EQ(dense.memory().attention_staging, 0u);
  std::vector<float> out(size_t(m.config().n_vocab));
  s.decode(toks.back(), out.data());
  const model::Timings& t = s.timings();
  const int64_t L = m.config().n_layer;
  EXPECT_EQ(t.decode_keys_total, L * 40);  // one kv head a layer, 40 tokens cached
  EXPECT_EQ(t.decode_keys_read, L * 12);
  // The indexer's keys: room for the context in every layer (f32), beside the packed copies;
  // dense attention keeps them too (the selection is the model's, whatever reads it).
  const size_t room = size_t(L * o.n_ctx * m.config().indexer_dim) * sizeof(float);
  EXPECT_GE(s.memory().indexer_keys, room);
  EXPECT_LT(s.memory().indexer_keys, 3 * room);
  EXPECT_GE(dense.memory().indexer_keys, room);
}

// The cache's bytes a token over every layer: K (kv latent + rope) of one kv head, as stored,
// and no V (its values are the latent, K's first values, as llama.cpp's MLA cache holds K
// only), against every head's k and v expanded.
TEST(MlaLatent, CacheHoldsTheLatentPerToken) {
  const spattn::test::TempDir d("spattn_mla_latent");
  const std::string p = (d / "m.gguf").string();
  const ModelShape s = tiny("deepseek-v3");
  spattn::make_model(p, s);
  const model::Model m = model::load_model(p);
  const model::Config& c = m.config();
  for (spattn::KVType t : {spattn::KVType::f16, spattn::KVType::f32}) {
    const size_t elem = t == spattn::KVType::f16 ? 2 : 4;
    model::SessionOptions o;
    o.n_ctx = 256;
    o.cache_type_k = o.cache_type_v = t;
    o.mla_latent_legacy = true;
    const model::Session latent(m, o);
    const int64_t w = c.kv_lora_rank + c.rot();  // 40
    EXPECT_EQ(latent.cache().kv_heads(), 1);
    EXPECT_EQ(latent.cache().dim(), w);
    // K's (kv_lora_rank + rope) values each layer, nothing else.
    EXPECT_TRUE(latent.cache().v_is_k());
    EXPECT_EQ(latent.cache().bytes_per_token(), size_t(c.n_layer * w) * elem);
    EXPECT_EQ(latent.memory().kv_cache_per_token, latent.cache().bytes_per_token());
    o.mla_expanded = true;
    const model::Session expanded(m, o);
    EXPECT_EQ(expanded.cache().bytes_per_token(),
              size_t(c.n_layer * c.n_head) * size_t(c.head_dim + 32) * elem);  // v 24 -> 32
    EXPECT_FALSE(expanded.cache().v_is_k());
    EXPECT_GT(expanded.memory().kv_cache, 2 * latent.memory().kv_cache);
  }
}

// spattn run --json's memory report names the layout and its bytes a token.
TEST(MlaLatent, RunJsonReportsTheLatentCache) {
  const spattn::test::TempDir d("spattn_mla_latent");
  const std::string p = (d / "m.gguf").string();
  const ModelShape s = tiny("deepseek-v3.2");  // the absorbed layout: latent by default
  spattn::make_model(p, s);
  const auto r = spattn::test::run_spattn("run -m " + p + " -p hi -n 2 -c 256 --json", d);
  ASSERT_EQ(r.code(), 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out)["memory"];
  EXPECT_EQ(j["kv_cache_layout"], "latent");
  EXPECT_EQ(j["kv_cache_heads"], 1);
  EXPECT_EQ(j["kv_cache_head_dim"], s.kv_lora + s.rope_dim);
  EXPECT_EQ(j["kv_cache_tokens"], 256);
  EXPECT_EQ(j["kv_cache_bytes_per_token"].get<int64_t>(), s.layers * 40 * 2);  // f16, K only
  EXPECT_GE(j["kv_cache_bytes"].get<int64_t>(), 256 * j["kv_cache_bytes_per_token"].get<int64_t>());
  // The weights it owns are the loader's alone (f32 norms): no expanded attn_kv_b made.
  EXPECT_EQ(j["weights_owned_bytes"].get<size_t>(), model::load_model(p).memory().owned);
}

}  // namespace
