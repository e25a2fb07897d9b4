// Architectures beyond the base llama / qwen2 layouts, in files: Llama 3.1's rope scaling
// (rope_freqs.weight written by make-model, read by the loader), qwen3, qwen3moe and llama's
// experts (Mixtral's layout), phi3 (fused matrices, LongRoPE), gemma3 (sliding-window layers,
// post norms, linear scaling), gpt-oss (biases, sinks, experts' biases), deepseek2 (latent
// attention, DeepSeekMoE), and the bad files each
// architecture must refuse with a named Error (exit 2 from `spattn run`): a tensor the arch
// needs missing, rope_freqs of the wrong length, an unknown architecture, a rope scaling type
// spattn does not run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "gguf_edit.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model.hpp"
#include "spattn/model_maker.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using spattn::ModelShape;
using spattn::gguf::File;

spattn::test::TempDir temp_dir() { return spattn::test::TempDir("spattn_arch"); }

ModelShape small(const std::string& arch) {
  ModelShape s;
  s.arch = arch;
  s.layers = 2, s.dim = 64, s.heads = 2, s.kv_heads = 1, s.ffn = 64, s.vocab = 300;
  return s;
}

// `spattn run` on `path` exits 2 with every one of `parts` in its message.
void expect_run_refuses(const fs::path& d, const std::string& path,
                        const std::vector<std::string>& parts) {
  const auto r = spattn::test::run_spattn("run -m " + path + " -p hi -n 1", d);
  EXPECT_TRUE(r.exited()) << path << ": " << r.err;
  EXPECT_EQ(r.code(), 2) << path << ": " << r.err;
  EXPECT_NE(r.err.find("spattn: error: "), std::string::npos) << r.err;
  for (const std::string& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << r.err;
  EXPECT_THROW(spattn::model::load_model(path), spattn::Error) << path;
}

TEST(ModelArch, Llama3RopeScalingIsWrittenAndRead) {
  const spattn::test::TempDir d = temp_dir();
  ModelShape s = small("llama");
  s.rope_scaling = "llama3";
  s.rope_base = 500000.0f;
  s.rope_original_context = 64;
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, s);
  const File f = File::open(p);
  const File::Tensor& t = f.tensor("rope_freqs.weight");
  ASSERT_EQ(t.ne, std::vector<int64_t>{16});
  const std::vector<float> want = spattn::llama3_rope_factors(s);
  ASSERT_EQ(want.size(), 16u);
  // llama.cpp reads llama3 scaling from the tensor only (no rope.scaling.type key).
  EXPECT_FALSE(f.has("llama.rope.scaling.type"));
  // Head dim 32, base 5e5, original context 64: wavelengths from 2 pi up, so some pairs keep
  // their frequency, some are blended, the slowest are divided by the factor 8.
  EXPECT_EQ(want.front(), 1.0f);
  EXPECT_EQ(want.back(), 8.0f);
  EXPECT_TRUE(std::any_of(want.begin(), want.end(), [](float x) { return x > 1 && x < 8; }));
  const spattn::model::Model m = spattn::model::load_model(p);
  EXPECT_EQ(m.config().rope_freq_factors, want);
  // The factors follow the converter's formula: blended pairs lie between the two ends and
  // never fall as the wavelength grows.
  for (size_t i = 1; i < want.size(); ++i) EXPECT_GE(want[i], want[i - 1]);
  // Without scaling no tensor is written and none is read.
  s.rope_scaling.clear();
  spattn::make_model(p, s);
  EXPECT_EQ(File::open(p).find_tensor("rope_freqs.weight"), nullptr);
  EXPECT_TRUE(spattn::model::load_model(p).config().rope_freq_factors.empty());
}

TEST(ModelArch, Llama31PresetHasItsRopeScaling) {
  const ModelShape s = spattn::preset_shape("llama-3.1-8b");
  EXPECT_EQ(s.rope_scaling, "llama3");
  EXPECT_EQ(s.rope_factor, 8.0f);
  EXPECT_EQ(s.rope_low_freq_factor, 1.0f);
  EXPECT_EQ(s.rope_high_freq_factor, 4.0f);
  EXPECT_EQ(s.rope_original_context, 8192);
  // Llama-3.1-8B's published parameter count, plus rope_freqs' 64 values.
  EXPECT_EQ(spattn::parameter_count(s), 8030261248 + 64);
  ModelShape bad = small("qwen2");
  bad.rope_scaling = "llama3";
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
  bad = small("phi3");  // yarn is read for llama, qwen2, qwen3 and qwen3moe only
  bad.rope_scaling = "yarn";
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
  bad = small("llama");
  bad.rope_scaling = "dynamic";  // HF's dynamic NTK: neither spattn nor llama.cpp runs it
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
  bad.rope_scaling = "llama3";
  bad.rope_high_freq_factor = bad.rope_low_freq_factor;
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
}

