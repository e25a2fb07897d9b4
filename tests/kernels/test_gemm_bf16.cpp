// Prefill's bf16 products (kernels/gemm_bf16): the activations' rounding against ggml's own
// conversion bit for bit; the product against a double twin over the rounded activations; the
// vector path (AVX512_BF16, where the CPU has it) against the portable one bit for bit, the
// portable one against vdpbf16ps's rule on a case whose bits tell the orders apart; the same bits
// for any row count and thread split; bad shapes as errors.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "assets.hpp"
#include "ggml.h"
#include "kernels/gemm_bf16.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

float bf16_value(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

std::vector<uint16_t> rounded(const std::vector<float>& x, int64_t n, int64_t k, int64_t ldx,
                              int nth) {
  std::vector<uint16_t> xb(size_t(kernels::gemm_bf16_act_bytes(n, k) / 2), 0xABCD);
  for (int i = 0; i < nth; ++i) kernels::gemm_bf16_round(x.data(), n, k, ldx, xb.data(), i, nth);
  return xb;
}

TEST(GemmBf16, RoundingIsGgmlsBits) {
  const int64_t n = 3, k = 70, ldx = 75;  // k: four vectors of 16 and a tail of 6
  std::mt19937 rng(3);
  std::vector<float> x(size_t(n * ldx));
  for (float& v : x) v = std::bit_cast<float>(uint32_t(rng()));  // every kind of pattern
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f + 0x1p-8f,  // a tie: to even (1.0)
                            1.0f + 0x3p-8f,  // a tie: to even (1 + 2^-6)
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::bit_cast<float>(0x7f800001u),  // a signalling NaN
                            std::numeric_limits<float>::denorm_min(),
                            std::bit_cast<float>(0x00018000u),  // a subnormal tie
                            std::numeric_limits<float>::max()};
  for (size_t i = 0; i < std::size(specials); ++i) {
    x[i] = specials[i];
    x[size_t(2 * ldx + 64) + i % 6] = specials[i];  // in the tail too
  }
  const std::vector<uint16_t> xb = rounded(x, n, k, ldx, 2);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < k; ++i)
      ASSERT_EQ(xb[size_t(r * k + i)], ggml_fp32_to_bf16(x[size_t(r * ldx + i)]).bits)
          << "row " << r << " column " << i;
  EXPECT_EQ(xb[2], 0x3f80);
  EXPECT_EQ(xb[3], 0x3f82);
}

struct Problem {
  int64_t m, n, k, row_bytes, ldx, ldc;
  std::vector<uint16_t> w;  // m rows of row_bytes / 2
  std::vector<float> x;
};

// Weights N(0, 0.05^2) rounded to bf16, activations uniform in [-2, 2).
Problem make(int64_t m, int64_t n, int64_t k, uint32_t seed) {
  Problem p{m, n, k, 2 * k + 8, k + 5, m + 3, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  p.w.resize(size_t(m * p.row_bytes / 2));
  for (uint16_t& v : p.w) v = ggml_fp32_to_bf16(g(rng)).bits;
  p.x.resize(size_t(n * p.ldx));
  for (float& v : p.x) v = u(rng);
  return p;
}

kernels::Bf16Weights weights(const Problem& p) { return {p.w.data(), p.row_bytes, p.m}; }

std::vector<float> product(const Problem& p, int nth, bool portable = false) {
  const std::vector<uint16_t> xb = rounded(p.x, p.n, p.k, p.ldx, nth);
  std::vector<float> c(size_t(p.n * p.ldc), 12345.0f);
  if (portable) {
    kernels::gemm_bf16_run_portable(weights(p), xb.data(), p.n, p.k, c.data(), p.ldc);
  } else {
    for (int i = 0; i < nth; ++i)
      kernels::gemm_bf16_run(weights(p), xb.data(), p.n, p.k, c.data(), p.ldc, i, nth);
  }
  return c;
}

// Each output against the double sum of the bf16 weights times the rounded activations (the
// products are exact in f32; what differs is the chain's k roundings, each within half an ulp
// of the running sum, bounded by k units of f32 rounding of sum |x w|), and against the
// unrounded activations within their rounding (2^-9 relative each). Nothing is written past
// column m.
void expect_matches_twin(const Problem& p, const std::vector<float>& c) {
  const double eps = std::numeric_limits<float>::epsilon() / 2;
  const int64_t wr = p.row_bytes / 2;
  for (int64_t r = 0; r < p.n; ++r) {
    for (int64_t j = 0; j < p.m; ++j) {
      double s = 0, exact = 0, mag = 0;
      for (int64_t t = 0; t < p.k; ++t) {
        const double w = bf16_value(p.w[size_t(j * wr + t)]);
        const float xf = p.x[size_t(r * p.ldx + t)];
        const double xr = bf16_value(ggml_fp32_to_bf16(xf).bits);
        s += w * xr;
        exact += w * xf;
        mag += std::fabs(w * xr);
      }
      const double got = c[size_t(r * p.ldc + j)];
      const double tol = double(p.k) * eps * mag + 1e-30;
      ASSERT_NEAR(got, s, tol) << "row " << r << " column " << j;
      ASSERT_NEAR(got, exact, tol + 0x1p-9 * mag) << "against the unrounded activations";
    }
    for (int64_t j = p.m; j < p.ldc; ++j) ASSERT_EQ(c[size_t(r * p.ldc + j)], 12345.0f);
  }
}

TEST(GemmBf16, MatchesTheDoubleTwin) {
  const Problem p = make(45, 21, 576, 11);  // m, n not whole tiles; k: a chunk's tail of 32 pairs
  expect_matches_twin(p, product(p, 1));
  expect_matches_twin(p, product(p, 1, true));
}

TEST(GemmBf16, VectorPathIsThePortablePathsBits) {
  if (!kernels::gemm_bf16_dot()) SPATTN_SKIP_NOT_APPLICABLE("no AVX512_BF16 here");
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{45, 19, 576},
                                {64, 8, 256},
                                {7, 3, 34},
                                {33, 17, 1024}}) {
    Problem p = make(m, n, k, 23 + uint32_t(m));
    // Values whose products and sums reach the subnormals, where vdpbf16ps flushes to zero.
    for (size_t i = 0; i < 40; ++i) p.w[i * 3] = uint16_t(0x0080 + i);  // near FLT_MIN
    for (int64_t t = 0; t < 20; ++t) p.x[size_t(t)] = std::ldexp(1.0f, -100 + int(t));
    const std::vector<float> v = product(p, 2), c = product(p, 1, true);
    for (size_t i = 0; i < c.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(v[i]), std::bit_cast<uint32_t>(c[i]))
          << m << " x " << n << " x " << k << ", element " << i;
  }
}

