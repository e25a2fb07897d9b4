// A model loaded from a mapped file with --mmap has the pages of every matrix its products read
// mapped in at load (as llama.cpp's loader maps with MAP_POPULATE), so a first prefill does not
// fault them in one by one inside its timed matrix products. With --no-mmap those matrices are
// copied out of the mapping into memory advised into huge pages.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "assets.hpp"
#include "cli_run.hpp"
#include "model/weight_pages.hpp"
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

// The f16 test shape (ggml repacks no f16 matrix: every one is read in place).
ModelShape f16_shape() {
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
  return sh;
}

// Every matrix the products read, and the tied head: the whole embedding, every token.
std::vector<const model::Model::Weight*> product_matrices(const model::Model& m) {
  std::vector<const model::Model::Weight*> mats;
  for (int64_t l = 0; l < m.config().n_layer; ++l) {
    const auto& L = m.layer(l);
    for (const auto* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down}) mats.push_back(w);
  }
  mats.push_back(&m.output());
  return mats;
}

model::LoadOptions mapped(bool mmap) {
  model::LoadOptions o;
  o.mmap = mmap;
  return o;
}

TEST(ModelMapping, LoadMapsInEveryMatrixTheProductsRead) {
  if (!kernel_populates()) SPATTN_SKIP_NOT_APPLICABLE("this kernel has no MADV_POPULATE_READ");
  const test::TempDir dir("spattn_mapping");
  const std::filesystem::path path = dir / "m.gguf";
  make_model(path.string(), f16_shape());
  const model::Model m = model::load_model(path.string(), mapped(true));
  std::filesystem::remove(path);  // the mapping keeps the file's pages
  const std::vector<const model::Model::Weight*> mats = product_matrices(m);
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

// The VmFlags of the mapping of this process holding address a ("" where none does).
std::string vm_flags_at(const void* a) {
  std::ifstream f("/proc/self/smaps");
  const auto x = reinterpret_cast<uintptr_t>(a);
  bool inside = false;
  for (std::string line; std::getline(f, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = x >= lo && x < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// With --no-mmap the matrices the products read are copied out of the mapping, byte for byte,
// into memory advised into huge pages ("hg" among the mapping's VmFlags), and counted as the
// model's own bytes, not the mapping's; --mmap (the default) leaves them where they are.
TEST(ModelMapping, LoadCopiesTheProductsMatricesIntoHugePages) {
  if (!model::huge_pages_offered())
    SPATTN_SKIP_NOT_APPLICABLE("transparent huge pages are off here");
  const test::TempDir dir("spattn_mapping");
  const std::string path = (dir / "m.gguf").string();
  make_model(path, f16_shape());
  const model::Model copied = model::load_model(path, mapped(false));
  const model::Model in_place = model::load_model(path);
  const std::vector<const model::Model::Weight*> a = product_matrices(copied),
                                                 b = product_matrices(in_place);
  size_t bytes = 0, huge = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const size_t n = size_t(a[i]->rows) * size_t(a[i]->cols) * 2;  // f16
    ASSERT_NE(a[i]->data(), b[i]->data());
    EXPECT_EQ(std::memcmp(a[i]->data(), b[i]->data(), n), 0) << "matrix " << i;
    bytes += n;
    // A 2 MiB-aligned address inside the matrix, where it holds one: in an advised mapping.
    const auto p = reinterpret_cast<uintptr_t>(a[i]->data());
    const uintptr_t aligned = (p + (uintptr_t(2) << 20) - 1) & ~((uintptr_t(2) << 20) - 1);
    if (aligned < p + n) {
      ++huge;
      EXPECT_NE(vm_flags_at(reinterpret_cast<const void*>(aligned)).find(" hg"), std::string::npos)
          << "matrix " << i << ": " << vm_flags_at(reinterpret_cast<const void*>(aligned));
    }
  }
  EXPECT_GT(huge, 0u);
  EXPECT_EQ(in_place.memory().mapped - copied.memory().mapped, bytes);
  EXPECT_EQ(copied.memory().owned - in_place.memory().owned, bytes);
  // The same through the command line: the default, --mmap and --no-mmap.
  const auto run = [&](const std::string& flag) {
    const auto r = test::run_spattn("run -m " + path + " -p hi -n 1 -c 64 --json" + flag, dir);
    EXPECT_EQ(r.code(), 0) << r.err;
    return nlohmann::json::parse(r.out)["memory"]["weights_mapped_bytes"].get<size_t>();
  };
  EXPECT_EQ(run(""), in_place.memory().mapped);
  EXPECT_EQ(run(" --mmap"), in_place.memory().mapped);
  EXPECT_EQ(run(" --no-mmap"), copied.memory().mapped);
  // A value given to either flag is refused by name (CLI11's parse error), not read as a mode.
  for (const char* bad : {" --mmap=sometimes", " --no-mmap=maybe"}) {
    const auto r = test::run_spattn("run -m " + path + " -p hi -n 1 -c 64" + bad, dir);
    ASSERT_TRUE(r.exited()) << bad;
    EXPECT_NE(r.code(), 0) << bad;
    EXPECT_NE(r.err.find("mmap"), std::string::npos) << bad << ": " << r.err;
  }
}

}  // namespace
}  // namespace spattn
