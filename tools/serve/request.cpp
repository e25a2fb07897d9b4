#include "request.hpp"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace spattn::serve {

using json = nlohmann::json;

void bad_request(const std::string& message, const std::string& param) {
  throw RequestError(400, "invalid_request_error", message, param);
}

cli::SamplingParams default_sampling() {
  cli::SamplingParams p;
  p.temperature = 0.8;
  p.top_k = 40;
  p.top_p = 0.95;
  p.min_p = 0.05;
  return p;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    if ((c & 0xe0) == 0xc0)
      len = 2, cp = c & 0x1f;
    else if ((c & 0xf0) == 0xe0)
      len = 3, cp = c & 0x0f;
    else if ((c & 0xf8) == 0xf0)
      len = 4, cp = c & 0x07;
    else
      return false;
    if (i + size_t(len) > n) return false;
    for (int k = 1; k < len; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + size_t(k)]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += size_t(len);
  }
  return true;
}

namespace {

json parse_body(std::string_view body) {
  if (!valid_utf8(body)) bad_request("the request body is not valid UTF-8");
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad_request("the request body is not valid JSON");
  if (!j.is_object()) bad_request("the request body must be a JSON object");
  return j;
}

const json* field(const json& j, const char* name) {
  const auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const json& j, const char* name, bool dflt) {
  const json* f = field(j, name);
  if (!f) return dflt;
  if (!f->is_boolean()) bad_request(std::string("'") + name + "' must be a boolean", name);
  return f->get<bool>();
}

std::string get_string(const json& j, const char* name, const std::string& dflt) {
  const json* f = field(j, name);
  if (!f) return dflt;
  if (!f->is_string()) bad_request(std::string("'") + name + "' must be a string", name);
  return f->get<std::string>();
}

// An integer in [lo, hi]; a number with a fraction, or out of range, is refused.
int64_t get_int(const json& j, const char* name, int64_t dflt, int64_t lo, int64_t hi) {
  const json* f = field(j, name);
  if (!f) return dflt;
  int64_t v = 0;
  if (f->is_number_integer() && !(f->is_number_unsigned() && f->get<uint64_t>() > uint64_t(hi))) {
    v = f->get<int64_t>();
  } else if (f->is_number_float() && std::isfinite(f->get<double>()) &&
             f->get<double>() == std::floor(f->get<double>()) &&
             std::fabs(f->get<double>()) < 9e15) {
    v = int64_t(f->get<double>());
  } else if (f->is_number()) {
    bad_request(std::string("'") + name + "' must be an integer in [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "]",
                name);
  } else {
    bad_request(std::string("'") + name + "' must be an integer", name);
  }
  if (v < lo || v > hi)
    bad_request(std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "], got " + std::to_string(v),
                name);
  return v;
}

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

double get_number(const json& j, const char* name, double dflt, double lo, double hi) {
  const json* f = field(j, name);
  if (!f) return dflt;
  if (!f->is_number()) bad_request(std::string("'") + name + "' must be a number", name);
  const double v = f->get<double>();
  if (!(v >= lo && v <= hi))
    bad_request(
        std::string("'") + name + "' must be in [" + num(lo) + ", " + num(hi) + "], got " + num(v),
        name);
  return v;
}

std::vector<int32_t> get_token_ids(const json& a, const char* name) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const json& t : a) {
    if (!t.is_number_integer() || (t.is_number_unsigned() && t.get<uint64_t>() > INT32_MAX) ||
        t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      bad_request(std::string("'") + name + "' must hold token ids (integers >= 0)", name);
    ids.push_back(int32_t(t.get<int64_t>()));
  }
  return ids;
}

// OpenAI's content: a string, or an array of parts of which the text parts are joined.
std::string message_content(const json& c) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array())
    bad_request("a message's 'content' must be a string or an array of parts", "messages");
  std::string s;
  for (const json& part : c) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
        !part["text"].is_string())
      bad_request("only text content parts ({\"type\": \"text\", \"text\": ...}) are served",
                  "messages");
    s += part["text"].get<std::string>();
  }
  return s;
}

}  // namespace

namespace {

// Fields of OpenAI's or llama-server's requests that change the output and that spattn does
// not implement, with the value that asks for nothing: a request giving another value gets a
// 400 naming the field instead of an answer that silently ignored it.
struct Unsupported {
  const char* name;
  bool (*neutral)(const nlohmann::json&);
};
bool is_false_or_zero(const nlohmann::json& v) {
  return (v.is_boolean() && !v.get<bool>()) || (v.is_number() && v.get<double>() == 0);
}
bool is_empty(const nlohmann::json& v) {
  return (v.is_object() || v.is_array() || v.is_string()) && v.empty();
}
bool is_one(const nlohmann::json& v) { return v.is_number() && v.get<double>() == 1; }
bool is_text_format(const nlohmann::json& v) {
  const auto t = v.is_object() ? v.find("type") : v.end();
  return t != v.end() && t->is_string() && t->get<std::string>() == "text";
}
bool is_none_choice(const nlohmann::json& v) {
  return v.is_string() && v.get<std::string>() == "none";
}
constexpr Unsupported kUnsupported[] = {
    {"logit_bias", is_empty},
    {"logprobs", is_false_or_zero},
    {"top_logprobs", is_false_or_zero},
    {"n_probs", is_false_or_zero},
    {"presence_penalty", is_false_or_zero},
    {"frequency_penalty", is_false_or_zero},
    {"repeat_penalty", is_one},
    {"mirostat", is_false_or_zero},
    {"typical_p", is_one},
    {"echo", is_false_or_zero},
    {"best_of", is_one},
    {"suffix", is_empty},
    {"grammar", is_empty},
    {"json_schema", is_empty},
    {"response_format", is_text_format},
    {"tools", is_empty},
    {"tool_choice", is_none_choice},
};

void refuse_unsupported(const nlohmann::json& j) {
  for (const Unsupported& u : kUnsupported)
    if (const nlohmann::json* f = field(j, u.name); f && !u.neutral(*f))
      bad_request(std::string("'") + u.name + "' is not supported by this server (leave it out)",
                  u.name);
}

}  // namespace

