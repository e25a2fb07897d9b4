// `spattn serve`: llama-server's OpenAI-compatible HTTP server over spattn's runner, with
// llama-server's flags where they exist (-m, --host, --port, -c, -np, -t, --api-key,
// --timeout, --metrics, --chat-template) and spattn's --attn as every request's default prefill attention (a request may
// name another: "spattn": {"attn": SPEC}). The server itself lives in tools/serve/.
#include <fmt/format.h>

#include <csignal>

#include "runner.hpp"
#include "serve/server.hpp"

namespace spattn::cli {
namespace {

serve::Server* g_server = nullptr;

void run_serve(const serve::ServeOptions& o) {
  o.validate();  // bad flags fail before the model loads
  LoadedModel lm = load_model_and_tokenizer(o.r.model);
  serve::Server server(o, lm);
  const int port = server.bind();
  g_server = &server;
  // Ctrl-C and SIGTERM end the server cleanly (httplib's stop is safe from here: it shuts
  // the listening socket down).
  for (int sig : {SIGINT, SIGTERM})
    std::signal(sig, [](int) {
      if (g_server) g_server->stop();
    });
  fmt::print(stderr, "spattn serve: {} loaded in {:.0f} ms; context {}, attention {}\n",
             o.r.model, lm.load_ms, o.r.n_ctx, o.r.attn);
  fmt::print(stderr, "spattn serve: listening on http://{}:{}\n", o.host, port);
  server.listen();
  g_server = nullptr;
}

}  // namespace

void add_serve_command(CLI::App& root) {
  auto o = std::make_shared<serve::ServeOptions>();
  CLI::App* app = root.add_subcommand(
      "serve", "an OpenAI-compatible HTTP server (llama-server's routes) over a GGUF model");
  add_runner_options(*app, o->r);
  app->remove_option(app->get_option("--json"));
  app->add_option("--host", o->host, "address to listen on")->capture_default_str();
  app->add_option("--port", o->port, "port to listen on (0: any free port)")->capture_default_str();
  app->add_option("--parallel", o->slots, "-np: slots (requests served at once, each its own KV cache)")
      ->capture_default_str();
  app->add_option("--attn", o->r.attn,
                  "default prefill attention: dense, chunked_h2o, or a method spec")
      ->capture_default_str();
  app->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' on requests");
  app->add_flag("--metrics", o->metrics, "serve GET /metrics (Prometheus text format)");
  app->add_option("--chat-template", o->chat_template,
                  "chat template by llama.cpp's name (chatml, llama3, phi3, gemma, mistral-v1, "
                  "mistral-v3, mistral-v3-tekken, mistral-v7); default: the model's");
  app->add_option("--timeout", o->timeout_s, "socket read / write timeout in seconds")
      ->capture_default_str();
  app->add_option("--queue", o->max_queue,
                  "requests that may wait for a slot; more are answered 503")
      ->capture_default_str();
  app->add_option("--alias", o->alias, "the model's id in /v1/models (default: the file name)");
  app->callback([o] { run_serve(*o); });
}

}  // namespace spattn::cli
