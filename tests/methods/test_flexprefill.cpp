// flexprefill (src/methods/flexprefill.cpp) against a plain scalar twin written from the
// method's definition in double: per head the Jensen-Shannon distance, the pattern it picks and
// the mask, equal head for head, except heads where the twin itself sees a near-tie (the
// distance within rounding of tau, two masses at a selection's boundary, or a running kept sum
// within rounding of its budget): those are counted and must stay rare. Then inputs built to be
// clearly vertical-slash and clearly query-aware, the kernel on the mask against the masked
// reference, the parameters' checks, and the CLI's exit code on a bad gamma or tau.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "masked_reference.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

constexpr double kEps = 1e-5;  // the method's float scores against the twin's doubles

struct Params {
  int64_t block = 128, min_budget = 1024;
  double gamma = 0.9, tau = 0.1;
  bool qa_block = false;
  int64_t topk = -1;     // >= 0: topk=K in gamma's place
  double min_share = 0;  // > 0: min_share=T in gamma's place
  std::string spec() const {
    std::string budget = ",gamma=" + std::to_string(gamma) + (qa_block ? ",qa=block" : "");
    if (topk >= 0) budget = ",topk=" + std::to_string(topk);
    if (min_share > 0) budget = ",min_share=" + std::to_string(min_share);
    return "flexprefill:block=" + std::to_string(block) +
           ",min_budget=" + std::to_string(min_budget) + budget + ",tau=" + std::to_string(tau);
  }
};

// Forced entries first, then the rest by descending mass (ties: smaller index) while the kept
// mass is below need or fewer than floor are kept. `fragile` is set when a boundary between
// two masses or the budget lies within kEps: the float method may then choose otherwise.
std::set<int64_t> take(const std::vector<double>& mass, std::set<int64_t> keep, double need,
                       int64_t floor, bool& fragile) {
  double kept = 0;
  for (int64_t i : keep) kept += mass[size_t(i)];
  std::vector<int64_t> rest;
  for (size_t i = 0; i < mass.size(); ++i)
    if (!keep.count(int64_t(i))) rest.push_back(int64_t(i));
  std::sort(rest.begin(), rest.end(), [&](int64_t a, int64_t b) {
    return mass[size_t(a)] != mass[size_t(b)] ? mass[size_t(a)] > mass[size_t(b)] : a < b;
  });
  size_t i = 0;
  if (need > 0 && std::abs(kept - need) <= kEps) fragile = true;
  for (; i < rest.size() && (kept < need || int64_t(keep.size()) < floor); ++i) {
    keep.insert(rest[i]);
    kept += mass[size_t(rest[i])];
    if (need > 0 && std::abs(kept - need) <= kEps) fragile = true;
  }
  if (i > 0 && i < rest.size()) {
    const double gap = mass[size_t(rest[i - 1])] - mass[size_t(rest[i])];
    if (gap > 0 && gap <= kEps) fragile = true;
  }
  return keep;
}

// The budget in gamma's place: forced entries, then (topk) the K largest of the rest or
// (min_share) every entry of mass at least T of the total, then the floor by descending mass.
// `fragile` as in take, and for an entry within kEps of the threshold.
std::set<int64_t> take_budget(const std::vector<double>& mass, std::set<int64_t> keep,
                              const Params& P, int64_t floor, bool& fragile) {
  if (P.topk >= 0) {
    keep = take(mass, keep, 0, int64_t(keep.size()) + P.topk, fragile);
  } else {
    double total = 0;
    for (double m : mass) total += m;
    for (size_t i = 0; i < mass.size(); ++i) {
      if (std::abs(mass[i] - P.min_share * total) <= kEps) fragile = true;
      if (mass[i] >= P.min_share * total) keep.insert(int64_t(i));
    }
  }
  return take(mass, keep, 0, floor, fragile);
}