TEST(ModelArch, BadFilesAreNamedErrorsExitTwo) {
  const spattn::test::TempDir d = temp_dir();
  ModelShape s = small("llama");
  s.rope_scaling = "llama3";
  const std::string good = (d / "good.gguf").string();
  spattn::make_model(good, s);
  ASSERT_NO_THROW(spattn::model::load_model(good));
  const File f = File::open(good);
  auto edited = [&](const std::string& name, const spattn::test::GgufEdit& e) {
    const std::string p = (d / name).string();
    spattn::test::write_edited(f, p, e);
    return p;
  };
  {  // A tensor the arch needs.
    spattn::test::GgufEdit e;
    e.drop_tensors = {"blk.1.ffn_up.weight"};
    expect_run_refuses(d, edited("missing.gguf", e), {"tensor blk.1.ffn_up.weight is missing"});
  }
  {  // rope_freqs of the wrong length: 15 values for head dim 32.
    spattn::test::GgufEdit e;
    e.f32_tensors["rope_freqs.weight"] = std::vector<float>(15, 2.0f);
    expect_run_refuses(d, edited("freqs15.gguf", e),
                       {"rope_freqs.weight has 15 values, expected head dim / 2 = 16"});
  }
  {  // A zero divisor.
    spattn::test::GgufEdit e;
    e.f32_tensors["rope_freqs.weight"] = std::vector<float>(16, 0.0f);
    expect_run_refuses(d, edited("freqs0.gguf", e), {"rope_freqs.weight holds 0"});
  }
  {  // An architecture spattn does not run.
    spattn::test::GgufEdit e;
    e.set_strings["general.architecture"] = "mamba";
    expect_run_refuses(d, edited("mamba.gguf", e), {"architecture 'mamba' is not supported"});
  }
  {  // A rope scaling spattn does not run is refused, not run unscaled.
    spattn::test::GgufEdit e;
    e.set_strings["llama.rope.scaling.type"] = "dynamic";
    expect_run_refuses(d, edited("dynamic.gguf", e),
                       {"llama.rope.scaling.type 'dynamic' is not supported"});
  }
}

TEST(ModelArch, Qwen3LayoutIsWrittenAndRead) {
  const spattn::test::TempDir d = temp_dir();
  ModelShape s = small("qwen3");
  s.head_dim = 48;  // heads x head dim (96) != dim (64), as in the real Qwen3 shapes
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, s);
  const File f = File::open(p);
  EXPECT_EQ(f.get_string("general.architecture"), "qwen3");
  EXPECT_EQ(f.get_uint("qwen3.attention.key_length"), 48u);
  for (const char* t : {"blk.1.attn_q_norm.weight", "blk.1.attn_k_norm.weight"})
    EXPECT_EQ(f.tensor(t).ne, std::vector<int64_t>{48}) << t;
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.bias"), nullptr);  // no biases, unlike qwen2
  EXPECT_EQ(f.tensor("blk.0.attn_q.weight").ne, (std::vector<int64_t>{64, 96}));
  int64_t n = 0;
  for (const auto& t : f.tensors()) n += t.nelements();
  EXPECT_EQ(n, spattn::parameter_count(s));
  const spattn::model::Model m = spattn::model::load_model(p);
  EXPECT_EQ(m.config().arch, spattn::model::Arch::qwen3);
  EXPECT_TRUE(m.config().rope_neox);
  EXPECT_EQ(m.layer(1).k_norm.size(), 48u);
  EXPECT_TRUE(m.layer(0).bq.empty());
  {  // qwen3 without a q norm: named, exit 2.
    spattn::test::GgufEdit e;
    e.drop_tensors = {"blk.0.attn_q_norm.weight"};
    spattn::test::write_edited(f, (d / "noqnorm.gguf").string(), e);
    expect_run_refuses(d, (d / "noqnorm.gguf").string(),
                       {"tensor blk.0.attn_q_norm.weight is missing"});
  }
  // `make-model --arch qwen3` from the command line.
  const auto r = spattn::test::run_spattn("make-model -o " + (d / "c.gguf").string() +
                                              " --arch qwen3 --layers 1 --dim 32 --heads 2 "
                                              "--kv-heads 1 --ffn 64 --vocab 300",
                                          d);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("qwen3 1 layers"), std::string::npos) << r.out;
  EXPECT_NE(File::open((d / "c.gguf").string()).find_tensor("blk.0.attn_k_norm.weight"), nullptr);
}

