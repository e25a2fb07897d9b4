// BlockMask: construction, conversion, validation and entry counting.
#include "spattn/block_mask.hpp"

#include <algorithm>
#include <limits>

#include "spattn/attention.hpp"
#include "spattn/error.hpp"

namespace spattn {

namespace {

void check_geometry(int64_t heads, int64_t q_len, int64_t kv_len, int64_t block_q, int64_t block_k,
                    bool causal) {
  SPATTN_CHECK(heads > 0, "BlockMask: heads must be > 0, got ", heads);
  SPATTN_CHECK(q_len > 0, "BlockMask: q_len must be > 0, got ", q_len);
  SPATTN_CHECK(kv_len > 0, "BlockMask: kv_len must be > 0, got ", kv_len);
  SPATTN_CHECK(block_q > 0 && block_k > 0, "BlockMask: block sizes must be > 0, got block_q ",
               block_q, ", block_k ", block_k);
  SPATTN_CHECK(!causal || q_len <= kv_len, "BlockMask: a causal mask needs q_len <= kv_len (",
               q_len, " > ", kv_len, ")");
  // Key block indices are stored as int32.
  SPATTN_CHECK((kv_len + block_k - 1) / block_k <= std::numeric_limits<int32_t>::max(),
               "BlockMask: kv_len ", kv_len, " / block_k ", block_k,
               " gives more key blocks than int32 holds");
}

// sum_{x=1}^{n} min(x, w), for n >= 0.
int64_t sum_min(int64_t n, int64_t w) {
  if (n <= w) return n * (n + 1) / 2;
  return w * (w + 1) / 2 + (n - w) * w;
}

}  // namespace

BlockMask::BlockMask(int64_t heads_, int64_t q_len_, int64_t kv_len_, int64_t block_q_,
                     int64_t block_k_, bool causal_)
    : heads(heads_),
      q_len(q_len_),
      kv_len(kv_len_),
      block_q(block_q_),
      block_k(block_k_),
      causal(causal_) {
  check_geometry(heads, q_len, kv_len, block_q, block_k, causal);
  offsets.assign(size_t(heads * n_qb() + 1), 0);
}

int64_t BlockMask::causal_blocks(int64_t qb) const {
  SPATTN_CHECK(qb >= 0 && qb < n_qb(), "BlockMask: query block ", qb, " outside [0, ", n_qb(), ")");
  if (!causal) return n_kb();
  const int64_t last_row = std::min((qb + 1) * block_q, q_len) - 1;
  const int64_t visible = causal_limit(last_row, q_len, kv_len);
  return (visible + block_k - 1) / block_k;
}

BlockMask BlockMask::from_lists(int64_t heads, int64_t q_len, int64_t kv_len, int64_t block_q,
                                int64_t block_k, bool causal,
                                const std::vector<std::vector<int32_t>>& lists) {
  BlockMask m(heads, q_len, kv_len, block_q, block_k, causal);
  SPATTN_CHECK(int64_t(lists.size()) == heads * m.n_qb(), "BlockMask::from_lists: got ",
               lists.size(), " lists, expected heads * query blocks = ", heads, " * ", m.n_qb(),
               " = ", heads * m.n_qb());
  for (size_t i = 0; i < lists.size(); ++i) {
    m.blocks.insert(m.blocks.end(), lists[i].begin(), lists[i].end());
    m.offsets[i + 1] = int64_t(m.blocks.size());
  }
  return m;
}

BlockMask BlockMask::from_dense(int64_t heads, int64_t q_len, int64_t kv_len, int64_t block_q,
                                int64_t block_k, bool causal, const std::vector<uint8_t>& grid) {
  BlockMask m(heads, q_len, kv_len, block_q, block_k, causal);
  const int64_t nq = m.n_qb(), nk = m.n_kb();
  SPATTN_CHECK(int64_t(grid.size()) == heads * nq * nk, "BlockMask::from_dense: grid has ",
               grid.size(), " cells, expected heads * query blocks * key blocks = ", heads, " * ",
               nq, " * ", nk, " = ", heads * nq * nk);
  for (int64_t r = 0; r < heads * nq; ++r) {
    for (int64_t kb = 0; kb < nk; ++kb)
      if (grid[size_t(r * nk + kb)]) m.blocks.push_back(int32_t(kb));
    m.offsets[size_t(r + 1)] = int64_t(m.blocks.size());
  }
  // A grid cannot be unsorted or repeat a block, but it can hold non-causal blocks.
  m.validate();
  return m;
}

std::vector<uint8_t> BlockMask::to_dense() const {
  validate();
  const int64_t nq = n_qb(), nk = n_kb();
  std::vector<uint8_t> grid(size_t(heads * nq * nk), 0);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t qb = 0; qb < nq; ++qb)
      for (int32_t kb : row(h, qb)) grid[size_t((h * nq + qb) * nk + kb)] = 1;
  return grid;
}

