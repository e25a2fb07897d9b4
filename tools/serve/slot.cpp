#include "slot.hpp"

#include <algorithm>
#include <chrono>

#include "spattn/error.hpp"

namespace spattn::serve {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
}  // namespace

size_t held_back_bytes(const std::string& text, const std::vector<std::string>& stop) {
  size_t hold = 0;
  for (const std::string& s : stop)
    for (size_t k = std::min(s.size() - 1, text.size()); k > hold; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  // An incomplete UTF-8 character at the end: its lead byte within the last 3 bytes.
  for (size_t k = 1; k <= std::min<size_t>(3, text.size()); ++k) {
    const unsigned char c = static_cast<unsigned char>(text[text.size() - k]);
    if ((c & 0xc0) == 0x80) continue;  // a continuation byte: look further back
    const size_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
    if (len > k) hold = std::max(hold, k);
    break;
  }
  return hold;
}

Slot::Slot(const model::Model& model, const Tokenizer& tok, const cli::RunnerOptions& defaults)
    : model_(model), tok_(tok), defaults_(defaults) {}

model::Session& Slot::session_for(const std::string& attn) {
  if (!session_ || attn != session_attn_) {
    model::SessionOptions so = cli::session_options(defaults_, attn);  // throws on a bad spec
    // chunked_h2o's states at the last two -ub chunk boundaries of each prompt: a chat's next
    // turn goes on from the chunk boundary before the previous prompt's end.
    so.h2o_keep = 2;
    session_.reset();  // one session's cache at a time
    cached_.clear();
    session_.emplace(model_, so);
    session_attn_ = attn;
  }
  return *session_;
}

int64_t Slot::common_prefix(const std::vector<int32_t>& prompt) const {
  const size_t n = std::min(cached_.size(), prompt.size());
  size_t i = 0;
  while (i < n && cached_[i] == prompt[i]) ++i;
  return int64_t(i);
}

SlotResult Slot::generate(const SlotRequest& req, const SlotEvents& ev, Turn* turn) {
  SPATTN_CHECK(!req.tokens.empty(), "the prompt has no tokens");
  SPATTN_CHECK(int64_t(req.tokens.size()) <= defaults_.n_ctx, "the prompt has ", req.tokens.size(),
               " tokens, more than the context of ", defaults_.n_ctx);
  TurnHold hold(turn);
  model::Session& s = session_for(req.attn);
  SlotResult r;
  r.usage.attn = req.attn;
  r.usage.prompt_tokens = int64_t(req.tokens.size());

  // The prefix to keep: the cached tokens the prompt starts with, leaving at least one token
  // to prefill (its logits give the first token), down to where the session can go on as a
  // fresh prefill would (chunked_h2o: a kept chunk boundary; method mode: nothing).
  int64_t keep = 0;
  if (req.cache_prompt) {
    const size_t n = std::min(cached_.size(), req.tokens.size() - 1);
    while (keep < int64_t(n) && cached_[size_t(keep)] == req.tokens[size_t(keep)]) ++keep;
    keep = s.reuse_point(keep);
  }
  s.truncate(keep);
  cached_.resize(size_t(keep));
  s.reset_timings();
  r.usage.cached_tokens = keep;

  const auto t0 = Clock::now();
  std::vector<float> logits(size_t(model_.config().n_vocab));
  const std::span<const int32_t> rest(req.tokens.data() + keep, req.tokens.size() - size_t(keep));
  model::PrefillProgress progress;
  if (ev.progress)
    progress = [&](int64_t done, int64_t total) {
      hold.leave();
      ev.progress(keep, done, total);
      hold.enter();
    };
  if (ev.progress) {
    hold.leave();
    ev.progress(keep, 0, int64_t(rest.size()));
    hold.enter();
  }
  s.prefill(rest, logits.data(), int64_t(rest.size()) - 1, progress);
  // What the global layers ran: chunked_h2o on a prompt of one chunk runs dense, and usage
  // says so.
  r.usage.prefill = s.prefill_ran();
  cached_ = req.tokens;

  cli::Sampler sampler(req.sampling);
  size_t sent = 0;  // r.text's bytes already handed to ev.text
  r.finish_reason = "length";
  int32_t tok = sampler.sample(logits);
  r.usage.ttft_ms = ms_since(t0);
  while (req.max_tokens != 0) {
    if (!req.ignore_eos && tok_.is_eog(tok)) {
      r.finish_reason = "stop";
      break;
    }
    ++r.usage.completion_tokens;
    r.text += tok_.piece(tok, false);
    // A stop sequence ends the text where it begins (searched from where it could first be).
    bool stopped = false;
    for (const std::string& st : req.stop) {
      const size_t from = sent >= st.size() ? sent - st.size() + 1 : 0;
      const size_t at = r.text.find(st, from);
      if (at != std::string::npos) {
        r.text.resize(at);
        stopped = true;
      }
    }
    if (stopped) {
      r.finish_reason = "stop";
      break;
    }
    const size_t ready = r.text.size() - held_back_bytes(r.text, req.stop);
    hold.leave();  // between tokens: the other slots' steps and this client's text
    if (ev.text && ready > sent) ev.text(r.text.substr(sent, ready - sent));
    sent = std::max(sent, ready);
    if (req.max_tokens >= 0 && r.usage.completion_tokens >= req.max_tokens) break;
    if (s.n_past() >= defaults_.n_ctx) break;  // the context is full: "length"
    if (ev.cancelled && ev.cancelled()) {
      r.cancelled = true;
      break;
    }
    hold.enter();
    s.decode(tok, logits.data());
    cached_.push_back(tok);
    tok = sampler.sample(logits);
  }
  hold.leave();
  if (ev.text && r.text.size() > sent) ev.text(r.text.substr(sent));
  const model::Timings& t = s.timings();
  r.usage.prefill_ms = t.prefill_ms;
  r.usage.decode_ms = t.decode_ms;
  r.usage.score_entries = t.prefill_stats.score_entries;
  r.usage.causal_entries = t.prefill_stats.causal_entries;
  r.usage.attn_decode = defaults_.attn_decode;
  r.usage.decode_keys_read = t.decode_keys_read;
  r.usage.decode_keys_total = t.decode_keys_total;
  return r;
}

}  // namespace spattn::serve
