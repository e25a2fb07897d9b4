// Q K^T for rows far longer than a head (XAttention's antidiagonal estimate multiplies rows of
// stride x head_dim values) on the flash kernel's own score micro-kernels: f32 FMAs, or bf16
// operands with vdpbf16ps where the CPU has AVX512_BF16 (twice the products per instruction;
// each product exact, sums in f32). The keys are packed once into the micro-kernels' tiles of
// 64 and scored against any number of row blocks.
#pragma once
#include <cstdint>
#include <memory>

#include "spattn/attention.hpp"
#include "spattn/tensor.hpp"

namespace spattn::kernels {

struct LongRowKeys {
  bool bf16 = false;     // the tiles hold bf16 pairs (Bf16DotOps), else f32 (F32Ops)
  int64_t n = 0, w = 0;  // keys, values per key (a multiple of 2)
  int64_t tiles = 0;
  std::unique_ptr<unsigned char[], void (*)(void*)> data{nullptr, aligned_free};
  // The keys the tiles hold room for (append_long_row_keys fills them in place up to it).
  int64_t room() const { return tiles * kKeyBlock; }
};

// Row s of head h of t as f32 into dst (t.dim values; a copy where t is f32 and contiguous),
// how callers lay out the rows they score.
void copy_row_f32(const TensorView& t, int64_t h, int64_t s, float* dst);

// Whether bf16 operands can be asked for on this CPU.
bool long_row_bf16_supported();

// Packs keys k [n][w] (row-major f32), zero past the last key; bf16 only where supported
// (else the f32 tiles). Tiles for max(n, capacity) keys, so that append_long_row_keys can add
// keys up to the capacity in place.
LongRowKeys pack_long_row_keys(const float* k, int64_t n, int64_t w, bool bf16,
                               int64_t capacity = 0);
// Packs keys [keys.n, n) of k (the same rows as packed so far, then the new ones) into keys'
// tiles in place, n at most keys.room(): the bytes packing all n at once writes.
void append_long_row_keys(LongRowKeys& keys, const float* k, int64_t n);

// s[r * lds + j] = alpha * q[r] . k[first + j] for r < rows, j < cols (first a multiple of 64,
// first + cols <= keys.n); q [rows][w] row-major f32 (rounded to bf16 first when the keys are
// bf16). Single-threaded; every entry is summed in the same order whatever rows, first and cols
// are, so results do not depend on how a caller splits the work.
void long_row_scores(const float* q, int64_t rows, const LongRowKeys& keys, int64_t cols,
                     float alpha, float* s, int64_t lds, int64_t first = 0);

}  // namespace spattn::kernels
