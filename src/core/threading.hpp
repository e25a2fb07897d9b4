// Work splitting over a fixed number of threads of the process pool (core/thread_pool.hpp).
// Each work item is run by exactly one thread, so results never depend on scheduling:
// determinism comes from the items, not the order.
#pragma once
#include <cstdint>
#include <functional>

namespace spattn {

int resolve_threads(int requested);  // 0 -> hardware concurrency; throws Error if < 0

// Runs fn(item, thread_index) for item in [0, n) on `threads` threads, items claimed in
// increasing order from a shared counter (callers order items longest first). Exceptions
// thrown by fn are rethrown on the calling thread (the first one).
void parallel_for(int64_t n, int threads, const std::function<void(int64_t, int)>& fn);

}  // namespace spattn
