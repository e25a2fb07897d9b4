// Prefill's products C = X W^T with the weights in their GGUF format (f16, q8_0, q6_K, q5_K,
// q3_K), widened to f32 block by block: the runner's matrix work for prompts. Decode's single
// rows stay on ggml's vector products, and so do the formats ggml repacks on x86 (q4_0, q4_K,
// iq4_nl) and iq4_xs: there ggml's 8-bit products were faster than this tile (repacked q4_K:
// 0.93-0.96x its time; iq4_xs: 0.79-0.96x).
//
// Why spattn's own and not ggml's: ggml rounds the activations (to f16 for f16 weights, to
// 8-bit blocks for the quantized ones) and multiplies in that format: tinyBLAS, for f16,
// widens both operands back to f32 at every use (ten conversions for 24 multiply-adds in its
// 4 x 6 tile, 72-80% of a core's f32 FMA peak on Zen 5); for q8_0 its 8-bit tile ran at 56% of
// that peak's rate, and the K-quants it does not cover nor repack (q6_K, q5_K, q3_K) go through
// one vector dot product per output at 36%, 25% and 25% (llama.cpp's 512-token prefill of the 1B
// file: 145 tok/s at Q8_0, 94 at Q6_K, 73 at Q5_K_M, 90 at Q3_K_M, against 186 at f16;
// BENCHMARKS.md). Here the
// activations stay f32 and are packed once per product (panels of 32 rows, shared by the
// products that read the same input), each weight row is widened to f32 once per block of 256
// columns and reused across every panel, and the tile keeps 24 accumulators (12 weight rows x
// 32 activation rows on AVX-512) fed by one broadcast and two loads a step. Widening is the
// format's decoder, vectorized (the same bits as ggml's own decoders, tests/quant_reference.hpp's
// twins); at 512 rows it costs one or two instructions per 512 multiply-adds. Below 128 rows a
// second path, for f16 only, runs the lanes along the weights (transposed in registers) and
// broadcasts the activations. Both paths compute every output as one chain of fused
// multiply-adds over the columns in order, so an output's bits depend on its two rows only: not
// on the call's row count, the path, or the thread count (the runner's batch invariance rests
// on it). BENCHMARKS.md, "Prefill's products on spattn's kernel", has the figures.
#pragma once
#include <cstdint>
#include <optional>

#include "spattn/gguf.hpp"
#include "spattn/storage_type.hpp"

namespace spattn::kernels {

// How a weight matrix's rows are stored (ggml's block layouts, ggml-common.h): the rows of the
// storage table (spattn/storage_type.hpp) that take kWeightWiden, with their block sizes.
enum class WeightFormat : uint8_t {
  f16,   // k IEEE binary16 values a row
  q8_0,  // k / 32 blocks of 34 bytes: f16 scale, 32 int8
  q6_K,  // k / 256 super-blocks of 210 bytes
  q5_K,  // k / 256 super-blocks of 176 bytes
  q3_K,  // k / 256 super-blocks of 110 bytes
};
constexpr StorageType storage_of(WeightFormat f) {
  switch (f) {
    case WeightFormat::f16: return StorageType::f16;
    case WeightFormat::q8_0: return StorageType::q8_0;
    case WeightFormat::q6_K: return StorageType::q6_K;
    case WeightFormat::q5_K: return StorageType::q5_K;
    case WeightFormat::q3_K: return StorageType::q3_K;
  }
  return StorageType::f16;  // not reached for a valid WeightFormat
}
constexpr const StorageTraits& traits(WeightFormat f) { return storage_traits(storage_of(f)); }
inline constexpr std::array kWeightFormats = {WeightFormat::f16, WeightFormat::q8_0,
                                              WeightFormat::q6_K, WeightFormat::q5_K,
                                              WeightFormat::q3_K};
static_assert(storage_detail::covers(kWeightFormats, kWeightWiden));

// The format this product widens a GGUF tensor type as, or none: a type without a decoder here.
std::optional<WeightFormat> widen_format(gguf::GgmlType t);

struct WeightRows {
  WeightFormat format = WeightFormat::f16;
  const void* data = nullptr;
  int64_t row_bytes = 0;  // bytes from one row to the next
  int64_t m = 0;          // rows
};

// Raises spattn::Error unless k is a whole number of w's blocks and a row's bytes hold them
// (gemm_widen_run and gemm_widen_rows check it too; a caller inside a ggml graph, where a throw
// would end the process, checks when it builds the node).
void gemm_widen_check(const WeightRows& w, int64_t k);

// Floats of the packed activations for n rows of k values (gemm_widen_pack's output).
int64_t gemm_widen_packed_floats(int64_t n, int64_t k);

// Packs X [n][k] (row stride ldx floats) into xp: panels of 32 rows (rows past n zero), each
// column of a panel 32 floats, block by block of 256 columns (a block's panels together).
// Thread ith of nth packs its share of the (panel, block of columns) pairs; every thread's share
// must be done before any gemm_widen_run reads xp.
void gemm_widen_pack(const float* x, int64_t n, int64_t k, int64_t ldx, float* xp, int ith,
                     int nth);

// C[r][j] = sum over t < k of X[r][t] W[j][t] for r < n, j < w.m, xp as gemm_widen_pack wrote it
// for the same n and k (k a whole number of the format's blocks), C's rows ldc floats apart.
// Thread ith of nth computes its share of C's columns; each output is one chain of fused
// multiply-adds over t in order (AVX-512 and AVX2; SSE4's MulAdd is a product and a sum), so the
// result is the same bits for any n and nth.
void gemm_widen_run(const WeightRows& w, const float* xp, int64_t n, int64_t k, float* c,
                    int64_t ldc, int ith, int nth);

// Rows [r0, r0 + rows) of W, columns [t0, t0 + kc) (whole blocks of the format), as f32 into
// dst (rows ldd floats apart): the widening the product uses, for tests.
void gemm_widen_rows(const WeightRows& w, int64_t k, int64_t r0, int64_t rows, int64_t t0,
                     int64_t kc, float* dst, int64_t ldd);

// The fewest rows a call should hold for this product to be the runner's choice on the
// dispatched target, or 0 where it is not (where it measured faster than ggml's: on AVX-512 f16
// from 2 rows with its row path, q8_0 from 32, q6_K and q3_K from 16, q5_K from 8, where the
// tile's widening is paid back; on AVX2 q6_K, q5_K and q3_K from 32, f16 and q8_0 never; older
// targets never).
int64_t gemm_widen_min_rows(WeightFormat f);

}  // namespace spattn::kernels
