// cpp-httplib's server (Debian's 0.11.4) with the connection handling `spattn serve` needs to
// be safe to expose, kept under httplib's own request parser and routing:
// - each request's headers must arrive within a deadline from its first byte and its body
//   within another (ConnStream), however slowly the bytes trickle;
// - a connection that is idle or still sending its headers gives its worker up to a new one
//   when every worker is taken (the oldest first), so unauthenticated, unfinished requests
//   never hold all the workers (slowloris); connections per client address are capped;
// - the listening socket is bound without SO_REUSEPORT (httplib's default sets it, so a second
//   server on the same port started and took half the requests);
// - a handler can ask whether its client is still there and have the connection closed after
//   its answer (a refused body is left unread);
// - shutdown() closes idle connections at once and, at its deadline, every other one.
#pragma once
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace spattn::serve {

struct HttpLimits {
  int read_timeout_s = 600;  // --timeout: one read or write waiting for the socket
  int write_timeout_s = 600;
  int header_timeout_s = 10;    // --header-timeout: a request's headers, from its first byte
  int body_timeout_s = 60;      // --body-timeout: its body, from the end of its headers
  int keep_alive_s = 5;         // an idle keep-alive connection is closed after this
  int max_conns_per_addr = 64;  // --conns-per-ip: open connections from one client address
  size_t workers = 16;
  std::function<void()> worker_started;  // tests only: called first on each worker's thread
};

class ConnStream;

// The connection the calling thread serves, for handlers and content providers.
class Conn {
 public:
  virtual ~Conn() = default;
  virtual bool gone() const = 0;    // the client closed or reset the connection
  virtual void close_after() = 0;   // close the connection after this answer
  virtual void headers_done() = 0;  // the request's headers are read: the body deadline runs
};
// Null outside a request (a test calling a handler directly).
Conn* current_conn();

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(const HttpLimits& l);
  ~HttpServer() override;
  // Serves one accepted socket on the calling thread, and closes it (the fuzz target's
  // socketpair; the accept loop's workers).
  void serve_socket(int fd);
  // Stops accepting, closes idle and unfinished connections now and every other one after
  // `deadline` (their handlers see their client gone).
  void shutdown(std::chrono::milliseconds deadline);
  // Closes every connection now (the deadline passed).
  void close_all();
  // Binds host:port without SO_REUSEPORT; the port (the one picked when port is 0), or -1.
  int bind_exclusive(const std::string& host, int port);

 private:
  struct Entry;
  bool process_and_close_socket(socket_t sock) override;
  // `waiting` connections want a worker: close the oldest idle or unfinished connections until
  // as many are closing.
  void evict(size_t waiting);
  void rebalance();  // evict() for what the pool has queued
  void linger(ConnStream& s);

  HttpLimits limits_;
  std::mutex mu_;
  std::map<int, Entry*> conns_;  // by fd
  std::map<std::string, int> per_addr_;
  bool draining_ = false;
  std::thread closer_;  // closes what is left at the shutdown deadline
  std::condition_variable closer_cv_;
  bool destroying_ = false;
  class Pool;
  Pool* pool_ = nullptr;  // while listening
};

}  // namespace spattn::serve
