#include "http_server.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "conn_stream.hpp"

namespace spattn::serve {

using Clock = std::chrono::steady_clock;

struct HttpServer::Entry final : Conn {
  enum class Phase { idle, headers, busy };
  HttpServer* owner = nullptr;
  ConnStream* stream = nullptr;
  int fd = -1;
  std::string addr;
  Phase phase = Phase::idle;
  Clock::time_point since;
  // Set under the server's lock, read without it by gone() on a handler's thread.
  std::atomic<bool> evicted{false};
  bool close = false;  // this connection's own thread only

  bool gone() const override { return evicted || stream->peer_gone(); }
  void close_after() override { close = true; }
  void headers_done() override {
    std::lock_guard<std::mutex> l(owner->mu_);
    phase = Phase::busy;
    stream->set_deadline(Clock::now() + std::chrono::seconds(owner->limits_.body_timeout_s));
  }
};

namespace {
thread_local Conn* tl_conn = nullptr;
}  // namespace

Conn* current_conn() { return tl_conn; }

// httplib's ThreadPool, and connections waiting for a worker when all are taken ask the
// server to free as many (evict).
class HttpServer::Pool final : public httplib::TaskQueue {
 public:
  // Every worker counts as idle from here, not from when its thread first runs: httplib
  // accepts as soon as it has made the pool, and a connection arriving before the threads run
  // (a loaded machine) is one a worker will take, not a backlog to evict others for.
  Pool(HttpServer& owner, size_t n) : owner_(owner), idle_(n) {
    for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { work(); });
    std::lock_guard<std::mutex> l(owner_.mu_);
    owner_.pool_ = this;
  }
  ~Pool() override {
    std::lock_guard<std::mutex> l(owner_.mu_);
    if (owner_.pool_ == this) owner_.pool_ = nullptr;
  }
  void enqueue(std::function<void()> fn) override {
    size_t waiting;
    {
      std::lock_guard<std::mutex> l(mu_);
      jobs_.push_back(std::move(fn));
      waiting = backlog_locked();
    }
    cv_.notify_one();
    owner_.evict(waiting);
  }
  // Queued connections no idle worker will take.
  size_t backlog() {
    std::lock_guard<std::mutex> l(mu_);
    return backlog_locked();
  }
  void shutdown() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void work() {
    if (owner_.limits_.worker_started) owner_.limits_.worker_started();
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, nothing left
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      --idle_;
      l.unlock();
      fn();
      l.lock();
      ++idle_;
    }
  }
  size_t backlog_locked() const { return jobs_.size() > idle_ ? jobs_.size() - idle_ : 0; }
  HttpServer& owner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  size_t idle_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

HttpServer::HttpServer(const HttpLimits& l) : limits_(l) {
  new_task_queue = [this] { return new Pool(*this, limits_.workers); };
  set_read_timeout(l.read_timeout_s);
  set_write_timeout(l.write_timeout_s);
  set_keep_alive_timeout(l.keep_alive_s);
  // SO_REUSEADDR only (a restart may bind over connections in TIME_WAIT); httplib's default
  // adds SO_REUSEPORT, with which a second server binds the same port and the kernel splits
  // the requests between them.
  set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
}

HttpServer::~HttpServer() {
  {
    std::lock_guard<std::mutex> l(mu_);
    destroying_ = true;
  }
  closer_cv_.notify_all();
  if (closer_.joinable()) closer_.join();
}

int HttpServer::bind_exclusive(const std::string& host, int port) {
  if (port == 0) return bind_to_any_port(host);
  return bind_to_port(host, port) ? port : -1;
}

// One eviction per waiting connection, counting those evicted whose workers have not yet let
// go: one per arrival was not enough, since a worker freed takes the queue's head, and a queue
// of trickling sockets ahead of a real request then held it until their header deadlines.
void HttpServer::evict(size_t waiting) {
  if (waiting == 0) return;
  std::lock_guard<std::mutex> l(mu_);
  size_t freeing = 0;
  for (const auto& [fd, e] : conns_) freeing += e->evicted ? 1 : 0;
  while (freeing < waiting) {
    Entry* oldest = nullptr;
    for (auto& [fd, e] : conns_)
      if (!e->evicted && e->phase != Entry::Phase::busy && (!oldest || e->since < oldest->since))
        oldest = e;
    if (!oldest) return;
    oldest->evicted = true;
    ::shutdown(oldest->fd, SHUT_RDWR);
    ++freeing;
  }
}

