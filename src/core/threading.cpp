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

}  // namespace spattn
