#include "core/threading.hpp"

#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

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
  std::atomic<int64_t> next{0};
  std::exception_ptr first_error;
  std::mutex err_mu;
  auto worker = [&](int tid) {
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
  };
  std::vector<std::thread> pool;
  pool.reserve(size_t(t - 1));
  for (int i = 1; i < t; ++i) pool.emplace_back(worker, i);
  worker(0);
  for (auto& th : pool) th.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace spattn
