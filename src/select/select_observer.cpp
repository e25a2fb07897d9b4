// BlockSelectObserver: MOMO's per-row online block selection fed by the query-sparse pass.
#include "spattn/select_observer.hpp"

#include <cmath>
#include <limits>

#include "spattn/error.hpp"

namespace spattn {
namespace {

float log_add_exp(float a, float b) {
  const float m = std::max(a, b);
  if (m == -std::numeric_limits<float>::infinity()) return m;
  return m + std::log1p(std::exp(std::min(a, b) - m));
}

}  // namespace

BlockSelectObserver::BlockSelectObserver(int64_t heads, const std::vector<int64_t>& rows,
                                         int64_t q_len, int64_t kv_len, int64_t beta,
                                         const std::vector<ForcedBlocks>& forced, int64_t chi,
                                         const TopKParams& params)
    : rows_(int64_t(rows.size())), beta_(beta), params_(params),
      state_(size_t(heads) * rows.size()) {
  SPATTN_CHECK(beta > 0 && beta % kKeyBlock == 0, "block selection: beta=", beta,
               " must be a positive multiple of ", kKeyBlock);
  SPATTN_CHECK(chi > 0, "block selection: chi=", chi, " must be > 0");
  limit_.reserve(rows.size());
  forced_.reserve(rows.size());
  for (int64_t r : rows) {
    SPATTN_CHECK(r >= 0 && r < q_len && size_t(r / chi) < forced.size(),
                 "block selection: row ", r, " has no forced-block entry");
    limit_.push_back(causal_limit(r, q_len, kv_len, true));
    forced_.push_back(forced[size_t(r / chi)]);
  }
}

bool BlockSelectObserver::Row::fold(int32_t j, int32_t tiles, float& score) {
  for (Pending& p : pending)
    if (p.block == j) {
      p.acc = log_add_exp(p.acc, score);
      if (--p.left > 0) return false;
      score = p.acc;
      p.block = -1;
      return true;
    }
  for (Pending& p : pending)
    if (p.block < 0) {
      p = {j, tiles - 1, score};
      return false;
    }
  detail::fail("block selection: more than ", kPending,
               " key blocks of a row in progress at once (visiting order)");
}

void BlockSelectObserver::observe(int64_t q_head, int64_t row_begin, int64_t rows,
                                  int64_t key_block, const float* block_lse) {
  const int64_t key0 = key_block * kKeyBlock;
  const int64_t j = key0 / beta_;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = row_begin + i;
    const int64_t limit = limit_[size_t(r)];
    if (key0 >= limit) continue;  // past this row's causal keys (the tile served later rows)
    const ForcedBlocks& f = forced_[size_t(r)];
    if (f.forced(j)) continue;
    Row& s = state_[size_t(q_head * rows_ + r)];
    float score = block_lse[i];
    if (beta_ > kKeyBlock) {
      const int64_t tiles =
          (std::min(limit, (j + 1) * beta_) - j * beta_ + kKeyBlock - 1) / kKeyBlock;
      if (tiles > 1 && !s.fold(int32_t(j), int32_t(tiles), score)) continue;
    }
    // Every tile of the block skipped (BLASST's rule): nothing was measured, nothing to rank.
    if (score == -std::numeric_limits<float>::infinity()) continue;
    if (!s.sel) {
      const int64_t nb = (limit + beta_ - 1) / beta_;
      TopKParams p = params_;
      p.total_blocks = nb - f.count(nb);
      s.sel.emplace(p);
    }
    s.sel->push(int32_t(j), score);
  }
}

void BlockSelectObserver::result(int64_t h, int64_t r, std::vector<BlockScore>& out) const {
  const Row& s = state_[size_t(h * rows_ + r)];
  if (s.sel) s.sel->result(out);
  else out.clear();
}

}  // namespace spattn
