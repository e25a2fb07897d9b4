// Prefill's integer products (kernels/gemm_int8): the activations' quantization against a plain
// scalar twin bit for bit; the product against a double twin over the weights as ggml's
// reference decoders give them (tests/quant_reference.hpp) and the activations as quantized;
// the vector path (AVX-512 VNNI, where the CPU has it) against the portable one bit for bit;
// the same bits for any row count and thread split; and over ggml's own repack of the rows
// (its CPU_REPACK buffer, as the model loader makes it) the bits of the rows unrepacked.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "assets.hpp"
#include "kernels/gemm_int8.hpp"
#include "model/ggml_repack.hpp"
#include "quant_reference.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"

namespace spattn {
namespace {

namespace ref = test::quant_ref;
using kernels::Int8Format;

// The quantization's twin: per block of 32, d = max|x| / 127, q = round(x / d).
struct Quantized {
  std::vector<int> q;       // [n][k]
  std::vector<float> d, s;  // [n][k / 32]
};
Quantized quantize_twin(const std::vector<float>& x, int64_t n, int64_t k, int64_t ldx) {
  Quantized o{std::vector<int>(size_t(n * k)), std::vector<float>(size_t(n * k / 32)),
              std::vector<float>(size_t(n * k / 32))};
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < k / 32; ++b) {
      float amax = 0;
      for (int l = 0; l < 32; ++l)
        amax = std::max(amax, std::fabs(x[size_t(r * ldx + b * 32 + l)]));
      const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
      int sum = 0;
      for (int l = 0; l < 32; ++l) {
        const int q = int(std::round(x[size_t(r * ldx + b * 32 + l)] * id));
        o.q[size_t(r * k + b * 32 + l)] = q;
        sum += q;
      }
      o.d[size_t(r * (k / 32) + b)] = d;
      o.s[size_t(r * (k / 32) + b)] = d * float(sum);
    }
  return o;
}

std::vector<uint8_t> quantize(const std::vector<float>& x, int64_t n, int64_t k, int64_t ldx,
                              int nth) {
  std::vector<uint8_t> xq(size_t(kernels::gemm_int8_act_bytes(n, k)), 0xAB);
  for (int i = 0; i < nth; ++i) kernels::gemm_int8_quantize(x.data(), n, k, ldx, xq.data(), i, nth);
  return xq;
}

TEST(GemmInt8, QuantizationIsTheTwinsBits) {
  const int64_t n = 7, k = 96, ldx = k + 3;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> x(size_t(n * ldx));
  for (float& v : x) v = u(rng);
  for (int l = 0; l < 32; ++l) x[size_t(2 * ldx + 32 + l)] = 0.0f;  // an all-zero block
  x[size_t(4 * ldx + 5)] = 1e-30f;                                  // a tiny one
  // Ties: with max |x| = 127 the scale is 1, so x.5 rounds away from zero (3, -3, 1, -1).
  for (int l = 0; l < 32; ++l) x[size_t(5 * ldx + 64 + l)] = float(l % 5) - 2.0f;
  x[size_t(5 * ldx + 64)] = 127.0f;
  x[size_t(5 * ldx + 65)] = 2.5f;
  x[size_t(5 * ldx + 66)] = -2.5f;
  x[size_t(5 * ldx + 67)] = 0.5f;
  x[size_t(5 * ldx + 68)] = -0.5f;
  const Quantized t = quantize_twin(x, n, k, ldx);
  const std::vector<uint8_t> xq = quantize(x, n, k, ldx, 3);
  const int64_t rb = kernels::gemm_int8_act_bytes(1, k);
  EXPECT_EQ(int(xq[size_t(5 * rb + 65)]) - 128, 3);
  EXPECT_EQ(int(xq[size_t(5 * rb + 66)]) - 128, -3);
  EXPECT_EQ(int(xq[size_t(5 * rb + 67)]) - 128, 1);
  EXPECT_EQ(int(xq[size_t(5 * rb + 68)]) - 128, -1);
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = xq.data() + r * rb;
    for (int64_t t0 = 0; t0 < k; ++t0)
      ASSERT_EQ(int(row[t0]) - 128, t.q[size_t(r * k + t0)]) << "row " << r << " column " << t0;
    for (int64_t b = 0; b < k / 32; ++b) {
      float d, s;
      std::memcpy(&d, row + k + 4 * b, 4);
      std::memcpy(&s, row + k + 4 * (k / 32) + 4 * b, 4);
      EXPECT_EQ(d, t.d[size_t(r * (k / 32) + b)]);
      EXPECT_EQ(s, t.s[size_t(r * (k / 32) + b)]);
    }
  }
}

