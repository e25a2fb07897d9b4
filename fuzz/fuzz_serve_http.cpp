// libFuzzer target: `spattn serve`'s HTTP front on arbitrary bytes as one client connection.
// The bytes go through a socketpair into HttpServer (cpp-httplib's request parser under
// spattn's connection handling: read deadlines, the bounded body read after any
// Content-Encoding), the header checks the server makes before it reads a body (framing,
// Host, Origin, Content-Type; http_checks.hpp), and the OpenAI body parsers. Whatever the
// bytes, the server must answer or close without a crash, a sanitizer report, or a body held
// past its limit.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "../tools/serve/http_checks.hpp"
#include "../tools/serve/http_server.hpp"
#include "../tools/serve/request.hpp"
#include "spattn/error.hpp"

using namespace spattn::serve;

namespace {

constexpr size_t kMaxBody = 4096;

HttpServer& server() {
  static HttpServer* s = [] {
    HttpLimits l;
    l.read_timeout_s = l.write_timeout_s = 1;
    l.header_timeout_s = l.body_timeout_s = 1;
    l.workers = 1;
    auto* h = new HttpServer(l);
    HttpPolicy p;
    p.max_body = kMaxBody;
    h->set_pre_routing_handler([p](const httplib::Request& req, httplib::Response& res) {
      if (Conn* c = current_conn()) c->headers_done();
      for (auto r : {check_host(req, p), check_framing(req, kMaxBody), check_origin(req, p),
                     req.method == "POST" ? check_json_type(req) : std::nullopt})
        if (r) {
          res.status = r->status;
          if (Conn* c = current_conn()) c->close_after();
          return httplib::Server::HandlerResponse::Handled;
        }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    h->Post("/v1/completions", [](const httplib::Request&, httplib::Response& res,
                                  const httplib::ContentReader& reader) {
      std::string body;
      const bool ok = reader([&](const char* d, size_t n) {
        if (n > kMaxBody - body.size()) return false;
        body.append(d, n);
        return true;
      });
      if (body.size() > kMaxBody) std::abort();  // the limit held while reading
      if (!ok) return;
      try {
        (void)parse_generate(body, false);
        res.status = 200;
      } catch (const RequestError& e) {
        if (e.status != 400) std::abort();
        res.status = 400;
      }
    });
    h->Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
    return h;
  }();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) std::abort();
  // The input fits the socket's buffer (-max_len), so the client's whole request is written
  // before the server reads, and the half-close ends it.
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(sv[0], data + done, size - done);
    if (n <= 0) std::abort();
    done += size_t(n);
  }
  shutdown(sv[0], SHUT_WR);
  server().serve_socket(sv[1]);  // closes sv[1]
  char buf[4096];
  while (read(sv[0], buf, sizeof buf) > 0) {}
  close(sv[0]);
  return 0;
}
