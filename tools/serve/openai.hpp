// The JSON shapes of `spattn serve`'s answers: OpenAI's (completion, chat completion, their
// stream chunks, usage, errors, the model list) and llama-server's where OpenAI has none
// (prompt_progress). Text may end inside a UTF-8 character the next token completes; every
// dump here replaces bytes that are not UTF-8 rather than throwing.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace spattn::serve {

using json = nlohmann::json;

// What one generation did, for `usage`.
struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::string attn;     // the prefill attention spec that ran
  std::string prefill;  // the schedule: dense, chunked_h2o or method
  double prefill_ms = 0, ttft_ms = 0, decode_ms = 0;
  int64_t score_entries = 0, causal_entries = 0;        // attention entries computed / causal total
  std::string attn_decode;                              // the server's --attn-decode
  int64_t decode_keys_read = 0, decode_keys_total = 0;  // keys decode read / could see, all layers
};

std::string dump(const json& j);  // compact, invalid UTF-8 replaced by U+FFFD

json usage_json(const Usage& u);
json error_json(const std::string& message, const std::string& type, const std::string& param);

// A whole (non-streamed) answer. finish_reason: "stop" or "length".
json completion_json(const std::string& id, int64_t created, const std::string& model, bool chat,
                     const std::string& text, const std::string& finish_reason, const Usage& u);
// One stream chunk carrying `text` (the role too on a chat's first chunk); finish_reason and
// usage only on the last ("" / null otherwise).
json chunk_json(const std::string& id, int64_t created, const std::string& model, bool chat,
                const std::string& text, bool first, const std::string& finish_reason,
                const Usage* usage);
// A stream chunk with no choices reporting prefill progress, as llama-server's
// return_progress: prompt tokens total, taken from the cache, processed so far, and ms.
json progress_json(const std::string& id, int64_t created, const std::string& model, bool chat,
                   int64_t total, int64_t cached, int64_t processed, double ms);

}  // namespace spattn::serve
