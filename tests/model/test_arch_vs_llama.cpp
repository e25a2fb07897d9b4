// gemma3 (issue 21), qwen3moe, gpt-oss, qwen3 with YaRN, seed_oss, deepseek2 and deepseek32 against llama.cpp on made-up models,
// f16 and Q4_K_M (gpt-oss: MXFP4_MOE): greedy text for 64 tokens and perplexity at -c 1024 over
// 3 windows of code-heldout.txt, through scripts/gemma3_vs_llama.sh, scripts/moe_vs_llama.sh,
// scripts/gpt_oss_vs_llama.sh and scripts/yarn_vs_llama.sh (the whole file and longer contexts
// by hand: README). Needs llama.cpp's built tools (tests/assets.hpp says where they are found);
// skipped where they or the held-out text are absent, failed under SPATTN_REQUIRE_ASSETS=1.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "assets.hpp"
#include "cli_run.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

// scripts/SCRIPT LLAMA_BIN SPATTN -c 1024 --chunks 3 --text code-heldout.txt: passes on exit 0,
// skips on 77 (a comparison not made).
void expect_script_passes(const std::string& script) {
  using spattn::test::llama_bin;
  const std::string text = spattn::test::model_file("code-heldout.txt");
  if (text.empty()) SPATTN_MISSING_ASSET("code-heldout.txt in " << spattn::test::models_dir());
  const std::string tool =
      spattn::test::missing_llama_tool({"llama-completion", "llama-perplexity", "llama-quantize"});
  if (!tool.empty()) SPATTN_MISSING_ASSET(tool << " in " << llama_bin() << " (SPATTN_LLAMA_BIN)");
  const spattn::test::TempDir dir("spattn_" + script);
  const std::string cmd = std::string("exec sh ") + SPATTN_SOURCE_DIR + "/scripts/" + script + " " +
                          llama_bin().string() + " " + SPATTN_CLI_PATH +
                          " -c 1024 --chunks 3 --text " + text + " >" + (dir / "out").string() +
                          " 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string out = spattn::test::slurp(dir / "out");
  ASSERT_TRUE(WIFEXITED(status)) << out;
  if (WEXITSTATUS(status) == 77)
    SPATTN_MISSING_ASSET("a comparison " << script << " could not make: " << out);
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
}

TEST(ArchVsLlamaCpp, Gemma3GreedyTextAndPerplexity) { expect_script_passes("gemma3_vs_llama.sh"); }

// qwen3moe (mixtures of experts): greedy text with every expert used, perplexity within 0.5%
// with 8 of 8 and 2 of 8 used, f16 and Q4_K_M (scripts/moe_vs_llama.sh says why the routed
// model's text is not judged).
TEST(ArchVsLlamaCpp, Qwen3MoeGreedyTextAndPerplexity) { expect_script_passes("moe_vs_llama.sh"); }

// gpt-oss (sinks, biases, sliding-window layers, experts with biases, OpenAI's SwiGLU, YaRN):
// greedy text with every expert used and perplexity within 0.5% with 4 of 4 and 2 of 8, f16
// and MXFP4_MOE.
TEST(ArchVsLlamaCpp, GptOssGreedyTextAndPerplexity) { expect_script_passes("gpt_oss_vs_llama.sh"); }

// qwen3 with YaRN rope scaling: greedy text and perplexity within 0.5%, f16 and Q4_K_M.
TEST(ArchVsLlamaCpp, Qwen3YarnGreedyTextAndPerplexity) { expect_script_passes("yarn_vs_llama.sh"); }

// seed_oss, an architecture added as one row of the traits table: greedy text and perplexity
// within 0.5%, f16 and Q4_K_M.
TEST(ArchVsLlamaCpp, SeedOssGreedyTextAndPerplexity) {
  expect_script_passes("seed_oss_vs_llama.sh");
}

// deepseek2 (latent attention in its expanded form, DeepSeekMoE: a dense first layer, shared
// experts, sigmoid gating with the selection bias, group-limited routing, scaled weights):
// greedy text with every expert used, perplexity within 0.01% with 8 of 8 and 4 of 16, f16
// and Q8_0.
TEST(ArchVsLlamaCpp, DeepSeek2GreedyTextAndPerplexity) {
  expect_script_passes("deepseek2_vs_llama.sh");
}

// deepseek32 (the absorbed layout read into the expanded form, DSA's lightning indexer): with
// the preset's top-k past the context, spattn dense and dsa against llama.cpp: greedy text and
// perplexity within 0.01%. (A top-k of 32 is reported by the script, not judged: issue 63.)
TEST(ArchVsLlamaCpp, DeepSeek32GreedyTextAndPerplexity) {
  expect_script_passes("deepseek32_vs_llama.sh");
}

}  // namespace
