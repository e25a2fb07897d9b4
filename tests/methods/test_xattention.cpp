// xattention (src/methods/xattention.cpp) and mean_pool's topp budget against plain scalar
// twins written from their definitions in double: masks equal row for row, except rows where
// the twin itself sees a near-tie (two block scores, or the kept mass and the budget, within
// float rounding of the fast estimate); those must still be a valid selection under the twin's
// scores, and stay rare. Then the kernel on the mask against the masked reference, the
// parameters' checks, and the CLI's exit code on a bad budget.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "masked_reference.hpp"
#include "row_mass_twin.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/method.hpp"
#include "spattn/sparse_attention.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

// One query block's selection from its block scores, as both methods define it: forced blocks
// first, then the rest by descending score (ties: the smaller index) while the kept score is
// below p of the total. `mass` are the scores selection sums (xattention: the scores
// themselves; mean_pool: the estimated mass).
std::set<int64_t> select(const std::vector<double>& mass, const std::set<int64_t>& forced,
                         double p) {
  double total = 0, kept = 0;
  std::vector<int64_t> rest;
  for (size_t kb = 0; kb < mass.size(); ++kb) {
    total += mass[kb];
    if (forced.count(int64_t(kb)))
      kept += mass[kb];
    else
      rest.push_back(int64_t(kb));
  }
  std::sort(rest.begin(), rest.end(), [&](int64_t a, int64_t b) {
    return mass[size_t(a)] != mass[size_t(b)] ? mass[size_t(a)] > mass[size_t(b)] : a < b;
  });
  std::set<int64_t> keep = forced;
  for (size_t i = 0; i < rest.size() && kept < p * total; ++i) {
    keep.insert(rest[i]);
    kept += mass[size_t(rest[i])];
  }
  return keep;
}

// A row the method chose differently from the twin is accepted only as a valid selection
// under the twin's scores, within `eps` of the total: forced blocks kept, the budget reached,
// nothing droppable (removing the smallest chosen block falls below it), and no dropped block
// better than a chosen one.
bool valid_within(const std::vector<double>& mass, const std::set<int64_t>& forced, double p,
                  const std::set<int64_t>& got, double eps) {
  double total = 0, kept = 0, worst_kept = INFINITY, best_dropped = -INFINITY;
  for (size_t kb = 0; kb < mass.size(); ++kb) total += mass[kb];
  for (int64_t kb : forced)
    if (!got.count(kb)) return false;
  for (int64_t kb : got) {
    if (kb < 0 || kb >= int64_t(mass.size())) return false;
    kept += mass[size_t(kb)];
    if (!forced.count(kb)) worst_kept = std::min(worst_kept, mass[size_t(kb)]);
  }
  for (size_t kb = 0; kb < mass.size(); ++kb)
    if (!got.count(int64_t(kb))) best_dropped = std::max(best_dropped, mass[kb]);
  const double tol = eps * total;
  if (kept < p * total - tol) return false;
  if (worst_kept != INFINITY && kept - worst_kept >= p * total + tol) return false;
  return !(worst_kept != INFINITY && best_dropped > worst_kept + tol);
}

// Twin's near-ties: two adjacent sorted scores, or a running kept sum and the budget, within
// eps of the total.
bool near_tie(const std::vector<double>& mass, const std::set<int64_t>& forced, double p,
              double eps) {
  double total = 0, kept = 0;
  std::vector<double> rest;
  for (size_t kb = 0; kb < mass.size(); ++kb) {
    total += mass[kb];
    if (forced.count(int64_t(kb)))
      kept += mass[kb];
    else
      rest.push_back(mass[kb]);
  }
  std::sort(rest.rbegin(), rest.rend());
  const double tol = eps * total;
  for (size_t i = 0; i + 1 < rest.size(); ++i)
    if (rest[i] - rest[i + 1] <= tol) return true;
  if (std::abs(kept - p * total) <= tol) return true;
  for (double x : rest) {
    kept += x;
    if (std::abs(kept - p * total) <= tol) return true;
  }
  return false;
}

struct Shape {
  int64_t hq, hkv, lq, lk, dim;
};

struct Case {
  Shape s;
  int64_t stride, block_q, block_k;
  double tau;
  bool causal;
  const char* input;  // random, equal_keys, peaked, zero_q, vertical
  int64_t local = 1;  // each row's most recent keys forced (1: the diagonal blocks, the paper's)
};

