// `spattn serve` driven by the official OpenAI client for Node (npm's `openai`, which
// scripts/deps.sh fetches into its cache): completions and chat, whole and streamed, as a
// user's program would send them, against the same server's answers over plain HTTP. Skips
// where Node, the package or stories260K.gguf is absent.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "serve_fixture.hpp"

namespace spattn {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The openai package deps.sh installed (any pinned version), or "".
std::string openai_package() {
  const char* deps = std::getenv("SPATTN_DEPS_DIR");
  const char* home = std::getenv("HOME");
  const fs::path cache =
      deps && *deps ? fs::path(deps) : fs::path(home ? home : "") / ".cache" / "spattn";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cache, ec)) {
    const fs::path pkg = e.path() / "node_modules" / "openai";
    if (e.path().filename().string().rfind("openai-node-", 0) == 0 &&
        fs::is_regular_file(pkg / "index.mjs", ec))
      return pkg.string();
  }
  return "";
}

// stdout of a shell command, and its exit status.
std::pair<std::string, int> run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {"", -1};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  return {out, pclose(p)};
}

TEST(ServeOpenAIClientReal, CompletionsAndChatWholeAndStreamed) {
  NEED_STORIES();
  if (run("node --version 2>/dev/null").second != 0)
    SPATTN_MISSING_ASSET("node on PATH (scripts/deps.sh)");
  const std::string pkg = openai_package();
  if (pkg.empty()) SPATTN_MISSING_ASSET("npm's openai package (scripts/deps.sh fetches it)");
  Running srv(options(), *model);
  const std::string script = (fs::path(SPATTN_SOURCE_DIR) / "tests" / "openai_client.mjs").string();
  const auto [out, status] = run("node '" + script + "' '" + pkg +
                                 "' 'http://127.0.0.1:" + std::to_string(srv.port) + "/v1' 2>&1");
  ASSERT_EQ(status, 0) << out;
  const json j = json::parse(out);

  // The server's own answers over plain HTTP, the same requests.
  auto c = srv.client();
  const auto r = c.Post("/v1/completions",
                        R"({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0})",
                        "application/json");
  ASSERT_TRUE(r);
  const json plain = json::parse(r->body);
  EXPECT_EQ(j["completion"], plain["choices"][0]["text"]);
  EXPECT_EQ(j["completion_usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"]);
  EXPECT_EQ(j["completion_usage"]["completion_tokens"], 16);
  EXPECT_EQ(j["completion_finish"], "length");
  EXPECT_EQ(j["completion_stream"], j["completion"]);
  EXPECT_EQ(j["completion_stream_usage"]["completion_tokens"], 16);
  EXPECT_GT(j["completion_stream_chunks"].get<int>(), 16);  // progress chunks besides the text

  EXPECT_EQ(j["chat_role"], "assistant");
  EXPECT_FALSE(j["chat"].get<std::string>().empty());
  EXPECT_EQ(j["chat_stream"], j["chat"]);
  EXPECT_EQ(j["chat_stream_role"], "assistant");
  EXPECT_EQ(j["models"], json::array({"stories260K.gguf"}));
}

}  // namespace
}  // namespace spattn
