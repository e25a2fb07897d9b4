// Quest decode (spattn/quest.hpp): the page bound is an upper bound of every key's score; the
// page choice equals a plain twin's; the decode over the chosen pages equals plain attention
// over the same keys gathered (every cache type, GQA, odd lengths); summaries survive
// truncation exactly; the runner's --attn-decode reads fewer keys and, with every page kept,
// computes what dense decode computes; bad specs are named Errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>
#include <unistd.h>

#include "kernels/quest_bounds.hpp"
#include "kernels/quest_pages.hpp"
#include "kernels/quest_scores.hpp"
#include "model/kv_cache.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/model.hpp"
#include "spattn/model_maker.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/quest.hpp"
#include "spec_error.hpp"
#include "spattn/tensor.hpp"
#include "row_mass_twin.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

Tensor random_tensor(int64_t h, int64_t s, int64_t d, uint64_t seed, float shift = 0) {
  Tensor t(DType::f32, h, s, d);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const TensorView v = t;
  for (int64_t a = 0; a < h; ++a)
    for (int64_t b = 0; b < s; ++b)
      for (int64_t c = 0; c < d; ++c) v.set(a, b, c, g(rng) + shift * float(c % 3));
  return t;
}

// Rows of t rounded as a cache of type `type` stores them.
Tensor rounded(const TensorView& t, KVType type) {
  Tensor r(DType::f32, t.heads, t.seq, t.dim);
  const TensorView v = r;
  std::vector<float> row(size_t(t.dim));
  for (int64_t h = 0; h < t.heads; ++h)
    for (int64_t s = 0; s < t.seq; ++s) {
      for (int64_t c = 0; c < t.dim; ++c) row[size_t(c)] = t.get(h, s, c);
      kv_round_row(type, row.data(), row.data(), t.dim);
      for (int64_t c = 0; c < t.dim; ++c) v.set(h, s, c, row[size_t(c)]);
    }
  return r;
}

// The plain twin of the page choice for kv head g: bounds in double per q head of the group,
// each head's softmax over the pages averaged over the group, pages sorted by it, topk or topp;
// with per=row each head's softmax held to topp by the plain rule (row_mass_twin). exact: a
// mass budget on G with the cache given, the sink and local pages at their exact mass (the
// sum of exp(scale q.k) over their keys) beside the others' page x exp(scale G).
std::vector<char> twin_pages(const TensorView& q, int64_t g, const TensorView& k, int64_t group,
                             const QuestParams& p, double scale, bool exact = false) {
  const int64_t n = k.seq, np = (n + p.page - 1) / p.page;
  const int64_t first = std::min(np, p.sink), last = std::max(first, np - p.local);
  exact = exact && p.est == QuestEstimate::gauss && (p.topp > 0 || p.min_share > 0);
  std::vector<double> score(static_cast<size_t>(np), 0.0);
  std::vector<std::vector<double>> heads;  // each q head's softmax over the pages
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    std::vector<double> u(static_cast<size_t>(np));
    for (int64_t pg = 0; pg < np; ++pg) {
      double s = 0;
      for (int64_t c = 0; c < k.dim; ++c) {
        double lo = INFINITY, hi = -INFINITY;
        for (int64_t j = pg * p.page; j < std::min(n, (pg + 1) * p.page); ++j) {
          lo = std::min(lo, double(k.get(g, j, c)));
          hi = std::max(hi, double(k.get(g, j, c)));
        }
        const double qc = q.get(h, 0, c);
        if (p.est == QuestEstimate::bound)
          s += std::max(qc * lo, qc * hi);
        else  // G: the box's mean score and scale/2 x its variance (a uniform key)
          s += qc * (lo + hi) / 2 + scale / 2 * qc * qc * (hi - lo) * (hi - lo) / 12;
      }
      u[size_t(pg)] = s;
    }
    // The softmax of scale x u; with `exact`, of each page's log-mass
    std::vector<double> x(static_cast<size_t>(np));
    for (int64_t pg = 0; pg < np; ++pg) {
      x[size_t(pg)] = scale * u[size_t(pg)];
      if (!exact) continue;
      if (pg >= first && pg < last) {
        x[size_t(pg)] += std::log(double(p.page));
        continue;
      }
      double sum = 0;  // the page's exact mass, over exp(scale x 0)
      for (int64_t j = pg * p.page; j < std::min(n, (pg + 1) * p.page); ++j) {
        double s = 0;
        for (int64_t c = 0; c < k.dim; ++c) s += double(q.get(h, 0, c)) * k.get(g, j, c);
        sum += std::exp(scale * s);
      }
      x[size_t(pg)] = std::log(sum);
    }
    u = x;
    for (double& v : u) v /= scale;
    const double mx = *std::max_element(u.begin(), u.end());
    double total = 0;
    for (double v : u) total += std::exp(scale * (v - mx));
    heads.emplace_back(size_t(np));
    for (int64_t pg = 0; pg < np; ++pg) {
      heads.back()[size_t(pg)] = std::exp(scale * (u[size_t(pg)] - mx)) / total;
      score[size_t(pg)] += heads.back()[size_t(pg)] / double(group);
    }
  }
  std::vector<char> keep(size_t(np), 0);
  for (int64_t pg = 0; pg < np; ++pg) keep[size_t(pg)] = pg < first || pg >= last;
  if (p.per_row && last > first) {
    std::set<int64_t> forced;
    for (int64_t pg = 0; pg < np; ++pg)
      if (keep[size_t(pg)]) forced.insert(pg);
    const std::set<int64_t> kept = test::row_mass_twin(heads, np, forced, p.topp);
    EXPECT_TRUE(test::every_row_reaches(heads, np, kept, p.topp, 1e-5));
    for (int64_t pg : kept) keep[size_t(pg)] = 1;
    return keep;
  }
  std::vector<int64_t> cand(size_t(last - first));
  std::iota(cand.begin(), cand.end(), first);
  std::stable_sort(cand.begin(), cand.end(),
                   [&](int64_t a, int64_t b) { return score[size_t(a)] > score[size_t(b)]; });
  if (p.min_share > 0) {
    for (int64_t pg : cand) keep[size_t(pg)] = score[size_t(pg)] >= p.min_share;
  } else if (p.topp == 0) {
    for (int64_t i = 0; i < std::min<int64_t>(p.topk, int64_t(cand.size())); ++i)
      keep[size_t(cand[size_t(i)])] = 1;
  } else {
    double kept = 0;
    for (int64_t pg = 0; pg < np; ++pg)
      if (keep[size_t(pg)]) kept += score[size_t(pg)];
    for (size_t i = 0; i < cand.size() && kept < p.topp; ++i) {
      keep[size_t(cand[i])] = 1;
      kept += score[size_t(cand[i])];
    }
  }
  return keep;
}