struct Inputs {
  Tensor q, k, v;
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  Inputs in{test::random_tensor(DType::f32, c.s.hq, c.s.lq, c.s.dim, seed),
            test::random_tensor(DType::f32, c.s.hkv, c.s.lk, c.s.dim, seed + 1),
            test::random_tensor(DType::f32, c.s.hkv, c.s.lk, c.s.dim, seed + 2)};
  const std::string kind = c.input;
  const TensorView q = in.q, k = in.k;
  if (kind == "equal_keys")  // every score of a row ties: the order is the tie rule's
    for (int64_t h = 0; h < c.s.hkv; ++h)
      for (int64_t j = 0; j < c.s.lk; ++j)
        for (int64_t d = 0; d < c.s.dim; ++d) k.set(h, j, d, k.get(h, 0, d));
  if (kind == "peaked")  // large queries: each row's softmax on one or two key groups
    for (int64_t h = 0; h < c.s.hq; ++h)
      for (int64_t i = 0; i < c.s.lq; ++i)
        for (int64_t d = 0; d < c.s.dim; ++d) q.set(h, i, d, 40.0f * q.get(h, i, d));
  if (kind == "zero_q")  // uniform rows: block scores are visible-group counts
    for (int64_t h = 0; h < c.s.hq; ++h)
      for (int64_t i = 0; i < c.s.lq; ++i)
        for (int64_t d = 0; d < c.s.dim; ++d) q.set(h, i, d, 0.0f);
  if (kind == "vertical")  // a few keys every query attends to (an attention sink elsewhere)
    for (int64_t h = 0; h < c.s.hkv; ++h)
      for (int64_t j : {c.s.lk / 3, c.s.lk / 2 + 1})
        for (int64_t d = 0; d < c.s.dim; ++d) k.set(h, j, d, 0.0f);
  if (kind == "vertical") {  // queries aligned with dim 0, the vertical keys large there
    for (int64_t h = 0; h < c.s.hq; ++h)
      for (int64_t i = 0; i < c.s.lq; ++i) q.set(h, i, 0, 6.0f);
    for (int64_t h = 0; h < c.s.hkv; ++h)
      for (int64_t j : {c.s.lk / 3, c.s.lk / 2 + 1}) k.set(h, j, 0, 6.0f);
  }
  return in;
}

// XAttention's estimate for one q head, plainly, row by row: per strided query row g the
// antidiagonal means of every visible key group, their softmax, summed per key block.
std::vector<std::vector<double>> xattn_row_scores(const Inputs& in, const Case& c, int64_t h,
                                                  const BlockMask& m) {
  const TensorView q = in.q, k = in.k;
  const int64_t S = c.stride, lq = c.s.lq, lk = c.s.lk, kh = h / (c.s.hq / c.s.hkv);
  const int64_t gq = (lq + S - 1) / S, gk = (lk + S - 1) / S, off = lk - lq;
  const double scale = 1.0 / std::sqrt(double(c.s.dim)) / double(S);
  std::vector<std::vector<double>> rows(size_t(gq), std::vector<double>(size_t(m.n_kb())));
  for (int64_t g = 0; g < gq; ++g) {
    const int64_t last = off + std::min(g * S + S - 1, lq - 1);  // the group's last query
    std::vector<double> s;
    for (int64_t j = 0; j < gk && (!c.causal || j * S <= last); ++j) {
      double dot = 0;
      for (int64_t t = 0; t < S; ++t) {
        const int64_t qi = g * S + S - 1 - t, kj = j * S + t;
        if (qi >= lq || kj >= lk) continue;
        for (int64_t d = 0; d < c.s.dim; ++d)
          dot += double(q.get(h, qi, d)) * double(k.get(kh, kj, d));
      }
      s.push_back(dot * scale);
    }
    if (s.empty()) continue;
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double x : s) sum += std::exp(x - mx);
    for (size_t j = 0; j < s.size(); ++j)
      rows[size_t(g)][size_t(int64_t(j) * S / c.block_k)] += std::exp(s[j] - mx) / sum;
  }
  return rows;
}

// The block scores: the rows' summed per (query block, key block).
std::vector<std::vector<double>> xattn_scores(const Inputs& in, const Case& c, int64_t h,
                                              const BlockMask& m) {
  const auto rows = xattn_row_scores(in, c, h, m);
  std::vector<std::vector<double>> bs(size_t(m.n_qb()), std::vector<double>(size_t(m.n_kb())));
  for (size_t g = 0; g < rows.size(); ++g)
    for (size_t kb = 0; kb < rows[g].size(); ++kb)
      bs[g * size_t(c.stride) / size_t(c.block_q)][kb] += rows[g][kb];
  return bs;
}

std::string spec_of(const Case& c) {
  return "xattention:stride=" + std::to_string(c.stride) + ",tau=" + std::to_string(c.tau) +
         ",block_q=" + std::to_string(c.block_q) + ",block_k=" + std::to_string(c.block_k) +
         (c.local != 1 ? ",local=" + std::to_string(c.local) : "");
}

