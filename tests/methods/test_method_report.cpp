// MethodReport: what Method::run returns. Its contents for dense, a block-mask method and the
// kernel-path choice; and that a method holds no state between runs, so one Method object gives
// the same report every time and may run on several threads at once.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/method.hpp"
#include "spattn/metrics.hpp"
#include "spattn/workload.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

Workload text(int64_t seq, int64_t q_len, uint64_t seed) {
  WorkloadConfig c;
  c.seq = seq, c.q_len = q_len, c.heads = 4, c.kv_heads = 2, c.dim = 64, c.seed = seed;
  return make_workload(c);
}

struct Outcome {
  Tensor out;
  std::vector<float> lse;
  MethodReport report;
};

Outcome run(const Method& m, const Workload& w, int threads = 2) {
  Outcome r{Tensor(DType::f32, w.q.heads(), w.q.seq(), w.q.dim()),
            std::vector<float>(size_t(w.q.heads() * w.q.seq())),
            {}};
  AttnOptions opt;
  opt.threads = threads;
  r.report = m.run(w.q, w.k, w.v, r.out, opt, r.lse.data());
  return r;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.view().data, b.view().data, size_t(a.numel()) * sizeof(float)) == 0;
}

void expect_same_report(const MethodReport& a, const MethodReport& b, int64_t heads, int64_t q_len,
                        const std::string& what) {
  EXPECT_EQ(a.stats.score_entries, b.stats.score_entries) << what;
  EXPECT_EQ(a.stats.causal_entries, b.stats.causal_entries) << what;
  EXPECT_EQ(a.stats.tiles_visited, b.stats.tiles_visited) << what;
  EXPECT_EQ(a.stats.tiles_skipped, b.stats.tiles_skipped) << what;
  EXPECT_EQ(a.stats.flops, b.stats.flops) << what;
  EXPECT_EQ(a.path, b.path) << what;
  EXPECT_EQ(a.extras, b.extras) << what;
  EXPECT_EQ(a.per_head, b.per_head) << what;
  ASSERT_EQ(a.mask == nullptr, b.mask == nullptr) << what;
  if (a.mask) {
    EXPECT_EQ(a.mask->to_dense(), b.mask->to_dense()) << what;
  }
  ASSERT_NE(a.coverage, nullptr) << what;
  ASSERT_NE(b.coverage, nullptr) << what;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < q_len; ++i) {
      std::vector<KeyRange> ra, rb;
      a.coverage->row_ranges(h, i, ra);
      b.coverage->row_ranges(h, i, rb);
      ASSERT_EQ(ra.size(), rb.size()) << what << " head " << h << " row " << i;
      for (size_t n = 0; n < ra.size(); ++n) {
        EXPECT_EQ(ra[n].begin, rb[n].begin) << what;
        EXPECT_EQ(ra[n].end, rb[n].end) << what;
      }
    }
}

void expect_same_run(const Outcome& a, const Outcome& b, const std::string& what) {
  EXPECT_TRUE(same_bits(a.out, b.out)) << what << ": outputs differ";
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0) << what;
  expect_same_report(a.report, b.report, a.out.heads(), a.out.seq(), what);
}

TEST(KernelPath, Names) {
  EXPECT_STREQ(kernel_path_name(KernelPath::prefill), "prefill");
  EXPECT_STREQ(kernel_path_name(KernelPath::decode), "decode");
}

TEST(MethodReport, Dense) {
  const auto m = make_method("dense");
  for (int64_t q_len : {int64_t(512), int64_t(17), int64_t(16), int64_t(1)}) {
    const Workload w = text(512, q_len == 512 ? 0 : q_len, 1);
    const Outcome r = run(*m, w);
    const MethodReport& rep = r.report;
    const std::string what = "q_len " + std::to_string(q_len);
    EXPECT_EQ(rep.path, q_len <= kMaxDecodeQueries ? KernelPath::decode : KernelPath::prefill)
        << what;
    EXPECT_EQ(rep.stats.score_entries, rep.stats.causal_entries) << what;
    EXPECT_EQ(rep.stats.causal_entries, 4 * attention_entries(q_len, 512, true)) << what;
    EXPECT_EQ(rep.mask, nullptr) << what;
    EXPECT_TRUE(rep.extras.empty()) << what;
    EXPECT_TRUE(rep.per_head.empty()) << what;
    ASSERT_NE(rep.coverage, nullptr) << what;
    const Recall rec = attention_recall(w.q, w.k, *rep.coverage, {});
    EXPECT_NEAR(rec.mean, 1.0, 1e-9) << what;
    EXPECT_NEAR(rec.worst, 1.0, 1e-9) << what;
  }
}

// A block-mask method reports the mask it computed with; its coverage is that mask's entries.
TEST(MethodReport, BlockMaskMethod) {
  const auto m = make_method("a_shape:sink=64,local=192");
  const Workload w = text(640, 0, 2);
  const Outcome r = run(*m, w);
  const MethodReport& rep = r.report;
  EXPECT_EQ(rep.path, KernelPath::prefill);
  ASSERT_NE(rep.mask, nullptr);
  MaskGeometry g;
  g.heads = 4;
  g.q_len = g.kv_len = 640;
  EXPECT_EQ(rep.mask->to_dense(), a_shape_mask(g, 64, 192).to_dense());
  EXPECT_EQ(rep.mask->entries(), rep.stats.score_entries);
  EXPECT_GT(rep.stats.sparsity(), 0.0);
  ASSERT_NE(rep.coverage, nullptr);
  int64_t listed = 0;
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 640; ++i) {
      std::vector<KeyRange> rr;
      rep.coverage->row_ranges(h, i, rr);
      for (const KeyRange& x : rr) listed += x.end - x.begin;
    }
  EXPECT_EQ(listed, rep.stats.score_entries);
}