GenerateRequest parse_generate(std::string_view body, bool chat) {
  const json j = parse_body(body);
  GenerateRequest r;
  r.chat = chat;
  if (chat) {
    const json* m = field(j, "messages");
    if (!m || !m->is_array() || m->empty())
      bad_request("'messages' must be a non-empty array", "messages");
    if (m->size() > kMaxMessages) bad_request("too many messages", "messages");
    for (const json& msg : *m) {
      if (!msg.is_object()) bad_request("each message must be an object", "messages");
      const json* role = field(msg, "role");
      if (!role || !role->is_string() || role->get<std::string>().empty() ||
          role->get<std::string>().size() > 64)
        bad_request("each message needs a 'role' string", "messages");
      const json* content = field(msg, "content");
      r.messages.push_back({role->get<std::string>(), content ? message_content(*content) : ""});
    }
  } else {
    const json* p = field(j, "prompt");
    if (!p) bad_request("'prompt' is required", "prompt");
    if (p->is_string()) {
      r.prompt = p->get<std::string>();
    } else if (p->is_array() && !p->empty() && p->front().is_number()) {
      r.prompt_tokens = get_token_ids(*p, "prompt");
      r.prompt_is_tokens = true;
    } else if (p->is_array() && p->size() == 1 && p->front().is_string()) {
      r.prompt = p->front().get<std::string>();
    } else {
      bad_request("'prompt' must be a string or an array of token ids (one prompt per request)",
                  "prompt");
    }
  }
  r.model = get_string(j, "model", "");
  // OpenAI's newer name for chat first, then the classic one, then llama-server's n_predict.
  r.max_tokens = get_int(j, "max_completion_tokens", -1, -1, kMaxTokensLimit);
  if (r.max_tokens < 0) r.max_tokens = get_int(j, "max_tokens", -1, -1, kMaxTokensLimit);
  if (r.max_tokens < 0) r.max_tokens = get_int(j, "n_predict", -1, -1, kMaxTokensLimit);
  if (get_int(j, "n", 1, 1, 1) != 1) bad_request("'n' must be 1", "n");
  r.sampling = default_sampling();
  r.sampling.temperature = get_number(j, "temperature", r.sampling.temperature, 0, kMaxTemperature);
  r.sampling.top_p = get_number(j, "top_p", r.sampling.top_p, 0, 1);
  if (r.sampling.top_p == 0) r.sampling.top_p = 1e-9;  // OpenAI's 0: only the top token
  r.sampling.top_k = get_int(j, "top_k", r.sampling.top_k, 0, INT32_MAX);
  r.sampling.min_p = get_number(j, "min_p", r.sampling.min_p, 0, 1);
  r.ignore_eos = get_bool(j, "ignore_eos", false);  // llama-server's
  refuse_unsupported(j);
  if (const json* s = field(j, "seed")) {
    // llama-server's -1: a random seed; otherwise any 64-bit value.
    if (s->is_number_unsigned()) {
      r.sampling.seed = s->get<uint64_t>();
      r.seed_given = true;
    } else {
      const int64_t v = get_int(j, "seed", -1, -1, std::numeric_limits<int64_t>::max());
      r.seed_given = v >= 0;
      if (r.seed_given) r.sampling.seed = uint64_t(v);
    }
  }
  if (const json* s = field(j, "stop")) {
    if (s->is_string()) {
      r.stop.push_back(s->get<std::string>());
    } else if (s->is_array() && s->size() <= kMaxStops) {
      for (const json& x : *s) {
        if (!x.is_string()) bad_request("'stop' must be a string or an array of strings", "stop");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      bad_request("'stop' must be a string or an array of at most 4 strings", "stop");
    }
    for (const std::string& x : r.stop)
      if (x.empty() || x.size() > kMaxStopBytes)
        bad_request("each stop sequence must have 1 to 256 bytes", "stop");
  }
  r.stream = get_bool(j, "stream", false);
  r.cache_prompt = get_bool(j, "cache_prompt", true);
  if (const json* s = field(j, "spattn")) {
    if (!s->is_object()) bad_request("'spattn' must be an object", "spattn");
    r.attn = get_string(*s, "attn", "");
    if (s->contains("attn") && r.attn.empty()) bad_request("'spattn.attn' is empty", "spattn.attn");
    if (r.attn.size() > 1024) bad_request("'spattn.attn' is too long", "spattn.attn");
  }
  return r;
}

TokenizeRequest parse_tokenize(std::string_view body) {
  const json j = parse_body(body);
  TokenizeRequest r;
  const json* c = field(j, "content");
  if (!c || !c->is_string()) bad_request("'content' must be a string", "content");
  r.content = c->get<std::string>();
  if (r.content.size() > kMaxTokenizeBytes)
    bad_request("'content' is over the limit of " + std::to_string(kMaxTokenizeBytes) + " bytes",
                "content");
  r.add_special = get_bool(j, "add_special", false);
  r.with_pieces = get_bool(j, "with_pieces", false);
  return r;
}

std::vector<int32_t> parse_detokenize(std::string_view body) {
  const json j = parse_body(body);
  const json* t = field(j, "tokens");
  if (!t || !t->is_array()) bad_request("'tokens' must be an array of token ids", "tokens");
  return get_token_ids(*t, "tokens");
}

}  // namespace spattn::serve
