// Kernel micro-benchmarks: the dense kernel at the sizes long-context work starts at, the
// exact merge of partial results, and the reference (at a tiny size, for scale).
#include <benchmark/benchmark.h>

#include <vector>

#include "bench_common.hpp"
#include "spattn/attention.hpp"
#include "spattn/merge.hpp"

namespace spattn::bench {
namespace {

constexpr int64_t kHeads = 2;

// Args: {seq, dim}. Causal prefill, q_len == kv_len, all threads.
template <DType kType>
void BM_DenseCausal(benchmark::State& state) {
  const int64_t seq = state.range(0), dim = state.range(1);
  const Tensor q = filled_tensor(kType, kHeads, seq, dim, 1);
  const Tensor k = filled_tensor(kType, kHeads, seq, dim, 2);
  const Tensor v = filled_tensor(kType, kHeads, seq, dim, 3);
  const Tensor out(kType, kHeads, seq, dim);
  AttnOptions opt;
  opt.check_finite = false;  // time the kernel, not the input scan
  Stats stats;
  const LoopTimer timer;
  for (auto _ : state) {
    stats = Stats{};
    attention_dense(q, k, v, out, opt, nullptr, &stats);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * stats.score_entries);  // score entries/s
  report_flops(state, stats.flops, timer.seconds(), kType);
}

void dense_sizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"seq", "dim"});
  for (int64_t seq : {1024, 4096})
    for (int64_t dim : {64, 128}) b->Args({seq, dim});
  b->Unit(benchmark::kMillisecond)->UseRealTime();  // threaded: wall time is what counts
}
BENCHMARK(BM_DenseCausal<DType::f32>)->Apply(dense_sizes);
BENCHMARK(BM_DenseCausal<DType::bf16>)->Apply(dense_sizes);

// Args: {seq, window}. A sliding window's band (Gemma 3's local layers; window 0: the causal
// triangle) at head dim 256, 2 heads, f32, q_len == kv_len: the kernel alone, against the
// model runner's per-layer times (BENCHMARKS.md, issue 21). Each call packs its K/V first:
// window 1 (each row its own key) times mostly that.
void BM_DenseWindow(benchmark::State& state) {
  const int64_t seq = state.range(0), dim = 256;
  const Tensor q = filled_tensor(DType::f32, kHeads, seq, dim, 1);
  const Tensor k = filled_tensor(DType::f32, kHeads, seq, dim, 2);
  const Tensor v = filled_tensor(DType::f32, kHeads, seq, dim, 3);
  const Tensor out(DType::f32, kHeads, seq, dim);
  AttnOptions opt;
  opt.check_finite = false;
  opt.window = state.range(1);
  Stats stats;
  const LoopTimer timer;
  for (auto _ : state) {
    stats = Stats{};
    attention_dense(q, k, v, out, opt, nullptr, &stats);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * stats.score_entries);
  report_flops(state, stats.flops, timer.seconds(), DType::f32);
}
BENCHMARK(BM_DenseWindow)
    ->ArgNames({"seq", "window"})
    ->Args({16384, 1})
    ->Args({16384, 256})
    ->Args({16384, 1024})
    ->Args({16384, 4096})
    ->Args({16384, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: {heads, seq, dim}. Merges two f32 partial results into a third buffer.
void BM_MergeAttention(benchmark::State& state) {
  const int64_t heads = state.range(0), seq = state.range(1), dim = state.range(2);
  const Tensor a = filled_tensor(DType::f32, heads, seq, dim, 4);
  const Tensor b = filled_tensor(DType::f32, heads, seq, dim, 5);
  const Tensor out(DType::f32, heads, seq, dim);
  std::vector<float> lse_a(size_t(heads * seq), 1.5f), lse_b(size_t(heads * seq), 0.5f),
      lse_out(size_t(heads * seq));
  for (auto _ : state) {
    merge_attention(a, lse_a.data(), b, lse_b.data(), out, lse_out.data());
    benchmark::DoNotOptimize(out.data());
  }
  // Reads a, b and their LSEs, writes out and its LSE.
  const int64_t bytes = 3 * heads * seq * dim * 4 + 3 * heads * seq * 4;
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetItemsProcessed(state.iterations() * heads * seq);  // rows/s
}
BENCHMARK(BM_MergeAttention)
    ->ArgNames({"heads", "seq", "dim"})
    ->Args({8, 4096, 128})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Args: {seq, dim}. The double-precision reference, one head: what the fast kernel is 100x+
// faster than.
void BM_Reference(benchmark::State& state) {
  const int64_t seq = state.range(0), dim = state.range(1);
  const Tensor q = filled_tensor(DType::f32, 1, seq, dim, 6);
  const Tensor k = filled_tensor(DType::f32, 1, seq, dim, 7);
  const Tensor v = filled_tensor(DType::f32, 1, seq, dim, 8);
  const Tensor out(DType::f32, 1, seq, dim);
  AttnOptions opt;
  opt.check_finite = false;
  const LoopTimer timer;
  for (auto _ : state) {
    attention_reference(q, k, v, out, opt);
    benchmark::DoNotOptimize(out.data());
  }
  const int64_t entries = attention_entries(seq, seq, true);
  state.SetItemsProcessed(state.iterations() * entries);
  report_flops(state, 4.0 * double(dim) * double(entries), timer.seconds());
}
BENCHMARK(BM_Reference)
    ->ArgNames({"seq", "dim"})
    ->Args({256, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();  // like the others, so FLOP/s and %peak use the same clock

}  // namespace
}  // namespace spattn::bench
