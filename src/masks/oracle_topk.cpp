// Oracle block top-k: the best block mask of a given size, from the exact softmax mass of every
// block. An upper bound for block selectors at the same budget (the MOMO paper compares against it);
// it needs full attention to build, so it is for evaluation only. Beside the count, the mass
// budgets (topp, min_share) on the same exact masses, through masks/block_budget.hpp's one copy
// of their rules: what a per-query-block mass budget keeps when its estimate makes no error.
#include <algorithm>

#include "masks/block_budget.hpp"
#include "masks/block_closure.hpp"
#include "methods/fraction.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/metrics.hpp"

namespace spattn {
namespace {

// Each query block's kept blocks from the exact masses: the blocks of each row's `local` most
// recent keys (none at 0), then `budget` over the rest (block_budget.hpp's rules); with
// `per_row`, the budget also reads each row's exact masses (a grid of one-row blocks).
template <class Budget>
BlockMask oracle_mask(const TensorView& q, const TensorView& k, const TensorView& v,
                      int64_t block_q, int64_t block_k, const AttnOptions& opt, int64_t local,
                      bool per_row, const Budget& budget) {
  SPATTN_CHECK(local >= 0, "oracle_topk: local must be >= 0, got ", local);
  BlockMask m(q.heads, q.seq, k.seq, block_q, block_k, opt.causal);
  const int64_t nq = m.n_qb(), nk = m.n_kb();
  const int64_t off = query_position(0, q.seq, k.seq);
  std::vector<double> mass(static_cast<size_t>(nk));  // the budgets' rules read doubles
  std::vector<uint8_t> keep(static_cast<size_t>(nk));
  std::vector<int64_t> order;
  std::vector<double> row_mass;
  for (int64_t h = 0; h < q.heads; ++h) {
    // per row reads only the rows' grid: the blocks' is not computed then
    const BlockMassGrid g = per_row ? block_mass(q, k, v, h, 1, block_k, opt)
                                    : block_mass(q, k, v, h, block_q, block_k, opt);
    for (int64_t qb = 0; qb < nq; ++qb) {
      const int64_t limit = m.causal_blocks(qb);
      std::fill(keep.begin(), keep.end(), 0);
      if (local > 0) {
        const int64_t p0 = off + qb * block_q, p1 = off + std::min((qb + 1) * block_q, q.seq) - 1;
        masks::mark_blocks(p0 - local + 1, std::min(p1 + 1, limit * block_k), block_k, keep);
      }
      masks::RowMasses rows;
      if (per_row) {
        const int64_t r0 = qb * block_q, n = std::min(block_q, q.seq - r0);
        row_mass.assign(g.mass.begin() + r0 * nk, g.mass.begin() + (r0 + n) * nk);
        rows = {row_mass.data(), n, nk};
      } else {
        std::copy_n(&g.mass[size_t(qb * nk)], limit, mass.begin());
      }
      budget(mass.data(), limit, rows, keep, order);
      for (int64_t kb = 0; kb < limit; ++kb)
        if (keep[size_t(kb)]) m.blocks.push_back(int32_t(kb));
      m.offsets[size_t(h * nq + qb + 1)] = int64_t(m.blocks.size());
    }
  }
  return m;
}

}  // namespace

BlockMask oracle_topk_mask(const TensorView& q, const TensorView& k, const TensorView& v,
                           int64_t block_q, int64_t block_k, int64_t topk, const AttnOptions& opt,
                           int64_t local) {
  SPATTN_CHECK(topk >= 1, "oracle_topk: topk must be >= 1, got ", topk);
  return oracle_mask(
      q, k, v, block_q, block_k, opt, local, false,
      [&](const double* mass, int64_t limit, const masks::RowMasses&, std::vector<uint8_t>& keep,
          std::vector<int64_t>& order) { masks::keep_top_count(mass, limit, topk, keep, order); });
}

BlockMask oracle_mass_mask(const TensorView& q, const TensorView& k, const TensorView& v,
                           int64_t block_q, int64_t block_k, double topp, double min_share,
                           const AttnOptions& opt, int64_t local, bool per_row) {
  SPATTN_CHECK((topp > 0) != (min_share > 0),
               "oracle_topk: give one mass budget, topp or min_share (got topp=", topp,
               ", min_share=", min_share, ")");
  // 0 is "not this one" (the check above asks for exactly one); the other is a fraction.
  if (topp != 0) check_fraction("oracle_topk", "topp", topp, Fraction::up_to_one);
  if (min_share != 0) check_fraction("oracle_topk", "min_share", min_share, Fraction::below_one);
  SPATTN_CHECK(!per_row || topp > 0, "oracle_topk: per=row goes with topp, not min_share");
  masks::RowMassScratch share;
  return oracle_mask(q, k, v, block_q, block_k, opt, local, per_row,
                     [&](const double* mass, int64_t limit, const masks::RowMasses& rows,
                         std::vector<uint8_t>& keep, std::vector<int64_t>& order) {
                       if (per_row)
                         masks::keep_row_mass(rows, limit, topp, keep, share);
                       else if (topp > 0)
                         masks::keep_top_mass(mass, limit, topp, keep, order);
                       else
                         masks::keep_min_share(mass, limit, min_share, keep);
                     });
}

}  // namespace spattn
