// MOMO's prefill on the device ("Measure Once, Mask Once: Delta Refined Block Sparse
// Attention", Algorithm 1 and Appendix Algorithm 2): cuda::momo_attention (spattn/cuda.hpp).
// The method's parameters and geometry (gamma, the sampled rows, the forced blocks) are
// src/methods/momo.cpp's; this file runs its four steps as kernels on one stream:
//   1. the query-sparse pass (flash_fwd_kernel's kRows form) over the sampled rows, which also
//      writes each row's LSE over each key tile (FlashParams::tile_lse, as the CPU kernel hands
//      its observer), then momo_select_kernel: per sampled row the block scores S(j) (Eq. 3,
//      the log-add-exp of the block's tiles in key order, as BlockSelectObserver folds them)
//      of its candidate blocks and their exact top k (make_key's order: higher score, then
//      the smaller block; ExactTopK's), best first;
//   2. momo_pool_kernel (blend: the pooled rows' means or moments, pool_row_moments's) and
//      momo_trim_kernel per (q head, query block): the union of the pooled rows' choices
//      (trim=mass: their shares exp(S(j) - LSE_row), summed; trim=mean: the mean S(j)), the
//      blend's estimate, the top k_trim (topp, min_share), sink and local added: the mask;
//   3. the block-sparse pass over the mask's lists (block_lists.cu, which turns them into
//      per-kernel-tile lists of 64-key tiles on the device);
//   4. momo_delta_kernel: Eq. 2's correction, O_gamma at the sampled rows.
// The step-1 scores are held in global memory between the pass and the selection (heads x
// sampled rows x key tiles floats: 268 MB at 128K with 32 heads and gamma 128) rather than
// selected inside the pass, as the paper's fused kernel does: the same selections, the simpler
// kernel first. Their writing and reading move about 0.5 GB at 128K, a tenth of a millisecond
// on an H200's bandwidth against the pass's own tens of milliseconds; what would grow is the
// memory (17 GB at 1M tokens), so step 1 runs over chunks of heads that keep it under
// MomoGpuPlan::scratch_bytes.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "cuda/block_budget.cuh"
#include "cuda/block_lists.hpp"
#include "cuda/check.cuh"
#include "cuda/flash_fwd.cuh"
#include "cuda/forms.hpp"
#include "cuda/inputs.hpp"
#include "cuda/row_topk.cuh"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda {
namespace {

constexpr int kSelThreads = 256;
constexpr int kFusedMaxK = 256;  // the fused selection's heaps: 64 rows x k keys, 128 KB

// Sorts keys[0, n) (n a power of two) into descending order: a bitonic network, every thread
// of the block taking part.
__device__ void sort_desc(unsigned long long* keys, int n) {
  for (int size = 2; size <= n; size <<= 1)
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < n / 2; i += blockDim.x) {
        const int lo = 2 * stride * (i / stride) + i % stride, hi = lo + stride;
        const bool desc = (lo & size) == 0;
        const unsigned long long a = keys[lo], b = keys[hi];
        if ((a < b) == desc) keys[lo] = b, keys[hi] = a;
      }
      __syncthreads();
    }
}

// Heads a chunk of step 1 takes: whole kv groups while a group fits `budget` bytes (per_head
// each), else the largest divisor of the group that fits (at least one head), so that a chunk
// never splits a group across two kv heads.
int momo_head_chunk(int64_t budget, int64_t per_head, int heads, int group) {
  const int64_t fit = std::max<int64_t>(1, budget / std::max<int64_t>(per_head, 1));
  if (fit >= group) return int(std::min<int64_t>(heads, fit / group * group));
  int c = int(fit);
  while (group % c) --c;
  return c;
}

