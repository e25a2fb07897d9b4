// libFuzzer target: `spattn serve`'s request parser on arbitrary bodies. The first byte picks
// the route (completion, chat, tokenize, detokenize); the rest is the body. A body is either
// refused with a RequestError (HTTP 400) or parsed into values inside the documented limits;
// anything else (another exception, a crash, a sanitizer report) is a finding.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "../tools/serve/chat_prompt.hpp"
#include "../tools/serve/request.hpp"
#include "spattn/error.hpp"

using namespace spattn::serve;

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 4) {
      case 0:
      case 1: {
        const GenerateRequest r = parse_generate(body, data[0] % 4 == 1);
        check(valid_utf8(body));
        r.sampling.validate();  // throws spattn::Error: not caught below, a finding
        check(r.max_tokens >= -1 && r.max_tokens <= kMaxTokensLimit);
        check(r.stop.size() <= kMaxStops);
        for (const std::string& s : r.stop) check(!s.empty() && s.size() <= kMaxStopBytes);
        check(r.chat ? !r.messages.empty() : (r.prompt_is_tokens || r.prompt_tokens.empty()));
        for (int32_t t : r.prompt_tokens) check(t >= 0);
        if (r.chat) check(render_chat(r.messages).size() >= r.messages.size());
        break;
      }
      case 2:
        (void)parse_tokenize(body);
        check(valid_utf8(body));
        break;
      case 3:
        for (int32_t t : parse_detokenize(body)) check(t >= 0);
        break;
    }
  } catch (const RequestError& e) {
    check(e.status == 400 && !std::string(e.what()).empty());
  }
  return 0;
}