// vertical_slash computes at token level; its report gives the block view for pictures too.
TEST(MethodReport, VerticalSlashGivesItsBlockView) {
  const auto m = make_method("vertical_slash:vertical=20,slash=30,sink=4,local=8");
  const Workload w = text(640, 0, 3);
  const Outcome r = run(*m, w);
  ASSERT_NE(r.report.mask, nullptr);
  r.report.mask->validate();
  // The block view holds at least every entry computed.
  EXPECT_GE(r.report.mask->entries(), r.report.stats.score_entries);
}

// The default spec of every method, as `spattn bench` runs it.
std::vector<std::string> default_specs() {
  std::vector<std::string> specs;
  for (const MethodInfo& i : method_catalog()) specs.push_back(i.default_spec);
  return specs;
}

TEST(MethodCatalog, MatchesTheRegistryAndItsFlagsHold) {
  const std::vector<MethodInfo> catalog = method_catalog();
  const std::vector<std::string> names = method_names();
  ASSERT_EQ(catalog.size(), names.size());
  const Tensor q = test::random_tensor(DType::f32, 2, 130, 32, 1);
  const Tensor k = test::random_tensor(DType::f32, 2, 130, 32, 2);
  const Tensor v = test::random_tensor(DType::f32, 2, 130, 32, 3);
  Tensor out(DType::f32, 2, 130, 32);
  AttnOptions full;
  full.causal = false;
  for (size_t i = 0; i < catalog.size(); ++i) {
    EXPECT_EQ(catalog[i].name, names[i]);
    const auto m = make_method(catalog[i].default_spec);
    EXPECT_EQ(m->name(), names[i]);
    if (catalog[i].causal_only) {
      EXPECT_THROW(m->run(q, k, v, out, full), Error) << names[i];
    } else {
      EXPECT_NO_THROW(m->run(q, k, v, out, full)) << names[i];
    }
  }
}

// count_param names the parameter that sets the blocks a query block keeps: one more block per
// query block is denser (what `bench --matched` bisects on).
TEST(MethodCatalog, CountParamSetsTheBlocksKept) {
  const Workload w = text(1024, 0, 21);
  Tensor out(DType::f32, w.q.heads(), w.q.seq(), w.q.dim());
  int counted = 0;
  for (const MethodInfo& i : method_catalog()) {
    if (i.count_param.empty()) continue;
    const auto sparsity = [&](int count) {
      const std::string spec = i.name + ":" + i.count_param + "=" + std::to_string(count);
      return make_method(spec)->run(w.q, w.k, w.v, out, AttnOptions{}).stats.sparsity();
    };
    EXPECT_GT(sparsity(1), sparsity(4)) << i.name << ":" << i.count_param;
    ++counted;
  }
  EXPECT_EQ(counted, 3);  // oracle_topk, mean_pool, momo
}

// Prefill inputs of two lengths and a decode input: every path of every method.
struct Inputs {
  Workload a = text(1024, 0, 11), b = text(768, 0, 12), decode = text(2048, 4, 13);
};
const Inputs& inputs() {
  static const Inputs x;
  return x;
}

// One method object, run again after a run on other inputs, gives the same output and report:
// nothing from one run reaches the next.
TEST(MethodReport, RepeatedRunsGiveIdenticalReports) {
  const Inputs& x = inputs();
  for (const std::string& spec : default_specs()) {
    const auto m = make_method(spec);
    const Outcome first = run(*m, x.a);
    const Outcome other = run(*m, x.b);
    const Outcome dec = run(*m, x.decode);
    const Outcome again = run(*m, x.a);
    expect_same_run(first, again, spec);
    EXPECT_NE(other.report.stats.causal_entries, first.report.stats.causal_entries) << spec;
    expect_same_run(dec, run(*m, x.decode), spec + " decode");
  }
}

// One method object on two threads at once, each on its own inputs (prefill of two lengths, and
// decode): every output and report equals the sequential run's.
TEST(MethodReport, OneMethodRunsOnTwoThreadsAtOnce) {
  const Inputs& x = inputs();
  for (const std::string& spec : default_specs()) {
    const auto m = make_method(spec);
    const Outcome seq_a = run(*m, x.a), seq_b = run(*m, x.b), seq_d = run(*m, x.decode);
    std::vector<Outcome> got_a, got_b;
    auto worker = [&](const Workload& w, std::vector<Outcome>& got) {
      for (int i = 0; i < 3; ++i) {
        got.push_back(run(*m, w));
        got.push_back(run(*m, x.decode));
      }
    };
    std::thread ta(worker, std::cref(x.a), std::ref(got_a));
    std::thread tb(worker, std::cref(x.b), std::ref(got_b));
    ta.join();
    tb.join();
    for (size_t i = 0; i < got_a.size(); ++i) {
      expect_same_run(i % 2 ? seq_d : seq_a, got_a[i], spec + " thread a run " + std::to_string(i));
      expect_same_run(i % 2 ? seq_d : seq_b, got_b[i], spec + " thread b run " + std::to_string(i));
    }
  }
}

}  // namespace
}  // namespace spattn