std::vector<double> softmax(const std::vector<double>& s) {
  const double mx = *std::max_element(s.begin(), s.end());
  double sum = 0;
  for (double x : s) sum += std::exp(x - mx);
  std::vector<double> p;
  for (double x : s) p.push_back(std::exp(x - mx) / sum);
  return p;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Mean of rows [s0, s1) of head h.
std::vector<double> mean_rows(const TensorView& t, int64_t h, int64_t s0, int64_t s1) {
  std::vector<double> m(static_cast<size_t>(t.dim), 0.0);
  for (int64_t s = s0; s < s1; ++s)
    for (int64_t c = 0; c < t.dim; ++c) m[size_t(c)] += double(t.get(h, s, c));
  for (double& x : m) x /= double(s1 - s0);
  return m;
}

struct TwinHead {
  double js = 0;
  bool query_aware = false, fragile = false;
  int64_t vertical = 0, slash = 0;      // key blocks and diagonal bands kept
  std::vector<std::set<int64_t>> rows;  // kept key blocks per query block
};

// FlexPrefill for q head h, plainly (causal, bottom-aligned).
TwinHead twin(const TensorView& q, const TensorView& k, int64_t h, const Params& P) {
  const int64_t lq = q.seq, lk = k.seq, d = q.dim, B = P.block, kh = h / (q.heads / k.heads);
  const int64_t off = lk - lq, nq = (lq + B - 1) / B, nk = (lk + B - 1) / B, n = std::min(B, lq);
  const int64_t floor = (P.min_budget + B - 1) / B;
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<std::vector<double>> kr(static_cast<size_t>(lk));
  for (int64_t j = 0; j < lk; ++j) kr[size_t(j)] = mean_rows(k, kh, j, j + 1);
  // The last n queries' softmax: vertical (per key) and slash (per offset) means.
  std::vector<double> vert(static_cast<size_t>(lk), 0.0), slash(static_cast<size_t>(lk), 0.0);
  for (int64_t r = lq - n; r < lq; ++r) {
    const int64_t p = off + r;
    const std::vector<double> qr = mean_rows(q, h, r, r + 1);
    std::vector<double> s;
    for (int64_t j = 0; j <= p; ++j) s.push_back(scale * dot(qr, kr[size_t(j)]));
    const std::vector<double> a = softmax(s);
    for (int64_t j = 0; j <= p; ++j) {
      vert[size_t(j)] += a[size_t(j)] / double(n);
      slash[size_t(p - j)] += a[size_t(j)] / double(n);
    }
  }
  std::vector<double> a_bar(static_cast<size_t>(nk), 0.0), band(static_cast<size_t>(nk), 0.0);
  for (int64_t j = 0; j < lk; ++j) {
    a_bar[size_t(j / B)] += vert[size_t(j)];
    band[size_t(j / B)] += slash[size_t(j)];
  }
  std::vector<std::vector<double>> kp(static_cast<size_t>(nk));
  for (int64_t b = 0; b < nk; ++b)
    kp[size_t(b)] = mean_rows(k, kh, b * B, std::min(lk, (b + 1) * B));
  const std::vector<double> qhat = mean_rows(q, h, lq - n, lq);
  std::vector<double> s;
  for (int64_t b = 0; b < nk; ++b) s.push_back(scale * dot(qhat, kp[size_t(b)]));
  const std::vector<double> a_hat = softmax(s);
  TwinHead t;
  double jsd = 0;
  for (int64_t b = 0; b < nk; ++b) {
    const double m = (a_bar[size_t(b)] + a_hat[size_t(b)]) / 2;
    if (a_bar[size_t(b)] > 0) jsd += 0.5 * a_bar[size_t(b)] * std::log(a_bar[size_t(b)] / m);
    if (a_hat[size_t(b)] > 0) jsd += 0.5 * a_hat[size_t(b)] * std::log(a_hat[size_t(b)] / m);
  }
  t.js = std::sqrt(std::max(0.0, jsd));
  t.query_aware = t.js < P.tau;
  if (std::abs(t.js - P.tau) <= 1e-4) t.fragile = true;
  const double g = t.query_aware ? 0.0 : P.gamma;
  double tv = 0, ts = 0;
  for (int64_t b = 0; b < nk; ++b) {
    tv += a_bar[size_t(b)];
    ts += band[size_t(b)];
  }
  const bool counted = !t.query_aware && (P.topk >= 0 || P.min_share > 0);
  const std::set<int64_t> vk = counted ? take_budget(a_bar, {0}, P, floor, t.fragile)
                                       : take(a_bar, {0}, g * tv, floor, t.fragile);
  const std::set<int64_t> sk = counted ? take_budget(band, {0}, P, floor, t.fragile)
                                       : take(band, {0}, g * ts, floor, t.fragile);
  t.vertical = int64_t(vk.size());
  t.slash = int64_t(sk.size());
  t.rows.resize(static_cast<size_t>(nq));
  std::vector<int64_t> limit(static_cast<size_t>(nq));
  for (int64_t qb = 0; qb < nq; ++qb) {
    const int64_t p0 = off + qb * B, p1 = off + std::min((qb + 1) * B, lq) - 1;
    limit[size_t(qb)] = std::min(nk, p1 / B + 1);
    std::set<int64_t>& row = t.rows[size_t(qb)];
    row.insert(0);
    for (int64_t p = p0; p <= p1; ++p) row.insert(p / B);  // the diagonal
    for (int64_t b : vk)
      if (b * B <= p1) row.insert(b);
    // Band c: keys p - o for p in [p0, p1], o in [cB, (c+1)B).
    for (int64_t c : sk)
      for (int64_t p = p0; p <= p1; ++p)
        for (int64_t o = c * B; o < (c + 1) * B; ++o)
          if (p - o >= 0 && p - o < lk) row.insert((p - o) / B);
  }
  if (!t.query_aware) return t;
  std::vector<std::vector<double>> pm(static_cast<size_t>(nq));
  for (int64_t qb = 0; qb < nq; ++qb) {
    const std::vector<double> qm = mean_rows(q, h, qb * B, std::min(lq, (qb + 1) * B));
    std::vector<double> sc;
    for (int64_t b = 0; b < limit[size_t(qb)]; ++b) sc.push_back(scale * dot(qm, kp[size_t(b)]));
    pm[size_t(qb)] = softmax(sc);
  }
  if (P.topk >= 0 || P.min_share > 0) {  // a count or a share per query block
    for (int64_t qb = 0; qb < nq; ++qb)
      t.rows[size_t(qb)] = take_budget(pm[size_t(qb)], t.rows[size_t(qb)], P, 0, t.fragile);
    return t;
  }
  if (P.qa_block) {
    for (int64_t qb = 0; qb < nq; ++qb)
      t.rows[size_t(qb)] = take(pm[size_t(qb)], t.rows[size_t(qb)], P.gamma, 0, t.fragile);
    return t;
  }
  std::vector<double> flat(static_cast<size_t>(nq * nk), 0.0);
  std::set<int64_t> kept;
  for (int64_t qb = 0; qb < nq; ++qb)
    for (int64_t b = 0; b < nk; ++b) {
      const size_t i = size_t(qb * nk + b);
      if (b < limit[size_t(qb)]) flat[i] = pm[size_t(qb)][size_t(b)];
      if (b >= limit[size_t(qb)] || t.rows[size_t(qb)].count(b)) kept.insert(int64_t(i));
    }
  kept = take(flat, kept, P.gamma * double(nq), 0, t.fragile);
  for (int64_t qb = 0; qb < nq; ++qb)
    for (int64_t b = 0; b < limit[size_t(qb)]; ++b)
      if (kept.count(qb * nk + b)) t.rows[size_t(qb)].insert(b);
  return t;
}

struct Shape {
  int64_t hq, hkv, lq, lk, dim;
};

struct Inputs {
  Tensor q, k, v;
};

// kind: random; vs_qa (head 0 of each kv group attends to a few key columns the pooled keys
// hide: clearly vertical-slash; the group's other heads near-uniform: clearly query-aware);
// equal_keys (every score of a row ties); extreme (queries x 60: one-hot softmax rows); self
// (each query a multiple of its own position's key: the mass on the diagonal).
Inputs make_inputs(const Shape& s, const std::string& kind, uint64_t seed) {
  Inputs in{test::random_tensor(DType::f32, s.hq, s.lq, s.dim, seed),
            test::random_tensor(DType::f32, s.hkv, s.lk, s.dim, seed + 1),
            test::random_tensor(DType::f32, s.hkv, s.lk, s.dim, seed + 2)};
  TensorView q = in.q, k = in.k;
  const int64_t group = s.hq / s.hkv;
  if (kind == "equal_keys")
    for (int64_t h = 0; h < s.hkv; ++h)
      for (int64_t j = 0; j < s.lk; ++j)
        for (int64_t c = 0; c < s.dim; ++c) k.set(h, j, c, k.get(h, 0, c));
  if (kind == "extreme")
    for (int64_t h = 0; h < s.hq; ++h)
      for (int64_t i = 0; i < s.lq; ++i)
        for (int64_t c = 0; c < s.dim; ++c) q.set(h, i, c, 60.0f * q.get(h, i, c));
  if (kind == "self")
    for (int64_t h = 0; h < s.hq; ++h)
      for (int64_t i = 0; i < s.lq; ++i)
        for (int64_t c = 0; c < s.dim; ++c)
          q.set(h, i, c, 2.0f * k.get(h / group, s.lk - s.lq + i, c) + 0.3f * q.get(h, i, c));
  if (kind == "vs_qa") {
    for (int64_t h = 0; h < s.hkv; ++h)
      for (int64_t j : {s.lk / 5, s.lk / 2 + 3, s.lk - 40}) k.set(h, j, 0, 12.0f);
    for (int64_t h = 0; h < s.hq; ++h)
      for (int64_t i = 0; i < s.lq; ++i) {
        if (h % group == 0)
          q.set(h, i, 0, 8.0f);
        else
          for (int64_t c = 0; c < s.dim; ++c) q.set(h, i, c, 0.02f * q.get(h, i, c));
      }
  }
  return in;
}

struct Case {
  Shape s;
  Params p;
  const char* input;
};

TEST(FlexPrefill, MaskEqualsTheScalarTwin) {
  auto P = [](int64_t block, int64_t min_budget, double gamma, double tau, bool qa_block) {
    Params p;
    p.block = block;
    p.min_budget = min_budget;
    p.gamma = gamma;
    p.tau = tau;
    p.qa_block = qa_block;
    return p;
  };
  const auto K = [](Params p, int64_t topk) {
    p.topk = topk;
    return p;
  };
  const auto S = [](Params p, double min_share) {
    p.min_share = min_share;
    return p;
  };
  const Case cases[] = {
      {{4, 2, 300, 300, 32}, P(32, 64, 0.9, 0.1, false), "random"},
      {{4, 2, 300, 300, 32}, P(32, 64, 0.9, 0.1, true), "random"},
      {{4, 2, 301, 301, 40}, P(32, 0, 0.8, 0.3, false), "random"},      // odd length
      {{3, 1, 257, 257, 32}, P(128, 1024, 0.9, 0.1, false), "random"},  // paper defaults, GQA 3:1
      {{2, 2, 131, 389, 32}, P(32, 32, 0.9, 0.1, false), "random"},     // queries after a prefix
      {{2, 2, 131, 389, 32}, P(32, 32, 0.9, 1.0, true), "random"},      // tau = 1: all query-aware
      {{2, 1, 5, 300, 32}, P(32, 32, 0.9, 0.1, false), "random"},       // a few queries
      {{2, 2, 200, 200, 32}, P(16, 0, 0.95, 0.0, false), "random"},  // tau = 0: all vertical-slash
      {{2, 2, 250, 250, 32}, P(32, 0, 1.0, 0.5, false), "random"},   // gamma = 1
      {{4, 2, 400, 400, 32}, P(32, 32, 0.9, 0.1, false), "vs_qa"},
      {{4, 2, 400, 400, 32}, P(32, 32, 0.9, 0.1, true), "vs_qa"},
      {{2, 1, 300, 300, 32}, P(32, 32, 0.9, 0.1, false), "equal_keys"},
      {{2, 1, 300, 300, 32}, P(32, 32, 0.9, 1.0, false), "equal_keys"},
      {{2, 2, 300, 300, 32}, P(32, 32, 0.9, 0.1, false), "extreme"},
      {{2, 2, 300, 300, 32}, P(32, 32, 0.9, 1.0, true), "extreme"},
      {{4, 2, 350, 350, 32}, P(32, 0, 0.9, 0.1, false), "self"},
      {{4, 2, 350, 350, 32}, P(32, 0, 0.5, 1.0, false), "self"},
      {{2, 1, 200, 500, 32}, P(16, 0, 0.9, 0.1, true), "self"},
      {{4, 2, 400, 400, 32}, P(32, 0, 0.8, 0.1, false), "vs_qa"},
      // topk and min_share in gamma's place (beyond the paper)
      {{4, 2, 300, 300, 32}, K(P(32, 0, 0.9, 0.1, false), 2), "random"},
      {{4, 2, 300, 300, 32}, K(P(32, 96, 0.9, 0.1, false), 1), "random"},  // the floor above K
      {{2, 2, 131, 389, 32}, K(P(32, 32, 0.9, 1.0, false), 3), "random"},  // all query-aware
      {{4, 2, 400, 400, 32}, K(P(32, 32, 0.9, 0.1, false), 2), "vs_qa"},
      {{2, 2, 250, 250, 32}, K(P(32, 0, 0.9, 0.5, false), 0), "self"},
      {{4, 2, 300, 300, 32}, S(P(32, 0, 0.9, 0.1, false), 0.05), "random"},
      {{2, 2, 131, 389, 32}, S(P(32, 32, 0.9, 1.0, false), 0.1), "random"},
      {{4, 2, 400, 400, 32}, S(P(32, 32, 0.9, 0.1, false), 0.02), "vs_qa"},
      {{2, 1, 300, 300, 32}, S(P(32, 32, 0.9, 1.0, false), 0.1), "equal_keys"},
  };
  int64_t heads = 0, exact = 0, qa_seen = 0, vs_seen = 0;
  for (const Case& c : cases) {
    const std::string what = c.p.spec() + " " + c.input + " " + std::to_string(c.s.lq) + "x" +
                             std::to_string(c.s.lk) + " heads " + std::to_string(c.s.hq) + "/" +
                             std::to_string(c.s.hkv);
    const Inputs in = make_inputs(c.s, c.input, 31 + uint64_t(c.s.lq));
    const auto method = make_method(c.p.spec());
    Tensor out(DType::f32, c.s.hq, c.s.lq, c.s.dim);
    MethodReport got;
    for (int threads : {1, 3}) {  // the mask does not depend on the thread count
      AttnOptions opt;
      opt.threads = threads;
      const MethodReport r = method->run(in.q, in.k, in.v, out, opt);
      ASSERT_NE(r.mask, nullptr) << what;
      r.mask->validate();
      if (threads == 1)
        got = r;
      else
        EXPECT_EQ(r.mask->to_dense(), got.mask->to_dense()) << what << ": thread count";
    }
    const BlockMask& m = *got.mask;
    ASSERT_EQ(m.block_q, c.p.block);
    const std::vector<double>& qa = got.per_head.at("query_aware");
    const std::vector<double>& js = got.per_head.at("js_distance");
    ASSERT_EQ(int64_t(qa.size()), c.s.hq);
    for (int64_t h = 0; h < c.s.hq; ++h) {
      const TwinHead t = twin(in.q, in.k, h, c.p);
      const std::string where = what + " head " + std::to_string(h);
      EXPECT_NEAR(js[size_t(h)], t.js, 1e-4) << where;
      ++heads;
      (t.query_aware ? qa_seen : vs_seen)++;
      if (t.fragile) continue;
      EXPECT_EQ(qa[size_t(h)], t.query_aware ? 1.0 : 0.0) << where;
      EXPECT_EQ(got.per_head.at("vertical_blocks")[size_t(h)], double(t.vertical)) << where;
      EXPECT_EQ(got.per_head.at("slash_bands")[size_t(h)], double(t.slash)) << where;
      bool same = true;
      for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
        auto row = m.row(h, qb);
        const std::set<int64_t> have(row.begin(), row.end());
        if (have != t.rows[size_t(qb)]) {
          same = false;
          ADD_FAILURE() << where << " qblock " << qb << ": differs from the twin";
          break;
        }
      }
      exact += same;
    }
  }
  EXPECT_GE(double(exact), 0.9 * double(heads)) << exact << " of " << heads << " heads equal";
  EXPECT_GT(qa_seen, 0);
  EXPECT_GT(vs_seen, 0);
}

