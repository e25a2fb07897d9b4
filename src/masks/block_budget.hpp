// The mass budgets a block selector spends on one query block, from its estimated block masses
// mass[0, limit) (>= 0; the query block's causal blocks), the forced blocks (sink, local,
// diagonal) already set in keep. Shared by every selector with a mass budget (mean_pool,
// xattention), so that topk, topp and min_share mean the same everywhere (momo's, over its
// blend, flexprefill's lists and quest's pages follow the same rules).
//
// Which to use (docs/methods/README.md, "Budgets"): topk spends the same count everywhere; topp
// evens out the share of each query block's mass that is kept, so its worst rows are best where
// the estimate is sharp; min_share keeps every block whose share of its query block's mass is at
// least T, one threshold across blocks, which at a given density keeps the most mean recall
// (the mean over rows is a sum of kept shares, and every full block costs the same entries);
// topp per row (`per=row`, where the estimate has rows) holds each row of the query block, not
// their sum, to P, so no row is left short where the block as a whole reached P: the worst
// row, what a mass budget is for (issue 61), at the density the rows need.
#pragma once
#include <cstdint>
#include <vector>

namespace spattn::masks {

// An estimate's rows inside one query block: row r's masses over the key blocks at
// data + r * stride (n rows; none when data is null).
struct RowMasses {
  const double* data = nullptr;
  int64_t n = 0, stride = 0;
};

// topp: the forced blocks' mass counted first, then the others, largest first (ties: the
// smaller index), until the kept mass reaches p of the total: the fewest blocks that reach it.
// `order` is scratch.
void keep_top_mass(const double* mass, int64_t limit, double p, std::vector<uint8_t>& keep,
                   std::vector<int64_t>& order);

// keep_row_mass's buffers, kept by a caller that spends many budgets (a decode step spends one
// per kv head and layer).
struct RowMassScratch {
  std::vector<double> share, total;
  std::vector<int32_t> heap;  // row r's candidate blocks at [r * limit, r * limit + size[r])
  std::vector<int64_t> size;  // -1: row r's heap not built yet
};

// topp per row: each estimated row's masses over blocks kb < limit (>= 0, any scale; a row of
// zero total is ignored). While some row keeps less than p of its total, the shortest row (the
// least kept share; ties: the smaller r) gets the block holding most of its missing mass (ties:
// the smaller index): the worst row decides each block added.
void keep_row_mass(const RowMasses& rows, int64_t limit, double p, std::vector<uint8_t>& keep,
                   RowMassScratch& scratch);

// topk: the k blocks of largest mass (ties: the smaller index) beside the forced ones, or every
// block when fewer are left. `order` is scratch.
void keep_top_count(const double* mass, int64_t limit, int64_t k, std::vector<uint8_t>& keep,
                    std::vector<int64_t>& order);

// min_share: every block whose mass is at least t of the total.
void keep_min_share(const double* mass, int64_t limit, double t, std::vector<uint8_t>& keep);

}  // namespace spattn::masks
