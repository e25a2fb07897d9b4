// Coverage of a BlockMask and of a VerticalSlashIndex: the entries the kernels compute with
// them, so that attention_recall measures exactly what a method did.
#include <algorithm>
#include <utility>

#include "spattn/error.hpp"
#include "spattn/masks.hpp"

namespace spattn {

namespace {

// Sorts, clips to [0, limit) and coalesces ranges, appending them to out.
void append_coalesced(std::vector<KeyRange>& ranges, int64_t limit, std::vector<KeyRange>& out) {
  std::sort(ranges.begin(), ranges.end(),
            [](const KeyRange& a, const KeyRange& b) { return a.begin < b.begin; });
  const size_t first = out.size();
  for (KeyRange r : ranges) {
    r.begin = std::max<int64_t>(r.begin, 0);
    r.end = std::min(r.end, limit);
    if (r.begin >= r.end) continue;
    if (out.size() > first && r.begin <= out.back().end) out.back().end = std::max(out.back().end, r.end);
    else out.push_back(r);
  }
}

class BlockMaskCoverage final : public Coverage {
 public:
  explicit BlockMaskCoverage(BlockMask m) : m_(std::move(m)) { m_.validate(); }
  void row_ranges(int64_t head, int64_t row, std::vector<KeyRange>& out) const override {
    const int64_t limit = m_.causal ? m_.kv_len - m_.q_len + row + 1 : m_.kv_len;
    std::vector<KeyRange> ranges;
    for (int32_t kb : m_.row(head, row / m_.block_q))
      ranges.push_back({int64_t(kb) * m_.block_k, (int64_t(kb) + 1) * m_.block_k});
    append_coalesced(ranges, std::min(limit, m_.kv_len), out);
  }

 private:
  BlockMask m_;
};

// Row i of tile t = i / tile_rows shares the tile's diagonal ranges [pos(r0) - o, pos(r1-1) - o]
// (the kernel gathers them for the whole tile) and the head's columns.
class VerticalSlashCoverage final : public Coverage {
 public:
  VerticalSlashCoverage(VerticalSlashIndex index, int64_t q_len, int64_t kv_len)
      : x_(std::move(index)), q_len_(q_len), kv_len_(kv_len) {
    SPATTN_CHECK(x_.tile_rows >= 1, "vertical_slash_coverage: tile_rows must be >= 1, got ",
                 x_.tile_rows);
    SPATTN_CHECK(int64_t(x_.columns.size()) == x_.heads && int64_t(x_.offsets.size()) == x_.heads,
                 "vertical_slash_coverage: index has ", x_.columns.size(), " column lists and ",
                 x_.offsets.size(), " offset lists for ", x_.heads, " heads");
  }
  void row_ranges(int64_t head, int64_t row, std::vector<KeyRange>& out) const override {
    const int64_t off = kv_len_ - q_len_, r0 = row / x_.tile_rows * x_.tile_rows;
    const int64_t r1 = std::min(r0 + x_.tile_rows, q_len_);
    std::vector<KeyRange> ranges;
    for (int64_t o : x_.offsets[size_t(head)]) ranges.push_back({off + r0 - o, off + r1 - o});
    for (int64_t c : x_.columns[size_t(head)]) ranges.push_back({c, c + 1});
    append_coalesced(ranges, std::min(off + row + 1, kv_len_), out);
  }

 private:
  VerticalSlashIndex x_;
  int64_t q_len_, kv_len_;
};

}  // namespace

std::unique_ptr<Coverage> block_mask_coverage(BlockMask mask) {
  return std::make_unique<BlockMaskCoverage>(std::move(mask));
}

std::unique_ptr<Coverage> vertical_slash_coverage(VerticalSlashIndex index, int64_t q_len,
                                                  int64_t kv_len) {
  return std::make_unique<VerticalSlashCoverage>(std::move(index), q_len, kv_len);
}

}  // namespace spattn
