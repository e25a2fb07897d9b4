// Selector latency, the CPU analogue of MOMO's Fig. 4 (left): time per push for each online
// top-k selector at k = 16..1024 over rows of 512 blocks (a 32K-token row of 64-key blocks),
// a reset per row included. Scores: N(7, 2^2) in random order (LSE-like block scores), or
// ascending, where every push beats the current minimum (the exact selectors' worst case).
// The hybrid runs with 8 exact slots, as the paper's 128/8.
// Run: build/bin/spattn_microbench --benchmark_filter='Select'
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "spattn/select.hpp"

namespace spattn::bench {
namespace {

constexpr int kBlocks = 512, kRows = 16, kHybridExact = 8;

// kRows rows of kBlocks scores: random, or ascending (order = 1).
std::vector<float> scores(int order) {
  std::vector<float> s(size_t(kRows) * kBlocks);
  std::mt19937_64 rng(42);
  std::normal_distribution<float> lse(7.0f, 2.0f);
  for (size_t i = 0; i < s.size(); ++i) s[i] = order == 1 ? float(i % kBlocks) : lse(rng);
  return s;
}

template <class Sel, class Reset>
void time_rows(benchmark::State& state, Sel& sel, Reset reset) {
  const std::vector<float> s = scores(int(state.range(1)));
  int row = 0;
  for (auto _ : state) {
    reset(sel);
    const float* r = s.data() + size_t(row) * kBlocks;
    for (int j = 0; j < kBlocks; ++j) sel.push(j, r[j]);
    benchmark::DoNotOptimize(sel.size());
    row = (row + 1) % kRows;
  }
  // Time per push (reset included), in seconds with an SI prefix.
  state.counters["per_push"] =
      benchmark::Counter(double(state.iterations()) * kBlocks,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_SelectExact(benchmark::State& state) {
  ExactTopK sel(int(state.range(0)));
  time_rows(state, sel, [](ExactTopK& s) { s.reset(); });
}

void BM_SelectTree(benchmark::State& state) {
  TournamentTopK sel(int(state.range(0)));
  time_rows(state, sel, [](TournamentTopK& s) { s.reset(); });
}

void BM_SelectEstimate(benchmark::State& state) {
  EstimatedTopK sel(int(state.range(0)), kBlocks);
  time_rows(state, sel, [](EstimatedTopK& s) { s.reset(kBlocks); });
}

void BM_SelectHybrid(benchmark::State& state) {
  HybridTopK sel(int(state.range(0)), kHybridExact, kBlocks);
  time_rows(state, sel, [](HybridTopK& s) { s.reset(kBlocks); });
}

void ks(benchmark::internal::Benchmark* b) {
  b->ArgNames({"k", "ascending"});
  for (int order : {0, 1})
    for (int k = 16; k <= 1024; k *= 2) b->Args({k, order});
}

BENCHMARK(BM_SelectExact)->Apply(ks);
BENCHMARK(BM_SelectTree)->Apply(ks);
BENCHMARK(BM_SelectEstimate)->Apply(ks);
BENCHMARK(BM_SelectHybrid)->Apply(ks);

}  // namespace
}  // namespace spattn::bench
