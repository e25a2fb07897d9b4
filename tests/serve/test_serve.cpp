// `spattn serve` through plain HTTP: a server started in-process on 127.0.0.1 with an ephemeral
// port over stories260K.gguf (skipped where the model is absent), every route, streaming,
// the bad inputs that must get 400 (and the server serving on after them), the API key, the
// bounded queue, keep-alives while a request waits, a client leaving mid-prefill, and greedy
// text equal to `spattn run`'s.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "cli_run.hpp"
#include "assets.hpp"
#include "serve/chat_prompt.hpp"
#include "serve/metrics.hpp"
#include "serve/request.hpp"
#include "serve/server.hpp"
#include "serve/slot.hpp"
#include "serve_fixture.hpp"
#include "spattn/error.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

using json = nlohmann::json;

httplib::Result post(httplib::Client& c, const std::string& path, const std::string& body,
                     const httplib::Headers& h = {}) {
  return c.Post(path.c_str(), h, body, "application/json");
}
json ok_json(const httplib::Result& r) {
  EXPECT_TRUE(r) << "no response: " << httplib::to_string(r.error());
  if (!r) return json();
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body);
}

// The `data:` payloads of an SSE body, and how many comment lines it had.
struct Sse {
  std::vector<std::string> data;
  int comments = 0;
};
Sse parse_sse(const std::string& body) {
  Sse s;
  size_t at = 0;
  while (at < body.size()) {
    size_t end = body.find("\n\n", at);
    if (end == std::string::npos) end = body.size();
    const std::string ev = body.substr(at, end - at);
    if (ev.rfind("data: ", 0) == 0)
      s.data.push_back(ev.substr(6));
    else if (ev.rfind(":", 0) == 0)
      ++s.comments;
    else if (!ev.empty())
      ADD_FAILURE() << "not an SSE event: " << ev;
    at = end + 2;
  }
  return s;
}

// A streamed answer: its text, last chunk, and progress events.
struct Streamed {
  std::string text, role;
  json last;
  int progress = 0, chunks = 0, comments = 0;
  bool done = false;
};
Streamed read_stream(const std::string& body, bool chat) {
  Streamed s;
  const Sse sse = parse_sse(body);
  s.comments = sse.comments;
  for (const std::string& d : sse.data) {
    EXPECT_FALSE(s.done) << "data after [DONE]";
    if (d == "[DONE]") {
      s.done = true;
      continue;
    }
    const json j = json::parse(d);
    if (j.contains("prompt_progress")) {
      ++s.progress;
      EXPECT_TRUE(j["choices"].empty());
      continue;
    }
    ++s.chunks;
    EXPECT_EQ(j["object"], chat ? "chat.completion.chunk" : "text_completion");
    const json& c = j["choices"].at(0);
    if (chat) {
      if (c["delta"].contains("role")) s.role = c["delta"]["role"];
      if (c["delta"].contains("content")) s.text += c["delta"]["content"].get<std::string>();
    } else {
      s.text += c["text"].get<std::string>();
    }
    s.last = j;
  }
  return s;
}

TEST(ServeReal, RoutesAnswerInTheirShapes) {
  NEED_STORIES();
  Running srv(options(), *model);
  auto c = srv.client();
  EXPECT_EQ(ok_json(c.Get("/health"))["status"], "ok");
  const json models = ok_json(c.Get("/v1/models"));
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"].at(0)["id"], "stories260K.gguf");
  EXPECT_EQ(models["data"].at(0)["meta"]["n_vocab"], 512);
  const json props = ok_json(c.Get("/props"));
  EXPECT_EQ(props["default_generation_settings"]["n_ctx"], 512);
  EXPECT_EQ(props["chat_template"], serve::kChatFallbackName);
  EXPECT_EQ(props["total_slots"], 1);
  EXPECT_EQ(props["spattn"]["attn"], "dense");

  const std::string text = "Hello world, said the cat.";
  const json tok = ok_json(post(c, "/tokenize", json{{"content", text}}.dump()));
  const std::vector<int32_t> want = model->tokenizer.encode(text, false, false);
  EXPECT_EQ(tok["tokens"].get<std::vector<int32_t>>(), want);
  const json pieces =
      ok_json(post(c, "/tokenize", json{{"content", text}, {"with_pieces", true}}.dump()));
  std::string joined;
  for (const json& p : pieces["tokens"]) joined += p["piece"].get<std::string>();
  EXPECT_EQ(joined, " " + text);  // SentencePiece's leading space
  const json detok = ok_json(post(c, "/detokenize", json{{"tokens", want}}.dump()));
  EXPECT_EQ(detok["content"], text);
  const json bos =
      ok_json(post(c, "/tokenize", json{{"content", text}, {"add_special", true}}.dump()));
  EXPECT_EQ(bos["tokens"].at(0), model->tokenizer.bos());
}