// The built inputs: head 0 of each group clearly vertical-slash, the others clearly
// query-aware, reported as such; a vertical-slash head keeps the columns' blocks everywhere.
TEST(FlexPrefill, PicksThePatternEachHeadShows) {
  const Shape s{4, 2, 600, 600, 32};
  const Inputs in = make_inputs(s, "vs_qa", 3);
  Tensor out(DType::f32, s.hq, s.lq, s.dim);
  const MethodReport r =
      make_method("flexprefill:block=32,min_budget=32")->run(in.q, in.k, in.v, out, {});
  const std::vector<double>& qa = r.per_head.at("query_aware");
  const std::vector<double>& js = r.per_head.at("js_distance");
  for (int64_t h = 0; h < s.hq; ++h) {
    if (h % 2 == 0) {
      EXPECT_EQ(qa[size_t(h)], 0.0) << h;
      EXPECT_GT(js[size_t(h)], 0.3) << h;
      for (int64_t qb = (s.lk / 5) / 32 + 1; qb < r.mask->n_qb(); ++qb) {
        auto row = r.mask->row(h, qb);
        EXPECT_NE(std::find(row.begin(), row.end(), int32_t((s.lk / 5) / 32)), row.end())
            << h << " " << qb;
      }
    } else {
      EXPECT_EQ(qa[size_t(h)], 1.0) << h;
      // Not 0: the pooled query ignores that the last block's rows see only part of it.
      EXPECT_LT(js[size_t(h)], 0.09) << h;
    }
  }
  EXPECT_EQ(r.extras.at("query_aware_heads"), 2.0);
}

