// FlexPrefill on the device ("FlexPrefill: A Context-Aware Sparse Attention Mechanism for
// Efficient Long-Sequence Inference", Sec. 3.2, Algorithms 1-3; the method, its parameters and
// its rules are src/methods/flexprefill.cpp's, which this mirrors step by step): one stream, no
// copy to the host before the lists are read back for the report.
//
//  1. last_rows_kernel: the last B queries (q_hat) against every key they see, on tensor cores
//     (two passes: each row's max and sum of exponentials, then its probabilities), binned per
//     key block (a_bar, the vertical mass) and per diagonal band of B offsets (the slash mass),
//     over the rows' mean. One thread block per q head owns the head's sums: deterministic.
//  2. The pooled rows (pool_rows.cu): each query block's mean, q_hat's mean, each key block's.
//  3. pooled_scores_kernel: their products times the softmax scale, [Hq][nqb + 1][nkb].
//  4. head_choice_kernel: a_hat (the softmax of q_hat's pooled row), d = sqrt(JSD(a_bar,
//     a_hat)), query-aware where d < tau; the vertical blocks and slash bands by the budget
//     (only min_budget's floor for a query-aware head), block 0 and band 0 forced
//     (block_budget.cuh, the host's cover()).
//  5. query_block_kernel: per query block the sink, the diagonal, the kept vertical blocks it
//     sees and the blocks each kept band crosses; a query-aware head's pooled row by the budget
//     there (qa=block, topk, min_share), or its row's softmax kept for step 6.
//  6. qa=head with gamma (the paper's): per head the whole pooled map flattened, its open
//     entries sorted (CUB's radix sort, stable: ties the smaller index, as the host) and taken
//     in order until gamma of the map's mass is kept.
//  7. The lists, then the block-sparse pass (block_lists.cu).
#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda/block_budget.cuh"
#include "cuda/block_lists.hpp"
#include "cuda/block_select.hpp"
#include "cuda/check.cuh"
#include "cuda/inputs.hpp"
#include "cuda/pool_rows.hpp"
#include "cuda/score_tile.cuh"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda {
namespace {

constexpr int kThreads = 256;  // eight warps
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 128;     // estimate rows a pass: 16 a warp
constexpr int kCols = 64;      // keys a tile
constexpr int kBandSlots = 6;  // bands one tile's entries fall in, every warp's (block >= 64)

// Per thread block: v of every thread combined in warp order, then across warps in order (a
// fixed tree: the same sum on every run); every thread gets the result.
template <class Op>
__device__ double block_reduce(double v, Op op, double init) {
  __shared__ double part[kWarps];
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // part's previous use is done
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  double r = init;
  for (int w = 0; w < kWarps; ++w) r = op(r, part[w]);
  return r;
}
struct Sum {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct Max {
  __device__ double operator()(double a, double b) const { return a > b ? a : b; }
};

// --- 1. The last queries' distributions -----------------------------------------------------

struct LastRowsParams {
  const void* q;
  const void* k;
  int64_t q_h, q_s, k_h, k_s;
  int group, q_len, kv_len, n_hat, block, nkb;
  long long off;  // the position of query row 0
  float scale;
  double* a_bar;   // [Hq][nkb], zeroed: sum over rows of their probabilities in block b / n_hat
  double* s_band;  // [Hq][nkb], zeroed: the same per band of offsets [cB, (c + 1)B)
};

template <class T, int D>
__global__ void __launch_bounds__(kThreads) last_rows_kernel(const LastRowsParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + kRows * (D + 8);
  __shared__ double wv[kWarps], wb[kWarps][3];
  __shared__ long long wbase[kWarps];
  const int h = blockIdx.x, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int gid = lane / 4, tig = lane % 4;
  const T* gQ = static_cast<const T*>(p.q) + int64_t(h) * p.q_h;
  const T* gK = static_cast<const T*>(p.k) + int64_t(h / p.group) * p.k_h;
  double* a_bar = p.a_bar + int64_t(h) * p.nkb;
  double* s_band = p.s_band + int64_t(h) * p.nkb;
  const int first = p.q_len - p.n_hat;  // q_hat's first query row

  for (int c0 = 0; c0 < p.n_hat; c0 += kRows) {
    const int nrows = min(kRows, p.n_hat - c0);
    __syncthreads();  // the previous rows' fragment reads are done
    stage_rows<T, D, kRows, kThreads>(sQ, gQ, p.q_s, [&](int r) -> long long {
      return r < nrows ? (long long)(first + c0 + r) : -1;
    });
    // This lane's two rows (gid and gid + 8 of its warp's 16), their positions and the keys
    // they see; the pass's widest.
    const int r_lo = warp * 16 + gid, r_hi = r_lo + 8;
    const long long row0 = p.off + first + c0;  // the position of the pass's row 0
    const long long pos_lo = row0 + r_lo, pos_hi = row0 + r_hi;
    const int vis_lo = r_lo < nrows ? int(min((long long)p.kv_len, pos_lo + 1)) : 0;
    const int vis_hi = r_hi < nrows ? int(min((long long)p.kv_len, pos_hi + 1)) : 0;
    const int cols = int(min((long long)p.kv_len, row0 + nrows));
    float m_lo = -INFINITY, m_hi = -INFINITY;
    double l_lo = 0.0, l_hi = 0.0, inv_lo = 0.0, inv_hi = 0.0;

    for (int pass = 0; pass < 2; ++pass) {
      for (int j0 = 0; j0 < cols; j0 += kCols) {
        float acc[8][4];  // scaled scores (the previous tile's reads done first)
        key_tile_scores<T, D, kThreads>(acc, sQ, sK, gK, p.k_s, j0, p.kv_len, p.scale, warp, lane);
        // acc[nt][i]: row r_lo (i < 2) or r_hi, key j0 + nt * 8 + 2 tig + (i & 1).
        auto col = [&](int nt, int i) { return j0 + nt * 8 + 2 * tig + (i & 1); };
        if (pass == 0) {
          // Each row's running max and sum of exponentials.
          fold_max_sum(acc, j0, vis_lo, vis_hi, m_lo, m_hi, l_lo, l_hi);
        } else {
          // The tile lies in one key block (block is a multiple of 64); an entry's band is
          // (pos - j) / block, and the warp's 16 rows against 64 keys span offsets of at most
          // 78, so three bands from `base`, the lowest.
          const long long wpos = row0 + warp * 16;
          const long long base = max(0ll, wpos - j0 - (kCols - 1)) / p.block;
          double v = 0.0, b0 = 0.0, b1 = 0.0, b2 = 0.0;
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int j = col(nt, i);
              const bool lo = i < 2;
              if (j >= (lo ? vis_lo : vis_hi)) continue;
              const double e =
                  exp(double(acc[nt][i]) - double(lo ? m_lo : m_hi)) * (lo ? inv_lo : inv_hi);
              const long long sl = ((lo ? pos_lo : pos_hi) - j) / p.block - base;
              v += e;
              if (sl == 0)
                b0 += e;
              else if (sl == 1)
                b1 += e;
              else
                b2 += e;
            }
          for (int o = 16; o > 0; o /= 2) {
            v += __shfl_xor_sync(0xffffffffu, v, o);
            b0 += __shfl_xor_sync(0xffffffffu, b0, o);
            b1 += __shfl_xor_sync(0xffffffffu, b1, o);
            b2 += __shfl_xor_sync(0xffffffffu, b2, o);
          }
          if (lane == 0) wv[warp] = v, wb[warp][0] = b0, wb[warp][1] = b1, wb[warp][2] = b2;
          if (lane == 0) wbase[warp] = base;
          __syncthreads();
          if (tid == 0) {
            // The warps in order; their bases rise with their rows, at most two past warp 0's.
            double vs = 0.0, bs[kBandSlots] = {};
            for (int w = 0; w < kWarps; ++w) {
              vs += wv[w];
              for (int s = 0; s < 3; ++s) bs[wbase[w] - wbase[0] + s] += wb[w][s];
            }
            a_bar[j0 / p.block] += vs;
            for (int s = 0; s < kBandSlots; ++s)
              if (bs[s] != 0.0 && wbase[0] + s < p.nkb) s_band[wbase[0] + s] += bs[s];
          }
        }
      }
      if (pass == 0) {
        // The probabilities over the rows' mean: the host's 1 / (sum * n_hat).
        inv_lo = l_lo > 0.0 ? 1.0 / (l_lo * double(p.n_hat)) : 0.0;
        inv_hi = l_hi > 0.0 ? 1.0 / (l_hi * double(p.n_hat)) : 0.0;
      }
    }
  }
}

template <class T, int D>
void launch_last_rows(const LastRowsParams& p, unsigned heads, cudaStream_t s) {
  const size_t smem = size_t((kRows + kCols) * (D + 8)) * sizeof(T);
  check(cudaFuncSetAttribute(last_rows_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(smem)),
        "cudaFuncSetAttribute");
  last_rows_kernel<T, D><<<heads, kThreads, smem, s>>>(p);
}

// --- 3. Pooled scores -------------------------------------------------------------------------

// sc[(h * (nqb + 1) + row) * nkb + kb] = scale * pooled q row . pooled key block kb, the row
// nqb being q_hat's mean; a warp a key block.
__global__ void pooled_scores_kernel(const float* qpool, const float* qlast, const float* kpool,
                                     int nqb, int nkb, int dim, int group, float scale, float* sc) {
  const int row = blockIdx.x, h = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* qv = row < nqb ? qpool + (int64_t(h) * nqb + row) * dim : qlast + int64_t(h) * dim;
  const float* kv = kpool + int64_t(h / group) * nkb * dim;
  float* out = sc + (int64_t(h) * (nqb + 1) + row) * nkb;
  for (int kb = warp; kb < nkb; kb += blockDim.x / 32) {
    float dot = 0.f;
    for (int c = lane; c < dim; c += 32) dot = fmaf(qv[c], kv[int64_t(kb) * dim + c], dot);
    for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (lane == 0) out[kb] = dot * scale;
  }
}

// --- 4. Each head's pattern, vertical blocks and slash bands ------------------------------

struct HeadParams {
  const float* sc;
  const double* a_bar;
  const double* s_band;
  int nqb, nkb, slots;
  double tau;
  BudgetRule rule;  // the budget, its floor set
  double* js;
  int *query_aware, *vertical, *slash;
  uint8_t *vkeep, *skeep;  // [Hq][nkb]
};

// keep = {block 0} and the budget over mass[0, n) (the host's cover(mass, {0}, budget, floor)),
// into out[0, n); returns how many are kept.
__device__ int cover(const double* mass, int n, const BudgetRule& rule, double* val, int* idx,
                     uint8_t* keep, int slots, uint8_t* out) {
  for (int i = threadIdx.x; i < slots; i += blockDim.x) {
    val[i] = i < n ? mass[i] : 0.0;
    keep[i] = i == 0 && n > 0;
  }
  __syncthreads();
  spend_budget(val, idx, slots, n, keep, rule);
  double kept = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    out[i] = keep[i];
    kept += keep[i];
  }
  return int(block_reduce(kept, Sum{}, 0.0));
}

