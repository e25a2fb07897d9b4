// Decode's q8_0 rows several at a time (kernels/q8_0_dot_rows): the vector loops against the
// plain twin bit for bit, and both against ggml's own one-row product (ggml_vec_dot_q8_0_q8_0)
// where this build's ggml runs the AVX2 path the twin follows; for every row count around the
// four rows taken at once, rows with a gap between them, and weights with every byte value
// (-128 included: ggml's quantizer never writes it, a file may).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/q8_0_dot_rows.hpp"

namespace spattn {
namespace {

using kernels::kQ8_0BlockBytes;

// ggml's AVX2 path is the one its CPU backend was built for (compile-time features).
bool ggml_runs_avx2_path() {
  return ggml_cpu_has_avx2() && ggml_cpu_has_fma() && ggml_cpu_has_f16c();
}

// `rows` rows of k / 32 blocks, row_bytes apart: scales spread over f16's range (one huge, one
// tiny), bytes uniform over -128..127.
std::vector<uint8_t> random_rows(int64_t rows, int64_t k, size_t row_bytes, std::mt19937& rng) {
  std::vector<uint8_t> w(size_t(rows) * row_bytes, 0xAB);  // the gaps hold junk
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-3.0f, 3.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < k / 32; ++b) {
      uint8_t* blk = w.data() + size_t(r) * row_bytes + size_t(b) * kQ8_0BlockBytes;
      float d = std::exp2(scale(rng));
      if (r == 0 && b == 0) d = 60000.0f;
      if (r == 1 && b == 0) d = 1e-6f;
      const ggml_fp16_t h = ggml_fp32_to_fp16(byte(rng) & 1 ? d : -d);
      std::memcpy(blk, &h, sizeof h);
      for (int i = 0; i < 32; ++i) blk[2 + i] = uint8_t(byte(rng));
    }
  return w;
}

// One activation row as ggml's decode converts it (its q8_0 quantizer, from f32).
std::vector<uint8_t> activation(int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> xf(static_cast<size_t>(k));
  for (float& v : xf) v = nd(rng);
  std::vector<uint8_t> xq(size_t(k / 32) * kQ8_0BlockBytes);
  ggml_get_type_traits_cpu(GGML_TYPE_Q8_0)->from_float(xf.data(), xq.data(), k);
  return xq;
}

TEST(Q8_0DotRows, VectorLoopsTwinAndGgmlAgreeBitForBit) {
  ggml_cpu_init();  // ggml's f16 tables, which its quantizer and product read
  std::mt19937 rng(11);
  const ggml_type_traits_cpu* tr = ggml_get_type_traits_cpu(GGML_TYPE_Q8_0);
  for (int64_t k : {int64_t(32), int64_t(64), int64_t(544), int64_t(7168)})
    for (size_t gap : {size_t(0), size_t(6)})
      for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13}) {
        const size_t row_bytes = size_t(k / 32) * kQ8_0BlockBytes + gap;
        const std::vector<uint8_t> w = random_rows(rows, k, row_bytes, rng);
        const std::vector<uint8_t> x = activation(k, rng);
        std::vector<float> got(static_cast<size_t>(rows)), twin(static_cast<size_t>(rows));
        kernels::q8_0_dot_rows(w.data(), row_bytes, rows, x.data(), k, got.data());
        kernels::q8_0_dot_rows_reference(w.data(), row_bytes, rows, x.data(), k, twin.data());
        for (int64_t r = 0; r < rows; ++r) {
          const std::string at = "k " + std::to_string(k) + " gap " + std::to_string(gap) +
                                 " rows " + std::to_string(rows) + " row " + std::to_string(r);
          ASSERT_EQ(std::bit_cast<uint32_t>(got[size_t(r)]),
                    std::bit_cast<uint32_t>(twin[size_t(r)]))
              << at << ": " << got[size_t(r)] << " vs the twin's " << twin[size_t(r)];
          if (!ggml_runs_avx2_path()) continue;
          float want = 0.0f;
          tr->vec_dot(int(k), &want, 0, w.data() + size_t(r) * row_bytes, 0, x.data(), 0, 1);
          ASSERT_EQ(std::bit_cast<uint32_t>(got[size_t(r)]), std::bit_cast<uint32_t>(want))
              << at << ": " << got[size_t(r)] << " vs ggml's " << want;
        }
      }
}

#if defined(__x86_64__)
TEST(Q8_0DotRows, RunsWhereGgmlTakesItsAvx2Path) {
  // The vector loops are chosen wherever they give ggml's bits and the CPU has AVX-512 VNNI; a
  // build that silently lost them would still pass the test above on the twin alone.
  __builtin_cpu_init();
  const bool vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                    __builtin_cpu_supports("avx512vnni");
  EXPECT_EQ(kernels::q8_0_dot_rows_ggml_bits(), ggml_runs_avx2_path() && vnni);
}
#endif

}  // namespace
}  // namespace spattn