TEST(FlexPrefill, KernelMatchesMaskedReference) {
  for (int64_t lq : {1, 65, 200}) {
    const Shape s{4, 2, lq, 200, 32};
    const Inputs in = make_inputs(s, "random", 5);
    Tensor out(DType::f32, 4, lq, 32);
    std::vector<float> lse(size_t(4 * lq));
    const MethodReport r = make_method("flexprefill:block=32,min_budget=32")
                               ->run(in.q, in.k, in.v, out, {}, lse.data());
    test::expect_matches(
        out, lse, test::masked_reference(in.q, in.k, in.v, true, test::mask_predicate(*r.mask)),
        "flexprefill lq " + std::to_string(lq));
  }
}

TEST(FlexPrefill, DefaultsAreThePapers) {
  const Inputs in = make_inputs({2, 2, 512, 512, 32}, "random", 9);
  Tensor out(DType::f32, 2, 512, 32);
  const MethodReport r = make_method("flexprefill")->run(in.q, in.k, in.v, out, {});
  EXPECT_EQ(r.mask->block_q, 128);
  EXPECT_EQ(r.extras.at("gamma"), 0.9);
  EXPECT_EQ(r.extras.at("tau"), 0.1);
  EXPECT_EQ(r.extras.at("block"), 128.0);
  EXPECT_EQ(r.extras.at("min_budget"), 1024.0);
  const MethodReport same = make_method("flexprefill:topp=0.9")->run(in.q, in.k, in.v, out, {});
  EXPECT_EQ(same.mask->to_dense(), r.mask->to_dense());
  bool listed = false;
  for (const MethodInfo& i : method_catalog())
    if (i.name == "flexprefill") listed = i.default_spec == "flexprefill" && i.causal_only;
  EXPECT_TRUE(listed);
}

