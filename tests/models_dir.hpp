// Where the real model files are (the project's shared/models folder, beside the repository),
// so tests on them can skip cleanly where it is absent. SPATTN_MODELS overrides the place.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

namespace spattn::test {

inline std::filesystem::path models_dir() {
  if (const char* env = std::getenv("SPATTN_MODELS"); env && *env) return env;
  return std::filesystem::path(SPATTN_SOURCE_DIR) / ".." / "shared" / "models";
}

// The path of a model file, or "" when it is not there (the caller then GTEST_SKIPs).
inline std::string model_file(const std::string& name) {
  const std::filesystem::path p = models_dir() / name;
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec) ? p.string() : std::string();
}

}  // namespace spattn::test
