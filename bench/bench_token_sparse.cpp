// Token-sparse attention (DSA's per-query tokens) at DeepSeek V3.2's absorbed shape: 128 q
// heads over one latent kv head, keys of 576 (latent 512 + rope 64), values the keys
// themselves (v_is_k: the runner's latent cache, K stored once as llama.cpp's MLA cache is) or,
// to compare, the latent then zeros stored as V tiles of their own (the layout before), a
// chunk of prefill rows or one decode row at the end of the cache, each row listing 2,048 of
// its causal keys (the indexer's top-k). Against the same kernel on the same cache with every
// row reading all its keys (dense on the same inputs), so the ratio shows what the gather costs
// per key.
// The lists are uniform draws (the worst case for a gather: keys scattered over every tile);
// real selections cluster around local and heavy keys.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "bench_common.hpp"
#include "methods/dsa.hpp"
#include "spattn/decode.hpp"
#include "spattn/kv_type.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/token_sparse.hpp"

namespace spattn::bench {
namespace {

constexpr int64_t kHeads = 128, kDim = 576, kLatent = 512, kTopK = 2048;

struct Inputs {
  Tensor q;
  std::unique_ptr<PackedKV> kv;
  TokenSelection listed, all;
};

// Args: {kv_len, rows, cache type (0 f32, 1 f16), listed (1) or all (0), threads, values
// stored (0) or the keys (1)}. One input set at a time.
const Inputs& inputs(const benchmark::State& state) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;
  static std::map<Key, std::unique_ptr<Inputs>> cache;
  const int64_t L = state.range(0), n = state.range(1);
  const Key key{L, n, state.range(2), state.range(5)};
  auto& slot = cache[key];
  if (slot) return *slot;
  cache.clear();
  auto in = std::make_unique<Inputs>();
  const Tensor k = filled_tensor(DType::f32, 1, L, kDim, 2);
  Tensor v = filled_tensor(DType::f32, 1, L, kDim, 3);
  for (int64_t j = 0; j < L; ++j)
    std::fill(v.data_as<float>() + j * kDim + kLatent, v.data_as<float>() + (j + 1) * kDim, 0.0f);
  const KVType t = state.range(2) == 0 ? KVType::f32 : KVType::f16;
  const bool v_is_k = state.range(5) != 0;
  in->kv = std::make_unique<PackedKV>(
      PackedKV::pack(k.view(), v_is_k ? k.view() : v.view(), 0, 0, false, t, t, v_is_k));
  in->q = filled_tensor(DType::f32, kHeads, n, kDim, 1);
  std::mt19937_64 rng(5);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t visible = L - n + i + 1;
    in->all.add_all();
    if (visible <= kTopK) {
      in->listed.add_all();
      continue;
    }
    std::vector<int64_t> keys(static_cast<size_t>(visible));
    std::iota(keys.begin(), keys.end(), int64_t(0));
    std::shuffle(keys.begin(), keys.end(), rng);
    keys.resize(size_t(kTopK));
    in->listed.add(std::move(keys));
  }
  cache[key] = std::move(in);
  return *cache[key];
}

void BM_TokenSparse(benchmark::State& state) {
  const Inputs& in = inputs(state);
  const int64_t L = state.range(0), n = state.range(1);
  const TokenSelection& sel = state.range(3) ? in.listed : in.all;
  Tensor out(DType::f32, kHeads, n, kDim);
  AttnOptions opt;
  opt.check_finite = false;
  opt.threads = int(state.range(4));
  opt.q_start = L - n;
  Stats stats;
  const LoopTimer timer;
  for (auto _ : state) {
    stats = Stats{};
    attention_token_sparse(in.q.view(), *in.kv, out.view(), sel, opt, nullptr, &stats);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * stats.score_entries);  // score entries/s
  report_flops(state, stats.flops, timer.seconds());
  state.SetLabel(std::string(state.range(2) ? "f16" : "f32") +
                 (state.range(3) ? " listed" : " all") + (state.range(5) ? " v=k" : " v stored"));
}

// The f32 cache with its values stored; the f16 one (the runner's default) both ways; a decode
// row at 32K both ways.
void args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"kv", "rows", "f16", "listed", "threads", "v_is_k"});
  for (int64_t L : {4096, 16384})
    for (int64_t listed : {0, 1}) {
      b->Args({L, 64, 0, listed, 2, 0});
      for (int64_t v_is_k : {0, 1}) b->Args({L, 64, 1, listed, 2, v_is_k});
    }
  for (int64_t v_is_k : {0, 1}) b->Args({32768, 1, 1, 1, 2, v_is_k});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_TokenSparse)->Apply(args);

// The same decode row over every key by dense decode (attention_decode: deepseek2's latent
// decode, and DSA's where the context is within the top-k): the 128 q heads of the one cached
// head in items of 64 rows, each key tile widened (and, where V is K, transposed) once an item.
void BM_LatentDecode(benchmark::State& state) {
  const Inputs& in = inputs(state);
  Tensor out(DType::f32, kHeads, 1, kDim);
  AttnOptions opt;
  opt.check_finite = false;
  opt.threads = int(state.range(4));
  for (auto _ : state) {
    attention_decode(in.q.view(), *in.kv, out.view(), opt);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(state.range(5) ? "f16 v=k" : "f16 v stored"));
}
void decode_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"kv", "rows", "f16", "listed", "threads", "v_is_k"});
  for (int64_t v_is_k : {0, 1}) b->Args({32768, 1, 1, 0, 2, v_is_k});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_LatentDecode)->Apply(decode_args);

// DSA's selection for one decode row (dsa_select: the lightning indexer's scores over every
// cached key, then the top 2,048) at V3.2's indexer shape: 64 heads of 128 over one key a
// token. What a decode step's attention pays beside the token-sparse kernel above.
void BM_DsaSelect(benchmark::State& state) {
  constexpr int64_t kIndexHeads = 64, kIndexDim = 128;
  const int64_t L = state.range(0);
  const Tensor k = filled_tensor(DType::f32, 1, L, kIndexDim, 7);
  const Tensor q = filled_tensor(DType::f32, 1, kIndexHeads, kIndexDim, 8);
  const Tensor w = filled_tensor(DType::f32, 1, 1, kIndexHeads, 9);
  IndexerKeys keys(kIndexDim, L);
  keys.append(k.data_as<float>(), L);
  keys.pack(L);
  IndexerRows rows;
  rows.q = q.data_as<float>(), rows.w = w.data_as<float>();
  rows.heads = kIndexHeads, rows.dim = kIndexDim;
  for (auto _ : state) {
    TokenSelection sel = dsa_select(rows, 1, L - 1, keys, kTopK, int(state.range(1)));
    benchmark::DoNotOptimize(sel.keys.data());
  }
}
BENCHMARK(BM_DsaSelect)
    ->ArgNames({"kv", "threads"})
    ->Args({16384, 2})
    ->Args({32768, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace spattn::bench