// A larger count keeps at least the blocks of a smaller one (the K largest contain the K-1
// largest), a larger threshold at most those of a smaller one; the report names the budget.
TEST(FlexPrefill, CountAndShareBudgetsNest) {
  const Inputs in = make_inputs({4, 2, 400, 400, 32}, "vs_qa", 12);
  Tensor out(DType::f32, 4, 400, 32);
  const auto mask = [&](const std::string& budget) {
    const MethodReport r =
        make_method("flexprefill:block=32,min_budget=0," + budget)->run(in.q, in.k, in.v, out, {});
    if (budget.rfind("topk", 0) == 0) {
      EXPECT_EQ(r.extras.count("gamma"), 0u) << budget;
    }
    EXPECT_EQ(r.extras.count(budget.substr(0, budget.find('='))), 1u) << budget;
    return r.mask->to_dense();
  };
  const auto covers = [](const std::vector<uint8_t>& big, const std::vector<uint8_t>& small) {
    for (size_t i = 0; i < big.size(); ++i)
      if (small[i] && !big[i]) return false;
    return true;
  };
  const auto k1 = mask("topk=1"), k3 = mask("topk=3"), k100 = mask("topk=100");
  EXPECT_TRUE(covers(k3, k1));
  EXPECT_TRUE(covers(k100, k3));
  EXPECT_NE(k1, k3);
  const auto s1 = mask("min_share=0.01"), s2 = mask("min_share=0.1");
  EXPECT_TRUE(covers(s1, s2));
  EXPECT_NE(s1, s2);
}