TEST(ServeReal, GreedyCompletionEqualsSpattnRunStreamedOrNot) {
  NEED_STORIES();
  const std::string prompt = "Once upon a time, a little dog";
  const test::TempDir dir("spattn_serve_run");
  const test::CliRun run = test::run_spattn("run -m " + test::model_file("stories260K.gguf") +
                                                " -c 512 -n 40 --temp 0 --json -p '" + prompt + "'",
                                            dir);
  ASSERT_EQ(run.code(), 0) << run.err;
  const json want = json::parse(run.out);

  Running srv(options(), *model);
  auto c = srv.client();
  const json req = {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}};
  const json a = ok_json(post(c, "/v1/completions", req.dump()));
  EXPECT_EQ(a["object"], "text_completion");
  EXPECT_EQ(a["choices"].at(0)["text"], want["text"]);
  EXPECT_EQ(a["usage"]["prompt_tokens"], want["prompt_tokens"]);
  EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(a["usage"]["total_tokens"], a["usage"]["prompt_tokens"].get<int64_t>() +
                                            a["usage"]["completion_tokens"].get<int64_t>());
  EXPECT_EQ(a["usage"]["spattn"]["attn"], "dense");
  EXPECT_EQ(a["usage"]["spattn"]["score_entries"], a["usage"]["spattn"]["causal_entries"]);

  // The same prompt again: the slot keeps it and prefills only the last token.
  const json b = ok_json(post(c, "/v1/completions", req.dump()));
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"],
            a["usage"]["prompt_tokens"].get<int64_t>() - 1);
  EXPECT_EQ(b["choices"].at(0)["text"], want["text"]);

  json sreq = req;
  sreq["stream"] = true;
  sreq["cache_prompt"] = false;
  const auto r = post(c, "/v1/completions", sreq.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const Streamed s = read_stream(r->body, false);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.text, want["text"]);
  EXPECT_GE(s.progress, 2);  // before the prefill and after its one chunk
  EXPECT_EQ(s.last["choices"].at(0)["finish_reason"], a["choices"].at(0)["finish_reason"]);
  EXPECT_EQ(s.last["usage"]["completion_tokens"], a["usage"]["completion_tokens"]);
  EXPECT_EQ(s.last["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST(ServeReal, ChatUsesThePlainFallbackStreamedOrNot) {
  NEED_STORIES();
  Running srv(options(), *model);
  auto c = srv.client();
  const std::vector<serve::ChatMessage> msgs = {{"system", "You tell stories."},
                                                {"user", "Tell me about a cat."}};
  json m = json::array();
  for (const auto& x : msgs) m.push_back({{"role", x.role}, {"content", x.content}});
  const json req = {
      {"messages", m}, {"max_tokens", 20}, {"temperature", 0}, {"cache_prompt", false}};
  const json a = ok_json(post(c, "/v1/chat/completions", req.dump()));
  EXPECT_EQ(a["object"], "chat.completion");
  EXPECT_EQ(a["choices"].at(0)["message"]["role"], "assistant");
  const json plain = ok_json(post(c, "/v1/completions",
                                  json{{"prompt", serve::render_chat(msgs)},
                                       {"max_tokens", 20},
                                       {"temperature", 0},
                                       {"cache_prompt", false}}
                                      .dump()));
  EXPECT_EQ(a["choices"].at(0)["message"]["content"], plain["choices"].at(0)["text"]);
  EXPECT_EQ(a["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"]);

  json sreq = req;
  sreq["stream"] = true;
  const auto r = post(c, "/v1/chat/completions", sreq.dump());
  ASSERT_TRUE(r);
  const Streamed s = read_stream(r->body, true);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.role, "assistant");
  EXPECT_EQ(s.text, a["choices"].at(0)["message"]["content"]);
  EXPECT_EQ(s.last["usage"]["completion_tokens"], a["usage"]["completion_tokens"]);
}

