// Prefill's products with f16 weights, C = X W^T: the runner's matrix work for f16 GGUF files
// at two rows and more (decode's single rows stay on ggml's vector products).
//
// Why spattn's own and not ggml's: ggml (tinyBLAS on x86) converts the activations to f16 and
// then widens both operands back to f32 at every use, ten conversions for 24 multiply-adds in
// its 4x6 tile, and reaches 72-80% of one core's f32 FMA peak on Zen 5. Here, from 128 rows,
// the activations stay f32 and are packed once per product (panels of 32 rows, shared by the
// products that read the same input), each weight row is widened once per block of 256
// columns and reused across every panel, and the tile keeps 24 accumulators (12 weight rows x
// 32 activation rows on AVX-512) fed by one broadcast and two loads a step: 10-20% faster at
// 512 rows (BENCHMARKS.md, "Prefill's f16 products"). Below 128 rows a second path runs the
// lanes along the weights (transposed in registers) and broadcasts the activations. Both
// paths compute every output as one chain of fused multiply-adds over the columns in order,
// so an output's bits depend on its two rows only: not on the call's row count, the path, or
// the thread count (the runner's batch invariance rests on it). The activations are never
// rounded to f16.
#pragma once
#include <cstdint>

namespace spattn::kernels {

// Floats of the packed activations for n rows of k values (gemm_f16_pack's output).
int64_t gemm_f16_packed_floats(int64_t n, int64_t k);

// Packs X [n][k] (row stride ldx floats) into xp: panels of 32 rows (rows past n zero), each
// column of a panel 32 floats, block by block of 256 columns (a block's panels together).
// Thread ith of nth packs its share of the panels; every thread's share must be done before any
// gemm_f16_run reads xp.
void gemm_f16_pack(const float* x, int64_t n, int64_t k, int64_t ldx, float* xp, int ith,
                   int nth);

// C[r][j] = sum over t < k of X[r][t] w[j][t] for r < n, j < m: w is m rows of k f16 values
// (row stride ldw halves, bit patterns as in GGUF), xp as gemm_f16_pack wrote it for the same
// n and k, C's rows ldc floats apart. Thread ith of nth computes its share of C's columns;
// each output is one chain of fused multiply-adds over t in order (AVX-512 and AVX2; SSE4's
// MulAdd is a product and a sum), so the result is the same bits for any n and nth.
void gemm_f16_run(const uint16_t* w, int64_t ldw, int64_t m, const float* xp, int64_t n,
                  int64_t k, float* c, int64_t ldc, int ith, int nth);

// Whether the dispatched target is one this product was measured to beat ggml's on (the
// AVX-512 build, which also has the row path; on AVX2 and below the runner keeps ggml's until
// measured there).
bool gemm_f16_preferred();

}  // namespace spattn::kernels