TEST(ModelArch, Qwen3MoeLayoutIsWrittenAndRead) {
  const spattn::test::TempDir d = temp_dir();
  ModelShape s = small("qwen3moe");
  s.head_dim = 48;
  s.experts = 6, s.experts_used = 2, s.expert_ffn = 40;
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, s);
  const File f = File::open(p);
  EXPECT_EQ(f.get_string("general.architecture"), "qwen3moe");
  EXPECT_EQ(f.get_uint("qwen3moe.expert_count"), 6u);
  EXPECT_EQ(f.get_uint("qwen3moe.expert_used_count"), 2u);
  EXPECT_EQ(f.get_uint("qwen3moe.expert_feed_forward_length"), 40u);
  // llama.cpp's shapes (ggml order): the router [dim, experts], each expert a plane.
  EXPECT_EQ(f.tensor("blk.1.ffn_gate_inp.weight").ne, (std::vector<int64_t>{64, 6}));
  EXPECT_EQ(f.tensor("blk.1.ffn_gate_inp.weight").type, spattn::gguf::GgmlType::f32);
  EXPECT_EQ(f.tensor("blk.1.ffn_gate_exps.weight").ne, (std::vector<int64_t>{64, 40, 6}));
  EXPECT_EQ(f.tensor("blk.1.ffn_up_exps.weight").ne, (std::vector<int64_t>{64, 40, 6}));
  EXPECT_EQ(f.tensor("blk.1.ffn_down_exps.weight").ne, (std::vector<int64_t>{40, 64, 6}));
  EXPECT_EQ(f.find_tensor("blk.0.ffn_gate.weight"), nullptr);
  EXPECT_NE(f.find_tensor("blk.0.attn_q_norm.weight"), nullptr);
  int64_t n = 0;
  for (const auto& t : f.tensors()) n += t.nelements();
  EXPECT_EQ(n, spattn::parameter_count(s));
  const spattn::model::Model m = spattn::model::load_model(p);
  const spattn::model::Config& c = m.config();
  EXPECT_EQ(c.arch, spattn::model::Arch::qwen3moe);
  EXPECT_TRUE(c.rope_neox);
  EXPECT_EQ(c.n_expert, 6);
  EXPECT_EQ(c.n_expert_used, 2);
  EXPECT_EQ(c.n_ff_exp, 40);
  EXPECT_EQ(m.layer(1).k_norm.size(), 48u);
  EXPECT_EQ(m.layer(0).gate.t, nullptr);
  EXPECT_TRUE(m.layer(0).up_exps.experts);
  {  // More experts a token than experts: named, exit 2.
    spattn::test::GgufEdit e;
    e.set_u32["qwen3moe.expert_used_count"] = 7;
    spattn::test::write_edited(f, (d / "used.gguf").string(), e);
    expect_run_refuses(d, (d / "used.gguf").string(),
                       {"expert_used_count must be in [1, expert_count = 6], got 7"});
  }
  {  // An expert tensor missing, or one of the wrong shape.
    spattn::test::GgufEdit e;
    e.drop_tensors = {"blk.1.ffn_down_exps.weight"};
    spattn::test::write_edited(f, (d / "nodown.gguf").string(), e);
    expect_run_refuses(d, (d / "nodown.gguf").string(),
                       {"tensor blk.1.ffn_down_exps.weight is missing"});
    e.drop_tensors.clear();
    e.set_u32["qwen3moe.expert_feed_forward_length"] = 48;
    spattn::test::write_edited(f, (d / "ffn.gguf").string(), e);
    expect_run_refuses(d, (d / "ffn.gguf").string(),
                       {"tensor blk.0.ffn_gate_exps.weight has shape [64, 40, 6], expected "
                        "[64, 48, 6]"});
  }
  {  // qwen3moe without experts, and experts in an architecture that has none.
    spattn::test::GgufEdit e;
    e.drop_keys = {"qwen3moe.expert_count"};
    spattn::test::write_edited(f, (d / "none.gguf").string(), e);
    expect_run_refuses(d, (d / "none.gguf").string(), {"qwen3moe needs qwen3moe.expert_count > 0"});
    ModelShape q = small("qwen3");
    spattn::make_model((d / "q.gguf").string(), q);
    spattn::test::GgufEdit x;
    x.set_u32["qwen3.expert_count"] = 4;
    spattn::test::write_edited(File::open((d / "q.gguf").string()), (d / "qx.gguf").string(), x);
    expect_run_refuses(d, (d / "qx.gguf").string(),
                       {"experts (qwen3.expert_count) in a qwen3 model are not supported"});
  }
  // Mixtral's layout: llama with experts of the FFN's size.
  ModelShape mx = small("llama");
  mx.experts = 4, mx.experts_used = 2;
  spattn::make_model((d / "mx.gguf").string(), mx);
  const File fm = File::open((d / "mx.gguf").string());
  EXPECT_FALSE(fm.has("llama.expert_feed_forward_length"));
  EXPECT_EQ(fm.tensor("blk.0.ffn_up_exps.weight").ne, (std::vector<int64_t>{64, 64, 4}));
  const spattn::model::Model mm = spattn::model::load_model((d / "mx.gguf").string());
  EXPECT_EQ(mm.config().n_ff_exp, 64);
  // `make-model --arch qwen3moe` from the command line, and its bad shapes.
  auto r = spattn::test::run_spattn("make-model -o " + (d / "c.gguf").string() +
                                        " --arch qwen3moe --layers 1 --dim 32 --heads 2 "
                                        "--kv-heads 1 --ffn 64 --experts 4 --experts-used 1 "
                                        "--expert-ffn 16 --vocab 300",
                                    d);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("4 experts (1 a token, ffn 16)"), std::string::npos) << r.out;
  r = spattn::test::run_spattn("make-model -o " + (d / "b.gguf").string() +
                                   " --arch qwen3moe --layers 1 --dim 32 --heads 2 --vocab 300",
                               d);
  EXPECT_EQ(r.code(), 2) << r.err;
  EXPECT_NE(r.err.find("qwen3moe needs --experts > 0"), std::string::npos) << r.err;
  r = spattn::test::run_spattn("make-model -o " + (d / "b.gguf").string() +
                                   " --arch qwen2 --experts 4 --experts-used 2 --vocab 300",
                               d);
  EXPECT_EQ(r.code(), 2) << r.err;
  EXPECT_NE(
      r.err.find(
          "--experts is for --arch qwen3moe, gpt-oss, deepseek2, deepseek32, glm-dsa or llama"),
      std::string::npos)
      << r.err;
  // The absorbed latent layout on an architecture without latent attention.
  r = spattn::test::run_spattn(
      "make-model -o " + (d / "b.gguf").string() + " --arch qwen2 --mla-absorbed --vocab 300", d);
  EXPECT_EQ(r.code(), 2) << r.err;
  EXPECT_NE(r.err.find("--mla-absorbed is for --arch deepseek2"), std::string::npos) << r.err;
}

