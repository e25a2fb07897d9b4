#include "attn_bounds.hpp"

#include <charconv>
#include <cstdint>
#include <utility>

#include "request.hpp"
#include "spattn/method.hpp"

namespace spattn::serve {

namespace {

// Parameters whose small values multiply the work per token: block sizes of the block-sparse
// methods (flexprefill, xattention, the block-mask baselines), MoMo's chunk, the vertical-slash
// kernel's tile rows.
constexpr std::pair<const char*, int64_t> kMinimum[] = {
    {"block", 16}, {"block_q", 16}, {"block_k", 16}, {"chi", 16}, {"tile_rows", 16}};

}  // namespace

void check_attn_bounds(const std::string& text) {
  const MethodSpec spec = parse_method_spec(text);
  for (const auto& [key, lo] : kMinimum) {
    const auto it = spec.params.find(key);
    if (it == spec.params.end()) continue;
    int64_t v = 0;
    const std::string& s = it->second;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec == std::errc() && r.ptr == s.data() + s.size() && v < lo)
      bad_request("spattn.attn: " + spec.name + " " + key + "=" + s + " is under the server's " +
                      "bound of " + std::to_string(lo) + " (a request's cost is kept within a " +
                      "small multiple of dense's)",
                  "spattn.attn");
  }
}

}  // namespace spattn::serve