TEST(XAttention, MaskEqualsTheScalarTwin) {
  const Case cases[] = {
      {{4, 2, 300, 300, 32}, 8, 64, 64, 0.9, true, "random"},
      {{4, 2, 640, 640, 32}, 8, 32, 32, 0.9, true, "random"},  // many query blocks
      {{4, 4, 700, 700, 32}, 16, 32, 64, 0.8, true, "random"},
      {{4, 2, 257, 257, 32}, 8, 128, 128, 0.9, true, "random"},  // odd length, paper blocks
      {{2, 2, 131, 389, 32}, 4, 32, 64, 0.8, true, "random"},    // queries after a prefix
      {{3, 1, 200, 200, 32}, 16, 64, 32, 0.95, true, "random"},  // GQA 3:1, block_k < block_q
      {{2, 1, 4, 300, 32}, 8, 64, 64, 0.9, true, "random"},      // a decode-sized chunk
      {{2, 2, 200, 150, 32}, 8, 32, 32, 0.9, false, "random"},   // non-causal
      {{4, 2, 500, 600, 32}, 4, 32, 32, 0.9, false, "random"},
      {{2, 2, 190, 190, 32}, 1, 32, 32, 0.7, true, "random"},  // S = 1: exact softmax sums
      {{2, 2, 300, 300, 32}, 8, 64, 64, 1.0, true, "random"},  // tau = 1 keeps all but zeros
      {{2, 1, 300, 300, 32}, 8, 64, 64, 0.9, true, "equal_keys"},
      {{2, 2, 300, 300, 32}, 8, 64, 64, 0.9, true, "peaked"},
      {{2, 2, 300, 300, 32}, 8, 64, 64, 0.5, true, "zero_q"},
      {{2, 2, 400, 400, 32}, 8, 64, 64, 0.6, true, "vertical"},
      {{4, 2, 300, 300, 32}, 8, 64, 64, 0.9, true, "random", 64},   // each row's last 64 keys
      {{2, 2, 131, 389, 32}, 4, 32, 64, 0.8, true, "random", 100},  // more than a block back
      {{2, 2, 300, 300, 32}, 8, 64, 64, 0.9, true, "peaked", 64},
      {{2, 2, 200, 150, 32}, 8, 32, 32, 0.9, false, "random", 40},  // non-causal
  };
  int64_t rows = 0, exact = 0;
  // The estimate's products in f32 and in bf16 (the default; f32 where the CPU lacks
  // AVX512_BF16): the twin's double scores stand for both, bf16's rounding within its near-ties.
  for (const char* dot : {",dot=f32", ""})
    for (const Case& c : cases) {
      const std::string what = spec_of(c) + dot + " " + c.input + " " + std::to_string(c.s.lq) +
                               "x" + std::to_string(c.s.lk) + (c.causal ? "" : " non-causal");
      const Inputs in = make_inputs(c, 17 + uint64_t(c.s.lq));
      AttnOptions opt;
      opt.causal = c.causal;
      const auto method = make_method(spec_of(c) + dot);
      Tensor out(DType::f32, c.s.hq, c.s.lq, c.s.dim);
      BlockMask got;
      for (int threads : {1, 3}) {  // the mask does not depend on the thread count
        opt.threads = threads;
        const MethodReport r = method->run(in.q, in.k, in.v, out, opt);
        ASSERT_NE(r.mask, nullptr) << what;
        r.mask->validate();
        if (threads == 1)
          got = *r.mask;
        else
          EXPECT_EQ(r.mask->to_dense(), got.to_dense()) << what << ": thread count";
      }
      ASSERT_EQ(got.block_q, c.block_q);
      ASSERT_EQ(got.block_k, c.block_k);
      for (int64_t h = 0; h < c.s.hq; ++h) {
        const auto bs = xattn_scores(in, c, h, got);
        for (int64_t qb = 0; qb < got.n_qb(); ++qb) {
          const int64_t limit = got.causal_blocks(qb), off = c.s.lk - c.s.lq;
          const int64_t p0 = off + qb * c.block_q,
                        p1 = off + std::min((qb + 1) * c.block_q, c.s.lq) - 1;
          std::set<int64_t> forced;
          if (limit > 0) forced.insert(0);
          for (int64_t p = std::max<int64_t>(p0 - c.local + 1, 0); p <= p1 && p < c.s.lk; ++p)
            forced.insert(p / c.block_k);
          const std::vector<double> mass(bs[size_t(qb)].begin(), bs[size_t(qb)].begin() + limit);
          const std::set<int64_t> want = select(mass, forced, c.tau);
          auto row = got.row(h, qb);
          const std::set<int64_t> have(row.begin(), row.end());
          ++rows;
          if (have == want) {
            ++exact;
            continue;
          }
          const std::string where =
              what + " head " + std::to_string(h) + " qblock " + std::to_string(qb);
          EXPECT_TRUE(near_tie(mass, forced, c.tau, 1e-5))
              << where << ": differs without a near-tie";
          EXPECT_TRUE(valid_within(mass, forced, c.tau, have, 1e-5)) << where;
        }
      }
    }
  // Near-ties are rare outside the all-equal input; a wrong estimate would differ everywhere.
  EXPECT_GE(double(exact), 0.95 * double(rows)) << exact << " of " << rows << " rows equal";
}

TEST(XAttention, KernelMatchesMaskedReference) {
  for (bool causal : {true, false})
    for (int64_t lq : {1, 65, 200}) {
      const Case c{{4, 2, lq, 200, 32}, 8, 32, 64, 0.9, causal, "random"};
      const Inputs in = make_inputs(c, 5);
      AttnOptions opt;
      opt.causal = causal;
      Tensor out(DType::f32, 4, lq, 32);
      std::vector<float> lse(size_t(4 * lq));
      const MethodReport r = make_method(spec_of(c))->run(in.q, in.k, in.v, out, opt, lse.data());
      test::expect_matches(
          out, lse, test::masked_reference(in.q, in.k, in.v, causal, test::mask_predicate(*r.mask)),
          "xattention lq " + std::to_string(lq) + (causal ? "" : " non-causal"));
      EXPECT_EQ(r.extras.at("stride"), 8.0);
      EXPECT_EQ(r.extras.at("tau"), 0.9);
    }
}

TEST(XAttention, DefaultsAreThePapers) {
  const Case c{{2, 2, 512, 512, 32}, 8, 128, 128, 0.9, true, "random"};
  const Inputs in = make_inputs(c, 9);
  Tensor out(DType::f32, 2, 512, 32);
  const MethodReport r = make_method("xattention")->run(in.q, in.k, in.v, out, {});
  EXPECT_EQ(r.mask->block_q, 128);
  EXPECT_EQ(r.mask->block_k, 128);
  EXPECT_EQ(r.extras.at("stride"), 8.0);
  EXPECT_EQ(r.extras.at("tau"), 0.9);
  EXPECT_EQ(r.extras.at("local"), 1.0);  // the diagonal blocks only
  // topp is the same budget under its other name.
  const MethodReport same = make_method("xattention:topp=0.9")->run(in.q, in.k, in.v, out, {});
  EXPECT_EQ(same.mask->to_dense(), r.mask->to_dense());
}

