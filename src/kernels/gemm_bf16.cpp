// gemm_bf16 (gemm_bf16.hpp): the activations' rounding, the weights' regrouping into tiles, the
// loop over tiles and rows, and the portable loops; the AVX512_BF16 loops are in
// gemm_bf16_avx512bf16.cpp.
#include "kernels/gemm_bf16.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/gemm_bf16_tile.hpp"
#include "spattn/error.hpp"

namespace spattn::kernels {

using namespace gemm_bf16_detail;

namespace {

// ggml's GGML_FP32_TO_BF16 (ggml-impl.h): to nearest, ties to even, by integer arithmetic; a
// NaN keeps its top bits with the quiet bit set.
uint16_t round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 64);
  return uint16_t((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

float bf16_value(uint32_t h) {
  const uint32_t u = (h & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// vdpbf16ps takes subnormal inputs as zero and flushes subnormal results to zero (its sign
// kept).
float flush(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

// One lane of vdpbf16ps: the odd column's product first, each step a fused multiply-add.
float dot_pair(float acc, uint32_t x2, uint32_t w2) {
  acc = flush(std::fma(flush(bf16_value(x2 >> 16)), flush(bf16_value(w2 >> 16)), flush(acc)));
  return flush(std::fma(flush(bf16_value(x2)), flush(bf16_value(w2)), acc));
}

void rows_portable(const TilePair* t, int64_t np, const uint16_t* xb, int64_t k, int64_t p0,
                   int64_t r0, int64_t rows, float* c, int64_t ldc, int64_t m0, int mrows,
                   bool first) {
  for (int64_t r = r0; r < r0 + rows; ++r) {
    const uint16_t* x = xb + r * k + 2 * p0;
    float* cr = c + r * ldc + m0;
    for (int i = 0; i < mrows; ++i) {
      float out = first ? 0.0f : cr[i];
      for (int64_t p = 0; p < np; ++p) {
        const uint32_t x2 = uint32_t(x[2 * p]) | uint32_t(x[2 * p + 1]) << 16;
        out = dot_pair(out, x2, t[p].w[i / 16][i % 16]);
      }
      cr[i] = out;
    }
  }
}

// Rows [m0, m0 + 32) of w, pairs [p0, p0 + np), into t.
void unpack(const Bf16Weights& w, int64_t m0, int64_t p0, int64_t np, TilePair* t) {
  const int rows = int(std::min<int64_t>(kRows, w.m - m0));
  if (rows < kRows) std::memset(t, 0, size_t(np) * sizeof(TilePair));
  const auto* data = static_cast<const uint8_t*>(w.data);
  for (int i = 0; i < rows; ++i) {
    const uint8_t* row = data + (m0 + i) * w.row_bytes + 4 * p0;
    for (int64_t p = 0; p < np; ++p) std::memcpy(&t[p].w[i / 16][i % 16], row + 4 * p, 4);
  }
}

void run(const Bf16Weights& w, const uint16_t* xb, int64_t n, int64_t k, float* c, int64_t ldc,
         int ith, int nth, RowsFn rows_fn, UnpackFn unpack_fn) {
  const int64_t groups = (w.m + kRows - 1) / kRows;
  const int64_t gb = groups * ith / nth, ge = groups * (ith + 1) / nth;
  if (gb >= ge || n <= 0) return;
  const int64_t pairs = k / 2;
  thread_local std::vector<TilePair> tile;
  tile.resize(size_t(std::min<int64_t>(kPairs, pairs)));
  // Group by group, each chunk of up to 2048 columns unpacked once and swept by every row: a
  // row's outputs stay in registers over the whole chunk, so C is read and written once a chunk
  // (with 256-column chunks its strided loads and stores took about half the time).
  for (int64_t g = gb; g < ge; ++g) {
    const int64_t m0 = g * kRows;
    for (int64_t p0 = 0; p0 < pairs; p0 += kPairs) {
      const int64_t np = std::min<int64_t>(kPairs, pairs - p0);
      if (unpack_fn && m0 + kRows <= w.m)  // a whole group: 16 x 16 transposes
        unpack_fn(static_cast<const uint8_t*>(w.data) + m0 * w.row_bytes, w.row_bytes, p0, np,
                  tile.data());
      else
        unpack(w, m0, p0, np, tile.data());
      rows_fn(tile.data(), np, xb, k, p0, 0, n, c, ldc, m0, int(std::min<int64_t>(kRows, w.m - m0)),
              p0 == 0);
    }
  }
}

}  // namespace

void gemm_bf16_check(const Bf16Weights& w, int64_t k) {
  SPATTN_CHECK(k > 0 && k % 2 == 0 && w.m >= 0 && w.row_bytes >= 2 * k && w.row_bytes % 4 == 0,
               "gemm_bf16: ", w.m, " rows of ", k, " bf16 values with ", w.row_bytes,
               " bytes a row (k must be even, rows whole 4-byte pairs)");
}

int64_t gemm_bf16_act_bytes(int64_t n, int64_t k) { return 2 * n * k; }

void gemm_bf16_round(const float* x, int64_t n, int64_t k, int64_t ldx, uint16_t* xb, int ith,
                     int nth) {
  const RoundRowFn vec = avx512bf16_round_row();
  for (int64_t r = n * ith / nth; r < n * (ith + 1) / nth; ++r) {
    if (vec) {
      vec(x + r * ldx, k, xb + r * k);
    } else {
      for (int64_t i = 0; i < k; ++i) xb[r * k + i] = round_bf16(x[r * ldx + i]);
    }
  }
}

void gemm_bf16_run(const Bf16Weights& w, const uint16_t* xb, int64_t n, int64_t k, float* c,
                   int64_t ldc, int ith, int nth) {
  gemm_bf16_check(w, k);
  const RowsFn v = avx512bf16_rows();
  run(w, xb, n, k, c, ldc, ith, nth, v ? v : &rows_portable, avx512bf16_unpack());
}

void gemm_bf16_run_portable(const Bf16Weights& w, const uint16_t* xb, int64_t n, int64_t k,
                            float* c, int64_t ldc) {
  gemm_bf16_check(w, k);
  run(w, xb, n, k, c, ldc, 0, 1, &rows_portable, nullptr);
}

bool gemm_bf16_dot() { return avx512bf16_rows() != nullptr; }

// From 64 rows, where it measured faster than ggml's products on a Zen 5 (docs/runner.md: 1.08x
// at 64 rows, 1.3-1.7x from 128; even at 32, slower below: there the tile's regrouping, once
// per call, is paid back by too few rows).
int64_t gemm_bf16_min_rows() { return gemm_bf16_dot() ? 64 : 0; }

}  // namespace spattn::kernels