TEST(ServeReal, ChatTemplateByNameRendersTheConversation) {
  NEED_STORIES();
  serve::ServeOptions o = options();
  o.chat_template = "chatml";
  Running srv(o, *model);
  auto c = srv.client();
  EXPECT_EQ(ok_json(c.Get("/props"))["chat_template"], "chatml");
  const std::vector<serve::ChatMessage> msgs = {{"system", "You tell stories."},
                                                {"user", "Tell me about a cat."}};
  json m = json::array();
  for (const auto& x : msgs) m.push_back({{"role", x.role}, {"content", x.content}});
  const json a = ok_json(
      post(c, "/v1/chat/completions",
           json{{"messages", m}, {"max_tokens", 12}, {"temperature", 0}, {"cache_prompt", false}}
               .dump()));
  // The same as a completion of the rendered text's tokens (control tokens parsed).
  const std::vector<int32_t> ids = model->tokenizer.encode(
      apply_chat_template(ChatTemplate::chatml, msgs, true), model->tokenizer.add_bos(), true);
  const json plain = ok_json(
      post(c, "/v1/completions",
           json{{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}, {"cache_prompt", false}}
               .dump()));
  EXPECT_EQ(a["usage"]["prompt_tokens"], int64_t(ids.size()));
  EXPECT_EQ(a["choices"].at(0)["message"]["content"], plain["choices"].at(0)["text"]);

  serve::ServeOptions bad = options();
  bad.chat_template = "llama-3";
  try {
    bad.validate();
    ADD_FAILURE() << "an unknown --chat-template passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown template 'llama-3'"), std::string::npos)
        << e.what();
  }
}

TEST(ServeReal, SamplingIsSeededAndStopSequencesCut) {
  NEED_STORIES();
  Running srv(options(), *model);
  auto c = srv.client();
  const json req = {{"prompt", "Once upon a time"},
                    {"max_tokens", 30},
                    {"temperature", 1.0},
                    {"top_k", 20},
                    {"top_p", 0.9},
                    {"seed", 7}};
  const json a = ok_json(post(c, "/v1/completions", req.dump()));
  const json b = ok_json(post(c, "/v1/completions", req.dump()));
  EXPECT_EQ(a["choices"].at(0)["text"], b["choices"].at(0)["text"]);
  // Greedy text cut at a stop sequence: the text before it, finish_reason "stop".
  const json g = ok_json(
      post(c, "/v1/completions",
           json{{"prompt", "Once upon a time"}, {"max_tokens", 30}, {"temperature", 0}}.dump()));
  const std::string full = g["choices"].at(0)["text"];
  ASSERT_NE(full.find("Lily"), std::string::npos) << full;
  for (bool stream : {false, true}) {
    const auto r = post(c, "/v1/completions",
                        json{{"prompt", "Once upon a time"},
                             {"max_tokens", 30},
                             {"temperature", 0},
                             {"stop", {"Lily", "zzz"}},
                             {"stream", stream}}
                            .dump());
    ASSERT_TRUE(r);
    std::string text, reason;
    if (stream) {
      const Streamed s = read_stream(r->body, false);
      text = s.text;
      reason = s.last["choices"].at(0)["finish_reason"];
    } else {
      const json j = json::parse(r->body);
      text = j["choices"].at(0)["text"];
      reason = j["choices"].at(0)["finish_reason"];
    }
    EXPECT_EQ(text, full.substr(0, full.find("Lily"))) << "stream " << stream;
    EXPECT_EQ(reason, "stop");
  }
}

TEST(ServeReal, PerRequestAttentionRunsAndIsReported) {
  NEED_STORIES();
  serve::ServeOptions o = options();
  o.r.n_ubatch = 32;
  o.r.h2o_local = 8;
  o.r.h2o_heavy = 8;
  Running srv(o, *model);
  auto c = srv.client();
  std::string prompt = "Once upon a time there was a big red ball.";
  for (int i = 0; i < 4; ++i)
    prompt += " The ball rolled down the hill and the children ran after it.";
  const json a = ok_json(post(c, "/v1/completions",
                              json{{"prompt", prompt},
                                   {"max_tokens", 4},
                                   {"temperature", 0},
                                   {"spattn", {{"attn", "chunked_h2o"}}}}
                                  .dump()));
  const json& u = a["usage"]["spattn"];
  EXPECT_EQ(u["attn"], "chunked_h2o");
  EXPECT_EQ(u["prefill"], "chunked_h2o");
  EXPECT_LT(u["score_entries"].get<int64_t>(), u["causal_entries"].get<int64_t>());
  EXPECT_GT(u["skipped_fraction"].get<double>(), 0.0);
  const json d =
      ok_json(post(c, "/v1/completions",
                   json{{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}}.dump()));
  EXPECT_EQ(d["usage"]["spattn"]["attn"], "dense");
  EXPECT_EQ(d["usage"]["spattn"]["score_entries"], d["usage"]["spattn"]["causal_entries"]);
  EXPECT_EQ(d["usage"]["spattn"]["attn_decode"], "dense");
  EXPECT_GT(d["usage"]["spattn"]["decode_keys_total"].get<int64_t>(), 0);
  EXPECT_EQ(d["usage"]["spattn"]["decode_keys_read"], d["usage"]["spattn"]["decode_keys_total"]);
  const auto bad = post(c, "/v1/completions",
                        json{{"prompt", "x"}, {"spattn", {{"attn", "no_such_method"}}}}.dump());
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["error"]["param"], "spattn.attn");
}

