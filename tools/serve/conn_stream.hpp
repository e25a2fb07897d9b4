// One accepted HTTP connection as httplib reads and writes it, with what httplib's own socket
// stream lacks: a read deadline per request that a trickle of bytes does not extend (httplib's
// read timeout restarts with every byte, so one byte a second held a worker for ever), and a
// test of whether the client is still there (a FIN or a reset), so a generation whose client
// left stops at its next step and frees its place.
#pragma once
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace spattn::serve {

class ConnStream final : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;
  ConnStream(int fd, int read_timeout_s, int write_timeout_s);

  // Reads fail once `d` has passed, however the bytes trickle in.
  void set_deadline(Clock::time_point d) { deadline_ = d; }
  // Whether a request's first byte arrives within `s` seconds (bytes already buffered count).
  bool wait_readable(int s);
  // The client closed its side or the connection broke (a half-close counts: nothing more
  // will come, and llama-server's clients never half-close while waiting for an answer).
  bool peer_gone() const;

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

 private:
  // poll() for `events` until the earlier of `timeout_ms` and the deadline (reads only).
  bool wait(short events, int timeout_ms, bool deadline) const;

  int fd_;
  int read_timeout_ms_, write_timeout_ms_;
  std::atomic<Clock::time_point> deadline_{Clock::time_point::max()};
  char buf_[4096];  // httplib reads headers a byte at a time
  size_t off_ = 0, len_ = 0;
};

}  // namespace spattn::serve
