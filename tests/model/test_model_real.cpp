// The runner on the real models in the shared models folder (skipped where it is absent):
// code-tiny-8k loads as llama.cpp reports it, greedy generation is deterministic, chunked_h2o
// leaves the KV cache complete for decode; stories260K's greedy text equals llama.cpp's; `spattn run` and
// `spattn perplexity` end to end, and their bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include <filesystem>

#include "cli_run.hpp"
#include "assets.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model.hpp"
#include "spattn/tokenizer.hpp"
#include "temp_dir.hpp"

namespace spattn::model {
namespace {

std::vector<int32_t> greedy(const Model& m, const SessionOptions& so,
                            const std::vector<int32_t>& prompt, int n) {
  Session s(m, so);
  std::vector<float> logits(size_t(m.config().n_vocab));
  s.prefill(prompt, logits.data(), int64_t(prompt.size()) - 1);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    s.decode(out.back(), logits.data());
  }
  return out;
}

TEST(ModelReal, CodeTinyLoadsAsLlamaCppReportsAndGreedyIsDeterministic) {
  const std::string path = test::model_file("code-tiny-8k.gguf");
  if (path.empty()) SPATTN_MISSING_ASSET("code-tiny-8k.gguf in " << test::models_dir());
  const auto file = std::make_shared<const gguf::File>(gguf::File::open(path));
  const gguf::File& f = *file;
  const Model m = load_model(file);
  const Tokenizer tok = Tokenizer::from_gguf(f);
  const Config& c = m.config();
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_EQ(c.n_vocab, 4096);
  EXPECT_EQ(c.n_head / c.n_head_kv, 3);  // GQA 3
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_FALSE(c.rope_neox);  // llama.cpp: rope type normal
  EXPECT_TRUE(m.tied_output());
  EXPECT_EQ(c.rope_base, 100000.0);
  const std::vector<int32_t> prompt = tok.encode("import os\nimport sys\n\n\ndef main():\n");
  EXPECT_EQ(prompt, (std::vector<int32_t>{0, 3192, 3162, 199, 3192, 2610, 1193, 199, 271, 664, 259,
                                          449, 26, 199}));
  SessionOptions so;
  so.n_ctx = 256;
  const auto a = greedy(m, so, prompt, 24), b = greedy(m, so, prompt, 24);
  EXPECT_EQ(a, b);
  // chunked_h2o over a prompt of several chunks leaves every prompt token in the cache: its
  // decode differs from dense only through the prompt's sparse prefill, and with a memory that
  // holds every earlier token not at all.
  std::vector<int32_t> long_prompt = tok.encode(
      "import os\nimport sys\n\n\ndef main():\n    args = sys.argv[1:]\n    for name in args:\n"
      "        path = os.path.join(os.getcwd(), name)\n        if os.path.exists(path):\n"
      "            print(path)\n\n\nif __name__ == \"__main__\":\n    main()\n");
  SessionOptions h2o = so;
  h2o.attn = "chunked_h2o";
  h2o.n_ubatch = 32;
  h2o.h2o_local = 8;
  h2o.h2o_heavy = 256;
  EXPECT_EQ(greedy(m, h2o, long_prompt, 12), greedy(m, so, long_prompt, 12));
}

TEST(ModelReal, Stories260KTellsItsStory) {
  const std::string path = test::model_file("stories260K.gguf");
  if (path.empty()) SPATTN_MISSING_ASSET("stories260K.gguf in " << test::models_dir());
  const auto file = std::make_shared<const gguf::File>(gguf::File::open(path));
  const gguf::File& f = *file;
  const Model m = load_model(file);
  const Tokenizer tok = Tokenizer::from_gguf(f);
  EXPECT_FALSE(m.tied_output());
  EXPECT_EQ(m.config().n_head_kv, 4);
  SessionOptions so;
  so.n_ctx = 128;
  const auto out = greedy(m, so, tok.encode("Once upon a time"), 30);
  EXPECT_EQ(tok.decode(out),
            ", there was a little girl named Lily. She loved to play outside in the park. One "
            "day,");
}

// Greedy continuations as llama.cpp writes them for the same file and prompts: llama.cpp
// 0.5.0-dev (build 1, commit de3ff81, as bundled by node-llama-cpp 3.22.1), CPU backend, its
// greedy sampler, stopping at end of generation:
//   llama-simple -m stories260K.gguf -n N PROMPT
// (its output, less the "<s> " it prints for BOS and SentencePiece's leading space, and the
// newline at the end). llama-completion with --temp 0 prints the same text.
TEST(ModelReal, Stories260KGreedyEqualsLlamaCpp) {
  const std::string path = test::model_file("stories260K.gguf");
  if (path.empty()) SPATTN_MISSING_ASSET("stories260K.gguf in " << test::models_dir());
  const auto file = std::make_shared<const gguf::File>(gguf::File::open(path));
  const gguf::File& f = *file;
  const Model m = load_model(file);
  const Tokenizer tok = Tokenizer::from_gguf(f);
  struct Case {
    const char* prompt;
    int n;
    const char* llama_cpp;
  };
  const Case cases[] = {
      {"Once upon a time", 200,
       "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
       "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"
       "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. "
       "She said, \"I want to play with your ball, but I can't find it.\"\n"
       "Lily was sad and didn't know what to do. She said, \"I'm sorry, Lily. I didn't know what "
       "to do.\"\n"
       "Lily didn't want to help her mom, so she said, \"I"},
      {"Lily and Ben went to the park.", 100,
       "Lily and Ben went to the park. They saw a big box with a big box. They wanted to play "
       "with it. They wanted to play with the box. They wanted to play with the box.\n"
       "\"Look, Ben, I found a box. It is a big box.\" Lily said.\n"
       "\"OK, it is not a box. It is a box."},
      {"Tom had a big red ball. He", 100,
       "Tom had a big red ball. He liked to play with his ball. He liked to play with his ball. "
       "He liked to play with his ball. He liked to play with his ball.\n"
       "One day, Tom saw a big ball. He wanted to play with it. He wanted to play with the ball. "
       "He wanted to play with the ball. He wanted to play with the ball.\n"
       "Tom said, \"I want to"},
  };
  // llama.cpp's cache is f16 (our default too); the f32 cache gives the same texts.
  for (KVType kv : {KVType::f16, KVType::f32})
    for (const Case& c : cases) {
      SessionOptions so;
      so.n_ctx = 256;
      so.cache_type_k = so.cache_type_v = kv;
      const std::vector<int32_t> prompt = tok.encode(c.prompt);
      std::vector<int32_t> out = greedy(m, so, prompt, c.n);
      // llama-simple stops at end of generation; none of these continuations reaches it.
      for (int32_t id : out) ASSERT_FALSE(tok.is_eog(id)) << c.prompt;
      std::vector<int32_t> all(prompt);
      all.insert(all.end(), out.begin(), out.end());
      EXPECT_EQ(tok.decode(all), c.llama_cpp) << c.prompt << " (" << kv_type_name(kv) << " cache)";
    }
}

class RunnerCliReal : public ::testing::Test {
 protected:
  test::CliRun run(const std::string& args) { return test::run_spattn(args, dir_); }
  const test::TempDir dir_{"spattn_runner_cli"};
};

TEST_F(RunnerCliReal, RunPrintsTextAndTimings) {
  const std::string path = test::model_file("stories260K.gguf");
  if (path.empty()) SPATTN_MISSING_ASSET("stories260K.gguf in " << test::models_dir());
  const auto r = run("run -m " + path + " -p 'Once upon a time' -n 8 -c 64 -b 16 -ub 4");
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon a time, there was a little girl", 0), 0u) << r.out;
  for (const char* k : {"load time", "prompt tokens", "TTFT", "prefill", "attention", "decode"})
    EXPECT_NE(r.err.find(k), std::string::npos) << k;
  const auto j = run("run -m " + path +
                     " -p 'Once upon a time' -n 4 -c 64 --attn chunked_h2o "
                     "--h2o-local 1 --h2o-heavy 1 -ub 2 --json");
  ASSERT_EQ(j.code(), 0) << j.err;
  EXPECT_NE(j.out.find("\"prefill_tok_s\""), std::string::npos);
  // --dump-qkv writes what spattn bench --qkv reads.
  const auto d = run("run -m " + path +
                     " -p 'Once upon a time there was' -n 1 -c 64 --dump-qkv 2 " + dir_.string());
  ASSERT_EQ(d.code(), 0) << d.err;
  const auto b = run("bench --qkv " + dir_.string() + "/ --method dense --repeat 1");
  EXPECT_EQ(b.code(), 0) << b.err;
  // --dump-qkv all: every layer under DIR/layerN/, layer 2's the same bytes as --dump-qkv 2's.
  const auto all = run("run -m " + path +
                       " -p 'Once upon a time there was' -n 1 -c 64 "
                       "--dump-qkv all " +
                       dir_.string());
  ASSERT_EQ(all.code(), 0) << all.err;
  auto bytes = [](const std::filesystem::path& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (int l = 0; l < 5; ++l)
    for (const char* t : {"q.npy", "k.npy", "v.npy"})
      EXPECT_TRUE(std::filesystem::exists(dir_ / ("layer" + std::to_string(l)) / t)) << l << t;
  for (const char* t : {"q.npy", "k.npy", "v.npy"}) {
    EXPECT_FALSE(bytes(dir_ / t).empty());
    EXPECT_EQ(bytes(dir_ / "layer2" / t), bytes(dir_ / t)) << t;
  }
}

TEST_F(RunnerCliReal, PerplexityComparesDenseAndChunkedH2O) {
  const std::string path = test::model_file("stories260K.gguf");
  if (path.empty()) SPATTN_MISSING_ASSET("stories260K.gguf in " << test::models_dir());
  std::ofstream(dir_ / "text.txt") << "Once upon a time, there was a little girl named Lily. She "
                                      "loved to play outside in the park. One day, she saw a big, "
                                      "red ball. She wanted to play with it, but it was too high.";
  const auto r = run("perplexity -m " + path + " -f " + (dir_ / "text.txt").string() +
                     " -c 16 -b 16 -ub 4 --h2o-local 1 --h2o-heavy 1 --json");
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("\"dense\""), std::string::npos);
  EXPECT_NE(r.out.find("\"chunked_h2o\""), std::string::npos);
  EXPECT_NE(r.out.find("\"relative_loss\""), std::string::npos);
}

TEST_F(RunnerCliReal, BadInputExits2) {
  const std::string path = test::model_file("stories260K.gguf");
  if (path.empty()) SPATTN_MISSING_ASSET("stories260K.gguf in " << test::models_dir());
  auto bad = [&](const std::string& args, const std::string& what) {
    const auto r = run(args);
    EXPECT_EQ(r.code(), 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << args << "\n" << r.err;
  };
  bad("run -m " + path + " -n 4", "-p TEXT or -f FILE");
  bad("run -m " + path + " -p hi --attn nosuch", "nosuch");
  bad("run -m " + path + " -p hi -ub 0", "-ub");
  bad("run -m " + path + " -p hi --attn chunked_h2o -ub 8 --h2o-local 9", "local");
  bad("run -m " + path + " -p hi -c 4 -n 8", "-c");
  bad("run -m " + (dir_ / "missing.gguf").string() + " -p hi", "missing.gguf");
  bad("run -m " + path + " -p hi --dump-qkv x " + dir_.string(), "LAYER");
  bad("run -m " + path + " -p hi --dump-qkv 9 " + dir_.string(), "layer 9");
  bad("perplexity -m " + path + " -f " + (dir_ / "none.txt").string(), "none.txt");
  bad("run -m " + path + " -p hi -ctk nonsense", "unknown KV cache type 'nonsense'");
  // stories260K's head dim (8) is no whole q8_0 block.
  bad("run -m " + path + " -p hi -ctv q8_0", "q8_0");
}

}  // namespace
}  // namespace spattn::model
