// Prefill's products (kernels/gemm_widen) with quantized weights: the widening decoders against
// the plain scalar decoders of tests/quant_reference.hpp bit for bit (random bytes, moderate and
// edge scales), and the product against a double twin over the reference-decoded weights, with
// the same bits for any row count and thread split, on every SIMD target compiled in.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/gemm_widen.hpp"
#include "quant_reference.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "targets.hpp"

namespace spattn {
namespace {

namespace ref = test::quant_ref;
using gguf::GgmlType;
using kernels::WeightFormat;

struct Kind {
  WeightFormat format;
  GgmlType type;
};
const Kind kKinds[] = {{WeightFormat::f16, GgmlType::f16},
                       {WeightFormat::q8_0, GgmlType::q8_0},
                       {WeightFormat::q6_K, GgmlType::q6_K},
                       {WeightFormat::q5_K, GgmlType::q5_K},
                       {WeightFormat::q3_K, GgmlType::q3_K}};

void put_f16(uint8_t* p, uint16_t h) {
  p[0] = uint8_t(h);
  p[1] = uint8_t(h >> 8);
}

// Every row of w (rows x k values, row_bytes apart) widened by the kernel in blocks of 256
// columns (the tile's) against the reference decoder.
void expect_widened_as_reference(const Kind& kind, const std::vector<uint8_t>& w, int64_t rows,
                                 int64_t k, int64_t row_bytes, const char* what) {
  const ref::Format& f = *ref::find_format(kind.type);
  const kernels::WeightRows wr{kind.format, w.data(), row_bytes, rows};
  std::vector<float> got(static_cast<size_t>(rows * k)), want(static_cast<size_t>(k));
  for (int64_t t0 = 0; t0 < k; t0 += 256)
    kernels::gemm_widen_rows(wr, k, 0, rows, t0, std::min<int64_t>(256, k - t0), got.data() + t0,
                             k);
  for (int64_t r = 0; r < rows; ++r) {
    ref::decode_row(f, w.data() + r * row_bytes, want.data(), k);
    for (int64_t t = 0; t < k; ++t) {
      const float g = got[size_t(r * k + t)], e = want[size_t(t)];
      // (A NaN may come back signalling where the target has no F16C and the generic conversion
      // widens the f16: inside a product any NaN gives a NaN, so any NaN stands for any here.)
      ASSERT_TRUE(ref::same_value(f, g, e) || (std::isnan(g) && std::isnan(e)))
          << gguf::type_name(kind.type) << ", " << what << ": row " << r << " column " << t
          << " widened to " << g << " (0x" << std::hex << std::bit_cast<uint32_t>(g)
          << "), the reference " << e << " (0x" << std::bit_cast<uint32_t>(e) << ")";
    }
  }
}

TEST(GemmWidenFormats, DecodersGiveTheReferenceBitsOnEveryTarget) {
  test::for_each_target([&] {
    std::mt19937_64 rng(31);
    for (const Kind& kind : kKinds) {
      const ref::Format& f = *ref::find_format(kind.type);
      const int64_t rows = 5, k = 768, row_bytes = k / f.block * f.bytes + 6;  // padded rows
      std::vector<uint8_t> w(size_t(rows * row_bytes));
      for (uint8_t& x : w) x = uint8_t(rng());  // NaN, inf and subnormal scales among them
      expect_widened_as_reference(kind, w, rows, k, row_bytes, "random bytes");
      if (kind.format == WeightFormat::f16) continue;
      // Moderate scales (real weights'), then each f16 edge value as every block's scale.
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < k / f.block; ++b)
          put_f16(&w[size_t(r * row_bytes + b * f.bytes + f.f16_fields[0])],
                  uint16_t(0x2000 + rng() % 0x2000));
      expect_widened_as_reference(kind, w, rows, k, row_bytes, "moderate scales");
      for (uint16_t edge :
           {0x0000, 0x8000, 0x0001, 0x0400, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01}) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t b = 0; b < k / f.block; ++b)
            put_f16(&w[size_t(r * row_bytes + b * f.bytes + f.f16_fields[0])], edge);
        expect_widened_as_reference(kind, w, rows, k, row_bytes, "an edge scale");
      }
    }
  });
}

struct Problem {
  Kind kind;
  int64_t m, n, k, row_bytes, ldx, ldc;
  std::vector<uint8_t> w;
  std::vector<float> x;
  std::vector<float> wf;  // the weights as the reference decodes them, [m][k]
};

// Weights quantized from N(0, 0.05^2) values by ggml's quantizer (as llama-quantize writes
// them), activations uniform in [-2, 2).
Problem make(const Kind& kind, int64_t m, int64_t n, int64_t k, uint32_t seed) {
  const ref::Format& f = *ref::find_format(kind.type);
  Problem p{kind, m, n, k, k / f.block * f.bytes + 4, k + 5, m + 2, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  p.w.resize(size_t(m * p.row_bytes));
  p.wf.resize(size_t(m * k));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < m; ++j) {
    for (float& v : row) v = g(rng);
    gguf::quantize_row(kind.type, row.data(), p.w.data() + j * p.row_bytes, k);
    ref::decode_row(f, p.w.data() + j * p.row_bytes, p.wf.data() + j * k, k);
  }
  p.x.resize(size_t(n * p.ldx));
  for (float& v : p.x) v = u(rng);
  return p;
}

