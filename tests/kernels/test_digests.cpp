// Bitwise regression: every kernel form's output (and LSE, statistics, observed values) on fixed
// inputs hashes to the digest recorded before the spine redesign. A change to the loop that
// alters one bit of any output fails here. Digests depend on the SIMD target and operand format
// (and on the compiler's floating-point code generation), so they are recorded per target for
// the optimised build; other targets and sanitizer builds skip.
//
// To print a new table (only after an intended numerical change, saying why in the commit):
//   SPATTN_PRINT_DIGESTS=1 build/bin/spattn_tests --gtest_filter='Digests.*'
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "assets.hpp"
#include "hwy/targets.h"
#include "kernels/flash_common.hpp"
#include "spattn/blasst.hpp"
#include "spattn/decode.hpp"
#include "spattn/masks.hpp"
#include "spattn/metrics.hpp"
#include "spattn/sparse_attention.hpp"
#include "spattn/workload.hpp"
#include "targets.hpp"

namespace spattn {
namespace {

struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void tensor(const TensorView& t) {
    for (int64_t hh = 0; hh < t.heads; ++hh)
      for (int64_t s = 0; s < t.seq; ++s)
        for (int64_t c = 0; c < t.dim; ++c) {
          const float x = t.get(hh, s, c);
          bytes(&x, 4);
        }
  }
  void floats(const std::vector<float>& v) { bytes(v.data(), v.size() * 4); }
  void i64(int64_t x) { bytes(&x, 8); }
  void stats(const Stats& s) {
    i64(s.score_entries), i64(s.causal_entries), i64(s.tiles_visited), i64(s.tiles_skipped);
  }
};

// Per (q head, row, key block) LSE as the observer reports it.
struct LseGrid : BlockLseObserver {
  int64_t rows, blocks;
  std::vector<float> v;
  LseGrid(int64_t heads, int64_t rows_, int64_t kv_len)
      : rows(rows_),
        blocks((kv_len + kKeyBlock - 1) / kKeyBlock),
        v(size_t(heads * rows * blocks), 7.0f) {}
  void observe(int64_t h, int64_t r0, int64_t n, int64_t kb, const float* lse) override {
    for (int64_t r = 0; r < n; ++r) v[size_t((h * rows + r0 + r) * blocks + kb)] = lse[r];
  }
};

Workload text(DType t, int64_t seq, int64_t q_len = 0) {
  return make_workload({.kind = WorkloadKind::text,
                        .seq = seq,
                        .q_len = q_len,
                        .heads = 4,
                        .kv_heads = 2,
                        .dim = 64,
                        .dtype = t,
                        .seed = 11});
}

// name -> digest of everything the form produced, for the current target and operand format.
std::map<std::string, uint64_t> compute() {
  std::map<std::string, uint64_t> out;
  const AttnOptions opt{.threads = 2};
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const std::string tn = dtype_name(t);
    const Workload w = text(t, 1111);
    const int64_t hq = w.q.heads(), L = w.q.seq(), d = w.q.dim();
    Tensor o(DType::f32, hq, L, d);
    std::vector<float> lse(size_t(hq * L));
    {  // dense, causal and not, and q_len < kv_len
      Fnv f;
      Stats st;
      attention_dense(w.q, w.k, w.v, o, opt, lse.data(), &st);
      f.tensor(o), f.floats(lse), f.stats(st);
      AttnOptions nc = opt;
      nc.causal = false;
      attention_dense(w.q, w.k, w.v, o, nc, lse.data());
      f.tensor(o), f.floats(lse);
      const TensorView qs = w.q.view().rows(L - 300, 300);
      Tensor o2(DType::f32, hq, 300, d);
      attention_dense(qs, w.k, w.v, o2, opt, lse.data());
      f.tensor(o2), f.bytes(lse.data(), size_t(hq * 300) * 4);
      out["dense/" + tn] = f.h;
    }
    if (t == DType::f16) continue;
    {  // dense with the block observer
      Fnv f;
      LseGrid g(hq, L, L);
      attention_dense_observed(w.q, w.k, w.v, o, opt, lse.data(), g);
      f.tensor(o), f.floats(g.v);
      out["observed/" + tn] = f.h;
    }
    {  // block-sparse: A-shape and mean-pool masks
      Fnv f;
      Stats st;
      const MaskGeometry g{.heads = hq, .q_len = L, .kv_len = L};
      attention_block_sparse(w.q, w.k, w.v, o, a_shape_mask(g, 64, 256), opt, lse.data(), &st);
      f.tensor(o), f.floats(lse), f.stats(st);
      const BlockMask mp = mean_pool_mask(w.q, w.k, 64, 64, 4, 64, 128, opt);
      attention_block_sparse(w.q, w.k, w.v, o, mp, opt, lse.data(), &st);
      f.tensor(o), f.floats(lse), f.stats(st);
      out["block_sparse/" + tn] = f.h;
    }
    {  // query-sparse with observer
      Fnv f;
      Stats st;
      const std::vector<int64_t> rows = strided_rows(L, 16);
      const int64_t n = int64_t(rows.size());
      Tensor oq(DType::f32, hq, n, d);
      LseGrid g(hq, n, L);
      attention_query_sparse(w.q, w.k, w.v, rows, oq, opt, lse.data(), &g, &st);
      f.tensor(oq), f.bytes(lse.data(), size_t(hq * n) * 4), f.floats(g.v), f.stats(st);
      out["query_sparse/" + tn] = f.h;
    }
    {  // vertical-slash
      Fnv f;
      Stats st;
      VerticalSlashConfig c;
      c.vertical_size = 100, c.slash_size = 64;
      const VerticalSlashIndex idx = vertical_slash_index(w.q, w.k, c, opt);
      attention_vertical_slash(w.q, w.k, w.v, o, idx, opt, lse.data(), &st);
      f.tensor(o), f.floats(lse), f.stats(st);
      out["vertical_slash/" + tn] = f.h;
    }
    {  // BLASST prefill and its margins
      Fnv f;
      Stats st;
      SkipStats sk;
      sk.record_tiles = true;
      attention_blasst(w.q, w.k, w.v, o, 0.05, opt, lse.data(), &st, &sk);
      f.tensor(o), f.floats(lse), f.stats(st);
      for (size_t i = 0; i < sk.skipped.size(); ++i) {
        f.i64(sk.visited[i]), f.i64(sk.skipped[i]);
        for (int32_t x : sk.skipped_tiles[i]) f.i64(x);
      }
      const TileMargins tm = blasst_tile_margins(w.q, w.k, w.v, opt);
      f.floats(tm.margin);
      for (int64_t e : tm.entries) f.i64(e);
      out["blasst/" + tn] = f.h;
    }
    {  // block mass (the observer's consumer)
      Fnv f;
      const BlockMassGrid g = block_mass(w.q, w.k, w.v, 1, 64, 128, opt);
      f.floats(g.mass);
      out["block_mass/" + tn] = f.h;
    }
    {  // decode, dense and BLASST
      Fnv f;
      const Workload wd = text(t, 3333, 5);
      Tensor od(DType::f32, hq, 5, d);
      std::vector<float> ld(size_t(hq * 5));
      Stats st;
      attention_decode(wd.q, wd.k, wd.v, od, opt, {}, ld.data(), &st);
      f.tensor(od), f.floats(ld), f.stats(st);
      SkipStats sk;
      sk.record_tiles = true;
      attention_decode(wd.q, wd.k, wd.v, od, opt, {.lambda = 0.05}, ld.data(), &st, &sk);
      f.tensor(od), f.floats(ld), f.stats(st);
      for (size_t i = 0; i < sk.skipped.size(); ++i)
        for (int32_t x : sk.skipped_tiles[i]) f.i64(x);
      out["decode/" + tn] = f.h;
    }
  }
  return out;
}

