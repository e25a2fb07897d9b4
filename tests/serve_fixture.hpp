// What the `spattn serve` tests share: stories260K.gguf loaded once, a server's options over
// it, and a server listening on its own thread on an ephemeral port for a test's lifetime.
#pragma once
#include <httplib.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "assets.hpp"
#include "runner.hpp"
#include "serve/server.hpp"

namespace spattn {
namespace {

const cli::LoadedModel* stories() {
  static std::unique_ptr<cli::LoadedModel> m;
  static std::once_flag once;
  cli::RunnerOptions r;
  r.model = test::model_file("stories260K.gguf");
  if (r.model.empty()) return nullptr;
  std::call_once(once,
                 [&] { m = std::make_unique<cli::LoadedModel>(cli::load_model_and_tokenizer(r)); });
  return m.get();
}

serve::ServeOptions options() {
  serve::ServeOptions o;
  o.r.model = test::model_file("stories260K.gguf");
  o.r.n_ctx = 512;
  o.port = 0;
  o.timeout_s = 20;
  return o;
}

// A server listening on its own thread for the test's lifetime.
struct Running {
  serve::Server server;
  int port = 0;
  std::thread thread;
  Running(const serve::ServeOptions& o, const cli::LoadedModel& m) : server(o, m) {
    port = server.bind();
    thread = std::thread([this] { server.listen(); });
    for (int i = 0; i < 1000 && !server.running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ~Running() {
    server.stop();
    thread.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(20);
    return c;
  }
};

#define NEED_STORIES()                       \
  const cli::LoadedModel* model = stories(); \
  if (!model) SPATTN_MISSING_ASSET("stories260K.gguf in " << test::models_dir())

}  // namespace
}  // namespace spattn
