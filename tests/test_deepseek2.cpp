// deepseek2 (multi-head latent attention, DeepSeekMoE) in files: the layout make-model writes
// (llama.cpp's names and keys, a dense first layer, experts after), the loader's config, the
// expanded heads the session assembles (every head's rope key the token's one, v padded with
// zeros), decode against prefill, and bad files as named errors (exit 2). Against llama.cpp:
// test_arch_vs_llama.cpp (scripts/deepseek2_vs_llama.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "gguf_edit.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model.hpp"
#include "spattn/model_maker.hpp"

namespace {

namespace fs = std::filesystem;
using spattn::ModelShape;
using spattn::gguf::File;

fs::path temp_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path d = fs::path(::testing::TempDir()) / (std::string("spattn_ds2_") + info->name());
  fs::create_directories(d);
  return d;
}

// DeepSeek-V3's layout shrunk: 3 layers (the first dense), 4 heads of k 24 (rope 8) and v 16,
// latents 32 / 16, 8 experts in 4 groups (2 used), 2 a token, one shared.
ModelShape tiny() {
  ModelShape s = spattn::preset_shape("deepseek-v3");
  s.layers = 3, s.dim = 64, s.heads = 4, s.kv_heads = 4, s.head_dim = 24, s.rope_dim = 8;
  s.v_head_dim = 16, s.q_lora = 32, s.kv_lora = 16, s.ffn = 96, s.experts = 8;
  s.experts_used = 2, s.expert_ffn = 32, s.dense_layers = 1, s.expert_groups = 4;
  s.groups_used = 2, s.vocab = 300, s.context = 512, s.type = spattn::gguf::GgmlType::f32;
  return s;
}

void expect_run_refuses(const fs::path& d, const std::string& path,
                        const std::vector<std::string>& parts) {
  const auto r = spattn::test::run_spattn("run -m " + path + " -p hi -n 1", d);
  EXPECT_TRUE(r.exited()) << path << ": " << r.err;
  EXPECT_EQ(r.code(), 2) << path << ": " << r.err;
  for (const std::string& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << r.err;
  EXPECT_THROW(spattn::model::load_model(path), spattn::Error) << path;
}

TEST(DeepSeek2, LayoutIsWrittenAndRead) {
  const fs::path d = temp_dir();
  const ModelShape s = tiny();
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, s);
  const File f = File::open(p);
  EXPECT_EQ(f.get_uint("deepseek2.attention.kv_lora_rank"), 16u);
  EXPECT_EQ(f.get_uint("deepseek2.attention.q_lora_rank"), 32u);
  EXPECT_EQ(f.get_uint("deepseek2.attention.key_length"), 24u);
  EXPECT_EQ(f.get_uint("deepseek2.attention.value_length"), 16u);
  EXPECT_EQ(f.get_uint("deepseek2.rope.dimension_count"), 8u);
  EXPECT_EQ(f.get_uint("deepseek2.leading_dense_block_count"), 1u);
  EXPECT_EQ(f.get_uint("deepseek2.expert_gating_func"), 2u);
  // llama.cpp's shapes (ggml order).
  EXPECT_EQ(f.tensor("blk.0.attn_q_a.weight").ne, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(f.tensor("blk.0.attn_q_b.weight").ne, (std::vector<int64_t>{32, 4 * 24}));
  EXPECT_EQ(f.tensor("blk.0.attn_kv_a_mqa.weight").ne, (std::vector<int64_t>{64, 16 + 8}));
  EXPECT_EQ(f.tensor("blk.0.attn_kv_b.weight").ne, (std::vector<int64_t>{16, 4 * (16 + 16)}));
  EXPECT_EQ(f.tensor("blk.0.attn_output.weight").ne, (std::vector<int64_t>{4 * 16, 64}));
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.0.attn_k.weight"), nullptr);
  EXPECT_NE(f.find_tensor("blk.0.ffn_gate.weight"), nullptr);  // the dense first layer
  EXPECT_EQ(f.find_tensor("blk.0.ffn_gate_exps.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_gate.weight"), nullptr);
  EXPECT_EQ(f.tensor("blk.1.ffn_gate_shexp.weight").ne, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(f.tensor("blk.2.exp_probs_b.bias").ne, (std::vector<int64_t>{8}));
  int64_t n = 0;
  for (const auto& t : f.tensors()) n += t.nelements();
  EXPECT_EQ(n, spattn::parameter_count(s));
  const spattn::model::Model m = spattn::model::load_model(p);
  const spattn::model::Config& c = m.config();
  EXPECT_STREQ(spattn::model::arch_name(c.arch), "deepseek2");
  EXPECT_FALSE(c.rope_neox);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.rot(), 8);
  EXPECT_EQ(c.v_dim(), 16);
  EXPECT_EQ(c.gating, spattn::model::Config::Gating::sigmoid);
  EXPECT_TRUE(c.expert_weights_norm);
  EXPECT_EQ(c.expert_weights_scale, 2.5);
  EXPECT_EQ(c.n_expert_groups, 4);
  EXPECT_FALSE(c.layer_moe(0));
  EXPECT_TRUE(c.layer_moe(1));
}

// The heads the session hands the attention: every head's rope part is the token's one rope
// key, v's last (k - v) values are zeros; and decode's logits are prefill's.
TEST(DeepSeek2, ExpandedHeadsAndDecodeMatchPrefill) {
  const fs::path d = temp_dir();
  for (int64_t q_lora : {32, 0}) {  // V3's q latent, and V2-Lite's one q matrix
    ModelShape s = tiny();
    s.q_lora = q_lora;
    const std::string p = (d / "m.gguf").string();
    spattn::make_model(p, s);
    const spattn::model::Model m = spattn::model::load_model(p);
    spattn::model::SessionOptions o;
    o.n_ctx = 64;
    o.cache_type_k = o.cache_type_v = spattn::KVType::f32;
    spattn::model::Session a(m, o);
    const std::vector<int32_t> toks = {5, 17, 200, 3, 99, 42, 7, 150};
    const int64_t n = int64_t(toks.size()), V = m.config().n_vocab, H = 4, dk = 24, dv = 16;
    int checked = 0;
    a.set_qkv_tap(1, [&](int64_t, int64_t, int64_t rows, const float*, const float* k,
                         const float* v) {
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t h = 1; h < H; ++h)
          for (int64_t j = dk - 8; j < dk; ++j) {
            EXPECT_EQ(k[(i * H + h) * dk + j], k[(i * H) * dk + j]);
            ++checked;
          }
      for (int64_t r = 0; r < rows * H; ++r)
        for (int64_t j = dv; j < dk; ++j) EXPECT_EQ(v[r * dk + j], 0.0f);
    });
    std::vector<float> all(size_t(n * V));
    a.prefill(toks, all.data(), 0);
    EXPECT_EQ(checked, n * (H - 1) * 8);
    spattn::model::Session b(m, o);
    std::vector<float> last(static_cast<size_t>(V));
    b.prefill(std::span(toks).first(size_t(n - 1)), nullptr, 0);
    b.decode(toks.back(), last.data());
    double worst = 0;
    for (int64_t j = 0; j < V; ++j) {
      ASSERT_TRUE(std::isfinite(last[size_t(j)]));
      worst = std::max(worst, double(std::abs(last[size_t(j)] - all[size_t((n - 1) * V + j)])));
    }
    EXPECT_LT(worst, 1e-3) << "q_lora " << q_lora;
  }
}

