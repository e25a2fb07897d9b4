#include "server.hpp"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "chat_prompt.hpp"
#include "metrics.hpp"
#include "openai.hpp"
#include "request.hpp"
#include "slot.hpp"
#include "slot_pool.hpp"
#include "turn.hpp"
#include "spattn/error.hpp"
#include "sse.hpp"

namespace spattn::serve {

void ServeOptions::validate() const {
  SPATTN_CHECK(port >= 0 && port <= 65535, "--port must be in [0, 65535], got ", port);
  SPATTN_CHECK(timeout_s >= 1, "--timeout must be >= 1 second, got ", timeout_s);
  SPATTN_CHECK(slots >= 1 && slots <= 64, "-np must be in [1, 64], got ", slots);
  SPATTN_CHECK(max_queue >= 0 && max_queue <= 1024, "--queue must be in [0, 1024], got ",
               max_queue);
  // Context parallelism needs every rank to run the same calls in lockstep: a request stream
  // read on one rank, sent to the others, slots and their prefix reuse (a prefill after decode,
  // which --cp does not continue) on every rank. Not built: refused by name rather than served
  // by one process as if --cp were not given.
  SPATTN_CHECK(r.cp == 1 && !r.cp_gather, "serve --cp ", r.cp, r.cp_gather ? " --cp-gather" : "",
               ": serve is not context-parallel (run and perplexity are); start it without --cp");
  cli::session_options(r, r.attn);  // --attn and the sizes, before the model loads
  pick_chat_template(chat_template, "");  // an unknown --chat-template name
}

namespace {

using Clock = std::chrono::steady_clock;

// A client that left: thrown from a prefill's progress callback, so the prefill rolls back.
struct ClientGone : std::exception {};

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(dump(j), "application/json; charset=utf-8");
}

void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& type, const std::string& param = "") {
  send_json(res, status, error_json(message, type, param));
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct Server::Impl {
  ServeOptions o;
  const cli::LoadedModel& m;
  std::string model_id;
  httplib::Server http;
  SlotPool slots;
  Turn turn;  // one step of work at a time over the slots (turn.hpp)
  mutable std::mutex admit_mutex;
  int64_t admitted = 0;  // requests running or waiting for the slot
  std::atomic<int64_t> next_id{0};
  Metrics metrics;
  std::optional<ChatTemplate> chat_template;  // none: the plain fallback

  Impl(const ServeOptions& opt, const cli::LoadedModel& lm)
      : o(opt), m(lm), slots(lm.model, lm.tokenizer, opt.r, opt.slots),
        chat_template(pick_chat_template(opt.chat_template, lm.chat_template)) {
    model_id = o.alias.empty() ? std::filesystem::path(o.r.model).filename().string() : o.alias;
    // A client that closes its socket must not end the process: writes then just fail.
    std::signal(SIGPIPE, SIG_IGN);
    // Enough workers for every admitted request plus a few for /health and friends, so a full
    // queue never starves the cheap routes.
    const size_t workers = size_t(o.slots + o.max_queue + 4);
    http.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
    http.set_read_timeout(o.timeout_s);
    http.set_write_timeout(o.timeout_s);
    http.set_payload_max_length(o.max_body);
    routes();
  }

  // The admission ticket of one generation request: released when the request is answered.
  struct Ticket {
    Impl* s;
    ~Ticket() {
      std::lock_guard<std::mutex> l(s->admit_mutex);
      --s->admitted;
    }
  };
  std::shared_ptr<Ticket> admit() {
    std::lock_guard<std::mutex> l(admit_mutex);
    if (admitted >= o.slots + o.max_queue)
      throw RequestError(503, "unavailable_error",
                         "the server is busy: every slot is in use and the queue is full");
    ++admitted;
    return std::shared_ptr<Ticket>(new Ticket{this});
  }

  template <class F>
  httplib::Server::Handler guarded(F f) {
    Metrics* metrics = &this->metrics;
    return [f, metrics](const httplib::Request& req, httplib::Response& res) {
      try {
        f(req, res);
        return;
      } catch (const RequestError& e) {
        send_error(res, e.status, e.what(), e.type, e.param);
      } catch (const Error& e) {
        send_error(res, 400, e.what(), "invalid_request_error");
      } catch (const std::bad_alloc&) {
        send_error(res, 500, "out of memory", "server_error");
      } catch (const std::exception& e) {
        send_error(res, 500, std::string("unexpected failure: ") + e.what(), "server_error");
      }
      metrics->error(res.status);
    };
  }

  void routes() {
    if (!o.api_key.empty())
      http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
        if (req.get_header_value("Authorization") == "Bearer " + o.api_key)
          return httplib::Server::HandlerResponse::Unhandled;
        send_error(res, 401, "invalid or missing API key (Authorization: Bearer KEY)",
                   "authentication_error");
        metrics.error(401);
        return httplib::Server::HandlerResponse::Handled;
      });
    // Errors httplib answers itself (no route, a body over the limit) get an error object too.
    http.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (res.status == 413)
        send_error(res, 400, "the request body is over the limit of " +
                                 std::to_string(o.max_body) + " bytes", "invalid_request_error");
      else if (res.status == 404)
        send_error(res, 404, "no such route", "not_found_error");
      else
        send_error(res, res.status, "request failed", "invalid_request_error");
      metrics.error(res.status);
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.Get("/health", guarded([](const httplib::Request&, httplib::Response& res) {
               send_json(res, 200, {{"status", "ok"}});
             }));
    for (const char* path : {"/v1/models", "/models"})
      http.Get(path, guarded([this](const httplib::Request&, httplib::Response& res) {
                 send_json(res, 200, models());
               }));
    http.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
               if (!o.metrics)
                 throw RequestError(501, "not_supported_error",
                                    "this server has no metrics: start it with --metrics");
               const int64_t admitted = in_flight(), processing = std::min<int64_t>(admitted, o.slots);
               res.set_content(metrics.render(processing, admitted - processing, o.r.n_ctx,
                                              slots.states()),
                               "text/plain; version=0.0.4; charset=utf-8");
             }));
    http.Get("/props", guarded([this](const httplib::Request&, httplib::Response& res) {
               send_json(res, 200, props());
             }));
    http.Post("/tokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
                tokenize(req, res);
              }));
    http.Post("/detokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
                const std::vector<int32_t> ids = parse_detokenize(req.body);
                check_ids(ids, "tokens");
                send_json(res, 200, {{"content", m.tokenizer.decode(ids)}});
              }));
    for (const char* path : {"/v1/completions", "/completions"})
      http.Post(path, guarded([this](const httplib::Request& req, httplib::Response& res) {
                  generate(req, res, false);
                }));
    for (const char* path : {"/v1/chat/completions", "/chat/completions"})
      http.Post(path, guarded([this](const httplib::Request& req, httplib::Response& res) {
                  generate(req, res, true);
                }));
  }

  json models() const {
    const model::Config& c = m.model.config();
    return {{"object", "list"},
            {"data", json::array({{{"id", model_id},
                                   {"object", "model"},
                                   {"created", unix_now()},
                                   {"owned_by", "spattn"},
                                   {"meta",
                                    {{"n_vocab", c.n_vocab},
                                     {"n_ctx_train", c.n_ctx_train},
                                     {"n_embd", c.n_embd},
                                     {"n_layer", c.n_layer},
                                     {"size", m.file_bytes}}}}})}};
  }

  int64_t in_flight() const {
    std::lock_guard<std::mutex> l(admit_mutex);
    return admitted;
  }

  json props() const {
    const cli::SamplingParams d = default_sampling();
    return {{"model_path", o.r.model},
            {"model_alias", model_id},
            {"total_slots", o.slots},
            {"default_generation_settings",
             {{"n_ctx", o.r.n_ctx},
              {"params",
               {{"temperature", d.temperature},
                {"top_k", d.top_k},
                {"top_p", d.top_p},
                {"n_predict", -1},
                {"cache_prompt", true}}}}},
            {"chat_template", chat_template ? chat_template_name(*chat_template) : kChatFallbackName},
            {"chat_template_note",
             chat_template ? (o.chat_template.empty() ? "recognised in the model's tokenizer.chat_template"
                                                      : "named by --chat-template")
                           : kChatFallbackDescription},
            {"spattn",
             {{"attn", o.r.attn},
              {"n_batch", o.r.n_batch},
              {"n_ubatch", o.r.n_ubatch},
              {"queue", o.max_queue},
              {"requests_in_flight", in_flight()},
              {"max_body_bytes", o.max_body},
              {"slots", slots_json()}}}};
  }

  // Each slot's state, as llama-server's /slots lists them.
  json slots_json() const {
    json a = json::array();
    for (const SlotState& s : slots.states())
      a.push_back({{"id", s.id},
                   {"state", s.busy ? "processing" : "idle"},
                   {"n_ctx", o.r.n_ctx},
                   {"kv_tokens", s.kv_tokens},
                   {"cached_tokens", s.cached_tokens},
                   {"requests", s.requests},
                   {"attn", s.attn}});
    return a;
  }

  void check_ids(const std::vector<int32_t>& ids, const char* param) const {
    for (int32_t id : ids)
      if (id >= m.tokenizer.n_vocab())
        bad_request("token id " + std::to_string(id) + " is outside the vocabulary of " +
                        std::to_string(m.tokenizer.n_vocab()),
                    param);
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    const TokenizeRequest t = parse_tokenize(req.body);
    const std::vector<int32_t> ids = m.tokenizer.encode(t.content, t.add_special, false);
    json tokens = json::array();
    for (int32_t id : ids)
      if (t.with_pieces)
        tokens.push_back({{"id", id}, {"piece", m.tokenizer.piece(id, true)}});
      else
        tokens.push_back(id);
    send_json(res, 200, {{"tokens", tokens}});
  }

  void generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    if (req.body.size() > o.max_body) bad_request("the request body is over the limit");
    const GenerateRequest g = parse_generate(req.body, chat);
    auto sr = std::make_shared<SlotRequest>();
    if (g.prompt_is_tokens)
      sr->tokens = g.prompt_tokens;
    else if (chat && chat_template)  // the template's control tokens are tokens, as llama-server
      sr->tokens = m.tokenizer.encode(apply_chat_template(*chat_template, g.messages, true),
                                      m.tokenizer.add_bos(), true);
    else
      sr->tokens = m.tokenizer.encode(chat ? render_chat(g.messages) : g.prompt);
    check_ids(sr->tokens, "prompt");
    if (sr->tokens.empty()) bad_request("the prompt has no tokens", chat ? "messages" : "prompt");
    if (int64_t(sr->tokens.size()) > o.r.n_ctx)
      bad_request("the prompt has " + std::to_string(sr->tokens.size()) +
                      " tokens, more than the context of " + std::to_string(o.r.n_ctx) +
                      " (-c)", chat ? "messages" : "prompt");
    sr->attn = g.attn.empty() ? o.r.attn : g.attn;
    try {
      cli::session_options(o.r, sr->attn);
    } catch (const Error& e) {
      bad_request(std::string("spattn.attn: ") + e.what(), "spattn.attn");
    }
    sr->sampling = g.sampling;
    if (!g.seed_given) sr->sampling.seed = std::random_device{}();
    sr->max_tokens = g.max_tokens;
    sr->stop = g.stop;
    sr->cache_prompt = g.cache_prompt;
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const std::string model = g.model.empty() ? model_id : g.model;
    const int64_t created = unix_now();
    std::shared_ptr<Ticket> ticket = admit();

    if (!g.stream) {
      SlotPool::Lease lease = slots.acquire(sr->tokens);
      if (o.test_hook) o.test_hook("slot");
      const SlotResult r = lease.slot().generate(*sr, {}, &turn);
      lease.release(&r);
      metrics.record(r.usage);
      send_json(res, 200, completion_json(id, created, model, chat, r.text, r.finish_reason, r.usage));
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, sr, id, model, created, chat, ticket](size_t, httplib::DataSink& sink) {
          stream(*sr, id, model, created, chat, sink);
          return true;
        });
  }

  // One streamed generation, written as it happens: keep-alive comments from a ticker thread
  // whenever nothing else was written for half a second (while queued, prefilling or
  // decoding), prefill progress after each piece, then the text, a last chunk with
  // finish_reason and usage, and [DONE]. A client gone stops the work at the next piece.
  void stream(const SlotRequest& sr, const std::string& id, const std::string& model,
              int64_t created, bool chat, httplib::DataSink& sink) {
    SseWriter w([&sink](const char* d, size_t n) { return sink.write(d, n); });
    std::mutex tm;
    std::condition_variable tcv;
    bool finished = false;
    std::thread ticker([&] {
      std::unique_lock<std::mutex> l(tm);
      while (!tcv.wait_for(l, std::chrono::milliseconds(250), [&] { return finished; }))
        w.keep_alive(std::chrono::milliseconds(500));
    });
    try {
      SlotPool::Lease lease = slots.acquire(sr.tokens);
      if (o.test_hook) o.test_hook("slot");
      if (!w.gone()) {
        const auto t0 = Clock::now();
        bool first = true;
        if (chat) {
          w.event(chunk_json(id, created, model, true, "", true, "", nullptr));
          first = false;
        }
        SlotEvents ev;
        ev.progress = [&](int64_t cached, int64_t done, int64_t total) {
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          w.event(progress_json(id, created, model, chat, cached + total, cached, cached + done, ms));
          if (o.test_hook) o.test_hook("progress");
          if (w.gone()) throw ClientGone();
        };
        ev.text = [&](const std::string& text) {
          w.event(chunk_json(id, created, model, chat, text, first, "", nullptr));
          first = false;
        };
        ev.cancelled = [&] { return w.gone(); };
        const SlotResult r = lease.slot().generate(sr, ev, &turn);
        lease.release(&r);
        if (!r.cancelled) {
          metrics.record(r.usage);
          w.event(chunk_json(id, created, model, chat, "", first, r.finish_reason, &r.usage));
          w.done();
        }
      }
    } catch (const ClientGone&) {
      // the prefill rolled back; nothing more to say to no one
    } catch (const RequestError& e) {
      w.event(error_json(e.what(), e.type, e.param));
      metrics.error(e.status);
    } catch (const Error& e) {
      w.event(error_json(e.what(), "invalid_request_error", ""));
      metrics.error(400);
    } catch (const std::exception& e) {
      w.event(error_json(std::string("unexpected failure: ") + e.what(), "server_error", ""));
      metrics.error(500);
    }
    {
      std::lock_guard<std::mutex> l(tm);
      finished = true;
    }
    tcv.notify_all();
    ticker.join();
    sink.done();
  }
};

Server::Server(const ServeOptions& o, const cli::LoadedModel& m) {
  o.validate();
  p_ = std::make_unique<Impl>(o, m);
}
Server::~Server() = default;

int Server::bind() {
  int port = p_->o.port;
  if (port == 0) {
    port = p_->http.bind_to_any_port(p_->o.host);
    SPATTN_CHECK(port > 0, "cannot bind ", p_->o.host, " to any port");
  } else {
    SPATTN_CHECK(p_->http.bind_to_port(p_->o.host, port), "cannot bind ", p_->o.host, ":", port,
                 " (in use, or not an address of this machine)");
  }
  return port;
}

void Server::listen() { p_->http.listen_after_bind(); }
void Server::stop() { p_->http.stop(); }
bool Server::running() const { return p_->http.is_running(); }

}  // namespace spattn::serve
