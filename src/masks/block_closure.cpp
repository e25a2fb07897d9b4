#include "masks/block_closure.hpp"

#include <algorithm>

#include "spattn/error.hpp"

namespace spattn::masks {

void mark_blocks(int64_t begin, int64_t end, int64_t block_k, std::vector<uint8_t>& keep) {
  begin = std::max<int64_t>(begin, 0);
  end = std::min<int64_t>(end, int64_t(keep.size()) * block_k);
  if (begin >= end) return;
  for (int64_t kb = begin / block_k; kb <= (end - 1) / block_k; ++kb) keep[size_t(kb)] = 1;
}

// Static patterns depend on positions only, so one head's lists are built and repeated.
BlockMask close_over_blocks(const char* who, const MaskGeometry& g, const BlockIntervals& fn) {
  SPATTN_CHECK(g.q_len > 0 && g.kv_len > 0 && g.q_len <= g.kv_len, who,
               ": needs 0 < q_len <= kv_len (causal), got q_len ", g.q_len, ", kv_len ", g.kv_len);
  BlockMask m(g.heads, g.q_len, g.kv_len, g.block_q, g.block_k, /*causal=*/true);
  const int64_t nq = m.n_qb(), nk = m.n_kb(), off = query_position(0, g.q_len, g.kv_len);
  std::vector<int32_t> head0;
  std::vector<int64_t> ends(size_t(nq) + 1, 0);
  std::vector<uint8_t> keep(static_cast<size_t>(nk));
  std::vector<KeyRange> intervals;
  for (int64_t qb = 0; qb < nq; ++qb) {
    const int64_t p0 = off + qb * g.block_q, p1 = off + std::min((qb + 1) * g.block_q, g.q_len) - 1;
    intervals.clear();
    fn(p0, p1, intervals);
    std::fill(keep.begin(), keep.end(), 0);
    for (const KeyRange& r : intervals)
      mark_blocks(r.begin, std::min(r.end, p1 + 1), g.block_k, keep);
    for (int64_t kb = 0; kb < nk; ++kb)
      if (keep[size_t(kb)]) head0.push_back(int32_t(kb));
    ends[size_t(qb + 1)] = int64_t(head0.size());
  }
  m.blocks.reserve(head0.size() * size_t(g.heads));
  for (int64_t h = 0; h < g.heads; ++h) {
    const int64_t base = int64_t(m.blocks.size());
    for (int64_t qb = 0; qb < nq; ++qb)
      m.offsets[size_t(h * nq + qb + 1)] = base + ends[size_t(qb + 1)];
    m.blocks.insert(m.blocks.end(), head0.begin(), head0.end());
  }
  return m;
}

}  // namespace spattn::masks
