// scripts/vs_llama.py, the speed comparison with llama.cpp: a bad --test is refused by name
// before anything runs (a 32K row is hours of llama.cpp), and ppN+tgM gives both of its rows
// from one run of each side.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "assets.hpp"
#include "cli_run.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

// vs_llama.py with `args` against the built spattn (output of both streams in r.out).
spattn::test::CliRun run_vs_llama(const std::string& args, const fs::path& dir) {
  return spattn::test::run_script("vs_llama.py",
                                  std::string("--spattn ") + SPATTN_CLI_PATH + " " + args, dir);
}

TEST(VsLlamaScript, BadTestsAreRefusedByNameBeforeAnythingRuns) {
  const spattn::test::TempDir dir("spattn_vs_llama");
  // Neither the tools' folder nor the model exists: a refusal that ran anything first would
  // fail on them instead (a traceback), not with its own message.
  const std::string where =
      "--llama-bin " + (dir / "no-bin").string() + " -m " + (dir / "no-model.gguf").string() + " ";
  const struct {
    const char* args;
    const char* message;
  } cases[] = {
      {"--test pp8x", "bad --test 'pp8x' (ppN, tgN, tgN@D or ppN+tgM)"},
      {"--test pp8@16", "ppN@D is not supported"},
      {"--test pp8+tg0 --no-warmup", "bad --test 'pp8+tg0' (ppN+tgM needs M >= 1)"},
      // The check of every test comes before the first one runs.
      {"--test pp8 --test pp8+tg2", "--test pp8+tg2 needs --no-warmup"},
  };
  for (const auto& c : cases) {
    const spattn::test::CliRun r = run_vs_llama(where + c.args, dir);
    ASSERT_TRUE(r.exited()) << c.args;
    EXPECT_NE(r.code(), 0) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("Traceback"), std::string::npos) << c.args << "\n" << r.out;
  }
}

TEST(VsLlamaScriptVsLlamaCpp, OnePrefillGivesThePrefillAndTheDecodeRow) {
  const std::string model = spattn::test::model_file("stories260K.gguf");
  const std::string text = spattn::test::model_file("code-heldout.txt");
  if (model.empty() || text.empty())
    SPATTN_MISSING_ASSET("stories260K.gguf, code-heldout.txt in " << spattn::test::models_dir());
  if (const std::string t = spattn::test::missing_llama_tool({"llama-batched-bench"}); !t.empty())
    SPATTN_MISSING_ASSET(t << " in " << spattn::test::llama_bin());
  const spattn::test::TempDir dir("spattn_vs_llama");
  const spattn::test::CliRun r =
      run_vs_llama("--llama-bin " + spattn::test::llama_bin().string() + " -m " + model +
                       " --text " + text + " --test pp64+tg4 --reps 1 -t 1 --no-warmup --json",
                   dir);
  ASSERT_TRUE(r.exited());
  ASSERT_EQ(r.code(), 0) << r.out;
  const nlohmann::json rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  EXPECT_EQ(rows[0]["test"], "pp64");
  EXPECT_EQ(rows[1]["test"], "tg4@64");
  for (const nlohmann::json& row : rows) {
    EXPECT_EQ(row["llama_tool"], "llama-batched-bench");
    EXPECT_GT(row["llama_median"].get<double>(), 0.0);
    EXPECT_GT(row["spattn_median"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(row["ratio"].get<double>(),
                     row["spattn_median"].get<double>() / row["llama_median"].get<double>());
  }
  // Prefill's row: time to first token from the 64 prompt tokens, and attention's share.
  EXPECT_DOUBLE_EQ(rows[0]["spattn_ttft_s"].get<double>(),
                   64.0 / rows[0]["spattn_median"].get<double>());
  const double share = rows[0]["spattn_attn_share"].get<double>();
  EXPECT_GT(share, 0.0);
  EXPECT_LE(share, 1.0);
  // Decode's row: the keys its attention read (dense decode reads every one).
  EXPECT_DOUBLE_EQ(rows[1]["decode_keys_read_share"].get<double>(), 1.0);
  EXPECT_FALSE(rows[1].contains("spattn_ttft_s"));
}

}  // namespace
