// Heavy-hitter trace files (format in spattn/h2o_trace.hpp): varints written and read back,
// every value checked against the header and the bytes left before anything is allocated.
#include "spattn/h2o_trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "io/io_common.hpp"
#include "spattn/error.hpp"

namespace spattn {

namespace {

constexpr char kMagic[8] = {'S', 'P', 'H', '2', 'O', 'T', 'R', '1'};
// Bounds on header values: far above any real prompt, low enough that products cannot overflow.
constexpr uint64_t kMaxTokens = uint64_t(1) << 40, kMaxHeads = 1 << 16, kMaxLayer = 1 << 20;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

class Reader {
 public:
  Reader(std::span<const uint8_t> b, const std::string& origin) : b_(b), origin_(origin) {}
  size_t left() const { return b_.size() - pos_; }
  size_t offset() const { return pos_; }

  // One varint, which must be <= hi; `what` names it in the error.
  uint64_t varint(const char* what, uint64_t hi) {
    uint64_t v = 0;
    for (int i = 0;; ++i) {
      if (pos_ >= b_.size())
        detail::fail(origin_, ": truncated at byte ", pos_, " (reading ", what, ")");
      if (i == 9 && b_[pos_] > 0x7f)  // 9 * 7 = 63 bits: the 10th byte may add nothing more
        detail::fail(origin_, ": ", what, " at byte ", pos_, " is not a varint below 2^63");
      const uint8_t byte = b_[pos_++];
      v |= uint64_t(byte & 0x7f) << (7 * i);
      if (!(byte & 0x80)) break;
    }
    if (v > hi) detail::fail(origin_, ": ", what, " is ", v, ", above its limit ", hi);
    return v;
  }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  const std::string& origin_;
};

}  // namespace

H2OTraceLayer h2o_trace_layer(const ChunkedH2OTrace& t, int64_t layer, int64_t heads,
                              int64_t tokens, const ChunkedH2OParams& p) {
  SPATTN_CHECK(t.chunk_begin.size() == t.memory.size() && t.inter.size() == t.memory.size(),
               "h2o trace: the record's lists disagree in length");
  H2OTraceLayer out;
  out.layer = layer, out.heads = heads, out.tokens = tokens;
  out.chunk = p.chunk, out.local = p.local, out.heavy = p.heavy;
  for (size_t c = 0; c < t.chunk_begin.size(); ++c) {
    const int64_t end = c + 1 < t.chunk_begin.size() ? t.chunk_begin[c + 1] : tokens;
    // Each chunk ends where the next begins: consecutive from 0 means increasing from 0.
    SPATTN_CHECK((c > 0 || t.chunk_begin[0] == 0) && end > t.chunk_begin[c] && end <= tokens,
                 "h2o trace: layer ", layer,
                 " recorded chunks that are not consecutive from 0 "
                 "within ",
                 tokens, " tokens (more than one prompt?)");
    if (c + 1 == t.chunk_begin.size()) break;  // the prompt's last chunk builds no M_c
    SPATTN_CHECK(int64_t(t.memory[c].size()) == heads, "h2o trace: layer ", layer, " chunk ", c,
                 " has ", t.memory[c].size(), " memory sets for ", heads, " heads");
    out.chunks.push_back({t.chunk_begin[c], end, t.memory[c]});
  }
  return out;
}

std::string h2o_trace_to_bytes(const H2OTraceLayer& t) {
  std::string out(kMagic, sizeof kMagic);
  for (int64_t v :
       {t.layer, t.heads, t.tokens, t.chunk, t.local, t.heavy, int64_t(t.chunks.size())})
    put_varint(out, uint64_t(v));
  for (const auto& c : t.chunks) {
    put_varint(out, uint64_t(c.begin));
    put_varint(out, uint64_t(c.end - c.begin));
    for (const auto& m : c.memory) {
      put_varint(out, m.size());
      for (size_t i = 0; i < m.size(); ++i)
        put_varint(out, uint64_t(i ? m[i] - m[i - 1] - 1 : m[i]));
    }
  }
  return out;
}

H2OTraceLayer h2o_trace_from_bytes(std::span<const uint8_t> bytes, const std::string& origin) {
  if (bytes.size() < sizeof kMagic || !std::equal(kMagic, kMagic + sizeof kMagic, bytes.begin()))
    detail::fail(origin, ": not a heavy-hitter trace (no 'SPH2OTR1' magic)");
  Reader r(bytes.subspan(sizeof kMagic), origin);
  H2OTraceLayer t;
  t.layer = int64_t(r.varint("layer", kMaxLayer));
  t.heads = int64_t(r.varint("heads", kMaxHeads));
  t.tokens = int64_t(r.varint("tokens", kMaxTokens));
  t.chunk = int64_t(r.varint("chunk (S)", kMaxTokens));
  t.local = int64_t(r.varint("local (L)", kMaxTokens));
  t.heavy = int64_t(r.varint("heavy (H)", kMaxTokens));
  if (t.heads < 1 || t.tokens < 1 || t.chunk < 1 || t.local > t.chunk || t.local + t.heavy < 1)
    detail::fail(origin, ": bad header (heads ", t.heads, ", tokens ", t.tokens, ", S ", t.chunk,
                 ", L ", t.local, ", H ", t.heavy,
                 "): need heads, tokens, S >= 1, L <= S, "
                 "L + H >= 1");
  // Each chunk takes at least 2 + heads bytes: a count beyond the bytes left is a lie.
  const uint64_t n_chunks = r.varint("chunk count", uint64_t(t.tokens));
  if (n_chunks > r.left() / (2 + uint64_t(t.heads)))
    detail::fail(origin, ": ", n_chunks, " chunks of ", t.heads, " heads cannot fit in the ",
                 r.left(), " bytes left");
  const uint64_t max_set = uint64_t(t.local + t.heavy);
  int64_t next_begin = 0;
  for (uint64_t c = 0; c < n_chunks; ++c) {
    H2OTraceLayer::Chunk ch;
    ch.begin = int64_t(r.varint("chunk begin", uint64_t(t.tokens)));
    const int64_t len = int64_t(r.varint("chunk length", uint64_t(t.chunk)));
    ch.end = ch.begin + len;
    if (ch.begin != next_begin || len < 1 || ch.end > t.tokens)
      detail::fail(origin, ": chunk ", c, " is [", ch.begin, ", ", ch.end,
                   "); chunks must be "
                   "non-empty, consecutive from 0 (this one from ",
                   next_begin,
                   ") and end "
                   "within ",
                   t.tokens, " tokens");
    next_begin = ch.end;
    ch.memory.resize(size_t(t.heads));
    for (int64_t h = 0; h < t.heads; ++h) {
      const uint64_t count =
          r.varint("memory set size", std::min<uint64_t>(max_set, uint64_t(ch.end)));
      if (count > r.left())
        detail::fail(origin, ": chunk ", c, " head ", h, ": ", count,
                     " positions cannot fit in the ", r.left(), " bytes left");
      auto& m = ch.memory[size_t(h)];
      m.reserve(size_t(count));
      int64_t pos = -1;
      for (uint64_t i = 0; i < count; ++i) {
        const uint64_t step = r.varint("position", uint64_t(t.tokens));
        pos += int64_t(step) + 1;  // both bounded by 2^40: no overflow
        if (pos >= ch.end)
          detail::fail(origin, ": chunk ", c, " head ", h, ": position ", pos,
                       " is not before the chunk's end ", ch.end);
        m.push_back(pos);
      }
    }
    t.chunks.push_back(std::move(ch));
  }
  if (r.left() != 0)
    detail::fail(origin, ": ", r.left(), " bytes after the last memory set (byte ",
                 sizeof kMagic + r.offset(), ")");
  return t;
}

void write_h2o_trace(const std::string& dir, const std::vector<H2OTraceLayer>& layers) {
  for (const H2OTraceLayer& t : layers) {
    const std::string path =
        (std::filesystem::path(dir) / fmt::format("layer{}.h2o", t.layer)).string();
    std::ofstream out = io::open_for_write(path);
    const std::string b = h2o_trace_to_bytes(t);
    out.write(b.data(), std::streamsize(b.size()));
    io::finish_write(out, path);
  }
}

std::vector<H2OTraceLayer> read_h2o_trace(const std::string& dir) {
  std::error_code ec;
  SPATTN_CHECK(std::filesystem::is_directory(dir, ec), "h2o trace: '", dir, "' is not a directory");
  static const std::regex name(R"(layer[0-9]+\.h2o)");
  std::vector<H2OTraceLayer> layers;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string file = e.path().filename().string();
    if (!std::regex_match(file, name)) continue;
    uint64_t size = 0;
    std::ifstream in = io::open_for_read(e.path().string(), size);
    std::vector<uint8_t> bytes(static_cast<size_t>(size));
    io::read_exact(in, bytes.data(), size, e.path().string());
    layers.push_back(h2o_trace_from_bytes(bytes, e.path().string()));
  }
  SPATTN_CHECK(!layers.empty(), "h2o trace: no layer*.h2o files in '", dir, "'");
  std::sort(layers.begin(), layers.end(),
            [](const auto& a, const auto& b) { return a.layer < b.layer; });
  for (size_t i = 1; i < layers.size(); ++i) {
    const H2OTraceLayer &a = layers[0], &b = layers[i];
    SPATTN_CHECK(b.layer != layers[i - 1].layer, "h2o trace: '", dir, "' holds layer ", b.layer,
                 " twice");
    SPATTN_CHECK(a.heads == b.heads && a.tokens == b.tokens && a.chunk == b.chunk &&
                     a.local == b.local && a.heavy == b.heavy,
                 "h2o trace: layers ", a.layer, " and ", b.layer, " in '", dir,
                 "' disagree on heads, tokens, S, L or H (not one run)");
  }
  return layers;
}

}  // namespace spattn