TEST(XAttention, RejectsBadParameters) {
  for (const char* spec :
       {"xattention:dot=f16", "xattention:tau=0", "xattention:tau=1.5", "xattention:tau=-0.1",
        "xattention:tau=nan", "xattention:tau=abc", "xattention:topp=0",
        "xattention:tau=0.9,topp=0.9", "xattention:stride=0", "xattention:stride=3",
        "xattention:stride=16,block_k=8", "xattention:block_q=0", "xattention:topk=x",
        "xattention:local=0"}) {
    EXPECT_THROW(make_method(spec), Error) << spec;
  }
}

// Every method that ranks blocks from an estimate (BlockMaskMethod) checks its inputs first,
// so a NaN is a named Error, never a sort over NaN scores.
TEST(XAttention, EstimatingMethodsRejectNonFiniteInputBeforeTheEstimate) {
  const Case c{{2, 2, 256, 256, 32}, 8, 64, 64, 0.9, true, "random"};
  const Inputs in = make_inputs(c, 2);
  TensorView(in.k).set(1, 100, 3, NAN);
  Tensor out(DType::f32, 2, 256, 32);
  for (const char* spec : {"xattention", "mean_pool", "mean_pool:topp=0.9", "oracle_topk"}) {
    try {
      make_method(spec)->run(in.q, in.k, in.v, out, {});
      ADD_FAILURE() << spec << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("k"), std::string::npos) << spec << ": " << e.what();
    }
  }
}

// ---- mean_pool's topp -------------------------------------------------------------------

TEST(MeanPoolTopP, MaskEqualsTheScalarTwin) {
  struct PCase {
    int64_t lq, lk, bq, bk, sink, local;
    double p;
    bool causal;
    const char* input;
  };
  const PCase cases[] = {{300, 300, 64, 64, 64, 64, 0.9, true, "random"},
                         {257, 389, 32, 64, 0, 1, 0.5, true, "random"},
                         {200, 200, 64, 32, 16, 16, 0.99, true, "peaked"},
                         {200, 150, 32, 32, 0, 1, 0.8, false, "random"},
                         {300, 300, 64, 64, 0, 1, 0.7, true, "equal_keys"},
                         {300, 300, 64, 64, 64, 64, 1.0, true, "random"}};
  int64_t rows = 0, exact = 0;
  for (const PCase& c : cases) {
    const Case base{{4, 2, c.lq, c.lk, 32}, 8, 64, 64, c.p, c.causal, c.input};
    const Inputs in = make_inputs(base, 41 + uint64_t(c.lq));
    AttnOptions opt;
    opt.causal = c.causal;
    const BlockMask m = mean_pool_mask(in.q, in.k, c.bq, c.bk, 0, c.sink, c.local, opt, c.p);
    m.validate();
    const std::string what = std::string("mean_pool topp ") + std::to_string(c.p) + " " + c.input;
    const TensorView q = in.q, k = in.k;
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
        const int64_t r0 = qb * c.bq, r1 = std::min(r0 + c.bq, c.lq), off = c.lk - c.lq;
        const int64_t p0 = off + r0, p1 = off + r1 - 1, limit = m.causal_blocks(qb);
        const int64_t end = c.causal ? std::min(p1 + 1, c.lk) : c.lk;
        std::set<int64_t> forced;
        for (int64_t p = p0; p <= p1; ++p)
          for (int64_t j = 0; j < (c.causal ? p + 1 : c.lk); ++j)
            if (j < c.sink || (j > p - c.local && j <= p)) forced.insert(j / c.bk);
        std::vector<double> score(static_cast<size_t>(limit));
        for (int64_t kb = 0; kb < limit; ++kb) {
          const int64_t k0 = kb * c.bk, k1 = std::min(k0 + c.bk, c.lk);
          double s = 0;
          for (int64_t d = 0; d < 32; ++d) {
            double qm = 0, km = 0;
            for (int64_t i = r0; i < r1; ++i) qm += q.get(h, i, d) / double(r1 - r0);
            for (int64_t j = k0; j < k1; ++j) km += k.get(h / 2, j, d) / double(k1 - k0);
            s += qm * km;
          }
          score[size_t(kb)] = s / std::sqrt(32.0);
        }
        if (limit == 0) continue;
        const double mx = *std::max_element(score.begin(), score.end());
        std::vector<double> mass(static_cast<size_t>(limit));
        for (int64_t kb = 0; kb < limit; ++kb)
          mass[size_t(kb)] =
              double(std::max<int64_t>(0, std::min(end, (kb + 1) * c.bk) - kb * c.bk)) *
              std::exp(score[size_t(kb)] - mx);
        const std::set<int64_t> want = select(mass, forced, c.p);
        auto row = m.row(h, qb);
        const std::set<int64_t> have(row.begin(), row.end());
        ++rows;
        if (have == want) {
          ++exact;
          continue;
        }
        const std::string where =
            what + " head " + std::to_string(h) + " qblock " + std::to_string(qb);
        EXPECT_TRUE(near_tie(mass, forced, c.p, 1e-5)) << where << ": differs without a near-tie";
        EXPECT_TRUE(valid_within(mass, forced, c.p, have, 1e-5)) << where;
      }
  }
  EXPECT_GE(double(exact), 0.95 * double(rows)) << exact << " of " << rows << " rows equal";
}

