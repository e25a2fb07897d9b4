#include "core/threading.hpp"

#include "core/thread_pool.hpp"

#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "spattn/error.hpp"

namespace spattn {

int resolve_threads(int requested) {
  SPATTN_CHECK(requested >= 0, "threads must be >= 0 (0 = all cores), got ", requested);
  if (requested > 0) return requested;
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? int(hc) : 1;
}

void parallel_for(int64_t n, int threads, const std::function<void(int64_t, int)>& fn) {
  if (n <= 0) return;
  int t = int(std::min<int64_t>(threads < 1 ? 1 : threads, n));
  if (t == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  // On the process's persistent pool (no thread started per call). Inside another pool call
  // the pool runs the body once on this thread, which then claims every item itself.
  std::atomic<int64_t> next{0};
  std::exception_ptr first_error;
  std::mutex err_mu;
  ThreadPool::get().run(t, [&](int tid, int) {
    for (;;) {
      int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      try {
        fn(i, tid);
      } catch (...) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (!first_error) first_error = std::current_exception();
        next.store(n);
      }
    }
  });
  if (first_error) std::rethrow_exception(first_error);
}

int threads_for_bytes(size_t bytes, int threads, size_t from) {
  // A second thread halves the work and adds a fixed cost, about 7 us for a layer's graph on 2
  // Zen 5 cores and 1.3 us for a pool call. One thread reads about 18 KB of a layer's weights
  // a microsecond, f32 or q4_0, so a graph's split pays from about 250 KB: stories260K's
  // decode graphs (0.18 MB of f32 a layer, 0.28 MB the last with the output head) ran as fast
  // on two threads as on one at best, slower when the host took a core, and code-tiny-8k's
  // Q4_0 layer (0.88 MB) at 3,369 tokens/s on two against 2,762 on one: graphs split from
  // kGraphParallelBytes, twice the crossover. One decode query over a code-tiny cache took
  // 4.4 us on one thread and 5.0 on two at 256 keys (133 KB of f16), 7.9 and 6.4 at 512 (266
  // KB): kAttentionParallelBytes.
  return bytes < from ? 1 : threads;
}

}  // namespace spattn