TEST(ModelArch, Qwen3MoePresetHasThePublishedSize) {
  // Qwen3-30B-A3B's model card: 30.5B parameters, 29.9B without the embeddings (untied: the
  // input embedding and the output head).
  const ModelShape s = spattn::preset_shape("qwen3-30b-a3b");
  EXPECT_EQ(s.arch, "qwen3moe");
  const int64_t n = spattn::parameter_count(s);
  EXPECT_EQ((n + 50000000) / 100000000, 305);
  EXPECT_EQ((n - 2 * s.vocab * s.dim + 50000000) / 100000000, 299);
}

// gpt-oss: the biases, sinks and FFN norm by llama.cpp's names, the window and its pattern
// (every second layer local, from layer 0), YaRN on both kinds of layer, and the bad files.
TEST(ModelArch, GptOssLayoutIsWrittenAndRead) {
  const spattn::test::TempDir d = temp_dir();
  ModelShape s = small("gpt-oss");
  s.layers = 3;
  s.experts = 4, s.experts_used = 2, s.expert_ffn = 32;
  s.sliding_window = 16;
  s.rope_scaling = "yarn";
  s.rope_factor = 4;
  s.rope_original_context = 64;
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, s);
  const File f = File::open(p);
  EXPECT_EQ(f.get_string("general.architecture"), "gpt-oss");
  EXPECT_EQ(f.get_uint("gpt-oss.expert_feed_forward_length"), 32u);
  EXPECT_EQ(f.get_uint("gpt-oss.attention.sliding_window"), 16u);
  EXPECT_EQ(f.tensor("blk.2.attn_sinks.weight").ne, (std::vector<int64_t>{2}));
  EXPECT_EQ(f.tensor("blk.0.attn_output.bias").ne, (std::vector<int64_t>{64}));
  EXPECT_EQ(f.tensor("blk.1.ffn_gate_inp.bias").ne, (std::vector<int64_t>{4}));
  EXPECT_EQ(f.tensor("blk.1.ffn_up_exps.bias").ne, (std::vector<int64_t>{32, 4}));
  EXPECT_EQ(f.tensor("blk.1.ffn_down_exps.bias").ne, (std::vector<int64_t>{64, 4}));
  EXPECT_NE(f.find_tensor("blk.0.post_attention_norm.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_norm.weight"), nullptr);
  int64_t n = 0;
  for (const auto& t : f.tensors()) n += t.nelements();
  EXPECT_EQ(n, spattn::parameter_count(s));
  const spattn::model::Model m = spattn::model::load_model(p);
  const spattn::model::Config& c = m.config();
  EXPECT_EQ(c.arch, spattn::model::Arch::gpt_oss);
  EXPECT_TRUE(c.rope_neox);
  EXPECT_EQ(c.gating, spattn::model::Config::Gating::softmax_of_chosen);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.swa_layers, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_TRUE(c.swa_rope_scaled);
  EXPECT_EQ(c.rope_base_swa, c.rope_base);
  EXPECT_EQ(c.rope_freq_factors, spattn::model::yarn_rope_divisors(32, s.rope_base, 4, 64));
  EXPECT_EQ(m.layer(2).sinks.size(), 2u);
  EXPECT_EQ(m.layer(0).bo.size(), 64u);
  EXPECT_EQ(m.layer(0).bq.size(), 64u);
  EXPECT_EQ(m.layer(1).up_exps_b.size(), 4u * 32u);
  EXPECT_EQ(m.layer(1).down_exps_b.size(), 4u * 64u);
  {  // A sink, an expert's bias or the window missing; biases of the wrong shape.
    for (const char* t :
         {"blk.1.attn_sinks.weight", "blk.0.ffn_gate_exps.bias", "blk.2.attn_output.bias"}) {
      spattn::test::GgufEdit e;
      e.drop_tensors = {t};
      spattn::test::write_edited(f, (d / "drop.gguf").string(), e);
      expect_run_refuses(d, (d / "drop.gguf").string(),
                         {std::string("tensor ") + t + " is missing"});
    }
    spattn::test::GgufEdit e;
    e.drop_keys = {"gpt-oss.attention.sliding_window"};
    spattn::test::write_edited(f, (d / "nowin.gguf").string(), e);
    expect_run_refuses(d, (d / "nowin.gguf").string(), {"gpt-oss.attention.sliding_window"});
    e.drop_keys.clear();
    e.set_u32["gpt-oss.expert_feed_forward_length"] = 64;  // the biases' rows stay 32
    spattn::test::write_edited(f, (d / "ffn.gguf").string(), e);
    expect_run_refuses(d, (d / "ffn.gguf").string(), {"ffn_gate_exps.weight has shape"});
    e.set_u32.clear();
    e.set_f32["gpt-oss.rope.freq_base_swa"] = 20000.0f;  // rope.freq_base is 10000
    spattn::test::write_edited(f, (d / "swabase.gguf").string(), e);
    expect_run_refuses(d, (d / "swabase.gguf").string(),
                       {"yarn with a gpt-oss.rope.freq_base_swa (20000) other than"});
    e.set_f32.clear();
    e.drop_keys = {"gpt-oss.expert_count"};
    spattn::test::write_edited(f, (d / "none.gguf").string(), e);
    expect_run_refuses(d, (d / "none.gguf").string(), {"gpt-oss needs gpt-oss.expert_count > 0"});
  }
  // The runner runs it.
  const auto r = spattn::test::run_spattn("run -m " + p + " -p hello -n 4 --temp 0", d);
  EXPECT_EQ(r.code(), 0) << r.err;
}

