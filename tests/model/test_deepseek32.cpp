// deepseek32 (DeepSeek V3.2): the layout make-model writes (llama.cpp's names and keys: the
// absorbed attn_k_b / attn_v_b, the lightning indexer's tensors and keys), the loader's config
// and its expanded attn_kv_b (attn_k_b's planes transposed, attn_v_b's as they are), the runner
// with --attn dsa against dense (the same output while every token reads all before it; apart
// once the top-k selects; decode against prefill) and the bad files as named errors (exit 2).
// Against llama.cpp: scripts/deepseek32_vs_llama.sh (ArchVsLlamaCpp.DeepSeek32...).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "dsa_logits.hpp"
#include "gguf_edit.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model.hpp"
#include "spattn/model_maker.hpp"
#include "temp_dir.hpp"

namespace {

using spattn::ModelShape;
using spattn::gguf::File;
namespace fs = std::filesystem;

// DeepSeek-V3.2's layout shrunk: 3 layers (the first dense), 4 heads of k 24 (rope 8) and v
// 16, latents 32 / 16, 8 experts in 4 groups (2 used), 2 a token, one shared; the indexer 2
// heads of 64, top-k 12.
ModelShape deepseek32_tiny() {
  ModelShape s = spattn::preset_shape("deepseek-v3.2");
  s.layers = 3, s.dim = 64, s.heads = 4, s.kv_heads = 4, s.head_dim = 24, s.rope_dim = 8;
  s.v_head_dim = 16, s.q_lora = 32, s.kv_lora = 16, s.ffn = 96, s.experts = 8;
  s.experts_used = 2, s.expert_ffn = 32, s.dense_layers = 1, s.expert_groups = 4;
  s.groups_used = 2, s.vocab = 300, s.context = 512, s.type = spattn::gguf::GgmlType::f32;
  s.indexer_heads = 2, s.indexer_dim = 64, s.indexer_top_k = 12;
  return s;
}

TEST(DeepSeek32, LayoutIsWrittenAndReadIntoTheExpandedForm) {
  const spattn::test::TempDir d("spattn_ds32");
  const ModelShape s = deepseek32_tiny();
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, s);
  const File f = File::open(p);
  EXPECT_EQ(f.get_string("general.architecture"), "deepseek32");
  EXPECT_EQ(f.get_uint("deepseek32.attention.key_length"), 16u + 8u);  // kv latent + rope
  EXPECT_EQ(f.get_uint("deepseek32.attention.value_length"), 16u);
  EXPECT_EQ(f.get_uint("deepseek32.attention.key_length_mla"), 24u);
  EXPECT_EQ(f.get_uint("deepseek32.attention.value_length_mla"), 16u);
  EXPECT_EQ(f.get_uint("deepseek32.attention.head_count_kv"), 1u);
  EXPECT_EQ(f.get_uint("deepseek32.attention.indexer.head_count"), 2u);
  EXPECT_EQ(f.get_uint("deepseek32.attention.indexer.key_length"), 64u);
  EXPECT_EQ(f.get_uint("deepseek32.attention.indexer.top_k"), 12u);
  // llama.cpp's shapes (ggml order).
  EXPECT_EQ(f.find_tensor("blk.0.attn_kv_b.weight"), nullptr);
  EXPECT_EQ(f.tensor("blk.0.attn_k_b.weight").ne, (std::vector<int64_t>{16, 16, 4}));
  EXPECT_EQ(f.tensor("blk.0.attn_v_b.weight").ne, (std::vector<int64_t>{16, 16, 4}));
  EXPECT_EQ(f.tensor("blk.1.indexer.attn_q_b.weight").ne, (std::vector<int64_t>{32, 2 * 64}));
  EXPECT_EQ(f.tensor("blk.1.indexer.attn_k.weight").ne, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(f.tensor("blk.1.indexer.proj.weight").ne, (std::vector<int64_t>{64, 2}));
  EXPECT_EQ(f.tensor("blk.2.indexer.k_norm.weight").ne, (std::vector<int64_t>{64}));
  EXPECT_EQ(f.tensor("blk.2.indexer.k_norm.bias").ne, (std::vector<int64_t>{64}));
  int64_t n = 0;
  for (const auto& t : f.tensors()) n += t.nelements();
  EXPECT_EQ(n, spattn::parameter_count(s));
  const spattn::model::Model m = spattn::model::load_model(p);
  const spattn::model::Config& c = m.config();
  EXPECT_STREQ(spattn::model::arch_name(c.arch), "deepseek32");
  EXPECT_EQ(c.head_dim, 24);
  EXPECT_EQ(c.v_dim(), 16);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.indexer_heads, 2);
  EXPECT_EQ(c.indexer_dim, 64);
  EXPECT_EQ(c.indexer_top_k, 12);
  // attn_kv_b's rows, head by head: k_nope (attn_k_b's plane transposed), then v, made when a
  // session first runs the expanded form (none before).
  const int64_t H = 4, lora = 16, nope = 16, dv = 16;
  for (int64_t l = 0; l < 3; ++l) EXPECT_EQ(m.layer(l).wkv_b.t, nullptr);
  m.use_mla_form(false);
  for (int64_t l = 0; l < 3; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const auto* kb = reinterpret_cast<const float*>(f.tensor(b + "attn_k_b.weight").data);
    const auto* vb = reinterpret_cast<const float*>(f.tensor(b + "attn_v_b.weight").data);
    const auto* kvb = static_cast<const float*>(m.layer(l).wkv_b.data());
    ASSERT_EQ(m.layer(l).wkv_b.rows, H * (nope + dv));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t c2 = 0; c2 < lora; ++c2) {
        for (int64_t dd = 0; dd < nope; ++dd)
          ASSERT_EQ(kvb[(h * (nope + dv) + dd) * lora + c2], kb[(h * lora + c2) * nope + dd]);
        for (int64_t e = 0; e < dv; ++e)
          ASSERT_EQ(kvb[(h * (nope + dv) + nope + e) * lora + c2], vb[(h * dv + e) * lora + c2]);
      }
  }
}

