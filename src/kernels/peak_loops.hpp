// Register-bound loops that measure what this machine's cores can do, for the denominators of
// "% of peak": f32 FMA throughput, bf16 dot-product (vdpbf16ps) throughput, and memory read
// bandwidth. Each runs on the calling thread only, on the SIMD target the kernels dispatch to;
// src/eval/peak.cpp runs them on every thread at once and times them.
#pragma once
#include <cstdint>

namespace spattn::kernels {

// iters rounds of independent FMAs on full vectors, enough accumulators to hide the FMA
// latency. Returns the floating-point operations done (2 per lane per FMA); *sink gets a
// value that depends on every accumulator, so the loop cannot be optimised away.
double fma_peak_loop(int64_t iters, float* sink);

// The same with vdpbf16ps (4 operations per f32 lane: two products, two adds). Returns 0 and
// runs nothing where the kernels' bf16 dot path cannot run (no AVX512_BF16, or a target
// below AVX-512).
double bf16_dot_peak_loop(int64_t iters, float* sink);

// The same with vpdpbusd (AVX-512 VNNI: 64 u8 x s8 products a vector, 2 operations each, the
// integer prefill products' instruction; int8_peak_loop.cpp). Returns 0 and runs nothing where
// the CPU has no AVX512_VNNI.
double int8_dot_peak_loop(int64_t iters, float* sink);

// Sums n floats from p (any alignment) into *sink; returns the bytes read (4 n).
double read_sum_loop(const float* p, int64_t n, float* sink);

}  // namespace spattn::kernels
