// Sums of normalised attention weights a_ij = exp(x_ij - LSE_i), given each row's final LSE
// from a first pass (as FlashAttention's backward pass recomputes P from the saved LSE): per
// key (column sums, the heavy-hitter scores of H2O) and per (query block, key block) (block
// mass). Per-thread sums through the P hook, reduced in thread order over the loop's fixed
// schedule for kReduce policies: bitwise the same on every run with the same thread count.
// Target-independent; composes with any policy's coverage (tests add gathered columns).
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/flash_common.hpp"
#include "spattn/tensor.hpp"
#include "spattn/weight_sums.hpp"

namespace spattn::kernels {

// a_ij / P_ij for a row whose P was taken against running max m (log2 units) and whose final
// natural-log LSE is lse: 2^(m - LSE log2 e); 0 for a row that saw no key.
inline float weight_factor(float m, float lse) {
  if (!(lse > kNegInf)) return 0.0f;
  return float(std::exp2(double(m) - double(lse) * double(kLog2e)));
}

// out[jj] = sum_r P[r][jj] f[r] for the n_keys keys of one tile, the rows summed in f32 (a
// vectorisable loop over contiguous P).
inline void RowSums(const float* p, int64_t n, int64_t n_keys, const float* f, float* out) {
  float acc[kTileKeys] = {};
  for (int64_t r = 0; r < n; ++r) {
    if (f[r] == 0.0f) continue;
    const float* pr = p + r * kTileKeys;
    for (int64_t jj = 0; jj < kTileKeys; ++jj) acc[jj] += pr[jj] * f[r];
  }
  std::copy_n(acc, n_keys, out);
}

// col[key(jj)] += sum_r P[r][jj] f[r] for the n_keys keys of one tile: RowSums, then once per
// key into the double sums.
template <class KeyOf>
inline void AddColumnSums(double* col, const float* p, int64_t n, int64_t n_keys, const float* f,
                          KeyOf key) {
  float acc[kTileKeys];
  RowSums(p, n, n_keys, f, acc);
  for (int64_t jj = 0; jj < n_keys; ++jj)
    if (acc[jj] != 0.0f) col[key(jj)] += double(acc[jj]);
}

struct WeightSumsPolicy : DensePolicy {
  struct Observers : DensePolicy::Observers {
    static constexpr bool kObserve = true;
    static constexpr bool kReduce = true;
    static constexpr bool kOutput = false;  // P only: no P.V, no output
  };
  struct Local {
    std::vector<double> column, block;
  };
  const float* row_lse = nullptr;  // [Hq][Lq], natural log
  WeightSums* out = nullptr;
  int64_t heads = 0, q_len = 0, kv_len = 0, n_qb = 0, n_kb = 0;

  void observe(Local& loc, const TileView& v) const {
    if (loc.column.empty() && loc.block.empty()) {
      if (out->want_columns) loc.column.assign(size_t(heads * kv_len), 0.0);
      if (out->want_blocks) loc.block.assign(size_t(heads * n_qb * n_kb), 0.0);
    }
    if (!loc.column.empty()) {
      float f[kMaxTileRows];
      for (int64_t r = 0; r < v.n; ++r) f[r] = row_factor(v, r);
      AddColumnSums(loc.column.data() + v.h * kv_len, v.p, v.n, v.n_keys, f,
                    [&v](int64_t jj) { return v.key(jj); });
    }
    if (loc.block.empty()) return;
    for (int64_t r = 0; r < v.n; ++r) {
      const float lse = row_lse[v.h * q_len + v.out_rows[r]];
      if (!(lse > kNegInf)) continue;  // a row that saw no key has no weights
      // P = 2^(x - m) with m the running max after this tile, so a = P 2^(m - LSE log2 e).
      const double f = std::exp2(double(v.m[r]) - double(lse) * double(kLog2e));
      const float* pr = v.p + r * kTileKeys;
      const int64_t qb = v.q_rows[r] / out->block_q;
      for (int64_t jj = 0; jj < v.n_keys; ++jj) {
        if (pr[jj] == 0.0f) continue;
        const double a = double(pr[jj]) * f;
        const int64_t j = v.key(jj);
        loc.block[size_t((v.h * n_qb + qb) * n_kb + j / out->block_k)] += a;
      }
    }
  }
  // a_ij / P_ij for row r of the tile: 2^(m - LSE log2 e); 0 for a row that saw no key.
  float row_factor(const TileView& v, int64_t r) const {
    return weight_factor(v.m[r], row_lse[v.h * q_len + v.out_rows[r]]);
  }
  void reduce(std::vector<Local>& locals) {
    if (out->want_columns) out->column.assign(size_t(heads * kv_len), 0.0);
    if (out->want_blocks) out->block.assign(size_t(heads * n_qb * n_kb), 0.0);
    for (const Local& l : locals) {
      for (size_t i = 0; i < l.column.size(); ++i) out->column[i] += l.column[i];
      for (size_t i = 0; i < l.block.size(); ++i) out->block[i] += l.block[i];
    }
  }
};

// Column sums in the attention pass itself (Base's coverage, output and LSE untouched): an
// item keeps each tile's P, the running max it was taken against and the tile's keys, and once
// its rows' final LSE is known (finish) weights them as WeightSumsPolicy would from that LSE
// (the rows of a tile summed in f32, RowSums), at the cost of keeping P (the loop writes it
// into the policy's buffer: kKeepP) instead of recomputing Q K^T and exp in a second pass. Each item writes its per-key f32 sums to a slot
// of its own (a key lies in one tile of an item), and sum_into() adds the slots in item order:
// no per-thread state to reduce, so the items keep the loop's first-come schedule (a static
// one stalls when another process takes a core) and the sums are bitwise the same for any
// thread count.
template <class Base>
struct ColumnSumsPolicy : Base {
  struct Observers : Base::Observers {
    static constexpr bool kObserve = true;
    static constexpr bool kFinish = true;
    static constexpr bool kKeepP = true;  // the loop writes each tile's P into Local::p itself
  };
  struct Local {
    // The item's tiles so far: P [npad][kTileKeys] each, back to back (64-byte aligned).
    std::unique_ptr<float[], void (*)(void*)> p{nullptr, aligned_free};
    size_t p_cap = 0, p_used = 0;  // floats
    std::vector<float> m;          // [tiles][n]: running max after each tile
    std::vector<int64_t> keys;     // [tiles][kTileKeys]: packed key of each column
    std::vector<int64_t> n_keys;
  };
  struct Slot {
    std::vector<int64_t> keys;
    std::vector<float> sums;
  };
  int64_t tiles = 0;                // Base::num_tiles of the problem
  mutable std::vector<Slot> slots;  // [Hq][tiles]: written by item (h, t) only

