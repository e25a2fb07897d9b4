// What `spattn serve` checks in a request's head before it reads the body, on untrusted
// headers (each check a pure function, so the fuzz target runs them as the server does):
// - framing: a body is Content-Length (digits only, at most the body limit) or chunked, never
//   both, never absent on a POST; a Content-Encoding is one httplib inflates (and the inflated
//   bytes are held to the same limit while they are read);
// - Host (when bound to loopback): loopback names or --allowed-hosts only, so a DNS-rebinding
//   page cannot reach the server under a name it controls;
// - Origin: a browser's cross-site request is refused unless --cors allows its origin (a form
//   post with text/plain needs no preflight, so Origin is the only sign of it);
// - Content-Type: JSON routes take application/json.
#pragma once
#include <httplib.h>

#include <optional>
#include <string>
#include <vector>

namespace spattn::serve {

struct Refusal {
  int status;
  std::string message;
  std::string param;  // the header at fault
};

struct HttpPolicy {
  size_t max_body = 8u << 20;
  bool check_host = true;                  // bound to a loopback address
  std::vector<std::string> allowed_hosts;  // --allowed-hosts (names; "*": any)
  std::vector<std::string> cors_origins;   // --cors (origins as browsers send them; "*": any)
};

// Whether `host` names this machine's loopback (127.0.0.0/8, ::1, localhost).
bool is_loopback(const std::string& host);
// The host of a Host header or an origin's authority, without port or brackets, lowercase.
std::string host_of(const std::string& authority);

std::optional<Refusal> check_framing(const httplib::Request& req, size_t max_body);
std::optional<Refusal> check_host(const httplib::Request& req, const HttpPolicy& p);
std::optional<Refusal> check_origin(const httplib::Request& req, const HttpPolicy& p);
std::optional<Refusal> check_json_type(const httplib::Request& req);
// Whether --cors lets `origin` read answers (Access-Control-Allow-Origin is then sent).
bool cors_allows(const std::string& origin, const HttpPolicy& p);

}  // namespace spattn::serve
