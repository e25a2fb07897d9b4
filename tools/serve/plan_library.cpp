#include "plan_library.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "request.hpp"
#include "spattn/calibration.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/mminference.hpp"

namespace spattn::serve {

namespace fs = std::filesystem;

namespace {

// A sealed memfd holding `bytes`, named by a path any reader can open.
std::string memory_file(const std::string& name, const std::string& bytes) {
  const int fd = memfd_create(("spattn-plan-" + name).c_str(), MFD_ALLOW_SEALING);
  SPATTN_CHECK(fd >= 0, "--plans-dir: cannot make an in-memory file for ", name);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    SPATTN_CHECK(n > 0, "--plans-dir: cannot copy ", name, " into memory");
    done += size_t(n);
  }
  fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
  return "/proc/self/fd/" + std::to_string(fd);  // held for the process's lifetime
}

template <class F>
bool loads(F f) {
  try {
    f();
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

PlanLibrary::PlanLibrary(const std::string& dir) {
  SPATTN_CHECK(fs::is_directory(dir), "--plans-dir ", dir, ": not a directory");
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::error_code ec;
    if (!e.is_regular_file(ec) || e.file_size(ec) > kMaxFileBytes || ec) {
      skipped_ += (skipped_.empty() ? "" : ", ") + name;
      continue;
    }
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string path = memory_file(name, bytes);
    if (loads([&] { load_mm_plan(path); }))
      plans_[name] = path;
    else if (loads([&] { load_calibration(path); }))
      calibs_[name] = path;
    else
      skipped_ += (skipped_.empty() ? "" : ", ") + name;
  }
}

std::string PlanLibrary::resolve(const std::string& text) const {
  MethodSpec spec;
  try {
    spec = parse_method_spec(text);
  } catch (const Error& e) {
    bad_request(std::string("spattn.attn: ") + e.what(), "spattn.attn");
  }
  std::string out = spec.name;
  char sep = ':';
  for (auto& [key, value] : spec.params) {
    std::string v = value;
    if (key == "plan" || key == "calib") {
      const auto& names = key == "plan" ? plans_ : calibs_;
      const auto it = names.find(value);
      if (it == names.end())
        bad_request("spattn.attn: " + key + "='" + value + "' is not a " +
                        (key == "plan" ? "plan" : "calibration") +
                        " this server has (a name from --plans-dir)",
                    "spattn.attn");
      v = it->second;
    } else if (value.find('/') != std::string::npos) {
      bad_request("spattn.attn: " + key + " must not hold '/'", "spattn.attn");
    }
    out += sep + key + "=" + v;
    sep = ',';
  }
  return out;
}

}  // namespace spattn::serve
