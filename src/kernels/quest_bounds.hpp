// Quest's page bound (Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference,
// ICML 2024, Section 3.2): for a query q and a page whose keys lie element-wise within
// [lo, hi], U = sum_c max(q_c lo_c, q_c hi_c) bounds q . k for every key of the page. A decode
// step computes it for every page, so it is the O(pages) part of Quest's cost and it reads
// every summary: the summaries are laid out for one front-to-back pass (below) and kept in
// the cache's own 16-bit type where that is exact.
#pragma once
#include <cstdint>

#include "spattn/dtype.hpp"

namespace spattn::kernels {

// Pages are grouped in blocks of this many (lanes of the widest target, twice: the kernel
// runs two vectors of pages at once); summaries and bound rows are padded to whole blocks.
inline constexpr int64_t kQuestPagePad = 32;
// pages rounded up to a multiple of kQuestPagePad: a summary's and a bound row's length.
inline constexpr int64_t quest_padded(int64_t pages) {
  return (pages + kQuestPagePad - 1) / kQuestPagePad * kQuestPagePad;
}

// One kv head's summaries, block after block; block b (pages [32b, 32b + 32)) holds per
// dimension c its 32 pages' minima, then their maxima:
//     element ((b * d + c) * 2 + (max ? 1 : 0)) * 32 + p % 32.
// The bound kernel reads a block as one contiguous run (16 KiB of f32 at d 128) and the blocks
// in order: one stream, which the hardware prefetcher follows (a [d][pages] layout made 2d
// streams of one cache line per block each, which it did not).
inline constexpr int64_t quest_sum_index(int64_t d, int64_t p, int64_t c, bool max) {
  return ((p / kQuestPagePad * d + c) * 2 + (max ? 1 : 0)) * kQuestPagePad + p % kQuestPagePad;
}

// What the pass computes per q row and page, from the page's box [lo, hi]:
// - bound: U = sum_c max(q_c lo_c, q_c hi_c), the paper's upper bound of q . k (its order
//   ranks pages for a count budget).
// - gauss: G = mu + scale sigma^2 / 2, with mu = q . (lo + hi) / 2 and
//   sigma^2 = sum_c q_c^2 (hi_c - lo_c)^2 / 12: the log of E[exp(scale q . k)] / scale for a
//   key drawn uniformly from the box (q . k then near normal, of that mean and variance), so
//   exp(scale G) estimates a page's mass, where exp(scale U) bounds its largest key's alone.
//   A box of 16 keys' extremes spans about 3.5 standard deviations of a normal dimension, the
//   uniform's sqrt(12): the uniform box is the right width. Per c: a = q_c / 2 and
//   b = (q_c q_c) (scale / 24) in f32, then the sum is (sum + a (lo + hi)) + b ((hi - lo)^2).
//   What a mass budget (topp, min_share) reads: the bound's softmax is over-confident where a
//   page's box is wide (Quest's topp kept 6% of a head's keys for 20% of its mass).
enum class PageEstimate { bound, gauss };

// u[r * ldu + p] = the estimate of q row r for page p, summed over c < d ascending, for
// r < rows and p < quest_padded(pages), the summaries `sums` laid out as above in `type` (f32,
// f16 or bf16; widened exactly to f32). q is [rows][d] row-major; ldu a multiple of
// kQuestPagePad; scale (gauss only) the softmax scale. Every entry is summed in the plain
// loop's order, nothing fused, so the bits equal a scalar loop's over the widened summaries.
void quest_bounds(const float* q, int64_t rows, int64_t d, const void* sums, DType type,
                  int64_t pages, float* u, int64_t ldu, PageEstimate est = PageEstimate::bound,
                  float scale = 0);

// The same bound over 8-bit summaries (QuestPages' `sums=i8`): codes in the layout above, and
// per block b and dimension c a scale s = scales[b * d + c], page p's range in c being
// [s * lo8, s * hi8] (rounded outward from the exact min and max). Per block the kernel scales
// q first, qs[r][c] = q[r][c] * s (f32), then sums the estimate's terms of qs over the codes
// as above (max(qs * lo8, qs * hi8) for the bound): the bits of that plain loop. Half the
// bytes of 16-bit summaries: the pass reads its summaries from memory at every step, and
// 2 MiB a layer at 32K is most of its time.
void quest_bounds_i8(const float* q, int64_t rows, int64_t d, const int8_t* codes,
                     const float* scales, int64_t pages, float* u, int64_t ldu,
                     PageEstimate est = PageEstimate::bound, float scale = 0);

}  // namespace spattn::kernels
