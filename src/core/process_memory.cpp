#include "core/process_memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

namespace spattn {

size_t peak_rss_bytes() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return size_t(u.ru_maxrss) * 1024;  // Linux reports kilobytes
}

size_t current_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return got == 2 ? size_t(resident) * size_t(sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace spattn