std::vector<char> chosen_pages(const std::vector<KeyRange>& ranges, int64_t page, int64_t np) {
  std::vector<char> keep(size_t(np), 0);
  for (const KeyRange& r : ranges)
    for (int64_t j = r.begin; j < r.end; ++j) keep[size_t(j / page)] = 1;
  return keep;
}

TEST(Quest, PageBoundIsAnUpperBoundOfEveryKeysScore) {
  const int64_t n = 333, d = 64;
  const Tensor k = random_tensor(2, n, d, 1, 0.5f), q = random_tensor(2, 1, d, 2);
  for (QuestSums sums : {QuestSums::cache, QuestSums::i8}) {
    QuestPages pages(2, d, 32, 400, KVType::f32, sums);
    pages.append(k);
    ASSERT_EQ(pages.pages(), (n + 31) / 32);
    std::vector<float> u(size_t(pages.pages()));
    std::vector<float> qrow(static_cast<size_t>(d));
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t c = 0; c < d; ++c) qrow[size_t(c)] = q.view().get(h, 0, c);
      quest_page_bounds(pages, h, qrow.data(), u.data());
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c) s += double(qrow[size_t(c)]) * k.view().get(h, j, c);
        EXPECT_LE(s, double(u[size_t(j / 32)]) + 1e-4) << "head " << h << " key " << j;
      }
    }
  }
}

// One dimension's term of a page's estimate, as quest_bounds.hpp writes the plain loop: the
// bound's max(q lo, q hi), or G's a (lo + hi) + b (hi - lo)^2 added in that order.
float add_term(float sum, kernels::PageEstimate est, float qc, float scale, float lo, float hi) {
  if (est == kernels::PageEstimate::bound) return sum + std::max(qc * lo, qc * hi);
  const float a = 0.5f * qc, b = (qc * qc) * (scale / 24.0f);
  const float with_mean = sum + a * (lo + hi);
  const float w = hi - lo;
  return with_mean + b * (w * w);
}

// The bound kernel against the plain loop it vectorizes: the same sum in the same order, so
// the same bits, for any number of rows (the group's q heads), pages and dims, over summaries
// stored in each type (the loop reads them widened); both estimates (U and G).
TEST(Quest, BoundKernelEqualsThePlainLoopBitwise) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> g(0.0f, 2.0f);
  const float scale = 0.125f;
  for (const auto est : {kernels::PageEstimate::bound, kernels::PageEstimate::gauss})
    for (DType type : {DType::f32, DType::f16, DType::bf16})
      for (int64_t rows : {1, 2, 3, 4, 5, 7, 8})
        for (int64_t pages : {1, 31, 32, 33, 70})
          for (int64_t d : {1, 17, 64, 128}) {
            const int64_t ld = kernels::quest_padded(pages);
            // Summaries as stored: f32 values, or 16-bit words, in the block layout.
            const size_t elems = size_t(2 * d * ld);
            std::vector<float> wide(elems);
            std::vector<uint16_t> half(elems);
            for (size_t i = 0; i < elems; ++i) {
              const float x = g(rng);
              half[i] = type == DType::bf16 ? f32_to_bf16(x) : f32_to_f16(x);
              wide[i] = type == DType::f32    ? x
                        : type == DType::bf16 ? bf16_to_f32(half[i])
                                              : f16_to_f32(half[i]);
            }
            for (int64_t p = 0; p < pages; ++p)  // lo <= hi, as a page's summary
              for (int64_t c = 0; c < d; ++c) {
                const size_t a = size_t(kernels::quest_sum_index(d, p, c, false));
                const size_t b = size_t(kernels::quest_sum_index(d, p, c, true));
                if (wide[a] > wide[b]) std::swap(wide[a], wide[b]), std::swap(half[a], half[b]);
              }
            std::vector<float> q(size_t(rows * d));
            for (float& x : q) x = g(rng);
            std::vector<float> u(size_t(rows * ld), NAN);
            const void* sums =
                type == DType::f32 ? static_cast<const void*>(wide.data()) : half.data();
            kernels::quest_bounds(q.data(), rows, d, sums, type, pages, u.data(), ld, est, scale);
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t p = 0; p < pages; ++p) {
                float want = 0;
                for (int64_t c = 0; c < d; ++c)
                  want = add_term(want, est, q[size_t(r * d + c)], scale,
                                  wide[size_t(kernels::quest_sum_index(d, p, c, false))],
                                  wide[size_t(kernels::quest_sum_index(d, p, c, true))]);
                ASSERT_EQ(u[size_t(r * ld + p)], want)
                    << dtype_name(type) << ", " << rows << " rows, " << pages << " pages, d " << d
                    << ", est " << int(est) << ": row " << r << " page " << p;
              }
          }
}

// The 8-bit bound kernel against its plain loop: q scaled per block and dimension, then the
// same sum in the same order, so the same bits; both estimates.
TEST(Quest, I8BoundKernelEqualsThePlainLoopBitwise) {
  std::mt19937_64 rng(6);
  std::normal_distribution<float> g(0.0f, 2.0f);
  std::uniform_int_distribution<int> code(-127, 127);
  std::uniform_real_distribution<float> scale(0.0f, 0.05f);
  const float softmax_scale = 0.125f;
  for (const auto est : {kernels::PageEstimate::bound, kernels::PageEstimate::gauss})
    for (int64_t rows : {1, 2, 3, 4, 5, 8})
      for (int64_t pages : {1, 31, 32, 33, 70})
        for (int64_t d : {1, 17, 64, 128}) {
          const int64_t ld = kernels::quest_padded(pages), blocks = ld / kernels::kQuestPagePad;
          std::vector<int8_t> codes(size_t(2 * d * ld));
          for (int8_t& x : codes) x = int8_t(code(rng));
          std::vector<float> scales(size_t(blocks * d)), q(size_t(rows * d));
          for (float& x : scales) x = scale(rng);
          for (float& x : q) x = g(rng);
          std::vector<float> u(size_t(rows * ld), NAN);
          kernels::quest_bounds_i8(q.data(), rows, d, codes.data(), scales.data(), pages, u.data(),
                                   ld, est, softmax_scale);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t p = 0; p < pages; ++p) {
              float want = 0;
              for (int64_t c = 0; c < d; ++c) {
                const float s = scales[size_t(p / kernels::kQuestPagePad * d + c)];
                const float qs = q[size_t(r * d + c)] * s;
                const float lo = codes[size_t(kernels::quest_sum_index(d, p, c, false))];
                const float hi = codes[size_t(kernels::quest_sum_index(d, p, c, true))];
                want = add_term(want, est, qs, softmax_scale, lo, hi);
              }
              ASSERT_EQ(u[size_t(r * ld + p)], want)
                  << rows << " rows, " << pages << " pages, d " << d << ", est " << int(est)
                  << ": row " << r << " page " << p;
            }
        }
}

