// Host side of the GPU decode (spattn/cuda.hpp attention_decode): the CPU decode's plan
// (splits of at most 32 key tiles, chunks of whole q heads), the split-K kernel and the exact
// combine, and the read-back of the statistics in the CPU's layout.
#include <cuda_runtime.h>

#include <vector>

#include "cuda/check.cuh"
#include "cuda/flash_decode.cuh"
#include "cuda/inputs.hpp"
#include "kernels/flash_common.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda {
namespace {

template <class T, int D>
void launch_decode(const DecodeParams& p, const CombineParams& c, dim3 grid, cudaStream_t s) {
  constexpr size_t smem = size_t(kDecodeRows + 3 * kDecodeWarps * kBN) * D * sizeof(T);
  auto* kernel = flash_decode_kernel<T, D>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
        "cudaFuncSetAttribute");
  kernel<<<grid, kDecodeWarps * 32, smem, s>>>(p);
  check(cudaGetLastError(), "flash_decode_kernel launch");
  constexpr int kWarpsPerBlock = 4;
  const int items = c.units * kDecodeRows;
  decode_combine_kernel<T>
      <<<(items + kWarpsPerBlock - 1) / kWarpsPerBlock, kWarpsPerBlock * 32, 0, s>>>(c);
  check(cudaGetLastError(), "decode_combine_kernel launch");
}

}  // namespace

void attention_decode(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const AttnOptions& opt, const DecodeOptions& dopt,
                      float* lse, Stats* stats, SkipStats* skip, void* stream) {
  const char* who = "cuda attention_decode";
  check_qkv_out(q, k, v, out, lse, opt.causal, who);
  SPATTN_CHECK(q.seq >= 1 && q.seq <= kMaxDecodeQueries, who, ": q_len must be in [1, ",
               kMaxDecodeQueries, "], got ", q.seq);
  SPATTN_CHECK(k.seq >= 1, who, ": the cache holds no key");
  SPATTN_CHECK(opt.window == 0, who, ": sliding windows have no GPU path yet");
  const float threshold = kernels::blasst_log2_threshold(dopt.lambda, who);
  SPATTN_CHECK(dopt.batch >= 1 && dopt.batch <= kDecodeWarps, who,
               ": batch must be in [1, 4] on the GPU (one tile a warp), got ", dopt.batch);
  kernels::check_blasst_order(dopt.order, who);
  const cudaStream_t s = stream_of(stream, opt);

  DecodeParams p;
  p.q = q.data, p.k = k.data, p.v = v.data;
  p.q_h = q.stride_head, p.q_s = q.stride_seq;
  p.k_h = k.stride_head, p.k_s = k.stride_seq;
  p.v_h = v.stride_head, p.v_s = v.stride_seq;
  p.q_len = int(q.seq), p.kv_len = int(k.seq), p.group = int(q.heads / k.heads);
  // The CPU decode's plan (flash_common.hpp) with the GPU's 16 rows a chunk for the CPU's 128:
  // the same chunks whenever group x q_len <= 16, the same splits always.
  const kernels::DecodeChunks dc = kernels::decode_chunks(p.group, p.q_len, kDecodeRows);
  const int chunks = int(dc.chunks);
  p.chunk_heads = int(dc.chunk_heads);
  p.n_kt = (p.kv_len + kBN - 1) / kBN;
  const kernels::DecodeSplits ds = kernels::decode_splits(p.n_kt);
  p.splits = int(ds.splits);
  p.split_tiles = int(ds.split_tiles);
  p.batch = int(dopt.batch);
  p.causal = opt.causal;
  p.threshold = threshold;
  // Nothing is skipped at lambda 0: in order, as dense decode (the CPU's rule).
  p.local_first = threshold != -INFINITY && dopt.order == BlasstOrder::local_first;
  const float scale = softmax_scale(opt, q.dim);
  SPATTN_CHECK(scale > 0 && std::isfinite(scale), who,
               ": the softmax scale must be positive and finite, got ", scale);
  p.scale_log2 = scale * 1.4426950408889634f;

  const int units = int(k.heads) * chunks;
  const size_t parts = size_t(units) * size_t(p.splits) * kDecodeRows;
  DeviceBuffer<float> part_o, part_lse;
  part_o.alloc(parts * size_t(q.dim), s);
  part_lse.alloc(parts, s);
  p.part_o = part_o.get(), p.part_lse = part_lse.get();
  DeviceBuffer<int> visited, skipped;
  DeviceBuffer<unsigned long long> entries;
  DeviceBuffer<uint8_t> skip_map;
  const size_t items = size_t(units) * size_t(p.splits);
  if (stats || skip) {
    visited.alloc(items, s), skipped.alloc(items, s), entries.alloc(items, s);
    p.visited = visited.get(), p.skipped = skipped.get(), p.entries = entries.get();
    if (skip && skip->record_tiles) {
      skip_map.alloc(size_t(units) * size_t(p.n_kt), s);
      p.skip_map = skip_map.get();
    }
  }
  CombineParams c;
  c.part_o = p.part_o, c.part_lse = p.part_lse, c.out = out.data, c.lse = lse;
  c.o_h = out.stride_head, c.o_s = out.stride_seq;
  c.q_len = p.q_len, c.group = p.group, c.chunk_heads = p.chunk_heads, c.chunks = chunks;
  c.splits = p.splits, c.units = units, c.dim = int(q.dim);
  const dim3 grid(unsigned(p.splits), unsigned(chunks), unsigned(k.heads));
  if (q.dtype == DType::bf16)
    q.dim == 64 ? launch_decode<__nv_bfloat16, 64>(p, c, grid, s)
                : launch_decode<__nv_bfloat16, 128>(p, c, grid, s);
  else
    q.dim == 64 ? launch_decode<__half, 64>(p, c, grid, s)
                : launch_decode<__half, 128>(p, c, grid, s);

  if (!stats && !skip) return;
  const std::vector<int> vis = visited.to_host(s), skp = skipped.to_host(s);
  if (stats) {
    const std::vector<unsigned long long> ent = entries.to_host(s);
    Stats st;
    for (size_t i = 0; i < items; ++i) {
      st.score_entries += int64_t(ent[i]);
      st.tiles_visited += vis[i];
      st.tiles_skipped += skp[i];
    }
    st.causal_entries = dense_entries(q.heads, q.seq, k.seq, opt.causal);
    st.flops = 4.0 * double(q.dim) * double(st.score_entries);
    stats->add(st);
  }
  if (skip) {
    // The CPU's layout (attention_decode): one query tile per q head, the counts and blocks
    // of the unit holding it.
    skip->reset(q.heads, 1);
    const std::vector<uint8_t> map =
        skip->record_tiles ? skip_map.to_host(s) : std::vector<uint8_t>{};
    for (int64_t h = 0; h < q.heads; ++h) {
      const int64_t unit = (h / p.group) * chunks + (h % p.group) / p.chunk_heads;
      for (int sp = 0; sp < p.splits; ++sp) {
        skip->visited[size_t(h)] += vis[size_t(unit * p.splits + sp)];
        skip->skipped[size_t(h)] += skp[size_t(unit * p.splits + sp)];
      }
      if (skip->record_tiles)
        for (int kt = 0; kt < p.n_kt; ++kt)
          if (map[size_t(unit) * size_t(p.n_kt) + size_t(kt)])
            skip->skipped_tiles[size_t(h)].push_back(kt);
    }
  }
}

}  // namespace spattn::cuda
