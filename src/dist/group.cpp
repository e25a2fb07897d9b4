// What every Group shares whatever carries its bytes: the agreement on a failure, the zigzag
// layout, the prompt fingerprint (spattn/context_parallel.hpp).
#include <algorithm>
#include <cstring>
#include <exception>

#include "spattn/context_parallel.hpp"
#include "spattn/error.hpp"

namespace spattn::dist {

void CommStats::add(const CommStats& o) {
  bytes_sent += o.bytes_sent;
  bytes_recv += o.bytes_recv;
  messages += o.messages;
  comm_ms += o.comm_ms;
  ring_bytes_sent += o.ring_bytes_sent;
  ring_layers += o.ring_layers;
  ring_comm_ms += o.ring_comm_ms;
  logits_bytes_recv += o.logits_bytes_recv;
  blasst_seed_bytes_recv += o.blasst_seed_bytes_recv;
}

void agree(Group& g, const std::string& what, const std::function<void()>& body) {
  // A fixed-size slot per rank: its error text (empty when it succeeded), cut to fit.
  constexpr size_t kSlot = 480;
  std::string mine;
  try {
    body();
  } catch (const std::bad_alloc&) {
    mine = "out of memory";
  } catch (const std::exception& e) {
    mine = e.what();
    if (mine.empty()) mine = "failed";
  }
  char slot[kSlot] = {};
  std::memcpy(slot, mine.data(), std::min(mine.size(), kSlot - 1));
  std::vector<char> all(kSlot * size_t(g.size()));
  g.allgather(slot, kSlot, all.data());
  for (int r = 0; r < g.size(); ++r) {
    const char* s = all.data() + kSlot * size_t(r);
    if (s[0] == '\0') continue;
    g.set_failed_together();
    detail::fail("--cp: rank ", r, " of ", g.size(), " failed (", what,
                 "): ", std::string(s, strnlen(s, kSlot)));
  }
}

std::vector<int64_t> Zigzag::positions(int r) const {
  std::vector<int64_t> p;
  p.reserve(size_t(rows(r)));
  for (const Run run : {first(r), second(r)})
    for (int64_t i = 0; i < run.len; ++i) p.push_back(run.pos + i);
  return p;
}

uint64_t fingerprint(const void* data, size_t bytes, uint64_t seed) {
  uint64_t h = seed;
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace spattn::dist
