// Mean-pool block top-k, the block estimate of MInference and SeerAttention (MOMO, Eq. 1):
// A_hat[m][n] = rho_m(Q) . rho_n(K) with rho the mean over a block's rows. Cheap, but it scores
// blocks before the exponential, so a block of large positive and negative scores can hide.
#include <algorithm>
#include <cmath>

#include "core/threading.hpp"
#include "core/blas.hpp"
#include "masks/antidiagonal_mass.hpp"
#include "masks/block_budget.hpp"
#include "masks/block_closure.hpp"
#include "masks/top_k.hpp"
#include "methods/fraction.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"

namespace spattn {

std::vector<float> mean_pool_rows(const TensorView& t, int64_t h, int64_t block) {
  SPATTN_CHECK(block >= 1, "mean_pool_rows: block must be >= 1, got ", block);
  const int64_t nb = (t.seq + block - 1) / block, d = t.dim;
  std::vector<float> out(static_cast<size_t>(nb * d));
  std::vector<double> acc(static_cast<size_t>(d));
  // f32 rows contiguous along dim (the runner's and the dumps'): summed through a pointer,
  // since this runs inside momo's union, where a per-element dtype switch would cost more than
  // the products it feeds.
  const bool f32 = t.dtype == DType::f32 && t.stride_dim == 1;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t s0 = b * block, s1 = std::min(s0 + block, t.seq);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t s = s0; s < s1; ++s) {
      if (f32) {
        const float* x = static_cast<const float*>(t.ptr(h, s));
        for (int64_t c = 0; c < d; ++c) acc[size_t(c)] += double(x[c]);
      } else {
        for (int64_t c = 0; c < d; ++c) acc[size_t(c)] += t.get(h, s, c);
      }
    }
    for (int64_t c = 0; c < d; ++c)
      out[size_t(b * d + c)] = float(acc[size_t(c)] / double(s1 - s0));
  }
  return out;
}

std::vector<float> pool_row_moments(const TensorView& t, int64_t h, int64_t block) {
  SPATTN_CHECK(block >= 1, "pool_row_moments: block must be >= 1, got ", block);
  const int64_t nb = (t.seq + block - 1) / block, d = t.dim;
  std::vector<float> out(static_cast<size_t>(nb * 2 * d));
  std::vector<double> sum(static_cast<size_t>(d)), sq(static_cast<size_t>(d));
  const bool f32 = t.dtype == DType::f32 && t.stride_dim == 1;  // as in mean_pool_rows
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t s0 = b * block, s1 = std::min(s0 + block, t.seq);
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(sq.begin(), sq.end(), 0.0);
    for (int64_t s = s0; s < s1; ++s) {
      const float* x = f32 ? static_cast<const float*>(t.ptr(h, s)) : nullptr;
      for (int64_t c = 0; c < d; ++c) {
        const double v = f32 ? double(x[c]) : double(t.get(h, s, c));
        sum[size_t(c)] += v, sq[size_t(c)] += v * v;
      }
    }
    const double n = double(s1 - s0);
    float* o = &out[size_t(b * 2 * d)];
    for (int64_t c = 0; c < d; ++c) {
      const double m = sum[size_t(c)] / n;
      o[c] = float(m);
      o[d + c] = float(std::max(0.0, sq[size_t(c)] / n - m * m));  // rounding can dip below 0
    }
  }
  return out;
}

namespace {

// The pooled estimate of a block's mass (mean_pool's own topp, and min_share with est=pooled):
// its pooled score's softmax numerator times its keys visible to the query block (the mass if
// each of them scored the pooled score).
void pooled_mass(const float* row, int64_t limit, int64_t visible_end, int64_t block_k,
                 std::vector<double>& mass) {
  mass.assign(size_t(std::max<int64_t>(limit, 0)), 0.0);
  if (limit <= 0) return;
  const float mx = *std::max_element(row, row + limit);
  for (int64_t kb = 0; kb < limit; ++kb) {
    const int64_t n = std::min(visible_end, (kb + 1) * block_k) - kb * block_k;
    mass[size_t(kb)] = double(std::max<int64_t>(n, 0)) * std::exp(double(row[kb]) - double(mx));
  }
}

void check_budget(const MeanPoolBudget& b) {
  SPATTN_CHECK(b.topk >= 0, "mean_pool: topk must be >= 0, got ", b.topk);
  // 0 is "no such budget" here (the topk one runs); anything else is a fraction.
  if (b.topp != 0) check_fraction("mean_pool", "topp", b.topp, Fraction::up_to_one);
  if (b.min_share != 0) check_fraction("mean_pool", "min_share", b.min_share, Fraction::below_one);
  SPATTN_CHECK(b.topp == 0 || b.min_share == 0, "mean_pool: topp or min_share, not both");
  SPATTN_CHECK(b.stride >= 0, "mean_pool: stride must be >= 0, got ", b.stride);
  SPATTN_CHECK(!b.per_row || (b.topp > 0 && b.stride > 0),
               "mean_pool: per=row goes with topp on the antidiagonal estimate (its rows)");
}

}  // namespace

BlockMask mean_pool_mask(const TensorView& q, const TensorView& k, int64_t block_q, int64_t block_k,
                         int64_t topk, int64_t sink, int64_t local, const AttnOptions& opt,
                         double topp) {
  MeanPoolBudget b;
  b.topk = topk;
  b.topp = topp;
  return mean_pool_mask(q, k, block_q, block_k, sink, local, opt, b);
}

