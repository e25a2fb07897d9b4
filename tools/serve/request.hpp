// The bodies `spattn serve` accepts, parsed and checked before anything runs: the OpenAI
// completion and chat requests (with llama-server's extras: cache_prompt, and spattn's own
// "spattn": {"attn": SPEC}) and llama-server's /tokenize and /detokenize. Untrusted bytes:
// every field is checked for its type and range, and a body that is not valid UTF-8 or not
// JSON is refused; a failure is a RequestError (HTTP 400) naming the field. Checks that need
// the model (context length, vocabulary size, the attention spec) are the server's.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "spattn/chat_template.hpp"
#include <string_view>
#include <vector>

#include "../sampler.hpp"

namespace spattn::serve {

// An error a request earns: the HTTP status, OpenAI's error type and the parameter at fault.
struct RequestError : std::runtime_error {
  RequestError(int status, std::string type, const std::string& message, std::string param = "")
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)) {}
  int status;
  std::string type;   // "invalid_request_error", "authentication_error", ...
  std::string param;  // the field at fault, or ""
};
// A 400 invalid_request_error.
[[noreturn]] void bad_request(const std::string& message, const std::string& param = "");

// Limits on what one request may ask for (absurd values are refused, not clamped).
inline constexpr int64_t kMaxTokensLimit = 1 << 20;
inline constexpr double kMaxTemperature = 10.0;
inline constexpr size_t kMaxStops = 4, kMaxStopBytes = 256;
inline constexpr size_t kMaxMessages = 4096;
// /tokenize's content (its answer, with pieces, is many times larger).
inline constexpr size_t kMaxTokenizeBytes = 1u << 20;

using ChatMessage = spattn::ChatMessage;

struct GenerateRequest {
  bool chat = false;
  std::string prompt;                  // /v1/completions: the prompt as text, or
  std::vector<int32_t> prompt_tokens;  // ... as token ids (prompt_is_tokens)
  bool prompt_is_tokens = false;
  std::vector<ChatMessage> messages;  // /v1/chat/completions
  std::string model;                  // echoed back; one model is served whatever it says
  int64_t max_tokens = -1;            // -1: until end of generation or a full context
  cli::SamplingParams sampling;       // llama-server's defaults unless given
  bool seed_given = false;
  std::vector<std::string> stop;
  bool stream = false;
  bool ignore_eos = false;   // llama-server's: generate past end-of-generation tokens
  bool cache_prompt = true;  // llama-server's: reuse the slot's cached prefix
  std::string attn;          // "spattn": {"attn": SPEC}; "" for the server's --attn
};

// llama-server's sampling defaults (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05).
cli::SamplingParams default_sampling();

// Parses a /v1/completions (chat false) or /v1/chat/completions body.
GenerateRequest parse_generate(std::string_view body, bool chat);

struct TokenizeRequest {
  std::string content;
  bool add_special = false;  // llama-server's default: no BOS
  bool with_pieces = false;
};
TokenizeRequest parse_tokenize(std::string_view body);
// The ids of a /detokenize body (not yet checked against the vocabulary).
std::vector<int32_t> parse_detokenize(std::string_view body);

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s);

}  // namespace spattn::serve
