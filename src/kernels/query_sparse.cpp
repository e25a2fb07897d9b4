// Query-sparse attention: a subset of query rows (every gamma-th, or a list) against all causal
// keys, with compact output and, optionally, each (row, 64-key block) LSE for an observer
// (MOMO's online top-k reads it).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/query_sparse.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/blasst_policy.hpp"
#include "kernels/flash-inl.h"
#include "spattn/error.hpp"
#include "spattn/sparse_attention.hpp"

#ifndef SPATTN_KERNELS_QUERY_SPARSE_POLICY_
#define SPATTN_KERNELS_QUERY_SPARSE_POLICY_
namespace spattn::kernels {

// Tile t holds list entries [t * 64, t * 64 + 64); output row = list index (compact).
struct RowListPolicy : DensePolicy {
  const std::vector<int64_t>* list = nullptr;
  int64_t num_tiles(const Problem&) const {
    return (int64_t(list->size()) + tile_rows - 1) / tile_rows;
  }
  int64_t rows(const Problem&, int64_t t, int64_t* q_rows, int64_t* out_rows) const {
    const int64_t b = t * tile_rows, n = std::min(tile_rows, int64_t(list->size()) - b);
    for (int64_t r = 0; r < n; ++r) {
      q_rows[r] = (*list)[size_t(b + r)];
      out_rows[r] = b + r;
    }
    return n;
  }
};

// The observed row-list pass under BLASST's rule (MOMO's lambda): a skipped tile is reported to
// the observer with LSE -inf on every row, so that an observer that folds tiles into larger
// blocks still sees each tile once.
struct SkippingObservedRowList : BlasstSkipping<BlasstOrdered<LseObserved<RowListPolicy>>> {
  template <class L>
  bool skip(L& local, const TileView& v) const {
    if (!BlasstSkipping::skip(local, v)) return false;
    static const std::vector<float> no_mass(size_t(kMaxTileRows), kNegInf);
    this->report(local, v, no_mass.data());
    return true;
  }
};
using SkippingRowList = BlasstSkipping<BlasstOrdered<RowListPolicy>>;

}  // namespace spattn::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
void QuerySparseEntry(const Problem& p, const std::vector<int64_t>* rows,
                      BlockLseObserver* observer, Stats* stats, const BlasstSetup* skip) {
  if (skip && observer) {
    SkippingObservedRowList pol;
    pol.list = rows;
    pol.observer = observer;
    apply_blasst(pol, *skip);
    RunFlash(p, pol, stats);
  } else if (skip) {
    SkippingRowList pol;
    pol.list = rows;
    apply_blasst(pol, *skip);
    RunFlash(p, pol, stats);
  } else if (observer) {
    LseObserved<RowListPolicy> pol;
    pol.list = rows;
    pol.observer = observer;
    RunFlash(p, pol, stats);
  } else {
    RowListPolicy pol;
    pol.list = rows;
    RunFlash(p, pol, stats);
  }
}
}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "spattn/packed_kv.hpp"

namespace spattn {
namespace kernels {
HWY_EXPORT(QuerySparseEntry);
}

std::vector<int64_t> strided_rows(int64_t q_len, int64_t stride) {
  SPATTN_CHECK(stride >= 1, "query stride (gamma) must be >= 1, got ", stride);
  SPATTN_CHECK(q_len >= 1, "q_len must be >= 1, got ", q_len);
  std::vector<int64_t> rows;
  for (int64_t r = stride - 1; r < q_len; r += stride) rows.push_back(r);
  if (rows.empty() || rows.back() != q_len - 1) rows.push_back(q_len - 1);
  return rows;
}

namespace {
void check_rows(const TensorView& q, const std::vector<int64_t>& rows, const TensorView& out) {
  SPATTN_CHECK(!rows.empty(), "query_sparse: the row list is empty");
  for (size_t i = 0; i < rows.size(); ++i) {
    SPATTN_CHECK(rows[i] >= 0 && rows[i] < q.seq, "query_sparse: row ", rows[i], " outside [0, ",
                 q.seq, ")");
    SPATTN_CHECK(i == 0 || rows[i] > rows[i - 1],
                 "query_sparse: rows must be strictly increasing (", rows[i - 1], " then ", rows[i],
                 ")");
  }
  SPATTN_CHECK(out.heads == q.heads && out.seq == int64_t(rows.size()) && out.dim == q.dim,
               "query_sparse: out shape ", out.shape_str(), " must be [", q.heads, ", ",
               rows.size(), ", ", q.dim, "] (one row per selected query)");
  SPATTN_CHECK(out.data != nullptr, "out: data pointer is null");
}
// Validation wants out shaped like q; the kernel writes compactly.
TensorView shaped_as_q(TensorView out, const TensorView& q) {
  out.seq = q.seq;
  return out;
}
}  // namespace

void attention_query_sparse(const TensorView& q, const TensorView& k, const TensorView& v,
                            const std::vector<int64_t>& rows, const TensorView& out,
                            const AttnOptions& opt, float* lse, BlockLseObserver* observer,
                            Stats* stats) {
  check_rows(q, rows, out);
  kernels::Problem p = kernels::make_problem(q, k, v, shaped_as_q(out, q), opt, lse);
  p.out = out;
  HWY_DYNAMIC_DISPATCH(kernels::QuerySparseEntry)(p, &rows, observer, stats, nullptr);
}

void attention_query_sparse(const TensorView& q, const PackedKV& kv,
                            const std::vector<int64_t>& rows, const TensorView& out,
                            const AttnOptions& opt, float* lse, BlockLseObserver* observer,
                            Stats* stats, const BlasstSkip* skip) {
  check_rows(q, rows, out);
  kernels::Problem p = kernels::make_problem(q, kv.data(), shaped_as_q(out, q), opt, lse);
  p.out = out;
  if (!skip) {
    HWY_DYNAMIC_DISPATCH(kernels::QuerySparseEntry)(p, &rows, observer, stats, nullptr);
    return;
  }
  kernels::RowListPolicy tiles;
  tiles.list = &rows;
  const kernels::BlasstSetup s =
      kernels::blasst_setup(*skip, q.heads, tiles.num_tiles(p), tiles.tile_rows, "query_sparse");
  HWY_DYNAMIC_DISPATCH(kernels::QuerySparseEntry)(p, &rows, observer, stats, &s);
  kernels::blasst_finish(s);
}
}  // namespace spattn
#endif
