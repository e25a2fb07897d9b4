// `spattn serve -np 2` and prefix reuse across slots: two streamed requests served at once (both
// holding a slot at the same moment) give the greedy text each gives alone; a request goes to
// the slot whose cache holds its prefix, and an unrelated one leaves a long cached document
// alone; /props and /metrics report each slot; and with chunked_h2o a second turn reuses the
// first turn's prefix up to a kept chunk boundary and answers as a fresh prefill of the whole
// prompt does.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>

#include "serve_fixture.hpp"

namespace spattn {
namespace {

using json = nlohmann::json;

json post_json(httplib::Client& c, const json& body) {
  const auto r = c.Post("/v1/completions", body.dump(), "application/json");
  EXPECT_TRUE(r) << "no response: " << httplib::to_string(r.error());
  if (!r) return json();
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body);
}

// A streamed completion's text and its last chunk's usage (the stream must end with [DONE]).
struct StreamResult {
  std::string text;
  json usage;
  bool done = false;
};
StreamResult post_stream(httplib::Client& c, json body) {
  body["stream"] = true;
  StreamResult s;
  const auto r = c.Post("/v1/completions", body.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return s;
  EXPECT_EQ(r->status, 200);
  size_t at = 0;
  while ((at = r->body.find("data: ", at)) != std::string::npos) {
    const size_t end = r->body.find("\n\n", at);
    const std::string d = r->body.substr(at + 6, end - at - 6);
    at = end;
    if (d == "[DONE]") {
      s.done = true;
      continue;
    }
    const json j = json::parse(d);
    if (j.contains("prompt_progress")) continue;
    s.text += j["choices"].at(0)["text"].get<std::string>();
    if (j.contains("usage") && !j["usage"].is_null()) s.usage = j["usage"];
  }
  return s;
}

double metric(const std::string& page, const std::string& name) {
  const size_t at = page.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(page.substr(at + name.size() + 2));
}

// Lets through the first `n` threads to arrive only together (or after 10 s).
struct Barrier {
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0, n;
  explicit Barrier(int count) : n(count) {}
  bool arrive() {
    std::unique_lock<std::mutex> l(m);
    if (arrived >= n) return true;
    ++arrived;
    cv.notify_all();
    return cv.wait_for(l, std::chrono::seconds(10), [&] { return arrived >= n; });
  }
};

const char* kPromptA = "Once upon a time, a little dog";
const char* kPromptB = "The girl had a red ball and she";

TEST(ServeSlotsReal, TwoStreamsOnTwoSlotsEqualEachAlone) {
  NEED_STORIES();
  std::string alone_a, alone_b;
  {
    Running srv(options(), *model);
    auto c = srv.client();
    alone_a = post_json(
        c, {{"prompt", kPromptA}, {"max_tokens", 30}, {"temperature", 0}})["choices"][0]["text"];
    alone_b = post_json(
        c, {{"prompt", kPromptB}, {"max_tokens", 30}, {"temperature", 0}})["choices"][0]["text"];
  }
  serve::ServeOptions o = options();
  o.slots = 2;
  o.metrics = true;
  Barrier both(2);
  std::atomic<bool> together{true};
  o.test_hook = [&](const std::string& ev) {
    if (ev == "slot" && !both.arrive()) together = false;
  };
  Running srv(o, *model);
  auto run = [&](const char* prompt) {
    auto c = srv.client();
    return post_stream(c, {{"prompt", prompt}, {"max_tokens", 30}, {"temperature", 0}});
  };
  auto fa = std::async(std::launch::async, run, kPromptA);
  auto fb = std::async(std::launch::async, run, kPromptB);
  const StreamResult a = fa.get(), b = fb.get();
  EXPECT_TRUE(together) << "the two requests did not hold their slots at once";
  EXPECT_TRUE(a.done);
  EXPECT_TRUE(b.done);
  EXPECT_EQ(a.text, alone_a);
  EXPECT_EQ(b.text, alone_b);

  auto c = srv.client();
  const json props = json::parse(c.Get("/props")->body);
  EXPECT_EQ(props["total_slots"], 2);
  const json& slots = props["spattn"]["slots"];
  ASSERT_EQ(slots.size(), 2u);
  for (const json& s : slots) {
    EXPECT_EQ(s["state"], "idle");
    EXPECT_EQ(s["requests"], 1);
    EXPECT_GT(s["kv_tokens"].get<int64_t>(), 0);
  }
  // A second turn of B goes to the slot holding B's tokens: all but its last prompt token
  // come from that cache.
  const json b2 = post_json(c, {{"prompt", std::string(kPromptB) + b.text + " Then"},
                                {"max_tokens", 4},
                                {"temperature", 0}});
  EXPECT_GE(b2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(),
            b.usage["prompt_tokens"].get<int64_t>());
  const std::string m = c.Get("/metrics")->body;
  EXPECT_EQ(metric(m, "spattn:slot_requests_total{slot=\"0\"}") +
                metric(m, "spattn:slot_requests_total{slot=\"1\"}"),
            3);
  EXPECT_EQ(metric(m, "spattn:slot_processing{slot=\"0\"}"), 0);
  EXPECT_EQ(metric(m, "spattn:kv_cache_tokens"),
            metric(m, "spattn:slot_kv_tokens{slot=\"0\"}") +
                metric(m, "spattn:slot_kv_tokens{slot=\"1\"}"));
}

// chunked_h2o (batches of 32, chunks of 16, a memory of 16 tokens): the second turn reuses the
// first turn's tokens up to the last kept batch boundary, says so in cached_tokens, and answers
// as a server that prefills the whole second prompt afresh.
// A short prompt that shares only the BOS token with a slot's long document takes the other
// slot (the one holding fewer tokens), so the document's next turn still finds it cached.
TEST(ServeSlotsReal, AnUnrelatedPromptLeavesALongCachedDocumentAlone) {
  NEED_STORIES();
  serve::ServeOptions o = options();
  o.slots = 2;
  std::string doc = "Once upon a time there was a big red ball.";
  for (int i = 0; i < 4; ++i)
    doc += " The ball rolled down the hill and the children ran after it.";
  Running srv(o, *model);
  auto c = srv.client();
  const json a = post_json(c, {{"prompt", doc}, {"max_tokens", 1}, {"temperature", 0}});
  const int64_t n_doc = a["usage"]["prompt_tokens"];
  ASSERT_GT(n_doc, 40);
  for (const char* p : {kPromptA, kPromptB, kPromptA})  // unrelated, short
    post_json(c, {{"prompt", p}, {"max_tokens", 2}, {"temperature", 0}});
  const json b =
      post_json(c, {{"prompt", doc + " Then it stopped."}, {"max_tokens", 1}, {"temperature", 0}});
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], n_doc)
      << "the document was evicted";
}

