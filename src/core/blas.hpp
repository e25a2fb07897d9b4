// Single-precision matrix products through OpenBLAS, with the thread count an argument of
// each call.
//
// OpenBLAS keeps one thread count for the whole process (openblas_set_num_threads). Changing
// it around a call, as a scoped object here once did, races with every other thread's
// products: one scope's restore undoes another's setting, a change lands under a running
// call, and whoever calls OpenBLAS next inherits it. So spattn never changes it per call: it
// sets OpenBLAS to one thread once in each thread that calls it (use_single_threaded_blas,
// which sgemm calls itself: in the OpenMP build the setting is the calling thread's), and
// sgemm splits each product over `threads` of spattn's own threads, every slice one
// single-threaded OpenBLAS call. (OpenBLAS's own workers also spin for a while after
// each call, taking a core from whatever runs next; single-threaded, it has none.)
#pragma once
#include <cstdint>

namespace spattn::blas {

// Sets OpenBLAS to one thread for the calling thread, the first time it calls this. Code that
// calls cblas itself calls this first, on the thread that calls cblas.
void use_single_threaded_blas();

// C = alpha A op(B) + beta C, row-major: A [m, k] (row stride lda), op(B) = B^T with B [n, k]
// (b_transposed) or B [k, n] (row stride ldb), C [m, n] (row stride ldc). The rows of C (when
// m >= n) or its columns are split into at most `threads` slices of whole 16-row or
// 16-column groups, each one single-threaded OpenBLAS call. The result is deterministic for a
// given `threads` (>= 1); across thread counts it agrees to float rounding, not bit for bit:
// OpenBLAS's edge kernels (its Haswell set, which it runs on Zen 5) sum a slice's last rows or
// columns in another order than the same entries inside a larger call.
void sgemm(bool b_transposed, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           int threads);

}  // namespace spattn::blas