// A server started with --attn-decode decodes every request so and reports the keys decode read.
TEST(ServeReal, SparseDecodeRunsAndIsReported) {
  NEED_STORIES();
  serve::ServeOptions o = options();
  o.r.attn_decode = "quest:k=2,dense_layers=0,dense_at=1";
  Running srv(o, *model);
  auto c = srv.client();
  std::string prompt = "Once upon a time there was a big red ball.";
  for (int i = 0; i < 4; ++i)
    prompt += " The ball rolled down the hill and the children ran after it.";
  const json a =
      ok_json(post(c, "/v1/completions",
                   json{{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}}.dump()));
  const json& u = a["usage"]["spattn"];
  EXPECT_EQ(u["attn_decode"], "quest:k=2,dense_layers=0,dense_at=1");
  // Each step reads sink + newest + 2 pages of 16 of the ~70 keys it could see.
  EXPECT_GT(u["decode_keys_read"].get<int64_t>(), 0);
  EXPECT_LT(u["decode_keys_read"].get<int64_t>(), u["decode_keys_total"].get<int64_t>());
}

TEST(ServeReal, BadRequestsGet400AndTheServerServesOn) {
  NEED_STORIES();
  serve::ServeOptions o = options();
  o.r.n_ctx = 128;
  o.max_body = 64 << 10;
  Running srv(o, *model);
  auto c = srv.client();
  std::string long_prompt;
  for (int i = 0; i < 60; ++i) long_prompt += "The cat sat on the mat. ";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"/v1/completions", "{not json"},
      {"/v1/completions", "[1, 2]"},
      {"/v1/completions", "{}"},
      {"/v1/completions", R"({"prompt": 5})"},
      {"/v1/completions", R"({"prompt": ["a", "b"]})"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": -3})"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": "ten"})"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 1e12})"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 2.5})"},
      {"/v1/completions", R"({"prompt": "x", "temperature": -1})"},
      {"/v1/completions", R"({"prompt": "x", "temperature": 1e30})"},
      {"/v1/completions", R"({"prompt": "x", "top_p": 1.5})"},
      {"/v1/completions", R"({"prompt": "x", "top_k": -1})"},
      {"/v1/completions", R"({"prompt": "x", "n": 3})"},
      {"/v1/completions", R"({"prompt": "x", "stream": "yes"})"},
      {"/v1/completions", R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})"},
      {"/v1/completions", R"({"prompt": "x", "stop": [""]})"},
      {"/v1/completions", R"({"prompt": "x", "seed": -7})"},
      {"/v1/completions", R"({"prompt": "x", "spattn": "dense"})"},
      {"/v1/completions", R"({"prompt": [1, 99999]})"},
      {"/v1/completions", R"({"prompt": [1, -2]})"},
      {"/v1/completions", json{{"prompt", long_prompt}}.dump()},
      {"/v1/completions", "{\"prompt\": \"caf\xc3\"}"},       // a cut UTF-8 character
      {"/v1/completions", "{\"prompt\": \"\xed\xa0\x80\"}"},  // a UTF-16 surrogate
      {"/v1/completions", json{{"prompt", std::string(100 << 10, 'a')}}.dump()},  // over the limit
      {"/v1/chat/completions", R"({"messages": []})"},
      {"/v1/chat/completions", R"({"messages": [{"role": 1, "content": "x"}]})"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"},
      {"/v1/chat/completions", R"({"prompt": "x"})"},
      {"/tokenize", R"({"content": 3})"},
      {"/detokenize", R"({"tokens": [-1]})"},
      {"/detokenize", R"({"tokens": [100000]})"},
  };
  for (const auto& [path, body] : bad) {
    const auto r = post(c, path, body);
    ASSERT_TRUE(r) << path << " " << body.substr(0, 80);
    EXPECT_EQ(r->status, 400) << path << " " << body.substr(0, 80) << " -> " << r->body;
    const json e = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(e.is_object() && e.contains("error")) << r->body;
    EXPECT_EQ(e["error"]["type"], "invalid_request_error") << r->body;
    EXPECT_FALSE(e["error"]["message"].get<std::string>().empty());
  }
  // A method the request chose that fails on its prompt (grid: too short for any stride) names
  // the request's field.
  const auto g = post(c, "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 2,
                                               "spattn": {"attn": "grid"}})");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 400) << g->body;
  EXPECT_EQ(json::parse(g->body)["error"]["param"], "spattn.attn") << g->body;
  // Streamed requests are refused the same way, before any event.
  const auto rs = post(c, "/v1/completions", R"({"prompt": "x", "top_k": -1, "stream": true})");
  ASSERT_TRUE(rs);
  EXPECT_EQ(rs->status, 400);
  const auto nf = c.Get("/v2/nothing");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_EQ(json::parse(nf->body)["error"]["type"], "not_found_error");
  EXPECT_EQ(ok_json(c.Get("/health"))["status"], "ok");
  const json fine = ok_json(
      post(c, "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 5}}.dump()));
  EXPECT_EQ(fine["usage"]["completion_tokens"].get<int64_t>() > 0 ||
                fine["choices"].at(0)["finish_reason"] == "stop",
            true);
  // A prompt that fits exactly leaves no room to decode: one token, then "length".
  const std::vector<int32_t> fill(128, 300);
  const json full =
      ok_json(post(c, "/v1/completions", json{{"prompt", fill}, {"temperature", 0}}.dump()));
  EXPECT_LE(full["usage"]["completion_tokens"].get<int64_t>(), 1);
}

// The value of one sample line ("NAME VALUE") of a Prometheus text page, or -1.
double metric(const std::string& page, const std::string& name) {
  size_t at = 0;
  while ((at = page.find(name + " ", at)) != std::string::npos) {
    if (at == 0 || page[at - 1] == '\n') return std::stod(page.substr(at + name.size() + 1));
    at += name.size();
  }
  return -1;
}

TEST(ServeReal, MetricsCountWhatRanOnlyWithTheFlag) {
  NEED_STORIES();
  {
    Running srv(options(), *model);
    auto c = srv.client();
    const auto r = c.Get("/metrics");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 501);  // as llama-server without --metrics
    EXPECT_NE(r->body.find("--metrics"), std::string::npos);
  }
  serve::ServeOptions o = options();
  o.metrics = true;
  Running srv(o, *model);
  auto c = srv.client();
  const std::string empty = c.Get("/metrics")->body;
  EXPECT_EQ(metric(empty, "spattn:prompt_tokens_total"), 0);
  EXPECT_EQ(metric(empty, "spattn:time_to_first_token_seconds_count"), 0);
  EXPECT_EQ(metric(empty, "spattn:time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 0);

  const json a =
      ok_json(post(c, "/v1/completions",
                   R"({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})"));
  const json b = ok_json(post(c, "/v1/completions",
                              R"({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0,
                                  "spattn": {"attn": "chunked_h2o"}})"));
  const auto bad = post(c, "/v1/completions", "{not json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(c.Get("/no/such/route")->status, 404);

  const auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  const std::string& m = r->body;
  const int64_t prompt =
      a["usage"]["prompt_tokens"].get<int64_t>() + b["usage"]["prompt_tokens"].get<int64_t>();
  const int64_t cached =
      a["usage"].value("prompt_tokens_details", json::object()).value("cached_tokens", 0) +
      b["usage"].value("prompt_tokens_details", json::object()).value("cached_tokens", 0);
  EXPECT_EQ(metric(m, "spattn:prompt_tokens_total"), double(prompt - cached));
  EXPECT_EQ(metric(m, "spattn:prompt_cached_tokens_total"), double(cached));
  EXPECT_EQ(metric(m, "spattn:tokens_predicted_total"),
            double(a["usage"]["completion_tokens"].get<int64_t>() +
                   b["usage"]["completion_tokens"].get<int64_t>()));
  EXPECT_GT(metric(m, "spattn:prompt_seconds_total"), 0);
  EXPECT_EQ(metric(m, "spattn:time_to_first_token_seconds_count"), 2);
  EXPECT_EQ(metric(m, "spattn:time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 2);
  EXPECT_EQ(metric(m, "spattn:decode_tokens_per_second_count"), 2);
  EXPECT_EQ(metric(m, "spattn:requests_total{attn=\"dense\"}"), 1);
  EXPECT_EQ(metric(m, "spattn:requests_total{attn=\"chunked_h2o\"}"), 1);
  EXPECT_EQ(metric(m, "spattn:errors_total{status=\"400\"}"), 1);
  EXPECT_EQ(metric(m, "spattn:errors_total{status=\"404\"}"), 1);
  EXPECT_EQ(metric(m, "spattn:requests_processing"), 0);
  EXPECT_EQ(metric(m, "spattn:requests_deferred"), 0);
  EXPECT_GT(metric(m, "spattn:kv_cache_tokens"), 0);
  // Buckets are cumulative: each at most the next.
  double prev = 0;
  for (double le : serve::Metrics::kTtftSeconds) {
    std::ostringstream name;
    name << "spattn:time_to_first_token_seconds_bucket{le=\"" << le << "\"}";
    const double v = metric(m, name.str());
    EXPECT_GE(v, prev) << name.str();
    prev = v;
  }
}

TEST(ServeReal, ApiKeyIsRequiredExceptForHealth) {
  NEED_STORIES();
  serve::ServeOptions o = options();
  o.api_key = "sekret";
  Running srv(o, *model);
  auto c = srv.client();
  const std::string body = json{{"prompt", "Once"}, {"max_tokens", 2}}.dump();
  for (const httplib::Headers& h :
       {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer wrong"}}}) {
    const auto r = post(c, "/v1/completions", body, h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    EXPECT_EQ(json::parse(r->body)["error"]["type"], "authentication_error");
  }
  const auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 401);
  EXPECT_EQ(ok_json(c.Get("/health"))["status"], "ok");
  ok_json(post(c, "/v1/completions", body, {{"Authorization", "Bearer sekret"}}));
}

// Blocks the server's hook at `event` until released; says when it is held.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool held = false, open = false;
  void wait_here() {
    std::unique_lock<std::mutex> l(m);
    held = true;
    cv.notify_all();
    cv.wait_for(l, std::chrono::seconds(10), [&] { return open; });
  }
  bool wait_held() {
    std::unique_lock<std::mutex> l(m);
    return cv.wait_for(l, std::chrono::seconds(10), [&] { return held; });
  }
  void release() {
    std::lock_guard<std::mutex> l(m);
    open = true;
    cv.notify_all();
  }
};

TEST(ServeReal, AFullQueueGets503AndTheQueuedRequestsFinish) {
  NEED_STORIES();
  serve::ServeOptions o = options();
  o.max_queue = 1;
  Gate gate;
  std::atomic<int> slot_events{0};
  o.test_hook = [&](const std::string& ev) {
    if (ev == "slot" && slot_events++ == 0) gate.wait_here();
  };
  Running srv(o, *model);
  const std::string body = json{{"prompt", "Once upon a time"}, {"max_tokens", 4}}.dump();
  auto first = std::async(std::launch::async, [&] {
    auto c = srv.client();
    auto r = post(c, "/v1/completions", body);
    return r ? r->status : -1;
  });
  ASSERT_TRUE(gate.wait_held());
  auto second = std::async(std::launch::async, [&] {
    auto c = srv.client();
    auto r = post(c, "/v1/completions", body);
    return r ? r->status : -1;
  });
  auto c = srv.client();
  for (int i = 0; i < 500 && ok_json(c.Get("/props"))["spattn"]["requests_in_flight"] != 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(ok_json(c.Get("/props"))["spattn"]["requests_in_flight"], 2);
  const auto third = post(c, "/v1/completions", body);
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 503);
  EXPECT_EQ(json::parse(third->body)["error"]["type"], "unavailable_error");
  EXPECT_EQ(ok_json(c.Get("/health"))["status"], "ok");  // cheap routes still answer
  gate.release();
  EXPECT_EQ(first.get(), 200);
  EXPECT_EQ(second.get(), 200);
  EXPECT_EQ(ok_json(c.Get("/props"))["spattn"]["requests_in_flight"], 0);
}

TEST(ServeReal, AWaitingStreamGetsKeepAlives) {
  NEED_STORIES();
  serve::ServeOptions o = options();
  o.test_hook = [](const std::string& ev) {
    if (ev == "slot") std::this_thread::sleep_for(std::chrono::milliseconds(1600));
  };
  Running srv(o, *model);
  auto c = srv.client();
  const auto r = post(c, "/v1/completions",
                      json{{"prompt", "Once"}, {"max_tokens", 3}, {"stream", true}}.dump());
  ASSERT_TRUE(r);
  const Streamed s = read_stream(r->body, false);
  EXPECT_TRUE(s.done);
  // Quiet for 1.6 s: a comment at least every 0.75 s (500 ms of quiet, checked every 250 ms).
  EXPECT_GE(s.comments, 2) << r->body;
}

TEST(ServeReal, AClientLeavingMidPrefillCancelsIt) {
  NEED_STORIES();
  serve::ServeOptions o = options();
  o.r.n_ubatch = 16;
  std::promise<void> left;
  std::shared_future<void> left_f = left.get_future().share();
  std::atomic<int> progress{0};
  o.test_hook = [&](const std::string& ev) {
    // After the first progress event, wait until the client has hung up.
    if (ev == "progress" && progress++ == 0) left_f.wait_for(std::chrono::seconds(10));
  };
  Running srv(o, *model);
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "The dog ran to the park and played with a ball. ";
  const std::vector<int32_t> ids = model->tokenizer.encode(prompt);
  ASSERT_GT(ids.size(), 16u * 8);
  {
    auto c = srv.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json{{"prompt", prompt}, {"max_tokens", 50}, {"stream", true}}.dump();
    req.set_header("Content-Type", "application/json");
    bool saw_progress = false;
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
      saw_progress = saw_progress || std::string(d, n).find("prompt_progress") != std::string::npos;
      return !saw_progress;  // hang up at the first progress event
    };
    c.send(req);
    c.stop();
    EXPECT_TRUE(saw_progress);
  }
  left.set_value();
  // The prefill stopped at a chunk and rolled back: the next request finds nothing cached,
  // where a finished prefill would have left all but its last token.
  auto c = srv.client();
  for (int i = 0; i < 500 && ok_json(c.Get("/props"))["spattn"]["requests_in_flight"] != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // Counted before the next request, whose own prefill calls the hook too.
  const int events = progress.load();
  const json a =
      ok_json(post(c, "/v1/completions", json{{"prompt", prompt}, {"max_tokens", 1}}.dump()));
  EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_LT(events, int(ids.size() / 16)) << "the prefill ran to its end";
  const json b =
      ok_json(post(c, "/v1/completions", json{{"prompt", prompt}, {"max_tokens", 1}}.dump()));
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], int64_t(ids.size()) - 1);
}

// The binary itself: `spattn serve --port 0` says where it listens, serves, and ends cleanly
// on SIGTERM; bad flags exit 2 before anything binds.
TEST(ServeCliReal, TheBinaryServesAndStopsOnSigterm) {
  NEED_STORIES();
  const test::TempDir dir("spattn_serve_cli");
  const std::string m = test::model_file("stories260K.gguf");
  for (const char* bad : {"-np 0", "--attn no_such_method", "--port 70000", "--timeout 0"}) {
    const test::CliRun r = test::run_spattn("serve -m " + m + " " + std::string(bad), dir);
    EXPECT_EQ(r.code(), 2) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("spattn: error:"), std::string::npos) << bad << ": " << r.err;
  }
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  const std::string cli = SPATTN_CLI_PATH;
  std::vector<std::string> args = {cli, "serve", "-m", m, "--port", "0", "-c", "256"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, cli.c_str(), &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  struct Reap {  // a failed check must not leave the server running
    pid_t pid;
    ~Reap() {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } reap{pid};
  close(fds[1]);
  FILE* err = fdopen(fds[0], "r");
  int port = 0;
  char line[512];
  while (port == 0 && std::fgets(line, sizeof line, err)) {
    const std::string l = line;
    const size_t at = l.find("listening on http://127.0.0.1:");
    if (at != std::string::npos) port = std::stoi(l.substr(at + 30));
  }
  ASSERT_GT(port, 0) << "no 'listening on' line";
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(20);
  EXPECT_EQ(ok_json(c.Get("/health"))["status"], "ok");
  const json a = ok_json(
      post(c, "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 4}}.dump()));
  EXPECT_EQ(a["object"], "text_completion");
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  reap.pid = 0;
  std::fclose(err);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

TEST(ServeRequest, HeldBackBytesCoverStopPrefixesAndCutCharacters) {
  EXPECT_EQ(serve::held_back_bytes("hello wor", {"world"}), 3u);
  EXPECT_EQ(serve::held_back_bytes("hello", {"world"}), 0u);
  EXPECT_EQ(serve::held_back_bytes("abc\xc3", {}), 1u);
  EXPECT_EQ(serve::held_back_bytes("abc\xe2\x82", {}), 2u);
  EXPECT_EQ(serve::held_back_bytes("abc\xe2\x82\xac", {}), 0u);
  EXPECT_EQ(serve::held_back_bytes("x</s", {"</s>", "s"}), 3u);
}

TEST(ServeRequest, Utf8Validation) {
  EXPECT_TRUE(serve::valid_utf8("plain ascii"));
  EXPECT_TRUE(serve::valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(serve::valid_utf8("\xc3"));
  EXPECT_FALSE(serve::valid_utf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(serve::valid_utf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(serve::valid_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(serve::valid_utf8("\xff"));
}

TEST(ServeRequest, ParsesOpenAIAndLlamaServerFields) {
  const serve::GenerateRequest r = serve::parse_generate(
      R"({"prompt": "hi", "max_tokens": 7, "temperature": 0.5, "top_k": 3, "top_p": 0.5,
          "seed": 9, "stop": "x", "stream": true, "cache_prompt": false,
          "spattn": {"attn": "momo"}, "frequency_penalty": 0})",
      false);
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.5);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_EQ(r.sampling.top_p, 0.5);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampling.seed, 9u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r.stream);
  EXPECT_FALSE(r.cache_prompt);
  EXPECT_EQ(r.attn, "momo");
  const serve::GenerateRequest d = serve::parse_generate(R"({"prompt": [1, 2, 3]})", false);
  EXPECT_TRUE(d.prompt_is_tokens);
  EXPECT_EQ(d.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(d.max_tokens, -1);
  EXPECT_EQ(d.sampling.temperature, 0.8);  // llama-server's defaults
  EXPECT_FALSE(d.seed_given);
  const serve::GenerateRequest ch = serve::parse_generate(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                   {"type": "text", "text": "b"}]}],
          "max_completion_tokens": 3})",
      true);
  EXPECT_EQ(ch.messages.at(0).content, "ab");
  EXPECT_EQ(ch.max_tokens, 3);
  EXPECT_THROW(serve::parse_generate(R"({"prompt": "x", "top_k": 1.5})", false),
               serve::RequestError);
}

// Fields that change the answer and that the server does not implement are refused by name,
// unless they ask for nothing; llama-server's min_p and ignore_eos are read.
TEST(ServeRequest, UnsupportedOutputFieldsAreRefusedByName) {
  for (const char* f :
       {R"("logit_bias": {"15": -100})", R"("logprobs": 3)", R"("logprobs": true)",
        R"("presence_penalty": 0.5)", R"("repeat_penalty": 1.1)", R"("grammar": "root ::= [a-z]+")",
        R"("response_format": {"type": "json_object"})", R"("tools": [{"type": "function"}])",
        R"("n_probs": 2)", R"("echo": true)", R"("response_format": {"type": 5})"}) {
    const std::string body = std::string(R"({"prompt": "x", )") + f + "}";
    const std::string name = std::string(f).substr(1, std::string(f).find('"', 1) - 1);
    try {
      serve::parse_generate(body, false);
      ADD_FAILURE() << body << " was accepted";
    } catch (const serve::RequestError& e) {
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(e.param, name) << body;
    }
  }
  const serve::GenerateRequest ok = serve::parse_generate(
      R"({"prompt": "x", "logit_bias": {}, "logprobs": false, "presence_penalty": 0,
          "repeat_penalty": 1, "response_format": {"type": "text"}, "tools": [],
          "min_p": 0.1, "ignore_eos": true})",
      false);
  EXPECT_EQ(ok.sampling.min_p, 0.1);
  EXPECT_TRUE(ok.ignore_eos);
  EXPECT_EQ(serve::parse_generate(R"({"prompt": "x"})", false).sampling.min_p, 0.05);
  EXPECT_THROW(serve::parse_generate(R"({"prompt": "x", "min_p": 2})", false), serve::RequestError);
}

TEST(Sampler, TopKAndTopPKeepOnlyTheMostLikely) {
  const std::vector<float> logits = {0.0f, 1.0f, 3.0f, 2.0f, 2.9f};
  cli::SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(cli::Sampler(p).sample(logits), 2);
  p.temperature = 5.0;  // nearly flat: every token drawn without a cut
  std::set<int32_t> seen_all, seen_k2, seen_p;
  cli::Sampler all(p);
  p.top_k = 2;
  cli::Sampler k2(p);
  p.top_k = 0;
  p.top_p = 0.3;  // at T = 5 the top two (2, 4) hold about 0.46: only they are kept
  cli::Sampler tp(p);
  for (int i = 0; i < 2000; ++i) {
    seen_all.insert(all.sample(logits));
    seen_k2.insert(k2.sample(logits));
    seen_p.insert(tp.sample(logits));
  }
  EXPECT_EQ(seen_all.size(), 5u);
  EXPECT_EQ(seen_k2, (std::set<int32_t>{2, 4}));
  EXPECT_EQ(seen_p, (std::set<int32_t>{2, 4}));
  p.top_p = 0;
  EXPECT_THROW(p.validate(), Error);
}

// min_p as llama.cpp's: keep the tokens whose logit is within ln(min_p) of the top one's,
// before temperature (a plain reference over the same logits).
TEST(Sampler, MinPKeepsTokensNearTheTopOnesProbability) {
  const std::vector<float> logits = {0.0f, 1.0f, 3.0f, 2.0f, 2.9f};
  cli::SamplingParams p;
  p.temperature = 5.0;  // flat after temperature: the cut alone decides who is drawn
  p.min_p = 0.3;        // ln 0.3 = -1.20: logits >= 1.80 stay
  std::set<int32_t> want;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] >= 3.0f + std::log(0.3f)) want.insert(int32_t(i));
  ASSERT_EQ(want, (std::set<int32_t>{2, 3, 4}));
  cli::Sampler s(p);
  std::set<int32_t> seen;
  for (int i = 0; i < 2000; ++i) seen.insert(s.sample(logits));
  EXPECT_EQ(seen, want);
  p.min_p = 1.0;  // only the top token
  cli::Sampler top(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(top.sample(logits), 2);
  p.min_p = -0.1;
  EXPECT_THROW(p.validate(), Error);
}

}  // namespace
}  // namespace spattn
