// Prefill's products C = X W^T for quantized weights on integer dot products: the activations
// are quantized once per row and graph node to 8-bit blocks of 32 (a float scale each, and the
// block's integer sum, which the formats with a per-block minimum need), each group of 16
// weight rows is unpacked to 8-bit tiles with its per-block scales (by gathers where the CPU
// has AVX-512), and two tiles at a time multiply with AVX-512 VNNI's vpdpbusd (u8 x s8, four
// products a 32-bit lane), accumulating in int32 per block and scaling once per block in f32.
//
// Why: gemm_widen (gemm_widen.hpp) widens every weight to f32 and runs f32 FMAs, 16 products an
// instruction; vpdpbusd does 64, so a product that reads its weights as 8-bit integers can run
// several times faster at the same vector width. The price is the activations' rounding to 8
// bits (as ggml's own quantized products do: ggml rounds them to q8_0 or q8_K blocks), so an
// output here is not gemm_widen's bits; it is the exact integer dot product of the block's
// integers, scaled, within f32 rounding of the scales' products (tests/test_gemm_int8.cpp).
//
// The tile's layout: for each block of 32 columns, eight 64-byte vectors, vector g holding
// columns 4g..4g+3 of the 16 rows (row i's four bytes at 4i), so that one vpdpbusd with one
// activation row's four bytes broadcast adds 4 products to each row's lane. Activations are
// stored as u8 (q + 128: vpdpbusd's unsigned side); the 128 offset's contribution, 128 times the
// block's weight sum, is subtracted by starting the block's accumulator at minus it.
//
// Every output is one fixed chain over the blocks in order (integer block sums exact, then one
// f32 multiply-add a block): its bits depend on its weight row and activation row only, not on
// the call's row count or thread split.
#pragma once
#include <array>
#include <cstdint>
#include <optional>

#include "spattn/gguf.hpp"