BlockMask mean_pool_mask(const TensorView& q, const TensorView& k, int64_t block_q, int64_t block_k,
                         int64_t sink, int64_t local, const AttnOptions& opt,
                         const MeanPoolBudget& budget) {
  check_budget(budget);
  SPATTN_CHECK(sink >= 0, "mean_pool: sink must be >= 0, got ", sink);
  SPATTN_CHECK(local >= 1, "mean_pool: local must be >= 1 (each row sees itself), got ", local);
  SPATTN_CHECK(q.heads > 0 && k.heads > 0 && q.heads % k.heads == 0 && q.dim == k.dim,
               "mean_pool: bad shapes q ", q.shape_str(), ", k ", k.shape_str());
  BlockMask m(q.heads, q.seq, k.seq, block_q, block_k, opt.causal);
  const int64_t nq = m.n_qb(), nk = m.n_kb(), d = q.dim, group = q.heads / k.heads;
  const int64_t off = query_position(0, q.seq, k.seq);
  const bool mass_budget = budget.topp > 0 || budget.min_share > 0;

  // Per query block: the forced blocks (sink and local, token units rounded out to the blocks
  // holding them); the keys its rows see end at visible_end.
  auto forced = [&](int64_t qb, std::vector<uint8_t>& keep) {
    const int64_t p0 = off + qb * block_q, p1 = off + std::min((qb + 1) * block_q, q.seq) - 1;
    const int64_t visible_end = opt.causal ? p1 + 1 : k.seq;
    std::fill(keep.begin(), keep.end(), 0);
    masks::mark_blocks(0, std::min(sink, visible_end), block_k, keep);
    masks::mark_blocks(p0 - local + 1, std::min(p1 + 1, visible_end), block_k, keep);
    return std::min(k.seq, visible_end);
  };
  auto spend = [&](const double* mass, int64_t limit, std::vector<uint8_t>& keep,
                   std::vector<int64_t>& order) {
    if (budget.min_share > 0)
      masks::keep_min_share(mass, limit, budget.min_share, keep);
    else
      masks::keep_top_mass(mass, limit, budget.topp, keep, order);
  };

  if (mass_budget && budget.stride > 0) {
    // The mass budgets on the antidiagonal estimate (XAttention's, masks/antidiagonal_mass.hpp).
    std::vector<std::vector<int32_t>> lists(static_cast<size_t>(q.heads * nq));
    masks::AntidiagonalConfig c;
    c.stride = budget.stride, c.block_q = block_q, c.block_k = block_k;
    c.dot_bf16 = budget.dot_bf16;
    c.rows = budget.per_row;
    masks::antidiagonal_block_mass(
        q, k, opt, c, [&](int64_t h, int64_t qb, const double* mass, const masks::RowMasses& rows) {
          std::vector<uint8_t> keep(static_cast<size_t>(nk));
          std::vector<int64_t> order;
          masks::RowMassScratch share;
          forced(qb, keep);
          if (budget.per_row)
            masks::keep_row_mass(rows, m.causal_blocks(qb), budget.topp, keep, share);
          else
            spend(mass, m.causal_blocks(qb), keep, order);
          auto& list = lists[size_t(h * nq + qb)];
          for (int64_t kb = 0; kb < m.causal_blocks(qb); ++kb)
            if (keep[size_t(kb)]) list.push_back(int32_t(kb));
        });
    return BlockMask::from_lists(q.heads, q.seq, k.seq, block_q, block_k, opt.causal, lists);
  }

  const float scale = softmax_scale(opt, d);
  const int threads = resolve_threads(opt.threads);
  std::vector<float> kp, score(size_t(nq * nk));
  std::vector<uint8_t> keep(static_cast<size_t>(nk));
  std::vector<double> mass;
  std::vector<int64_t> order;
  for (int64_t h = 0; h < q.heads; ++h) {
    if (h % group == 0) kp = mean_pool_rows(k, h / group, block_k);
    const std::vector<float> qp = mean_pool_rows(q, h, block_q);
    blas::sgemm(true, nq, nk, d, scale, qp.data(), d, kp.data(), d, 0.0f, score.data(), nk,
                threads);
    for (int64_t qb = 0; qb < nq; ++qb) {
      const int64_t limit = m.causal_blocks(qb);
      const int64_t visible = forced(qb, keep);
      float* row = &score[size_t(qb * nk)];
      if (mass_budget) {
        pooled_mass(row, limit, visible, block_k, mass);
        spend(mass.data(), limit, keep, order);
      } else {
        // topk more blocks by pooled score, among the causal blocks not already kept.
        for (int64_t kb = 0; kb < nk; ++kb)
          if (keep[size_t(kb)] || kb >= limit) row[kb] = -INFINITY;
        int64_t open = 0;
        for (int64_t kb = 0; kb < limit; ++kb) open += !keep[size_t(kb)];
        for (int64_t kb : masks::top_indices(row, nk, std::min(budget.topk, open)))
          keep[size_t(kb)] = 1;
      }
      for (int64_t kb = 0; kb < nk; ++kb)
        if (keep[size_t(kb)]) m.blocks.push_back(int32_t(kb));
      m.offsets[size_t(h * nq + qb + 1)] = int64_t(m.blocks.size());
    }
  }
  return m;
}

}  // namespace spattn
