// "name:key=value,key=value" specs and their parameter reader.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/modality.hpp"

namespace spattn {

namespace {
std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string_view::npos ? std::string() : std::string(s.substr(b, e - b + 1));
}
}  // namespace

MethodSpec parse_method_spec(std::string_view text) {
  MethodSpec spec;
  spec.text = std::string(text);
  size_t colon = text.find(':');
  spec.name = trim(text.substr(0, colon));
  SPATTN_CHECK(!spec.name.empty(), "method spec '", text, "': empty method name");
  if (colon == std::string_view::npos) return spec;
  std::string_view rest = text.substr(colon + 1);
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    size_t eq = item.find('=');
    SPATTN_CHECK(eq != std::string_view::npos, "method spec '", text, "': parameter '", item,
                 "' is not key=value");
    std::string key = trim(item.substr(0, eq)), value = trim(item.substr(eq + 1));
    SPATTN_CHECK(!key.empty(), "method spec '", text, "': empty parameter name");
    SPATTN_CHECK(!spec.params.count(key), "method spec '", text, "': parameter '", key,
                 "' given twice");
    spec.params[key] = value;
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
    SPATTN_CHECK(!rest.empty(), "method spec '", text, "': trailing ','");
  }
  return spec;
}

double ParamReader::get_double(const std::string& key, double def, double lo, double hi) {
  used_.push_back(key);
  auto it = spec_.params.find(key);
  if (it == spec_.params.end()) return def;
  const std::string& s = it->second;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  SPATTN_CHECK(!s.empty() && end == s.c_str() + s.size() && std::isfinite(v), spec_.name, ": ", key,
               "='", s, "' is not a finite number");
  SPATTN_CHECK(v >= lo && v <= hi, spec_.name, ": ", key, "=", s, " out of range [", lo, ", ", hi,
               "]");
  return v;
}

int64_t ParamReader::get_int(const std::string& key, int64_t def, int64_t lo, int64_t hi) {
  used_.push_back(key);
  auto it = spec_.params.find(key);
  if (it == spec_.params.end()) return def;
  const std::string& s = it->second;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  SPATTN_CHECK(ec == std::errc() && p == s.data() + s.size() && !s.empty(), spec_.name, ": ", key,
               "='", s, "' is not an integer");
  SPATTN_CHECK(v >= lo && v <= hi, spec_.name, ": ", key, "=", s, " out of range [", lo, ", ", hi,
               "]");
  return v;
}

TokenCount ParamReader::get_tokens(const std::string& key, int64_t def, int64_t lo, int64_t hi) {
  auto it = spec_.params.find(key);
  if (it != spec_.params.end() && it->second == "frame") {
    used_.push_back(key);
    return {0, true};
  }
  return {get_int(key, def, lo, hi), false};
}

int64_t TokenCount::resolve(const AttnOptions& opt, const std::string& method,
                            const std::string& key) const {
  if (!per_frame) return tokens;
  SPATTN_CHECK(opt.modality && opt.modality->frame_tokens > 0, method, ": ", key,
               "=frame needs the tokens per frame of the input (the video and mixed workloads "
               "have them; for --qkv give --modality and --frame-tokens)");
  return opt.modality->frame_tokens;
}

std::string ParamReader::get_string(const std::string& key, const std::string& def) {
  used_.push_back(key);
  auto it = spec_.params.find(key);
  return it == spec_.params.end() ? def : it->second;
}

void ParamReader::finish() const {
  for (const auto& [key, value] : spec_.params) {
    if (std::find(used_.begin(), used_.end(), key) != used_.end()) continue;
    std::string known;
    for (const auto& u : used_) known += (known.empty() ? "" : ", ") + u;
    detail::fail(spec_.name, ": unknown parameter '", key, "'",
                 known.empty() ? std::string(" (it takes none)") : " (known: " + known + ")");
  }
}

}  // namespace spattn
