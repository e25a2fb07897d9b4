// Decode micro-benchmarks: one new query (q_len 1) against a long KV cache, where reading the
// cache is the whole cost. Compared with
//   - ReadKV: summing the same K and V bytes on the same threads (the bandwidth ceiling),
//   - the prefill kernel (attention_dense) on the same inputs,
//   - BLASST decode at several lambdas (skipped V blocks are never read).
// Inputs are the structured "text" workload (RoPE, sinks, local windows, heavy hitters), so
// the skip fractions are those of a realistic attention pattern, not of noise.
// Run with --benchmark_repetitions=N --benchmark_report_aggregates_only=true for medians.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <tuple>
#include <vector>

#include "bench_common.hpp"
#include "core/threading.hpp"
#include "spattn/attention.hpp"
#include "spattn/decode.hpp"
#include "spattn/kv_type.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/quest.hpp"
#include "spattn/workload.hpp"

namespace spattn::bench {
namespace {

// Args: {kv_len, q heads, kv heads, bf16 (0: f32)}; head dim 128, q_len 1. One input set is
// kept at a time (up to 256 MiB).
const Workload& inputs(const benchmark::State& state) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;
  static std::map<Key, std::unique_ptr<Workload>> cache;
  const Key key{state.range(0), state.range(1), state.range(2), state.range(3)};
  auto& w = cache[key];
  if (!w) {
    cache.clear();  // one cache of up to 256 MiB at a time
    WorkloadConfig cfg;
    cfg.kind = WorkloadKind::text;
    cfg.seq = state.range(0);
    cfg.q_len = 1;
    cfg.heads = state.range(1);
    cfg.kv_heads = state.range(2);
    cfg.dim = 128;
    cfg.dtype = state.range(3) == 0 ? DType::f32 : DType::bf16;
    cfg.seed = 7;
    cache[key] = std::make_unique<Workload>(make_workload(cfg));
    return *cache[key];
  }
  return *w;
}

double kv_bytes(const Workload& w) { return 2.0 * double(w.k.nbytes()); }

void set_bandwidth(benchmark::State& state, double bytes_per_iteration) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iteration * double(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// The ceiling: every thread sums 64-bit words of its share of K and V (read-only traffic).
void BM_ReadKV(benchmark::State& state) {
  const Workload& w = inputs(state);
  const int threads = resolve_threads(0);
  const uint64_t* parts[2] = {w.k.data_as<const uint64_t>(), w.v.data_as<const uint64_t>()};
  const int64_t words = int64_t(w.k.nbytes() / 8);
  constexpr int64_t kChunk = 1 << 16;  // words per item (512 KiB)
  const int64_t chunks = (words + kChunk - 1) / kChunk;
  std::vector<uint64_t> sums(static_cast<size_t>(threads), 0);
  for (auto _ : state) {
    parallel_for(2 * chunks, threads, [&](int64_t item, int tid) {
      const uint64_t* p = parts[item / chunks] + (item % chunks) * kChunk;
      const int64_t n = std::min(kChunk, words - (item % chunks) * kChunk);
      uint64_t a = 0, b = 0, c = 0, d = 0;
      for (int64_t i = 0; i + 4 <= n; i += 4) {
        a += p[i];
        b += p[i + 1];
        c += p[i + 2];
        d += p[i + 3];
      }
      sums[size_t(tid)] += a + b + c + d;
    });
    benchmark::DoNotOptimize(sums.data());
  }
  set_bandwidth(state, kv_bytes(w));
}

// memcpy of the same bytes (reads K and V, writes as much again).
void BM_CopyKV(benchmark::State& state) {
  const Workload& w = inputs(state);
  const int threads = resolve_threads(0);
  const size_t bytes = w.k.nbytes();
  std::unique_ptr<char[]> dst(new char[2 * bytes]);
  std::memset(dst.get(), 1, 2 * bytes);
  const char* src[2] = {static_cast<const char*>(w.k.data()), static_cast<const char*>(w.v.data())};
  constexpr size_t kChunk = 1 << 19;
  const int64_t chunks = int64_t((bytes + kChunk - 1) / kChunk);
  for (auto _ : state) {
    parallel_for(2 * chunks, threads, [&](int64_t item, int) {
      const size_t off = size_t(item % chunks) * kChunk, n = std::min(kChunk, bytes - off);
      std::memcpy(dst.get() + size_t(item / chunks) * bytes + off, src[item / chunks] + off, n);
    });
    benchmark::DoNotOptimize(dst.get());
  }
  set_bandwidth(state, kv_bytes(w));  // bytes read, as for the kernels
}

// The prefill kernel on the same decode inputs (it packs K and V every call).
void BM_PrefillKernelOnDecode(benchmark::State& state) {
  const Workload& w = inputs(state);
  Tensor out(DType::f32, w.q.heads(), 1, w.q.dim());
  AttnOptions opt;
  opt.check_finite = false;
  for (auto _ : state) {
    attention_dense(w.q, w.k, w.v, out, opt);
    benchmark::DoNotOptimize(out.data());
  }
  set_bandwidth(state, kv_bytes(w));
}

// Extra arg: lambda as 10^-range(4) (range(4) == 0: lambda = 0, dense decode).
void BM_Decode(benchmark::State& state) {
  const Workload& w = inputs(state);
  Tensor out(DType::f32, w.q.heads(), 1, w.q.dim());
  AttnOptions opt;
  opt.check_finite = false;
  DecodeOptions dopt;
  dopt.lambda = state.range(4) == 0 ? 0.0 : std::pow(10.0, -double(state.range(4)));
  Stats st;
  for (auto _ : state) {
    st = Stats{};
    attention_decode(w.q, w.k, w.v, out, opt, dopt, nullptr, &st);
    benchmark::DoNotOptimize(out.data());
  }
  const double skipped = st.tiles_visited ? double(st.tiles_skipped) / double(st.tiles_visited) : 0;
  state.counters["skipped"] = skipped;
  // Bytes really read: all of K, the V blocks that were kept.
  set_bandwidth(state, double(w.k.nbytes()) * (2.0 - skipped));
  state.counters["KV_GB/s"] =
      benchmark::Counter(kv_bytes(w) * double(state.iterations()), benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1000);
}

// Decode over a PackedKV (the model runner's cache) stored as each KV cache type (-ctk / -ctv):
// extra arg range(4) indexes f32, f16, bf16, q8_0, range(5) is the thread count. Inputs are
// f32; the cache rounds them.
void BM_DecodeCacheType(benchmark::State& state) {
  const Workload& w = inputs(state);
  static const KVType types[] = {KVType::f32, KVType::f16, KVType::bf16, KVType::q8_0};
  const KVType t = types[state.range(4)];
  // One cache at a time, packed once per argument set.
  static std::vector<int64_t> key;
  static std::unique_ptr<PackedKV> kv;
  const std::vector<int64_t> args = {state.range(0), state.range(1), state.range(2), state.range(3),
                                     state.range(4)};
  if (key != args) {
    kv.reset();
    kv = std::make_unique<PackedKV>(PackedKV::pack(w.k, w.v, 0, 0, true, t, t));
    key = args;
  }
  const PackedKV& c = *kv;
  Tensor out(DType::f32, w.q.heads(), 1, w.q.dim());
  AttnOptions opt;
  opt.check_finite = false;
  opt.threads = int(state.range(5));
  for (auto _ : state) {
    attention_decode(w.q, c, out, opt);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(kv_type_name(t));
  state.counters["cache_MB"] = double(c.bytes()) / 1e6;
  set_bandwidth(state, double(c.bytes()));
}

// Quest decode over a PackedKV stored as range(4) (as BM_DecodeCacheType), range(5) threads,
// range(6) the page size with a budget of 2,048 keys (128 pages of 16, 32 of 64; 0: dense decode
// of the same cache, the baseline), range(7) 1: the pages' selection only, 0: selection and
// attention. An iteration is one step of kQuestLayers layers, each its own copy of the cache
// and summaries, as a model's decode step visits them: dense decode's bytes come from memory,
// not from a cache the previous iteration left warm (one layer's 32K f16 cache, 32 MiB, about
// fits an L3). Quest's are fewer (six layers' 2,048 keys and summaries: 25 MB) and would stay
// warm from one iteration to the next, as they do not in a model, whose weights and dense
// layers stream between two steps: range(8) 1 (cold) reads 64 MiB of other memory before each
// step, untimed, so Quest's pages come from memory as they do in the runner. Times are per
// layer.
constexpr int kQuestLayers = 6;
void BM_QuestDecode(benchmark::State& state) {
  const Workload& w = inputs(state);
  static const KVType types[] = {KVType::f32, KVType::f16, KVType::bf16, KVType::q8_0};
  const KVType t = types[state.range(4)];
  static std::vector<int64_t> key;
  static std::vector<std::unique_ptr<PackedKV>> kv;
  static std::vector<std::unique_ptr<QuestPages>> pages;
  const std::vector<int64_t> args = {state.range(0), state.range(1), state.range(2), state.range(3),
                                     state.range(4), state.range(6), state.range(9)};
  if (key != args) {
    kv.clear();
    pages.clear();
    for (int l = 0; l < kQuestLayers; ++l) {
      kv.push_back(std::make_unique<PackedKV>(PackedKV::pack(w.k, w.v, 0, 0, true, t, t)));
      pages.push_back(std::make_unique<QuestPages>(
          w.k.heads(), w.k.dim(), std::max<int64_t>(16, state.range(6)), w.k.seq(), t,
          state.range(9) ? QuestSums::i8 : QuestSums::cache));
      pages.back()->append(w.k);
    }
    key = args;
  }
  QuestParams qp;
  qp.page = std::max<int64_t>(16, state.range(6));
  qp.topk = 2048 / qp.page;
  qp.est = state.range(10) ? QuestEstimate::gauss : QuestEstimate::bound;  // what est= costs
  const bool dense = state.range(6) == 0;
  Tensor out(DType::f32, w.q.heads(), 1, w.q.dim());
  AttnOptions opt;
  opt.check_finite = false;
  opt.threads = int(state.range(5));
  QuestDecodeStats qs;
  static std::vector<float> other;
  if (state.range(8) && other.empty()) other.assign(size_t(16) << 20, 1.0f);  // 64 MiB
  for (auto _ : state) {
    if (state.range(8)) {
      state.PauseTiming();
      benchmark::DoNotOptimize(std::accumulate(other.begin(), other.end(), 0.0f));
      state.ResumeTiming();
    }
    for (int l = 0; l < kQuestLayers; ++l) {
      if (dense) {
        attention_decode(w.q, *kv[size_t(l)], out, opt);
        benchmark::DoNotOptimize(out.data());
      } else if (state.range(7)) {
        const auto ranges = quest_select(w.q, *pages[size_t(l)], qp, softmax_scale(opt, w.q.dim()),
                                         &qs, opt.threads);
        benchmark::DoNotOptimize(ranges.data());
      } else {
        quest_decode(w.q, *kv[size_t(l)], *pages[size_t(l)], qp, out, opt, nullptr, nullptr, &qs);
        benchmark::DoNotOptimize(out.data());
      }
    }
  }
  state.SetLabel(kv_type_name(t));
  state.counters["keys_read"] = double(qs.keys_read) / double(std::max<int64_t>(1, qs.keys_total));
  state.counters["ms_per_layer"] =
      benchmark::Counter(double(state.iterations()) * kQuestLayers,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void quest_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames(
      {"kv", "hq", "hkv", "bf16", "type", "threads", "page", "select_only", "cold", "i8", "gauss"});
  for (int64_t kv : {16384, 32768})
    for (int64_t page : {0, 16, 64})
      for (int64_t sel : {0, 1})
        for (int64_t cold : {0, 1})
          for (int64_t i8 : {0, 1})       // quest:sums=i8 (page 16 only)
            for (int64_t gauss : {0, 1})  // quest:est=gauss (the choice alone, 32K, cold)
              if ((page > 0 || sel == 0) && (cold == 0 || kv == 32768) && (i8 == 0 || page == 16) &&
                  (gauss == 0 || (sel && cold && page == 16)))
                b->Args({kv, 4, 2, 0, 1, 2, page, sel, cold, i8, gauss});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

// {kv_len, q heads, kv heads, dtype}: MHA-like 8/8 and GQA 32/8, 32K keys, f32 and bf16.
void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"kv", "hq", "hkv", "bf16"});
  for (int64_t bf16 : {1, 0})
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{8, 8}, {32, 8}})
      b->Args({32768, hq, hkv, bf16});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

void decode_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"kv", "hq", "hkv", "bf16", "neglog10_lambda"});
  for (int64_t bf16 : {1, 0})
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{8, 8}, {32, 8}})
      for (int64_t lam : {0, 8, 6, 5, 4, 3, 2, 1}) b->Args({32768, hq, hkv, bf16, lam});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

// {kv_len, q heads, kv heads, 0 (f32 inputs), cache type}: code-small-32k's attention at 16K
// (4 / 2 heads) and Llama-3.1-8B's GQA (32 / 8).
void cache_type_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"kv", "hq", "hkv", "bf16", "type", "threads"});
  for (int64_t threads : {1, 2})
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 2}, {32, 8}})
      for (int64_t t : {0, 1, 2, 3}) b->Args({16384, hq, hkv, 0, t, threads});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_DecodeCacheType)->Apply(cache_type_shapes);
BENCHMARK(BM_QuestDecode)->Apply(quest_shapes);
BENCHMARK(BM_ReadKV)->Apply(shapes);
BENCHMARK(BM_CopyKV)->Apply(shapes);
BENCHMARK(BM_PrefillKernelOnDecode)->Apply(shapes);
BENCHMARK(BM_Decode)->Apply(decode_shapes);

}  // namespace
}  // namespace spattn::bench
