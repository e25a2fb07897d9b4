// Settings that belong to one call, not to the process: OpenBLAS's thread count (spattn's
// products split over the caller's threads; OpenBLAS's own count is set once and never moved)
// and the bf16 operand path (AttnOptions::bf16_dot; a bench reports its choice). Calls made
// from several threads at once, each with its own settings, compute what they compute alone.
#include <gtest/gtest.h>

#include <cblas.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "core/blas.hpp"
#include "kernels/flash_common.hpp"
#include "spattn/bench.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/workload.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = nd(rng);
  return x;
}

bool same_bits(const TensorView& a, const TensorView& b) {
  return a.heads == b.heads && a.seq == b.seq && a.dim == b.dim &&
         std::memcmp(a.data, b.data, size_t(a.heads * a.seq * a.dim) * dtype_size(a.dtype)) == 0;
}

// Split over any number of threads, a product is deterministic (the same bits on a second call
// with that count) and the unsplit call's to float rounding. Not bit for bit: OpenBLAS's edge
// kernels (its Haswell set) sum a slice's last rows or columns in another order.
TEST(Blas, SgemmSplitIsDeterministicAndTheUnsplitProduct) {
  blas::use_single_threaded_blas();
  struct Shape {
    int64_t m, n, k;
    bool bt;
  };
  for (const Shape s :
       {Shape{37, 300, 70, true}, Shape{300, 37, 70, true}, Shape{64, 1000, 16, true},
        Shape{129, 130, 33, false}, Shape{1, 7, 5, false}}) {
    const int64_t lda = s.k + 3, ldb = (s.bt ? s.k : s.n) + 5, ldc = s.n + 2;
    const auto a = random_floats(size_t(s.m * lda), 1);
    const auto b = random_floats(size_t((s.bt ? s.n : s.k) * ldb), 2);
    const auto c0 = random_floats(size_t(s.m * ldc), 3);
    std::vector<float> want = c0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, s.bt ? CblasTrans : CblasNoTrans, int(s.m), int(s.n),
                int(s.k), 0.5f, a.data(), int(lda), b.data(), int(ldb), 0.25f, want.data(),
                int(ldc));
    for (int threads : {1, 2, 3, 5}) {
      std::vector<float> c = c0, again = c0;
      blas::sgemm(s.bt, s.m, s.n, s.k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, c.data(), ldc,
                  threads);
      blas::sgemm(s.bt, s.m, s.n, s.k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, again.data(), ldc,
                  threads);
      EXPECT_EQ(std::memcmp(c.data(), again.data(), c.size() * 4), 0)
          << s.m << "x" << s.n << "x" << s.k << " on " << threads << " threads, twice";
      if (threads == 1) {
        EXPECT_EQ(std::memcmp(c.data(), want.data(), c.size() * 4), 0) << "one thread: one call";
      }
      // Each entry is a k-term sum of products of N(0,1) values; reordering it moves it by a
      // few ulps of the terms' magnitude (k * 2^-24 * |a||b| bounds it loosely).
      for (size_t i = 0; i < c.size(); ++i)
        ASSERT_NEAR(c[i], want[i], 1e-5f * float(s.k))
            << s.m << "x" << s.n << "x" << s.k << " on " << threads << " threads";
    }
    for (int64_t i = 0; i < s.m; ++i)  // and it is the product
      for (int64_t j = 0; j < s.n; ++j) {
        double x = 0.25 * c0[size_t(i * ldc + j)];
        for (int64_t p = 0; p < s.k; ++p)
          x += 0.5 * double(a[size_t(i * lda + p)]) *
               (s.bt ? b[size_t(j * ldb + p)] : b[size_t(p * ldb + j)]);
        ASSERT_NEAR(want[size_t(i * ldc + j)], x, 1e-4 * (1 + std::abs(x)));
      }
  }
  EXPECT_EQ(openblas_get_num_threads(), 1);
  std::vector<float> c(4);
  EXPECT_THROW(blas::sgemm(true, 2, 2, 1, 1, c.data(), 1, c.data(), 1, 0, c.data(), 2, 0), Error);
}

// Runs fn on a thread of its own `times` times (and so on every thread given), all at once.
struct Together {
  std::vector<std::thread> threads;
  template <class Fn>
  void add(int times, Fn fn) {
    threads.emplace_back([times, fn] {
      for (int i = 0; i < times; ++i) fn();
    });
  }
  void join() {
    for (auto& t : threads) t.join();
  }
};

// A product on a thread that has never called OpenBLAS has the bits of the same product on a
// thread that has: in OpenBLAS's OpenMP build the one-thread setting is each thread's own, and a
// fresh thread once ran its call on an OpenMP team of the machine's cores (different sums: every
// call differed on 2 cores). A one-core machine cannot tell the two apart.
TEST(Blas, AFreshThreadsProductHasTheBitsOfAnyOther) {
  const int64_t m = 64, n = 1024, k = 64;
  const auto a = random_floats(size_t(m * k), 4);
  const auto b = random_floats(size_t(n * k), 5);
  std::vector<float> here(size_t(m * n)), there(size_t(m * n));
  blas::sgemm(true, m, n, k, 0.125f, a.data(), k, b.data(), k, 0.0f, here.data(), n, 1);
  std::thread fresh([&] {
    blas::sgemm(true, m, n, k, 0.125f, a.data(), k, b.data(), k, 0.0f, there.data(), n, 1);
  });
  fresh.join();
  EXPECT_EQ(std::memcmp(here.data(), there.data(), here.size() * sizeof(float)), 0);
}

