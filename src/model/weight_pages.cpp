// The memory pages under the weights (model/weight_pages.hpp).
#include "model/weight_pages.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace spattn::model {
namespace {
size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }
}  // namespace

void populate(const void* data, size_t n) {
  const size_t page = page_size();
  const uintptr_t b = reinterpret_cast<uintptr_t>(data), lo = b / page * page;
  madvise(reinterpret_cast<void*>(lo), b + n - lo, MADV_POPULATE_READ);
}

bool huge_pages_offered() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  return std::getline(f, modes) && modes.find("[never]") == std::string::npos;
}

// With 4 KiB pages the first write of each is a fault, ~114K of them for a 1B model's 446 MiB,
// most of a load's time under a hypervisor (~220 with 2 MiB pages); and a decode step walks
// every page of the weights.
void advise_huge_pages(ggml_backend_buffer_t buf) {
  const size_t huge = size_t(2) << 20;
  const uintptr_t b = reinterpret_cast<uintptr_t>(ggml_backend_buffer_get_base(buf));
  const uintptr_t lo = (b + huge - 1) / huge * huge,
                  hi = (b + ggml_backend_buffer_get_size(buf)) / huge * huge;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
}

void release_mapped(const void* data, size_t n) {
  const size_t page = page_size();
  const uintptr_t b = reinterpret_cast<uintptr_t>(data);
  const uintptr_t lo = (b + page - 1) / page * page, hi = (b + n) / page * page;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace spattn::model
