// Work splitting over a fixed number of threads of the process pool (core/thread_pool.hpp).
// Each work item is run by exactly one thread, so results never depend on scheduling:
// determinism comes from the items, not the order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

namespace spattn {

int resolve_threads(int requested);  // 0 -> hardware concurrency; throws Error if < 0

// Runs fn(item, thread_index) for item in [0, n) on `threads` threads, items claimed in
// increasing order from a shared counter (callers order items longest first). Exceptions
// thrown by fn are rethrown on the calling thread (the first one).
void parallel_for(int64_t n, int threads, const std::function<void(int64_t, int)>& fn);

// The threads a pool call over `bytes` of data is worth: 1 below `from` bytes, where the
// call's fixed cost is more than the split saves; else `threads`. A model layer's graph costs a
// region start and a barrier per node, a decode attention one pool call (threading.cpp).
inline constexpr size_t kGraphParallelBytes = size_t(512) << 10;
inline constexpr size_t kAttentionParallelBytes = size_t(256) << 10;
int threads_for_bytes(size_t bytes, int threads, size_t from);

}  // namespace spattn