struct Problem {
  Int8Format format;
  int64_t m, n, k, row_bytes, ldx, ldc;
  std::vector<uint8_t> w;
  std::vector<float> x;
  std::vector<float> wf;  // the weights as the reference decodes them, [m][k]
};

// Weights quantized from N(0, 0.05^2) values by ggml's quantizer (as llama-quantize writes
// them), activations uniform in [-2, 2).
Problem make(Int8Format format, int64_t m, int64_t n, int64_t k, uint32_t seed) {
  const gguf::GgmlType type = kernels::ggml_type_of(format);
  const ref::Format& f = *ref::find_format(type);
  Problem p{format, m, n, k, k / f.block * f.bytes + 4, k + 5, m + 3, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  p.w.resize(size_t(m * p.row_bytes));
  p.wf.resize(size_t(m * k));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < m; ++j) {
    for (float& v : row) v = g(rng);
    gguf::quantize_row(type, row.data(), p.w.data() + j * p.row_bytes, k);
    ref::decode_row(f, p.w.data() + j * p.row_bytes, p.wf.data() + j * k, k);
  }
  p.x.resize(size_t(n * p.ldx));
  for (float& v : p.x) v = u(rng);
  return p;
}

kernels::Int8Weights weights(const Problem& p) { return {p.format, p.w.data(), p.row_bytes, p.m}; }

std::vector<float> product(const Problem& p, int nth) {
  const std::vector<uint8_t> xq = quantize(p.x, p.n, p.k, p.ldx, nth);
  std::vector<float> c(size_t(p.n * p.ldc), 12345.0f);
  for (int i = 0; i < nth; ++i)
    kernels::gemm_int8_run(weights(p), xq.data(), p.n, p.k, c.data(), p.ldc, i, nth);
  return c;
}

// Each output against the double sum of the reference-decoded weights times the quantized
// activations (d q): the kernel's integer sums are exact, so what differs is f32 rounding of
// the scales' products and the chain over blocks, bounded here by (blocks + 4) units of f32
// rounding of each block's magnitude (3 max|w| sum|x|: a q4_K / q5_K block's s q and its min
// each stay within that). And against the unquantized activations, within each block's
// rounding of them (d / 2 a value). Nothing is written past column m.
void expect_matches_twin(const Problem& p, const std::vector<float>& c) {
  const double eps = std::numeric_limits<float>::epsilon() / 2;
  const Quantized t = quantize_twin(p.x, p.n, p.k, p.ldx);
  const int64_t nb = p.k / 32;
  for (int64_t r = 0; r < p.n; ++r) {
    for (int64_t j = 0; j < p.m; ++j) {
      double s = 0, exact = 0, mag = 0, qerr = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const double d = t.d[size_t(r * nb + b)];
        double wmax = 0, xsum = 0;
        for (int l = 0; l < 32; ++l) {
          const int64_t col = b * 32 + l;
          const double w = p.wf[size_t(j * p.k + col)];
          s += w * d * t.q[size_t(r * p.k + col)];
          exact += w * p.x[size_t(r * p.ldx + col)];
          wmax = std::max(wmax, std::fabs(w));
          xsum += std::fabs(d * t.q[size_t(r * p.k + col)]);
          qerr += std::fabs(w) * d / 2;
        }
        mag += 3 * wmax * xsum;
      }
      const double got = c[size_t(r * p.ldc + j)];
      const double tol = double(nb + 4) * eps * mag + 1e-30;
      ASSERT_NEAR(got, s, tol) << gguf::type_name(kernels::ggml_type_of(p.format)) << " row " << r
                               << " column " << j;
      ASSERT_NEAR(got, exact, qerr + tol) << "against the unquantized activations";
    }
    for (int64_t j = p.m; j < p.ldc; ++j) ASSERT_EQ(c[size_t(r * p.ldc + j)], 12345.0f);
  }
}

