// BlockSelectObserver: MOMO's per-row online block selection fed by the query-sparse pass.
#include "spattn/select_observer.hpp"

#include <cmath>
#include <limits>

#include "select/select_common.hpp"
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
    : rows_(int64_t(rows.size())),
      beta_(beta),
      params_(params),
      state_(size_t(heads) * rows.size()),
      gate_(state_.size(), 0),
      buffer_(state_.size() * kBuffer) {
  SPATTN_CHECK(beta > 0 && beta % kKeyBlock == 0, "block selection: beta=", beta,
               " must be a positive multiple of ", kKeyBlock);
  SPATTN_CHECK(chi > 0, "block selection: chi=", chi, " must be > 0");
  // The parameters are checked here, not at a row's first block on a worker thread, and
  // observe() can then dispatch on a valid kind.
  topk_detail::check_k(params.k);
  topk_detail::check_k_exact(params.k_exact, params.k);
  SPATTN_CHECK(params.kind >= TopKKind::exact && params.kind <= TopKKind::hybrid,
               "block selection: top-k kind ", int(params.kind), " is none of the four");
  spans_.reserve(rows.size());
  for (int64_t r : rows) {
    SPATTN_CHECK(r >= 0 && r < q_len && size_t(r / chi) < forced.size(), "block selection: row ", r,
                 " has no forced-block entry");
    const ForcedBlocks& f = forced[size_t(r / chi)];
    const int64_t limit = causal_limit(r, q_len, kv_len, true);
    const int64_t nb = (limit + beta - 1) / beta;  // causal blocks
    // Candidates: blocks j in [sink_end, local_begin) below the limit, i.e. keys
    // [sink_end beta, min(limit, local_begin beta)); clamped to [0, nb] first so that nothing
    // overflows (ForcedBlocks may say INT64_MAX for "none").
    const int64_t lo = std::clamp<int64_t>(f.sink_end, 0, nb) * beta;
    const int64_t hi = std::min(limit, std::clamp<int64_t>(f.local_begin, 0, nb) * beta);
    spans_.push_back({lo, uint64_t(std::max(hi, lo) - lo), limit, nb - f.count(nb)});
  }
  // Candidate tiles: [lo, hi) starts on the 64-key grid (lo is a multiple of beta).
  for (int64_t h = 0; h < heads; ++h)
    for (size_t r = 0; r < spans_.size(); ++r)
      state_[size_t(h) * spans_.size() + r].tiles_left =
          int32_t((spans_[r].span + kKeyBlock - 1) / kKeyBlock);
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

template <class S>
S& BlockSelectObserver::selector(Row& s, const Span& sp) {
  if (!s.sel) [[unlikely]] {
    TopKParams p = params_;
    p.total_blocks = sp.total_blocks;
    s.sel.emplace(p);
  }
  return s.sel->template as<S>();
}

template <class S>
void BlockSelectObserver::flush(Row& s, uint64_t& gate, const BlockScore* buf, const Span& sp) {
  if (s.buffered == 0) return;
  S& sel = selector<S>(s, sp);
  for (int32_t b = 0; b < s.buffered; ++b) sel.push(buf[b].block, buf[b].score);
  s.buffered = 0;
  gate = sel.gate();
}

template <class S>
void BlockSelectObserver::observe_rows(Row* state, uint64_t* gates, BlockScore* buffer,
                                       const Span* spans, int64_t rows, const int64_t* key_blocks,
                                       int64_t tiles, const float* block_lse, int64_t stride) {
  // Tile by tile, every row of the strip for each: consecutive pushes go to different rows,
  // whose updates (Welford's mean, an argmin) are independent chains the core overlaps. Walking
  // a row's tiles back to back instead (its state in cache across the batch) measured slower:
  // each push then waits on the one before.
  for (int64_t t = 0; t < tiles; ++t)
    for (int64_t i = 0; i < rows; ++i) {
      const Span& sp = spans[i];
      const int64_t key0 = key_blocks[t] * kKeyBlock, j = key0 / beta_;
      // Past this row's causal keys (the tile served later rows) or in a forced block.
      if (uint64_t(key0 - sp.lo) >= sp.span) continue;
      Row& s = state[i];
      BlockScore* buf = buffer + i * kBuffer;
      float score = block_lse[t * stride + i];
      const bool last = --s.tiles_left == 0;
      bool whole = true;
      if (beta_ > kKeyBlock) {
        const int64_t n_tiles =
            (std::min(sp.limit, (j + 1) * beta_) - j * beta_ + kKeyBlock - 1) / kKeyBlock;
        whole = n_tiles <= 1 || s.fold(int32_t(j), int32_t(n_tiles), score);
      }
      // Every tile of the block skipped (BLASST's rule): nothing was measured, nothing to
      // rank. A block the selector would not keep, and whose push would change nothing: one
      // compare.
      const bool pass = whole && score != -std::numeric_limits<float>::infinity() &&
                        topk_detail::make_key(int32_t(j), score) > gates[i];
      if constexpr (kBuffered<S>) {
        if (pass) buf[s.buffered++] = {int32_t(j), score};
        if (s.buffered == kBuffer || last) flush<S>(s, gates[i], buf, sp);
      } else if (pass) {  // pushed at once, without the buffer's round trip
        S& sel = selector<S>(s, sp);
        sel.push(int32_t(j), score);
        gates[i] = sel.gate();
      }
    }
}

void BlockSelectObserver::observe(int64_t q_head, int64_t row_begin, int64_t rows,
                                  int64_t key_block, const float* block_lse) {
  observe_tiles(q_head, row_begin, rows, &key_block, 1, block_lse, rows);
}

void BlockSelectObserver::observe_tiles(int64_t q_head, int64_t row_begin, int64_t rows,
                                        const int64_t* key_blocks, int64_t tiles,
                                        const float* block_lse, int64_t stride) {
  Row* state = state_.data() + q_head * rows_ + row_begin;
  uint64_t* gates = gate_.data() + q_head * rows_ + row_begin;
  BlockScore* buffer = buffer_.data() + (q_head * rows_ + row_begin) * kBuffer;
  const Span* spans = spans_.data() + row_begin;
  switch (params_.kind) {
    case TopKKind::exact:
      observe_rows<ExactTopK>(state, gates, buffer, spans, rows, key_blocks, tiles, block_lse,
                              stride);
      break;
    case TopKKind::tree:
      observe_rows<TournamentTopK>(state, gates, buffer, spans, rows, key_blocks, tiles, block_lse,
                                   stride);
      break;
    case TopKKind::estimate:
      observe_rows<EstimatedTopK>(state, gates, buffer, spans, rows, key_blocks, tiles, block_lse,
                                  stride);
      break;
    case TopKKind::hybrid:
      observe_rows<HybridTopK>(state, gates, buffer, spans, rows, key_blocks, tiles, block_lse,
                               stride);
      break;
  }
}

void BlockSelectObserver::result(int64_t h, int64_t r, std::vector<BlockScore>& out) const {
  const Row& s = state_[size_t(h * rows_ + r)];
  SPATTN_CHECK(s.tiles_left == 0, "block selection: result of row ", r, " of q head ", h,
               " asked with ", s.tiles_left, " of its candidate tiles not yet observed");
  if (s.sel)
    s.sel->result(out);
  else
    out.clear();
}

}  // namespace spattn