int pow2_at_least(int64_t n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Step 1b: per (sampled row ri, q head h) its candidate blocks' S(j) and their top k, best
// first, at sel_* [(h * R + ri) * k ...], the count at sel_count[h * R + ri]. Candidates: the
// blocks of [sink_end, local_begin) below the row's causal limit (BlockSelectObserver's Span);
// a block whose score is -inf (no key measured) is none.
__global__ void momo_select_kernel(const float* tile_lse, const int* rows, const QBlock* qblocks,
                                   int R, int n_kt, int kv_len, int pos_offset, int beta, int chi,
                                   int k, int slots, int* sel_block, float* sel_score,
                                   int* sel_count) {
  extern __shared__ unsigned long long keys[];
  const int ri = blockIdx.x, h = blockIdx.y;
  const int row = rows[ri];
  const Candidates c = candidates_of(row, qblocks[row / chi], kv_len, pos_offset, beta);
  const int lo = c.lo, n = c.n, limit = c.limit;
  const float* lse = tile_lse + (int64_t(h) * R + ri) * n_kt;
  const int per = beta / kBN;
  for (int i = threadIdx.x; i < slots; i += blockDim.x) {
    unsigned long long key = 0;
    if (i < n) {
      const int j = lo + i, t0 = j * per;
      const int tiles = (min(limit, (j + 1) * beta) - j * beta + kBN - 1) / kBN;
      float s = lse[t0];
      for (int t = 1; t < tiles; ++t) s = log_add_exp(s, lse[t0 + t]);
      if (s != -INFINITY) key = make_key(j, s);
    }
    keys[i] = key;
  }
  // How many blocks have a score: the row's count, at most k of them.
  int mine = 0;
  for (int i = threadIdx.x; i < slots; i += blockDim.x) mine += keys[i] != 0;
  __shared__ int total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();  // also: every key is written
  if (mine) atomicAdd(&total, mine);
  sort_desc(keys, slots);  // its barriers publish `total`
  const int count = min(k, total);
  const int64_t base = (int64_t(h) * R + ri) * k;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    sel_block[base + i] = key_block(keys[i]);
    sel_score[base + i] = key_score(keys[i]);
  }
  if (threadIdx.x == 0) sel_count[int64_t(h) * R + ri] = count;
}

// Step 2a (blend): per (block b, head h) of t, the pooled rows [b * block, ...): mean_pool's
// means (moments off), or pool_row_moments's turned into the rows of one product, q side
// [m, m^2, var], k side [s m, s^2/2 var, s^2/2 (m^2 + var)] (momo.cpp, the blend). Double
// sums, as the CPU's.
template <class T>
__global__ void momo_pool_kernel(const T* t, int64_t stride_h, int64_t stride_s, int seq, int d,
                                 int block, bool moments, bool is_q, float scale, float* out) {
  const int b = blockIdx.x, h = blockIdx.y;
  const int s0 = b * block, s1 = min(seq, s0 + block);
  const int nb = gridDim.x, pd = moments ? 3 * d : d;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    double sum = 0, sq = 0;
    for (int s = s0; s < s1; ++s) {
      const double x = double(float(t[h * stride_h + int64_t(s) * stride_s + c]));
      sum += x, sq += x * x;
    }
    const double cnt = double(s1 - s0);
    const double md = sum / cnt;
    float* o = out + (int64_t(h) * nb + b) * pd;
    if (!moments) {
      o[c] = float(md);
      continue;
    }
    const float m = float(md), var = float(fmax(0.0, sq / cnt - md * md));
    const float s2 = 0.5f * scale * scale;
    if (is_q) {
      o[c] = m, o[d + c] = m * m, o[2 * d + c] = var;
    } else {
      o[c] = scale * m, o[d + c] = s2 * var, o[2 * d + c] = s2 * (m * m + var);
    }
  }
}

struct TrimParams {
  const int* sel_block;
  const float* sel_score;
  const int* sel_count;
  const float* lse_g;  // [H][R]
  const QBlock* qblocks;
  const float* qpool;  // [H][nqb][pd] (blend)
  const float* kpool;  // [Hkv][nkb][pd]
  int R, nqb, nkb, k, pd, group, slots, cap;
  int blend;  // 0 none, 1 mean_pool, 2 moments
  bool trim_mass, pool_above;
  float scale;
  long long k_trim;
  double topp, min_share;
  int* list;        // [H][nqb][cap]
  int* list_count;  // [H][nqb]
  int* row_blocks;  // [H][nqb]
  int* kept;        // [H][nqb]
};

// Block-wide reductions over blockDim.x threads (a multiple of 32), through `red` (32 slots).
template <class V, class Op>
__device__ V block_reduce(V x, Op op, V* red) {
  for (int off = 16; off > 0; off /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) red[warp] = x;
  __syncthreads();
  x = red[0];
  for (int w = 1; w < warps; ++w) x = op(x, red[w]);
  return x;
}