TEST(GemmInt8, EveryFormatMatchesTheReferenceTwin) {
  for (Int8Format f : kernels::kInt8Formats) {
    const Problem p = make(f, 37, 21, 512, 11 + uint32_t(f));  // m, n not whole tiles
    expect_matches_twin(p, product(p, 1));
  }
}

TEST(GemmInt8, VectorPathIsThePortablePathsBits) {
  if (!kernels::gemm_int8_vnni()) SPATTN_SKIP_NOT_APPLICABLE("no AVX-512 VNNI here");
  // 45 rows: a pair of tiles (the two-tile loops) and a tile of 13 alone; 29 rows: a pair whose
  // second tile has 13 rows. 19 and 23 activation rows: the loops' groups of 6 and 8 and their
  // tails. 8704 columns: two chunks of blocks (the second adds to what the first stored).
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape& s : {Shape{45, 19, 1024}, Shape{29, 23, 8704}})
    for (Int8Format f : kernels::kInt8Formats) {
      const Problem p = make(f, s.m, s.n, s.k, 23 + uint32_t(f));
      const std::vector<float> v = product(p, 1);
      const std::vector<uint8_t> xq = quantize(p.x, p.n, p.k, p.ldx, 1);
      std::vector<float> c(size_t(p.n * p.ldc), 12345.0f);
      kernels::gemm_int8_run_portable(weights(p), xq.data(), p.n, p.k, c.data(), p.ldc);
      for (size_t i = 0; i < c.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(v[i]), std::bit_cast<uint32_t>(c[i]))
            << gguf::type_name(kernels::ggml_type_of(f)) << " " << s.m << " x " << s.k
            << " element " << i;
    }
}

// Each set of vector loops this CPU has (AVX-512 VNNI, AVX-VNNI, AVX2), forced, against the
// portable loops bit for bit; and q8_0 weights of -128 and 127 against activations of +-127,
// where AVX2's vpmaddubsw pairs come nearest int16's saturation (2 x 128 x 127).
TEST(GemmInt8, EveryVectorLoopsAreThePortablePathsBits) {
  int ran = 0;
  for (kernels::Int8Loops l :
       {kernels::Int8Loops::avx512vnni, kernels::Int8Loops::avxvnni, kernels::Int8Loops::avx2}) {
    for (Int8Format f : kernels::kInt8Formats) {
      Problem p = make(f, 29, 11, 512, 71 + uint32_t(f));
      if (f == Int8Format::q8_0) {  // the extremes in the first weight rows and activation rows
        for (int64_t j = 0; j < 3; ++j)
          for (int64_t b = 0; b < p.k / 32; ++b)
            for (int l2 = 0; l2 < 32; ++l2)
              p.w[size_t(j * p.row_bytes + b * 34 + 2 + l2)] =
                  uint8_t(j == 0   ? 0x80
                          : j == 1 ? 0x7f
                                   : (l2 % 2 ? 0x80 : 0x7f));
        for (int64_t r = 0; r < 2; ++r)
          for (int64_t t = 0; t < p.k; ++t)
            p.x[size_t(r * p.ldx + t)] = r == 0 ? 1.0f : (t % 3 ? -1.0f : 1.0f);
      }
      const std::vector<uint8_t> xq = quantize(p.x, p.n, p.k, p.ldx, 1);
      std::vector<float> v(size_t(p.n * p.ldc), 12345.0f), c = v;
      if (!kernels::gemm_int8_run_on(l, weights(p), xq.data(), p.n, p.k, v.data(), p.ldc)) break;
      kernels::gemm_int8_run_portable(weights(p), xq.data(), p.n, p.k, c.data(), p.ldc);
      ++ran;
      for (size_t i = 0; i < c.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(v[i]), std::bit_cast<uint32_t>(c[i]))
            << "loops " << int(l) << ", " << gguf::type_name(kernels::ggml_type_of(f))
            << " element " << i;
    }
  }
  if (ran == 0) SPATTN_SKIP_NOT_APPLICABLE("no vector loops for the integer products here");
}

