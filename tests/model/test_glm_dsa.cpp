// glm-dsa (GLM-5): deepseek32's layout under its own name, and what the row changes: the
// indexer's RoPE in adjacent pairs and its key's LayerNorm without epsilon (llama.cpp's
// glm-dsa graph and loader), sigmoid gating where the file names none, no YaRN; the runner's
// dsa against dense (the same output while every token reads all before it, apart once the
// top-k selects; decode against prefill); GLM-5.2's layers that share another layer's
// selection (attention.indexer.types): read, their pattern where the file has no key, and run.
// Against llama.cpp: scripts/glm_dsa_vs_llama.sh (ArchVsLlamaCpp.GlmDsa...) and
// ArchVsLlamaCpp.DsaTopKBelowTheContext.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "dsa_logits.hpp"
#include "gguf_edit.hpp"
#include "spattn/arch.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model.hpp"
#include "spattn/model_maker.hpp"
#include "temp_dir.hpp"

namespace {

using spattn::ModelShape;
using spattn::gguf::File;

// GLM-5's layout shrunk: 3 layers (the first dense), 4 heads of k 24 (rope 8) and v 16,
// latents 32 / 16, 8 experts (2 a token), one shared; the indexer 2 heads of 64, top-k 12.
ModelShape glm_tiny() {
  ModelShape s = spattn::preset_shape("glm-5");
  s.layers = 3, s.dim = 64, s.heads = 4, s.kv_heads = 4, s.head_dim = 24, s.rope_dim = 8;
  s.v_head_dim = 16, s.q_lora = 32, s.kv_lora = 16, s.ffn = 96, s.experts = 8;
  s.experts_used = 2, s.expert_ffn = 32, s.dense_layers = 1, s.vocab = 300, s.context = 512;
  s.type = spattn::gguf::GgmlType::f32;
  s.indexer_heads = 2, s.indexer_dim = 64, s.indexer_top_k = 12;
  return s;
}

TEST(GlmDsa, LayoutAndWhatTheRowChanges) {
  const spattn::test::TempDir d("spattn_glm_dsa");
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, glm_tiny());
  const File f = File::open(p);
  EXPECT_EQ(f.get_string("general.architecture"), "glm-dsa");
  EXPECT_EQ(f.get_uint("glm-dsa.attention.key_length_mla"), 24u);
  EXPECT_EQ(f.get_uint("glm-dsa.attention.indexer.top_k"), 12u);
  EXPECT_FALSE(f.has("glm-dsa.rope.scaling.type"));
  EXPECT_EQ(f.tensor("blk.0.attn_k_b.weight").ne, (std::vector<int64_t>{16, 16, 4}));
  EXPECT_EQ(f.tensor("blk.1.indexer.attn_q_b.weight").ne, (std::vector<int64_t>{32, 2 * 64}));
  const spattn::model::Model m = spattn::model::load_model(p);
  EXPECT_STREQ(spattn::model::arch_name(m.config().arch), "glm-dsa");
  EXPECT_EQ(m.config().indexer_top_k, 12);
  EXPECT_EQ(m.config().gating, spattn::model::Config::Gating::sigmoid);
  const spattn::model::ArchTraits& t = spattn::model::arch_traits(m.config().arch);
  EXPECT_FALSE(t.indexer_rope_neox);
  EXPECT_EQ(t.indexer_norm_eps, 0.0f);
  const spattn::model::ArchTraits* ds = spattn::model::find_arch("deepseek32");
  ASSERT_NE(ds, nullptr);
  EXPECT_TRUE(ds->indexer_rope_neox);
  EXPECT_EQ(ds->indexer_norm_eps, 1e-6f);
  // No gating key: sigmoid (llama.cpp's glm-dsa loader), where deepseek32 takes softmax.
  spattn::test::GgufEdit e;
  e.drop_keys = {"glm-dsa.expert_gating_func"};
  const std::string nogate = (d / "nogate.gguf").string();
  spattn::test::write_edited(f, nogate, e);
  EXPECT_EQ(spattn::model::load_model(nogate).config().gating,
            spattn::model::Config::Gating::sigmoid);
  // GLM-5 has no YaRN in llama.cpp's glm-dsa (no yarn_log_multiplier read).
  ModelShape y = glm_tiny();
  y.rope_scaling = "yarn";
  EXPECT_THROW(spattn::check_shape(y), spattn::Error);
}

using spattn::test::dsa_logits;
using spattn::test::worst_gap;

TEST(GlmDsa, DsaIsDenseUntilTheTopKThenSelects) {
  const spattn::test::TempDir d("spattn_glm_dsa");
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, glm_tiny());
  const spattn::model::Model m = spattn::model::load_model(p);
  std::vector<int32_t> toks;
  for (int32_t i = 0; i < 40; ++i) toks.push_back((i * 37 + 11) % 300);
  const int64_t n = int64_t(toks.size()), V = m.config().n_vocab, top_k = 12;
  const std::vector<float> dense = dsa_logits(m, "dense", toks, false),
                           dsa = dsa_logits(m, spattn::model::kModelAttention, toks, false);
  EXPECT_LT(worst_gap(dense, dsa, 0, top_k, V), 1e-4);
  EXPECT_GT(worst_gap(dense, dsa, top_k + 1, n, V), 1e-2);
  const std::vector<float> dec = dsa_logits(m, "dsa", toks, true);
  EXPECT_LT(worst_gap(dec, dsa, n - 1, n, V), 1e-3);
}

