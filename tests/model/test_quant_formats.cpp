// Every weight format the model runner reads through `gguf::dequantize_row` (ggml's decoders)
// against the plain scalar decoders of tests/quant_reference.hpp, bit for bit: random blocks
// (seeded), edge blocks (zero, extreme, infinite and NaN scales), all 65536 f16 and bf16
// patterns, a quantize/decode round trip within each format's resolution, and the tensors of
// real quantized files when $SPATTN_QUANT_MODELS (no default) holds some.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "assets.hpp"
#include "quant_reference.hpp"
#include "spattn/gguf.hpp"

namespace {

namespace fs = std::filesystem;
namespace ref = spattn::test::quant_ref;
using spattn::gguf::GgmlType;
using spattn::gguf::type_name;

std::string hex(float v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", std::bit_cast<uint32_t>(v));
  return buf;
}

// Decodes `n` values at `src` with ggml (through spattn's dequantize_row) and with the
// reference, and reports every element whose bits differ (NaN for NaN in the block formats:
// ref::same_value) (the first few in full: type,
// block, element, both values and their bits). Returns the number of differing elements.
int64_t compare(const ref::Format& f, const uint8_t* src, int64_t n, const std::string& what) {
  std::vector<float> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
  spattn::gguf::dequantize_row(f.type, src, got.data(), n);
  ref::decode_row(f, src, want.data(), n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (ref::same_value(f, got[size_t(i)], want[size_t(i)])) continue;
    if (++bad <= 5)
      ADD_FAILURE() << type_name(f.type) << " " << what << ": block " << i / f.block << ", element "
                    << i % f.block << ": dequantize_row " << got[size_t(i)] << " ("
                    << hex(got[size_t(i)]) << "), reference " << want[size_t(i)] << " ("
                    << hex(want[size_t(i)]) << ")";
  }
  if (bad > 5)
    ADD_FAILURE() << type_name(f.type) << " " << what << ": " << bad << " of " << n
                  << " elements differ in all";
  return bad;
}

void put_f16(uint8_t* p, uint16_t h) {
  p[0] = uint8_t(h);
  p[1] = uint8_t(h >> 8);
}

// A finite f16 of moderate size (|x| in [2^-8, 2^2), either sign): the scales of real weights.
uint16_t moderate_f16(std::mt19937_64& rng) {
  const uint16_t sign = uint16_t(rng() & 1) << 15;
  const uint16_t exp = uint16_t(15 - 8 + rng() % 10) << 10;
  return uint16_t(sign | exp | (rng() & 0x3ff));
}

TEST(QuantFormats, EveryFormatHasItsGgmlBlockSize) {
  ASSERT_EQ(ref::formats().size(), 15u);
  for (const ref::Format& f : ref::formats()) {
    EXPECT_EQ(spattn::gguf::block_size(f.type), f.block) << type_name(f.type);
    EXPECT_EQ(spattn::gguf::block_bytes(f.type), f.bytes) << type_name(f.type);
  }
}

// Arbitrary bytes: every quant pattern and every scale pattern the bytes happen to make
// (NaN, inf, subnormal scales included), and then the same blocks with moderate scales.
TEST(QuantFormats, RandomBlocksMatchTheReferenceBitForBit) {
  std::mt19937_64 rng(20);
  for (const ref::Format& f : ref::formats()) {
    const int64_t blocks = 256 / f.block * 64;  // 64 super-blocks' worth of values
    std::vector<uint8_t> b(static_cast<size_t>(blocks * f.bytes));
    for (uint8_t& x : b) x = uint8_t(rng());
    compare(f, b.data(), blocks * f.block, "random bytes");
    for (int64_t i = 0; i < blocks; ++i)
      for (int off : f.f16_fields) put_f16(&b[size_t(i * f.bytes + off)], moderate_f16(rng));
    compare(f, b.data(), blocks * f.block, "random quants, moderate scales");
  }
}

// Zero blocks, quants all 0 or all 1 bits, and each scale field set to the f16 edge values
// (signed zeros, the smallest subnormal and normal, the largest finite, infinities, quiet and
// signalling NaNs) with the other scale fields at 1 or at the same edge.
TEST(QuantFormats, EdgeBlocksMatchTheReferenceBitForBit) {
  const uint16_t edges[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x0400, 0x3c00, 0xbc00, 0x7bff,
                            0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0x7dff};
  std::mt19937_64 rng(21);
  for (const ref::Format& f : ref::formats()) {
    if (f.f16_fields.empty()) continue;  // bf16: every pattern is checked below; mxfp4: above
    std::vector<uint8_t> zero(static_cast<size_t>(f.bytes), 0);
    compare(f, zero.data(), f.block, "all-zero block");
    if (f.f16_fields.size() == 2) {  // two different NaNs in d and m / dmin (found by fuzz_quant)
      std::vector<uint8_t> b(static_cast<size_t>(f.bytes));
      for (uint8_t& x : b) x = uint8_t(rng());
      put_f16(&b[size_t(f.f16_fields[0])], 0x7e01);
      put_f16(&b[size_t(f.f16_fields[1])], 0xfdde);
      compare(f, b.data(), f.block, "two different NaN scales");
    }
    for (int fill : {0x00, 0xff, -1}) {
      for (uint16_t edge : edges) {
        for (size_t field = 0; field < f.f16_fields.size(); ++field) {
          for (bool all_edges : {false, true}) {
            std::vector<uint8_t> b(static_cast<size_t>(f.bytes));
            for (uint8_t& x : b) x = fill < 0 ? uint8_t(rng()) : uint8_t(fill);
            for (size_t o = 0; o < f.f16_fields.size(); ++o)
              put_f16(&b[size_t(f.f16_fields[o])], o == field || all_edges ? edge : 0x3c00);
            char what[96];
            std::snprintf(what, sizeof what, "quants %s, scale field %zu = 0x%04x%s",
                          fill == 0      ? "0x00"
                          : fill == 0xff ? "0xff"
                                         : "random",
                          field, unsigned(edge), all_edges ? " (all fields)" : "");
            compare(f, b.data(), f.block, what);
          }
        }
      }
    }
  }
}

TEST(QuantFormats, All65536F16AndBf16PatternsMatch) {
  std::vector<uint8_t> b(65536 * 2);
  for (uint32_t h = 0; h < 65536; ++h) put_f16(&b[2 * h], uint16_t(h));
  EXPECT_EQ(compare(*ref::find_format(GgmlType::f16), b.data(), 65536, "all patterns"), 0);
  EXPECT_EQ(compare(*ref::find_format(GgmlType::bf16), b.data(), 65536, "all patterns"), 0);
  // The reference itself, on values whose conversion is known without any decoder.
  EXPECT_EQ(ref::f16(0x3c00), 1.0f);
  EXPECT_EQ(ref::f16(0xc000), -2.0f);
  EXPECT_EQ(ref::f16(0x7bff), 65504.0f);
  EXPECT_EQ(ref::f16(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(ref::f16(0x7c00), INFINITY);
  EXPECT_EQ(ref::bf16(0x3f80), 1.0f);
  EXPECT_EQ(ref::bf16(0xff80), -INFINITY);
}

// The comparison above can fail: one flipped bit in one decoded value is reported with the
// type, block, element and both values' bits.
TEST(QuantFormats, ComparisonReportsAOneBitDifference) {
  const ref::Format& f = *ref::find_format(GgmlType::q4_K);
  std::vector<uint8_t> b(static_cast<size_t>(f.bytes * 2));
  std::mt19937_64 rng(22);
  for (uint8_t& x : b) x = uint8_t(rng());
  for (int off : f.f16_fields) {
    put_f16(&b[size_t(off)], 0x3c00);
    put_f16(&b[size_t(f.bytes + off)], 0x3c00);
  }
  std::vector<float> got(512), want(512);
  spattn::gguf::dequantize_row(f.type, b.data(), got.data(), 512);
  ref::decode_row(f, b.data(), want.data(), 512);
  ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
  // Flip the lowest mantissa bit of element 300 (block 1, element 44) of the reference's copy.
  want[300] = std::bit_cast<float>(std::bit_cast<uint32_t>(want[300]) ^ 1u);
  int64_t bad = 0;
  std::string message;
  for (int64_t i = 0; i < 512; ++i)
    if (std::bit_cast<uint32_t>(got[size_t(i)]) != std::bit_cast<uint32_t>(want[size_t(i)])) {
      ++bad;
      message = "block " + std::to_string(i / f.block) + ", element " +
                std::to_string(i % f.block) + ": " + hex(got[size_t(i)]) + " vs " +
                hex(want[size_t(i)]);
    }
  EXPECT_EQ(bad, 1);
  EXPECT_EQ(message, "block 1, element 44: " + hex(got[300]) + " vs " +
                         hex(std::bit_cast<float>(std::bit_cast<uint32_t>(got[300]) ^ 1u)));
}

// Quantize N(0, 1) values with ggml's quantizer, decode with both decoders (same bits), and
// check every value is within one quantization step of its block: the block's values span at
// most [-amax, amax], which 2^bits levels cut into 2^bits - 1 steps, so no element of a
// format with b-bit quants can be further than 2 amax / (2^b - 1) from its value (the
// rounding of the f16 scales and the 6- or 4-bit sub-block scales of the K-quants are well
// inside that). f16 and bf16 round to nearest: half an ulp, 2^-11 and 2^-8 relative. mxfp4's
// scale is the power of two 2^(floor(log2 amax) - 3) (ggml's quantizer), its largest value 12
// of those: a value near amax (up to 16 of them) clamps to 12, less than amax / 2 away.
TEST(QuantFormats, RoundTripIsWithinEachFormatsResolution) {
  const std::map<GgmlType, int> bits = {
      {GgmlType::q8_0, 8}, {GgmlType::q4_0, 4}, {GgmlType::q4_1, 4},   {GgmlType::q5_0, 5},
      {GgmlType::q5_1, 5}, {GgmlType::q2_K, 2}, {GgmlType::q3_K, 3},   {GgmlType::q4_K, 4},
      {GgmlType::q5_K, 5}, {GgmlType::q6_K, 6}, {GgmlType::iq4_nl, 4}, {GgmlType::iq4_xs, 4}};
  std::mt19937_64 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 256 * 32;
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  for (const ref::Format& f : ref::formats()) {
    std::vector<uint8_t> q(static_cast<size_t>(n / f.block * f.bytes));
    spattn::gguf::quantize_row(f.type, x.data(), q.data(), n);
    compare(f, q.data(), n, "round trip");
    ref::decode_row(f, q.data(), y.data(), n);
    double worst = 0;  // the largest error as a fraction of its bound
    for (int64_t i = 0; i < n; ++i) {
      double bound;
      if (f.type == GgmlType::f16 || f.type == GgmlType::bf16) {
        bound = std::abs(x[size_t(i)]) * (f.type == GgmlType::f16 ? 0x1p-11 : 0x1p-8);
        bound = std::max(bound, 0x1p-25);  // f16 subnormals: half of the smallest step
      } else {
        const int64_t b0 = i / f.block * f.block;
        float amax = 0;
        for (int64_t j = b0; j < b0 + f.block; ++j) amax = std::max(amax, std::abs(x[size_t(j)]));
        bound = f.type == GgmlType::mxfp4 ? amax / 2.0 : 2.0 * amax / ((1 << bits.at(f.type)) - 1);
      }
      const double err = std::abs(double(x[size_t(i)]) - double(y[size_t(i)]));
      worst = std::max(worst, err / bound);
      if (err > bound) {
        ADD_FAILURE() << type_name(f.type) << ": value " << i << " = " << x[size_t(i)]
                      << " decodes to " << y[size_t(i)] << ", error " << err << " > bound "
                      << bound;
        break;
      }
    }
    std::printf("  %-7s round trip: largest error %.3f of its bound\n", type_name(f.type), worst);
  }
}

// ---- real quantized files ----

fs::path quant_models_dir() {
  if (const char* env = std::getenv("SPATTN_QUANT_MODELS"); env && *env) return env;
  // No default: a folder of quantized files is the developer's own.
  return {};
}

// First, middle and last row of every tensor of every GGUF file in the folder, in every type
// with a reference decoder, decoded by both.
TEST(QuantFormats, RealQuantizedFilesMatchTheReference) {
  const fs::path dir = quant_models_dir();
  std::error_code ec;
  // Opt-in: a folder of real quantized files is the developer's own, so unset is no missing
  // asset; a folder named but absent or empty is.
  if (dir.empty()) SPATTN_SKIP_NOT_APPLICABLE("SPATTN_QUANT_MODELS is not set");
  if (!fs::is_directory(dir, ec)) SPATTN_MISSING_ASSET("SPATTN_QUANT_MODELS=" << dir);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".gguf") files.push_back(e.path());
  if (files.empty()) SPATTN_MISSING_ASSET("a .gguf file in SPATTN_QUANT_MODELS=" << dir);
  std::sort(files.begin(), files.end());
  std::map<std::string, int64_t> rows_per_type;
  for (const fs::path& p : files) {
    const spattn::gguf::File file = spattn::gguf::File::open(p.string());
    for (const auto& t : file.tensors()) {
      const ref::Format* f = ref::find_format(t.type);
      if (!f || t.nelements() == 0) continue;
      const int64_t rows = t.nrows(), row_bytes = int64_t(spattn::gguf::row_bytes(t.type, t.ne[0]));
      for (int64_t r : {int64_t(0), rows / 2, rows - 1}) {
        const std::string what = p.filename().string() + " " + t.name + " row " + std::to_string(r);
        if (compare(*f, t.data + r * row_bytes, t.ne[0], what) != 0) break;
        ++rows_per_type[type_name(t.type)];
      }
    }
  }
  if (rows_per_type.empty())
    SPATTN_MISSING_ASSET("a tensor of a checked type in SPATTN_QUANT_MODELS=" << dir);
  for (const auto& [type, rows] : rows_per_type)
    std::printf("  %-7s %lld rows checked\n", type.c_str(), static_cast<long long>(rows));
}

}  // namespace