TEST(GemmInt8, SameBitsForAnyRowCountAndThreadSplit) {
  for (Int8Format f : {Int8Format::q8_0, Int8Format::q4_K, Int8Format::q6_K}) {
    Problem p = make(f, 50, 29, 768, 41 + uint32_t(f));
    const std::vector<float> all = product(p, 3);
    EXPECT_EQ(all, product(p, 1));
    // The first 3 rows alone (a call's tail: fewer rows than the loops' group of 8).
    p.n = 3;
    const std::vector<float> few = product(p, 2);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t j = 0; j < p.m; ++j)
        ASSERT_EQ(few[size_t(r * p.ldc + j)], all[size_t(r * p.ldc + j)]);
  }
}

// Over ggml's repacked copy (q4_0, q4_K, iq4_nl, mxfp4 on x86: 8 rows interleaved) the product gives
// the bits it gives over the rows in ggml's own layout, on the vector and the portable path;
// the copy is recognised as the layout, and a copy not in it (a scale byte changed) is not.
TEST(GemmInt8, GgmlsRepackedRowsGiveTheRowsBits) {
  int checked = 0;
  for (Int8Format f : {Int8Format::q4_0, Int8Format::q4_K, Int8Format::iq4_nl, Int8Format::mxfp4}) {
    // 7 groups of 8 rows: 3 whole tiles of 16 (the vector unpack where the CPU has one) and
    // one of 8 rows (the scalar unpack).
    Problem p = make(f, 56, 21, 1024, 61 + uint32_t(f));
    const int64_t rb = p.k / gguf::block_size(kernels::ggml_type_of(f)) *
                       gguf::block_bytes(kernels::ggml_type_of(f));
    std::vector<uint8_t> plain(size_t(p.m * rb));
    for (int64_t j = 0; j < p.m; ++j)
      std::memcpy(plain.data() + j * rb, p.w.data() + j * p.row_bytes, size_t(rb));
    std::vector<uint8_t> packed =
        model::ggml_repacked(kernels::ggml_type_of(f), plain.data(), p.m, p.k);
    if (packed.empty()) continue;
    ++checked;
    const char* name = gguf::type_name(kernels::ggml_type_of(f));
    ASSERT_NE(packed, plain) << name;
    EXPECT_TRUE(
        kernels::gemm_int8_interleaved_matches(f, plain.data(), packed.data(), rb, p.m, p.k))
        << name;
    const std::vector<uint8_t> xq = quantize(p.x, p.n, p.k, p.ldx, 1);
    const kernels::Int8Weights rows{f, plain.data(), rb, p.m, kernels::Int8Layout::rows};
    const kernels::Int8Weights inter{f, packed.data(), rb, p.m, kernels::Int8Layout::interleaved8};
    std::vector<float> want(size_t(p.n * p.ldc), 12345.0f), got = want, port = want;
    kernels::gemm_int8_run(rows, xq.data(), p.n, p.k, want.data(), p.ldc, 0, 1);
    for (int i = 0; i < 2; ++i)
      kernels::gemm_int8_run(inter, xq.data(), p.n, p.k, got.data(), p.ldc, i, 2);
    kernels::gemm_int8_run_portable(inter, xq.data(), p.n, p.k, port.data(), p.ldc);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(want[i]), std::bit_cast<uint32_t>(got[i]))
          << name << " element " << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(want[i]), std::bit_cast<uint32_t>(port[i]))
          << name << " element " << i << ", portable";
    }
    // The plain rows read as if interleaved, and a copy with one scale changed in its last
    // group, are not the layout.
    EXPECT_FALSE(
        kernels::gemm_int8_interleaved_matches(f, plain.data(), plain.data(), rb, p.m, p.k))
        << name;
    packed[size_t(6 * 8 * rb)] ^= 0x11;  // the last group's first row's scale
    EXPECT_FALSE(
        kernels::gemm_int8_interleaved_matches(f, plain.data(), packed.data(), rb, p.m, p.k))
        << name;
  }
  if (checked == 0) SPATTN_SKIP_NOT_APPLICABLE("ggml repacks none of these types on this CPU");
}

