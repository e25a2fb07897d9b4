// The model maker and the `make-model` / `tokenize` commands: the tensors and metadata
// llama.cpp's loader expects for each layout, seeded reproducibility, weight scales, and
// the CLI's output format and exit codes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "assets.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model_maker.hpp"
#include "spattn/tokenizer.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using spattn::ModelShape;
using spattn::gguf::File;
using spattn::gguf::GgmlType;

spattn::test::TempDir temp_dir() { return spattn::test::TempDir("spattn_mm"); }

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(ModelMaker, Qwen2LayoutHasEveryTensorAndKey) {
  const spattn::test::TempDir d = temp_dir();
  ModelShape s;
  s.arch = "qwen2";
  s.layers = 3;
  s.dim = 96;
  s.heads = 6;
  s.kv_heads = 2;
  s.head_dim = 32;  // heads x head dim (192) != dim: the q and o shapes show it
  s.ffn = 160;
  s.vocab = 300;
  s.type = GgmlType::f16;
  s.seed = 7;
  spattn::make_model((d / "m.gguf").string(), s);
  const File f = File::open((d / "m.gguf").string());
  EXPECT_EQ(f.get_string("general.architecture"), "qwen2");
  EXPECT_EQ(f.get_uint("qwen2.block_count"), 3u);
  EXPECT_EQ(f.get_uint("qwen2.embedding_length"), 96u);
  EXPECT_EQ(f.get_uint("qwen2.attention.head_count"), 6u);
  EXPECT_EQ(f.get_uint("qwen2.attention.head_count_kv"), 2u);
  EXPECT_EQ(f.get_uint("qwen2.attention.key_length"), 32u);
  EXPECT_EQ(f.get_uint("qwen2.feed_forward_length"), 160u);
  EXPECT_EQ(f.get_uint("qwen2.context_length"), 2048u);
  EXPECT_FLOAT_EQ(float(f.get_float("qwen2.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(f.get_float("qwen2.rope.freq_base"), 10000.0);
  // 1 embedding + 3 x (2 norms + 4 attention + 3 biases + 3 ffn) + output norm + output.
  EXPECT_EQ(f.tensors().size(), 1u + 3u * 12u + 2u);
  EXPECT_EQ(f.tensor("token_embd.weight").ne, (std::vector<int64_t>{96, 300}));
  EXPECT_EQ(f.tensor("token_embd.weight").type, GgmlType::f16);
  EXPECT_EQ(f.tensor("blk.2.attn_q.weight").ne, (std::vector<int64_t>{96, 192}));
  EXPECT_EQ(f.tensor("blk.2.attn_k.weight").ne, (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(f.tensor("blk.2.attn_v.weight").ne, (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(f.tensor("blk.2.attn_output.weight").ne, (std::vector<int64_t>{192, 96}));
  EXPECT_EQ(f.tensor("blk.0.attn_q.bias").ne, (std::vector<int64_t>{192}));
  EXPECT_EQ(f.tensor("blk.0.attn_k.bias").type, GgmlType::f32);
  EXPECT_EQ(f.tensor("blk.1.ffn_gate.weight").ne, (std::vector<int64_t>{96, 160}));
  EXPECT_EQ(f.tensor("blk.1.ffn_up.weight").ne, (std::vector<int64_t>{96, 160}));
  EXPECT_EQ(f.tensor("blk.1.ffn_down.weight").ne, (std::vector<int64_t>{160, 96}));
  EXPECT_EQ(f.tensor("blk.1.ffn_norm.weight").type, GgmlType::f32);
  EXPECT_EQ(f.tensor("output.weight").ne, (std::vector<int64_t>{96, 300}));
  // Weights: uniform, sd 1/sqrt(fan in); norms near 1.
  const File::Tensor& q = f.tensor("blk.0.attn_q.weight");
  std::vector<float> row(96);
  double sum = 0, sq = 0;
  for (int64_t r = 0; r < q.nrows(); ++r) {
    spattn::gguf::dequantize_row(q.type, q.data + r * 96 * 2, row.data(), 96);
    for (float v : row) sum += v, sq += double(v) * v;
  }
  const double n = double(q.nelements());
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / n), 1.0 / std::sqrt(96.0), 0.01);
  const File::Tensor& norm = f.tensor("blk.0.attn_norm.weight");
  spattn::gguf::dequantize_row(norm.type, norm.data, row.data(), 96);
  for (float v : row) EXPECT_NEAR(v, 1.0f, 0.18f);
  // The made-up vocabulary is a working tokenizer.
  const spattn::Tokenizer tok = spattn::Tokenizer::from_gguf(f);
  EXPECT_EQ(tok.n_vocab(), 300);
  EXPECT_EQ(tok.kind(), spattn::Tokenizer::Kind::bpe);
  const std::string text = "some text, with \xc3\xa9 and 123\n";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

TEST(ModelMaker, LlamaTiedSpmAndSeeds) {
  const spattn::test::TempDir d = temp_dir();
  ModelShape s;
  s.vocab = 64;  // too small for byte tokens: a SentencePiece vocabulary without fallback
  s.tied = true;
  spattn::make_model((d / "a.gguf").string(), s);
  spattn::make_model((d / "b.gguf").string(), s);
  s.seed = 1;
  spattn::make_model((d / "c.gguf").string(), s);
  EXPECT_EQ(read_all(d / "a.gguf"), read_all(d / "b.gguf"));
  EXPECT_NE(read_all(d / "a.gguf"), read_all(d / "c.gguf"));
  const File f = File::open((d / "a.gguf").string());
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(f.tensors().size(), 1u + 2u * 9u + 1u);
  const spattn::Tokenizer tok = spattn::Tokenizer::from_gguf(f);
  EXPECT_EQ(tok.kind(), spattn::Tokenizer::Kind::spm);
  EXPECT_EQ(tok.n_vocab(), 64);
  EXPECT_EQ(tok.encode("a").front(), 1);
}

TEST(ModelMaker, ShapesAreChecked) {
  auto bad = [](auto edit, const std::string& needle) {
    ModelShape s;
    edit(s);
    try {
      spattn::check_shape(s);
      ADD_FAILURE() << "accepted; expected " << needle;
    } catch (const spattn::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  bad([](ModelShape& s) { s.arch = "gpt2"; },
      "--arch must be llama, qwen2, qwen3, qwen3moe, phi3, gemma3, gpt-oss, seed_oss, deepseek2, "
      "deepseek32 or glm-dsa");
  bad([](ModelShape& s) { s.arch = "gpt-oss"; }, "gpt-oss needs --experts > 0");
  bad([](ModelShape& s) { s.experts = 4, s.experts_used = 5; },
      "--experts-used must be in [1, --experts = 4]");
  bad([](ModelShape& s) { s.experts = 600; }, "--experts must be in [0, 512]");
  bad([](ModelShape& s) { s.kv_heads = 3; }, "--kv-heads must divide --heads");
  bad([](ModelShape& s) { s.dim = 66; }, "is not a multiple of --heads");
  bad([](ModelShape& s) { s.head_dim = 7; }, "head dim must be even");
  bad([](ModelShape& s) { s.layers = 0; }, "--layers");
  bad([](ModelShape& s) { s.vocab = 2; }, "--vocab");
  bad(
      [](ModelShape& s) {
        s.vocab = 100;
        s.tokenizer = "gpt2";
      },
      "needs --vocab >= 257");
  bad(
      [](ModelShape& s) {
        s.type = GgmlType::q8_0;
        s.ffn = 100;
      },
      "q8_0 needs");
}

TEST(ModelMaker, Llama32_1bShape) {
  const ModelShape s = spattn::llama_3_2_1b_shape();
  spattn::check_shape(s);
  // Llama-3.2-1B's published parameter count (tied embeddings).
  EXPECT_EQ(spattn::parameter_count(s), 1235814400);
}

TEST(ModelCli, MakeModelThenTokenize) {
  const spattn::test::TempDir d = temp_dir();
  const std::string m = (d / "m.gguf").string();
  auto r = spattn::test::run_spattn("make-model -o " + m +
                                        " --layers 1 --dim 32 --heads 2 "
                                        "--kv-heads 1 --ffn 64 --vocab 400 --type q8_0",
                                    d);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("1 layers, dim 32"), std::string::npos) << r.out;
  EXPECT_EQ(File::open(m).tensor("blk.0.ffn_up.weight").type, GgmlType::q8_0);
  r = spattn::test::run_spattn("tokenize -m " + m + " -p 'ab' --ids", d);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out.substr(0, 3), "[0,");
  r = spattn::test::run_spattn("tokenize -m " + m + " -p ' '", d);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out, "     0 -> '<|endoftext|>'\n    33 -> ' '\n");
  r = spattn::test::run_spattn("make-model -o " + m + " --kv-heads 3", d);
  EXPECT_EQ(r.code(), 2);
  EXPECT_NE(r.err.find("--kv-heads must divide --heads"), std::string::npos) << r.err;
}

TEST(ModelCli, TokenizeBadFilesExitTwo) {
  const spattn::test::TempDir d = temp_dir();
  { std::ofstream(d / "junk.gguf") << "not a gguf file at all"; }
  auto r = spattn::test::run_spattn("tokenize -m " + (d / "junk.gguf").string() + " -p x", d);
  EXPECT_EQ(r.code(), 2);
  EXPECT_NE(r.err.find("bad magic"), std::string::npos) << r.err;
  r = spattn::test::run_spattn("tokenize -m " + (d / "missing.gguf").string() + " -p x", d);
  EXPECT_EQ(r.code(), 2);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;
  // A GGUF file with tensors but no vocabulary.
  spattn::gguf::Writer w;
  float x[4] = {};
  w.add_tensor("t", GgmlType::f32, {4}, x);
  w.write((d / "novocab.gguf").string());
  r = spattn::test::run_spattn("tokenize -m " + (d / "novocab.gguf").string() + " -p x", d);
  EXPECT_EQ(r.code(), 2);
  EXPECT_NE(r.err.find("no tokenizer.ggml.model"), std::string::npos) << r.err;
  r = spattn::test::run_spattn("tokenize -m " + (d / "novocab.gguf").string(), d);
  EXPECT_EQ(r.code(), 2);
  EXPECT_NE(r.err.find("give one of -p/--prompt and -f/--file"), std::string::npos) << r.err;
}

TEST(ModelCliReal, TokenizeRealVocabularyFromFile) {
  const std::string spm = spattn::test::model_file("ggml-vocab-llama-spm.gguf");
  if (spm.empty())
    SPATTN_MISSING_ASSET("ggml-vocab-llama-spm.gguf in " << spattn::test::models_dir());
  const spattn::test::TempDir d = temp_dir();
  { std::ofstream(d / "p.txt") << "Hello world"; }
  auto r = spattn::test::run_spattn("tokenize -m " + spm + " -f " + (d / "p.txt").string(), d);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out, "     1 -> '<s>'\n 15043 -> ' Hello'\n  3186 -> ' world'\n");
  r = spattn::test::run_spattn("tokenize -m " + spm + " -p 'Hello world' --ids --no-bos", d);
  EXPECT_EQ(r.out, "[15043, 3186]\n");
}

}  // namespace
