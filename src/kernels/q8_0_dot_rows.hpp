// Decode's one-row products over q8_0 weights, several rows at a time, with ggml's bits.
//
// ggml's q8_0 vector dot product (ggml-cpu/arch/x86/quants.c, ggml_vec_dot_q8_0_q8_0, its
// AVX2 path) takes one weight row at a time and one block of 32 a step into one 8-lane f32
// accumulator: lane j adds the block's exact integer sum of products 4j..4j+3, converted to
// f32, times the block's scale (the weight's f16 d times the activation's, an f32 product), in
// one fused multiply-add; the 8 lanes are then summed as ((a0+a4) + (a2+a6)) + ((a1+a5) +
// (a3+a7)). Each step's multiply-add waits for the last one, so a core reads 34 bytes per
// multiply-add latency: two Zen 5 threads reach half the memory's read speed on it
// (BM_DecodeProduct). Here eight rows run side by side, each with its own accumulator in
// ggml's order and the activation block loaded once for the eight: the same operations per
// output, so ggml's bits (tests/kernels/test_q8_0_dot_rows.cpp), eight chains in flight.
//
// The bits are those of ggml's AVX2 path only; q8_0_dot_rows_ggml_bits() says whether this
// build's ggml took it (its CPU backend built with AVX2, FMA and F16C) and this CPU can run the
// vector loops here, and callers use ggml's own product otherwise.
#pragma once
#include <cstddef>
#include <cstdint>

namespace spattn::kernels {

// Bytes of a q8_0 block: the f16 scale d, then 32 int8 values (ggml's block_q8_0).
inline constexpr size_t kQ8_0BlockBytes = 34;
// Rows taken side by side: eight multiply-add chains in flight. A call with fewer rows (or the
// rest of a call past a multiple of it) runs fewer chains, closer to ggml's speed.
inline constexpr int64_t kQ8_0DotRowsAtOnce = 8;

// y[r] = row r of w . x for r < rows: w's rows row_bytes apart, each k / 32 q8_0 blocks, and x
// k / 32 q8_0 blocks (k a multiple of 32). Each output has the bits of
// ggml_vec_dot_q8_0_q8_0's AVX2 path.
void q8_0_dot_rows(const void* w, size_t row_bytes, int64_t rows, const void* x, int64_t k,
                   float* y);

// The plain twin: the same lanes and order in scalar code (what q8_0_dot_rows runs on a CPU
// without AVX-512 VNNI, slowly).
void q8_0_dot_rows_reference(const void* w, size_t row_bytes, int64_t rows, const void* x,
                             int64_t k, float* y);

// Whether q8_0_dot_rows gives ggml's bits here (see above).
bool q8_0_dot_rows_ggml_bits();

}  // namespace spattn::kernels