// The page scores against a plain loop in double: each row's softmax of scale x U over the
// pages, averaged over the rows, within f32 rounding and the vector exp's ulps; zero past the
// last page. Rows whose bounds spread wider than f32's exp range give exact zeros, never NaN.
TEST(Quest, PageScoresEqualThePlainSoftmaxMean) {
  std::mt19937_64 rng(8);
  for (const float spread : {1.0f, 40.0f, 3000.0f})
    for (int64_t rows : {1, 2, 3, 8})
      for (int64_t np : {1, 15, 16, 17, 33, 70, 2048}) {
        std::normal_distribution<float> g(0.0f, spread);
        const int64_t ld = kernels::quest_padded(np);
        std::vector<float> u(size_t(rows * ld), 1e30f);  // padding that must not count
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t p = 0; p < np; ++p) u[size_t(r * ld + p)] = g(rng);
        const float scale = 0.0884f;
        std::vector<float> score(static_cast<size_t>(ld), NAN), e(static_cast<size_t>(ld));
        kernels::quest_page_scores(u.data(), rows, ld, np, scale, score.data(), e.data());
        std::vector<double> want(size_t(np), 0.0);
        for (int64_t r = 0; r < rows; ++r) {
          const float* x = u.data() + r * ld;
          const double mx = *std::max_element(x, x + np);
          double z = 0;
          for (int64_t p = 0; p < np; ++p) z += std::exp(double(scale) * (x[p] - mx));
          for (int64_t p = 0; p < np; ++p)
            want[size_t(p)] += std::exp(double(scale) * (x[p] - mx)) / z / double(rows);
        }
        for (int64_t p = 0; p < np; ++p) {
          const double got = score[size_t(p)];
          ASSERT_TRUE(std::isfinite(got)) << np << " pages, page " << p;
          // f32 exps underflow near e^-87 (denormals below): absolute slack there.
          ASSERT_NEAR(got, want[size_t(p)], 1e-5 * want[size_t(p)] + 1e-37)
              << "spread " << spread << ", " << rows << " rows, " << np << " pages, page " << p;
        }
        for (int64_t p = np; p < ld; ++p) ASSERT_EQ(score[size_t(p)], 0.0f) << "padding " << p;
      }
}

// A page's summaries moved to two f32 rows and back through the block layout: what get()
// reads, in every summary type, for head dims with a tail and past the kernels' 256-wide chunk.
TEST(Quest, PageRowsRoundTripThroughTheBlockLayout) {
  std::mt19937_64 rng(9);
  std::normal_distribution<float> g(0.0f, 3.0f);
  for (DType type : {DType::f32, DType::f16, DType::bf16})
    for (int64_t d : {1, 17, 128, 300})
      for (int64_t p : {0, 5, 31, 32, 70}) {
        const int64_t ld = kernels::quest_padded(p + 1);
        const size_t elems = size_t(2 * d * ld);
        std::vector<float> wide(elems, -1.0f);
        std::vector<uint16_t> half(elems, 0xFFFF);
        const size_t dn = static_cast<size_t>(d);
        std::vector<float> lo(dn), hi(dn), lo2(dn), hi2(dn);
        const auto held = [&](float x) {  // x as the type holds it
          return type == DType::f32    ? x
                 : type == DType::bf16 ? bf16_to_f32(f32_to_bf16(x))
                                       : f16_to_f32(f32_to_f16(x));
        };
        for (int64_t c = 0; c < d; ++c) lo[size_t(c)] = held(g(rng)), hi[size_t(c)] = held(g(rng));
        void* sums = type == DType::f32 ? static_cast<void*>(wide.data()) : half.data();
        kernels::quest_page_write(sums, type, d, p, lo.data(), hi.data());
        for (int64_t c = 0; c < d; ++c)
          for (bool max : {false, true}) {
            const size_t i = size_t(kernels::quest_sum_index(d, p, c, max));
            const float stored = type == DType::f32    ? wide[i]
                                 : type == DType::bf16 ? bf16_to_f32(half[i])
                                                       : f16_to_f32(half[i]);
            ASSERT_EQ(stored, max ? hi[size_t(c)] : lo[size_t(c)])
                << dtype_name(type) << " d " << d << " c " << c;
          }
        size_t touched = 0;  // nothing but page p's 2d entries
        for (size_t i = 0; i < elems; ++i)
          touched += type == DType::f32 ? wide[i] != -1.0f : half[i] != 0xFFFF;
        EXPECT_LE(touched, size_t(2 * d));
        kernels::quest_page_read(sums, type, d, p, lo2.data(), hi2.data());
        EXPECT_EQ(lo2, lo) << dtype_name(type) << " d " << d << " page " << p;
        EXPECT_EQ(hi2, hi) << dtype_name(type) << " d " << d << " page " << p;
      }
}

// The code rule of spattn/quest.hpp, written out plainly: floor / ceil of x / s, one step out
// where the product lands inside, clamped to +-127 (non-finite to -127), 0 where s is 0.
int plain_code(float x, float s, bool up) {
  if (!(s > 0)) return 0;
  float k = up ? std::ceil(x / s) : std::floor(x / s);
  if (up && k * s < x) k += 1;
  if (!up && k * s > x) k -= 1;
  if (!(k >= -127.0f)) return -127;
  return int(std::min(k, 127.0f));
}