// GLM-5.2: layer 1 of 1, 0, 1 has no indexer and attends over layer 0's selection (the same
// rows' tokens, within each call: prefill in chunks and decode alike). Against llama.cpp:
// ArchVsLlamaCpp.Glm52SharedIndexerLayers.
TEST(GlmDsa, SharedIndexerLayersAttendOverTheLastFullLayersTokens) {
  const spattn::test::TempDir d("spattn_glm_dsa");
  const std::string p = (d / "m.gguf").string();
  ModelShape s = glm_tiny();
  s.indexer_types = {1, 0, 1};
  spattn::make_model(p, s);
  const File f = File::open(p);
  EXPECT_EQ(f.get_int_array("glm-dsa.attention.indexer.types"), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(f.find_tensor("blk.1.indexer.attn_q_b.weight"), nullptr);
  EXPECT_NE(f.find_tensor("blk.2.indexer.attn_q_b.weight"), nullptr);
  const spattn::model::Model m = spattn::model::load_model(p);
  EXPECT_EQ(m.config().indexer_shared, (std::vector<uint8_t>{0, 1, 0}));
  std::vector<int32_t> toks;
  for (int32_t i = 0; i < 40; ++i) toks.push_back((i * 37 + 11) % 300);
  const int64_t n = int64_t(toks.size()), V = m.config().n_vocab, top_k = 12;
  const std::vector<float> dense = dsa_logits(m, "dense", toks, false),
                           dsa = dsa_logits(m, "dsa", toks, false);
  EXPECT_LT(worst_gap(dense, dsa, 0, top_k, V), 1e-4);
  EXPECT_GT(worst_gap(dense, dsa, top_k + 1, n, V), 1e-2);
  const std::vector<float> dec = dsa_logits(m, "dsa", toks, true);
  EXPECT_LT(worst_gap(dec, dsa, n - 1, n, V), 1e-3);
  // Prefill in chunks of 7 rows: each call's shared layer reads that call's selection.
  spattn::model::SessionOptions o;
  o.n_ctx = 128;
  o.n_ubatch = 7;
  o.attn = "dsa";
  spattn::model::Session chunked(m, o);
  std::vector<float> by7(dsa.size());
  chunked.prefill(toks, by7.data(), 0);
  EXPECT_LT(worst_gap(by7, dsa, 0, n, V), 1e-4);
}

// Without attention.indexer.types, a glm-dsa file of a context of 1M tokens takes GLM-5.2's
// pattern (llama.cpp's: layers 0 and 1 full, then one in four from layer 2); one value sets
// every layer; a pattern whose layer 0 shares is a named error (exit 2).
TEST(GlmDsa, IndexerTypesDefaultAndScalar) {
  const spattn::test::TempDir d("spattn_glm_dsa");
  const std::string p = (d / "m.gguf").string();
  ModelShape s = glm_tiny();
  s.layers = 7;
  spattn::make_model(p, s);
  spattn::test::GgufEdit e;
  e.set_u32["glm-dsa.context_length"] = 1048576;
  const std::string m1 = (d / "glm52.gguf").string();
  spattn::test::write_edited(File::open(p), m1, e);
  EXPECT_EQ(spattn::model::load_model(m1).config().indexer_shared,
            (std::vector<uint8_t>{0, 0, 0, 1, 1, 1, 0}));
  spattn::test::GgufEdit all;
  all.set_u32["glm-dsa.attention.indexer.types"] = 1;
  all.set_u32["glm-dsa.context_length"] = 1048576;
  const std::string m2 = (d / "full.gguf").string();
  spattn::test::write_edited(File::open(p), m2, all);
  EXPECT_TRUE(spattn::model::load_model(m2).config().indexer_shared.empty());
  spattn::test::GgufEdit none;
  none.set_u32["glm-dsa.attention.indexer.types"] = 0;
  const std::string m3 = (d / "none.gguf").string();
  spattn::test::write_edited(File::open(p), m3, none);
  const auto r = spattn::test::run_spattn("run -m " + m3 + " -p hi -n 1", d);
  EXPECT_EQ(r.code(), 2) << r.err;
  EXPECT_NE(r.err.find("glm-dsa.attention.indexer.types makes layer 0 share"), std::string::npos)
      << r.err;
}

// make-model's --indexer-types: a 0 or 1 a layer, the first 1, and only for an indexer's
// architecture; anything else is a named error before a file is written.
TEST(GlmDsa, BadIndexerTypesAreNamedErrors) {
  for (const std::vector<uint32_t>& types :
       {std::vector<uint32_t>{0, 1, 1}, {1, 2, 1}, {1, 0}, {1, 0, 1, 1}}) {
    ModelShape s = glm_tiny();
    s.indexer_types = types;
    EXPECT_THROW(spattn::check_shape(s), spattn::Error) << types.size();
  }
  ModelShape ok = glm_tiny();
  ok.indexer_types = {1, 0, 0};
  EXPECT_NO_THROW(spattn::check_shape(ok));
  ModelShape v3 = spattn::preset_shape("deepseek-v3");  // no indexer
  EXPECT_NO_THROW(spattn::check_shape(v3));
  v3.indexer_types = {1};
  EXPECT_THROW(spattn::check_shape(v3), spattn::Error);
  const spattn::test::TempDir d("spattn_glm_dsa");
  const auto r = spattn::test::run_spattn(
      "make-model -o " + (d / "bad.gguf").string() +
          " --preset glm-5 --layers 3 --dim 64 --vocab 300 --indexer-types 1,0,2",
      d);
  EXPECT_EQ(r.code(), 2) << r.err;
  EXPECT_NE(r.err.find("--indexer-types"), std::string::npos) << r.err;
}

}  // namespace
