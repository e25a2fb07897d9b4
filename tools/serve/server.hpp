// `spattn serve`'s HTTP server: llama-server's routes over one loaded model (OpenAI's
// /v1/completions, /v1/chat/completions, /v1/models; llama-server's /health, /props,
// /tokenize, /detokenize, /metrics with --metrics), generation through -np Slots (slot_pool.hpp,
// their steps interleaved by turn.hpp) with a bounded queue of waiting requests (503 beyond it). Tests start it in-process on an ephemeral port.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "../runner.hpp"

namespace spattn::serve {

struct ServeOptions {
  cli::RunnerOptions r;          // -m, -c, -b, -ub, -t, --attn (the default), -ctk, -ctv ...
  std::string host = "127.0.0.1";
  int port = 8080;               // 0: any free port (bind() says which)
  std::string api_key;           // --api-key: requests need "Authorization: Bearer KEY"
  int timeout_s = 600;           // --timeout: socket read / write timeout
  int slots = 1;                 // -np: slots, each its own KV cache, served interleaved
  int64_t max_queue = 8;         // requests that may wait for a slot; more get 503
  size_t max_body = 8u << 20;    // bytes; a larger body gets 400
  std::string alias;             // the model's id in /v1/models (the file name by default)
  bool metrics = false;          // --metrics: GET /metrics (Prometheus text), as llama-server
  std::string chat_template;     // --chat-template NAME; "": the model's, recognised
  // For tests only: called with "slot" once a generation holds the slot and with "progress"
  // after each streamed progress event, so a test can hold the slot or leave mid-prefill at a
  // point it knows.
  std::function<void(const std::string& event)> test_hook;
  void validate() const;         // Error naming the flag
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
  void stop();
  bool running() const;  // listening (after listen() has started)

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

}  // namespace spattn::serve
