// The in-process peaks: the machine's f32 FMA, bf16 dot and memory read rates (the
// denominators of every "% of peak" spattn prints) and OpenBLAS sgemm for comparison.
#include "spattn/peak.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "core/blas.hpp"
#include "core/threading.hpp"
#include "kernels/peak_loops.hpp"
#include "spattn/attention.hpp"
#include "spattn/error.hpp"

namespace spattn {

namespace {

// Non-trivial, bounded values: zeros or denormals could take faster or slower paths.
std::vector<float> test_matrix(int n, int salt) {
  std::vector<float> m(size_t(n) * n);
  for (size_t i = 0; i < m.size(); ++i) m[i] = float(int((i * 7 + salt) % 13) - 6) * 0.125f;
  return m;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs work(item) once on each of `threads` threads, all at once, and returns the seconds
// from the first start to the last finish; work returns the operations (or bytes) it did,
// summed into *done. The threads meet at a barrier before starting, so thread start-up is
// not timed and no thread runs alone while another is still being created (parallel_for
// hands out one item per thread: a thread blocked at the barrier keeps its item, so the one
// left is the late thread's).
template <class Work>
double timed_on_all_threads(int threads, double* done, Work work) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> part(static_cast<size_t>(threads), 0.0);
  std::vector<Clock::time_point> begin(static_cast<size_t>(threads)), end(begin);
  std::atomic<int> arrived{0};
  parallel_for(threads, threads, [&](int64_t i, int) {
    arrived.fetch_add(1);
    while (arrived.load() < threads) std::this_thread::yield();
    begin[size_t(i)] = Clock::now();
    part[size_t(i)] = work(i);
    end[size_t(i)] = Clock::now();
  });
  *done = 0;
  for (double x : part) *done += x;
  return std::chrono::duration<double>(*std::max_element(end.begin(), end.end()) -
                                       *std::min_element(begin.begin(), begin.end()))
      .count();
}

// Best rate (per second) of loop(iters) run on every thread. iters is sized on the calling
// thread alone: grown until one run takes rep_s / 8, then the fastest of three such runs is
// scaled to rep_s (a run interrupted by another process only ever looks slower).
template <class Loop>
double best_loop_rate(int threads, const MachinePeakOptions& opt, Loop loop) {
  float sink0 = 0;
  auto probe = [&](int64_t iters, double* done) {
    const auto t0 = std::chrono::steady_clock::now();
    *done = loop(iters, &sink0);
    return seconds_since(t0);
  };
  double done = 0;
  int64_t iters = 1 << 10;
  double s = probe(iters, &done);
  if (done <= 0) return 0;  // the loop does not exist on this target
  while (s < opt.rep_s / 8 && iters < (int64_t(1) << 40)) {
    iters *= 4;
    s = probe(iters, &done);
  }
  for (int r = 0; r < 2; ++r) s = std::min(s, probe(iters, &done));
  iters = std::max<int64_t>(1, int64_t(double(iters) * opt.rep_s / std::max(s, 1e-9)));

  std::vector<float> sink(static_cast<size_t>(threads));
  double best = 0;
  for (int r = 0; r < opt.reps; ++r) {
    s = timed_on_all_threads(threads, &done,
                             [&](int64_t i) { return loop(iters, &sink[size_t(i)]); });
    if (s > 0) best = std::max(best, done / s);
  }
  return best;
}

// Best read rate (bytes per second) of the whole buffer, each thread summing one slice.
double best_read_rate(int threads, const MachinePeakOptions& opt) {
  if (opt.read_bytes == 0) return 0;
  // Each thread streams at least 16 MiB, so on machines with many cores the slices still
  // dwarf each core's share of the L3.
  const long long bytes = std::max(opt.read_bytes, (16ll << 20) * threads);
  const size_t n = size_t(bytes / 4) / 16 * 16;  // 64-byte multiple
  // Plain pages: huge pages (madvise) made the first touch faster on average but now and
  // then cost a second of compaction.
  std::unique_ptr<float, decltype(&std::free)> buf(
      static_cast<float*>(std::aligned_alloc(64, n * 4)), &std::free);
  SPATTN_CHECK(buf != nullptr, "peak: cannot allocate the ", bytes, "-byte read buffer");
  float* p = buf.get();
  // Slices start on 64-byte boundaries; each thread first touches its own slice.
  const size_t slice = (n / size_t(threads) + 15) / 16 * 16;
  auto slice_of = [&](int64_t i, size_t* len) {
    const size_t b = std::min(n, size_t(i) * slice);
    *len = std::min(n, b + slice) - b;
    return p + b;
  };
  double done = 0;
  timed_on_all_threads(threads, &done, [&](int64_t i) {
    size_t len = 0;
    float* x = slice_of(i, &len);
    for (size_t j = 0; j < len; ++j) x[j] = float(int(j % 7) - 3) * 0.25f;
    return 0.0;
  });
  std::vector<float> sink(static_cast<size_t>(threads));
  auto pass = [&](double* read) {
    return timed_on_all_threads(threads, read, [&](int64_t i) {
      size_t len = 0;
      const float* x = slice_of(i, &len);
      return kernels::read_sum_loop(x, int64_t(len), &sink[size_t(i)]);
    });
  };
  pass(&done);  // warm-up: TLB and page tables
  // Passes until reps of them and rep_s of time: one pass of the buffer is short.
  double best = 0, total = 0;
  for (int r = 0; r < 1000 && (r < opt.reps || total < opt.rep_s); ++r) {
    const double s = pass(&done);
    total += s;
    if (s > 0) best = std::max(best, done / s);
  }
  return best;
}

}  // namespace

MachinePeak measure_machine_peak(int threads, const MachinePeakOptions& opt) {
  SPATTN_CHECK(
      opt.rep_s > 0 && opt.rep_s <= 10 && opt.reps >= 1 && opt.reps <= 100 && opt.read_bytes >= 0,
      "peak: bad options (rep_s ", opt.rep_s, ", reps ", opt.reps, ", read_bytes ", opt.read_bytes,
      ")");
  const int t = resolve_threads(threads);
  MachinePeak m;
  m.simd_target = simd_target_name();
  m.fma_gflops = best_loop_rate(t, opt, kernels::fma_peak_loop) / 1e9;
  m.bf16_dot_gflops = best_loop_rate(t, opt, kernels::bf16_dot_peak_loop) / 1e9;
  m.int8_dot_gops = best_loop_rate(t, opt, kernels::int8_dot_peak_loop) / 1e9;
  m.read_gbps = best_read_rate(t, opt) / 1e9;
  if (opt.sgemm) m.sgemm_gflops = measure_sgemm_gflops(t, opt.sgemm_opt);
  return m;
}

double measure_sgemm_gflops(int threads, const PeakOptions& opt) {
  SPATTN_CHECK(opt.n > 0 && opt.min_calls > 0 && opt.max_calls >= opt.min_calls,
               "peak: bad options (n ", opt.n, ", calls ", opt.min_calls, "..", opt.max_calls, ")");
  const int t = resolve_threads(threads);
  const int n = opt.n;
  std::vector<float> a = test_matrix(n, 1), b = test_matrix(n, 5), c(size_t(n) * n);
  auto sgemm = [&] {
    blas::sgemm(false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n, t);
  };
  sgemm();  // warm-up: starts the threads and faults in the pages
  const double flops = 2.0 * double(n) * n * n;
  double best_s = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int call = 0; call < opt.max_calls; ++call) {
    if (call >= opt.min_calls && seconds_since(start) >= opt.budget_s) break;
    const auto t0 = std::chrono::steady_clock::now();
    sgemm();
    const double s = seconds_since(t0);
    // Best of several: the peak is what the machine can do, noise only ever slows it down.
    if (best_s == 0 || s < best_s) best_s = s;
  }
  return flops / best_s / 1e9;
}

}  // namespace spattn