// The vector encoder against that rule, bit for bit, with a per-entry scale (a page's
// dimensions) and one scale (a block's pages in one dimension), odd counts, zero and tiny
// scales, values at and past +-126 s, infinities and NaN.
TEST(Quest, EncodeKernelEqualsThePlainRule) {
  std::mt19937_64 rng(10);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  int64_t steps_down = 0, steps_up = 0;  // entries where the rule steps out
  for (int64_t n : {1, 7, 16, 33, 300})
    for (bool one_scale : {false, true}) {
      const size_t nn = static_cast<size_t>(n);
      std::vector<float> lo(nn), hi(nn), s(nn);
      for (int64_t i = 0; i < n; ++i) {
        const float amax = i % 11 == 0 ? 0.0f : i % 13 == 0 ? 1e-40f : std::exp(3 * g(rng));
        s[size_t(i)] = amax / 126.0f > 0 ? amax / 126.0f : amax;
        const float a = amax * (2 * u01(rng) - 1), b = amax * (2 * u01(rng) - 1);
        lo[size_t(i)] = std::min(a, b), hi[size_t(i)] = std::max(a, b);
        if (i % 17 == 3) lo[size_t(i)] = -amax, hi[size_t(i)] = amax;  // the block's extremes
        if (i % 5 == 2) {  // just past a multiple of s: the quotient rounds onto it
          const float m = std::round(100 * (2 * u01(rng) - 1)) * s[size_t(i)];
          lo[size_t(i)] = std::nextafter(m, -INFINITY), hi[size_t(i)] = std::nextafter(m, INFINITY);
        }
        if (i % 29 == 5) lo[size_t(i)] = -INFINITY, hi[size_t(i)] = NAN;
        if (i % 31 == 7) lo[size_t(i)] = 5 * amax + 1, hi[size_t(i)] = INFINITY;  // past 126 s
      }
      const int64_t step = one_scale ? 0 : 1, code_step = 3;
      std::vector<int8_t> lo8(size_t(n * code_step), 99), hi8(size_t(n * code_step), 99);
      kernels::quest_encode(lo.data(), hi.data(), s.data(), step, n, lo8.data(), hi8.data(),
                            code_step);
      for (int64_t i = 0; i < n; ++i) {
        const float si = s[size_t(i * step)];
        if (si > 0 && std::isfinite(lo[size_t(i)] / si) && std::isfinite(hi[size_t(i)] / si)) {
          steps_down += std::floor(lo[size_t(i)] / si) * si > lo[size_t(i)];
          steps_up += std::ceil(hi[size_t(i)] / si) * si < hi[size_t(i)];
        }
        ASSERT_EQ(lo8[size_t(i * code_step)], plain_code(lo[size_t(i)], si, false))
            << n << " entry " << i;
        ASSERT_EQ(hi8[size_t(i * code_step)], plain_code(hi[size_t(i)], si, true))
            << n << " entry " << i;
        ASSERT_EQ(lo8[size_t(i * code_step + 1)], 99);  // between the strided codes: untouched
      }
    }
  EXPECT_GT(steps_down, 0);  // the step-out cases were exercised
  EXPECT_GT(steps_up, 0);
}

// sums=i8: each page's codes hold its exact range ([s lo8, s hi8] contains [min, max] in
// float arithmetic, codes within +-127, s the block's amax / 126), and they are a function of
// the exact summaries: appended in pieces, at once, or truncated and appended again, the same
// codes and scales. Large and tiny magnitudes (a block's amax growing page by page and key by
// key) and an all-zero dimension included.
TEST(Quest, I8CodesHoldEveryPagesRangeWhateverTheAppends) {
  const int64_t d = 24, n = 1200, page = 16;
  for (KVType type : {KVType::f32, KVType::f16}) {
    Tensor k = random_tensor(2, n, d, 41, 0.5f);
    for (int64_t j = 0; j < n; ++j) {
      k.view().set(0, j, 1, k.view().get(0, j, 1) * float(1 + j % 97));  // amax grows
      k.view().set(1, j, 2, k.view().get(1, j, 2) * 1e-6f);
      k.view().set(0, j, 3, 0.0f);
    }
    const Tensor v = random_tensor(2, n, d, 42);
    QuestPages once(2, d, page, n, type, QuestSums::i8), pieces(2, d, page, n, type, QuestSums::i8);
    once.append(k);
    int64_t at = 0;
    for (int64_t piece : {5, 1, 40, 17, 1, 1, 500, 3, 600, 32}) {
      pieces.append(k.view().rows(at, piece));
      at += piece;
    }
    ASSERT_EQ(at, n);
    ASSERT_TRUE(once.i8());
    const auto same = [&](const QuestPages& a, const QuestPages& b, const char* what) {
      ASSERT_EQ(a.pages(), b.pages()) << what;
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t p = 0; p < a.pages(); ++p)
          for (int64_t c = 0; c < d; ++c) {
            const float s = a.scales(h)[p / kernels::kQuestPagePad * d + c];
            ASSERT_EQ(s, b.scales(h)[p / kernels::kQuestPagePad * d + c]) << what;
            for (bool max : {false, true}) {
              ASSERT_EQ(a.code(h, p, c, max), b.code(h, p, c, max))
                  << what << " head " << h << " page " << p << " dim " << c;
              const int x = a.code(h, p, c, max);
              ASSERT_LE(std::abs(x), 127);
              if (max)
                ASSERT_GE(float(x) * s, a.get(h, p, c, true)) << "page " << p << ", " << c;
              else
                ASSERT_LE(float(x) * s, a.get(h, p, c, false)) << "page " << p << ", " << c;
            }
          }
    };
    same(once, pieces, kv_type_name(type));
    PackedKV kv(2, d, DType::f32, n, true, type, type);
    kv.append(k, v);
    for (int64_t keep : {1000, 777, 512, 500, 31, 0}) {  // in a page, on a block, in a block
      kv.truncate(keep);
      once.truncate(keep, kv);
      QuestPages fresh(2, d, page, n, type, QuestSums::i8);
      fresh.append(k.view().rows(0, keep));
      same(once, fresh, "truncated");
    }
    const Tensor k2 = random_tensor(2, n, d, 43, 0.25f);  // other keys over stale blocks
    once.append(k2);
    QuestPages fresh(2, d, page, n, type, QuestSums::i8);
    fresh.append(k2);
    same(once, fresh, "other keys appended after truncating to 0");
  }
}

