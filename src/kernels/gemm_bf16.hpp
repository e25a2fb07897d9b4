// Prefill's products C = X W^T for bf16 weights on AVX512_BF16's vdpbf16ps: the activations are
// rounded to bf16 once per row and graph node (ggml's vec_dot_type for bf16 weights is bf16, so
// this is the rounding ggml's own products apply), each group of 32 weight rows is regrouped into
// a tile per chunk of columns, and vdpbf16ps adds two products a lane, 32 a vector, into f32.
//
// Why: bf16 weights have no path of spattn's own otherwise (gemm_widen.hpp does not take them),
// so their prompt products are ggml's (tinyBLAS, itself on vdpbf16ps where the CPU has it).
// The runner takes this path only where `spattn bench-products` measured it faster than ggml's
// on the same shape (gemm_bf16_min_rows; docs/runner.md has the figures).
//
// The tile's layout: per pair of columns (2p, 2p + 1), two 64-byte vectors, vector h holding
// weight rows 16h..16h+15, row i's two bf16 at 4 (i % 16): one vdpbf16ps with an activation
// row's pair broadcast adds both products to each of 16 rows' lanes.
//
// vdpbf16ps's arithmetic (Intel's pseudo-code, and what a Zen 5 computes, tested bit for bit in
// tests/kernels/test_gemm_bf16.cpp): per lane, acc += x[2p + 1] w[2p + 1], then acc += x[2p] w[2p],
// each step one fused multiply-add (a product of two bf16 is exact in f32) rounded to nearest
// even, subnormal inputs and results taken as zero. Every output is one such chain over the
// column pairs in order, so its bits depend on its weight row and activation row only, not on
// the call's row count or thread split; the portable loops compute the same chain one lane at a
// time (their bits are the vector loops' on any CPU). ggml's tinyBLAS sums 16 lanes per output
// then adds them, so its bits differ from these within f32 rounding of the same products.
#pragma once
#include <cstdint>

namespace spattn::kernels {

struct Bf16Weights {
  const void* data = nullptr;  // m rows of k bf16 (ggml's GGML_TYPE_BF16)
  int64_t row_bytes = 0;       // bytes from one row to the next
  int64_t m = 0;               // rows
};

// Raises spattn::Error unless k is positive and even and a row's bytes hold k values.
void gemm_bf16_check(const Bf16Weights& w, int64_t k);

// Bytes of the rounded activations for n rows of k values.
int64_t gemm_bf16_act_bytes(int64_t n, int64_t k);

// Rounds X [n][k] (row stride ldx floats) to bf16 into xb (n rows of k), as ggml's
// GGML_FP32_TO_BF16 does: to nearest, ties to even, a NaN kept quiet. Thread ith of nth does its
// share of rows; every share must be done before gemm_bf16_run reads xb.
void gemm_bf16_round(const float* x, int64_t n, int64_t k, int64_t ldx, uint16_t* xb, int ith,
                     int nth);

// C[r][j] = the chain above over X's rounded row r and W's row j, for r < n, j < w.m, C's rows
// ldc floats apart; thread ith of nth computes its share of C's columns (groups of 32 weight
// rows).
void gemm_bf16_run(const Bf16Weights& w, const uint16_t* xb, int64_t n, int64_t k, float* c,
                   int64_t ldc, int ith, int nth);

// As gemm_bf16_run, on the portable loops whatever the CPU (the tests' twin of the vector path).
void gemm_bf16_run_portable(const Bf16Weights& w, const uint16_t* xb, int64_t n, int64_t k,
                            float* c, int64_t ldc);

// Whether this CPU runs the product on vdpbf16ps (AVX512_BF16).
bool gemm_bf16_dot();

// The fewest rows a call should hold for this product to be the runner's choice, or 0 where it
// is not (no AVX512_BF16: the portable loops are far slower than ggml's products).
int64_t gemm_bf16_min_rows();

}  // namespace spattn::kernels
