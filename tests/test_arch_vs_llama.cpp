// gemma3 against llama.cpp (issue 21) on a made-up Gemma 3 model, f16 and Q4_K_M: greedy text
// for 64 tokens and perplexity at -c 1024 over 3 windows of code-heldout.txt, through
// scripts/gemma3_vs_llama.sh (the whole file and longer contexts by hand: README). Needs
// llama.cpp's built tools: SPATTN_LLAMA_BIN, else third_party/llama.cpp/build/bin; skipped
// where they or the held-out text are absent.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli_run.hpp"
#include "models_dir.hpp"

namespace {

namespace fs = std::filesystem;

fs::path llama_bin() {
  if (const char* env = std::getenv("SPATTN_LLAMA_BIN"); env && *env) return env;
  return fs::path(SPATTN_SOURCE_DIR) / "third_party" / "llama.cpp" / "build" / "bin";
}

TEST(ArchVsLlamaCpp, Gemma3GreedyTextAndPerplexity) {
  const std::string text = spattn::test::model_file("code-heldout.txt");
  if (text.empty()) GTEST_SKIP() << "code-heldout.txt absent: " << spattn::test::models_dir();
  if (!fs::exists(llama_bin() / "llama-completion"))
    GTEST_SKIP() << "llama.cpp's tools absent in " << llama_bin() << " (SPATTN_LLAMA_BIN)";
  const fs::path dir = fs::temp_directory_path() / ("spattn_gemma3_llama_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string cmd = std::string("exec sh ") + SPATTN_SOURCE_DIR + "/scripts/gemma3_vs_llama.sh " +
                          llama_bin().string() + " " + SPATTN_CLI_PATH +
                          " -c 1024 --chunks 3 --text " + text + " >" + (dir / "out").string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string out = spattn::test::slurp(dir / "out");
  fs::remove_all(dir);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
}

}  // namespace
