#include "server.hpp"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "attn_bounds.hpp"
#include "chat_prompt.hpp"
#include "http_checks.hpp"
#include "http_server.hpp"
#include "metrics.hpp"
#include "openai.hpp"
#include "plan_library.hpp"
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
  SPATTN_CHECK(header_timeout_s >= 1 && header_timeout_s <= 3600,
               "--header-timeout must be in [1, 3600] seconds, got ", header_timeout_s);
  SPATTN_CHECK(body_timeout_s >= 1 && body_timeout_s <= 3600,
               "--body-timeout must be in [1, 3600] seconds, got ", body_timeout_s);
  SPATTN_CHECK(conns_per_addr >= 1, "--conns-per-ip must be >= 1, got ", conns_per_addr);
  SPATTN_CHECK(shutdown_timeout_s >= 0 && shutdown_timeout_s <= 3600,
               "--shutdown-timeout must be in [0, 3600] seconds, got ", shutdown_timeout_s);
  SPATTN_CHECK(slots >= 1 && slots <= 64, "-np must be in [1, 64], got ", slots);
  SPATTN_CHECK(max_queue >= 0 && max_queue <= 1024, "--queue must be in [0, 1024], got ",
               max_queue);
  // Context parallelism needs every rank to run the same calls in lockstep: a request stream
  // read on one rank, sent to the others, slots and their prefix reuse (a prefill after decode,
  // which --cp does not continue) on every rank. Not built: refused by name rather than served
  // by one process as if --cp were not given.
  SPATTN_CHECK(r.cp == 1 && !r.cp_gather, "serve --cp ", r.cp, r.cp_gather ? " --cp-gather" : "",
               ": serve is not context-parallel (run and perplexity are); start it without --cp");
  cli::session_options(r, r.attn);        // --attn and the sizes, before the model loads
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

// The routes and the method each takes: anything else is refused before its body is read.
struct Route {
  const char* path;
  const char* method;
};
constexpr Route kRoutes[] = {{"/health", "GET"},
                             {"/v1/models", "GET"},
                             {"/models", "GET"},
                             {"/metrics", "GET"},
                             {"/props", "GET"},
                             {"/tokenize", "POST"},
                             {"/detokenize", "POST"},
                             {"/v1/completions", "POST"},
                             {"/completions", "POST"},
                             {"/v1/chat/completions", "POST"},
                             {"/chat/completions", "POST"}};

const Route* find_route(const std::string& path) {
  for (const Route& r : kRoutes)
    if (path == r.path) return &r;
  return nullptr;
}

// The key compared in time that depends on its length only (== returns at the first
// differing byte, which times a guess byte by byte).
bool key_matches(const std::string& header, const std::string& key) {
  const std::string want = "Bearer " + key;
  if (header.size() != want.size()) return false;
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff = diff | (header[i] ^ want[i]);
  return diff == 0;
}

HttpLimits http_limits(const ServeOptions& o) {
  HttpLimits l;
  l.read_timeout_s = l.write_timeout_s = o.timeout_s;
  l.header_timeout_s = o.header_timeout_s;
  l.body_timeout_s = o.body_timeout_s;
  l.max_conns_per_addr = o.conns_per_addr;
  // Enough workers for every admitted request plus a few for /health and friends, so a full
  // queue never starves the cheap routes.
  l.workers = size_t(o.slots + o.max_queue + 4);
  if (o.test_hook) l.worker_started = [hook = o.test_hook] { hook("worker"); };
  return l;
}

HttpPolicy http_policy(const ServeOptions& o) {
  HttpPolicy p;
  p.max_body = o.max_body;
  p.check_host = is_loopback(o.host);
  p.allowed_hosts = o.allowed_hosts;
  p.cors_origins = o.cors;
  return p;
}

void close_after() {
  if (Conn* c = current_conn()) c->close_after();
}

// Whether the client of the connection this thread serves has left, as a test that holds the
// connection, so events called on another thread still ask the right one.
std::function<bool()> client_gone() {
  const Conn* c = current_conn();
  return [c] { return c && c->gone(); };
}

}  // namespace