BlockMask BlockMask::full(int64_t heads, int64_t q_len, int64_t kv_len, int64_t block_q,
                          int64_t block_k, bool causal) {
  BlockMask m(heads, q_len, kv_len, block_q, block_k, causal);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
      for (int64_t kb = 0; kb < m.causal_blocks(qb); ++kb) m.blocks.push_back(int32_t(kb));
      m.offsets[size_t(h * m.n_qb() + qb + 1)] = int64_t(m.blocks.size());
    }
  return m;
}

void BlockMask::validate() const {
  check_geometry(heads, q_len, kv_len, block_q, block_k, causal);
  const int64_t rows = heads * n_qb(), nk = n_kb();
  SPATTN_CHECK(int64_t(offsets.size()) == rows + 1, "BlockMask: offsets has ", offsets.size(),
               " entries, expected heads * query blocks + 1 = ", rows + 1, " (heads ", heads,
               ", q_len ", q_len, ", block_q ", block_q, ")");
  SPATTN_CHECK(offsets.front() == 0, "BlockMask: offsets[0] must be 0, got ", offsets.front());
  SPATTN_CHECK(offsets.back() == int64_t(blocks.size()), "BlockMask: offsets end at ",
               offsets.back(), " but blocks holds ", blocks.size());
  for (int64_t r = 0; r < rows; ++r)
    SPATTN_CHECK(offsets[size_t(r)] <= offsets[size_t(r + 1)], "BlockMask: offsets decrease at ",
                 "head ", r / n_qb(), " query block ", r % n_qb(), " (", offsets[size_t(r)], " > ",
                 offsets[size_t(r + 1)], ")");
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t qb = 0; qb < n_qb(); ++qb) {
      const int64_t limit = causal_blocks(qb);
      int64_t prev = -1;
      for (int32_t kb : row(h, qb)) {
        SPATTN_CHECK(kb >= 0 && kb < nk, "BlockMask: head ", h, " query block ", qb, ": block ", kb,
                     " outside [0, ", nk, ")");
        SPATTN_CHECK(kb != prev, "BlockMask: head ", h, " query block ", qb, ": block ", kb,
                     " listed twice");
        SPATTN_CHECK(kb > prev, "BlockMask: head ", h, " query block ", qb, ": block ", kb,
                     " after block ", prev, " (lists must be sorted ascending)");
        SPATTN_CHECK(kb < limit, "BlockMask: head ", h, " query block ", qb, ": block ", kb,
                     " lies after the query block's last row (causal: blocks < ", limit, ")");
        prev = kb;
      }
    }
}

void BlockMask::check_matches(int64_t q_heads, int64_t q_len_, int64_t kv_len_,
                              bool causal_) const {
  SPATTN_CHECK(block_q > 0 && block_k > 0, "BlockMask: block sizes must be > 0, got block_q ",
               block_q, ", block_k ", block_k);
  SPATTN_CHECK(heads == q_heads, "BlockMask: mask has ", heads, " heads, q has ", q_heads);
  SPATTN_CHECK(q_len == q_len_ && kv_len == kv_len_, "BlockMask: mask is for q_len ", q_len,
               ", kv_len ", kv_len, "; attention has q_len ", q_len_, ", kv_len ", kv_len_);
  SPATTN_CHECK(causal == causal_, "BlockMask: mask is ", causal ? "causal" : "not causal",
               " but attention is ", causal_ ? "causal" : "not causal");
  // Offsets sized for other block sizes mean the lists index other blocks.
  SPATTN_CHECK(int64_t(offsets.size()) == heads * n_qb() + 1, "BlockMask: offsets has ",
               offsets.size(), " entries, but block_q ", block_q, " over q_len ", q_len, " needs ",
               heads * n_qb() + 1, " (was the mask built for another block size?)");
}

// Per listed block: rows at positions P0..P1 see keys [k0, k1) up to their own position, so
// row p counts clamp(p + 1 - k0, 0, k1 - k0): a clamped arithmetic series.
int64_t BlockMask::entries() const {
  int64_t total = 0;
  const int64_t off = query_position(0, q_len, kv_len);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t qb = 0; qb < n_qb(); ++qb) {
      const int64_t r0 = qb * block_q, r1 = std::min(r0 + block_q, q_len);
      for (int32_t kb : row(h, qb)) {
        const int64_t k0 = int64_t(kb) * block_k, w = std::min(k0 + block_k, kv_len) - k0;
        if (!causal) {
          total += (r1 - r0) * w;
          continue;
        }
        const int64_t a = off + r0 + 1 - k0, b = off + r1 - k0;  // x = p + 1 - k0 over rows
        total += sum_min(std::max<int64_t>(b, 0), w) - sum_min(std::max<int64_t>(a - 1, 0), w);
      }
    }
  return total;
}

}  // namespace spattn
