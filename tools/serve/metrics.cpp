#include "metrics.hpp"

#include <fmt/format.h>

#include <sstream>

#include "spattn/method.hpp"

namespace spattn::serve {

template <size_t N>
void Metrics::observe(Histogram& h, const std::array<double, N>& bounds, double v) {
  size_t b = 0;
  while (b < N && v > bounds[b]) ++b;
  ++h.counts[b];
  h.sum += v;
  ++h.n;
}

// The method's name, never its parameters: labels come from a closed set (the registry's
// names), where the whole spec let 200 requests with `a_shape:sink=N` add 200 series.
std::string Metrics::attn_label(const std::string& spec) {
  try {
    return parse_method_spec(spec).name;
  } catch (const std::exception&) {
    return "other";
  }
}

void Metrics::record(const Usage& u) {
  std::lock_guard<std::mutex> l(mu_);
  prompt_tokens_ += u.prompt_tokens - u.cached_tokens;
  cached_tokens_ += u.cached_tokens;
  prompt_s_ += u.prefill_ms / 1e3;
  predicted_tokens_ += u.completion_tokens;
  predicted_s_ += u.decode_ms / 1e3;
  ++by_attn_[attn_label(u.attn)];
  observe(ttft_, kTtftSeconds, u.ttft_ms / 1e3);
  // The rate of the tokens after the first (which prefill gives): none for a 1-token answer.
  if (u.completion_tokens > 1 && u.decode_ms > 0)
    observe(decode_rate_, kDecodeTokPerS, 1e3 * double(u.completion_tokens - 1) / u.decode_ms);
}

void Metrics::error(int status) {
  std::lock_guard<std::mutex> l(mu_);
  ++errors_[status];
}

namespace {

void head(std::ostringstream& os, const char* name, const char* type, const char* help) {
  os << "# HELP spattn:" << name << ' ' << help << "\n# TYPE spattn:" << name << ' ' << type
     << '\n';
}

template <class T>
void one(std::ostringstream& os, const char* name, const char* type, const char* help, T v) {
  head(os, name, type, help);
  os << "spattn:" << name << ' ' << fmt::format("{}", v) << '\n';
}

// A label value with Prometheus's escapes (backslash, quote, newline).
std::string label(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

}  // namespace

std::string Metrics::render(int64_t processing, int64_t deferred, int64_t n_ctx,
                            const std::vector<SlotState>& slots) const {
  std::lock_guard<std::mutex> l(mu_);
  int64_t kv_tokens = 0;
  for (const SlotState& s : slots) kv_tokens += s.kv_tokens;
  const int64_t kv_capacity = n_ctx * int64_t(slots.size());
  std::ostringstream os;
  one(os, "prompt_tokens_total", "counter", "Prompt tokens prefilled.", prompt_tokens_);
  one(os, "prompt_seconds_total", "counter", "Prefill time.", prompt_s_);
  one(os, "prompt_cached_tokens_total", "counter",
      "Prompt tokens taken from a slot's cache instead of prefilled.", cached_tokens_);
  one(os, "tokens_predicted_total", "counter", "Tokens generated.", predicted_tokens_);
  one(os, "tokens_predicted_seconds_total", "counter", "Decode time.", predicted_s_);
  one(os, "requests_processing", "gauge", "Requests generating.", processing);
  one(os, "requests_deferred", "gauge", "Requests waiting for a slot.", deferred);
  one(os, "kv_cache_tokens", "gauge", "Tokens held in the slots' KV caches.", kv_tokens);
  one(os, "kv_cache_usage_ratio", "gauge",
      "KV cache use (tokens over the slots' contexts together).",
      kv_capacity > 0 ? double(kv_tokens) / double(kv_capacity) : 0.0);
  head(os, "slot_kv_tokens", "gauge", "Tokens held in each slot's KV cache.");
  for (const SlotState& s : slots)
    os << "spattn:slot_kv_tokens{slot=\"" << s.id << "\"} " << s.kv_tokens << '\n';
  head(os, "slot_processing", "gauge", "1 while a slot serves a request.");
  for (const SlotState& s : slots)
    os << "spattn:slot_processing{slot=\"" << s.id << "\"} " << (s.busy ? 1 : 0) << '\n';
  head(os, "slot_requests_total", "counter", "Requests each slot has served.");
  for (const SlotState& s : slots)
    os << "spattn:slot_requests_total{slot=\"" << s.id << "\"} " << s.requests << '\n';
  const auto histogram = [&](const char* name, const char* help, const Histogram& h,
                             const auto& bounds) {
    head(os, name, "histogram", help);
    int64_t cum = 0;
    for (size_t b = 0; b <= bounds.size(); ++b) {
      cum += h.counts[b];
      os << "spattn:" << name << "_bucket{le=\"";
      if (b < bounds.size())
        os << fmt::format("{}", bounds[b]);  // shortest: le="0.05"
      else
        os << "+Inf";
      os << "\"} " << cum << '\n';
    }
    os << "spattn:" << name << "_sum " << fmt::format("{}", h.sum) << "\nspattn:" << name
       << "_count " << h.n << '\n';
  };
  histogram("time_to_first_token_seconds",
            "Time from a request taking its slot to its first token.", ttft_, kTtftSeconds);
  histogram("decode_tokens_per_second", "Decode rate of each generation after its first token.",
            decode_rate_, kDecodeTokPerS);
  head(os, "requests_total", "counter", "Generations finished, by prefill attention.");
  for (const auto& [attn, n] : by_attn_)
    os << "spattn:requests_total{attn=\"" << label(attn) << "\"} " << n << '\n';
  head(os, "errors_total", "counter", "Error responses, by HTTP status.");
  for (const auto& [status, n] : errors_)
    os << "spattn:errors_total{status=\"" << status << "\"} " << n << '\n';
  return os.str();
}

}  // namespace spattn::serve
