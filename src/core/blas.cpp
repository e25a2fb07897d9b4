#include "core/blas.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>

#include "core/threading.hpp"
#include "spattn/error.hpp"

namespace spattn::blas {

void use_single_threaded_blas() {
  // Once per thread: in OpenBLAS's OpenMP build (the one spattn links) the count a call runs
  // with is the calling thread's OpenMP setting, which openblas_set_num_threads sets for that
  // thread only (omp_set_num_threads). A thread that had not set it ran its products on an
  // OpenMP team of its own, with other bits than the thread that had (every call from a fresh
  // thread differed by up to 1.4e-6 on a 64 x 1024 x 64 product, 2 cores), so a method's
  // estimate gave other bits when its slices ran on another thread than usual
  // (Blas.ConcurrentCallsNeitherMoveTheProcessCountNorMeet, flaky under load).
  thread_local const bool done = (openblas_set_num_threads(1), true);
  (void)done;
}

void sgemm(bool b_transposed, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           int threads) {
  SPATTN_CHECK(m >= 0 && n >= 0 && k >= 0 && threads >= 1, "sgemm: bad sizes m ", m, ", n ", n,
               ", k ", k, " or threads ", threads);
  SPATTN_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
                   ldc <= INT_MAX,
               "sgemm: sizes beyond OpenBLAS's int range");
  if (m == 0 || n == 0) return;
  const CBLAS_TRANSPOSE tb = b_transposed ? CblasTrans : CblasNoTrans;
  // Every thread that calls OpenBLAS sets its own count: a pool worker outside libgomp's team
  // (ggml on its own pthread pool: SPATTN_GGML_OPENMP=OFF, the TSan build) read OpenMP's default
  // of every core, ran its slice on a team of its own and moved the process's count to it.
  const auto call = [&](int64_t rows, int64_t cols, const float* a0, const float* b0, float* c0) {
    use_single_threaded_blas();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, int(rows), int(cols), int(k), alpha, a0, int(lda),
                b0, int(ldb), beta, c0, int(ldc));
  };
  const bool by_rows = m >= n;
  const int64_t extent = by_rows ? m : n, groups = (extent + 15) / 16;
  const int64_t parts = std::min<int64_t>(threads, groups);
  if (parts <= 1) {
    call(m, n, a, b, c);
    return;
  }
  parallel_for(parts, int(parts), [&](int64_t i, int) {
    const int64_t lo = std::min(extent, groups * i / parts * 16),
                  hi = std::min(extent, groups * (i + 1) / parts * 16);
    if (hi <= lo) return;
    if (by_rows)
      call(hi - lo, n, a + lo * lda, b, c + lo * ldc);
    else  // columns lo..hi of op(B): rows of B^T's B, or columns of B
      call(m, hi - lo, a, b_transposed ? b + lo * ldb : b + lo, c + lo);
  });
}

}  // namespace spattn::blas