__global__ void __launch_bounds__(kThreads) head_choice_kernel(const HeadParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  double* val = reinterpret_cast<double*>(smem);
  int* idx = reinterpret_cast<int*>(val + p.slots);
  uint8_t* keep = reinterpret_cast<uint8_t*>(idx + p.slots);
  const int h = blockIdx.x, n = p.nkb;
  const float* last = p.sc + (int64_t(h) * (p.nqb + 1) + p.nqb) * n;
  const double* ab = p.a_bar + int64_t(h) * n;
  // a_hat = softmax(last); the distance d = sqrt(JSD(a_bar, a_hat)), natural log, 0 log 0 = 0.
  double mx = -INFINITY;
  for (int i = threadIdx.x; i < n; i += blockDim.x) mx = fmax(mx, double(last[i]));
  mx = block_reduce(mx, Max{}, -INFINITY);
  double sum = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sum += exp(double(last[i]) - mx);
  const double inv = 1.0 / block_reduce(sum, Sum{}, 0.0);
  double jsd = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const double a = ab[i], b = exp(double(last[i]) - mx) * inv, m = 0.5 * (a + b);
    if (a > 0) jsd += 0.5 * a * log(a / m);
    if (b > 0) jsd += 0.5 * b * log(b / m);
  }
  const double d = sqrt(fmax(0.0, block_reduce(jsd, Sum{}, 0.0)));
  const bool query_aware = d < p.tau;
  // A query-aware head spends on vertical blocks and slash bands only the floor.
  BudgetRule rule = p.rule;
  if (query_aware) rule.topk = 0, rule.topp = 0, rule.min_share = 0;
  const int nv = cover(ab, n, rule, val, idx, keep, p.slots, p.vkeep + int64_t(h) * n);
  const int ns =
      cover(p.s_band + int64_t(h) * n, n, rule, val, idx, keep, p.slots, p.skeep + int64_t(h) * n);
  if (threadIdx.x == 0) {
    p.js[h] = d;
    p.query_aware[h] = query_aware;
    p.vertical[h] = nv;
    p.slash[h] = ns;
  }
}

