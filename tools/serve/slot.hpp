// One slot of `spattn serve`: a Session (its KV cache) that serves one request at a time, and
// the tokens its cache holds, so a request that starts with them prefills only the rest
// (llama-server's cache_prompt). A request naming another attention than the slot's session
// runs gets a fresh session with it.
//
// Prefix reuse is only taken where keeping the prefix computes what a fresh prefill would
// (Session::reuse_point): with the dense schedule any prefix (the prefix's rows are the same
// whichever call computed them; a reused prefix changes the logits only by the order of sums,
// as llama-server's cache_prompt does); with chunked_h2o the longest -ub chunk boundary whose
// layer state the session kept, bit for bit; a library method runs per -ub chunk, so method
// mode prefills the whole prompt each time.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "../runner.hpp"
#include "../sampler.hpp"
#include "openai.hpp"
#include "turn.hpp"

namespace spattn::serve {

struct SlotRequest {
  std::vector<int32_t> tokens;  // the prompt (at most the context)
  cli::SamplingParams sampling;
  int64_t max_tokens = -1;  // -1: until end of generation or a full context
  std::vector<std::string> stop;
  bool ignore_eos = false;
  std::string attn;  // the prefill attention spec (the server's --attn when not asked)
  bool cache_prompt = true;
};

struct SlotEvents {
  // After each prefilled piece: prompt tokens taken from the cache, prefilled so far (of the
  // rest), the rest's total. May throw to cancel (the prefill then rolls back).
  std::function<void(int64_t cached, int64_t done, int64_t total)> progress;
  // Text that is final (no stop sequence can still start in it, no UTF-8 character cut).
  std::function<void(const std::string& text)> text;
  // Polled between tokens; true stops the generation.
  std::function<bool()> cancelled;
};

struct SlotResult {
  std::string text;           // the whole generated text, stop sequence left out
  std::string finish_reason;  // "stop" (end of generation or a stop sequence) or "length"
  bool cancelled = false;
  Usage usage;
};

class Slot {
 public:
  Slot(const model::Model& model, const Tokenizer& tok, const cli::RunnerOptions& defaults);
  // Throws spattn::Error for a bad attention spec, before anything runs. With a turn, every
  // step of work (a prefill piece, a decoded token) is taken inside it and every event is
  // called outside it (turn.hpp).
  SlotResult generate(const SlotRequest& req, const SlotEvents& ev, Turn* turn = nullptr);
  // How many of the prompt's first tokens its cache holds (before reuse_point rounds down).
  int64_t common_prefix(const std::vector<int32_t>& prompt) const;
  const std::string& attn() const { return session_attn_; }
  int64_t n_ctx() const { return defaults_.n_ctx; }
  int64_t cached_tokens() const { return int64_t(cached_.size()); }
  // The tokens its session's KV cache holds, reusable or not.
  int64_t kv_tokens() const { return session_ ? session_->n_past() : 0; }

 private:
  model::Session& session_for(const std::string& attn);
  const model::Model& model_;
  const Tokenizer& tok_;
  cli::RunnerOptions defaults_;
  std::optional<model::Session> session_;
  std::string session_attn_;
  std::vector<int32_t> cached_;  // the tokens the session's cache holds
};

// How many bytes at the end of `text` must wait: the longest tail that starts a stop
// sequence, or an incomplete UTF-8 character.
size_t held_back_bytes(const std::string& text, const std::vector<std::string>& stop);

}  // namespace spattn::serve