void HttpServer::shutdown(std::chrono::milliseconds deadline) {
  {
    std::lock_guard<std::mutex> l(mu_);
    draining_ = true;
    for (auto& [fd, e] : conns_)
      if (e->phase != Entry::Phase::busy) {
        e->evicted = true;
        ::shutdown(fd, SHUT_RDWR);
      }
  }
  // The accept loop ends at stop(); listen() then joins the workers, which a closer below
  // frees at the deadline if their work has not ended by then.
  if (!closer_.joinable())
    closer_ = std::thread([this, deadline] {
      std::unique_lock<std::mutex> l(mu_);
      if (closer_cv_.wait_for(l, deadline, [&] { return destroying_; })) return;
      l.unlock();
      close_all();
    });
  stop();
}

void HttpServer::close_all() {
  std::lock_guard<std::mutex> l(mu_);
  draining_ = true;
  for (auto& [fd, e] : conns_) {
    e->evicted = true;
    ::shutdown(fd, SHUT_RDWR);
  }
}

// A connection closed with a body left unread would be reset, and a reset can discard the
// answer before the client reads it: stop writing, then drop what still comes, a bounded while.
void HttpServer::linger(ConnStream& s) {
  ::shutdown(s.socket(), SHUT_WR);
  s.set_deadline(Clock::now() + std::chrono::milliseconds(500));
  char buf[4096];
  for (size_t dropped = 0; dropped < (4u << 20);) {
    const ssize_t n = s.read(buf, sizeof buf);
    if (n <= 0) break;
    dropped += size_t(n);
  }
}

void HttpServer::rebalance() {
  Pool* pool;
  {
    std::lock_guard<std::mutex> l(mu_);
    pool = pool_;
  }
  if (pool) evict(pool->backlog());
}

void HttpServer::serve_socket(int fd) { process_and_close_socket(fd); }

bool HttpServer::process_and_close_socket(socket_t sock) {
  ConnStream s(sock, limits_.read_timeout_s, limits_.write_timeout_s);
  Entry e;
  e.owner = this;
  e.stream = &s;
  e.fd = sock;
  int port = 0;
  s.get_remote_ip_and_port(e.addr, port);
  e.since = Clock::now();
  bool admitted = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!draining_ && per_addr_[e.addr] < limits_.max_conns_per_addr) {
      ++per_addr_[e.addr];
      conns_[sock] = &e;
      admitted = true;
    }
  }
  // Taking this socket may have left others queued, and an eviction asked for before this
  // worker registered found nothing to evict: look again now that it can.
  if (admitted) rebalance();
  bool ok = false;
  if (!admitted) {
    static const char kBusy[] =
        "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
    (void)s.write(kBusy, sizeof kBusy - 1);
  } else {
    tl_conn = &e;
    for (int left = int(keep_alive_max_count_); left > 0; --left) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (draining_ || e.evicted) break;
        e.phase = Entry::Phase::idle;
        e.since = Clock::now();
      }
      if (!s.wait_readable(limits_.keep_alive_s)) break;
      bool last;
      {
        std::lock_guard<std::mutex> l(mu_);
        if (e.evicted) break;
        e.phase = Entry::Phase::headers;
        e.since = Clock::now();
        last = draining_ || left == 1;
      }
      s.set_deadline(Clock::now() + std::chrono::seconds(limits_.header_timeout_s));
      bool closed = false;
      ok = process_request(s, last, closed, nullptr);
      s.set_deadline(Clock::time_point::max());
      if (!ok || closed || e.close) break;
    }
    tl_conn = nullptr;
    if (e.close && !e.evicted) linger(s);
    std::lock_guard<std::mutex> l(mu_);
    conns_.erase(sock);
    if (--per_addr_[e.addr] == 0) per_addr_.erase(e.addr);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace spattn::serve
