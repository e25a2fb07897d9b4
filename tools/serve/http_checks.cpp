#include "http_checks.hpp"

#include <algorithm>
#include <cctype>

namespace spattn::serve {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool listed(const std::string& host, const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (n == "*" || lower(n) == host) return true;
  return false;
}

}  // namespace

bool is_loopback(const std::string& host) {
  const std::string h = lower(host);
  return h == "localhost" || h == "::1" || h.rfind("127.", 0) == 0 ||
         (h.size() > 10 && h.compare(h.size() - 10, 10, ".localhost") == 0);
}

std::string host_of(const std::string& authority) {
  std::string a = lower(trim(authority));
  if (!a.empty() && a[0] == '[') {
    const size_t e = a.find(']');
    return e == std::string::npos ? a : a.substr(1, e - 1);
  }
  const size_t colon = a.find(':');
  return colon == std::string::npos ? a : a.substr(0, colon);
}

std::optional<Refusal> check_framing(const httplib::Request& req, size_t max_body) {
  const size_t n_len = req.get_header_value_count("Content-Length");
  const size_t n_te = req.get_header_value_count("Transfer-Encoding");
  if (n_len > 1 || n_te > 1)
    return Refusal{400, "the request repeats Content-Length or Transfer-Encoding",
                   "Content-Length"};
  if (n_len && n_te)
    return Refusal{400, "the request has both Content-Length and Transfer-Encoding",
                   "Transfer-Encoding"};
  const bool post = req.method == "POST";
  if (n_te) {
    if (lower(trim(req.get_header_value("Transfer-Encoding"))) != "chunked")
      return Refusal{501, "only Transfer-Encoding: chunked is served", "Transfer-Encoding"};
    if (!post) return Refusal{400, "only POST takes a body", "Transfer-Encoding"};
  } else if (n_len) {
    const std::string v = trim(req.get_header_value("Content-Length"));
    if (v.empty() || v.size() > 19 ||
        !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return Refusal{400, "Content-Length must be a decimal byte count", "Content-Length"};
    const unsigned long long len = std::stoull(v);
    if (len > max_body)
      return Refusal{400,
                     "the request body is over the limit of " + std::to_string(max_body) + " bytes",
                     "Content-Length"};
    if (len > 0 && !post) return Refusal{400, "only POST takes a body", "Content-Length"};
  } else if (post) {
    return Refusal{411, "a POST needs Content-Length or Transfer-Encoding: chunked",
                   "Content-Length"};
  }
  if (req.has_header("Content-Encoding")) {
    const std::string e = lower(trim(req.get_header_value("Content-Encoding")));
    if (req.get_header_value_count("Content-Encoding") > 1 ||
        (e != "identity" && e != "gzip" && e != "deflate" && e != "br"))
      return Refusal{415, "Content-Encoding must be one of identity, gzip, deflate, br",
                     "Content-Encoding"};
  }
  return std::nullopt;
}

std::optional<Refusal> check_host(const httplib::Request& req, const HttpPolicy& p) {
  if (!p.check_host || !req.has_header("Host")) return std::nullopt;  // HTTP/1.0 tools
  if (req.get_header_value_count("Host") > 1) return Refusal{400, "more than one Host", "Host"};
  const std::string h = host_of(req.get_header_value("Host"));
  if (is_loopback(h) || listed(h, p.allowed_hosts)) return std::nullopt;
  return Refusal{403,
                 "Host '" + h +
                     "' is not served (loopback names only; --allowed-hosts "
                     "adds others)",
                 "Host"};
}

bool cors_allows(const std::string& origin, const HttpPolicy& p) {
  for (const std::string& o : p.cors_origins)
    if (o == "*" || lower(o) == lower(origin)) return true;
  return false;
}

std::optional<Refusal> check_origin(const httplib::Request& req, const HttpPolicy& p) {
  if (!req.has_header("Origin")) return std::nullopt;
  const std::string origin = trim(req.get_header_value("Origin"));
  if (cors_allows(origin, p)) return std::nullopt;
  // A page served from this machine's own names (or an allowed host) is not cross-site.
  const size_t scheme = origin.find("://");
  if (scheme != std::string::npos) {
    const std::string h = host_of(origin.substr(scheme + 3));
    if (is_loopback(h) || listed(h, p.allowed_hosts)) return std::nullopt;
  }
  return Refusal{403, "cross-origin requests are refused (--cors ORIGIN allows them)", "Origin"};
}

std::optional<Refusal> check_json_type(const httplib::Request& req) {
  const std::string ct = lower(trim(req.get_header_value("Content-Type")));
  const std::string media = trim(ct.substr(0, ct.find(';')));
  if (media == "application/json") return std::nullopt;
  return Refusal{415, "Content-Type must be application/json", "Content-Type"};
}

}  // namespace spattn::serve
