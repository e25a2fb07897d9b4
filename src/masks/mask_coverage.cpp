// Coverage of a BlockMask and of a VerticalSlashIndex: the entries the kernels compute with
// them, so that attention_recall measures exactly what a method did.
#include <algorithm>
#include <memory>
#include <utility>

#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/sparse_attention.hpp"

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
    if (out.size() > first && r.begin <= out.back().end)
      out.back().end = std::max(out.back().end, r.end);
    else
      out.push_back(r);
  }
}

// Holds the mask shared, so a method's report can carry the mask and its coverage without a
// copy.
class BlockMaskCoverage final : public Coverage {
 public:
  explicit BlockMaskCoverage(std::shared_ptr<const BlockMask> m) : m_(std::move(m)) {
    SPATTN_CHECK(m_ != nullptr, "block_mask_coverage: null mask");
    m_->validate();
  }
  void row_ranges(int64_t head, int64_t row, std::vector<KeyRange>& out) const override {
    const BlockMask& m = *m_;
    const int64_t limit = m.causal ? m.kv_len - m.q_len + row + 1 : m.kv_len;
    std::vector<KeyRange> ranges;
    for (int32_t kb : m.row(head, row / m.block_q))
      ranges.push_back({int64_t(kb) * m.block_k, (int64_t(kb) + 1) * m.block_k});
    append_coalesced(ranges, std::min(limit, m.kv_len), out);
  }

 private:
  std::shared_ptr<const BlockMask> m_;
};

// Row i of tile t = i / tile_rows (i counted among the index's rows, when it lists them) sees what the kernel computes for its tile (the diagonals'
// tile ranges and the head's columns: vertical_slash_tile_keys, the kernel's own definition),
// up to the row's own position.
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
    int64_t index = row;  // the row's place among the rows the index computes
    if (x_.rows) {
      const auto it = std::lower_bound(x_.rows->begin(), x_.rows->end(), row);
      if (it == x_.rows->end() || *it != row) return;  // a row the index leaves alone
      index = int64_t(it - x_.rows->begin());
    }
    std::vector<KeyRange> ranges;
    std::vector<int64_t> columns;
    vertical_slash_tile_keys(x_, head, index / x_.tile_rows, q_len_, kv_len_, ranges, columns);
    for (int64_t c : columns) ranges.push_back({c, c + 1});
    append_coalesced(ranges, std::min(kv_len_ - q_len_ + row + 1, kv_len_), out);
  }

 private:
  VerticalSlashIndex x_;
  int64_t q_len_, kv_len_;
};

}  // namespace

std::unique_ptr<Coverage> block_mask_coverage(BlockMask mask) {
  return block_mask_coverage(std::make_shared<const BlockMask>(std::move(mask)));
}

std::unique_ptr<Coverage> block_mask_coverage(std::shared_ptr<const BlockMask> mask) {
  return std::make_unique<BlockMaskCoverage>(std::move(mask));
}

std::unique_ptr<Coverage> vertical_slash_coverage(VerticalSlashIndex index, int64_t q_len,
                                                  int64_t kv_len) {
  return std::make_unique<VerticalSlashCoverage>(std::move(index), q_len, kv_len);
}

}  // namespace spattn

namespace spattn {

BlockMask coverage_block_mask(const Coverage& cov, int64_t heads, int64_t q_len, int64_t kv_len,
                              int64_t block) {
  BlockMask m(heads, q_len, kv_len, block, block, /*causal=*/true);
  std::vector<uint8_t> keep(size_t(m.n_kb()));
  std::vector<KeyRange> ranges;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
      std::fill(keep.begin(), keep.end(), 0);
      for (int64_t i = qb * block; i < std::min(q_len, (qb + 1) * block); ++i) {
        ranges.clear();
        cov.row_ranges(h, i, ranges);
        for (const KeyRange& r : ranges)
          for (int64_t kb = r.begin / block; kb * block < r.end; ++kb) keep[size_t(kb)] = 1;
      }
      for (int64_t kb = 0; kb < m.n_kb(); ++kb)
        if (keep[size_t(kb)]) m.blocks.push_back(int32_t(kb));
      m.offsets[size_t(h * m.n_qb() + qb + 1)] = int64_t(m.blocks.size());
    }
  return m;
}

}  // namespace spattn