TEST(MeanPoolTopP, SmallerBudgetKeepsFewerBlocksAndSpecReachesIt) {
  const Case c{{2, 2, 512, 512, 32}, 8, 64, 64, 0.9, true, "random"};
  const Inputs in = make_inputs(c, 3);
  Tensor out(DType::f32, 2, 512, 32);
  int64_t last = -1;
  for (const char* spec : {"mean_pool:topp=0.3,est=pooled", "mean_pool:topp=0.7,est=pooled",
                           "mean_pool:topp=1,est=pooled"}) {
    const MethodReport r = make_method(spec)->run(in.q, in.k, in.v, out, {});
    const BlockMask want =
        mean_pool_mask(in.q, in.k, 64, 64, 0, 64, 64, {}, std::stod(std::string(spec).substr(15)));
    EXPECT_EQ(r.mask->to_dense(), want.to_dense()) << spec;
    EXPECT_GE(int64_t(r.mask->blocks.size()), last) << spec;
    last = int64_t(r.mask->blocks.size());
  }
  // topp=1 keeps every causal block (each has positive estimated mass).
  EXPECT_EQ(last, int64_t(BlockMask::full(2, 512, 512, 64, 64, true).blocks.size()));
}

TEST(MeanPoolTopP, RejectsBadBudgets) {
  for (const char* spec : {"mean_pool:topp=0", "mean_pool:topp=1.01", "mean_pool:topp=-1",
                           "mean_pool:topp=inf", "mean_pool:topp=x", "mean_pool:topk=4,topp=0.5"})
    EXPECT_THROW(make_method(spec), Error) << spec;
  const Case c{{1, 1, 64, 64, 32}, 8, 64, 64, 0.9, true, "random"};
  const Inputs in = make_inputs(c, 1);
  EXPECT_THROW(mean_pool_mask(in.q, in.k, 64, 64, 0, 0, 1, {}, 1.5), Error);
  EXPECT_THROW(mean_pool_mask(in.q, in.k, 64, 64, 0, 0, 1, {}, -0.5), Error);
}

// ---- mass budgets on the antidiagonal estimate: mean_pool's topp and min_share,
// xattention's min_share ------------------------------------------------------------------

// min_share's twin: the forced blocks and every block whose mass is at least t of the total.
std::set<int64_t> select_share(const std::vector<double>& mass, const std::set<int64_t>& forced,
                               double t) {
  double total = 0;
  for (double x : mass) total += x;
  std::set<int64_t> keep = forced;
  for (size_t kb = 0; kb < mass.size(); ++kb)
    if (mass[kb] >= t * total) keep.insert(int64_t(kb));
  return keep;
}
// topk's twin: the forced blocks and the k largest of the rest (ties: the smaller index).
std::set<int64_t> select_count(const std::vector<double>& mass, const std::set<int64_t>& forced,
                               int64_t k) {
  std::vector<int64_t> rest;
  for (size_t kb = 0; kb < mass.size(); ++kb)
    if (!forced.count(int64_t(kb))) rest.push_back(int64_t(kb));
  std::sort(rest.begin(), rest.end(), [&](int64_t a, int64_t b) {
    return mass[size_t(a)] != mass[size_t(b)] ? mass[size_t(a)] > mass[size_t(b)] : a < b;
  });
  std::set<int64_t> keep = forced;
  for (size_t i = 0; i < rest.size() && int64_t(i) < k; ++i) keep.insert(rest[i]);
  return keep;
}
// Whether the k-th and (k+1)-th of the rest lie within eps of the total.
bool count_near_tie(const std::vector<double>& mass, const std::set<int64_t>& forced, int64_t k,
                    double eps) {
  double total = 0;
  std::vector<double> rest;
  for (size_t kb = 0; kb < mass.size(); ++kb) {
    total += mass[kb];
    if (!forced.count(int64_t(kb))) rest.push_back(mass[kb]);
  }
  std::sort(rest.rbegin(), rest.rend());
  return k > 0 && k < int64_t(rest.size()) && rest[size_t(k - 1)] - rest[size_t(k)] <= eps * total;
}
bool share_near_tie(const std::vector<double>& mass, double t, double eps) {
  double total = 0;
  for (double x : mass) total += x;
  for (double x : mass)
    if (std::abs(x - t * total) <= eps * total) return true;
  return false;
}

struct BudgetCase {
  Case c;
  int64_t sink, local;  // mean_pool's (tokens); negative: xattention's sink and diagonal
  double topp, min_share;
  int64_t topk = -1;  // >= 0: xattention's topk
};

// The blocks a query block keeps before its budget: xattention's sink and diagonal (b.sink < 0)
// or mean_pool's sink and local keys.
std::set<int64_t> forced_blocks(const BudgetCase& b, int64_t qb, int64_t limit) {
  const Case& c = b.c;
  const int64_t off = c.s.lk - c.s.lq;
  const int64_t r0 = qb * c.block_q, r1 = std::min(r0 + c.block_q, c.s.lq);
  const int64_t p0 = off + r0, p1 = off + r1 - 1;
  std::set<int64_t> forced;
  if (b.sink < 0) {
    if (limit > 0) forced.insert(0);
    for (int64_t p = std::max<int64_t>(p0, 0); p <= p1 && p < c.s.lk; ++p)
      forced.insert(p / c.block_k);
  } else {
    for (int64_t p = p0; p <= p1; ++p)
      for (int64_t j = 0; j < (c.causal ? p + 1 : c.s.lk); ++j)
        if (j < b.sink || (j > p - b.local && j <= p)) forced.insert(j / c.block_k);
  }
  return forced;
}

