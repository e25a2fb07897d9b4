// bench_products (spattn bench-products): one row per asked type with positive, finite rates,
// the widened product's only where it takes the type, the repacked layout's only where ggml
// repacks the type, the int8 peak exactly where the integer products run on vpdpbusd, and bad
// options as errors; the bf16 row beside ggml's exactly where bf16 is asked for. Not a timing
// check.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/gemm_bf16.hpp"
#include "kernels/gemm_int8.hpp"
#include "model/ggml_repack.hpp"
#include "spattn/error.hpp"
#include "spattn/product_bench.hpp"

namespace spattn {
namespace {

TEST(BenchProducts, RowsForTheAskedTypes) {
  ProductBenchOptions o;
  o.m = 48, o.k = 256, o.n = 40, o.repeat = 1, o.threads = 2;
  o.types = {"q8_0", "q4_K"};
  const ProductBench b = bench_products(o);
  ASSERT_EQ(b.results.size(), 2u);
  EXPECT_EQ(b.results[0].type, "q8_0");
  EXPECT_EQ(b.results[1].type, "q4_K");
  for (const ProductBenchResult& r : b.results) {
    EXPECT_TRUE(std::isfinite(r.int8_gops) && r.int8_gops > 0) << r.type;
    EXPECT_GE(r.quantize_ms, 0.0);
    EXPECT_GE(r.unpack_ms, 0.0);
  }
  // q8_0 has no interleaved layout the product reads; q4_K's row comes where ggml repacks it.
  EXPECT_EQ(b.results[0].repacked_gops, 0.0);
  const bool repacks =
      !model::ggml_repacked(gguf::GgmlType::q4_K, std::vector<uint8_t>(48 * 144).data(), 48, 256)
           .empty();
  EXPECT_EQ(b.results[1].repacked_gops > 0, repacks);
  // gemm_widen takes q8_0 on AVX-512 (and never q4_K, which it has no decoder for).
  EXPECT_EQ(b.results[1].widen_gflops, 0.0);
  EXPECT_EQ(b.vnni, kernels::gemm_int8_vnni());
  EXPECT_EQ(b.peak.int8_dot_gops > 0, b.vnni);
  EXPECT_FALSE(b.bf16.has_value());
}

TEST(BenchProducts, Bf16RowBesideGgmls) {
  ProductBenchOptions o;
  o.m = 48, o.k = 256, o.n = 40, o.repeat = 1, o.threads = 2;
  o.types = {"bf16"};
  const ProductBench b = bench_products(o);
  EXPECT_TRUE(b.results.empty());
  ASSERT_TRUE(b.bf16.has_value());
  EXPECT_TRUE(std::isfinite(b.bf16->gflops) && b.bf16->gflops > 0);
  EXPECT_TRUE(std::isfinite(b.bf16->ggml_gflops) && b.bf16->ggml_gflops > 0);
  EXPECT_GE(b.bf16->round_ms, 0.0);
  EXPECT_EQ(b.bf16_dot, kernels::gemm_bf16_dot());
}

TEST(BenchProducts, BadOptionsAreErrors) {
  ProductBenchOptions o;
  o.m = 16, o.k = 256, o.n = 8, o.repeat = 1;
  o.types = {"f16"};
  EXPECT_THROW(bench_products(o), Error);
  o.types = {"q8_0"};
  o.k = 100;
  EXPECT_THROW(bench_products(o), Error);
}

}  // namespace
}  // namespace spattn
