// `spattn serve`: llama-server's OpenAI-compatible HTTP server over spattn's runner, with
// llama-server's flags where they exist (-m, --host, --port, -c, -np, -t, --api-key,
// --timeout, --metrics, --chat-template) and spattn's --attn as every request's default prefill attention (a request may
// name another: "spattn": {"attn": SPEC}). The server itself lives in tools/serve/; its flags
// and limits are in docs/server.md.
#include <fmt/format.h>

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <thread>

#include "runner.hpp"
#include "spattn/error.hpp"
#include "serve/server.hpp"

namespace spattn::cli {
namespace {

// Signals reach a thread through a pipe (a handler may only do async-signal-safe things);
// the second signal exits at once, as llama-server's second Ctrl-C does.
std::atomic<int> g_signals{0};
int g_wake[2] = {-1, -1};

void on_signal(int sig) {
  if (g_signals.fetch_add(1) >= 1) _exit(128 + sig);
  const char c = 1;
  (void)!::write(g_wake[1], &c, 1);
}

void run_serve(const serve::ServeOptions& o) {
  o.validate();  // bad flags fail before the model loads
  LoadedModel lm = load_model_and_tokenizer(o.r);
  serve::ServeOptions own = o;  // --attn's auto as the model resolves it
  resolve_model_attention(own.r, lm.model.config());
  serve::Server server(own, lm);
  int port = 0;
  try {
    port = server.bind();
  } catch (const Error& e) {
    // A port in use ends the command with exit code 1 (as llama-server's failed bind), not
    // the bad-input code 2: the flags were fine, the address was not free.
    fmt::print(stderr, "spattn serve: error: {}\n", e.what());
    throw CLI::RuntimeError(1);
  }
  if (::pipe(g_wake) != 0) throw CLI::RuntimeError(1);
  std::thread waiter([&] {
    char c = 0;
    if (::read(g_wake[0], &c, 1) == 1 && c == 1) {
      fmt::print(stderr,
                 "spattn serve: stopping; in-flight work has {} s (--shutdown-timeout), "
                 "a second signal exits now\n",
                 o.shutdown_timeout_s);
      server.stop();
    }
  });
  for (int sig : {SIGINT, SIGTERM}) std::signal(sig, on_signal);
  fmt::print(stderr, "spattn serve: {} loaded in {:.0f} ms; context {}, attention {}\n", o.r.model,
             lm.load_ms, o.r.n_ctx, own.r.attn);
  fmt::print(stderr, "spattn serve: listening on http://{}:{}\n", o.host, port);
  server.listen();
  const char done = 0;  // wakes the waiter when listen ended otherwise
  (void)!::write(g_wake[1], &done, 1);
  waiter.join();
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
  app->add_option("--parallel", o->slots,
                  "-np: slots (requests served at once, each its own KV cache)")
      ->capture_default_str();
  app->add_option("--attn", o->r.attn,
                  "default prefill attention: auto (the model's own: dsa for deepseek32, else "
                  "dense), dense, chunked_h2o, dsa, or a method spec")
      ->capture_default_str();
  app->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' on requests");
  app->add_flag("--metrics", o->metrics, "serve GET /metrics (Prometheus text format)");
  app->add_option("--chat-template", o->chat_template,
                  "chat template by llama.cpp's name (chatml, llama3, phi3, gemma, mistral-v1, "
                  "mistral-v3, mistral-v3-tekken, mistral-v7); default: the model's");
  app->add_option("--timeout", o->timeout_s, "socket read / write timeout in seconds")
      ->capture_default_str();
  app->add_option("--header-timeout", o->header_timeout_s,
                  "seconds a request's headers may take from its first byte")
      ->capture_default_str();
  app->add_option("--body-timeout", o->body_timeout_s,
                  "seconds a request's body may take after its headers")
      ->capture_default_str();
  app->add_option("--conns-per-ip", o->conns_per_addr,
                  "open connections one client address may hold")
      ->capture_default_str();
  app->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                  "seconds in-flight work may take after SIGTERM/SIGINT (a second exits now)")
      ->capture_default_str();
  app->add_option("--allowed-hosts", o->allowed_hosts,
                  "Host names served beyond loopback's when bound to loopback ('*': any)")
      ->delimiter(',');
  app->add_option("--cors", o->cors,
                  "origins whose web pages may call the server (CORS; '*': any); default none")
      ->delimiter(',');
  app->add_option("--plans-dir", o->plans_dir,
                  "directory of MMInference plans and BLASST calibrations, read at start; "
                  "requests name them (plan=NAME, calib=NAME)");
  app->add_option("--queue", o->max_queue,
                  "requests that may wait for a slot; more are answered 503")
      ->capture_default_str();
  app->add_option("--alias", o->alias, "the model's id in /v1/models (default: the file name)");
  app->callback([o] { run_serve(*o); });
}

}  // namespace spattn::cli
