// Server-sent events over one HTTP response: `data: JSON` events, `data: [DONE]` at the end,
// and comment lines as keep-alives. Two threads write to one stream (the generation and the
// keep-alive ticker), so writes are serialized here; the first failed write marks the client
// gone, and every later write is skipped.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>

#include "openai.hpp"

namespace spattn::serve {

class SseWriter {
 public:
  using Write = std::function<bool(const char* data, size_t n)>;
  explicit SseWriter(Write write) : write_(std::move(write)) {}

  bool event(const json& j) { return put("data: " + dump(j) + "\n\n"); }
  bool done() { return put("data: [DONE]\n\n"); }
  bool comment(const std::string& text) { return put(": " + text + "\n\n"); }
  // A keep-alive comment when nothing was written for `quiet`.
  bool keep_alive(std::chrono::milliseconds quiet);
  bool gone() const { return gone_.load(); }

 private:
  bool put(const std::string& s);
  using Clock = std::chrono::steady_clock;
  Write write_;
  std::mutex m_;
  Clock::time_point last_ = Clock::now();
  std::atomic<bool> gone_{false};
};

}  // namespace spattn::serve