// Two methods whose estimates multiply through OpenBLAS, on 1 and 3 threads at once, while a
// third thread watches OpenBLAS's process-wide count: it never moves, and each method computes
// what it computes alone. (Scoped save-set-restore objects once changed the count around every
// estimate, so the watcher saw 1 and 3, and a restore could undo another thread's setting.)
TEST(Blas, ConcurrentCallsNeitherMoveTheProcessCountNorMeet) {
  WorkloadConfig wc;
  wc.seq = 1024;
  wc.heads = 4;
  wc.kv_heads = 2;
  wc.dim = 64;
  wc.seed = 3;
  const Workload w = make_workload(wc);
  // topk=4 of 16 blocks: selects, so the estimate (its sgemm) runs.
  const auto mean_pool = make_method("mean_pool:topk=4");
  const auto vertical_slash = make_method("vertical_slash");
  AttnOptions one, three;
  one.threads = 1;
  three.threads = 3;
  Tensor alone_a(DType::f32, 4, 1024, 64), alone_b(DType::f32, 4, 1024, 64);
  mean_pool->run(w.q, w.k, w.v, alone_a, one);
  vertical_slash->run(w.q, w.k, w.v, alone_b, three);
  const int count = openblas_get_num_threads();
  std::atomic<bool> done{false};
  std::atomic<int> moved{0};
  std::thread watcher([&] {
    while (!done)
      if (openblas_get_num_threads() != count) moved = openblas_get_num_threads();
  });
  std::atomic<int> differ{0};
  Together t;
  t.add(6, [&] {
    Tensor out(DType::f32, 4, 1024, 64);
    mean_pool->run(w.q, w.k, w.v, out, one);
    if (!same_bits(out, alone_a)) ++differ;
  });
  t.add(6, [&] {
    Tensor out(DType::f32, 4, 1024, 64);
    vertical_slash->run(w.q, w.k, w.v, out, three);
    if (!same_bits(out, alone_b)) ++differ;
  });
  t.join();
  done = true;
  watcher.join();
  EXPECT_EQ(moved.load(), 0) << "OpenBLAS's thread count moved to " << moved << " from " << count;
  EXPECT_EQ(openblas_get_num_threads(), count);
  EXPECT_EQ(differ.load(), 0);
}

// Two benches of one bf16 problem forced onto the two operand paths, and a third thread's
// attention with default options, all at once: each computes what it computes alone, and each
// bench reports the path it took. (The path was a process-wide switch the bench set: the last
// bench to start decided every thread's kernels.)
TEST(Bf16Path, BenchesAndCallsOnOtherThreadsKeepTheirOwnPath) {
  WorkloadConfig wc;
  wc.seq = 512;
  wc.heads = 2;
  wc.dim = 64;
  wc.dtype = DType::bf16;
  wc.seed = 4;
  const Workload w = make_workload(wc);
  AttnOptions opt;
  opt.threads = 1;
  const BenchMethods methods = make_bench_methods({"blasst:lambda=1e-3"}, {}, true);
  auto bench = [&](const std::string& path) {
    BenchOptions o;
    o.repeat = 1;
    o.bf16_path = path;
    return run_bench(methods, w.q, w.k, w.v, opt, o);
  };
  auto attention = [&] {
    Tensor out(DType::f32, 2, 512, 64);
    attention_dense(w.q, w.k, w.v, out, opt);
    return out;
  };
  // What each computes alone: the metrics judge the bits of each method's output.
  auto outcome = [](const BenchRun& r) {
    std::string s = r.operands.operands;
    for (const BenchResult& x : r.results)
      s += " " + x.spec + ":" + std::to_string(x.error.max_abs) + "," +
           std::to_string(x.error.rel_l2) + "," + std::to_string(x.recall.mean);
    return s;
  };
  // Without AVX512_BF16 (a Zen 3, say) "dot" is refused by name; "auto" then widens, so the
  // two concurrent benches still take the two ways a path is chosen.
  const bool has_dot = kernels::bf16_dot_supported();
  if (!has_dot) {
    EXPECT_THROW(bench("dot"), Error);
  }
  const std::string first = has_dot ? "dot" : "auto";
  const std::string first_alone = outcome(bench(first)), widen_alone = outcome(bench("widen"));
  const Tensor att_alone = attention();
  if (has_dot) {
    EXPECT_NE(first_alone, widen_alone);  // the two paths compute different bits
    EXPECT_EQ(first_alone.rfind("bf16-dot", 0), 0u) << first_alone;
  } else {
    EXPECT_EQ(first_alone, widen_alone);  // both widen
  }
  EXPECT_EQ(widen_alone.rfind("f32", 0), 0u) << widen_alone;
  std::string first_then, widen_then;
  std::atomic<int> differ{0};
  std::atomic<bool> benches_done{false};
  std::thread a([&] { first_then = outcome(bench(first)); });
  std::thread b([&] { widen_then = outcome(bench("widen")); });
  std::thread c([&] {
    do {  // throughout both benches
      if (!same_bits(attention(), att_alone)) ++differ;
    } while (!benches_done);
  });
  a.join();
  b.join();
  benches_done = true;
  c.join();
  EXPECT_EQ(first_then, first_alone);
  EXPECT_EQ(widen_then, widen_alone);
  EXPECT_EQ(differ.load(), 0);
  EXPECT_TRUE(same_bits(attention(), att_alone));  // and nothing was left changed
}

}  // namespace
}  // namespace spattn