// The validator names the tensor the file holds: gpt-oss's FFN norm is post_attention_norm
// (the tensor list has one name for it, which the reader, the validator and the maker read;
// the validator once named it ffn_norm.weight, a tensor gpt-oss files do not have).
TEST(ModelArch, GptOssFfnNormShapeErrorNamesItsTensor) {
  const spattn::test::TempDir d = temp_dir();
  ModelShape s = small("gpt-oss");
  s.experts = 4, s.experts_used = 2, s.expert_ffn = 32;
  s.sliding_window = 16;
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, s);
  spattn::test::GgufEdit e;
  e.f32_tensors["blk.1.post_attention_norm.weight"] = std::vector<float>(63, 1.0f);
  spattn::test::write_edited(File::open(p), (d / "norm.gguf").string(), e);
  expect_run_refuses(d, (d / "norm.gguf").string(),
                     {"tensor blk.1.post_attention_norm.weight has shape [63, 1, 1], expected "
                      "[64, 1, 1]"});
}

TEST(ModelArch, GptOssPresetHasThePublishedSize) {
  // gpt-oss-20b's model card: 20.9B parameters in all (21B in its summary; 3.6B active).
  const ModelShape s = spattn::preset_shape("gpt-oss-20b");
  EXPECT_EQ(s.arch, "gpt-oss");
  EXPECT_EQ((spattn::parameter_count(s) + 50000000) / 100000000, 209);
}

// seed_oss, added as one row of the traits table: make-model writes its layout by llama.cpp's
// names (the FFN norm as post_attention_norm, q/k/v biases), the loader reads it back, a
// missing FFN norm is named as the file names it, files without the optional biases load, and
// the runner runs it.
TEST(ModelArch, SeedOssLayoutIsWrittenAndRead) {
  const spattn::test::TempDir d = temp_dir();
  const ModelShape s = small("seed_oss");
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, s);
  const File f = File::open(p);
  EXPECT_EQ(f.get_string("general.architecture"), "seed_oss");
  EXPECT_NE(f.find_tensor("blk.1.post_attention_norm.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_norm.weight"), nullptr);
  EXPECT_EQ(f.tensor("blk.0.attn_k.bias").ne, (std::vector<int64_t>{32}));
  int64_t n = 0;
  for (const auto& t : f.tensors()) n += t.nelements();
  EXPECT_EQ(n, spattn::parameter_count(s));
  {
    const spattn::model::Model m = spattn::model::load_model(p);
    EXPECT_STREQ(spattn::model::arch_name(m.config().arch), "seed_oss");
    EXPECT_TRUE(m.config().rope_neox);
    EXPECT_EQ(m.layer(0).bk.size(), 32u);
    EXPECT_EQ(m.layer(1).ffn_norm.size(), 64u);
  }
  spattn::test::GgufEdit e;
  e.drop_tensors = {"blk.1.post_attention_norm.weight"};
  spattn::test::write_edited(f, (d / "drop.gguf").string(), e);
  expect_run_refuses(d, (d / "drop.gguf").string(),
                     {"tensor blk.1.post_attention_norm.weight is missing"});
  e.drop_tensors.clear();
  for (const char* l : {"blk.0.", "blk.1."})
    for (const char* b : {"attn_q.bias", "attn_k.bias", "attn_v.bias"})
      e.drop_tensors.insert(std::string(l) + b);
  spattn::test::write_edited(f, (d / "nobias.gguf").string(), e);
  EXPECT_TRUE(spattn::model::load_model((d / "nobias.gguf").string()).layer(0).bq.empty());
  const auto r = spattn::test::run_spattn("run -m " + p + " -p hello -n 4 --temp 0", d);
  EXPECT_EQ(r.code(), 0) << r.err;
}