namespace spattn::kernels {

// The weight formats this product reads (ggml's block layouts, ggml-common.h).
enum class Int8Format : uint8_t {
  q8_0,    // blocks of 32: f16 d, 32 int8.                     w = d q
  q4_0,    // blocks of 32: f16 d, 16 bytes of nibbles.         w = d (q - 8)
  q4_1,    // blocks of 32: f16 d, f16 m, 16 bytes of nibbles.  w = d q + m
  q5_0,    // blocks of 32: f16 d, 32 high bits, 16 bytes.      w = d (q - 16)
  q5_1,    // blocks of 32: f16 d, f16 m, 32 high bits, 16.     w = d q + m
  q4_K,    // super-blocks of 256 (144 bytes), 8 sub-blocks.    w = d sc q - dmin m
  q5_K,    // super-blocks of 256 (176 bytes), 8 sub-blocks.    w = d sc q - dmin m
  q6_K,    // super-blocks of 256 (210 bytes), 16 scales.       w = d sc (q - 32)
  iq4_nl,  // blocks of 32: f16 d, 16 bytes of table indices.   w = d kIq4Values[q]
  iq4_xs,  // super-blocks of 256 (136 bytes), 6-bit scales.    w = d (ls - 32) kIq4Values[q]
  mxfp4,   // blocks of 32: e8m0 e, 16 bytes of E2M1 indices.   w = 2^(e - 128) kFp4Values[q]
};
inline constexpr std::array kInt8Formats = {
    Int8Format::q8_0,   Int8Format::q4_0,   Int8Format::q4_1, Int8Format::q5_0,
    Int8Format::q5_1,   Int8Format::q4_K,   Int8Format::q5_K, Int8Format::q6_K,
    Int8Format::iq4_nl, Int8Format::iq4_xs, Int8Format::mxfp4};

// The GGUF type's format here, or none.
std::optional<Int8Format> int8_format(gguf::GgmlType t);
gguf::GgmlType ggml_type_of(Int8Format f);

// Where the blocks of a row lie.
enum class Int8Layout : uint8_t {
  rows,  // ggml's own: row after row, row_bytes apart, each its blocks in order
  // ggml's CPU repack on x86 (ggml-cpu/repack.cpp: q4_0, iq4_nl and mxfp4 as block_q4_0x8 /
  // block_iq4_nlx8 / block_mxfp4x8, q4_K as block_q4_Kx8), which its decode products read:
  // rows in groups of 8;
  // per group and block (q4_K: super-block) column, the 8 rows' scales side by side, then
  // their quant bytes 8 at a time row after row (q4_0's nibbles XOR 0x88; q4_K's scales and
  // mins regrouped 12 bytes a sub-block). A group spans 8 row_bytes, as the rows it holds.
  interleaved8,
};

struct Int8Weights {
  Int8Format format = Int8Format::q8_0;
  const void* data = nullptr;
  int64_t row_bytes = 0;  // bytes from one row to the next (interleaved8: an eighth of a group's)
  int64_t m = 0;          // rows
  Int8Layout layout = Int8Layout::rows;
};

// Whether the product reads `f` in `layout` (interleaved8: q4_0, q4_K, iq4_nl and mxfp4).
bool gemm_int8_reads(Int8Format f, Int8Layout layout);

// Raises spattn::Error unless k is a whole number of w's blocks and a row's bytes hold them
// (interleaved8: exactly, the format read in that layout, whole groups of 8 rows).
void gemm_int8_check(const Int8Weights& w, int64_t k);

// Whether `packed` (m rows of k values in interleaved8) decodes to the integers and scales
// `plain` (the same rows in ggml's own layout, row_bytes apart) does, over the first and the
// last group of 8 rows: the check that ggml repacked a matrix into the layout this product
// reads (ggml chooses its layout per CPU and version; a loader asks before it lets the product
// read ggml's copy).
bool gemm_int8_interleaved_matches(Int8Format f, const void* plain, const void* packed,
                                   int64_t row_bytes, int64_t m, int64_t k);

// Bytes of the quantized activations for n rows of k values (k a multiple of 32).
int64_t gemm_int8_act_bytes(int64_t n, int64_t k);

// Quantizes X [n][k] (row stride ldx floats; k a multiple of 32) into xq, as the product reads
// it: per row, k bytes of q + 128, then k / 32 floats d, then k / 32 floats d * sum(q), where
// for each block of 32 values d = max |x| / 127 and q = round(x / d) (to nearest, ties away from
// zero; d = 0 and q = 0 for an all-zero block), as ggml's q8_0 rounds. Thread ith of nth does
// its share of rows; every share must be done before gemm_int8_run reads xq.
void gemm_int8_quantize(const float* x, int64_t n, int64_t k, int64_t ldx, uint8_t* xq, int ith,
                        int nth);

// C[r][j] = sum over blocks b of the block's product for r < n, j < w.m, C's rows ldc floats
// apart; thread ith of nth computes its share of C's columns (groups of 16 weight rows).
void gemm_int8_run(const Int8Weights& w, const uint8_t* xq, int64_t n, int64_t k, float* c,
                   int64_t ldc, int ith, int nth);

// As gemm_int8_run, on the portable path whatever the CPU (the reference the tests hold the
// vector path to, bit for bit: both compute the same integer sums and the same f32 chain).
void gemm_int8_run_portable(const Int8Weights& w, const uint8_t* xq, int64_t n, int64_t k, float* c,
                            int64_t ldc);

// The block loops a product can be put on (the tests hold each to the portable path's bits).
enum class Int8Loops : uint8_t {
  avx512vnni,  // vpdpbusd on 512-bit vectors: the choice where the CPU has AVX-512 VNNI
  avxvnni,     // vpdpbusd on 256-bit vectors (AVX-VNNI): the next choice
  avx2,        // vpmaddubsw + vpmaddwd (AVX2): the next
};

// As gemm_int8_run_portable on the given loops; false (and nothing written) where this CPU or
// build has none such. xq as gemm_int8_quantize writes it (|q| <= 127, which AVX2's loops need:
// gemm_int8_avx2.cpp).
bool gemm_int8_run_on(Int8Loops loops, const Int8Weights& w, const uint8_t* xq, int64_t n,
                      int64_t k, float* c, int64_t ldc);

// gemm_int8_run's unpacking of the weights alone (thread ith of nth its share, as there), with
// no product: bench-products' account of where a product's time goes.
void gemm_int8_unpack_only(const Int8Weights& w, int64_t k, int ith, int nth);

// Whether this CPU runs the product on vpdpbusd (AVX-512 VNNI).
bool gemm_int8_vnni();

// The loops gemm_int8_run takes on this CPU, or none (the portable ones).
std::optional<Int8Loops> gemm_int8_loops();

// The fewest rows a call should hold for this product to be the runner's choice, or 0 where it
// is not: where the CPU has AVX-512 VNNI (elsewhere the portable path is slower than
// gemm_widen's or ggml's products).
int64_t gemm_int8_min_rows(Int8Format f);

}  // namespace spattn::kernels