// Over an f16 or bf16 cache the summaries are kept in that type: the same values as f32
// summaries of the same (rounded) keys, so the same bounds and the same pages, in half the bytes.
TEST(Quest, SixteenBitSummariesEqualF32SummariesOfTheSameKeys) {
  const int64_t d = 64, hkv = 2, hq = 4, n = 1500;
  for (KVType type : {KVType::f16, KVType::bf16}) {
    const Tensor k = random_tensor(hkv, n, d, 31, 3.0f), q = random_tensor(hq, 1, d, 32);
    QuestPages stored(hkv, d, 16, n, type), wide(hkv, d, 16, n, KVType::f32);
    stored.append(k);
    wide.append(rounded(k, type));
    ASSERT_EQ(stored.type(), type == KVType::f16 ? DType::f16 : DType::bf16);
    ASSERT_EQ(wide.type(), DType::f32);
    EXPECT_EQ(stored.bytes() * 2, wide.bytes());
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t p = 0; p < stored.pages(); ++p)
        for (int64_t c = 0; c < d; ++c)
          for (bool max : {false, true})
            ASSERT_EQ(stored.get(h, p, c, max), wide.get(h, p, c, max))
                << kv_type_name(type) << " head " << h << " page " << p << " dim " << c;
    for (const char* spec : {"quest:k=7", "quest:topp=0.8"}) {
      const QuestParams p = parse_quest_params(parse_method_spec(spec));
      EXPECT_EQ(quest_select(q, stored, p, 0.125f), quest_select(q, wide, p, 0.125f))
          << kv_type_name(type) << " " << spec;
    }
  }
}

TEST(Quest, PageChoiceEqualsThePlainTwin) {
  using Shape = std::pair<int64_t, int64_t>;  // kv heads, q heads
  for (const auto& [hkv, hq] : std::initializer_list<Shape>{{2, 8}, {3, 3}})
    for (int64_t n : {1, 47, 640, 1001})
      for (const char* spec : {"quest:k=5", "quest:k=3,page=64,sink=2,local=2", "quest:topp=0.5",
                               "quest:topp=0.9,page=32", "quest:k=0,sink=0", "quest:min_share=0.01",
                               "quest:min_share=0.002,page=32", "quest:topp=0.5,per=block",
                               "quest:topp=0.9,page=32,sink=2", "quest:topp=0.7,est=bound",
                               "quest:k=5,est=gauss", "quest:min_share=0.01,est=bound"}) {
        const QuestParams p = parse_quest_params(parse_method_spec(spec));
        const int64_t d = 64, group = hq / hkv;
        const Tensor k = random_tensor(hkv, n, d, uint64_t(n), 0.7f);
        const Tensor q = random_tensor(hq, 1, d, uint64_t(n) + 1);
        QuestPages pages(hkv, d, p.page, n);
        pages.append(k);
        const float scale = 1.0f / std::sqrt(float(d));
        // Without the cache, and with it (a mass budget on G then reads the forced pages' keys)
        const PackedKV kv = PackedKV::pack(k, k, 0, 1, true, KVType::f32, KVType::f32);
        for (const PackedKV* cache : {static_cast<const PackedKV*>(nullptr), &kv}) {
          QuestDecodeStats st;
          const auto ranges = quest_select(q, pages, p, scale, &st, 1, cache);
          const int64_t np = pages.pages();
          int64_t read = 0;
          ASSERT_EQ(int64_t(ranges.size()), hkv);
          for (int64_t g = 0; g < hkv; ++g) {
            EXPECT_EQ(chosen_pages(ranges[size_t(g)], p.page, np),
                      twin_pages(q, g, k, group, p, scale, cache != nullptr))
                << spec << " n " << n << " kv head " << g << (cache ? ", with the cache" : "");
            for (const KeyRange& r : ranges[size_t(g)]) read += r.end - r.begin;
          }
          EXPECT_EQ(st.keys_read, read);
          EXPECT_EQ(st.keys_total, hkv * n);
          EXPECT_EQ(st.pages_total, hkv * np);
        }
      }
}

// Pages of equal score go in page order, whatever selects the budget's threshold: keys that
// repeat with the page's period give every whole page the same bounds, two pages get a larger
// key, and the budget ends inside the tie.
TEST(Quest, TiedPagesGoInPageOrder) {
  const int64_t d = 64, page = 16, n = 40 * page, hkv = 1, hq = 2;
  const Tensor base = random_tensor(hkv, page, d, 5, 0.5f), q = random_tensor(hq, 1, d, 6);
  Tensor k(DType::f32, hkv, n, d);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < d; ++c) k.view().set(0, j, c, base.view().get(0, j % page, c));
  for (int64_t c = 0; c < d; ++c)  // pages 30 and 12: larger in the direction of both queries
    for (int64_t pg : {30, 12})
      k.view().set(0, pg * page + 3, c, 4.0f * (q.view().get(0, 0, c) + q.view().get(1, 0, c)));
  QuestPages pages(hkv, d, page, n);
  pages.append(k);
  const QuestParams p = parse_quest_params(parse_method_spec("quest:k=5"));
  const auto ranges = quest_select(q, pages, p, 1.0f / std::sqrt(float(d)));
  const std::vector<char> got = chosen_pages(ranges[0], page, pages.pages());
  EXPECT_EQ(got, twin_pages(q, 0, k, hq / hkv, p, 1.0 / std::sqrt(double(d))));
  std::vector<char> want(size_t(pages.pages()), 0);
  for (int64_t pg : {0, 1, 2, 3, 12, 30, 39}) want[size_t(pg)] = 1;  // sink, 3 tied, 2 best, local
  EXPECT_EQ(got, want);
}

