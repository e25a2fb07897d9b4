// What the tests need from outside the repository (assets), where they find it, and what a
// missing one does: the test skips, naming it, or under SPATTN_REQUIRE_ASSETS=1 (as .ci/run
// sets it) fails, naming it, so a run that was meant to check something cannot pass by not
// checking it. Every skip in tests/ goes through the two macros at the end.
//
// Each kind of asset belongs to a ctest label, and a test's label is read from its suite's name
// (tests/CMakeLists.txt turns the names into labels; docs/testing.md lists them):
//   real model files in $SPATTN_MODELS          suite named *Real        label model
//   llama.cpp's tools in $SPATTN_LLAMA_BIN      suite named *VsLlamaCpp  label llama
//                                               suite named *VsLlamaCppLong  label long
//   mpirun and spattn_cp_check                  suite named *Mpi         label mpi
//   *Slow* in the suite's or the test's name                             label slow
// A test that asks for an asset its name does not promise fails: `ctest -L unit` must not need
// any, and its label must not lie about it.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>

namespace spattn::test {

enum class Asset { model, llama_tool, mpi };

inline bool assets_required() {
  const char* env = std::getenv("SPATTN_REQUIRE_ASSETS");
  return env && std::string_view(env) == "1";
}

// The labels (by the suite's name) under which a test may use an asset of this kind.
inline bool label_allows(Asset a, std::string_view suite, std::string_view name) {
  const bool slow =
      suite.find("Slow") != std::string_view::npos || name.find("Slow") != std::string_view::npos;
  const bool real = suite.ends_with("Real"),
             llama = suite.ends_with("VsLlamaCpp") || suite.ends_with("VsLlamaCppLong"),
             mpi = suite.ends_with("Mpi");
  switch (a) {
    case Asset::model: return real || llama || mpi || slow;  // the comparisons read models too
    case Asset::llama_tool: return llama;
    case Asset::mpi: return mpi;
  }
  return false;
}

// A non-fatal failure when the running test asks for an asset outside its label. Outside a test
// (a fixture's static set-up) there is no name to check.
inline void expect_label_allows(Asset a, std::string_view what) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  if (!t || label_allows(a, t->test_suite_name(), t->name())) return;
  ADD_FAILURE()
      << t->test_suite_name() << "." << t->name() << " needs " << what
      << ", which its label does not promise: name its suite *Real (model files), "
         "*VsLlamaCpp or *VsLlamaCppLong (llama.cpp's tools) or *Mpi (MPI); see tests/assets.hpp";
}

// The real models and texts: $SPATTN_MODELS, else the shared/models folder beside the checkout.
inline std::filesystem::path models_dir() {
  if (const char* env = std::getenv("SPATTN_MODELS"); env && *env) return env;
  return std::filesystem::path(SPATTN_SOURCE_DIR) / ".." / "shared" / "models";
}

// The path of a file in models_dir(), or "" when it is not there (the caller then says
// SPATTN_MISSING_ASSET).
inline std::string model_file(const std::string& name) {
  expect_label_allows(Asset::model, name + " from the models folder");
  const std::filesystem::path p = models_dir() / name;
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec) ? p.string() : std::string();
}

// The pinned llama.cpp source scripts/deps.sh links (ggml is built from it, so it is there
// wherever the tests build); its models/ holds llama.cpp's tokenizer suite.
inline std::filesystem::path llama_cpp_source() {
  return std::filesystem::path(SPATTN_SOURCE_DIR) / "third_party" / "llama.cpp";
}

// llama.cpp's built tools: $SPATTN_LLAMA_BIN, else where scripts/deps.sh builds them.
inline std::filesystem::path llama_bin() {
  if (const char* env = std::getenv("SPATTN_LLAMA_BIN"); env && *env) return env;
  return llama_cpp_source() / "build" / "bin";
}

// The first of these llama.cpp tools (llama-completion, ...) absent from llama_bin(), or "".
inline std::string missing_llama_tool(std::initializer_list<const char*> tools) {
  expect_label_allows(Asset::llama_tool, "llama.cpp's tools");
  std::error_code ec;
  for (const char* tool : tools)
    if (!std::filesystem::is_regular_file(llama_bin() / tool, ec)) return tool;
  return "";
}

}  // namespace spattn::test

// A missing asset: skips the test naming it, or fails it under SPATTN_REQUIRE_ASSETS=1. `what`
// is streamed (`SPATTN_MISSING_ASSET("llama-tokenize in " << dir)`). Returns from the test.
#define SPATTN_MISSING_ASSET(what)                                                  \
  do {                                                                              \
    std::ostringstream spattn_missing_;                                             \
    spattn_missing_ << what;                                                        \
    if (::spattn::test::assets_required())                                          \
      GTEST_FAIL() << "missing asset: " << spattn_missing_.str()                    \
                   << " (SPATTN_REQUIRE_ASSETS=1: a missing asset fails the test)"; \
    GTEST_SKIP() << "missing asset: " << spattn_missing_.str();                     \
  } while (0)

// A test that does not apply to this machine or build (no GPU, a CPU feature absent, an
// instrumented build, a case not supported yet): a skip whatever SPATTN_REQUIRE_ASSETS says,
// since no install would make it run here.
#define SPATTN_SKIP_NOT_APPLICABLE(why) GTEST_SKIP() << "not applicable here: " << why
