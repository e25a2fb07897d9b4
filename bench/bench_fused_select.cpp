// The CPU analogue of MOMO's Fig. 4 ("Measure Once, Mask Once: Delta Refined Block Sparse
// Attention", Section 4.2): the fused pass's time against k = 16, 32, ..., 1024 for each online
// top-k selector, and the attention mass each one's choice captures relative to the exact
// top-512 (the paper's k = k_exact = 512).
//
// The fused pass is the query-sparse pass at gamma = 16 (every 16th row and the last, against
// all its causal keys) with each sampled row's selector fed through BlockSelectObserver, as
// momo runs it, on the `text` workload (2 heads, d 128, f32, causal, 2 threads), K/V packed once
// outside the timing. Blocks of beta = 64 keys and none forced: every causal block is a
// candidate. The hybrid keeps 8 exact slots (the paper's 128/8). kind:-1 is the plain
// query-sparse pass without observer; kind:-2 the pass with an observer that does nothing (the
// kernel's side of observing: each tile's per-row LSE, queued, and a virtual call per batch of
// tiles).
// overhead_pct: the fused pass's time over the plain pass's, less 1, the plain pass timed
// round-robin with it (one plain run before each fused run); cpu_overhead_pct: the same with
// the process's CPU time (all threads), which a core taken by another process moves less.
//
// mass: per sampled row with more causal blocks than 512, the softmax mass of the blocks kept
// (sum of exp(S(j) - LSE_row)) over that of the exact top-512, averaged over those rows (rows
// with fewer blocks keep everything at k = 512). mass_abs: the mean mass kept over every
// sampled row.
//
// ObserverReplay: the observer's own work, free of the pass's timing noise. The observe_tiles()
// calls of one observed pass at gamma = 16 (batches of each strip's per-tile LSE) are recorded
// once, then replayed on one thread into a fresh BlockSelectObserver, timed round-robin with
// the plain pass. replay_pct: the replay's time over the plain pass's CPU time (its wall time times the
// threads it ran on), i.e. the share of the pass the observer's selection work adds when spread
// over the same threads. It leaves out what the kernel does for the observer (each tile's
// per-row LSE, the virtual call per batch), which the fused benchmark's overhead_pct includes.
// Run: build/bin/spattn_microbench --benchmark_filter='FusedSelect/seq:131072'
//      build/bin/spattn_microbench --benchmark_filter='ObserverReplay'
#include <benchmark/benchmark.h>

#include <chrono>
#include <ctime>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <optional>
#include <vector>

#include "spattn/packed_kv.hpp"
#include "spattn/select_observer.hpp"
#include "spattn/sparse_attention.hpp"
#include "spattn/workload.hpp"

namespace spattn::bench {
namespace {

constexpr int64_t kHeads = 2, kDim = 128, kGamma = 16, kBeta = 64;
constexpr int kRefK = 512, kHybridExact = 8;

AttnOptions options() {
  AttnOptions opt;
  opt.check_finite = false;  // time the pass, not the input scan
  return opt;
}

struct Inputs {
  Workload w;
  PackedKV packed;
  std::vector<int64_t> rows;
  std::vector<ForcedBlocks> forced;  // one query block, nothing forced
  Tensor og;
  std::vector<float> lse;
  std::vector<double> ref_mass;  // per (head, sampled row): mass of the exact top-512