// The decode over the chosen pages equals exact attention over those keys gathered (rows as
// the cache stores them), in every cache type, with GQA and lengths off the page grid.
TEST(Quest, DecodeEqualsAttentionOverTheChosenKeys) {
  const int64_t d = 64, hkv = 2, hq = 6;
  for (KVType type : {KVType::f32, KVType::f16, KVType::bf16, KVType::q8_0})
    for (int64_t n : {77, 1000, 2500}) {
      const QuestParams p = parse_quest_params(parse_method_spec("quest:k=6,page=16"));
      const Tensor k = random_tensor(hkv, n, d, 7 + uint64_t(n), 0.5f);
      const Tensor v = random_tensor(hkv, n, d, 8 + uint64_t(n));
      const Tensor q = random_tensor(hq, 1, d, 9 + uint64_t(n));
      PackedKV kv(hkv, d, DType::f32, n + 10, true, type, type);
      kv.append(k, v);
      QuestPages pages(hkv, d, p.page, n + 10, type);
      pages.append(k);
      Tensor out(DType::f32, hq, 1, d);
      std::vector<float> lse(static_cast<size_t>(hq));
      QuestDecodeStats st;
      quest_decode(q, kv, pages, p, out, AttnOptions{}, lse.data(), nullptr, &st);
      if (n > 8 * 16) {
        EXPECT_LT(st.keys_read, st.keys_total);
      }
      const auto ranges = quest_select(q, pages, p, 1.0f / std::sqrt(float(d)));
      const Tensor kr = rounded(k, type), vr = rounded(v, type);
      for (int64_t h = 0; h < hq; ++h) {
        std::vector<int64_t> keys;
        for (const KeyRange& r : ranges[size_t(h / (hq / hkv))])
          for (int64_t j = r.begin; j < r.end; ++j) keys.push_back(j);
        const int64_t m = int64_t(keys.size());
        Tensor kg(DType::f32, 1, m, d), vg(DType::f32, 1, m, d), qh(DType::f32, 1, 1, d),
            ref(DType::f32, 1, 1, d);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t c = 0; c < d; ++c) {
            kg.view().set(0, i, c, kr.view().get(h / (hq / hkv), keys[size_t(i)], c));
            vg.view().set(0, i, c, vr.view().get(h / (hq / hkv), keys[size_t(i)], c));
          }
        for (int64_t c = 0; c < d; ++c) qh.view().set(0, 0, c, q.view().get(h, 0, c));
        float ref_lse = 0;
        AttnOptions all;
        all.causal = false;
        attention_reference(qh, kg, vg, ref, all, &ref_lse);
        for (int64_t c = 0; c < d; ++c)
          EXPECT_NEAR(out.view().get(h, 0, c), ref.view().get(0, 0, c), 2e-5)
              << kv_type_name(type) << " n " << n << " head " << h << " dim " << c;
        EXPECT_NEAR(lse[size_t(h)], ref_lse, 2e-5);
      }
    }
}

// Summaries appended in pieces that start and end inside pages (as a runner appends a prompt's
// batches and then one decoded token at a time) are each page's plain min and max, per kv head
// and dimension, of the keys as the cache stores them.
TEST(Quest, SummariesAppendedInPiecesAreEachPagesMinAndMax) {
  const int64_t d = 64, n = 211;
  for (KVType type : {KVType::f32, KVType::f16, KVType::bf16, KVType::q8_0})
    for (int64_t page : {16, 48}) {
      const Tensor k = random_tensor(2, n, d, 31, 0.5f);
      const Tensor r = rounded(k, type);
      const TensorView rv = r;
      QuestPages pages(2, d, page, n, type);
      int64_t at = 0;
      for (int64_t piece : {5, 1, 40, 17, 1, 1, 100, 46}) {
        pages.append(k.view().rows(at, piece));
        at += piece;
      }
      ASSERT_EQ(at, n);
      ASSERT_EQ(pages.size(), n);
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t p = 0; p < pages.pages(); ++p)
          for (int64_t c = 0; c < d; ++c) {
            float lo = INFINITY, hi = -INFINITY;
            for (int64_t j = p * page; j < std::min(n, (p + 1) * page); ++j)
              lo = std::min(lo, rv.get(h, j, c)), hi = std::max(hi, rv.get(h, j, c));
            ASSERT_EQ(pages.get(h, p, c, false), lo) << kv_type_name(type) << " page " << p;
            ASSERT_EQ(pages.get(h, p, c, true), hi) << kv_type_name(type) << " page " << p;
          }
    }
}

TEST(Quest, TruncatedSummariesEqualAFreshAppend) {
  const int64_t d = 32, n = 200;
  for (KVType type : {KVType::f32, KVType::f16, KVType::bf16, KVType::q8_0}) {
    const Tensor k = random_tensor(2, n, d, 21), v = random_tensor(2, n, d, 22);
    PackedKV kv(2, d, DType::f32, n, true, type, type);
    kv.append(k, v);
    QuestPages pages(2, d, 48, n, type);
    pages.append(k);
    for (int64_t keep : {150, 97, 96, 1, 0}) {
      kv.truncate(keep);
      pages.truncate(keep, kv);
      QuestPages fresh(2, d, 48, n, type);
      fresh.append(k.view().rows(0, keep));
      ASSERT_EQ(pages.pages(), fresh.pages());
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t p = 0; p < pages.pages(); ++p)
          for (int64_t c = 0; c < d; ++c)
            for (bool max : {false, true})
              ASSERT_EQ(pages.get(h, p, c, max), fresh.get(h, p, c, max))
                  << kv_type_name(type) << " keep " << keep << " page " << p << " dim " << c;
    }
  }
}

// A k budget (sink + k + local pages, at most the cache) of dense_at of the cache or more
// decodes densely: the same bits as dense decode, every key counted read, no page chosen.
// Just under it Quest chooses; a mass budget always chooses.
TEST(Quest, BudgetOfHalfTheCacheDecodesDensely) {
  const auto reads_all = [](const char* spec, int64_t keys) {
    return quest_reads_every_key(parse_quest_params(parse_method_spec(spec)), keys);
  };
  EXPECT_TRUE(reads_all("quest", 8192));  // 258 pages of 16: 4,128 keys of 8,192
  EXPECT_TRUE(reads_all("quest", 8256));  // 4,128 of 8,256: exactly half
  EXPECT_FALSE(reads_all("quest", 8257));
  EXPECT_FALSE(reads_all("quest", 32768));
  EXPECT_FALSE(reads_all("quest:dense_at=1", 8192));
  EXPECT_TRUE(reads_all("quest:dense_at=1", 4100));        // every page
  EXPECT_TRUE(reads_all("quest:k=6,dense_at=0.25", 512));  // 8 pages of 16: 128 of 512
  EXPECT_FALSE(reads_all("quest:k=6,dense_at=0.25", 513));
  EXPECT_FALSE(reads_all("quest:topp=0.9", 100));
  EXPECT_FALSE(reads_all("quest:min_share=0.001", 100));
  EXPECT_FALSE(reads_all("quest", 0));

  const int64_t d = 64, hkv = 2, hq = 4, n = 300;
  const Tensor k = random_tensor(hkv, n, d, 41, 0.5f), v = random_tensor(hkv, n, d, 42);
  const Tensor q = random_tensor(hq, 1, d, 43);
  PackedKV kv(hkv, d, DType::f32, n, true, KVType::f16, KVType::f16);
  kv.append(k, v);
  Tensor dense(DType::f32, hq, 1, d);
  std::vector<float> dense_lse(size_t(hq), 0.0f);
  attention_decode(q, kv, dense, AttnOptions{}, DecodeOptions{}, dense_lse.data());
  for (const char* spec : {"quest:k=8", "quest:k=6"}) {  // 160 and 128 of 300 keys
    const QuestParams p = parse_quest_params(parse_method_spec(spec));
    QuestPages pages(hkv, d, p.page, n, KVType::f16);
    pages.append(k);
    Tensor out(DType::f32, hq, 1, d);
    std::vector<float> lse(size_t(hq), 0.0f);
    QuestDecodeStats st;
    quest_decode(q, kv, pages, p, out, AttnOptions{}, lse.data(), nullptr, &st);
    const bool all = std::string(spec) == "quest:k=8";
    EXPECT_EQ(st.keys_read == st.keys_total, all) << spec;
    EXPECT_EQ(st.keys_total, hkv * n);
    EXPECT_EQ(st.pages_total, hkv * pages.pages());
    EXPECT_EQ(st.pages_read == st.pages_total, all) << spec;
    if (all) {
      EXPECT_EQ(st.select_ms, 0.0);
      for (int64_t i = 0; i < hq * d; ++i)
        ASSERT_EQ(static_cast<const float*>(out.data())[i],
                  static_cast<const float*>(dense.data())[i])
            << i;
      EXPECT_EQ(lse, dense_lse);
    }
  }
}

