// A fresh folder for one test's files, removed with the object. Its name is made unique by
// mkdtemp(3) under the system's temporary folder, so runs at once (ctest -j, two builds, two
// checkouts on one machine) never write into each other's files, whatever the test's name or
// process id. Every test that writes files takes one of these.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>

namespace spattn::test {

class TempDir {
 public:
  // prefix: what the folder holds, for a reader of /tmp ("spattn_serve_run" -> .../spattn_serve_run-Ab3xYz).
  explicit TempDir(const std::string& prefix = "spattn") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  TempDir(TempDir&& o) noexcept : path_(std::exchange(o.path_, {})) {}
  TempDir& operator=(TempDir&&) = delete;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }

  const std::filesystem::path& path() const { return path_; }
  operator const std::filesystem::path&() const& { return path_; }  // where a folder is asked for
  // Not from a temporary: the folder would be removed before the path is used.
  operator const std::filesystem::path&() const&& = delete;
  std::string string() const { return path_.string(); }
  // A file (or folder) inside it, as a path and as a string.
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace spattn::test