// Step 2b: per (query block qb, q head h) the union and trim (momo.cpp's step 2, same order of
// rules). Shared memory: keys[slots] (first the union's double sums), score[nkb], cnt[nkb].
__global__ void momo_trim_kernel(const TrimParams p) {
  extern __shared__ unsigned long long keys[];
  double* acc = reinterpret_cast<double*>(keys);
  float* score = reinterpret_cast<float*>(keys + p.slots);
  int* cnt = reinterpret_cast<int*>(score + p.nkb);
  __shared__ double red_d[32];
  __shared__ float red_f[32];
  const int qb = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const QBlock f = p.qblocks[qb];
  const int ce = f.causal_end;
  const int sink = min(f.sink_end, ce);
  const int local = max(f.local_begin, sink);  // the local window's first block
  for (int j = tid; j < ce; j += blockDim.x) acc[j] = 0.0, cnt[j] = 0;
  const int first = f.first_row, last = p.qblocks[qb + 1].first_row;
  const int from = first - (p.pool_above && first > 0 ? 1 : 0);
  // The pooled rows, one after another (a block is unique within a row: no two threads add to
  // one sum at once).
  int own = 0;  // blocks chosen by the block's own rows
  for (int ri = from; ri < last; ++ri) {
    __syncthreads();
    const int64_t base = (int64_t(h) * p.R + ri) * p.k;
    const int n = p.sel_count[int64_t(h) * p.R + ri];
    const double row_lse = double(p.lse_g[int64_t(h) * p.R + ri]);
    // trim=mass: the block's share of the row's attention; with a blend, less the row's cut
    // (its least chosen share): what the row's choice holds above it.
    float cut = INFINITY;
    for (int i = tid; i < n; i += blockDim.x) {
      float s = p.sel_score[base + i];
      if (p.trim_mass) s = float(exp(double(s) - row_lse));
      cut = fminf(cut, s);
    }
    if (p.blend)
      cut = block_reduce(
          cut, [](float a, float b) { return fminf(a, b); }, red_f);
    for (int i = tid; i < n; i += blockDim.x) {
      const int j = p.sel_block[base + i];
      float s = p.sel_score[base + i];
      if (p.trim_mass) s = float(exp(double(s) - row_lse));
      if (p.blend) s -= cut;
      if (ri < first && (j < f.sink_end || j >= f.local_begin)) continue;  // the row above's
      acc[j] += double(s);
      ++cnt[j];
    }
    if (ri >= first) own += n;
  }
  __syncthreads();
  const double pooled_rows = double(last - from);
  // The candidates' scores (the union's, or with a blend every candidate's estimate).
  double mass_total = 0, mass_forced = 0;
  const bool blended = p.blend && f.local_begin > f.sink_end;
  if (blended) {
    // The pooled estimate: one warp a key block, scale * qm . km (mean_pool) or the product of
    // the moments' rows.
    const float* qv = p.qpool + (int64_t(h) * p.nqb + qb) * p.pd;
    const float* kv = p.kpool + int64_t(h / p.group) * p.nkb * p.pd;
    const int warp = tid / 32, lane = tid % 32, warps = blockDim.x / 32;
    for (int j = warp; j < ce; j += warps) {
      float dot = 0.f;
      for (int c = lane; c < p.pd; c += 32) dot = fmaf(qv[c], kv[int64_t(j) * p.pd + c], dot);
      for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      if (lane == 0) score[j] = p.blend == 2 ? dot : dot * p.scale;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int j = tid; j < ce; j += blockDim.x) mx = fmaxf(mx, score[j]);
    mx = block_reduce(
        mx, [](float a, float b) { return fmaxf(a, b); }, red_f);
    double tot = 0;
    for (int j = tid; j < ce; j += blockDim.x) tot += double(score[j] = expf(score[j] - mx));
    tot = block_reduce(
        tot, [](double a, double b) { return a + b; }, red_d);
    double mt = 0, mf = 0;
    for (int j = tid; j < ce; j += blockDim.x) {
      float s = float(double(score[j]) / tot);
      if (cnt[j]) s += float(double(float(acc[j])) / pooled_rows);
      score[j] = s;
      mt += double(s);
      if (j < f.sink_end || j >= f.local_begin) mf += double(s);
    }
    mass_total = block_reduce(
        mt, [](double a, double b) { return a + b; }, red_d);
    mass_forced = block_reduce(
        mf, [](double a, double b) { return a + b; }, red_d);
  } else {
    for (int j = tid; j < ce; j += blockDim.x)
      if (cnt[j]) score[j] = p.trim_mass ? float(acc[j]) : float(acc[j] / double(cnt[j]));
  }
  __syncthreads();  // acc is read for the last time above: keys take its place
  for (int i = tid; i < p.slots; i += blockDim.x) {
    const bool cand = i >= f.sink_end && i < f.local_begin && i < ce && (blended || cnt[i] > 0);
    keys[i] = cand ? make_key(i, score[i]) : 0ull;
  }
  int mine = 0;
  for (int i = tid; i < p.slots; i += blockDim.x) mine += keys[i] != 0;
  __shared__ int n_cand;
  if (tid == 0) n_cand = 0;
  __syncthreads();
  if (mine) atomicAdd(&n_cand, mine);
  sort_desc(keys, p.slots);
  // The k_trim best, and of them the prefix topp or min_share keeps.
  __shared__ int take;
  if (tid == 0) {
    const int keep = (long long)n_cand < p.k_trim ? n_cand : int(p.k_trim);
    int t = 0;
    if (p.topp > 0)
      for (double kept = mass_forced; t < keep && kept < p.topp * mass_total; ++t)
        kept += double(key_score(keys[t]));
    else if (p.min_share > 0)
      while (t < keep && double(key_score(keys[t])) >= p.min_share * mass_total) ++t;
    else
      t = keep;
    take = t;
  }
  for (int j = tid; j < ce; j += blockDim.x) cnt[j] = 0;
  __syncthreads();
  for (int i = tid; i < take; i += blockDim.x) cnt[key_block(keys[i])] = 1;
  __syncthreads();
  // The list, ascending: sink, the kept blocks in block order (a ballot per 32), local.
  const int64_t item = int64_t(h) * p.nqb + qb;
  int* list = p.list + item * p.cap;
  for (int j = tid; j < sink; j += blockDim.x) list[j] = j;
  const int local_n = ce - local;
  for (int j = tid; j < local_n; j += blockDim.x) list[sink + take + j] = local + j;
  if (tid < 32) write_kept(cnt, sink, local, list, sink);
  if (tid == 0) {
    p.list_count[item] = sink + take + local_n;
    p.row_blocks[item] = own;
    p.kept[item] = take;
  }
}

