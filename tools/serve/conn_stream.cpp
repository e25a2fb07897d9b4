#include "conn_stream.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace spattn::serve {

namespace {

void address(const sockaddr_storage& a, std::string& ip, int& port) {
  char s[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, s, sizeof s);
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &v6->sin6_addr, s, sizeof s);
    port = ntohs(v6->sin6_port);
  } else {
    port = 0;  // a socketpair (the fuzz target's)
  }
  ip = s;
}

}  // namespace

ConnStream::ConnStream(int fd, int read_timeout_s, int write_timeout_s)
    : fd_(fd), read_timeout_ms_(read_timeout_s * 1000), write_timeout_ms_(write_timeout_s * 1000) {}

bool ConnStream::wait(short events, int timeout_ms, bool deadline) const {
  for (;;) {
    int ms = timeout_ms;
    if (deadline) {
      const auto d = deadline_.load();
      if (d != Clock::time_point::max()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now());
        if (left.count() <= 0) return false;
        ms = int(std::min<int64_t>(ms, left.count()));
      }
    }
    pollfd p{fd_, events, 0};
    const int r = ::poll(&p, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    return r > 0 && (p.revents & (events | POLLHUP | POLLERR));
  }
}

bool ConnStream::wait_readable(int s) { return off_ < len_ || wait(POLLIN, s * 1000, false); }

bool ConnStream::peer_gone() const {
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) return true;
  char c;
  const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

bool ConnStream::is_readable() const { return off_ < len_ || wait(POLLIN, read_timeout_ms_, true); }

bool ConnStream::is_writable() const {
  return wait(POLLOUT, write_timeout_ms_, false) && !peer_gone();
}

ssize_t ConnStream::read(char* ptr, size_t size) {
  if (off_ == len_) {
    if (!wait(POLLIN, read_timeout_ms_, true)) return -1;
    ssize_t n;
    do n = ::recv(fd_, buf_, sizeof buf_, 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0) return n;
    off_ = 0;
    len_ = size_t(n);
  }
  const size_t n = std::min(size, len_ - off_);
  std::memcpy(ptr, buf_ + off_, n);
  off_ += n;
  return ssize_t(n);
}

ssize_t ConnStream::write(const char* ptr, size_t size) {
  // A send to a client that has closed succeeds until its reset comes back: ask first, as
  // httplib's own socket stream does, so a stream's next event finds its client gone.
  if (!is_writable()) return -1;
  ssize_t n;
  do n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n;
}

void ConnStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &n) != 0) a.ss_family = AF_UNSPEC;
  address(a, ip, port);
}

void ConnStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n) != 0) a.ss_family = AF_UNSPEC;
  address(a, ip, port);
}

}  // namespace spattn::serve