// --- 5. Per query block: the forced, vertical and slash blocks, and a query-aware row ------

struct QueryBlockParams {
  const float* sc;
  const int* query_aware;
  const uint8_t *vkeep, *skeep;
  int nqb, nkb, q_len, kv_len, block, slots;
  long long off;
  bool per_block;   // a query-aware head's budget per query block (qa=block, topk, min_share)
  BudgetRule rule;  // that budget (no floor)
  uint8_t* keep;    // [Hq][nqb][nkb]
  double *rowmax, *rowinv;  // [Hq][nqb]: the pooled row's softmax, for step 6
};

__global__ void __launch_bounds__(kThreads) query_block_kernel(const QueryBlockParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  double* val = reinterpret_cast<double*>(smem);
  int* idx = reinterpret_cast<int*>(val + p.slots);
  uint8_t* keep = reinterpret_cast<uint8_t*>(idx + p.slots);
  const int qb = blockIdx.x, h = blockIdx.y, B = p.block;
  const int64_t item = int64_t(h) * p.nqb + qb;
  const long long p0 = p.off + (long long)qb * B;
  const long long p1 = p.off + min((long long)(qb + 1) * B, (long long)p.q_len) - 1;
  const int limit = int(min((long long)p.nkb, (p1 + B) / B));  // the causal blocks
  const uint8_t* vk = p.vkeep + int64_t(h) * p.nkb;
  const uint8_t* sk = p.skeep + int64_t(h) * p.nkb;
  for (int kb = threadIdx.x; kb < p.slots; kb += blockDim.x) {
    bool k = false;
    if (kb < limit) {
      k = kb == 0 || vk[kb] || keys_touch_block(p0, min(p1 + 1, (long long)p.kv_len), kb, B, p.nkb);
      // Band c keeps keys [p0 - (c + 1)B + 1, p1 - cB]: the bands whose offsets from this
      // block's rows reach kb's keys.
      const long long o_min = p0 - (long long)(kb + 1) * B + 1, o_max = p1 - (long long)kb * B;
      for (long long c = max(0ll, o_min) / B; !k && o_max >= 0 && c <= o_max / B; ++c)
        k = c < p.nkb && sk[c] &&
            keys_touch_block(p0 - (c + 1) * B + 1, p1 - c * B + 1, kb, B, p.nkb);
    }
    keep[kb] = k;
  }
  if (p.query_aware[h]) {
    // The pooled row's softmax over the causal blocks.
    const float* row = p.sc + (int64_t(h) * (p.nqb + 1) + qb) * p.nkb;
    double mx = -INFINITY;
    for (int i = threadIdx.x; i < limit; i += blockDim.x) mx = fmax(mx, double(row[i]));
    mx = block_reduce(mx, Max{}, -INFINITY);
    double sum = 0;
    for (int i = threadIdx.x; i < limit; i += blockDim.x) sum += exp(double(row[i]) - mx);
    const double inv = 1.0 / block_reduce(sum, Sum{}, 0.0);
    if (threadIdx.x == 0) p.rowmax[item] = mx, p.rowinv[item] = inv;
    if (p.per_block) {
      for (int i = threadIdx.x; i < p.slots; i += blockDim.x)
        val[i] = i < limit ? exp(double(row[i]) - mx) * inv : 0.0;
      __syncthreads();
      spend_budget(val, idx, p.slots, limit, keep, p.rule);
    }
  }
  __syncthreads();
  for (int kb = threadIdx.x; kb < p.nkb; kb += blockDim.x) p.keep[item * p.nkb + kb] = keep[kb];
}

