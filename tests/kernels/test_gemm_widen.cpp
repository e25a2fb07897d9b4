// Prefill's products (kernels/gemm_widen) with f16 weights against a plain double twin, on every
// SIMD target compiled in (the quantized formats: test_gemm_widen_formats.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/gemm_widen.hpp"
#include "spattn/dtype.hpp"
#include "targets.hpp"

namespace spattn {
namespace {

struct Problem {
  int64_t m, n, k, ldw, ldx, ldc;
  std::vector<uint16_t> w;  // f16 bits
  std::vector<float> x;
};

Problem make(int64_t m, int64_t n, int64_t k, uint32_t seed) {
  Problem p{m, n, k, k + 3, k + 5, m + 2, {}, {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  p.w.resize(size_t(m * p.ldw));
  for (auto& b : p.w) b = f32_to_f16(u(rng));
  p.x.resize(size_t(n * p.ldx));
  for (auto& v : p.x) v = u(rng);
  return p;
}

// The plain twin: each entry's sum in double, and the sum of |terms| for the error bound.
void twin(const Problem& p, std::vector<double>& ref, std::vector<double>& mag) {
  ref.assign(size_t(p.n * p.m), 0.0);
  mag.assign(size_t(p.n * p.m), 0.0);
  for (int64_t r = 0; r < p.n; ++r)
    for (int64_t j = 0; j < p.m; ++j) {
      double s = 0, a = 0;
      for (int64_t t = 0; t < p.k; ++t) {
        const double v =
            double(p.x[size_t(r * p.ldx + t)]) * f16_to_f32(p.w[size_t(j * p.ldw + t)]);
        s += v;
        a += std::fabs(v);
      }
      ref[size_t(r * p.m + j)] = s;
      mag[size_t(r * p.m + j)] = a;
    }
}

// C through the kernel with nth threads' shares run one after another; C's padding columns
// start as a sentinel.
std::vector<float> product(const Problem& p, int nth) {
  std::vector<float> xp(size_t(kernels::gemm_widen_packed_floats(p.n, p.k)), -7.0f);
  for (int i = 0; i < nth; ++i)
    kernels::gemm_widen_pack(p.x.data(), p.n, p.k, p.ldx, xp.data(), i, nth);
  std::vector<float> c(size_t(p.n * p.ldc), 12345.0f);
  const kernels::WeightRows w{kernels::WeightFormat::f16, p.w.data(), p.ldw * 2, p.m};
  for (int i = 0; i < nth; ++i)
    kernels::gemm_widen_run(w, xp.data(), p.n, p.k, c.data(), p.ldc, i, nth);
  return c;
}

void expect_matches_twin(const Problem& p, const std::vector<float>& c) {
  std::vector<double> ref, mag;
  twin(p, ref, mag);
  // f32 sums of k terms: within (k + 2) units of f32 rounding of the terms' magnitudes.
  const double eps = std::numeric_limits<float>::epsilon() / 2;
  for (int64_t r = 0; r < p.n; ++r) {
    for (int64_t j = 0; j < p.m; ++j) {
      const double got = c[size_t(r * p.ldc + j)], want = ref[size_t(r * p.m + j)];
      ASSERT_LE(std::fabs(got - want), double(p.k + 2) * eps * mag[size_t(r * p.m + j)] + 1e-30)
          << "m " << p.m << " n " << p.n << " k " << p.k << " at row " << r << " col " << j;
    }
    for (int64_t j = p.m; j < p.ldc; ++j)
      ASSERT_EQ(c[size_t(r * p.ldc + j)], 12345.0f) << "wrote past column m at row " << r;
  }
}

TEST(GemmWidenF16, MatchesTheDoubleTwinOnEveryTarget) {
  // Shapes around every block edge: one row or column, tails of the 12-row tile, the 32-row
  // panel, the 256-column block and the 512-row pass, the row path's 16- and 32-row tiles and
  // its 2048-column blocks (sums carried across them in C), and k not a multiple of any
  // vector.
  const int64_t shapes[][3] = {{1, 1, 1},      {5, 3, 7},      {13, 33, 17},   {12, 32, 256},
                               {37, 70, 300},  {97, 545, 530}, {25, 1030, 40}, {200, 64, 1},
                               {37, 70, 2100}, {21, 20, 2080}};
  test::for_each_target([&] {
    uint32_t seed = 1;
    for (const auto& s : shapes) {
      const Problem p = make(s[0], s[1], s[2], seed++);
      expect_matches_twin(p, product(p, 1));
    }
  });
}

TEST(GemmWidenF16, AnyThreadSplitGivesTheSameBits) {
  test::for_each_target([&] {
    for (int64_t n : {40, 300}) {  // the row path and the tile
      const Problem p = make(131, n, 520, 7);
      const std::vector<float> one = product(p, 1);
      for (int nth : {2, 3, 5, 16}) {
        const std::vector<float> c = product(p, nth);
        EXPECT_EQ(std::memcmp(c.data(), one.data(), c.size() * sizeof(float)), 0)
            << n << " rows, " << nth << " threads";
      }
    }
  });
}

TEST(GemmWidenF16, ARowsResultIsTheSameBitsWhateverTheRowsBesideIt) {
  // The runner's batch invariance (test_batch_invariance.cpp) rests on this: n picks the tile
  // variant (quarter, half, whole vectors, the 512-row pass), never a row's arithmetic.
  test::for_each_target([&] {
    const Problem big = make(27, 600, 300, 5);
    const std::vector<float> all = product(big, 1);
    for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 16, 17, 20, 23, 31, 32, 33, 100, 513}) {
      Problem p = big;
      p.n = n;
      p.x.resize(size_t(n * p.ldx));
      const std::vector<float> c = product(p, 2);
      expect_matches_twin(p, c);
      EXPECT_EQ(std::memcmp(c.data(), all.data(), c.size() * sizeof(float)), 0) << n << " rows";
    }
  });
}

TEST(GemmWidenF16, ExtremeValuesAsTheTwin) {
  // f16's largest and smallest (subnormal) weights, zeros, and activations up to 1e30: the
  // f32 products and sums neither overflow nor flush where the double twin does not.
  test::for_each_target([&] {
    Problem p = make(29, 41, 75, 3);
    const float ws[] = {65504.0f, -65504.0f, 5.96046448e-8f, 0.0f, -0.0f, 1.0f};
    for (size_t i = 0; i < p.w.size(); i += 3) p.w[i] = f32_to_f16(ws[(i / 3) % 6]);
    for (size_t i = 0; i < p.x.size(); i += 5) p.x[i] = (i / 5) % 2 ? 1e30f : -1e-30f;
    expect_matches_twin(p, product(p, 2));
  });
}

TEST(GemmWidenF16, NonFiniteInputsReachOnlyTheirRowsAndColumns) {
  test::for_each_target([&] {
    Problem p = make(20, 40, 60, 11);
    p.x[size_t(3 * p.ldx + 10)] = std::numeric_limits<float>::infinity();  // row 3
    p.w[size_t(7 * p.ldw + 59)] = 0x7e00;                                  // col 7: NaN
    const std::vector<float> c = product(p, 2);
    for (int64_t r = 0; r < p.n; ++r)
      for (int64_t j = 0; j < p.m; ++j) {
        const float v = c[size_t(r * p.ldc + j)];
        if (j == 7)
          EXPECT_TRUE(std::isnan(v)) << r << "," << j << " = " << v;
        else if (r == 3)
          EXPECT_TRUE(std::isinf(v)) << r << "," << j;
        else
          EXPECT_TRUE(std::isfinite(v)) << r << "," << j;
      }
  });
}

}  // namespace
}  // namespace spattn
