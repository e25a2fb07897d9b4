// Prefill's weight products timed in this process (`spattn bench-products`): each integer
// product kernel (kernels/gemm_int8.hpp) on one weight shape and row count, in GOP/s and as a
// fraction of the int8 dot-product peak the same process measures (MachinePeak::int8_dot_gops),
// beside the widening f32 product (kernels/gemm_widen.hpp) where it takes the format, against
// the f32 FMA peak; and bf16 weights on vdpbf16ps (kernels/gemm_bf16.hpp) beside ggml's own
// product of the same matrix (the runner's path for bf16 where that kernel is not taken), both
// against the bf16 dot-product peak (MachinePeak::bf16_dot_gflops).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spattn/peak.hpp"

namespace spattn {

struct ProductBenchOptions {
  int64_t m = 2048;  // weight rows (outputs a row)
  int64_t k = 2048;  // columns (a multiple of 256)
  int64_t n = 512;   // activation rows (a prompt's chunk)
  int threads = 0;   // 0: all
  int repeat = 5;    // timed calls a kernel (the best counts: noise only slows a call)
  std::vector<std::string> types;  // ggml type names; empty: every integer product format and
                                   // bf16
};

struct ProductBenchResult {
  std::string type;        // ggml's name of the weight type
  double int8_gops = 0;    // 2 n m k / the best time (quantizing the activations included)
  double quantize_ms = 0;  // of that time, the activations' quantization (best call)
  double unpack_ms = 0;    // the weights' unpacking to 8-bit tiles, timed alone (best call)
  // The integer product over ggml's repacked copy of the weights (what a loaded q4_0, q4_K or
  // iq4_nl matrix is on x86), 0 where ggml does not repack the type here.
  double repacked_gops = 0;
  double repacked_unpack_ms = 0;
  double widen_gflops = 0;  // the widening f32 product's rate, 0 where it does not take the type
};

// bf16 weights: spattn's product and ggml's, each 2 n m k / its best time with the activations'
// rounding to bf16 included (ggml's mul_mat rounds them too: bf16's vec_dot_type).
struct ProductBenchBf16 {
  double gflops = 0;       // kernels::gemm_bf16_run
  double round_ms = 0;     // of its best call, the rounding
  double ggml_gflops = 0;  // ggml's mul_mat (tinyBLAS, on vdpbf16ps where ggml was built for it)
};

struct ProductBench {
  MachinePeak peak;
  bool vnni = false;      // the integer product ran on vpdpbusd (else its portable loops)
  bool bf16_dot = false;  // the bf16 product ran on vdpbf16ps (else its portable loops)
  std::vector<ProductBenchResult> results;
  std::optional<ProductBenchBf16> bf16;  // where bf16 was asked for (or no type was)
};

ProductBench bench_products(const ProductBenchOptions& opt);

}  // namespace spattn
