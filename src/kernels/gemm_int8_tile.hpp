// The unpacked weight tile of the integer product (gemm_int8.hpp) and the activation rows'
// layout, shared by the portable loops (gemm_int8.cpp) and the AVX-512 VNNI ones
// (gemm_int8_avx512vnni.cpp).
#pragma once
#include <cstdint>
#include <cstring>

namespace spattn::kernels::gemm_int8_detail {

constexpr int kRows = 16;   // weight rows a tile (one 512-bit vector of int32 lanes)
constexpr int kBlock = 32;  // columns a block (one activation scale, one weight scale or two)

// How a format scales its integers within a 32-column block.
enum class Scaling : uint8_t {
  plain,   // w = s q
  min,     // w = s q - mn (q4_K, q5_K: the sub-block's minimum)
  halves,  // w = s0 q on columns 0-15, s1 q on 16-31 (q6_K's scales of 16)
};

// One block of 32 columns of 16 weight rows. q: vector g (64 bytes) holds columns 4g..4g+3,
// row i's four at 4i. corr: -128 times the row's sum of q (columns 0-15 only for halves, whose
// corr_hi has columns 16-31), the u8 activations' offset taken back out. Rows past the matrix:
// zeros throughout.
struct alignas(64) TileBlock {
  int8_t q[8 * 64];
  float s0[kRows];
  float s1[kRows];
  float mn[kRows];
  int32_t corr[kRows];
  int32_t corr_hi[kRows];
};

// The quantized activations (gemm_int8_quantize's layout): row r at base + r * row_bytes,
// k bytes of q + 128, then nb floats d, then nb floats d * sum(q).
struct ActRows {
  const uint8_t* base = nullptr;
  int64_t row_bytes = 0;
  int64_t nb = 0;  // blocks a row
  const uint8_t* q(int64_t r) const { return base + r * row_bytes; }
  const float* d(int64_t r) const {
    return reinterpret_cast<const float*>(base + r * row_bytes + nb * kBlock);
  }
  const float* s(int64_t r) const { return d(r) + nb; }
};
inline int64_t act_row_bytes(int64_t k) { return k + 2 * int64_t(sizeof(float)) * (k / kBlock); }

// Rows [r0, r0 + rows) of C, columns [m0, m0 + mrows) (mrows <= 16), over blocks
// [b0, b0 + nbt) of the activations with tiles tb[0..nbt): C = (first ? 0 : C) + the blocks'
// products, one f32 chain per output in block order.
using RowsFn = void (*)(Scaling sc, const TileBlock* tb, int64_t nbt, const ActRows& a, int64_t b0,
                        int64_t r0, int64_t rows, float* c, int64_t ldc, int64_t m0, int mrows,
                        bool first);

// As RowsFn over two tiles side by side: ta for columns [m0, m0 + 16), tb for the next
// mrows_b (<= 16).
using Rows2Fn = void (*)(Scaling sc, const TileBlock* ta, const TileBlock* tb, int64_t nbt,
                         const ActRows& a, int64_t b0, int64_t r0, int64_t rows, float* c,
                         int64_t ldc, int64_t m0, int mrows_b, bool first);

// One row's k values (a multiple of 32) quantized into q (k bytes of q + 128), d and s (k / 32
// floats each), gemm_int8_quantize's layout. Blocks holding a non-finite value go to
// `fallback` (one block: 32 values, its 32 bytes, its d and s).
using BlockFn = void (*)(const float* x, uint8_t* q, float* d, float* s);
using QuantizeRowFn = void (*)(const float* x, int64_t k, uint8_t* q, float* d, float* s,
                               BlockFn fallback);

// One block of 32 columns of a whole tile (rows m0..m0 + 15: two groups of 8) of ggml's 8-row
// interleaved layout (gemm_int8.hpp's Int8Layout::interleaved8; q4_0, iq4_nl, q4_K): group
// a's and group b's quant bytes; the tile's column group g is, for each row r of a group, the
// 4 bytes at line[g] * 64 + 8 r + 4 (g % 2), nibble shift[g] of each, mapped through lut.
struct InterleavedQuants {
  const uint8_t* a = nullptr;
  const uint8_t* b = nullptr;
  int line[8];
  int shift[8];
  int8_t lut[16];
};
// Fills t.q and t.corr (the tile's "plain" and "min" scalings: all 32 columns) of one block.
using QuantsFn = void (*)(const InterleavedQuants& iq, TileBlock& t);

// One block of 32 columns of a whole tile (rows m0..m0 + 15) in ggml's own layout, row i's
// bytes at rows + i row_bytes (15 row_bytes below 2^31): column group g of row i is the 4 bytes
// at lo[g], each shifted right by lo_shift[g] and cut to 4 bits (lo_shift -1: the bytes as they
// are, q8_0) and mapped through lut where use_lut; or'ed with bits hi_mask of the 4 bytes at
// hi[g] shifted right by hi_shift[g], moved up 4 (hi[g] -1: none; hi_packed: the 4 bytes are
// one 32-bit word whose bits hi_shift[g]..+3 are the 4 columns' high bits, q5_0 / q5_1); then
// bias added. The K-quants'
// and iq4_xs's packings are all of this shape (gemm_int8.cpp's row_quants says which bytes).
struct RowQuants {
  const uint8_t* rows = nullptr;
  int64_t row_bytes = 0;
  int lo[8];
  int lo_shift[8];
  int hi[8];
  int hi_shift[8];
  uint8_t hi_mask = 0;
  bool hi_packed = false;
  int8_t bias = 0;
  bool use_lut = false;
  bool halves = false;  // corr over columns 0-15, corr_hi over 16-31
  int8_t lut[16];
};
// Fills t.q, t.corr and t.corr_hi (halves) of one block, as the scalar unpack does.
using RowQuantsFn = void (*)(const RowQuants& rq, TileBlock& t);

// The AVX-512 VNNI loops, or nullptr where this build or CPU has none.
RowsFn vnni_rows();
Rows2Fn vnni_rows2();
RowQuantsFn vnni_row_quants();
// The 256-bit loops (gemm_int8_avx2.cpp): AVX-VNNI's and AVX2's, or nullptr as above.
RowsFn avxvnni_rows();
RowsFn avx2_rows();
QuantizeRowFn vnni_quantize_row();
QuantsFn vnni_interleaved_quants();

}  // namespace spattn::kernels::gemm_int8_detail