TEST(ServeSlotsReal, ChunkedH2OSecondTurnReusesAKeptBoundary) {
  NEED_STORIES();
  serve::ServeOptions o = options();
  o.r.attn = "chunked_h2o";
  o.r.n_batch = 32;
  o.r.n_ubatch = 16;
  o.r.h2o_local = 8;
  o.r.h2o_heavy = 8;
  std::string first = "Once upon a time there was a big red ball.";
  for (int i = 0; i < 3; ++i)
    first += " The ball rolled down the hill and the children ran after it.";
  const std::string second = first + " Then the sun came out and they sat on the grass to rest.";
  const json req2 = {{"prompt", second}, {"max_tokens", 12}, {"temperature", 0}};
  Running srv(o, *model);
  auto c = srv.client();
  const json a = post_json(c, {{"prompt", first}, {"max_tokens", 12}, {"temperature", 0}});
  const int64_t n1 = a["usage"]["prompt_tokens"];
  ASSERT_GT(n1, 64);
  EXPECT_EQ(a["usage"]["spattn"]["prefill"], "chunked_h2o");
  const json b = post_json(c, req2);
  const int64_t cached = b["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GT(cached, 0);
  // -ub 16: the chunk ends inside a batch of 32 are off chunked_h2o's 64-key tiles, so the
  // kept boundaries are the batch ends.
  EXPECT_EQ(cached % 32, 0) << "not a batch boundary";
  EXPECT_GT(cached, n1 - 1 - 32) << "not the last kept boundary inside the first prompt";
  json fresh_req = req2;
  fresh_req["cache_prompt"] = false;
  const json fresh = post_json(c, fresh_req);
  EXPECT_EQ(fresh["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(b["choices"][0]["text"], fresh["choices"][0]["text"]);
  // The reused run computes only the rest's attention.
  EXPECT_LT(b["usage"]["spattn"]["score_entries"].get<int64_t>(),
            fresh["usage"]["spattn"]["score_entries"].get<int64_t>());
}

}  // namespace
}  // namespace spattn