using spattn::test::dsa_logits;
using spattn::test::worst_gap;

TEST(DeepSeek32, DsaIsDenseUntilTheTopKThenSelects) {
  const spattn::test::TempDir d("spattn_ds32");
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, deepseek32_tiny());
  const spattn::model::Model m = spattn::model::load_model(p);
  std::vector<int32_t> toks;
  for (int32_t i = 0; i < 40; ++i) toks.push_back((i * 37 + 11) % 300);
  const int64_t n = int64_t(toks.size()), V = m.config().n_vocab, top_k = 12;
  const std::vector<float> dense = dsa_logits(m, "dense", toks, false),
                           dsa = dsa_logits(m, "dsa", toks, false),
                           dflt = dsa_logits(m, spattn::model::kModelAttention, toks, false);
  // Rows at positions < top_k read every token before them either way.
  EXPECT_LT(worst_gap(dense, dsa, 0, top_k, V), 1e-4);
  // Past it, each reads 12 of its predecessors: the outputs part.
  EXPECT_GT(worst_gap(dense, dsa, top_k + 1, n, V), 1e-2);
  // The model's own attention is dsa.
  EXPECT_EQ(worst_gap(dflt, dsa, 0, n, V), 0.0);
  // Decode's selection is prefill's.
  const std::vector<float> dec = dsa_logits(m, "dsa", toks, true);
  EXPECT_LT(worst_gap(dec, dsa, n - 1, n, V), 1e-3);
}

// `spattn run` on `path` exits 2 with every one of `parts` in its message.
void expect_run_refuses(const fs::path& d, const std::string& path, const std::string& args,
                        const std::vector<std::string>& parts) {
  const auto r = spattn::test::run_spattn("run -m " + path + " -p hi -n 1 " + args, d);
  EXPECT_EQ(r.code(), 2) << path << ": " << r.err;
  for (const std::string& x : parts) EXPECT_NE(r.err.find(x), std::string::npos) << r.err;
}

TEST(DeepSeek32, BadFilesAreNamedErrors) {
  const spattn::test::TempDir d("spattn_ds32");
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, deepseek32_tiny());
  const File f = File::open(p);
  const auto edited = [&](const std::string& name, const spattn::test::GgufEdit& e) {
    const std::string out = (d / name).string();
    spattn::test::write_edited(f, out, e);
    return out;
  };
  spattn::test::GgufEdit e;
  e.drop_tensors = {"blk.1.indexer.proj.weight"};
  expect_run_refuses(d, edited("noproj.gguf", e), "", {"blk.1.indexer.proj.weight is missing"});
  e = {};
  e.drop_tensors = {"blk.2.attn_v_b.weight"};
  expect_run_refuses(d, edited("novb.gguf", e), "", {"blk.2.attn_v_b.weight is missing"});
  e = {};
  e.set_u32["deepseek32.attention.indexer.top_k"] = 100000;
  expect_run_refuses(d, edited("topk.gguf", e), "",
                     {"attention.indexer.top_k (100000) is larger than the context length"});
  e = {};
  e.drop_keys = {"deepseek32.attention.indexer.top_k"};
  expect_run_refuses(d, edited("notopk.gguf", e), "", {"deepseek32.attention.indexer.top_k"});
  e = {};
  e.set_u32["deepseek32.attention.indexer.key_length"] = 48;
  expect_run_refuses(d, edited("idxdim.gguf", e), "", {"power of two"});
  // Lora ranks that disagree with the matrices: named by the first tensor they miss.
  e = {};
  e.set_u32["deepseek32.attention.kv_lora_rank"] = 24;
  expect_run_refuses(d, edited("kvlora.gguf", e), "", {"blk.0.attn_kv_a_mqa.weight has shape"});
  e = {};
  e.set_u32["deepseek32.attention.q_lora_rank"] = 0;  // the indexer reads the q latent
  expect_run_refuses(d, edited("qlora.gguf", e), "", {"tensor blk.0.attn_q.weight is missing"});
  // --attn dsa on a model without an indexer.
  ModelShape s = spattn::preset_shape("deepseek-v3");
  s.layers = 2, s.dim = 64, s.heads = 2, s.kv_heads = 2, s.head_dim = 24, s.rope_dim = 8;
  s.v_head_dim = 16, s.q_lora = 32, s.kv_lora = 16, s.ffn = 96, s.experts = 4;
  s.experts_used = 2, s.expert_ffn = 32, s.dense_layers = 1, s.expert_groups = 0;
  s.vocab = 300, s.context = 512, s.type = spattn::gguf::GgmlType::f32;
  const std::string v3 = (d / "v3.gguf").string();
  spattn::make_model(v3, s);
  expect_run_refuses(d, v3, "--attn dsa", {"has no lightning indexer"});
  // make-model's bad shapes.
  ModelShape bad = deepseek32_tiny();
  bad.indexer_dim = 96;
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
  bad = deepseek32_tiny();
  bad.indexer_top_k = 1024;  // past --context 512
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
  bad = deepseek32_tiny();
  bad.q_lora = 0;
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
}

}  // namespace