TEST(FlexPrefill, RejectsBadParametersAndInputs) {
  for (const char* spec : {"flexprefill:gamma=0",
                           "flexprefill:gamma=1.5",
                           "flexprefill:gamma=-0.1",
                           "flexprefill:gamma=nan",
                           "flexprefill:tau=-0.01",
                           "flexprefill:tau=1.5",
                           "flexprefill:tau=nan",
                           "flexprefill:tau=x",
                           "flexprefill:topp=0",
                           "flexprefill:gamma=0.9,topp=0.9",
                           "flexprefill:block=0",
                           "flexprefill:min_budget=-1",
                           "flexprefill:qa=rows",
                           "flexprefill:topk=-1",
                           "flexprefill:topk=4,gamma=0.9",
                           "flexprefill:topk=4,min_share=0.1",
                           "flexprefill:min_share=0.1,topp=0.9",
                           "flexprefill:min_share=0",
                           "flexprefill:min_share=1",
                           "flexprefill:topk=4,qa=block"})
    EXPECT_THROW(make_method(spec), Error) << spec;
  const Inputs in = make_inputs({2, 2, 128, 128, 32}, "random", 2);
  Tensor out(DType::f32, 2, 128, 32);
  AttnOptions non_causal;
  non_causal.causal = false;
  EXPECT_THROW(make_method("flexprefill")->run(in.q, in.k, in.v, out, non_causal), Error);
  TensorView(in.k).set(1, 100, 3, NAN);
  EXPECT_THROW(make_method("flexprefill")->run(in.q, in.k, in.v, out, {}), Error);
}

TEST(FlexPrefillCli, BadGammaOrTauExitsTwo) {
  const test::TempDir dir("spattn_flexprefill_cli");
  for (const char* spec : {"flexprefill:gamma=0", "flexprefill:tau=2"}) {
    const test::CliRun r = test::run_spattn(
        std::string("bench --seq 128 --heads 2 --dim 64 --repeat 1 --workload random --method ") +
            spec,
        dir);
    ASSERT_TRUE(r.exited()) << spec << ": " << r.err;
    EXPECT_EQ(r.code(), 2) << spec << ": " << r.err;
    EXPECT_NE(r.err.find("flexprefill"), std::string::npos) << r.err;
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace spattn