TEST(ModelArch, Phi3LayoutIsWrittenAndRead) {
  const spattn::test::TempDir d = temp_dir();
  ModelShape s = small("phi3");
  s.rope_scaling = "longrope";
  s.context = 256;
  s.rope_original_context = 64;
  s.tokenizer = "llama";
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, s);
  const File f = File::open(p);
  EXPECT_EQ(f.get_string("general.architecture"), "phi3");
  // Head dim 32: Wq 64 rows, Wk and Wv 32 each, in one matrix; Wgate and Wup in ffn_up.
  EXPECT_EQ(f.tensor("blk.0.attn_qkv.weight").ne, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(f.tensor("blk.1.ffn_up.weight").ne, (std::vector<int64_t>{64, 128}));
  for (const char* t : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.ffn_gate.weight"})
    EXPECT_EQ(f.find_tensor(t), nullptr) << t;
  EXPECT_EQ(f.get_uint("phi3.rope.scaling.original_context_length"), 64u);
  const double attn_factor = std::sqrt(1 + std::log(4.0) / std::log(64.0));
  EXPECT_NEAR(f.get_float("phi3.rope.scaling.attn_factor"), attn_factor, 1e-6);
  // Phi-3's added tokens end the vocabulary (llama.cpp's loader needs <|endoftext|>).
  const auto toks = f.get_string_array("tokenizer.ggml.tokens");
  EXPECT_EQ(toks.back(), "<|user|>");
  EXPECT_NE(std::find(toks.begin(), toks.end(), "<|endoftext|>"), toks.end());
  int64_t n = 0;
  for (const auto& t : f.tensors()) n += t.nelements();
  EXPECT_EQ(n, spattn::parameter_count(s));

  const spattn::model::Model m = spattn::model::load_model(p);
  const spattn::model::Config& c = m.config();
  EXPECT_EQ(c.arch, spattn::model::Arch::phi3);
  EXPECT_TRUE(c.rope_neox);
  EXPECT_EQ(c.rope_factors_long, spattn::longrope_factors(s, true));
  EXPECT_EQ(c.rope_factors_short, spattn::longrope_factors(s, false));
  EXPECT_EQ(c.rope_factors_long.back(), 4.0f);  // the stretch, 256 / 64, at the slowest pair
  EXPECT_EQ(c.n_ctx_orig, 64);
  EXPECT_NEAR(c.rope_attn_factor, attn_factor, 1e-6);
  EXPECT_EQ(&c.rope_factors(64), &c.rope_factors_short);
  EXPECT_EQ(&c.rope_factors(65), &c.rope_factors_long);
  // The split matrices are the fused ones' row blocks, read in place (f32: nothing repacked;
  // the model maps the file itself, so the blocks are checked by offset and by bytes).
  const auto* qkv = static_cast<const uint8_t*>(f.tensor("blk.0.attn_qkv.weight").data);
  const auto* gu = static_cast<const uint8_t*>(f.tensor("blk.0.ffn_up.weight").data);
  const size_t row = 64 * sizeof(float);
  const spattn::model::Model::Layer& L = m.layer(0);
  EXPECT_EQ(L.wq.rows, 64);
  EXPECT_EQ(L.wk.rows, 32);
  EXPECT_EQ(L.gate.rows, 64);
  auto at = [](const spattn::model::Model::Weight& w) {
    return static_cast<const uint8_t*>(w.data());
  };
  EXPECT_EQ(at(L.wk) - at(L.wq), ptrdiff_t(64 * row));
  EXPECT_EQ(at(L.wv) - at(L.wq), ptrdiff_t(96 * row));
  EXPECT_EQ(at(L.up) - at(L.gate), ptrdiff_t(64 * row));
  EXPECT_EQ(std::memcmp(at(L.wq), qkv, 128 * row), 0);
  EXPECT_EQ(std::memcmp(at(L.gate), gu, 128 * row), 0);
  {  // A fused matrix with the wrong row count, and LongRoPE factors of the wrong length.
    spattn::test::GgufEdit e;
    e.drop_tensors = {"blk.1.ffn_up.weight"};
    spattn::test::write_edited(f, (d / "noup.gguf").string(), e);
    expect_run_refuses(d, (d / "noup.gguf").string(), {"tensor blk.1.ffn_up.weight is missing"});
    spattn::test::GgufEdit g;
    g.f32_tensors["rope_factors_long.weight"] = std::vector<float>(15, 2.0f);
    spattn::test::write_edited(f, (d / "long15.gguf").string(), g);
    expect_run_refuses(d, (d / "long15.gguf").string(),
                       {"rope_factors_long.weight has 15 values, expected head dim / 2 = 16"});
  }
  ModelShape bad = small("llama");
  bad.rope_scaling = "longrope";
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
  // Phi-3.5-mini's published parameter count (LongRoPE's 96 factors are buffers there).
  EXPECT_EQ(spattn::parameter_count(spattn::preset_shape("phi-3.5-mini")), 3821079552 + 96);
}

TEST(ModelArch, PresetsHaveThePublishedParameterCounts) {
  // Qwen3-4B: 4,022,468,096 weights (tied head); Mistral-7B-v0.3: 7,248,023,552.
  EXPECT_EQ(spattn::parameter_count(spattn::preset_shape("qwen3-4b")), 4022468096);
  EXPECT_EQ(spattn::parameter_count(spattn::preset_shape("mistral-7b")), 7248023552);
  EXPECT_EQ(spattn::preset_shape("qwen3-4b").arch, "qwen3");
  EXPECT_EQ(spattn::preset_shape("mistral-7b").tokenizer, "llama");
}

TEST(ModelArch, Gemma3LayoutIsWrittenAndRead) {
  const spattn::test::TempDir d = temp_dir();
  ModelShape s = small("gemma3");
  s.layers = 7;
  s.head_dim = 32;
  s.sliding_window = 48;
  s.rope_base = 1e6f;
  s.rope_scaling = "linear";
  s.rope_factor = 8.0f;
  s.tokenizer = "llama";
  s.tied = true;
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, s);
  const File f = File::open(p);
  EXPECT_EQ(f.get_string("general.architecture"), "gemma3");
  EXPECT_EQ(f.get_uint("gemma3.attention.sliding_window"), 48u);
  EXPECT_EQ(f.get_string("gemma3.rope.scaling.type"), "linear");
  EXPECT_EQ(f.get_float("gemma3.rope.scaling.factor"), 8.0);
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_space_prefix"));
  for (const char* t : {"blk.6.attn_q_norm.weight", "blk.6.attn_k_norm.weight",
                        "blk.6.post_attention_norm.weight", "blk.6.post_ffw_norm.weight"})
    EXPECT_NE(f.find_tensor(t), nullptr) << t;
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
  int64_t n = 0;
  for (const auto& t : f.tensors()) n += t.nelements();
  EXPECT_EQ(n, spattn::parameter_count(s));

  const spattn::model::Model m = spattn::model::load_model(p);
  const spattn::model::Config& c = m.config();
  EXPECT_EQ(c.arch, spattn::model::Arch::gemma3);
  EXPECT_TRUE(c.rope_neox);
  EXPECT_EQ(c.sliding_window, 48);
  // llama.cpp's default pattern of 6: layers 0-4 local, 5 global, 6 local.
  EXPECT_EQ(c.swa_layers, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0, 1}));
  EXPECT_EQ(c.window(4), 48);
  EXPECT_EQ(c.window(5), 0);
  EXPECT_EQ(c.rope_base, 1e6);
  EXPECT_EQ(c.rope_base_swa, 1e4);
  EXPECT_EQ(c.rope_linear_factor, 8.0);
  EXPECT_EQ(c.attn_scale, double(1.0f / std::sqrt(32.0f)));  // 1 / sqrt(head dim), not 27B
  EXPECT_EQ(c.final_logit_softcap, 0.0);
  EXPECT_EQ(m.layer(3).attn_post_norm.size(), 64u);
  EXPECT_EQ(m.layer(3).q_norm.size(), 32u);
  {
    // Bad files: each gemma3 tensor missing, an unsupported rope scaling; a pattern key.
    for (const char* t : {"blk.2.post_ffw_norm.weight", "blk.0.post_attention_norm.weight",
                          "blk.5.attn_k_norm.weight"}) {
      spattn::test::GgufEdit e;
      e.drop_tensors = {t};
      const std::string bad = (d / (std::string(t) + ".gguf")).string();
      spattn::test::write_edited(f, bad, e);
      expect_run_refuses(d, bad, {std::string("tensor ") + t + " is missing"});
    }
    spattn::test::GgufEdit y;
    y.set_strings["gemma3.rope.scaling.type"] = "yarn";
    spattn::test::write_edited(f, (d / "yarn.gguf").string(), y);
    expect_run_refuses(d, (d / "yarn.gguf").string(), {"rope.scaling.type 'yarn'"});
    // No window: every layer global (llama.cpp's LLAMA_SWA_TYPE_NONE).
    spattn::test::GgufEdit nw;
    nw.drop_keys = {"gemma3.attention.sliding_window"};
    spattn::test::write_edited(f, (d / "nowin.gguf").string(), nw);
    EXPECT_TRUE(spattn::model::load_model((d / "nowin.gguf").string()).config().swa_layers.empty());
  }
  // `spattn run --json` says what each layer ran: the local ones their band.
  const auto r =
      spattn::test::run_spattn("run -m " + p + " -p \"hello world\" -n 2 --attn a_shape --json", d);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("\"kind\": \"sliding\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"prefill\": \"band\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"prefill\": \"a_shape\""), std::string::npos) << r.out;
  ModelShape bad = small("llama");
  bad.rope_scaling = "linear";
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
}