TEST(GemmInt8, InterleavedLayoutShapesAreErrors) {
  const Problem p = make(Int8Format::q4_K, 12, 2, 256, 1);
  const std::vector<uint8_t> xq = quantize(p.x, p.n, p.k, p.ldx, 1);
  std::vector<float> c(size_t(p.n * p.ldc));
  // 12 rows (not whole groups of 8), padded rows, and a format ggml does not interleave so.
  kernels::Int8Weights w{p.format, p.w.data(), 144, 12, kernels::Int8Layout::interleaved8};
  EXPECT_THROW(kernels::gemm_int8_run(w, xq.data(), p.n, 256, c.data(), p.ldc, 0, 1), Error);
  w.m = 8;
  w.row_bytes = p.row_bytes;
  EXPECT_THROW(kernels::gemm_int8_run(w, xq.data(), p.n, 256, c.data(), p.ldc, 0, 1), Error);
  w.row_bytes = 210;
  w.format = Int8Format::q6_K;
  EXPECT_THROW(kernels::gemm_int8_run(w, xq.data(), p.n, 256, c.data(), p.ldc, 0, 1), Error);
  EXPECT_FALSE(kernels::gemm_int8_reads(Int8Format::q8_0, kernels::Int8Layout::interleaved8));
  EXPECT_TRUE(kernels::gemm_int8_reads(Int8Format::q8_0, kernels::Int8Layout::rows));
}

TEST(GemmInt8, NonFiniteActivationsGiveNaNRows) {
  Problem p = make(Int8Format::q8_0, 20, 4, 64, 3);
  p.x[size_t(1 * p.ldx + 40)] = std::numeric_limits<float>::infinity();
  p.x[size_t(2 * p.ldx + 3)] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> c = product(p, 1);
  for (int64_t j = 0; j < p.m; ++j) {
    EXPECT_TRUE(std::isfinite(c[size_t(j)]));
    EXPECT_TRUE(std::isnan(c[size_t(1 * p.ldc + j)]));
    EXPECT_TRUE(std::isnan(c[size_t(2 * p.ldc + j)]));
    EXPECT_TRUE(std::isfinite(c[size_t(3 * p.ldc + j)]));
  }
}

TEST(GemmInt8, BadShapesAreErrors) {
  const Problem p = make(Int8Format::q4_K, 4, 2, 256, 1);
  const std::vector<uint8_t> xq = quantize(p.x, p.n, p.k, p.ldx, 1);
  std::vector<float> c(size_t(p.n * p.ldc));
  kernels::Int8Weights w = weights(p);
  EXPECT_THROW(kernels::gemm_int8_run(w, xq.data(), p.n, 128, c.data(), p.ldc, 0, 1), Error);
  w.row_bytes = 100;  // less than a super-block
  EXPECT_THROW(kernels::gemm_int8_run(w, xq.data(), p.n, 256, c.data(), p.ldc, 0, 1), Error);
  EXPECT_FALSE(kernels::int8_format(gguf::GgmlType::f16).has_value());
  EXPECT_EQ(kernels::int8_format(gguf::GgmlType::q4_K), Int8Format::q4_K);
}

}  // namespace
}  // namespace spattn