TEST(DeepSeek2, BadFilesAreNamedErrors) {
  const fs::path d = temp_dir();
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, tiny());
  const File f = File::open(p);
  const auto edited = [&](const std::string& name, const spattn::test::GgufEdit& e) {
    const std::string out = (d / name).string();
    spattn::test::write_edited(f, out, e);
    return out;
  };
  spattn::test::GgufEdit e;
  e.drop_tensors = {"blk.1.attn_kv_b.weight"};
  expect_run_refuses(d, edited("nokvb.gguf", e), {"tensor blk.1.attn_kv_b.weight is missing"});
  e = {};
  e.drop_tensors = {"blk.2.ffn_up_shexp.weight"};
  expect_run_refuses(d, edited("noshexp.gguf", e), {"blk.2.ffn_up_shexp.weight is missing"});
  // Lora ranks that disagree with the matrices: named by the first tensor they miss.
  e = {};
  e.set_u32["deepseek2.attention.kv_lora_rank"] = 24;
  expect_run_refuses(d, edited("kvlora.gguf", e), {"blk.0.attn_kv_a_mqa.weight has shape"});
  e = {};
  e.set_u32["deepseek2.attention.q_lora_rank"] = 0;  // the file has attn_q_a, not attn_q
  expect_run_refuses(d, edited("qlora.gguf", e), {"tensor blk.0.attn_q.weight is missing"});
  e = {};
  e.set_u32["deepseek2.attention.q_lora_rank"] = 48;
  expect_run_refuses(d, edited("qlora48.gguf", e), {"blk.0.attn_q_a.weight has shape"});
  e = {};
  e.drop_keys = {"deepseek2.attention.kv_lora_rank"};
  expect_run_refuses(d, edited("nokvlora.gguf", e), {"deepseek2.attention.kv_lora_rank"});
  e = {};
  e.set_u32["deepseek2.rope.dimension_count"] = 24;  // no non-rope part left
  expect_run_refuses(d, edited("rot.gguf", e), {"rope part"});
  e = {};
  e.set_u32["deepseek2.expert_group_used_count"] = 4;  // as many as the groups
  expect_run_refuses(d, edited("groups.gguf", e), {"expert_group_used_count must be in [1"});
  e = {};
  e.set_u32["deepseek2.attention.key_length_mla"] = 24;  // the absorbed layout
  expect_run_refuses(d, edited("mla.gguf", e), {"absorbed layout", "not supported yet"});
  // make-model's bad shapes.
  ModelShape bad = tiny();
  bad.kv_heads = 2;
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
  bad = tiny();
  bad.rope_dim = 24;
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
  bad = tiny();
  bad.dense_layers = 3;
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
}

}  // namespace