std::vector<float> product(const Problem& p, int nth) {
  std::vector<float> xp(size_t(kernels::gemm_widen_packed_floats(p.n, p.k)), -7.0f);
  for (int i = 0; i < nth; ++i)
    kernels::gemm_widen_pack(p.x.data(), p.n, p.k, p.ldx, xp.data(), i, nth);
  std::vector<float> c(size_t(p.n * p.ldc), 12345.0f);
  const kernels::WeightRows w{p.kind.format, p.w.data(), p.row_bytes, p.m};
  for (int i = 0; i < nth; ++i)
    kernels::gemm_widen_run(w, xp.data(), p.n, p.k, c.data(), p.ldc, i, nth);
  return c;
}

// Each entry within (k + 2) units of f32 rounding of its terms' magnitudes of the double sum
// over the reference-decoded weights, and nothing written past column m.
void expect_matches_twin(const Problem& p, const std::vector<float>& c) {
  const double eps = std::numeric_limits<float>::epsilon() / 2;
  for (int64_t r = 0; r < p.n; ++r) {
    for (int64_t j = 0; j < p.m; ++j) {
      double s = 0, a = 0;
      for (int64_t t = 0; t < p.k; ++t) {
        const double v = double(p.x[size_t(r * p.ldx + t)]) * p.wf[size_t(j * p.k + t)];
        s += v;
        a += std::fabs(v);
      }
      ASSERT_LE(std::fabs(c[size_t(r * p.ldc + j)] - s), double(p.k + 2) * eps * a + 1e-30)
          << gguf::type_name(p.kind.type) << " m " << p.m << " n " << p.n << " k " << p.k
          << " at row " << r << " col " << j;
    }
    for (int64_t j = p.m; j < p.ldc; ++j)
      ASSERT_EQ(c[size_t(r * p.ldc + j)], 12345.0f) << "wrote past column m at row " << r;
  }
}

TEST(GemmWidenFormats, QuantizedProductsMatchTheDoubleTwinOnEveryTarget) {
  // Tails of the 12-row tile and the 32-row panel, several 256-column blocks and, for q8_0, a
  // last block of 32 columns short of 256.
  const int64_t shapes[][3] = {{1, 1, 256}, {13, 33, 512}, {37, 70, 768}, {25, 130, 256}};
  test::for_each_target([&] {
    uint32_t seed = 1;
    for (const Kind& kind : kKinds) {
      if (kind.format == WeightFormat::f16) continue;  // test_gemm_widen.cpp
      for (const auto& s : shapes) {
        const Problem p = make(kind, s[0], s[1], s[2], seed++);
        expect_matches_twin(p, product(p, 1));
      }
    }
    const Problem p = make(kKinds[1], 29, 45, 800, seed);  // q8_0: k = 3 x 256 + 32
    expect_matches_twin(p, product(p, 2));
  });
}

TEST(GemmWidenFormats, ARowsResultIsTheSameBitsWhateverTheRowsOrThreadsBesideIt) {
  test::for_each_target([&] {
    for (const Kind& kind : kKinds) {
      if (kind.format == WeightFormat::f16) continue;
      const Problem big = make(kind, 27, 600, 512, 5);
      const std::vector<float> all = product(big, 1);
      for (int64_t n : {1, 5, 16, 33, 100, 513}) {
        Problem p = big;
        p.n = n;
        p.x.resize(size_t(n * p.ldx));
        for (int nth : {1, 3}) {
          const std::vector<float> c = product(p, nth);
          EXPECT_EQ(std::memcmp(c.data(), all.data(), c.size() * sizeof(float)), 0)
              << gguf::type_name(kind.type) << ", " << n << " rows, " << nth << " threads";
        }
      }
    }
  });
}

TEST(GemmWidenFormats, ShapesTheFormatCannotHoldRaise) {
  std::vector<uint8_t> w(34 * 8 * 4);
  std::vector<float> xp(size_t(kernels::gemm_widen_packed_floats(2, 256))), c(64);
  const kernels::WeightRows q8{WeightFormat::q8_0, w.data(), 34 * 8, 4};
  EXPECT_THROW(kernels::gemm_widen_run(q8, xp.data(), 2, 250, c.data(), 4, 0, 1), Error);
  const kernels::WeightRows short_rows{WeightFormat::q8_0, w.data(), 34 * 7, 4};
  EXPECT_THROW(kernels::gemm_widen_run(short_rows, xp.data(), 2, 256, c.data(), 4, 0, 1), Error);
  const kernels::WeightRows q6{WeightFormat::q6_K, w.data(), 210, 4};
  EXPECT_THROW(kernels::gemm_widen_run(q6, xp.data(), 2, 224, c.data(), 4, 0, 1), Error);
  std::vector<float> d(256);
  EXPECT_THROW(kernels::gemm_widen_rows(q8, 256, 3, 2, 0, 256, d.data(), 256), Error);
}

}  // namespace
}  // namespace spattn
