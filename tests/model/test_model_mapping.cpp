// A model loaded from a mapped file has the pages of every matrix its products read mapped in
// at load (as llama.cpp's loader maps with MAP_POPULATE), so a first prefill does not fault
// them in one by one inside its timed matrix products.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "assets.hpp"
#include "spattn/model.hpp"
#include "spattn/model_maker.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Whether this kernel takes MADV_POPULATE_READ (Linux 5.14 on); the loader's call is advice.
bool kernel_populates() {
  const long page = sysconf(_SC_PAGESIZE);
  void* p = mmap(nullptr, size_t(page), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const bool ok = madvise(p, size_t(page), MADV_POPULATE_READ) == 0;
  munmap(p, size_t(page));
  return ok;
}

// One byte of every page of [b, b + n), summed. Not instrumented by AddressSanitizer: its check
// of each load reads the shadow byte first, and the shadow of n mapped bytes is n / 8 bytes of
// zero pages faulted in on first touch, which would count as the weights' faults (CI's ASan run
// saw 875 for 7,040 pages, one per 8).
__attribute__((no_sanitize("address"))) unsigned touch_pages(const unsigned char* b, size_t n,
                                                             long page, long& pages) {
  const auto* v = static_cast<const volatile unsigned char*>(b);
  unsigned sum = 0;
  for (size_t o = 0; o < n; o += size_t(page), ++pages) sum += v[o];
  return sum;
}

TEST(ModelMapping, LoadMapsInEveryMatrixTheProductsRead) {
  if (!kernel_populates()) SPATTN_SKIP_NOT_APPLICABLE("this kernel has no MADV_POPULATE_READ");
  ModelShape sh;
  sh.layers = 2;
  sh.dim = 512;
  sh.heads = 8;
  sh.kv_heads = 4;
  sh.ffn = 4096;
  sh.vocab = 512;
  sh.type = gguf::GgmlType::f16;  // read in place: ggml repacks no f16 matrix
  sh.tied = true;
  sh.seed = 3;
  const test::TempDir dir("spattn_mapping");
  const std::filesystem::path path = dir / "m.gguf";
  make_model(path.string(), sh);
  const model::Model m = model::load_model(path.string());
  std::filesystem::remove(path);  // the mapping keeps the file's pages
  std::vector<const model::Model::Weight*> mats;
  for (int64_t l = 0; l < m.config().n_layer; ++l) {
    const auto& L = m.layer(l);
    for (const auto* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down}) mats.push_back(w);
  }
  mats.push_back(&m.output());  // the tied head: the whole embedding, every token
  const long page = sysconf(_SC_PAGESIZE);
  long pages = 0;
  unsigned sum = 0;
  const long before = minor_faults();
  for (const auto* w : mats) {
    if (w->repacked) continue;  // copied into memory of ours at load: resident already
    const size_t n = size_t(w->rows) * size_t(w->cols) * 2;  // f16
    sum += touch_pages(static_cast<const unsigned char*>(w->data()), n, page, pages);
  }
  const long faults = minor_faults() - before;
  // About 7,040 pages. Unmapped, reading one byte a page faults at least once per 16 pages
  // (the kernel maps up to 64 KiB around a fault): 450 or more; mapped in at load, none.
  if (pages < 7000)
    SPATTN_SKIP_NOT_APPLICABLE("ggml repacks f16 matrices here: nothing read in place");
  EXPECT_LT(faults, pages / 64) << faults << " minor faults reading " << pages
                                << " pages of weights (byte sum " << sum << ")";
}

}  // namespace
}  // namespace spattn
