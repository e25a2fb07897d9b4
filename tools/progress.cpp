#include <unistd.h>

#include <cstdio>
#include <utility>

#include "cli.hpp"

namespace spattn::cli {

Progress::Progress(std::string tag, double delay_s)
    : start_(Clock::now()),
      last_print_(start_),
      tag_(std::move(tag)),
      delay_s_(delay_s),
      tty_(isatty(STDERR_FILENO)) {}

void Progress::update(const std::string& status) {
  const auto now = Clock::now();
  auto since = [&](Clock::time_point t) { return std::chrono::duration<double>(now - t).count(); };
  if (since(start_) < delay_s_) return;
  if (tty_) {
    // \r and erase-to-end-of-line: one line redrawn in place.
    std::fprintf(stderr, "\r[%s] %s\033[K", tag_.c_str(), status.c_str());
    drawn_ = true;
  } else if (last_print_ == start_ || since(last_print_) >= delay_s_) {
    std::fprintf(stderr, "[%s] %s\n", tag_.c_str(), status.c_str());
    last_print_ = now;
  }
  std::fflush(stderr);
}

void Progress::done() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace spattn::cli