// The mask against the twin: the antidiagonal scores (xattn_scores) and the twin's selection;
// a row may differ only at a near-tie, and then must be a valid selection (topp).
void expect_twin(const BlockMask& got, const Inputs& in, const BudgetCase& b,
                 const std::string& what) {
  const Case& c = b.c;
  int64_t rows = 0, exact = 0;
  for (int64_t h = 0; h < c.s.hq; ++h) {
    const auto bs = xattn_scores(in, c, h, got);
    for (int64_t qb = 0; qb < got.n_qb(); ++qb) {
      const int64_t limit = got.causal_blocks(qb);
      const std::set<int64_t> forced = forced_blocks(b, qb, limit);
      const std::vector<double> mass(bs[size_t(qb)].begin(), bs[size_t(qb)].begin() + limit);
      const std::set<int64_t> want = b.topk >= 0       ? select_count(mass, forced, b.topk)
                                     : b.min_share > 0 ? select_share(mass, forced, b.min_share)
                                                       : select(mass, forced, b.topp);
      auto row = got.row(h, qb);
      const std::set<int64_t> have(row.begin(), row.end());
      ++rows;
      if (have == want) {
        ++exact;
        continue;
      }
      const std::string where =
          what + " head " + std::to_string(h) + " qblock " + std::to_string(qb);
      if (b.topk >= 0) {
        EXPECT_TRUE(count_near_tie(mass, forced, b.topk, 1e-5)) << where << ": differs";
      } else if (b.min_share > 0) {
        EXPECT_TRUE(share_near_tie(mass, b.min_share, 1e-5)) << where << ": differs";
      } else {
        EXPECT_TRUE(near_tie(mass, forced, b.topp, 1e-5)) << where << ": differs";
        EXPECT_TRUE(valid_within(mass, forced, b.topp, have, 1e-5)) << where;
      }
    }
  }
  EXPECT_GE(double(exact), 0.95 * double(rows)) << what << ": " << exact << " of " << rows;
}

TEST(MassBudgets, MeanPoolOnTheAntidiagonalEqualsTheTwin) {
  const BudgetCase cases[] = {
      {{{4, 2, 300, 300, 32}, 8, 64, 64, 0, true, "random"}, 64, 64, 0.9, 0},
      {{{4, 2, 300, 300, 32}, 8, 64, 64, 0, true, "random"}, 64, 64, 0, 0.05},
      {{{2, 1, 257, 389, 32}, 4, 32, 64, 0, true, "random"}, 0, 1, 0.5, 0},
      {{{2, 1, 257, 389, 32}, 4, 32, 64, 0, true, "random"}, 0, 1, 0, 0.02},
      {{{2, 2, 300, 300, 32}, 8, 64, 64, 0, true, "peaked"}, 16, 16, 0.99, 0},
      {{{2, 2, 400, 400, 32}, 8, 64, 64, 0, true, "vertical"}, 0, 1, 0, 0.1},
      {{{2, 2, 200, 150, 32}, 8, 32, 32, 0, false, "random"}, 0, 1, 0.8, 0},
      {{{2, 2, 200, 150, 32}, 8, 32, 32, 0, false, "random"}, 0, 1, 0, 0.03},
  };
  for (const BudgetCase& b : cases) {
    const Case& c = b.c;
    const Inputs in = make_inputs(c, 23 + uint64_t(c.s.lq));
    AttnOptions opt;
    opt.causal = c.causal;
    MeanPoolBudget budget;
    budget.topp = b.topp, budget.min_share = b.min_share, budget.stride = c.stride;
    budget.dot_bf16 = false;  // the twin's double products stand for f32's
    const BlockMask got =
        mean_pool_mask(in.q, in.k, c.block_q, c.block_k, b.sink, b.local, opt, budget);
    got.validate();
    const std::string what = std::string("mean_pool ") +
                             (b.min_share > 0 ? "min_share " + std::to_string(b.min_share)
                                              : "topp " + std::to_string(b.topp)) +
                             " " + c.input + (c.causal ? "" : " non-causal");
    expect_twin(got, in, b, what);
  }
}

TEST(MassBudgets, XAttentionMinShareEqualsTheTwin) {
  const BudgetCase cases[] = {
      {{{4, 2, 300, 300, 32}, 8, 64, 64, 0, true, "random"}, -1, 0, 0, 0.05},
      {{{2, 2, 640, 640, 32}, 8, 32, 32, 0, true, "random"}, -1, 0, 0, 0.01},
      {{{2, 2, 400, 400, 32}, 8, 64, 64, 0, true, "vertical"}, -1, 0, 0, 0.1},
      {{{2, 2, 200, 150, 32}, 8, 32, 32, 0, false, "random"}, -1, 0, 0, 0.04},
  };
  for (const BudgetCase& b : cases) {
    const Case& c = b.c;
    const Inputs in = make_inputs(c, 29 + uint64_t(c.s.lq));
    AttnOptions opt;
    opt.causal = c.causal;
    const std::string spec = "xattention:dot=f32,stride=" + std::to_string(c.stride) +
                             ",block_q=" + std::to_string(c.block_q) +
                             ",block_k=" + std::to_string(c.block_k) +
                             ",min_share=" + std::to_string(b.min_share);
    Tensor out(DType::f32, c.s.hq, c.s.lq, c.s.dim);
    const MethodReport r = make_method(spec)->run(in.q, in.k, in.v, out, opt);
    ASSERT_NE(r.mask, nullptr) << spec;
    EXPECT_EQ(r.extras.at("min_share"), b.min_share) << spec;
    expect_twin(*r.mask, in, b, spec + " " + c.input);
  }
}