// Recorded with GCC 12 -O3 (Release) before the spine redesign; key: target/operand path.
// Changed since, each with its reason: block_mass (its sums moved from fixed-point atomics to
// attention_weight_sums' double sums in a fixed order; the kernels' outputs are unchanged).
const std::map<std::string, std::map<std::string, uint64_t>>& recorded() {
  static const std::map<std::string, std::map<std::string, uint64_t>> r = {
#include "digests.inc"
  };
  return r;
}

std::string target_key() {
  const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  std::string k = hwy::TargetName(targets & -targets);
  if (kernels::cpu_has_bf16_dot()) k += kernels::bf16_dot_supported() ? "/bf16dot" : "/widen";
  return k;
}

TEST(Digests, EveryKernelFormIsBitwiseUnchanged) {
#if defined(SPATTN_SANITIZE)
  SPATTN_SKIP_NOT_APPLICABLE("digests are recorded for the optimised build");
#else
  const bool print = std::getenv("SPATTN_PRINT_DIGESTS") != nullptr;
  int checked = 0;
  test::for_each_target([&] {
    const std::string key = target_key();
    const auto got = compute();
    if (print) {
      std::printf("{\"%s\", {\n", key.c_str());
      for (const auto& [name, h] : got)
        std::printf("  {\"%s\", 0x%016llxull},\n", name.c_str(), (unsigned long long)h);
      std::printf("}},\n");
      return;
    }
    const auto it = recorded().find(key);
    if (it == recorded().end()) return;
    ++checked;
    for (const auto& [name, h] : got) {
      const auto w = it->second.find(name);
      ASSERT_NE(w, it->second.end()) << key << " " << name;
      EXPECT_EQ(h, w->second) << key << " " << name << " changed";
    }
    EXPECT_EQ(got.size(), it->second.size()) << key;
  });
  if (!print && checked == 0)
    SPATTN_SKIP_NOT_APPLICABLE("no digests recorded for this machine's targets");
#endif
}

}  // namespace
}  // namespace spattn