  explicit Inputs(int64_t seq)
      : w(make_workload(config(seq))),
        packed(PackedKV::pack(w.k, w.v, 0, 0)),
        rows(strided_rows(seq, kGamma)),
        forced{ForcedBlocks{0, INT64_MAX, INT64_MAX}},
        og(DType::f32, kHeads, int64_t(rows.size()), kDim),
        lse(size_t(kHeads) * rows.size()) {
    std::unique_ptr<BlockSelectObserver> ref = run(TopKKind::exact, kRefK);
    ref_mass = masses(*ref);
  }
  static WorkloadConfig config(int64_t seq) {
    WorkloadConfig c;
    c.seq = seq, c.heads = kHeads, c.dim = kDim;
    return c;
  }
  std::unique_ptr<BlockSelectObserver> run(TopKKind kind, int k) {
    TopKParams p;
    p.kind = kind, p.k = k, p.k_exact = std::min(kHybridExact, k);
    const int64_t L = w.q.seq();
    auto obs = std::make_unique<BlockSelectObserver>(kHeads, rows, L, L, kBeta, forced, L, p);
    attention_query_sparse(w.q, packed, rows, og, options(), lse.data(), obs.get());
    return obs;
  }
  std::vector<double> masses(const BlockSelectObserver& obs) const {
    std::vector<double> m;
    std::vector<BlockScore> sel;
    for (int64_t h = 0; h < kHeads; ++h)
      for (size_t r = 0; r < rows.size(); ++r) {
        obs.result(h, int64_t(r), sel);
        const double row_lse = lse[size_t(h) * rows.size() + r];
        double sum = 0;
        for (const BlockScore& b : sel) sum += std::exp(double(b.score) - row_lse);
        m.push_back(sum);
      }
    return m;
  }
};

Inputs& inputs(int64_t seq) {
  static std::map<int64_t, std::unique_ptr<Inputs>> cache;
  auto& slot = cache[seq];
  if (!slot) slot = std::make_unique<Inputs>(seq);
  return *slot;
}

// An observer that does nothing: the pass with it costs what the kernel does for any observer
// (each tile's per-row LSE, the virtual call per batch of tiles) and no selection.
struct NullObserver final : BlockLseObserver {
  void observe(int64_t, int64_t, int64_t, int64_t, const float*) override {}
};

// CPU time of this process (every thread), for overheads that a core lost to another process
// during one of the two passes moves less than it moves wall time.
double process_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

void BM_FusedSelect(benchmark::State& state) {
  Inputs& in = inputs(state.range(0));
  const int kind = int(state.range(1)), k = int(state.range(2));
  if (kind == -1) {
    for (auto _ : state)
      attention_query_sparse(in.w.q, in.packed, in.rows, in.og, options(), in.lse.data());
    return;
  }
  // The plain pass round-robin with the fused one (outside the timed region), so that the
  // overhead is a ratio within this benchmark, free of the machine's drift between benchmarks.
  std::unique_ptr<BlockSelectObserver> obs;
  NullObserver null_observer;
  double plain_s = 0, fused_s = 0, plain_cpu = 0, fused_cpu = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const double c0 = process_cpu_s();
    const auto t0 = std::chrono::steady_clock::now();
    attention_query_sparse(in.w.q, in.packed, in.rows, in.og, options(), in.lse.data());
    const auto t1 = std::chrono::steady_clock::now();
    const double c1 = process_cpu_s();
    state.ResumeTiming();
    if (kind == -2)
      attention_query_sparse(in.w.q, in.packed, in.rows, in.og, options(), in.lse.data(),
                             &null_observer);
    else
      obs = in.run(TopKKind(kind), k);
    const auto t2 = std::chrono::steady_clock::now();
    const double c2 = process_cpu_s();
    plain_s += std::chrono::duration<double>(t1 - t0).count();
    fused_s += std::chrono::duration<double>(t2 - t1).count();
    plain_cpu += c1 - c0;
    fused_cpu += c2 - c1;
  }
  state.counters["overhead_pct"] = 100.0 * (fused_s / plain_s - 1.0);
  state.counters["cpu_overhead_pct"] = 100.0 * (fused_cpu / plain_cpu - 1.0);
  if (kind == -2) return;
  const std::vector<double> m = in.masses(*obs);
  double rel = 0, abs = 0;
  int64_t long_rows = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    abs += m[i];
    const int64_t row = in.rows[i % in.rows.size()];
    if ((row + kBeta) / kBeta > kRefK) rel += m[i] / in.ref_mass[i], ++long_rows;
  }
  state.counters["mass"] = long_rows ? rel / double(long_rows) : 1.0;
  state.counters["mass_abs"] = abs / double(m.size());
}