// quest_select's cache must be the one its summaries describe: another length, kv-head count
// or width is a named Error, not a read past the cache.
TEST(Quest, SelectRefusesACacheTheSummariesDoNotDescribe) {
  const int64_t d = 64, n = 100;
  const Tensor k = random_tensor(2, n, d, 3, 0.7f), q = random_tensor(4, 1, d, 4);
  QuestPages pages(2, d, 16, n);
  pages.append(k);
  const QuestParams p = parse_quest_params(parse_method_spec("quest:topp=0.9"));
  const Tensor shorter = random_tensor(2, n - 1, d, 5, 0.7f),
               one_head = random_tensor(1, n, d, 6, 0.7f),
               narrower = random_tensor(2, n, d / 2, 7, 0.7f);
  for (const Tensor* other : {&shorter, &one_head, &narrower}) {
    const PackedKV kv = PackedKV::pack(*other, *other, 0, 1, true, KVType::f32, KVType::f32);
    try {
      quest_select(q, pages, p, 0.125f, nullptr, 1, &kv);
      ADD_FAILURE() << "a cache of " << kv.size() << " x " << kv.kv_heads() << " x " << kv.dim();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is not the one the"), std::string::npos) << e.what();
    }
  }
  const PackedKV same = PackedKV::pack(k, k, 0, 1, true, KVType::f32, KVType::f32);
  EXPECT_EQ(quest_select(q, pages, p, 0.125f, nullptr, 1, &same).size(), 2u);
}

TEST(Quest, BadSpecsAreNamedErrors) {
  const auto& expect_error = test::expect_decode_spec_error;
  expect_error("quest:page=24", "multiple of 16");
  expect_error("quest:page=128", "page");
  expect_error("quest:topp=0", "topp");
  expect_error("quest:topp=1.5", "topp");
  expect_error("quest:topp=-0.1", "topp");
  expect_error("quest:k=4,topp=0.5", "not both");
  expect_error("quest:min_share=0", "min_share");
  expect_error("quest:min_share=1", "min_share");
  expect_error("quest:k=4,min_share=0.1", "not both");
  expect_error("quest:topp=0.9,min_share=0.1", "not both");
  expect_error("quest:per=row", "per=row goes with topp");
  expect_error("quest:k=4,per=row", "per=row goes with topp");
  expect_error("quest:min_share=0.01,per=row", "per=row goes with topp");
  expect_error("quest:topp=0.9,per=head", "per='head'");
  expect_error("quest:est=mean", "est=mean");
  expect_error("quest:dense_at=0", "dense_at");
  expect_error("quest:dense_at=1.5", "dense_at");
  expect_error("quest:pages=4", "pages");
  expect_error("quest:sums=f8", "sums=f8");
  expect_error("blasst", "lambda=X or sparsity=S");
  expect_error("blasst:lambda=2", "lambda");
  expect_error("nonsense", "nonsense");
  const auto quest = [](const char* spec) { return parse_quest_params(parse_method_spec(spec)); };
  EXPECT_EQ(quest("quest:topp=1").topp, 1.0);
  // A mass budget reads G per q head by default; a count the paper's U.
  EXPECT_TRUE(quest("quest:topp=0.9").per_row);
  EXPECT_EQ(quest("quest:topp=0.9").est, QuestEstimate::gauss);
  EXPECT_EQ(quest("quest:min_share=0.01").est, QuestEstimate::gauss);
  EXPECT_FALSE(quest("quest:topp=0.9,per=block").per_row);
  EXPECT_EQ(quest("quest").est, QuestEstimate::bound);
  EXPECT_FALSE(quest("quest").per_row);
  EXPECT_EQ(quest("quest:k=8,est=gauss").est, QuestEstimate::gauss);
  EXPECT_EQ(quest("quest:sums=i8").sums, QuestSums::i8);
  EXPECT_EQ(quest("quest").sums, QuestSums::i8);
  EXPECT_EQ(quest("quest:sums=cache").sums, QuestSums::cache);
  // What each spec's decode reads: Quest's pages past its dense layers, dense's every key.
  BackendContext ctx;
  ctx.layer = 2;
  EXPECT_TRUE(make_decode_backend(parse_method_spec("quest"), ctx)->capabilities().reads_pages);
  ctx.layer = 1;
  EXPECT_FALSE(make_decode_backend(parse_method_spec("quest"), ctx)->capabilities().reads_pages);
  EXPECT_EQ(make_decode_backend(parse_method_spec("quest"), ctx)->name(), "dense");
  EXPECT_FALSE(make_decode_backend(parse_method_spec("dense"), ctx)->capabilities().sparse_decode);
}

