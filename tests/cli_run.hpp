// Runs the built `spattn` binary (SPATTN_CLI_PATH), or one of scripts/, the way a user would,
// capturing its output.
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace spattn::test {

struct CliRun {
  int status = -1;  // raw wait status
  std::string out, err;
  bool exited() const { return WIFEXITED(status); }
  int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `exec` so that a crash reaches us as a signal, not as the shell's exit code 128 + N.
inline CliRun run_spattn(const std::string& args, const std::filesystem::path& dir) {
  const std::filesystem::path out = dir / "stdout", err = dir / "stderr";
  const std::string cmd = std::string("exec ") + SPATTN_CLI_PATH + " " + args + " >" +
                          out.string() + " 2>" + err.string();
  CliRun r;
  r.status = std::system(cmd.c_str());
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// scripts/SCRIPT under python3 with `args`, both streams in out, as its user reads them.
inline CliRun run_script(const std::string& script, const std::string& args,
                         const std::filesystem::path& dir) {
  const std::filesystem::path out = dir / "out";
  const std::string cmd = std::string("exec python3 ") + SPATTN_SOURCE_DIR + "/scripts/" + script +
                          " " + args + " >" + out.string() + " 2>&1";
  CliRun r;
  r.status = std::system(cmd.c_str());
  r.out = slurp(out);
  return r;
}

}  // namespace spattn::test