// vdpbf16ps's rule: acc + x1 w1 rounded, then + x0 w0 rounded. With acc = 2^-24, x1 w1 = 1 and
// x0 w0 = 2^-24 that is 1 (twice a tie to even); adding the even column first, or the three at
// once, gives 1 + 2^-23.
TEST(GemmBf16, OddColumnFirstEachStepRounded) {
  // Columns: 0 and 1 (one pair) make acc = x0 w0 + x1 w1 with acc starting at 0, so a first
  // pair (2^-24 and 0) sets acc = 2^-24, the second pair is (2^-24, 1).
  const uint16_t one = 0x3f80, tiny = 0x3380, zero = 0;  // 1, 2^-24
  const std::vector<uint16_t> w = {tiny, zero, tiny, one};
  const std::vector<uint16_t> x = {one, zero, one, one};
  float c = 0;
  kernels::gemm_bf16_run_portable({w.data(), 8, 1}, x.data(), 1, 4, &c, 1);
  EXPECT_EQ(c, 1.0f);
  if (kernels::gemm_bf16_dot()) {
    float v = 0;
    kernels::gemm_bf16_run({w.data(), 8, 1}, x.data(), 1, 4, &v, 1, 0, 1);
    EXPECT_EQ(v, 1.0f);
  }
}

TEST(GemmBf16, SameBitsForAnyRowCountAndThreadSplit) {
  Problem p = make(70, 29, 512, 41);
  const std::vector<float> all = product(p, 3);
  EXPECT_EQ(all, product(p, 1));
  p.n = 3;  // the first 3 rows alone (fewer than the loops' group of 8)
  const std::vector<float> few = product(p, 2);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t j = 0; j < p.m; ++j)
      ASSERT_EQ(few[size_t(r * p.ldc + j)], all[size_t(r * p.ldc + j)]);
}

TEST(GemmBf16, BadShapesAreErrors) {
  const Problem p = make(4, 2, 64, 1);
  const std::vector<uint16_t> xb = rounded(p.x, p.n, p.k, p.ldx, 1);
  std::vector<float> c(size_t(p.n * p.ldc));
  kernels::Bf16Weights w = weights(p);
  EXPECT_THROW(kernels::gemm_bf16_run(w, xb.data(), p.n, 63, c.data(), p.ldc, 0, 1), Error);
  w.row_bytes = 100;  // fewer than 64 values
  EXPECT_THROW(kernels::gemm_bf16_run(w, xb.data(), p.n, 64, c.data(), p.ldc, 0, 1), Error);
  EXPECT_THROW(kernels::gemm_bf16_check({p.w.data(), 130, 4}, 64), Error);  // odd pairs
}

}  // namespace
}  // namespace spattn
