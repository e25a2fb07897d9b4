// The process's thread pool (src/core/thread_pool.hpp) and parallel_for over it: every item
// once, errors rethrown on the caller, nested and concurrent calls, and no thread started per
// call (the same workers serve every call).
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/thread_pool.hpp"
#include "core/threading.hpp"

namespace spattn {
namespace {

TEST(ThreadPool, EveryItemOnceOnEveryThreadCount) {
  for (int threads : {1, 2, 3, 8})
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(1000)}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> bad_tid{0};
      parallel_for(n, threads, [&](int64_t i, int tid) {
        hits[size_t(i)].fetch_add(1);
        if (tid < 0 || tid >= threads) bad_tid.fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[size_t(i)].load(), 1) << i;
      EXPECT_EQ(bad_tid.load(), 0);
    }
}

TEST(ThreadPool, TheSameWorkersServeEveryCall) {
  // Kernel thread ids grow with every thread the process starts (unlike pthread ids, which
  // are reused), so threads started per call would show new ids each time.
  auto ids = [] {
    std::set<long> s;
    std::mutex mu;
    parallel_for(64, 2, [&](int64_t, int) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::lock_guard<std::mutex> lock(mu);
      s.insert(long(syscall(SYS_gettid)));
    });
    return s;
  };
  std::set<long> all;
  for (int r = 0; r < 5; ++r)
    for (long id : ids()) all.insert(id);
  EXPECT_GE(all.size(), 1u);
  EXPECT_LE(all.size(), 2u);  // the caller and one worker, in every call
}

TEST(ThreadPool, ErrorsReachTheCaller) {
  EXPECT_THROW(parallel_for(100, 2,
                            [](int64_t i, int) {
                              if (i == 37) throw std::runtime_error("item 37");
                            }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int64_t> sum{0};
  parallel_for(100, 2, [&](int64_t i, int) { sum.fetch_add(i); });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPool, NestedCallsRunOnTheCallingWorker) {
  std::atomic<int64_t> sum{0};
  parallel_for(8, 2, [&](int64_t i, int) {
    EXPECT_TRUE(ThreadPool::inside());
    parallel_for(10, 2, [&](int64_t j, int tid) {
      EXPECT_EQ(tid, 0);  // inline: this worker alone
      sum.fetch_add(i * 10 + j);
    });
  });
  EXPECT_EQ(sum.load(), 79 * 80 / 2);
  EXPECT_FALSE(ThreadPool::inside());
}

TEST(ThreadPool, CallsFromSeveralThreadsTakeTurns) {
  constexpr int kCallers = 3, kCalls = 20;
  std::vector<int64_t> sums(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&, c] {
      for (int r = 0; r < kCalls; ++r) {
        std::atomic<int64_t> s{0};
        parallel_for(1000, 2, [&](int64_t i, int) { s.fetch_add(i + c); });
        sums[size_t(c)] += s.load();
      }
    });
  for (auto& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c)
    EXPECT_EQ(sums[size_t(c)], int64_t(kCalls) * (999 * 1000 / 2 + 1000 * c));
}

}  // namespace
}  // namespace spattn
