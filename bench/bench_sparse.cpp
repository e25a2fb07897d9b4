// Sparse kernel efficiency against the dense kernel on the same inputs, in one process:
//   block-sparse: time per computed score entry over dense's time per entry, at random block
//                 masks of a given density (the diagonal block always kept), with K/V packed
//                 inside the call or packed once and reused;
//   query-sparse: time at query stride gamma over dense time;
//   vertical-slash: time per computed entry over dense's on the `text` workload, the kernel
//                   alone (index built once) and with the index built in every call.
// Run: build/bin/spattn_microbench --benchmark_filter='Sparse|VerticalSlash'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_common.hpp"
#include "spattn/attention.hpp"
#include "spattn/masks.hpp"
#include "spattn/method.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/sparse_attention.hpp"
#include "spattn/workload.hpp"

namespace spattn::bench {
namespace {

constexpr int64_t kHeads = 2, kDim = 128;

struct Inputs {
  int64_t seq;
  Tensor q, k, v, out;
  explicit Inputs(int64_t s)
      : seq(s),
        q(filled_tensor(DType::f32, kHeads, s, kDim, 1)),
        k(filled_tensor(DType::f32, kHeads, s, kDim, 2)),
        v(filled_tensor(DType::f32, kHeads, s, kDim, 3)),
        out(DType::f32, kHeads, s, kDim) {}
};

AttnOptions fast_options() {
  AttnOptions opt;
  opt.check_finite = false;  // time kernels, not the input scan
  return opt;
}

// Medians of `reps` rounds, each timing a() then b() back to back, so drift in the machine's
// speed lands on both alike.
template <class A, class B>
std::pair<double, double> round_robin(int reps, A a, B b) {
  std::vector<double> ta, tb;
  for (int r = 0; r < reps; ++r) {
    LoopTimer t0;
    a();
    ta.push_back(t0.seconds());
    LoopTimer t1;
    b();
    tb.push_back(t1.seconds());
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

BlockMask random_mask(int64_t seq, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  const int64_t nb = (seq + 63) / 64;
  std::vector<std::vector<int32_t>> lists;
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t qb = 0; qb < nb; ++qb) {
      std::vector<int32_t> row;
      for (int64_t kb = 0; kb < qb; ++kb)
        if (u(rng) < density) row.push_back(int32_t(kb));
      row.push_back(int32_t(qb));
      lists.push_back(row);
    }
  return BlockMask::from_lists(kHeads, seq, seq, 64, 64, true, lists);
}

// Args: {seq, density in percent, reuse}. reuse = 1 reads a PackedKV built once (as a KV cache
// or a method's second pass does); reuse = 0 packs K and V inside every call. Dense and
// block-sparse are timed round-robin, 3 rounds (the benchmark's own iteration is one round).
void BM_SparseBlockVsDense(benchmark::State& state) {
  const Inputs in(state.range(0));
  const BlockMask mask = random_mask(in.seq, double(state.range(1)) / 100.0, 7);
  const bool reuse = state.range(2) != 0;
  const PackedKV packed = PackedKV::pack(in.k, in.v);
  Stats dense_st, sparse_st;
  auto dense = [&] {
    dense_st = Stats{};
    attention_dense(in.q, in.k, in.v, in.out, fast_options(), nullptr, &dense_st);
  };
  auto sparse = [&] {
    sparse_st = Stats{};
    if (reuse)
      attention_block_sparse(in.q, packed, in.out, mask, fast_options(), nullptr, &sparse_st);
    else
      attention_block_sparse(in.q, in.k, in.v, in.out, mask, fast_options(), nullptr, &sparse_st);
  };
  double dense_s = 0, sparse_s = 0;
  for (auto _ : state) {
    std::tie(dense_s, sparse_s) = round_robin(3, dense, sparse);
    benchmark::DoNotOptimize(in.out.data());
  }
  state.counters["density"] = 1.0 - sparse_st.sparsity();
  state.counters["dense_ms"] = dense_s * 1e3;
  state.counters["sparse_ms"] = sparse_s * 1e3;
  state.counters["speedup"] = dense_s / sparse_s;
  // Time per computed entry over dense's: 1.0 means no sparse overhead per block.
  state.counters["per_block_vs_dense"] =
      (sparse_s / double(sparse_st.score_entries)) / (dense_s / double(dense_st.score_entries));
}
BENCHMARK(BM_SparseBlockVsDense)
    ->ArgNames({"seq", "density_pct", "reuse"})
    ->Args({32768, 5, 1})
    ->Args({32768, 5, 0})
    ->Args({32768, 10, 1})
    ->Args({32768, 20, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);

// Args: {seq, gamma, reuse}: reuse = 1 reads a PackedKV built once (MOMO's two passes share
// one). Dense and query-sparse are timed round-robin, 5 rounds.
void BM_SparseQueryVsDense(benchmark::State& state) {
  const Inputs in(state.range(0));
  const std::vector<int64_t> rows = strided_rows(in.seq, state.range(1));
  const bool reuse = state.range(2) != 0;
  const PackedKV packed = PackedKV::pack(in.k, in.v);
  const Tensor out(DType::f32, kHeads, int64_t(rows.size()), kDim);
  auto dense = [&] { attention_dense(in.q, in.k, in.v, in.out, fast_options()); };
  auto sparse = [&] {
    if (reuse)
      attention_query_sparse(in.q, packed, rows, out, fast_options());
    else
      attention_query_sparse(in.q, in.k, in.v, rows, out, fast_options());
  };
  double dense_s = 0, sparse_s = 0;
  for (auto _ : state) {
    std::tie(dense_s, sparse_s) = round_robin(5, dense, sparse);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["dense_ms"] = dense_s * 1e3;
  state.counters["sparse_ms"] = sparse_s * 1e3;
  state.counters["time_vs_dense"] = sparse_s / dense_s;  // target <= 1/12 = 0.083 at gamma 16
}
BENCHMARK(BM_SparseQueryVsDense)
    ->ArgNames({"seq", "gamma", "reuse"})
    ->Args({32768, 16, 1})
    ->Args({32768, 16, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);

// Args: {seq, bf16}. vertical_slash's default index (vertical 1000, slash 2048, sink 30, local
// 100) on the `text` workload; dense, the kernel alone and the index's estimate timed
// round-robin with the method's whole run() as `spattn bench` times it (estimate, kernel and
// report), 3 rounds. per_entry_* is time per computed entry over dense's: of the kernel, of
// kernel + estimate, and of run() (the bound is 1.25).
void BM_VerticalSlashVsDense(benchmark::State& state) {
  WorkloadConfig wc;
  wc.kind = WorkloadKind::text;
  wc.seq = state.range(0);
  wc.heads = kHeads;
  wc.dim = kDim;
  wc.dtype = state.range(1) ? DType::bf16 : DType::f32;
  const Workload w = make_workload(wc);
  const Tensor out(DType::f32, kHeads, wc.seq, kDim);
  const VerticalSlashConfig cfg;
  VerticalSlashIndex index = vertical_slash_index(w.q, w.k, cfg, fast_options());
  Stats dense_st, vs_st;
  const std::unique_ptr<Method> method = make_method("vertical_slash");
  MethodReport report;
  std::vector<double> td, tk, te, tr;
  for (auto _ : state) {
    for (int r = 0; r < 3; ++r) {
      LoopTimer t0;
      dense_st = Stats{};
      attention_dense(w.q, w.k, w.v, out, fast_options(), nullptr, &dense_st);
      td.push_back(t0.seconds());
      LoopTimer t1;
      vs_st = Stats{};
      attention_vertical_slash(w.q, w.k, w.v, out, index, fast_options(), nullptr, &vs_st);
      tk.push_back(t1.seconds());
      LoopTimer t2;
      index = vertical_slash_index(w.q, w.k, cfg, fast_options());
      te.push_back(t2.seconds());
      LoopTimer t3;
      report = method->run(w.q, w.k, w.v, out, fast_options());
      tr.push_back(t3.seconds());
    }
    benchmark::DoNotOptimize(out.data());
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double dense_per = median(td) / double(dense_st.score_entries);
  const double entries = double(vs_st.score_entries);
  state.counters["density"] = 1.0 - vs_st.sparsity();
  // Entries kept over entries computed (whole 64-key tiles of tile_rows rows).
  state.counters["tile_fill"] =
      entries / (double(vs_st.tiles_visited) * 64.0 * double(cfg.tile_rows));
  state.counters["dense_ms"] = median(td) * 1e3;
  state.counters["kernel_ms"] = median(tk) * 1e3;
  state.counters["estimate_ms"] = median(te) * 1e3;
  state.counters["run_ms"] = median(tr) * 1e3;
  state.counters["per_entry_kernel"] = median(tk) / entries / dense_per;
  state.counters["per_entry_method"] = (median(tk) + median(te)) / entries / dense_per;
  state.counters["per_entry_run"] = median(tr) / entries / dense_per;
}
BENCHMARK(BM_VerticalSlashVsDense)
    ->ArgNames({"seq", "bf16"})
    ->Args({32768, 0})
    ->Args({32768, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);

}  // namespace
}  // namespace spattn::bench