// The runner: quest with every page kept computes dense decode's logits; with a small budget
// it reads fewer keys; after truncate its summaries give what a fresh session's give.
namespace fs = std::filesystem;
const model::Model& small_model() {
  static const model::Model m = [] {
    ModelShape s;
    s.layers = 3;
    s.dim = 64;
    s.heads = 4;
    s.kv_heads = 2;
    s.ffn = 96;
    s.vocab = 300;
    s.seed = 5;
    const test::TempDir dir("spattn_quest");
    const fs::path p = dir / "m.gguf";
    make_model(p.string(), s);
    model::Model model = model::load_model(p.string());
    fs::remove(p);
    return model;
  }();
  return m;
}

model::SessionOptions session(const std::string& decode) {
  model::SessionOptions so;
  so.n_ctx = 512;
  so.n_ubatch = 64;
  so.threads = 2;
  so.attn_decode = decode;
  return so;
}

std::vector<float> decode_logits(model::Session& s, const std::vector<int32_t>& t, int64_t prompt,
                                 int64_t steps) {
  s.prefill(std::span(t).first(size_t(prompt)), nullptr, 0);
  std::vector<float> all, l(300);
  for (int64_t i = 0; i < steps; ++i) {
    s.decode(t[size_t(prompt + i)], l.data());
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

TEST(Quest, RunnerDecodeKeepingEveryPageIsDense) {
  std::vector<int32_t> t(400);
  std::mt19937_64 rng(3);
  for (auto& x : t) x = int32_t(rng() % 300);
  model::Session dense(small_model(), session("dense"));
  model::Session all(small_model(), session("quest:k=100000,dense_layers=0"));
  model::Session few(small_model(), session("quest:k=2,dense_layers=1"));
  const auto a = decode_logits(dense, t, 300, 8), b = decode_logits(all, t, 300, 8);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
  EXPECT_EQ(all.timings().decode_keys_read, all.timings().decode_keys_total);
  decode_logits(few, t, 300, 8);
  const model::Timings& f = few.timings();
  // Layer 0 dense, layers 1-2 read sink + newest + 2 pages of 16 of ~19 pages.
  EXPECT_LT(f.decode_keys_read, f.decode_keys_total * 2 / 3);
  EXPECT_GT(f.decode_pages_total, 0);
  // The page choice is timed as part of decode's attention; dense decode chooses nothing.
  EXPECT_GT(f.decode_select_ms, 0.0);
  EXPECT_LE(f.decode_select_ms, f.decode_attn_ms);
  EXPECT_EQ(dense.timings().decode_select_ms, 0.0);
  // Per layer: three layers whose times add up to decode's attention time.
  ASSERT_EQ(f.decode_layer_attn_ms.size(), 3u);
  double layers = 0;
  for (double ms : f.decode_layer_attn_ms) {
    EXPECT_GT(ms, 0.0);
    layers += ms;
  }
  EXPECT_NEAR(layers, f.decode_attn_ms, 1e-9 * f.decode_attn_ms);
  EXPECT_GT(few.memory().decode_pages, 0u);
  EXPECT_EQ(dense.memory().decode_pages, 0u);
}

// Page summaries only where Quest decodes: its dense layers keep none (a third of them here,
// asking for one reads a named Error), unless every layer is asked for (the recall measure);
// either way the same logits, and the summaries a layer keeps are the same.
TEST(Quest, RunnerKeepsPagesOnlyInTheLayersQuestDecodes) {
  std::vector<int32_t> t(300);
  std::mt19937_64 rng(5);
  for (auto& x : t) x = int32_t(rng() % 300);
  model::Session sparse(small_model(), session("quest:k=3,dense_layers=1"));
  model::SessionOptions every_opt = session("quest:k=3,dense_layers=1");
  every_opt.quest_pages_every_layer = true;
  model::Session every(small_model(), every_opt);
  EXPECT_EQ(decode_logits(sparse, t, 250, 6), decode_logits(every, t, 250, 6));
  const model::KVCache& a = sparse.cache();
  const model::KVCache& b = every.cache();
  EXPECT_FALSE(a.has_pages(0));
  try {
    a.pages(0);
    ADD_FAILURE() << "pages of a dense layer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 0 keeps no Quest page summaries"),
              std::string::npos)
        << e.what();
  }
  for (int64_t l = 0; l < 3; ++l) EXPECT_TRUE(b.has_pages(l)) << l;
  for (int64_t l = 1; l < 3; ++l) {
    ASSERT_TRUE(a.has_pages(l)) << l;
    const QuestPages &pa = a.pages(l), &pb = b.pages(l);
    ASSERT_EQ(pa.pages(), pb.pages());
    for (int64_t h = 0; h < pa.kv_heads(); ++h)
      for (int64_t p = 0; p < pa.pages(); ++p)
        for (int64_t c = 0; c < pa.dim(); ++c)
          ASSERT_EQ(pa.code(h, p, c, true), pb.code(h, p, c, true)) << l << " " << p << " " << c;
  }
  EXPECT_EQ(sparse.memory().decode_pages * 3, every.memory().decode_pages * 2);
  model::Session dense(small_model(), session("dense"));
  EXPECT_FALSE(dense.cache().has_pages(0));
}

TEST(Quest, RunnerAfterTruncateEqualsAFreshSession) {
  std::vector<int32_t> t(300);
  std::mt19937_64 rng(4);
  for (auto& x : t) x = int32_t(rng() % 300);
  for (const char* spec : {"quest:k=3,dense_layers=0", "quest:k=3,dense_layers=0,sums=i8"}) {
    SCOPED_TRACE(spec);
    model::Session s(small_model(), session(spec));
    model::Session fresh(small_model(), session(spec));
    s.prefill(std::span(t).first(250), nullptr, 0);
    s.decode(t[250], nullptr);
    s.truncate(203);  // inside a page
    fresh.prefill(std::span(t).first(203), nullptr, 0);
    model::Session forked = s.fork(190);
    model::Session fresh190(small_model(), session(spec));
    fresh190.prefill(std::span(t).first(190), nullptr, 0);
    std::vector<float> a(300), b(300);
    for (int64_t i = 0; i < 6; ++i) {
      s.decode(t[size_t(203 + i)], a.data());
      fresh.decode(t[size_t(203 + i)], b.data());
      ASSERT_EQ(a, b) << "step " << i;
      forked.decode(t[size_t(190 + i)], a.data());
      fresh190.decode(t[size_t(190 + i)], b.data());
      ASSERT_EQ(a, b) << "fork, step " << i;
    }
  }
}

}  // namespace
}  // namespace spattn
