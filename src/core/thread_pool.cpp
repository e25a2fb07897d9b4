#include "core/thread_pool.hpp"

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "spattn/error.hpp"

namespace spattn {

namespace {
thread_local int t_inside = 0;  // > 0 while this thread runs a pool call's work
}  // namespace

struct ThreadPool::Impl {
  std::mutex mu;  // one call at a time: the pool has one set of workers
  ggml_threadpool* tp = nullptr;
  int n = 0;
  std::vector<uint8_t> work;
  // run(): a graph of one custom node, made once; each call sets `body` and computes it.
  ggml_context* ctx = nullptr;
  ggml_cgraph* graph = nullptr;
  const std::function<void(int, int)>* body = nullptr;
  std::exception_ptr error;
  std::mutex error_mu;

  static void node(ggml_tensor*, int ith, int nth, void* self) {
    auto* p = static_cast<Impl*>(self);
    ++t_inside;
    try {
      (*p->body)(ith, nth);
    } catch (...) {
      std::lock_guard<std::mutex> lock(p->error_mu);
      if (!p->error) p->error = std::current_exception();
    }
    --t_inside;
  }

  Impl() {
    ggml_init_params ip{};
    ip.mem_size = 4 * ggml_tensor_overhead() + ggml_graph_overhead();
    ip.no_alloc = true;  // the node's tensor has no data: the loop writes its own outputs
    ctx = ggml_init(ip);
    SPATTN_CHECK(ctx != nullptr, "thread pool: ggml_init failed");
    ggml_tensor* t = ggml_custom_4d(ctx, GGML_TYPE_F32, 1, 1, 1, 1, nullptr, 0, &Impl::node,
                                    GGML_N_TASKS_MAX, this);
    graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, t);
  }
  ~Impl() {
    if (tp) ggml_threadpool_free(tp);
    ggml_free(ctx);
  }

  // Under mu: a pool of at least `threads` workers.
  void ensure(int threads) {
    if (tp && threads <= n) return;
    if (tp) ggml_threadpool_free(tp);
    const unsigned hc = std::thread::hardware_concurrency();
    n = std::max(threads, int(hc ? hc : 1));
    ggml_threadpool_params params = ggml_threadpool_params_default(n);
    tp = ggml_threadpool_new(&params);
    SPATTN_CHECK(tp != nullptr, "thread pool: could not start ", n, " threads");
  }

  // Under mu (or on a nested call, with pool null): plans and computes.
  void compute(ggml_cgraph* g, int threads, ggml_threadpool* pool, std::vector<uint8_t>& buf) {
    ggml_cplan plan = ggml_graph_plan(g, threads, pool);
    if (plan.work_size > buf.size()) buf.resize(plan.work_size);
    plan.work_data = buf.data();
    const ggml_status st = ggml_graph_compute(g, &plan);
    SPATTN_CHECK(st == GGML_STATUS_SUCCESS, "thread pool: ggml graph failed (status ", int(st),
                 ")");
  }
};

ThreadPool& ThreadPool::get() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::ThreadPool() : p_(new Impl) {}
ThreadPool::~ThreadPool() { delete p_; }

bool ThreadPool::inside() { return t_inside > 0; }

int ThreadPool::size() const {
  std::lock_guard<std::mutex> lock(p_->mu);
  return p_->n;
}

void ThreadPool::compute(ggml_cgraph* graph, int threads) {
  threads = std::max(threads, 1);
  if (inside()) {
    // A loop body's own graph: this thread alone, with ggml's one-thread path (no workers).
    thread_local std::vector<uint8_t> buf;
    p_->compute(graph, 1, nullptr, buf);
    return;
  }
  std::lock_guard<std::mutex> lock(p_->mu);
  p_->ensure(threads);
  ++t_inside;  // the caller is worker 0 while the graph runs
  try {
    p_->compute(graph, threads, p_->tp, p_->work);
  } catch (...) {
    --t_inside;
    throw;
  }
  --t_inside;
}

void ThreadPool::run(int threads, const std::function<void(int, int)>& body) {
  if (threads <= 1 || inside()) {
    body(0, 1);
    return;
  }
  std::lock_guard<std::mutex> lock(p_->mu);
  p_->ensure(threads);
  p_->body = &body;
  p_->error = nullptr;
  p_->compute(p_->graph, threads, p_->tp, p_->work);
  p_->body = nullptr;
  if (p_->error) std::rethrow_exception(std::exchange(p_->error, nullptr));
}

}  // namespace spattn