// Step 4 (Eq. 2): per (sampled row ri, q head h), the rows of its group (after the previous
// sampled row, up to it) take O_* + (O_gamma - O_*) at the sampled row; the sampled row takes
// O_gamma itself, and its LSE the query-sparse pass's.
template <class T>
__global__ void momo_delta_kernel(T* out, int64_t o_h, int64_t o_s, const T* og, const int* rows,
                                  int R, int d, bool delta, const float* lse_g, float* lse,
                                  int q_len) {
  const int ri = blockIdx.x, h = blockIdx.y;
  const int s = rows[ri], begin = ri > 0 ? rows[ri - 1] + 1 : 0;
  T* oh = out + h * o_h;
  const T* g = og + (int64_t(h) * R + ri) * d;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    const T gv = g[c];
    if (delta) {
      const float dl = float(gv) - float(oh[int64_t(s) * o_s + c]);
      for (int i = begin; i < s; ++i) {
        T& o = oh[int64_t(i) * o_s + c];
        o = T(float(o) + dl);
      }
    }
    oh[int64_t(s) * o_s + c] = gv;
  }
  if (lse && threadIdx.x == 0) lse[int64_t(h) * q_len + s] = lse_g[int64_t(h) * R + ri];
}

// Shared memory a kernel may use on the current device (opted in).
int max_smem() {
  int dev = 0, v = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
        "cudaDeviceGetAttribute");
  return v;
}

template <class K>
void set_smem(K* kernel, size_t bytes) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
        "cudaFuncSetAttribute");
}

