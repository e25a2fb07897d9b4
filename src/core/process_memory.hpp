// The process's resident memory, as the kernel counts it (what `time -v` and llama.cpp's
// memory reports read): pages of ours and mapped file pages that are resident.
#pragma once
#include <cstddef>

namespace spattn {

size_t peak_rss_bytes();     // the most resident memory so far (getrusage ru_maxrss)
size_t current_rss_bytes();  // resident now (/proc/self/statm), 0 where unavailable

}  // namespace spattn