TEST(MassBudgets, XAttentionTopkEqualsTheTwin) {
  const BudgetCase cases[] = {
      {{{4, 2, 300, 300, 32}, 8, 64, 64, 0, true, "random"}, -1, 0, 0, 0, 1},
      {{{2, 2, 640, 640, 32}, 8, 32, 32, 0, true, "random"}, -1, 0, 0, 0, 4},
      {{{2, 2, 400, 400, 32}, 8, 64, 64, 0, true, "vertical"}, -1, 0, 0, 0, 2},
      {{{2, 2, 200, 150, 32}, 8, 32, 32, 0, false, "random"}, -1, 0, 0, 0, 0},
  };
  for (const BudgetCase& b : cases) {
    const Case& c = b.c;
    const Inputs in = make_inputs(c, 37 + uint64_t(c.s.lq));
    AttnOptions opt;
    opt.causal = c.causal;
    const std::string spec = "xattention:dot=f32,stride=" + std::to_string(c.stride) +
                             ",block_q=" + std::to_string(c.block_q) +
                             ",block_k=" + std::to_string(c.block_k) +
                             ",topk=" + std::to_string(b.topk);
    Tensor out(DType::f32, c.s.hq, c.s.lq, c.s.dim);
    const MethodReport r = make_method(spec)->run(in.q, in.k, in.v, out, opt);
    ASSERT_NE(r.mask, nullptr) << spec;
    EXPECT_EQ(r.extras.at("topk"), double(b.topk)) << spec;
    expect_twin(*r.mask, in, b, spec + " " + c.input);
  }
  // A count covering every key block skips the estimate and runs dense (dense_shortcut).
  const Case c{{2, 2, 256, 256, 32}, 8, 64, 64, 0, true, "random"};
  const Inputs in = make_inputs(c, 41);
  Tensor out(DType::f32, 2, 256, 32);
  const MethodReport r =
      make_method("xattention:block_q=64,block_k=64,topk=4")->run(in.q, in.k, in.v, out, {});
  EXPECT_EQ(r.dense_shortcut, "budget");
}

// topp per row against the twin: each strided row of the antidiagonal estimate
// (xattn_row_scores) and the plain rule (row_mass_twin); a query block may differ only where the
// f32 estimate's rounding moved a choice, and then every row still reaches P.
void expect_row_twin(const BlockMask& got, const Inputs& in, const BudgetCase& b,
                     const std::string& what) {
  const Case& c = b.c;
  const int64_t rq = c.block_q / c.stride;
  int64_t blocks = 0, exact = 0;
  for (int64_t h = 0; h < c.s.hq; ++h) {
    const auto rows = xattn_row_scores(in, c, h, got);
    for (int64_t qb = 0; qb < got.n_qb(); ++qb) {
      const int64_t limit = got.causal_blocks(qb);
      std::vector<std::vector<double>> mine;
      for (int64_t g = qb * rq; g < std::min((qb + 1) * rq, int64_t(rows.size())); ++g)
        mine.emplace_back(rows[size_t(g)].begin(), rows[size_t(g)].begin() + limit);
      const std::set<int64_t> want =
          test::row_mass_twin(mine, limit, forced_blocks(b, qb, limit), b.topp);
      auto row = got.row(h, qb);
      const std::set<int64_t> have(row.begin(), row.end());
      ++blocks;
      if (have == want) {
        ++exact;
        continue;
      }
      EXPECT_TRUE(test::every_row_reaches(mine, limit, have, b.topp, 1e-5))
          << what << " head " << h << " qblock " << qb;
    }
  }
  EXPECT_GE(double(exact), 0.95 * double(blocks)) << what << ": " << exact << " of " << blocks;
}

TEST(MassBudgets, PerRowEqualsTheTwin) {
  const BudgetCase cases[] = {
      {{{4, 2, 300, 300, 32}, 8, 64, 64, 0, true, "random"}, -1, 0, 0.9, 0},
      {{{2, 2, 640, 640, 32}, 4, 32, 32, 0, true, "random"}, -1, 0, 0.7, 0},
      {{{2, 1, 257, 389, 32}, 4, 32, 64, 0, true, "random"}, -1, 0, 0.95, 0},
      {{{2, 2, 300, 300, 32}, 8, 64, 64, 0, true, "peaked"}, -1, 0, 0.99, 0},
      {{{2, 2, 400, 400, 32}, 8, 64, 64, 0, true, "vertical"}, -1, 0, 0.8, 0},
      {{{2, 2, 200, 150, 32}, 8, 32, 32, 0, false, "random"}, -1, 0, 0.8, 0},
      {{{4, 2, 300, 300, 32}, 8, 64, 64, 0, true, "random"}, 64, 64, 0.9, 0},
      {{{2, 1, 257, 389, 32}, 4, 32, 64, 0, true, "random"}, 0, 1, 0.5, 0},
  };
  for (const BudgetCase& b : cases) {
    const Case& c = b.c;
    const Inputs in = make_inputs(c, 43 + uint64_t(c.s.lq));
    AttnOptions opt;
    opt.causal = c.causal;
    const std::string sizes =
        "stride=" + std::to_string(c.stride) + ",block_q=" + std::to_string(c.block_q) +
        ",block_k=" + std::to_string(c.block_k) + ",topp=" + std::to_string(b.topp) + ",per=row";
    if (b.sink < 0) {
      const std::string spec = "xattention:dot=f32," + sizes;
      Tensor out(DType::f32, c.s.hq, c.s.lq, c.s.dim);
      const MethodReport r = make_method(spec)->run(in.q, in.k, in.v, out, opt);
      ASSERT_NE(r.mask, nullptr) << spec;
      EXPECT_EQ(r.extras.at("per_row"), 1.0) << spec;
      expect_row_twin(*r.mask, in, b, spec + " " + c.input);
    } else {
      MeanPoolBudget budget;
      budget.topp = b.topp, budget.stride = c.stride, budget.per_row = true;
      budget.dot_bf16 = false;
      const BlockMask got =
          mean_pool_mask(in.q, in.k, c.block_q, c.block_k, b.sink, b.local, opt, budget);
      got.validate();
      expect_row_twin(got, in, b, "mean_pool " + sizes + " " + c.input);
      // the method's spec reaches the same budget (its products in bf16, as the default's)
      budget.dot_bf16 = true;
      Tensor out(DType::f32, c.s.hq, c.s.lq, c.s.dim);
      const MethodReport r = make_method("mean_pool:sink=" + std::to_string(b.sink) +
                                         ",local=" + std::to_string(b.local) + "," + sizes)
                                 ->run(in.q, in.k, in.v, out, opt);
      ASSERT_NE(r.mask, nullptr) << sizes;
      EXPECT_EQ(
          r.mask->to_dense(),
          mean_pool_mask(in.q, in.k, c.block_q, c.block_k, b.sink, b.local, opt, budget).to_dense())
          << sizes;
    }
  }
}

