// Sums of normalised attention weights a_ij = exp(x_ij - LSE_i), given each row's final LSE
// from a first pass (as FlashAttention's backward pass recomputes P from the saved LSE): per
// key (column sums, the heavy-hitter scores of H2O) and per (query block, key block) (block
// mass). Per-thread sums through the P hook, reduced in thread order over the loop's fixed
// schedule for kReduce policies: bitwise the same on every run with the same thread count.
// Target-independent; composes with any policy's coverage (tests add gathered columns).
#pragma once
#include <cmath>
#include <vector>

#include "kernels/flash_common.hpp"
#include "spattn/weight_sums.hpp"

namespace spattn::kernels {

struct WeightSumsPolicy : DensePolicy {
  static constexpr bool kObserve = true;
  static constexpr bool kReduce = true;
  static constexpr bool kOutput = false;  // P only: no P.V, no output
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
    // Columns: the tile's rows summed in f32 first (a vectorisable loop over contiguous P),
    // then once per key into the double sums.
    if (!loc.column.empty()) {
      float acc[kTileKeys] = {};
      for (int64_t r = 0; r < v.n; ++r) {
        const float f = row_factor(v, r);
        if (f == 0.0f) continue;
        const float* pr = v.p + r * kTileKeys;
        for (int64_t jj = 0; jj < kTileKeys; ++jj) acc[jj] += pr[jj] * f;
      }
      double* col = loc.column.data() + v.h * kv_len;
      for (int64_t jj = 0; jj < v.n_keys; ++jj)
        if (acc[jj] != 0.0f) col[v.key(jj)] += double(acc[jj]);
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
    const float lse = row_lse[v.h * q_len + v.out_rows[r]];
    if (!(lse > kNegInf)) return 0.0f;
    return float(std::exp2(double(v.m[r]) - double(lse) * double(kLog2e)));
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

}  // namespace spattn::kernels
