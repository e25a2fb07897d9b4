// MOMO's per-row block selection ("Measure Once, Mask Once", Eq. 3 and Appendix Algorithm 2:
// each sampled row keeps its k best blocks by S(j)), the pieces both of the device's forms
// share: the selection kernel over stored tile LSEs (momo.cu's momo_select_kernel) and the
// query-sparse kernel's fused form, which keeps a heap per row as its tiles arrive
// (flash_fwd.cuh, FlashParams::sel_k). Host and device: tests/select/test_row_topk.cpp
// holds the heap and the fold to a plain sort on the CPU.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define SPATTN_HD __host__ __device__ __forceinline__
#else
#define SPATTN_HD inline
#endif

namespace spattn::cuda {

// make_key (spattn/select.hpp) again: the score's order-preserving bits above the complemented
// block, so that a larger key ranks first (ties: the smaller block). 0 is no key.
SPATTN_HD unsigned long long make_key(int block, float score) {
  uint32_t b;
  const float s = score + 0.0f;  // -0 as +0
  memcpy(&b, &s, 4);
  const uint32_t ordered = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<unsigned long long>(ordered) << 32) | uint32_t(~uint32_t(block));
}
SPATTN_HD int key_block(unsigned long long key) { return int(~uint32_t(key & 0xffffffffu)); }
SPATTN_HD float key_score(unsigned long long key) {
  const uint32_t ordered = uint32_t(key >> 32);
  const uint32_t b = (ordered & 0x80000000u) ? (ordered & 0x7fffffffu) : ~ordered;
  float s;
  memcpy(&s, &b, 4);
  return s;
}

// BlockSelectObserver's fold of two tile LSEs.
SPATTN_HD float log_add_exp(float a, float b) {
  const float m = fmaxf(a, b);
  if (m == -INFINITY) return m;
  return m + log1pf(expf(fminf(a, b) - m));
}

// Per query block: the forced blocks (ForcedBlocks) and where its sampled rows start.
struct QBlock {
  int sink_end, local_begin, causal_end, first_row;
};

// A sampled row's candidates (BlockSelectObserver's Span): the blocks [lo, lo + n) of
// [sink_end, local_begin) with keys below the row's causal limit; a block's score folds the
// tiles below the limit only.
struct Candidates {
  int lo, n, limit;
};
SPATTN_HD Candidates candidates_of(int row, const QBlock& f, int kv_len, int pos_offset, int beta) {
  Candidates c;
  c.limit = kv_len < pos_offset + row + 1 ? kv_len : pos_offset + row + 1;
  const int nb = (c.limit + beta - 1) / beta;
  const int sink = f.sink_end > 0 ? f.sink_end : 0, local = f.local_begin > 0 ? f.local_begin : 0;
  c.lo = sink < nb ? sink : nb;
  const int local_key = (local < nb ? local : nb) * beta;
  const int hi_key = c.limit < local_key ? c.limit : local_key;
  c.n = hi_key > c.lo * beta ? (hi_key + beta - 1) / beta - c.lo : 0;
  return c;
}

// `key` put at the root of the min-heap keys[0, n) and sifted down to its place.
SPATTN_HD void heap_sift_down(unsigned long long* keys, int n, unsigned long long key) {
  int i = 0;
  for (;;) {
    const int c = 2 * i + 1;
    if (c >= n) break;
    const int m = c + 1 < n && keys[c + 1] < keys[c] ? c + 1 : c;
    if (keys[m] >= key) break;
    keys[i] = keys[m];
    i = m;
  }
  keys[i] = key;
}

// The k best keys offered so far, a min-heap over keys[0, count) (keys[0] the worst kept).
SPATTN_HD void heap_offer(unsigned long long* keys, int& count, int k, unsigned long long key) {
  if (count < k) {
    int i = count++;  // sift up from the new leaf
    while (i > 0 && keys[(i - 1) / 2] > key) {
      keys[i] = keys[(i - 1) / 2];
      i = (i - 1) / 2;
    }
    keys[i] = key;
  } else if (k > 0 && key > keys[0]) {
    heap_sift_down(keys, count, key);  // in place of the worst
  }
}

// The heap's keys best first (descending), in place: the heap sort of a min-heap.
SPATTN_HD void heap_sort_desc(unsigned long long* keys, int count) {
  for (int end = count - 1; end > 0; --end) {
    const unsigned long long worst = keys[0];
    heap_sift_down(keys, end, keys[end]);
    keys[end] = worst;
  }
}

// One row's fold of its tile LSEs into block scores as the tiles arrive in key order, each
// finished candidate block offered to the row's heap (a block whose score is -inf, no key
// measured, is none).
struct BlockFold {
  int block = -1;
  float score = -INFINITY;
  // Tile `tile` (64 keys) with LSE `lse`, below the row's limit.
  SPATTN_HD void add(int tile, float lse, int beta, const Candidates& c, unsigned long long* keys,
                     int& count, int k) {
    const int j = tile * 64 / beta;
    if (j == block) {
      score = log_add_exp(score, lse);
      return;
    }
    finish(c, keys, count, k);
    block = j, score = lse;
  }
  SPATTN_HD void finish(const Candidates& c, unsigned long long* keys, int& count, int k) {
    if (block >= c.lo && block < c.lo + c.n && score != -INFINITY)
      heap_offer(keys, count, k, make_key(block, score));
    block = -1;
  }
};

}  // namespace spattn::cuda