// --- 6. qa=head: the flattened map of one head -----------------------------------------------

struct FlatParams {
  const float* sc;
  const int* query_aware;
  const double *rowmax, *rowinv;
  int h, nqb, nkb, q_len, block;
  long long off;
  double gamma;
  uint8_t* keep;  // the head's [nqb][nkb]
};

// Entry i = qb * nkb + kb of the head's map: its pooled probability, 0 outside the causal
// blocks (the host's flattened map).
__device__ __forceinline__ double flat_mass(const FlatParams& p, int64_t i, bool* causal) {
  const int qb = int(i / p.nkb), kb = int(i % p.nkb);
  const long long p1 = p.off + min((long long)(qb + 1) * p.block, (long long)p.q_len) - 1;
  *causal = kb < (p1 + p.block) / p.block;
  if (!*causal) return 0.0;
  const int64_t item = int64_t(p.h) * p.nqb + qb;
  return exp(double(p.sc[(int64_t(p.h) * (p.nqb + 1) + qb) * p.nkb + kb]) - p.rowmax[item]) *
         p.rowinv[item];
}

// The open entries' masses (-inf elsewhere, and for a head that is not query-aware) and their
// indices, for the sort.
__global__ void flat_fill_kernel(const FlatParams p, double* val, int* idx) {
  const int64_t n = int64_t(p.nqb) * p.nkb;
  const uint8_t* keep = p.keep + int64_t(p.h) * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    bool causal = false;
    const double m = flat_mass(p, i, &causal);
    val[i] = p.query_aware[p.h] && causal && !keep[i] ? m : -INFINITY;
    idx[i] = int(i);
  }
}

