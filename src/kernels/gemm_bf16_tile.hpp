// The regrouped weight tile of the bf16 product (gemm_bf16.hpp), shared by its portable loops
// (gemm_bf16.cpp) and the AVX512_BF16 ones (gemm_bf16_avx512bf16.cpp).
#pragma once
#include <cstdint>

namespace spattn::kernels::gemm_bf16_detail {

constexpr int kRows = 32;     // weight rows a tile (two vectors of 16 f32 lanes)
constexpr int kPairs = 1024;  // column pairs a tile at most (2048 columns: 128 KiB, in L2)

// Pair p of 32 weight rows: w[h][i] holds row 16 h + i's columns 2p (low half) and 2p + 1
// (high half), as one vdpbf16ps operand reads them. Rows past the matrix: zeros.
struct alignas(64) TilePair {
  uint32_t w[2][16];
};

// Rows [r0, r0 + rows) of C, columns [m0, m0 + mrows) (mrows <= 32), over column pairs
// [p0, p0 + np) with tile t (np pairs): C = (first ? 0 : C) + the pairs' products, one chain per
// output in pair order. xb: the rounded activations, rows k values apart.
using RowsFn = void (*)(const TilePair* t, int64_t np, const uint16_t* xb, int64_t k, int64_t p0,
                        int64_t r0, int64_t rows, float* c, int64_t ldc, int64_t m0, int mrows,
                        bool first);

// One row of k floats rounded to bf16 (gemm_bf16_round's rule).
using RoundRowFn = void (*)(const float* x, int64_t k, uint16_t* y);

// Pairs [p0, p0 + np) of 32 whole weight rows (row i at rows + i row_bytes) into t.
using UnpackFn = void (*)(const uint8_t* rows, int64_t row_bytes, int64_t p0, int64_t np,
                          TilePair* t);

// The AVX512_BF16 loops, or nullptr where this build or CPU has none.
RowsFn avx512bf16_rows();
UnpackFn avx512bf16_unpack();
RoundRowFn avx512bf16_round_row();

}  // namespace spattn::kernels::gemm_bf16_detail
