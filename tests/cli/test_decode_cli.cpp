// `--attn-decode` and `perplexity --decode-tail` from the command line: bad decode specs exit 2
// naming what is wrong (before any model loads); dense decode's tail log-likelihood equals the
// dense prefill's on the same tokens; quest reports the keys it skipped.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>

#include "cli_run.hpp"
#include "assets.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using spattn::test::CliRun;

CliRun run_cli(const std::string& args) {
  const spattn::test::TempDir dir("spattn_decode_cli");
  return spattn::test::run_spattn(args, dir);
}

void expect_bad_input(const CliRun& r, const std::string& mention) {
  ASSERT_TRUE(r.exited()) << "killed by a signal; stderr: " << r.err;
  EXPECT_EQ(r.code(), 2) << r.err;
  EXPECT_NE(r.err.find("spattn: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(mention), std::string::npos)
      << "stderr should mention '" << mention << "': " << r.err;
}

TEST(DecodeCli, BadDecodeSpecsExit2AndNameThem) {
  expect_bad_input(run_cli("run -m none.gguf -p hi --attn-decode quest:page=24"), "multiple of 16");
  expect_bad_input(run_cli("run -m none.gguf -p hi --attn-decode quest:topp=0"), "topp");
  expect_bad_input(run_cli("run -m none.gguf -p hi --attn-decode quest:topp=1.01"), "topp");
  expect_bad_input(run_cli("perplexity -m none.gguf -f none.txt --attn-decode quest:k=2,topp=0.5"),
                   "not both");
  expect_bad_input(run_cli("perplexity -m none.gguf -f none.txt --attn-decode sideways"),
                   "sideways");
}

TEST(DecodeCliReal, DenseDecodeTailEqualsThePrefillsTail) {
  const std::string model = spattn::test::model_file("stories260K.gguf");
  const std::string text = spattn::test::model_file("code-heldout.txt");
  if (model.empty() || text.empty())
    SPATTN_MISSING_ASSET("stories260K.gguf or code-heldout.txt in " << spattn::test::models_dir());
  const CliRun r = run_cli("perplexity -m " + model + " -f " + text +
                           " -c 128 --decode-tail 40 --chunks 2 --attn-decode quest:k=1,page=16 "
                           "--decode-recall --json");
  ASSERT_EQ(r.code(), 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& dense = j["results"]["dense"];
  EXPECT_EQ(dense["tokens_scored"].get<int64_t>(), 80);
  EXPECT_NEAR(dense["mean_loglik"].get<double>(), j["prefill"]["mean_loglik"].get<double>(), 1e-4);
  const auto& quest = j["results"]["quest:k=1,page=16"];
  EXPECT_EQ(quest["tokens_scored"].get<int64_t>(), 80);
  EXPECT_LT(quest["decode_keys_read"].get<int64_t>(), quest["decode_keys_total"].get<int64_t>());
  // Recall: a share of the softmax mass, below 1 when pages were left out (k=1 of 8 pages).
  const double mean = quest["recall"]["mean"].get<double>(),
               worst = quest["recall"]["worst"].get<double>();
  EXPECT_GT(worst, 0.0);
  EXPECT_LE(worst, mean);
  EXPECT_LT(mean, 1.0);
  EXPECT_EQ(quest["recall"]["head_steps"].get<int64_t>(),
            2 * 40 * 3 * 8);  // windows x steps x layers 2-4 x heads
  // Per layer: every layer, the two dense ones flagged (there: what the choice would keep);
  // the sparse layers' means average to the overall mean (equal head-steps each).
  const auto& layers = quest["recall"]["per_layer"];
  ASSERT_EQ(layers.size(), 5u);
  double sparse_sum = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    EXPECT_EQ(layers[l]["layer"].get<int64_t>(), int64_t(l));
    EXPECT_EQ(layers[l]["dense"].get<bool>(), l < 2);
    const double lm = layers[l]["mean"].get<double>(), lw = layers[l]["worst"].get<double>();
    EXPECT_GT(lm, 0.0);
    EXPECT_LE(lm, 1.0 + 1e-6);
    EXPECT_LE(lw, lm + 1e-12);
    if (l >= 2) {
      sparse_sum += lm;
      EXPECT_GE(lw, worst - 1e-12);
    }
  }
  EXPECT_NEAR(sparse_sum / 3.0, mean, 1e-9);
  EXPECT_EQ(dense["decode_keys_read"].get<int64_t>(), dense["decode_keys_total"].get<int64_t>());
}

}  // namespace