// Takes the sorted open entries in order while the kept mass is below gamma of the map's (the
// host's take_by_mass): one thread block; the crossing found over per-thread chunk sums, then
// walked entry by entry inside its chunk.
__global__ void __launch_bounds__(kThreads)
    flat_take_kernel(const FlatParams p, const double* val, const int* idx) {
  if (!p.query_aware[p.h]) return;
  __shared__ double chunk[kThreads];
  __shared__ int take_s;
  const int64_t n = int64_t(p.nqb) * p.nkb;
  uint8_t* keep = p.keep + int64_t(p.h) * n;
  double total = 0, kept = 0, open = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    bool causal = false;
    const double m = flat_mass(p, i, &causal);
    total += m;
    if (keep[i]) kept += m;
    open += val[i] != -INFINITY;
  }
  total = block_reduce(total, Sum{}, 0.0);
  kept = block_reduce(kept, Sum{}, 0.0);
  const int64_t n_open = int64_t(block_reduce(open, Sum{}, 0.0));
  const double need = p.gamma * total;
  const int64_t per = (n_open + kThreads - 1) / kThreads;
  const int64_t c0 = min(n_open, threadIdx.x * per), c1 = min(n_open, c0 + per);
  double cs = 0;
  for (int64_t i = c0; i < c1; ++i) cs += val[i];
  chunk[threadIdx.x] = cs;
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t t = n_open;
    double acc = kept;
    if (acc >= need) t = 0;
    for (int c = 0; c < kThreads && t == n_open && acc < need; ++c) {
      if (acc + chunk[c] < need) {
        acc += chunk[c];
        continue;
      }
      for (int64_t i = c * per; i < min(n_open, (c + 1) * per); ++i) {
        acc += val[i];
        if (acc >= need) {
          t = i + 1;
          break;
        }
      }
    }
    take_s = int(t);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < take_s; i += blockDim.x) keep[idx[i]] = 1;
}

