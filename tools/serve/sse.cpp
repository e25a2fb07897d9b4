#include "sse.hpp"

namespace spattn::serve {

bool SseWriter::put(const std::string& s) {
  std::lock_guard<std::mutex> lock(m_);
  if (gone_) return false;
  if (!write_(s.data(), s.size())) {
    gone_ = true;
    return false;
  }
  last_ = Clock::now();
  return true;
}

bool SseWriter::keep_alive(std::chrono::milliseconds quiet) {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (gone_) return false;
    if (Clock::now() - last_ < quiet) return true;
  }
  return comment("keep-alive");
}

}  // namespace spattn::serve
