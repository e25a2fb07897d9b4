// The mass and count budgets a block selector spends on one query block, on the device: the
// rules of src/masks/block_budget.hpp (topp: keep_top_mass, min_share: keep_min_share) and
// mean_pool's topk (masks::top_indices over the open blocks), spent by one thread block, so
// that topk, topp and min_share select on the GPU what they select on the CPU from the same
// estimates. block_select.cu holds the one kernel that calls it.
#pragma once
#include <climits>
#include <cmath>
#include <cstdint>

namespace spattn::cuda {

struct BudgetRule {
  long long topk = 0;    // used when neither below is set: that many more blocks by estimate
  double topp = 0;       // > 0: the fewest blocks whose mass reaches topp of the total
  double min_share = 0;  // > 0: every block whose mass is at least min_share of the total
  // Then, whatever the budget kept, more by estimate until at least this many are kept in all,
  // the forced ones counted (flexprefill's min_budget; 0: none).
  long long floor = 0;
};

// Keys [begin, end) touch key block kb of [0, nkb) (masks::mark_blocks, clipped to the blocks).
__device__ __forceinline__ bool keys_touch_block(long long begin, long long end, int kb,
                                                 int block_k, int nkb) {
  begin = begin < 0 ? 0 : begin;
  const long long cap = (long long)nkb * block_k;
  end = end < cap ? end : cap;
  return begin < end && kb >= begin / block_k && kb <= (end - 1) / block_k;
}

// By one warp (every lane calling): writes the j in [begin, end) whose flag[j] is set, ascending,
// at out[at], out[at + 1], ...; returns at plus how many were written (on every lane). A ballot
// per 32 entries.
template <class Flag>
__device__ __forceinline__ int write_kept(const Flag* flag, int begin, int end, int* out, int at) {
  const int lane = threadIdx.x % 32;
  for (int j0 = begin; j0 < end; j0 += 32) {
    const int j = j0 + lane;
    const bool kept = j < end && flag[j];
    const unsigned ballot = __ballot_sync(0xffffffffu, kept);
    if (kept) out[at + __popc(ballot & ((1u << lane) - 1))] = j;
    at += __popc(ballot);
  }
  return at;
}

// Sorts the pairs (val[i], idx[i]), i < n (a power of two), best first: the larger value,
// ties the smaller index (the host's order). A bitonic network, every thread taking part.
__device__ inline void sort_pairs_desc(double* val, int* idx, int n) {
  for (int size = 2; size <= n; size <<= 1)
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < n / 2; i += blockDim.x) {
        const int lo = 2 * stride * (i / stride) + i % stride, hi = lo + stride;
        const bool desc = (lo & size) == 0;
        const double a = val[lo], b = val[hi];
        const int ia = idx[lo], ib = idx[hi];
        const bool hi_first = b > a || (b == a && ib < ia);
        if (hi_first == desc) val[lo] = b, val[hi] = a, idx[lo] = ib, idx[hi] = ia;
      }
      __syncthreads();
    }
}

// One query block's budget, by every thread of the block: val[0, limit) the estimates of its
// visible key blocks (masses for topp and min_share, scores for topk), keep[0, limit) its
// forced blocks already set (1). Sets keep for the blocks the budget adds. val and idx are
// scratch of `slots` entries (a power of two >= limit): val's estimates are overwritten.
// The sums run in block order on one thread, as the host's loops.
__device__ inline void spend_budget(double* val, int* idx, int slots, int limit, uint8_t* keep,
                                    const BudgetRule& rule) {
  __shared__ double total_s, kept_s;
  __shared__ int n_cand_s, take_s, forced_s;
  if (threadIdx.x == 0) {
    double total = 0, kept = 0;
    int forced = 0;
    for (int kb = 0; kb < limit; ++kb) {
      total += val[kb];
      if (keep[kb]) kept += val[kb], ++forced;
    }
    total_s = total, kept_s = kept, n_cand_s = 0, forced_s = forced;
  }
  __syncthreads();
  int mine = 0;
  for (int i = threadIdx.x; i < slots; i += blockDim.x) {
    const bool cand = i < limit && !keep[i];
    if (!cand) val[i] = -INFINITY;
    idx[i] = cand ? i : INT_MAX;
    mine += cand;
  }
  if (mine) atomicAdd(&n_cand_s, mine);
  __syncthreads();
  sort_pairs_desc(val, idx, slots);  // ends with a barrier: n_cand_s is read below
  if (threadIdx.x == 0) {
    const int n = n_cand_s;
    int t = 0;
    if (rule.topp > 0) {
      const double need = rule.topp * total_s;
      for (double kept = kept_s; t < n && kept < need; ++t) kept += val[t];
    } else if (rule.min_share > 0) {
      const double need = rule.min_share * total_s;
      while (t < n && val[t] >= need) ++t;
    } else {
      t = rule.topk < n ? int(rule.topk < 0 ? 0 : rule.topk) : n;
    }
    const long long short_of = rule.floor - forced_s;  // the floor, in blocks still to take
    if (short_of > t) t = short_of < n ? int(short_of) : n;
    take_s = t;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < take_s; i += blockDim.x) keep[idx[i]] = 1;
  __syncthreads();
}

}  // namespace spattn::cuda
