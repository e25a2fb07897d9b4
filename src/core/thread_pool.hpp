// The process's one pool of worker threads, shared by the runner's matrix products (ggml
// graphs) and every parallel loop of spattn (parallel_for runs as a one-node ggml graph whose
// node is our loop). ggml is built as llama.cpp builds it by default, with OpenMP, so the
// workers are libgomp's persistent team: no call starts a thread, and between calls the
// workers spin briefly and then sleep (OMP_WAIT_POLICY / GOMP_SPINCOUNT tune that, as for
// llama.cpp). Without OpenMP, ggml's own pthread pool serves the same way.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

struct ggml_cgraph;

namespace spattn {

class ThreadPool {
 public:
  // The pool, made on first use with max(hardware threads, threads) workers and grown when a
  // call asks for more.
  static ThreadPool& get();

  // Computes a ggml graph on `threads` threads (the caller is thread 0). Calls from several
  // threads take turns; a call from inside the pool (a loop body) runs on the calling thread
  // alone.
  void compute(ggml_cgraph* graph, int threads);

  // Runs body(worker, workers) once on each of `threads` workers (worker 0 is the caller) and
  // returns when all are done: parallel_for's claim loop runs inside it.
  void run(int threads, const std::function<void(int, int)>& body);

  // True on a thread that is running a pool call's work (nested calls run there serially).
  static bool inside();

  int size() const;

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

 private:
  ThreadPool();
  struct Impl;
  Impl* p_;
};

}  // namespace spattn