  float* p_buffer(Local& loc, int64_t npad) const {
    const size_t need = loc.p_used + size_t(npad * kTileKeys);
    if (need > loc.p_cap) {  // grow, keeping the item's earlier tiles
      const size_t cap = std::max(need, 2 * loc.p_cap);
      std::unique_ptr<float[], void (*)(void*)> p(
          static_cast<float*>(aligned_alloc_bytes(cap * sizeof(float))), aligned_free);
      if (loc.p_used) std::copy_n(loc.p.get(), loc.p_used, p.get());
      loc.p = std::move(p);
      loc.p_cap = cap;
    }
    float* at = loc.p.get() + loc.p_used;
    loc.p_used = need;
    return at;
  }
  void observe(Local& loc, const TileView& v) const {
    loc.m.insert(loc.m.end(), v.m, v.m + v.n);
    for (int64_t jj = 0; jj < kTileKeys; ++jj) loc.keys.push_back(jj < v.n_keys ? v.key(jj) : 0);
    loc.n_keys.push_back(v.n_keys);
  }
  void finish(Local& loc, const TileView& v, const float* row_lse) const {
    Slot& slot = slots[size_t(v.h * tiles + v.t)];
    slot.keys.clear(), slot.sums.clear();
    float f[kMaxTileRows];
    const size_t tile_floats = loc.n_keys.empty() ? 0 : loc.p_used / loc.n_keys.size();
    for (size_t t = 0; t < loc.n_keys.size(); ++t) {
      const float* m = loc.m.data() + t * size_t(v.n);
      for (int64_t r = 0; r < v.n; ++r) f[r] = weight_factor(m[r], row_lse[r]);
      const int64_t* keys = loc.keys.data() + t * size_t(kTileKeys);
      const size_t first = slot.sums.size();
      slot.sums.resize(first + size_t(loc.n_keys[t]));
      slot.keys.insert(slot.keys.end(), keys, keys + loc.n_keys[t]);
      RowSums(loc.p.get() + t * tile_floats, v.n, loc.n_keys[t], f, slot.sums.data() + first);
    }
    loc.p_used = 0;
    loc.m.clear(), loc.keys.clear(), loc.n_keys.clear();
  }
  // column [Hq][kv_len] = the slots' sums, item by item in (h, t) order.
  void sum_into(std::vector<double>& column, int64_t heads, int64_t kv_len) const {
    column.assign(size_t(heads * kv_len), 0.0);
    for (int64_t h = 0; h < heads; ++h) {
      double* col = column.data() + h * kv_len;
      for (int64_t t = 0; t < tiles; ++t) {
        const Slot& slot = slots[size_t(h * tiles + t)];
        for (size_t i = 0; i < slot.keys.size(); ++i)
          if (slot.sums[i] != 0.0f) col[slot.keys[i]] += double(slot.sums[i]);
      }
    }
  }
};

}  // namespace spattn::kernels
