// `spattn serve`'s HTTP server: llama-server's routes over one loaded model (OpenAI's
// /v1/completions, /v1/chat/completions, /v1/models; llama-server's /health, /props,
// /tokenize, /detokenize, /metrics with --metrics), generation through -np Slots (slot_pool.hpp,
// their steps interleaved by turn.hpp) with a bounded queue of waiting requests (503 beyond it).
// Safe to expose (docs/server.md): bodies bounded while read, requests never name a file, read
// deadlines and worker eviction against slow clients (http_server.hpp), Host/Origin/
// Content-Type checked (http_checks.hpp), a client gone cancels its work, and shutdown has a
// deadline. Tests start it in-process on an ephemeral port.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../runner.hpp"

namespace spattn::serve {

struct ServeOptions {
  cli::RunnerOptions r;  // -m, -c, -b, -ub, -t, --attn (the default), -ctk, -ctv ...
  std::string host = "127.0.0.1";
  int port = 8080;             // 0: any free port (bind() says which)
  std::string api_key;         // --api-key: requests need "Authorization: Bearer KEY"
  int timeout_s = 600;         // --timeout: socket read / write timeout
  int header_timeout_s = 10;   // --header-timeout: a request's headers, from its first byte
  int body_timeout_s = 60;     // --body-timeout: its body, from the end of its headers
  int conns_per_addr = 64;     // --conns-per-ip: open connections from one client address
  int shutdown_timeout_s = 5;  // --shutdown-timeout: in-flight work's time after a signal
  std::vector<std::string> allowed_hosts;  // --allowed-hosts: Host names beyond loopback's
  std::vector<std::string> cors;           // --cors: origins whose pages may call the server
  std::string plans_dir;                   // --plans-dir: plans and calibrations requests name
  int slots = 1;                           // -np: slots, each its own KV cache, served interleaved
  int64_t max_queue = 8;                   // requests that may wait for a slot; more get 503
  size_t max_body = 8u << 20;  // bytes, after any Content-Encoding; a larger body gets 400
  std::string alias;           // the model's id in /v1/models (the file name by default)
  bool metrics = false;        // --metrics: GET /metrics (Prometheus text), as llama-server
  std::string chat_template;   // --chat-template NAME; "": the model's, recognised
  // For tests only: called with "slot" once a generation holds the slot, with "progress"
  // after each prefill progress event (streamed or not) and with "step" after each decoded
  // token, so a test can hold the slot, slow the model or leave at a point it knows; and with
  // "worker" first on each HTTP worker's thread, so a test can start workers late.
  std::function<void(const std::string& event)> test_hook;
  void validate() const;  // Error naming the flag
};

class Server {
 public:
  // The model and tokenizer must outlive the server.
  Server(const ServeOptions& o, const cli::LoadedModel& m);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  // Binds host:port; returns the port (the one picked when port is 0). Throws Error when the
  // address cannot be bound.
  int bind();
  // Serves until stop() (from another thread or a signal handler's thread).
  void listen();
  // Stops accepting; in-flight work has --shutdown-timeout, then its connections are closed
  // (and its generations cancelled at their next step). listen() returns when all are done.
  void stop();
  bool running() const;  // listening (after listen() has started)

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

}  // namespace spattn::serve
