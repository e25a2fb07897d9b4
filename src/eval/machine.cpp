// A description of the machine for benchmark headers and --json: enough to tell two result
// files apart (which CPU, how many cores this process could use, which SIMD path, which BLAS).
#include <cblas.h>
#include <sched.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "spattn/attention.hpp"
#include "spattn/peak.hpp"

namespace spattn {

namespace {

// CPUs this process may run on: in containers and under taskset this is fewer than the
// machine holds, and it is what threads=0 really gets.
std::set<int> allowed_cpus() {
  std::set<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int i = 0; i < CPU_SETSIZE; ++i)
      if (CPU_ISSET(i, &set)) cpus.insert(i);
  return cpus;
}

std::string field_value(const std::string& line) {
  size_t colon = line.find(':');
  if (colon == std::string::npos) return {};
  size_t b = line.find_first_not_of(" \t", colon + 1);
  return b == std::string::npos ? std::string() : line.substr(b);
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

struct CpuInfo {
  std::string model;
  int cores = 0;  // distinct (package, core) pairs among the allowed CPUs
};

// /proc/cpuinfo lists one block per logical CPU; hyperthreads share (physical id, core id).
CpuInfo read_cpuinfo(const std::set<int>& allowed) {
  CpuInfo info;
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, package, core;
  int processor = -1;
  auto end_block = [&] {
    if (processor >= 0 && !core.empty() && (allowed.empty() || allowed.count(processor)))
      cores.insert({package, core});
    processor = -1;
    package.clear();
    core.clear();
  };
  while (std::getline(in, line)) {
    if (line.empty())
      end_block();
    else if (starts_with(line, "processor"))
      processor = std::atoi(field_value(line).c_str());
    else if (starts_with(line, "physical id"))
      package = field_value(line);
    else if (starts_with(line, "core id"))
      core = field_value(line);
    else if (info.model.empty() && starts_with(line, "model name"))
      info.model = field_value(line);
  }
  end_block();
  info.cores = int(cores.size());
  return info;
}

std::string compiler_name() {
#if defined(__clang__)
  return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("gcc ") + __VERSION__;
#else
  return "unknown";
#endif
}

}  // namespace

MachineInfo machine_info() {
  MachineInfo m;
  const std::set<int> allowed = allowed_cpus();
  const CpuInfo cpu = read_cpuinfo(allowed);
  m.cpu = cpu.model.empty() ? "unknown" : cpu.model;
  m.cores = cpu.cores;
  m.threads = allowed.empty() ? int(std::thread::hardware_concurrency()) : int(allowed.size());
  m.simd = simd_target_name();
  m.compiler = compiler_name();
  const char* blas = openblas_get_config();
  m.blas = blas ? blas : "unknown";
  return m;
}

}  // namespace spattn