// Sums the per-64-row-tile records of a pass.
Stats read_stats(const DeviceBuffer<int>& visited, const DeviceBuffer<unsigned long long>& entries,
                 int64_t d, cudaStream_t s) {
  Stats st;
  for (int v : visited.to_host(s)) st.tiles_visited += v;
  for (unsigned long long e : entries.to_host(s)) st.score_entries += int64_t(e);
  st.flops = 4.0 * double(d) * double(st.score_entries);
  return st;
}

template <class T>
void run_typed(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const MomoGpuPlan& plan, const AttnOptions& opt, float* lse, MomoGpuResult& res,
               bool want_rows, cudaStream_t s) {
  const char* who = "cuda momo";
  const int H = int(q.heads), L = int(q.seq), Lkv = int(k.seq), d = int(q.dim);
  const int Hkv = int(k.heads), group = H / Hkv;
  const int R = int(plan.rows.size());
  const int nqb = int(plan.forced.size()), nkb = int((Lkv + plan.beta - 1) / plan.beta);
  const int n_kt = (Lkv + kBN - 1) / kBN;
  const int kk = int(std::min<int64_t>(plan.k, nkb));  // slots a row fills at most
  const int slots = pow2_at_least(std::max(nkb, 2));
  const int smem_cap = max_smem();
  const size_t sel_smem = size_t(slots) * 8;
  const size_t trim_smem = size_t(slots) * 8 + size_t(nkb) * 8;
  SPATTN_CHECK(trim_smem + 1024 <= size_t(smem_cap), who, ": ", nkb, " key blocks need ", trim_smem,
               " bytes of shared memory a block; this device has ", smem_cap,
               " (a larger beta, or a shorter kv_len)");

  // Geometry on the device: the rows and, per query block, its forced blocks and first row.
  std::vector<int> rows_h(plan.rows.begin(), plan.rows.end());
  std::vector<QBlock> qb_h(size_t(nqb) + 1);
  for (int qb = 0; qb <= nqb; ++qb) {
    QBlock& b = qb_h[size_t(qb)];
    b.first_row = int(plan.first_row[size_t(qb)]);
    if (qb == nqb) continue;
    const ForcedBlocks& f = plan.forced[size_t(qb)];
    b.sink_end = int(std::min<int64_t>(f.sink_end, INT32_MAX / 2));
    b.local_begin = int(std::min<int64_t>(f.local_begin, INT32_MAX / 2));
    b.causal_end = int(f.causal_end);
  }
  DeviceBuffer<int> d_rows;
  d_rows.upload(rows_h, s);
  DeviceBuffer<QBlock> d_qb;
  d_qb.upload(qb_h, s);

  // Step 1: the query-sparse pass, O_gamma, its LSE and each row's selection: fused (the pass
  // keeps every row's best k blocks itself), or the pass's tile LSEs then the selection
  // kernel, a chunk of heads (whole kv groups) at a time so that the tile LSEs fit
  // plan.scratch_bytes.
  const bool fused =
      (plan.fused_select || env_switch("SPATTN_CUDA_MOMO_FUSED")) && kk <= kFusedMaxK;
  res.fused_select = fused;
  const int chunk = fused ? H
                          : momo_head_chunk(plan.scratch_bytes,
                                            int64_t(R) * n_kt * int64_t(sizeof(float)), H, group);
  const int n_qt64 = (R + kGroupRows - 1) / kGroupRows;
  DeviceBuffer<T> og;
  og.alloc(size_t(H) * R * d, s);
  DeviceBuffer<float> lse_g, tile_lse;
  lse_g.alloc(size_t(H) * R, s);
  if (!fused) tile_lse.alloc(size_t(chunk) * R * n_kt, s);
  const TensorView og_view = TensorView::hsd(og.get(), q.dtype, H, R, d);
  DeviceBuffer<int> q_visited;
  DeviceBuffer<unsigned long long> q_entries;
  q_visited.alloc(size_t(H) * n_qt64, s);
  q_entries.alloc(size_t(H) * n_qt64, s);
  DeviceBuffer<int> sel_block, sel_count;
  DeviceBuffer<float> sel_score;
  sel_block.alloc(size_t(H) * R * kk, s);
  sel_score.alloc(size_t(H) * R * kk, s);
  sel_count.alloc(size_t(H) * R, s);
  set_smem(momo_select_kernel, sel_smem);
  for (int h0 = 0; h0 < H; h0 += chunk) {
    const int n = std::min(chunk, H - h0);
    const int n_kv = std::max(1, n / group);  // a chunk inside one group reads its kv head
    FlashParams qp = base_params(q.head_range(h0, n), k.head_range(h0 / group, n_kv),
                                 v.head_range(h0 / group, n_kv), og_view.head_range(h0, n), opt,
                                 lse_g.get() + size_t(h0) * R, 64);
    qp.q_len = R;
    qp.n_qt = qp.n_qt64 = n_qt64;
    qp.lse_h = R;
    qp.rows = d_rows.get();
    qp.visited = q_visited.get() + size_t(h0) * n_qt64;
    qp.entries = q_entries.get() + size_t(h0) * n_qt64;
    if (fused) {
      qp.sel_k = kk, qp.sel_beta = int(plan.beta), qp.sel_chi = int(plan.chi);
      qp.sel_qblocks = d_qb.get();
      qp.sel_block = sel_block.get() + size_t(h0) * R * kk;
      qp.sel_score = sel_score.get() + size_t(h0) * R * kk;
      qp.sel_count = sel_count.get() + size_t(h0) * R;
      launch_query_sparse(q.dtype, d, qp, s);
      continue;
    }
    qp.tile_lse = tile_lse.get();
    launch_query_sparse(q.dtype, d, qp, s);
    momo_select_kernel<<<dim3(unsigned(R), unsigned(n)), kSelThreads, sel_smem, s>>>(
        tile_lse.get(), d_rows.get(), d_qb.get(), R, n_kt, Lkv, Lkv - L, int(plan.beta),
        int(plan.chi), kk, slots, sel_block.get() + size_t(h0) * R * kk,
        sel_score.get() + size_t(h0) * R * kk, sel_count.get() + size_t(h0) * R);
    check(cudaGetLastError(), "momo_select_kernel launch");
  }

  // Step 2: union and trim.
  const float scale = softmax_scale(opt, d);
  const int pd = plan.blend == 2 ? 3 * d : d;
  DeviceBuffer<float> qpool, kpool;
  if (plan.blend) {
    qpool.alloc(size_t(H) * nqb * pd, s);
    kpool.alloc(size_t(Hkv) * nkb * pd, s);
    const T* qd = static_cast<const T*>(q.data);
    const T* kd = static_cast<const T*>(k.data);
    momo_pool_kernel<T><<<dim3(unsigned(nqb), unsigned(H)), 128, 0, s>>>(
        qd, q.stride_head, q.stride_seq, L, d, int(plan.chi), plan.blend == 2, true, scale,
        qpool.get());
    momo_pool_kernel<T><<<dim3(unsigned(nkb), unsigned(Hkv)), 128, 0, s>>>(
        kd, k.stride_head, k.stride_seq, Lkv, d, int(plan.beta), plan.blend == 2, false, scale,
        kpool.get());
    check(cudaGetLastError(), "momo_pool_kernel launch");
  }
  // A list holds the sink, at most k_trim candidates and the local window: its capacity (what
  // the report reads back) is the most any query block needs.
  int cap = 1;
  for (const ForcedBlocks& f : plan.forced) {
    const int64_t sink = std::min(f.sink_end, f.causal_end);
    const int64_t local = std::max(f.local_begin, sink);
    const int64_t cand = std::max<int64_t>(0, f.local_begin - f.sink_end);
    cap = int(std::max<int64_t>(cap, sink + std::min(cand, plan.k_trim) + (f.causal_end - local)));
  }
  DeviceBuffer<int> list, list_count, row_blocks, kept;
  list.alloc(size_t(H) * nqb * cap, s);
  list_count.alloc(size_t(H) * nqb, s);
  row_blocks.alloc(size_t(H) * nqb, s);
  kept.alloc(size_t(H) * nqb, s);
  TrimParams tp{};
  tp.sel_block = sel_block.get(), tp.sel_score = sel_score.get(), tp.sel_count = sel_count.get();
  tp.lse_g = lse_g.get(), tp.qblocks = d_qb.get(), tp.qpool = qpool.get(), tp.kpool = kpool.get();
  tp.R = R, tp.nqb = nqb, tp.nkb = nkb, tp.k = kk, tp.pd = pd, tp.group = group;
  tp.slots = slots, tp.cap = cap, tp.blend = plan.blend, tp.trim_mass = plan.trim_mass;
  tp.pool_above = plan.pool_above, tp.scale = scale, tp.k_trim = plan.k_trim;
  tp.topp = plan.topp, tp.min_share = plan.min_share;
  tp.list = list.get(), tp.list_count = list_count.get(), tp.row_blocks = row_blocks.get();
  tp.kept = kept.get();
  set_smem(momo_trim_kernel, trim_smem);
  momo_trim_kernel<<<dim3(unsigned(nqb), unsigned(H)), kSelThreads, trim_smem, s>>>(tp);
  check(cudaGetLastError(), "momo_trim_kernel launch");

  // Step 3: the block-sparse pass over the lists into out (block_lists.cu).
  DeviceBlockLists dl;
  dl.list = list.get(), dl.count = list_count.get(), dl.heads = H, dl.nqb = nqb, dl.cap = cap;
  dl.block_q = plan.chi, dl.block_k = plan.beta;
  BlockListRecords b_records;
  run_block_lists(q, k, v, out, opt, lse, dl, &b_records, s);

  // Step 4: the delta correction, in place.
  momo_delta_kernel<T><<<dim3(unsigned(R), unsigned(H)), 128, 0, s>>>(
      static_cast<T*>(out.data), out.stride_head, out.stride_seq, og.get(), d_rows.get(), R, d,
      plan.delta, lse_g.get(), lse, L);
  check(cudaGetLastError(), "momo_delta_kernel launch");

  // What the report needs, read back once everything is queued.
  res.lists = read_block_lists(dl, s);
  const std::vector<int> rb = row_blocks.to_host(s), kb = kept.to_host(s);
  res.row_blocks.assign(rb.begin(), rb.end());
  res.kept_blocks.assign(kb.begin(), kb.end());
  res.fused = read_stats(q_visited, q_entries, d, s);
  res.sparse = b_records.read(s);
  const int64_t causal = dense_entries(H, L, Lkv, true);
  res.fused.causal_entries = res.sparse.causal_entries = causal;
  res.row_selection.clear();
  if (want_rows) {
    const std::vector<int> cnt = sel_count.to_host(s), blk = sel_block.to_host(s);
    const std::vector<float> sc = sel_score.to_host(s);
    res.row_selection.resize(size_t(H) * R);
    for (size_t i = 0; i < res.row_selection.size(); ++i)
      for (int j = 0; j < cnt[i]; ++j)
        res.row_selection[i].push_back(
            {blk[i * size_t(kk) + size_t(j)], sc[i * size_t(kk) + size_t(j)]});
  }
}

}  // namespace

