// One page's summaries moved between the block layout of quest_bounds.hpp (a page's min and
// max in dimension c lie 2 x kQuestPagePad elements apart from c + 1's) and two contiguous f32
// rows, and the 8-bit codes of such rows. A decoded token widens its page in every
// layer that keeps summaries: element by element through the generic f16 conversions this was
// about 9 us a token and layer at head dim 128 (two kv heads), most of a sparse layer's append.
#pragma once
#include <cstdint>

#include "spattn/dtype.hpp"

namespace spattn::kernels {

// lo[c], hi[c] = page p's min and max in dimension c < d, widened to f32 (exactly), from one kv
// head's summaries `sums` of element type `type` (f32, f16 or bf16).
void quest_page_read(const void* sums, DType type, int64_t d, int64_t p, float* lo, float* hi);

// The inverse: page p's summaries from lo and hi, whose values `type` holds exactly (they are
// keys as the cache stores them).
void quest_page_write(void* sums, DType type, int64_t d, int64_t p, const float* lo,
                      const float* hi);

// 8-bit codes of n ranges [lo[i], hi[i]] under scales s[i * s_step] (s_step 0: one scale for
// all): lo8[i * code_step] = floor(lo / s) and hi8[i * code_step] = ceil(hi / s), each moved
// one further where its product with s lands inside the range, clamped to +-127 (a non-finite
// value to -127); both 0 where s is 0. QuestPages' rule for its codes (spattn/quest.hpp), for a
// page's dimensions (s_step 1, code_step 2 x kQuestPagePad) or a block's pages in one
// dimension (s_step 0, code_step 1).
void quest_encode(const float* lo, const float* hi, const float* s, int64_t s_step, int64_t n,
                  int8_t* lo8, int8_t* hi8, int64_t code_step);

}  // namespace spattn::kernels