TEST(ModelArch, Gemma3PresetHasThePublishedShape) {
  // Gemma 3 Technical Report, Table 1: the 4B model's non-embedding parameters, 3,209M; its
  // embedding here is the GGUF's 262144 x 2560 (llama.cpp's converter drops the unused rows).
  const ModelShape s = spattn::preset_shape("gemma-3-4b");
  EXPECT_EQ(s.arch, "gemma3");
  EXPECT_EQ(s.sliding_window, 1024);
  const int64_t n = spattn::parameter_count(s);
  EXPECT_EQ(n, 3880099328);
  EXPECT_EQ(n - s.vocab * s.dim, 3209010688);  // 34 layers of 94,382,592 and the final norm
  EXPECT_EQ((n - s.vocab * s.dim + 500000) / 1000000, 3209);
}

// deepseek2 (multi-head latent attention, DeepSeekMoE): the layout make-model writes (llama.cpp's
// names and keys, a dense first layer, experts after), the loader's config, the expanded heads
// the session assembles (every head's rope key the token's one, v padded with zeros), decode
// against prefill, and bad files as named errors (exit 2). Against llama.cpp:
// scripts/deepseek2_vs_llama.sh (ArchVsLlamaCpp.DeepSeek2GreedyTextAndPerplexity).
// DeepSeek-V3's layout shrunk: 3 layers (the first dense), 4 heads of k 24 (rope 8) and v 16,
// latents 32 / 16, 8 experts in 4 groups (2 used), 2 a token, one shared.
ModelShape deepseek2_tiny() {
  ModelShape s = spattn::preset_shape("deepseek-v3");
  s.layers = 3, s.dim = 64, s.heads = 4, s.kv_heads = 4, s.head_dim = 24, s.rope_dim = 8;
  s.v_head_dim = 16, s.q_lora = 32, s.kv_lora = 16, s.ffn = 96, s.experts = 8;
  s.experts_used = 2, s.expert_ffn = 32, s.dense_layers = 1, s.expert_groups = 4;
  s.groups_used = 2, s.vocab = 300, s.context = 512, s.type = spattn::gguf::GgmlType::f32;
  return s;
}