// --- 7. Lists ----------------------------------------------------------------------------------

// Per (query block, q head), one warp: its kept causal blocks, ascending.
__global__ void lists_kernel(const uint8_t* keep, int nqb, int nkb, int q_len, int block,
                             long long off, int* list, int* count) {
  const int qb = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
  const int64_t item = int64_t(h) * nqb + qb;
  const long long p1 = off + min((long long)(qb + 1) * block, (long long)q_len) - 1;
  const int limit = int(min((long long)nkb, (p1 + block) / block));
  const int at = write_kept(keep + item * nkb, 0, limit, list + item * nkb, 0);
  if (lane == 0) count[item] = at;
}

}  // namespace

void flexprefill_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const FlexPrefillGpuPlan& plan,
                           const AttnOptions& opt, float* lse, BlockSelectResult& result,
                           void* stream) {
  const char* who = "cuda flexprefill";
  check_select_inputs(q, k, v, out, lse, opt, plan.block, plan.block, who);
  SPATTN_CHECK(opt.causal, who, ": needs causal attention");
  const GpuBlockBudget& b = plan.budget;
  const bool mass = b.topp > 0, share = b.min_share > 0;
  SPATTN_CHECK(!(mass && share) && b.topp <= 1 && b.min_share < 1 && b.topk >= 0 && plan.tau >= 0 &&
                   plan.tau <= 1 && plan.min_budget >= 0,
               who, ": bad budget (topk ", b.topk, ", topp ", b.topp, ", min_share ", b.min_share,
               "), tau ", plan.tau, " or min_budget ", plan.min_budget);
  const cudaStream_t s = stream_of(stream, opt);
  const int64_t B = plan.block, n_hat = std::min(B, q.seq), hq = q.heads, d = q.dim;
  const int64_t nqb = (q.seq + B - 1) / B, nkb = (k.seq + B - 1) / B;
  SPATTN_CHECK(nqb * nkb < (int64_t(1) << 31), who, ": ", nqb, " x ", nkb, " blocks a head");
  const long long off = (long long)query_position(0, q.seq, k.seq);
  const float scale = softmax_scale(opt, d);
  BudgetRule rule;
  rule.topk = b.topk, rule.topp = b.topp, rule.min_share = b.min_share;

  // 1. a_bar and the bands' slash mass from the last queries.
  DeviceBuffer<double> a_bar, s_band;
  a_bar.alloc(size_t(hq * nkb), s);
  s_band.alloc(size_t(hq * nkb), s);
  LastRowsParams lp{};
  lp.q = q.data, lp.k = k.data;
  lp.q_h = q.stride_head, lp.q_s = q.stride_seq, lp.k_h = k.stride_head, lp.k_s = k.stride_seq;
  lp.group = int(hq / k.heads), lp.q_len = int(q.seq), lp.kv_len = int(k.seq);
  lp.n_hat = int(n_hat), lp.block = int(B), lp.nkb = int(nkb), lp.off = off, lp.scale = scale;
  lp.a_bar = a_bar.get(), lp.s_band = s_band.get();
  if (q.dtype == DType::bf16) {
    if (d == 128)
      launch_last_rows<__nv_bfloat16, 128>(lp, unsigned(hq), s);
    else
      launch_last_rows<__nv_bfloat16, 64>(lp, unsigned(hq), s);
  } else {
    if (d == 128)
      launch_last_rows<__half, 128>(lp, unsigned(hq), s);
    else
      launch_last_rows<__half, 64>(lp, unsigned(hq), s);
  }
  check(cudaGetLastError(), "last_rows_kernel launch");

  // 2-3. Pooled rows and their scores.
  DeviceBuffer<float> qpool, qlast, kpool, sc;
  qpool.alloc(size_t(hq * nqb * d), s);
  qlast.alloc(size_t(hq * d), s);
  kpool.alloc(size_t(k.heads * nkb * d), s);
  sc.alloc(size_t(hq * (nqb + 1) * nkb), s);
  pool_rows(q, B, qpool.get(), s);
  pool_rows(q.rows(q.seq - n_hat, n_hat), n_hat, qlast.get(), s);
  pool_rows(k, B, kpool.get(), s);
  pooled_scores_kernel<<<dim3(unsigned(nqb + 1), unsigned(hq)), 128, 0, s>>>(
      qpool.get(), qlast.get(), kpool.get(), int(nqb), int(nkb), int(d), int(hq / k.heads), scale,
      sc.get());
  check(cudaGetLastError(), "pooled_scores_kernel launch");

  // 4. Per head.
  const int slots = select_slots(nkb);
  const size_t smem = select_smem(slots);
  DeviceBuffer<double> js;
  DeviceBuffer<int> query_aware, vertical, slash;
  DeviceBuffer<uint8_t> vkeep, skeep;
  js.alloc(size_t(hq), s);
  query_aware.alloc(size_t(hq), s);
  vertical.alloc(size_t(hq), s);
  slash.alloc(size_t(hq), s);
  vkeep.alloc(size_t(hq * nkb), s);
  skeep.alloc(size_t(hq * nkb), s);
  HeadParams hp{};
  hp.sc = sc.get(), hp.a_bar = a_bar.get(), hp.s_band = s_band.get();
  hp.nqb = int(nqb), hp.nkb = int(nkb), hp.slots = slots, hp.tau = plan.tau;
  hp.rule = rule;
  hp.rule.floor = (plan.min_budget + B - 1) / B;
  hp.js = js.get(), hp.query_aware = query_aware.get();
  hp.vertical = vertical.get(), hp.slash = slash.get();
  hp.vkeep = vkeep.get(), hp.skeep = skeep.get();
  allow_select_smem(reinterpret_cast<const void*>(head_choice_kernel), smem, nkb, who);
  head_choice_kernel<<<unsigned(hq), kThreads, smem, s>>>(hp);
  check(cudaGetLastError(), "head_choice_kernel launch");

  // 5. Per query block.
  DeviceBuffer<uint8_t> keep;
  DeviceBuffer<double> rowmax, rowinv;
  keep.alloc(size_t(hq * nqb * nkb), s);
  rowmax.alloc(size_t(hq * nqb), s);
  rowinv.alloc(size_t(hq * nqb), s);
  QueryBlockParams qp{};
  qp.sc = sc.get(), qp.query_aware = query_aware.get();
  qp.vkeep = vkeep.get(), qp.skeep = skeep.get();
  qp.nqb = int(nqb), qp.nkb = int(nkb), qp.q_len = int(q.seq), qp.kv_len = int(k.seq);
  qp.block = int(B), qp.slots = slots, qp.off = off;
  qp.per_block = plan.qa_per_block || !mass;
  qp.rule = rule;
  qp.keep = keep.get(), qp.rowmax = rowmax.get(), qp.rowinv = rowinv.get();
  allow_select_smem(reinterpret_cast<const void*>(query_block_kernel), smem, nkb, who);
  query_block_kernel<<<dim3(unsigned(nqb), unsigned(hq)), kThreads, smem, s>>>(qp);
  check(cudaGetLastError(), "query_block_kernel launch");

  // 6. The paper's flattened map, a head at a time (its scratch reused).
  if (!qp.per_block) {
    const int n = int(nqb * nkb);
    DeviceBuffer<double> val, val_sorted;
    DeviceBuffer<int> idx, idx_sorted;
    val.alloc(size_t(n), s), val_sorted.alloc(size_t(n), s);
    idx.alloc(size_t(n), s), idx_sorted.alloc(size_t(n), s);
    size_t temp_bytes = 0;
    check(
        cub::DeviceRadixSort::SortPairsDescending(nullptr, temp_bytes, val.get(), val_sorted.get(),
                                                  idx.get(), idx_sorted.get(), n, 0, 64, s),
        "cub SortPairsDescending (size)");
    DeviceBuffer<unsigned char> temp;
    temp.alloc(std::max<size_t>(temp_bytes, 1), s);
    FlatParams fp{};
    fp.sc = sc.get(), fp.query_aware = query_aware.get();
    fp.rowmax = rowmax.get(), fp.rowinv = rowinv.get();
    fp.nqb = int(nqb), fp.nkb = int(nkb), fp.q_len = int(q.seq), fp.block = int(B), fp.off = off;
    fp.gamma = b.topp, fp.keep = keep.get();
    const unsigned grid = unsigned(std::min<int64_t>((n + 255) / 256, 4096));
    for (int h = 0; h < int(hq); ++h) {
      fp.h = h;
      flat_fill_kernel<<<grid, 256, 0, s>>>(fp, val.get(), idx.get());
      check(cudaGetLastError(), "flat_fill_kernel launch");
      check(cub::DeviceRadixSort::SortPairsDescending(temp.get(), temp_bytes, val.get(),
                                                      val_sorted.get(), idx.get(), idx_sorted.get(),
                                                      n, 0, 64, s),
            "cub SortPairsDescending");
      flat_take_kernel<<<1, kThreads, 0, s>>>(fp, val_sorted.get(), idx_sorted.get());
      check(cudaGetLastError(), "flat_take_kernel launch");
    }
  }

  // 7. The lists and the block-sparse pass.
  DeviceBuffer<int> list, count;
  list.alloc(size_t(hq * nqb * nkb), s);
  count.alloc(size_t(hq * nqb), s);
  lists_kernel<<<dim3(unsigned(nqb), unsigned(hq)), 32, 0, s>>>(
      keep.get(), int(nqb), int(nkb), int(q.seq), int(B), off, list.get(), count.get());
  check(cudaGetLastError(), "lists_kernel launch");
  DeviceBlockLists view;
  view.list = list.get(), view.count = count.get();
  view.heads = int(hq), view.nqb = int(nqb), view.cap = int(nkb);
  view.block_q = B, view.block_k = B;
  BlockListRecords records;
  run_block_lists(q, k, v, out, opt, lse, view, &records, s);
  result.lists = read_block_lists(view, s);
  result.stats = records.read(s);
  const std::vector<double> jsh = js.to_host(s);
  const std::vector<int> qah = query_aware.to_host(s), nvh = vertical.to_host(s),
                         nsh = slash.to_host(s);
  result.per_head["js_distance"] = jsh;
  result.per_head["query_aware"].assign(qah.begin(), qah.end());
  result.per_head["vertical_blocks"].assign(nvh.begin(), nvh.end());
  result.per_head["slash_bands"].assign(nsh.begin(), nsh.end());
}

}  // namespace spattn::cuda