void momo_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& out, const MomoGpuPlan& plan, const AttnOptions& opt,
                    float* lse, MomoGpuResult& result, bool want_rows, void* stream) {
  const char* who = "cuda momo";
  check_qkv_out(q, k, v, out, lse, true, who);
  SPATTN_CHECK(opt.causal, who, ": needs causal attention");
  SPATTN_CHECK(opt.window == 0, who, ": sliding windows have no GPU path");
  SPATTN_CHECK(plan.chi % kGroupRows == 0 && plan.beta % kBN == 0, who, ": chi=", plan.chi,
               " and beta=", plan.beta,
               " must be multiples of 64 on the GPU (its 64-row and 64-key"
               " tiles)");
  const int64_t nqb = (q.seq + plan.chi - 1) / plan.chi;
  SPATTN_CHECK(!plan.rows.empty() && int64_t(plan.forced.size()) == nqb &&
                   int64_t(plan.first_row.size()) == nqb + 1 && plan.k >= 1 && plan.k_trim >= 1,
               who, ": the plan does not fit q (", q.seq, " rows, ", nqb, " query blocks)");
  SPATTN_CHECK(plan.blend >= 0 && plan.blend <= 2 && (plan.blend == 0 || plan.trim_mass), who,
               ": blend must be none, mean_pool or moments, and a blend needs trim=mass");
  const cudaStream_t s = stream_of(stream, opt);
  if (q.dtype == DType::bf16)
    run_typed<__nv_bfloat16>(q, k, v, out, plan, opt, lse, result, want_rows, s);
  else
    run_typed<__half>(q, k, v, out, plan, opt, lse, result, want_rows, s);
}

}  // namespace spattn::cuda
