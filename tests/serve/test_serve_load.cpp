// `spattn serve` under load, short: scripts/serve_load.py with 4 clients for 5 s over
// stories260K (short and 400-token prompts, malformed ones mixed in). The script checks that
// no request failed or was lost, every answer is well formed and every malformed request got a
// 400 with an error object; its exit status says so. The 32-client, 60 s run on
// code-tiny-8k is the same script by hand (BENCHMARKS.md). Here rather than as a bare ctest
// command so that the model is found by the one rule every test uses (assets.hpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_run.hpp"
#include "assets.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

TEST(ServeLoadReal, ShortRunLosesNoRequest) {
  const std::string model = spattn::test::model_file("stories260K.gguf");
  if (model.empty()) SPATTN_MISSING_ASSET("stories260K.gguf in " << spattn::test::models_dir());
  if (std::system("command -v python3 >/dev/null 2>&1") != 0)
    SPATTN_MISSING_ASSET("python3 (scripts/deps.sh)");
  const spattn::test::TempDir dir("spattn_serve_load");
  const spattn::test::CliRun run =
      spattn::test::run_script("serve_load.py",
                               std::string("--spattn ") + SPATTN_CLI_PATH + " -m " + model +
                                   " --clients 4 --seconds 5 --long 400 -c 512 -np 2 --drain 60",
                               dir);
  const std::string& out = run.out;
  ASSERT_TRUE(run.exited()) << out;
  EXPECT_EQ(run.code(), 0) << out;
  EXPECT_NE(out.find("failed 0, lost 0"), std::string::npos) << out;
}

}  // namespace