// Every observe_tiles() call of a pass, in the order they came (each strip's in tile order).
struct Recorder final : BlockLseObserver {
  struct Call {
    int64_t h, row_begin, rows, tiles;
    size_t at, blocks_at;  // into lse (tiles x rows) and key_blocks (tiles)
  };
  std::mutex mu;
  std::vector<Call> calls;
  std::vector<float> lse;
  std::vector<int64_t> key_blocks;
  void observe(int64_t h, int64_t row_begin, int64_t rows, int64_t key_block,
               const float* block_lse) override {
    observe_tiles(h, row_begin, rows, &key_block, 1, block_lse, rows);
  }
  void observe_tiles(int64_t h, int64_t row_begin, int64_t rows, const int64_t* blocks,
                     int64_t tiles, const float* block_lse, int64_t stride) override {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back({h, row_begin, rows, tiles, lse.size(), key_blocks.size()});
    for (int64_t t = 0; t < tiles; ++t) {
      lse.insert(lse.end(), block_lse + t * stride, block_lse + t * stride + rows);
      key_blocks.push_back(blocks[t]);
    }
  }
};

Recorder& recorded(int64_t seq) {
  static std::map<int64_t, std::unique_ptr<Recorder>> cache;
  auto& slot = cache[seq];
  if (!slot) {
    Inputs& in = inputs(seq);
    slot = std::make_unique<Recorder>();
    attention_query_sparse(in.w.q, in.packed, in.rows, in.og, options(), in.lse.data(), slot.get());
  }
  return *slot;
}

void BM_ObserverReplay(benchmark::State& state) {
  const int64_t seq = state.range(0);
  Inputs& in = inputs(seq);
  const Recorder& rec = recorded(seq);
  TopKParams p;
  p.kind = TopKKind(state.range(1)), p.k = int(state.range(2));
  p.k_exact = std::min(kHybridExact, p.k);
  double plain_s = 0, replay_s = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const auto t0 = std::chrono::steady_clock::now();
    attention_query_sparse(in.w.q, in.packed, in.rows, in.og, options(), in.lse.data());
    const auto t1 = std::chrono::steady_clock::now();
    BlockSelectObserver obs(kHeads, in.rows, seq, seq, kBeta, in.forced, seq, p);
    state.ResumeTiming();
    const auto t2 = std::chrono::steady_clock::now();
    for (const Recorder::Call& c : rec.calls)
      obs.observe_tiles(c.h, c.row_begin, c.rows, rec.key_blocks.data() + c.blocks_at, c.tiles,
                        rec.lse.data() + c.at, c.rows);
    const auto t3 = std::chrono::steady_clock::now();
    plain_s += std::chrono::duration<double>(t1 - t0).count();
    replay_s += std::chrono::duration<double>(t3 - t2).count();
  }
  const double threads = std::max(1u, std::thread::hardware_concurrency());
  state.counters["replay_pct"] = 100.0 * replay_s / (plain_s * threads);
}

void replay_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"seq", "kind", "k"});
  for (int kind = 0; kind < 4; ++kind)
    for (int k : {16, 128, 1024}) b->Args({131072, kind, k});
}

BENCHMARK(BM_ObserverReplay)
    ->Apply(replay_args)
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"seq", "kind", "k"});
  for (int64_t seq : {32768, 131072}) {
    b->Args({seq, -1, 0});
    b->Args({seq, -2, 0});
    for (int kind = 0; kind < 4; ++kind)  // TopKKind: exact, tree, estimate, hybrid
      for (int k = 16; k <= 1024; k *= 2) b->Args({seq, kind, k});
  }
}

BENCHMARK(BM_FusedSelect)->Apply(args)->Iterations(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace spattn::bench
