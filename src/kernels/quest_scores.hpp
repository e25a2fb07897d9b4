// Quest's page scores: each page's estimated share of the attention mass, from its bounds
// (quest_bounds.hpp). A decode step scores every page of every sparse layer, so this runs
// once per kv head and layer per token, over every page.
#pragma once
#include <cstdint>

namespace spattn::kernels {

// score[p] = sum over r < rows of exp(scale (u[r * ldu + p] - m_r)) / (Z_r rows) for p < np,
// where m_r is row r's largest u over the np pages and Z_r the row's sum of those exps: the
// mean over the rows (a kv head's q heads) of each row's softmax of scale x U over the pages.
// In f32 with Highway's vector exp. u's rows, score and e (scratch) hold ldu >= np floats,
// ldu a multiple of kQuestPagePad (as the bounds'); score's entries in [np, ldu) are zeros. A
// page whose every row lies more than about 87 / scale below its row's max scores 0 (the exp
// underflows): such a page's estimated mass is under e^-87 of the best page's.
void quest_page_scores(const float* u, int64_t rows, int64_t ldu, int64_t np, float scale,
                       float* score, float* e);

}  // namespace spattn::kernels
