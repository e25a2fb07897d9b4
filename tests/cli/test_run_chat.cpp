// `spattn run --chat` (-cnv) as a user runs it: stdin lines as user turns on stories260K.gguf.
// The first answer is the greedy continuation of the first turn rendered with the template
// (what `spattn run -p` gives for that text); a second turn answers too; a bad template name
// exits 2 before loading.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_run.hpp"
#include "assets.hpp"
#include "spattn/chat_template.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

namespace fs = std::filesystem;

TEST(RunChatReal, TurnsAreRenderedWithTheTemplateAndAnswered) {
  const std::string model = test::model_file("stories260K.gguf");
  if (model.empty()) SPATTN_MISSING_ASSET("stories260K.gguf in " << test::models_dir());
  const test::TempDir d("spattn_chat_turns");
  std::ofstream(d / "in") << "Tell me about a cat.\nWhat did it eat?\n";
  const test::CliRun r = test::run_spattn(
      "run -m " + model +
          " -cnv -n 12 --temp 0 -sys 'You tell stories.' --chat-template chatml < " +
          (d / "in").string(),
      d);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.err.find("template chatml"), std::string::npos) << r.err;
  // "\n> " before each turn and once more at the end of input.
  const std::string& o = r.out;
  const size_t a = o.find("\n> "), b = o.find("\n> ", a + 3), c = o.find("\n> ", b + 3);
  ASSERT_NE(c, std::string::npos) << o;
  const std::string first = o.substr(a + 3, b - a - 3), second = o.substr(b + 3, c - b - 3);
  EXPECT_FALSE(first.empty());
  EXPECT_FALSE(second.empty());

  const std::string rendered = apply_chat_template(
      ChatTemplate::chatml, {{"system", "You tell stories."}, {"user", "Tell me about a cat."}},
      true);
  std::ofstream(d / "prompt", std::ios::binary) << rendered;
  const test::CliRun one = test::run_spattn(
      "run -m " + model + " -f " + (d / "prompt").string() + " -n 12 --temp 0 --json", d);
  ASSERT_EQ(one.code(), 0) << one.err;
  EXPECT_EQ(first, nlohmann::json::parse(one.out)["text"].get<std::string>());

  const test::CliRun bad =
      test::run_spattn("run -m " + model + " -cnv --chat-template llama-3 < /dev/null", d);
  EXPECT_EQ(bad.code(), 2);
  EXPECT_NE(bad.err.find("unknown template 'llama-3'"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace spattn