TEST(ModelArch, DeepSeek2LayoutIsWrittenAndRead) {
  const spattn::test::TempDir d = temp_dir();
  const ModelShape s = deepseek2_tiny();
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
TEST(ModelArch, DeepSeek2ExpandedHeadsAndDecodeMatchPrefill) {
  const spattn::test::TempDir d = temp_dir();
  for (int64_t q_lora : {32, 0}) {  // V3's q latent, and V2-Lite's one q matrix
    ModelShape s = deepseek2_tiny();
    s.q_lora = q_lora;
    const std::string p = (d / "m.gguf").string();
    spattn::make_model(p, s);
    const spattn::model::Model m = spattn::model::load_model(p);
    spattn::model::SessionOptions o;
    o.n_ctx = 64;
    o.cache_type_k = o.cache_type_v = spattn::KVType::f32;
    o.mla_expanded = true;  // the expanded heads (the latent cache: test_mla_latent.cpp)
    spattn::model::Session a(m, o);
    const std::vector<int32_t> toks = {5, 17, 200, 3, 99, 42, 7, 150};
    const int64_t n = int64_t(toks.size()), V = m.config().n_vocab, H = 4, dk = 24, dv = 16;
    int checked = 0;
    a.set_qkv_tap(
        1, [&](int64_t, int64_t, int64_t rows, const float*, const float* k, const float* v) {
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

TEST(ModelArch, DeepSeek2BadFilesAreNamedErrors) {
  const spattn::test::TempDir d = temp_dir();
  const std::string p = (d / "m.gguf").string();
  spattn::make_model(p, deepseek2_tiny());
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
  // The absorbed layout's keys over attn_kv_b: its attn_k_b is missing; attn_k_b without them:
  // named.
  e = {};
  e.set_u32["deepseek2.attention.key_length_mla"] = 24;
  e.set_u32["deepseek2.attention.value_length_mla"] = 16;
  expect_run_refuses(d, edited("mla.gguf", e), {"tensor blk.0.attn_k_b.weight is missing"});
  ModelShape absorbed = deepseek2_tiny();
  absorbed.mla_absorbed = true;
  const std::string pa = (d / "absorbed.gguf").string();
  spattn::make_model(pa, absorbed);
  e = {};
  e.drop_keys = {"deepseek2.attention.key_length_mla"};
  const std::string nomla = (d / "nomla.gguf").string();
  spattn::test::write_edited(File::open(pa), nomla, e);
  expect_run_refuses(d, nomla, {"attn_k_b / attn_v_b without", "key_length_mla"});
  // make-model's bad shapes.
  ModelShape bad = deepseek2_tiny();
  bad.kv_heads = 2;
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
  bad = deepseek2_tiny();
  bad.rope_dim = 24;
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
  bad = deepseek2_tiny();
  bad.dense_layers = 3;
  EXPECT_THROW(spattn::check_shape(bad), spattn::Error);
}

}  // namespace