struct Server::Impl {
  ServeOptions o;
  const cli::LoadedModel& m;
  std::string model_id;
  HttpServer http;
  HttpPolicy policy;
  PlanLibrary plans;
  SlotPool slots;
  Turn turn;  // one step of work at a time over the slots (turn.hpp)
  mutable std::mutex admit_mutex;
  int64_t admitted = 0;  // requests running or waiting for the slot
  std::atomic<int64_t> next_id{0};
  Metrics metrics;
  std::optional<ChatTemplate> chat_template;  // none: the plain fallback

  // --attn's and --attn-decode's "auto" as the model resolves it, so that /props and every
  // usage report name what runs.
  static ServeOptions resolved(ServeOptions opt, const model::Config& cfg) {
    cli::resolve_model_attention(opt.r, cfg);
    return opt;
  }

  Impl(const ServeOptions& opt, const cli::LoadedModel& lm)
      : o(resolved(opt, lm.model.config())),
        m(lm),
        http(http_limits(o)),
        policy(http_policy(o)),
        plans(o.plans_dir.empty() ? PlanLibrary() : PlanLibrary(o.plans_dir)),
        slots(lm.model, lm.tokenizer, o.r, o.slots),
        chat_template(pick_chat_template(opt.chat_template, lm.chat_template)) {
    model_id = o.alias.empty() ? std::filesystem::path(o.r.model).filename().string() : o.alias;
    // A client that closes its socket must not end the process: writes then just fail.
    std::signal(SIGPIPE, SIG_IGN);
    // httplib's own check of Content-Length (the guard refuses first); chunked and inflated
    // bodies are counted by read_body as they arrive.
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
      } catch (const ClientGone&) {
        close_after();  // no one to answer
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

  void refuse(httplib::Response& res, int status, const std::string& message,
              const std::string& param) {
    static const std::map<int, const char*> kType = {
        {401, "authentication_error"},  {403, "permission_error"},
        {404, "not_found_error"},       {405, "invalid_request_error"},
        {411, "invalid_request_error"}, {415, "invalid_request_error"},
        {501, "not_supported_error"}};
    const auto t = kType.find(status);
    send_error(res, status, message, t == kType.end() ? "invalid_request_error" : t->second, param);
    metrics.error(status);
  }

  // Every request's head, before any body is read: Host, route and method, framing, Origin,
  // the API key and the body's type. A refused request's body is left unread and its
  // connection closed after the answer.
  httplib::Server::HandlerResponse guard(const httplib::Request& req, httplib::Response& res) {
    using HR = httplib::Server::HandlerResponse;
    if (Conn* c = current_conn()) c->headers_done();
    const auto refused = [&](int status, const std::string& message, const std::string& param) {
      refuse(res, status, message, param);
      res.set_header("Connection", "close");
      close_after();
      return HR::Handled;
    };
    if (auto r = check_host(req, policy)) return refused(r->status, r->message, r->param);
    const std::string origin = req.get_header_value("Origin");
    const bool cors = !origin.empty() && cors_allows(origin, policy);
    if (cors) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
    }
    const Route* route = find_route(req.path);
    if (!route) return refused(404, "no such route", "");
    if (req.method == "OPTIONS" && cors) {  // a browser's preflight (llama-server's --cors)
      res.set_header("Access-Control-Allow-Methods", std::string(route->method) + ", OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Max-Age", "600");
      res.status = 204;
      return HR::Handled;
    }
    if (req.method != route->method) {
      res.set_header("Allow", route->method);
      return refused(405, req.path + " takes " + route->method, "");
    }
    if (auto r = check_framing(req, o.max_body)) return refused(r->status, r->message, r->param);
    if (auto r = check_origin(req, policy)) return refused(r->status, r->message, r->param);
    if (!o.api_key.empty() && req.path != "/health" &&
        !key_matches(req.get_header_value("Authorization"), o.api_key))
      return refused(401, "invalid or missing API key (Authorization: Bearer KEY)", "");
    if (req.method == "POST")
      if (auto r = check_json_type(req)) return refused(r->status, r->message, r->param);
    return HR::Unhandled;
  }

  // The body, counted as it arrives whatever its framing (Content-Length, chunked) and after
  // any Content-Encoding is undone, so neither a chunked stream nor a compression bomb is held
  // whole before its size is known (httplib's limit covers Content-Length only).
  std::string read_body(const httplib::ContentReader& reader) {
    std::string body;
    bool over = false;
    const bool ok = reader([&](const char* d, size_t n) {
      if (n > o.max_body - body.size()) {
        over = true;
        return false;
      }
      body.append(d, n);
      return true;
    });
    if (over || !ok) close_after();  // the rest of the body is left unread
    if (over)
      bad_request("the request body is over the limit of " + std::to_string(o.max_body) +
                  " bytes (counted after any Content-Encoding is undone)");
    if (!ok)
      bad_request(
          "the request body could not be read (cut short, too slow, or not valid for "
          "its Content-Encoding)");
    return body;
  }

