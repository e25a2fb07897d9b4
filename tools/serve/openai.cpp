#include "openai.hpp"

namespace spattn::serve {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json usage_json(const Usage& u) {
  json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  // What ran: the attention of the prefill and how much of the causal score matrix it computed
  // (entries cover the tokens this request prefilled), and decode's (the server's
  // --attn-decode) keys read against the keys its steps could see.
  j["spattn"] = {
      {"attn", u.attn},
      {"prefill", u.prefill},
      {"prefill_ms", u.prefill_ms},
      {"ttft_ms", u.ttft_ms},
      {"decode_ms", u.decode_ms},
      {"score_entries", u.score_entries},
      {"causal_entries", u.causal_entries},
      {"skipped_fraction",
       u.causal_entries > 0 ? 1.0 - double(u.score_entries) / double(u.causal_entries) : 0.0},
      {"attn_decode", u.attn_decode},
      {"decode_keys_read", u.decode_keys_read},
      {"decode_keys_total", u.decode_keys_total}};
  return j;
}

json error_json(const std::string& message, const std::string& type, const std::string& param) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json() : json(param)},
            {"code", json()}}}};
}

namespace {
json head(const std::string& id, int64_t created, const std::string& model, const char* object) {
  return {{"id", id}, {"object", object}, {"created", created}, {"model", model}};
}
json reason(const std::string& r) { return r.empty() ? json() : json(r); }
}  // namespace

json completion_json(const std::string& id, int64_t created, const std::string& model, bool chat,
                     const std::string& text, const std::string& finish_reason, const Usage& u) {
  json j = head(id, created, model, chat ? "chat.completion" : "text_completion");
  json choice = {{"index", 0}, {"finish_reason", reason(finish_reason)}, {"logprobs", json()}};
  if (chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(u);
  return j;
}

json chunk_json(const std::string& id, int64_t created, const std::string& model, bool chat,
                const std::string& text, bool first, const std::string& finish_reason,
                const Usage* usage) {
  json j = head(id, created, model, chat ? "chat.completion.chunk" : "text_completion");
  json choice = {{"index", 0}, {"finish_reason", reason(finish_reason)}, {"logprobs", json()}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || finish_reason.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  j["choices"] = json::array({choice});
  if (usage) j["usage"] = usage_json(*usage);
  return j;
}

json progress_json(const std::string& id, int64_t created, const std::string& model, bool chat,
                   int64_t total, int64_t cached, int64_t processed, double ms) {
  json j = head(id, created, model, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["prompt_progress"] = {
      {"total", total}, {"cache", cached}, {"processed", processed}, {"time_ms", ms}};
  return j;
}

}  // namespace spattn::serve
