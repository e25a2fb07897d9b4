// libFuzzer target: the heavy-hitter trace parser (spattn/h2o_trace.hpp). Whatever it accepts
// must hold what the format promises (chunks consecutive from 0 within the tokens, positions
// increasing and before their chunk's end, at most L + H per set) and write back to the same
// bytes; anything else must be an Error.
#include <cstdlib>

#include "spattn/error.hpp"
#include "spattn/h2o_trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  spattn::H2OTraceLayer t;
  try {
    t = spattn::h2o_trace_from_bytes({data, size}, "fuzz");
  } catch (const spattn::Error&) {
    return 0;
  }
  int64_t next = 0;
  for (const auto& c : t.chunks) {
    if (c.begin != next || c.end <= c.begin || c.end > t.tokens) std::abort();
    next = c.end;
    if (int64_t(c.memory.size()) != t.heads) std::abort();
    for (const auto& m : c.memory) {
      if (int64_t(m.size()) > t.local + t.heavy) std::abort();
      for (size_t i = 0; i < m.size(); ++i)
        if (m[i] < 0 || m[i] >= c.end || (i && m[i] <= m[i - 1])) std::abort();
    }
  }
  // Varints have more than one spelling (0x80 0x00 is 0): compare the parse of the rewrite.
  const std::string b = spattn::h2o_trace_to_bytes(t);
  const spattn::H2OTraceLayer u = spattn::h2o_trace_from_bytes(
      {reinterpret_cast<const uint8_t*>(b.data()), b.size()}, "rewrite");
  if (u.chunks.size() != t.chunks.size()) std::abort();
  for (size_t c = 0; c < t.chunks.size(); ++c)
    if (u.chunks[c].memory != t.chunks[c].memory) std::abort();
  return 0;
}