  template <class F>
  void post(const char* path, F f) {
    http.Post(path, [this, f](const httplib::Request& req, httplib::Response& res,
                              const httplib::ContentReader& reader) {
      guarded([&](const httplib::Request& rq, httplib::Response& rs) {
        f(rq, rs, read_body(reader));
      })(req, res);
    });
  }

  void routes() {
    http.set_pre_routing_handler(
        [this](const httplib::Request& req, httplib::Response& res) { return guard(req, res); });
    // Errors httplib answers itself (a request it cannot parse) get an error object too, and
    // the connection is closed: what follows a malformed request cannot be trusted to frame.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request&,
                                                                       httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (res.status == 413)
        send_error(res, 400,
                   "the request body is over the limit of " + std::to_string(o.max_body) + " bytes",
                   "invalid_request_error");
      else if (res.status == 404)
        send_error(res, 404, "no such route", "not_found_error");
      else
        send_error(res, res.status, "malformed HTTP request", "invalid_request_error");
      if (res.status == 400) close_after();
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
               const int64_t admitted = in_flight(),
                             processing = std::min<int64_t>(admitted, o.slots);
               res.set_content(
                   metrics.render(processing, admitted - processing, o.r.n_ctx, slots.states()),
                   "text/plain; version=0.0.4; charset=utf-8");
             }));
    http.Get("/props", guarded([this](const httplib::Request&, httplib::Response& res) {
               send_json(res, 200, props());
             }));
    post("/tokenize", [this](const httplib::Request&, httplib::Response& res,
                             const std::string& body) { tokenize(body, res); });
    post("/detokenize",
         [this](const httplib::Request&, httplib::Response& res, const std::string& body) {
           const std::vector<int32_t> ids = parse_detokenize(body);
           check_ids(ids, "tokens");
           std::shared_ptr<Ticket> ticket = admit();
           send_json(res, 200, {{"content", m.tokenizer.decode(ids)}});
         });
    for (const char* path : {"/v1/completions", "/completions"})
      post(path, [this](const httplib::Request&, httplib::Response& res, const std::string& body) {
        generate(body, res, false);
      });
    for (const char* path : {"/v1/chat/completions", "/chat/completions"})
      post(path, [this](const httplib::Request&, httplib::Response& res, const std::string& body) {
        generate(body, res, true);
      });
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
    return {
        {"model_path", o.r.model},
        {"model_alias", model_id},
        {"total_slots", o.slots},
        {"default_generation_settings",
         {{"n_ctx", o.r.n_ctx},
          {"params",
           {{"temperature", d.temperature},
            {"top_k", d.top_k},
            {"top_p", d.top_p},
            {"min_p", d.min_p},
            {"n_predict", -1},
            {"cache_prompt", true}}}}},
        {"chat_template", chat_template ? chat_template_name(*chat_template) : kChatFallbackName},
        {"chat_template_note",
         chat_template
             ? (o.chat_template.empty() ? "recognised in the model's tokenizer.chat_template"
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

  void tokenize(const std::string& body, httplib::Response& res) {
    const TokenizeRequest t = parse_tokenize(body);
    std::shared_ptr<Ticket> ticket = admit();  // counted against the queue like a completion
    const std::vector<int32_t> ids = m.tokenizer.encode(t.content, t.add_special, false);
    json tokens = json::array();
    for (int32_t id : ids)
      if (t.with_pieces)
        tokens.push_back({{"id", id}, {"piece", m.tokenizer.piece(id, true)}});
      else
        tokens.push_back(id);
    send_json(res, 200, {{"tokens", tokens}});
  }

  void generate(const std::string& body, httplib::Response& res, bool chat) {
    const GenerateRequest g = parse_generate(body, chat);
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
                      " tokens, more than the context of " + std::to_string(o.r.n_ctx) + " (-c)",
                  chat ? "messages" : "prompt");
    // A request's spec names no file (plans and calibrations by their --plans-dir names) and
    // keeps its cost bounded; the operator's --attn is taken as given.
    sr->attn = o.r.attn;
    if (!g.attn.empty()) {
      sr->attn = plans.resolve(g.attn);
      check_attn_bounds(sr->attn);
    }
    try {
      cli::session_options(o.r, sr->attn);
    } catch (const Error& e) {
      bad_request(std::string("spattn.attn: ") + e.what(), "spattn.attn");
    }
    sr->sampling = g.sampling;
    if (!g.seed_given) sr->sampling.seed = std::random_device{}();
    sr->max_tokens = g.max_tokens;
    sr->stop = g.stop;
    sr->ignore_eos = g.ignore_eos;
    sr->cache_prompt = g.cache_prompt;
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const std::string model = g.model.empty() ? model_id : g.model;
    const int64_t created = unix_now();
    std::shared_ptr<Ticket> ticket = admit();

    if (!g.stream) {
      // A client gone frees its place while it waits and cancels its generation at the next
      // step (a prefill piece or a token).
      const std::function<bool()> gone = client_gone();
      std::optional<SlotPool::Lease> lease = slots.acquire(sr->tokens, gone);
      if (!lease) throw ClientGone();
      if (o.test_hook) o.test_hook("slot");
      SlotEvents ev;
      ev.progress = [this, gone](int64_t, int64_t, int64_t) {
        if (o.test_hook) o.test_hook("progress");
        if (gone()) throw ClientGone();
      };
      ev.cancelled = step_then(gone);
      const SlotResult r = generate(lease->slot(), *sr, ev);
      lease->release(&r);
      if (r.cancelled) throw ClientGone();
      metrics.record(r.usage);
      send_json(res, 200,
                completion_json(id, created, model, chat, r.text, r.finish_reason, r.usage));
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

  // An Error from the generation itself is the attention method's on this prompt (grid on a
  // prompt too short for its strides, say): a 400 naming the request's field when the request
  // chose the method, the operator's error otherwise.
  SlotResult generate(Slot& slot, const SlotRequest& sr, const SlotEvents& ev) {
    try {
      return slot.generate(sr, ev, &turn);
    } catch (const Error& e) {
      if (sr.attn == o.r.attn) throw;
      throw RequestError(400, "invalid_request_error", std::string("spattn.attn: ") + e.what(),
                         "spattn.attn");
    }
  }

  // The per-token cancel test: generate() asks it once after every decoded token, so the
  // tests' hook sees each decode step ("step") and a client gone stops the next one.
  std::function<bool()> step_then(std::function<bool()> gone) const {
    return [this, gone = std::move(gone)] {
      if (o.test_hook) o.test_hook("step");
      return gone();
    };
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
    const auto gone = [&w, conn = client_gone()] { return w.gone() || conn(); };
    try {
      std::optional<SlotPool::Lease> held = slots.acquire(sr.tokens, gone);
      if (!held) throw ClientGone();
      SlotPool::Lease lease = std::move(*held);
      if (o.test_hook) o.test_hook("slot");
      if (!gone()) {
        const auto t0 = Clock::now();
        bool first = true;
        if (chat) {
          w.event(chunk_json(id, created, model, true, "", true, "", nullptr));
          first = false;
        }
        SlotEvents ev;
        ev.progress = [&](int64_t cached, int64_t done, int64_t total) {
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          w.event(
              progress_json(id, created, model, chat, cached + total, cached, cached + done, ms));
          if (o.test_hook) o.test_hook("progress");
          if (gone()) throw ClientGone();
        };
        ev.text = [&](const std::string& text) {
          w.event(chunk_json(id, created, model, chat, text, first, "", nullptr));
          first = false;
        };
        ev.cancelled = step_then(gone);
        const SlotResult r = generate(lease.slot(), sr, ev);
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
  const int port = p_->http.bind_exclusive(p_->o.host, p_->o.port);
  SPATTN_CHECK(port > 0, "cannot listen on ", p_->o.host, ":", p_->o.port,
               " (the port is in use, or the address is not this machine's)");
  return port;
}

void Server::listen() { p_->http.listen_after_bind(); }
void Server::stop() { p_->http.shutdown(std::chrono::seconds(p_->o.shutdown_timeout_s)); }
bool Server::running() const { return p_->http.is_running(); }

}  // namespace spattn::serve