// The method's spec reaches mean_pool_mask's budgets (antidiagonal at stride 4 by default,
// products in bf16 as xattention's), and a larger threshold keeps fewer blocks.
TEST(MassBudgets, MeanPoolSpecReachesTheBudgetsAndThresholdsOrder) {
  const Case c{{2, 2, 512, 512, 32}, 8, 64, 64, 0.9, true, "random"};
  const Inputs in = make_inputs(c, 31);
  Tensor out(DType::f32, 2, 512, 32);
  int64_t last = INT64_MAX;
  for (double t : {0.001, 0.01, 0.05, 0.2}) {
    const MethodReport r =
        make_method("mean_pool:min_share=" + std::to_string(t))->run(in.q, in.k, in.v, out, {});
    MeanPoolBudget b;
    b.min_share = t, b.stride = 4;
    EXPECT_EQ(r.mask->to_dense(), mean_pool_mask(in.q, in.k, 64, 64, 64, 64, {}, b).to_dense());
    EXPECT_LE(int64_t(r.mask->blocks.size()), last) << t;
    last = int64_t(r.mask->blocks.size());
  }
  MeanPoolBudget b;
  b.topp = 0.8, b.stride = 8;
  const MethodReport r = make_method("mean_pool:topp=0.8,stride=8")->run(in.q, in.k, in.v, out, {});
  EXPECT_EQ(r.mask->to_dense(), mean_pool_mask(in.q, in.k, 64, 64, 64, 64, {}, b).to_dense());
}

TEST(MassBudgets, RejectBadBudgets) {
  for (const char* spec : {"mean_pool:topp=0.9,min_share=0.1",
                           "mean_pool:topk=4,min_share=0.1",
                           "mean_pool:min_share=0",
                           "mean_pool:min_share=1",
                           "mean_pool:min_share=nan",
                           "mean_pool:est=pooled",
                           "mean_pool:stride=8",
                           "mean_pool:topp=0.9,est=max",
                           "mean_pool:topp=0.9,est=pooled,stride=4",
                           "mean_pool:topp=0.9,stride=3",
                           "mean_pool:min_share=0.1,block_k=34",
                           "xattention:min_share=0.1,tau=0.9",
                           "xattention:min_share=0.1,topp=0.9",
                           "xattention:min_share=1",
                           "xattention:min_share=0",
                           "xattention:topk=-1",
                           "xattention:topk=4,tau=0.9",
                           "xattention:topk=4,min_share=0.1",
                           "xattention:per=col",
                           "xattention:topk=4,per=row",
                           "xattention:min_share=0.1,per=row",
                           "mean_pool:per=row",
                           "mean_pool:topp=0.9,est=pooled,per=row",
                           "mean_pool:min_share=0.1,per=row",
                           "oracle_topk:per=row",
                           "oracle_topk:topk=4,per=row",
                           "oracle_topk:min_share=0.1,per=row",
                           "oracle_topk:topp=0.9,per=both"})
    EXPECT_THROW(make_method(spec), Error) << spec;
}

// A bad budget on the command line is a named error and exit code 2.
TEST(XAttentionCli, BadBudgetExitsTwo) {
  const test::TempDir dir("spattn_xattention_cli");
  for (const char* spec : {"xattention:tau=0", "xattention:stride=5", "mean_pool:topp=2"}) {
    const test::CliRun r = test::run_spattn(
        std::string("bench --seq 128 --heads 2 --dim 64 --repeat 1 --workload random --method ") +
            spec,
        dir);
    ASSERT_TRUE(r.exited()) << spec << ": " << r.err;
    EXPECT_EQ(r.code(), 2) << spec << ": " << r.err;
    EXPECT_NE(r.err.find(std::string(spec).substr(0, std::string(spec).find(':'))),
              std::string::npos)
        << r.err;
  }
  std::error_code ec;  // best effort: a leftover temp dir is no test failure
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace spattn
