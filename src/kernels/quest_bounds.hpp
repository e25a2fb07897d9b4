// Quest's page bound (Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference,
// ICML 2024, Section 3.2): for a query q and a page whose keys lie element-wise within
// [lo, hi], U = sum_c max(q_c lo_c, q_c hi_c) bounds q . k for every key of the page. A decode
// step computes it for every page, so it is the O(pages) part of Quest's cost; the summaries
// are stored dimension-major ([dim][pages]) so that one vector holds many pages.
#pragma once
#include <cstdint>

namespace spattn::kernels {

// Pages are padded to a multiple of this in the summaries and in u (lanes of the widest
// target, twice: the kernel runs two vectors of pages at once).
inline constexpr int64_t kQuestPagePad = 32;
// pages rounded up to a multiple of kQuestPagePad: a summary row's and a bound row's length.
inline constexpr int64_t quest_padded(int64_t pages) {
  return (pages + kQuestPagePad - 1) / kQuestPagePad * kQuestPagePad;
}

// u[r * ldu + p] = sum over c < d, ascending, of max(q[r][c] * lo[c * ld + p],
// q[r][c] * hi[c * ld + p]) for r < rows and p < quest_padded(pages); q is
// [rows][d] row-major; ld and ldu are multiples of kQuestPagePad. Every entry is summed in
// the plain loop's order, so the bits equal a scalar loop's.
void quest_bounds(const float* q, int64_t rows, int64_t d, const float* lo, const float* hi,
                  int64_t ld, int64_t pages, float* u, int64_t ldu);

}  // namespace spattn::kernels
