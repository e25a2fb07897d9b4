// gemm_int8 (gemm_int8.hpp): the activations' quantization, the weight formats' unpacking to
// 8-bit tiles, the loop over tiles and rows, and the portable block loops; the AVX-512 VNNI
// block loops are in gemm_int8_avx512vnni.cpp.
#include "kernels/gemm_int8.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/gemm_int8_tile.hpp"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"

namespace spattn::kernels {

using namespace gemm_int8_detail;

namespace {

// Blocks of columns a tile is unpacked for, then reused across every activation row: 256 (8192
// columns; two tiles of them, 416 KB, stay in L2) so that each output is accumulated in
// registers over all of k (up to 8192) and stored once. Why so many: C is read and written
// once per chunk, and its rows lie m floats apart (8 KB for m = 2048), so a tile's pass down n
// rows of C missed every cache level; with 16-block chunks those misses took a third of the product's time
// (perf on bench-products, Zen 5). The activations (n x 1.25 k bytes) stream from L2 or L3,
// eight rows at a time.
constexpr int64_t kChunkBlocks = 256;

struct FormatInfo {
  Int8Format format;
  gguf::GgmlType type;
  int64_t block;        // values a block of the file
  int64_t block_bytes;  // its bytes
  Scaling scaling;
};
constexpr FormatInfo kInfo[] = {
    {Int8Format::q8_0, gguf::GgmlType::q8_0, 32, 34, Scaling::plain},
    {Int8Format::q4_0, gguf::GgmlType::q4_0, 32, 18, Scaling::plain},
    {Int8Format::q4_1, gguf::GgmlType::q4_1, 32, 20, Scaling::min},
    {Int8Format::q5_0, gguf::GgmlType::q5_0, 32, 22, Scaling::plain},
    {Int8Format::q5_1, gguf::GgmlType::q5_1, 32, 24, Scaling::min},
    {Int8Format::q4_K, gguf::GgmlType::q4_K, 256, 144, Scaling::min},
    {Int8Format::q5_K, gguf::GgmlType::q5_K, 256, 176, Scaling::min},
    {Int8Format::q6_K, gguf::GgmlType::q6_K, 256, 210, Scaling::halves},
    {Int8Format::iq4_nl, gguf::GgmlType::iq4_nl, 32, 18, Scaling::plain},
    {Int8Format::iq4_xs, gguf::GgmlType::iq4_xs, 256, 136, Scaling::plain},
    {Int8Format::mxfp4, gguf::GgmlType::mxfp4, 32, 17, Scaling::plain},
};
const FormatInfo& info(Int8Format f) {
  for (const FormatInfo& i : kInfo)
    if (i.format == f) return i;
  throw Error("gemm_int8: unknown weight format");
}

// iq4_nl's and iq4_xs's 16 values (ggml's kvalues_iq4nl: the format's definition).
constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

// mxfp4's 16 E2M1 values, doubled to integers (ggml's kvalues_mxfp4: 0, 0.5, 1, 1.5, 2, 3, 4, 6
// and their negatives, times 2), so the block's scale is half its e8m0 power of two.
constexpr int8_t kFp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Half the e8m0 scale 2^(e - 127), as ggml's GGML_E8M0_TO_FP32_HALF builds its bits: 2^(e - 128),
// a subnormal for e < 2 (exact: every such power of two is a float).
float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float f16_at(const uint8_t* p) { return f16_to_f32(uint16_t(p[0] | p[1] << 8)); }

// The K-quants' packed 6-bit scale and min of sub-block j (ggml's get_scale_min_k4).
void scale_min_k4(const uint8_t* s12, int j, int& sc, int& mn) {
  if (j < 4) {
    sc = s12[j] & 63;
    mn = s12[j + 4] & 63;
  } else {
    sc = (s12[j + 4] & 0xf) | (s12[j - 4] >> 6) << 4;
    mn = (s12[j + 4] >> 4) | (s12[j] >> 6) << 4;
  }
}

// Block b (32 columns) of one weight row: its integers and scales, so that the row's values
// are s0 q - mn (s1 for columns 16-31 where the format has scales of 16), the scales computed
// as ggml's dequantizers compute them (d * sc, dmin * m), so that s q - mn is ggml's value.
// With quants false only the scales (s0, s1, mn) are set.
struct Decoded {
  int8_t q[kBlock];
  float s0, s1, mn;
};
void decode_block(Int8Format f, const uint8_t* row, int64_t b, Decoded& o, bool quants = true) {
  o.mn = 0.0f;
  switch (f) {
    case Int8Format::q8_0: {
      const uint8_t* p = row + b * 34;
      o.s0 = o.s1 = f16_at(p);
      if (!quants) return;
      std::memcpy(o.q, p + 2, kBlock);
      return;
    }
    case Int8Format::q4_0:
    case Int8Format::iq4_nl: {
      const uint8_t* p = row + b * 18;
      o.s0 = o.s1 = f16_at(p);
      if (!quants) return;
      const bool nl = f == Int8Format::iq4_nl;
      for (int l = 0; l < 16; ++l) {
        const int lo = p[2 + l] & 0xf, hi = p[2 + l] >> 4;
        o.q[l] = int8_t(nl ? kIq4Values[lo] : lo - 8);
        o.q[l + 16] = int8_t(nl ? kIq4Values[hi] : hi - 8);
      }
      return;
    }
    case Int8Format::q4_1:
    case Int8Format::q5_0:
    case Int8Format::q5_1: {
      // ggml's dequantize_row_q4_1 / q5_0 / q5_1: column l's high bit (q5) is bit l of qh, its
      // nibble the low (l < 16) or high half of byte l % 16; w = d q + m, here s0 q - mn.
      const bool five = f != Int8Format::q4_1, has_min = f != Int8Format::q5_0;
      const uint8_t* p = row + b * info(f).block_bytes;
      o.s0 = o.s1 = f16_at(p);
      o.mn = has_min ? -f16_at(p + 2) : 0.0f;
      if (!quants) return;
      const uint8_t* qh = p + (has_min ? 4 : 2);
      const uint32_t h =
          five ? uint32_t(qh[0] | qh[1] << 8 | qh[2] << 16 | uint32_t(qh[3]) << 24) : 0;
      const uint8_t* qs = qh + (five ? 4 : 0);
      for (int l = 0; l < kBlock; ++l) {
        const int q = (l < 16 ? qs[l] & 0xf : qs[l - 16] >> 4) | int((h >> l) & 1) << 4;
        o.q[l] = int8_t(f == Int8Format::q5_0 ? q - 16 : q);
      }
      return;
    }
    case Int8Format::mxfp4: {  // iq4_nl's nibbles, with E2M1's table and a power-of-two scale
      const uint8_t* p = row + b * 17;
      o.s0 = o.s1 = e8m0_half(p[0]);
      if (!quants) return;
      for (int l = 0; l < 16; ++l) {
        o.q[l] = kFp4Values[p[1 + l] & 0xf];
        o.q[l + 16] = kFp4Values[p[1 + l] >> 4];
      }
      return;
    }
    case Int8Format::q4_K:
    case Int8Format::q5_K: {
      const bool five = f == Int8Format::q5_K;
      const uint8_t* sb = row + (b / 8) * (five ? 176 : 144);
      const int j = int(b % 8);
      int sc, mn;
      scale_min_k4(sb + 4, j, sc, mn);
      o.s0 = o.s1 = f16_at(sb) * float(sc);
      o.mn = f16_at(sb + 2) * float(mn);
      if (!quants) return;
      const uint8_t* qs = sb + (five ? 48 : 16) + (j / 2) * 32;
      const int shift = (j % 2) * 4;
      for (int l = 0; l < kBlock; ++l) {
        int q = (qs[l] >> shift) & 0xf;
        if (five) q |= ((sb[16 + l] >> j) & 1) << 4;
        o.q[l] = int8_t(q);
      }
      return;
    }
    case Int8Format::q6_K: {
      const uint8_t* sb = row + (b / 8) * 210;
      const int j = int(b % 8), h = j / 4, s = j % 4;
      const float d = f16_at(sb + 208);
      o.s0 = d * float(int8_t(sb[192 + 2 * j]));
      o.s1 = d * float(int8_t(sb[192 + 2 * j + 1]));
      if (!quants) return;
      const uint8_t* ql = sb + h * 64 + (s % 2) * 32;
      const uint8_t* qh = sb + 128 + h * 32;
      const int lshift = s < 2 ? 0 : 4, hshift = 2 * s;
      for (int l = 0; l < kBlock; ++l)
        o.q[l] = int8_t((((ql[l] >> lshift) & 0xf) | ((qh[l] >> hshift) & 3) << 4) - 32);
      return;
    }
    case Int8Format::iq4_xs: {
      const uint8_t* sb = row + (b / 8) * 136;
      const int j = int(b % 8);
      const int ls = ((sb[4 + j / 2] >> 4 * (j % 2)) & 0xf) |
                     ((uint16_t(sb[2] | sb[3] << 8) >> (2 * j)) & 3) << 4;
      o.s0 = o.s1 = f16_at(sb) * float(ls - 32);
      if (!quants) return;
      const uint8_t* qs = sb + 8 + j * 16;
      for (int l = 0; l < 16; ++l) {
        o.q[l] = kIq4Values[qs[l] & 0xf];
        o.q[l + 16] = kIq4Values[qs[l] >> 4];
      }
      return;
    }
  }
}

// Block b of row i of a matrix in ggml's x86 repack (Int8Layout::interleaved8): the same
// integers and scales decode_block gives for that row in ggml's own layout. In a group of 8 rows
// row r's quant byte o (of its block's 16, or super-block's 128) lies at (o / 8) 64 + 8 r + o % 8
// after the group's scales.
// With quants false only the scales (s0, s1, mn) are set.
void decode_interleaved(Int8Format f, const uint8_t* data, int64_t row_bytes, int64_t i, int64_t b,
                        Decoded& o, bool quants = true) {
  const uint8_t* group = data + (i / 8) * 8 * row_bytes;
  const int r = int(i % 8);
  const auto at = [r](const uint8_t* qs, int o8) { return qs[(o8 / 8) * 64 + 8 * r + o8 % 8]; };
  o.mn = 0.0f;
  switch (f) {
    case Int8Format::q4_0:
    case Int8Format::iq4_nl: {
      const uint8_t* p = group + b * 8 * 18;  // 8 f16 scales, 128 quant bytes
      o.s0 = o.s1 = f16_at(p + 2 * r);
      if (!quants) return;
      const bool nl = f == Int8Format::iq4_nl;
      for (int l = 0; l < 16; ++l) {
        // q4_0's nibbles were stored XOR 8 (two's complement of q - 8): undo it.
        const int v = at(p + 16, l) ^ (nl ? 0 : 0x88);
        const int lo = v & 0xf, hi = v >> 4;
        o.q[l] = int8_t(nl ? kIq4Values[lo] : lo - 8);
        o.q[l + 16] = int8_t(nl ? kIq4Values[hi] : hi - 8);
      }
      return;
    }
    case Int8Format::mxfp4: {  // block_mxfp4x8: 8 e8m0 scales, then iq4_nl's 128 quant bytes
      const uint8_t* p = group + b * 8 * 17;
      o.s0 = o.s1 = e8m0_half(p[r]);
      if (!quants) return;
      for (int l = 0; l < 16; ++l) {
        const int v = at(p + 8, l);
        o.q[l] = kFp4Values[v & 0xf];
        o.q[l + 16] = kFp4Values[v >> 4];
      }
      return;
    }
    case Int8Format::q4_K: {
      // 8 d, 8 dmin (f16), 96 bytes of scales and mins (12 a sub-block), 1024 quant bytes.
      const uint8_t* p = group + (b / 8) * 8 * 144;
      const int j = int(b % 8);
      const uint8_t* s12 = p + 32 + 12 * j;
      int sc, mn;
      if (r < 4) {
        sc = s12[r] & 63;
        mn = s12[4 + r] & 63;
      } else {  // low 4 bits in byte 8 + r - 4, high 2 in the top of rows r - 4's bytes
        sc = (s12[4 + r] & 0xf) | (s12[r - 4] >> 6) << 4;
        mn = (s12[4 + r] >> 4) | (s12[r] >> 6) << 4;
      }
      o.s0 = o.s1 = f16_at(p + 2 * r) * float(sc);
      o.mn = f16_at(p + 16 + 2 * r) * float(mn);
      if (!quants) return;
      const int shift = (j % 2) * 4;
      for (int l = 0; l < kBlock; ++l)
        o.q[l] = int8_t((at(p + 128, (j / 2) * 32 + l) >> shift) & 0xf);
      return;
    }
    case Int8Format::q8_0:
    case Int8Format::q4_1:
    case Int8Format::q5_0:
    case Int8Format::q5_1:
    case Int8Format::q5_K:
    case Int8Format::q6_K:
    case Int8Format::iq4_xs: break;
  }
  SPATTN_CHECK(false, "gemm_int8: ", gguf::type_name(info(f).type), " has no interleaved layout");
}

// Where the quant bytes of block b of rows m0..m0 + 15 (groups m0 / 8 and m0 / 8 + 1) lie, as
// InterleavedQuants reads them (gemm_int8_tile.hpp): the tile's column group g (columns 4g..4g+3)
// is nibble shift[g] of 4-byte run g % 2 of each row's 8-byte piece of the 64-byte line at
// line[g], in both groups.
InterleavedQuants interleaved_quants(Int8Format f, const uint8_t* data, int64_t row_bytes,
                                     int64_t m0, int64_t b) {
  InterleavedQuants iq{};
  const uint8_t* group = data + (m0 / 8) * 8 * row_bytes;
  if (f == Int8Format::q4_K) {
    const int j = int(b % 8);
    iq.a = group + (b / 8) * 8 * 144 + 128;
    for (int g = 0; g < 8; ++g) {
      iq.line[g] = (j / 2) * 4 + g / 2;  // bytes (j / 2) 32 + 4g.. of each row
      iq.shift[g] = (j % 2) * 4;
    }
    for (int v = 0; v < 16; ++v) iq.lut[v] = int8_t(v);
  } else {  // q4_0, iq4_nl, mxfp4: columns 0-15 the low nibbles of bytes 0-15, 16-31 the high
    iq.a = f == Int8Format::mxfp4 ? group + b * 8 * 17 + 8 : group + b * 8 * 18 + 16;
    for (int g = 0; g < 8; ++g) {
      iq.line[g] = (g % 4) / 2;
      iq.shift[g] = g < 4 ? 0 : 4;
    }
    for (int v = 0; v < 16; ++v)
      iq.lut[v] = f == Int8Format::iq4_nl  ? kIq4Values[v]
                  : f == Int8Format::mxfp4 ? kFp4Values[v]
                                           : int8_t((v ^ 8) - 8);
  }
  iq.b = iq.a + 8 * row_bytes;
  return iq;
}

// Where the quant bytes of block b lie in a row of ggml's own layout, as RowQuants reads them
// (gemm_int8_tile.hpp): decode_block's unpacking as byte offsets and shifts.
RowQuants row_quants(Int8Format f, const uint8_t* rows, int64_t row_bytes, int64_t b) {
  RowQuants rq{};
  rq.rows = rows;
  rq.row_bytes = row_bytes;
  const int j = int(b % 8);
  for (int g = 0; g < 8; ++g) rq.hi[g] = -1;
  switch (f) {
    case Int8Format::q8_0:
      for (int g = 0; g < 8; ++g) {
        rq.lo[g] = int(b * 34) + 2 + 4 * g;
        rq.lo_shift[g] = -1;
      }
      break;
    case Int8Format::q4_0:
    case Int8Format::iq4_nl:  // columns 0-15 the low nibbles of bytes 0-15, 16-31 the high ones
      for (int g = 0; g < 8; ++g) {
        rq.lo[g] = int(b * 18) + 2 + 4 * (g % 4);
        rq.lo_shift[g] = g < 4 ? 0 : 4;
      }
      rq.bias = f == Int8Format::q4_0 ? -8 : 0;
      rq.use_lut = f == Int8Format::iq4_nl;
      break;
    case Int8Format::q4_1:
    case Int8Format::q5_0:
    case Int8Format::q5_1: {
      const bool five = f != Int8Format::q4_1, has_min = f != Int8Format::q5_0;
      const int p = int(b * info(f).block_bytes), qh = p + (has_min ? 4 : 2);
      for (int g = 0; g < 8; ++g) {
        rq.lo[g] = qh + (five ? 4 : 0) + 4 * (g % 4);
        rq.lo_shift[g] = g < 4 ? 0 : 4;
        if (five) {  // columns 4g..4g+3: bits 4g..4g+3 of qh
          rq.hi[g] = qh;
          rq.hi_shift[g] = 4 * g;
        }
      }
      rq.hi_packed = true;
      rq.bias = f == Int8Format::q5_0 ? -16 : 0;
      break;
    }
    case Int8Format::q4_K:
    case Int8Format::q5_K: {
      const bool five = f == Int8Format::q5_K;
      const int sb = int(b / 8) * (five ? 176 : 144);
      for (int g = 0; g < 8; ++g) {
        rq.lo[g] = sb + (five ? 48 : 16) + (j / 2) * 32 + 4 * g;
        rq.lo_shift[g] = (j % 2) * 4;
        if (five) {
          rq.hi[g] = sb + 16 + 4 * g;
          rq.hi_shift[g] = j;
        }
      }
      rq.hi_mask = 1;
      break;
    }
    case Int8Format::q6_K: {
      const int sb = int(b / 8) * 210, h = j / 4, sub = j % 4;
      for (int g = 0; g < 8; ++g) {
        rq.lo[g] = sb + h * 64 + (sub % 2) * 32 + 4 * g;
        rq.lo_shift[g] = sub < 2 ? 0 : 4;
        rq.hi[g] = sb + 128 + h * 32 + 4 * g;
        rq.hi_shift[g] = 2 * sub;
      }
      rq.hi_mask = 3;
      rq.bias = -32;
      rq.halves = true;
      break;
    }
    case Int8Format::iq4_xs:
      for (int g = 0; g < 8; ++g) {
        rq.lo[g] = int(b / 8) * 136 + 8 + j * 16 + 4 * (g % 4);
        rq.lo_shift[g] = g < 4 ? 0 : 4;
      }
      rq.use_lut = true;
      break;
    case Int8Format::mxfp4:  // iq4_nl's nibbles after a one-byte scale, E2M1's table
      for (int g = 0; g < 8; ++g) {
        rq.lo[g] = int(b * 17) + 1 + 4 * (g % 4);
        rq.lo_shift[g] = g < 4 ? 0 : 4;
      }
      rq.use_lut = true;
      break;
  }
  std::memcpy(rq.lut, f == Int8Format::mxfp4 ? kFp4Values : kIq4Values, sizeof(rq.lut));
  return rq;
}

void decode(const Int8Weights& w, int64_t i, int64_t b, Decoded& o) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  if (w.layout == Int8Layout::interleaved8)
    decode_interleaved(w.format, data, w.row_bytes, i, b, o);
  else
    decode_block(w.format, data + i * w.row_bytes, b, o);
}

// The loops a call runs: the block loops over one tile and over two (either may be null: no
// product, or no two-tile loop), and the vector unpacking of whole tiles (null: the scalar
// loop below).
struct Loops {
  RowsFn rows = nullptr;
  Rows2Fn rows2 = nullptr;
  QuantsFn interleaved = nullptr;
  RowQuantsFn row_quants = nullptr;
};

// Rows [m0, m0 + 16) of w, blocks [b0, b0 + nbt), into tiles tb; a whole tile by the vector
// unpacking where L has one for its format and layout (the same bytes as the loop below).
void unpack(const Int8Weights& w, int64_t m0, int64_t b0, int64_t nbt, TileBlock* tb,
            const Loops& L) {
  for (int64_t bi = 0; bi < nbt; ++bi) std::memset(&tb[bi], 0, sizeof(TileBlock));
  const bool whole = m0 + kRows <= w.m;
  if (L.row_quants && whole && w.layout == Int8Layout::rows &&
      w.row_bytes * (kRows - 1) < (int64_t(1) << 31)) {
    const auto* rows = static_cast<const uint8_t*>(w.data) + m0 * w.row_bytes;
    Decoded o{};
    for (int64_t bi = 0; bi < nbt; ++bi) {
      TileBlock& t = tb[bi];
      L.row_quants(row_quants(w.format, rows, w.row_bytes, b0 + bi), t);
      for (int i = 0; i < kRows; ++i) {  // the scales: 16 values of the block's 512
        decode_block(w.format, rows + i * w.row_bytes, b0 + bi, o, false);
        t.s0[i] = o.s0;
        t.s1[i] = o.s1;
        t.mn[i] = o.mn;
      }
    }
    return;
  }
  const QuantsFn quants = L.interleaved;
  if (quants && w.layout == Int8Layout::interleaved8 && whole) {
    const auto* data = static_cast<const uint8_t*>(w.data);
    Decoded o{};
    for (int64_t bi = 0; bi < nbt; ++bi) {
      TileBlock& t = tb[bi];
      quants(interleaved_quants(w.format, data, w.row_bytes, m0, b0 + bi), t);
      for (int i = 0; i < kRows; ++i) {  // the scales: 16 values of the block's 512
        decode_interleaved(w.format, data, w.row_bytes, m0 + i, b0 + bi, o, false);
        t.s0[i] = o.s0;
        t.s1[i] = o.s1;
        t.mn[i] = o.mn;
      }
    }
    return;
  }
  const int rows = int(std::min<int64_t>(kRows, w.m - m0));
  const bool halves = info(w.format).scaling == Scaling::halves;
  Decoded o{};
  for (int i = 0; i < rows; ++i) {
    for (int64_t bi = 0; bi < nbt; ++bi) {
      decode(w, m0 + i, b0 + bi, o);
      TileBlock& t = tb[bi];
      int32_t lo = 0, hi = 0;
      for (int l = 0; l < 16; ++l) lo += o.q[l];
      for (int l = 16; l < kBlock; ++l) hi += o.q[l];
      for (int g = 0; g < 8; ++g) std::memcpy(t.q + g * 64 + i * 4, o.q + 4 * g, 4);
      t.s0[i] = o.s0;
      t.s1[i] = o.s1;
      t.mn[i] = o.mn;
      if (halves) {
        t.corr[i] = -128 * lo;
        t.corr_hi[i] = -128 * hi;
      } else {
        t.corr[i] = -128 * (lo + hi);
      }
    }
  }
}

// The portable block loops: the VNNI loops' arithmetic, one lane at a time (the integer sums
// are exact either way; the f32 steps are the same operations in the same order).
void rows_portable(Scaling sc, const TileBlock* tb, int64_t nbt, const ActRows& a, int64_t b0,
                   int64_t r0, int64_t rows, float* c, int64_t ldc, int64_t m0, int mrows,
                   bool first) {
  for (int64_t r = r0; r < r0 + rows; ++r) {
    const uint8_t* xq = a.q(r);
    const float* xd = a.d(r);
    const float* xs = a.s(r);
    float* cr = c + r * ldc + m0;
    for (int i = 0; i < mrows; ++i) {
      float out = first ? 0.0f : cr[i];
      for (int64_t bi = 0; bi < nbt; ++bi) {
        const TileBlock& t = tb[bi];
        const uint8_t* x = xq + (b0 + bi) * kBlock;
        int32_t lo = t.corr[i], hi = t.corr_hi[i];
        for (int g = 0; g < 8; ++g) {
          int32_t& acc = sc == Scaling::halves && g >= 4 ? hi : lo;
          for (int u = 0; u < 4; ++u) acc += int32_t(x[4 * g + u]) * t.q[g * 64 + i * 4 + u];
        }
        const float dx = xd[b0 + bi];
        if (sc == Scaling::halves) {
          const float part = std::fma(float(hi), t.s1[i], float(lo) * t.s0[i]);
          out = std::fma(part, dx, out);
        } else {
          out = std::fma(float(lo), t.s0[i] * dx, out);
          if (sc == Scaling::min) out = std::fma(-t.mn[i], xs[b0 + bi], out);
        }
      }
      cr[i] = out;
    }
  }
}

void run(const Int8Weights& w, const uint8_t* xq, int64_t n, int64_t k, float* c, int64_t ldc,
         int ith, int nth, const Loops& L) {
  const int64_t groups = (w.m + kRows - 1) / kRows;
  const int64_t gb = groups * ith / nth, ge = groups * (ith + 1) / nth;
  if (gb >= ge || (n <= 0 && L.rows)) return;
  const Scaling sc = info(w.format).scaling;
  const ActRows a{xq, act_row_bytes(k), k / kBlock};
  const int64_t chunk = std::min(kChunkBlocks, a.nb);
  thread_local std::vector<TileBlock> tiles;
  tiles.resize(size_t(2 * chunk));
  TileBlock* const ta = tiles.data();
  TileBlock* const tb = ta + chunk;
  for (int64_t b0 = 0; b0 < a.nb; b0 += chunk) {
    const int64_t nbt = std::min(chunk, a.nb - b0);
    const bool first = b0 == 0;
    for (int64_t g = gb; g < ge;) {
      const int64_t m0 = g * kRows;
      unpack(w, m0, b0, nbt, ta, L);
      if (L.rows2 && g + 1 < ge) {  // two tiles at once; the first is whole
        const int64_t m1 = m0 + kRows;
        const int mrows_b = int(std::min<int64_t>(kRows, w.m - m1));
        unpack(w, m1, b0, nbt, tb, L);
        L.rows2(sc, ta, tb, nbt, a, b0, 0, n, c, ldc, m0, mrows_b, first);
        g += 2;
        continue;
      }
      if (L.rows)
        L.rows(sc, ta, nbt, a, b0, 0, n, c, ldc, m0, int(std::min<int64_t>(kRows, w.m - m0)),
               first);
      ++g;
    }
  }
}

// One block of 32 activations (gemm_int8_quantize's rounding, one value at a time).
void quantize_block(const float* v, uint8_t* q, float* d, float* s) {
  float amax = 0.0f;
  bool finite = true;
  for (int l = 0; l < kBlock; ++l) {
    amax = std::max(amax, std::fabs(v[l]));
    finite = finite && std::isfinite(v[l]);
  }
  if (!finite) {
    // An infinity or NaN: the block's outputs become NaN through its scale (no integer
    // conversion of a non-finite value).
    std::memset(q, 128, kBlock);
    *d = *s = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
  int32_t sum = 0;
  for (int l = 0; l < kBlock; ++l) {
    const int qi = int(std::round(v[l] * id));
    sum += qi;
    q[l] = uint8_t(qi + 128);
  }
  *d = db;
  *s = db * float(sum);
}

}  // namespace

std::optional<Int8Format> int8_format(gguf::GgmlType t) {
  for (const FormatInfo& i : kInfo)
    if (i.type == t) return i.format;
  return std::nullopt;
}

gguf::GgmlType ggml_type_of(Int8Format f) { return info(f).type; }

bool gemm_int8_reads(Int8Format f, Int8Layout layout) {
  return layout == Int8Layout::rows || f == Int8Format::q4_0 || f == Int8Format::q4_K ||
         f == Int8Format::iq4_nl || f == Int8Format::mxfp4;
}

void gemm_int8_check(const Int8Weights& w, int64_t k) {
  const FormatInfo& f = info(w.format);
  SPATTN_CHECK(k > 0 && k % f.block == 0 && w.m >= 0 && w.row_bytes >= k / f.block * f.block_bytes,
               "gemm_int8: ", w.m, " rows of ", k, " values in format ", gguf::type_name(f.type),
               " with ", w.row_bytes, " bytes a row");
  if (w.layout == Int8Layout::interleaved8)
    SPATTN_CHECK(gemm_int8_reads(w.format, w.layout) && w.m % 8 == 0 &&
                     w.row_bytes == k / f.block * f.block_bytes,
                 "gemm_int8: ", w.m, " rows of ", k, " values in format ", gguf::type_name(f.type),
                 " with ", w.row_bytes, " bytes a row are not in ggml's 8-row interleaved layout");
}

bool gemm_int8_interleaved_matches(Int8Format f, const void* plain, const void* packed,
                                   int64_t row_bytes, int64_t m, int64_t k) {
  const Int8Weights a{f, plain, row_bytes, m, Int8Layout::rows};
  const Int8Weights b{f, packed, row_bytes, m, Int8Layout::interleaved8};
  if (!gemm_int8_reads(f, b.layout) || m <= 0 || m % 8 != 0 || k <= 0 || k % info(f).block != 0 ||
      row_bytes != k / info(f).block * info(f).block_bytes)
    return false;
  Decoded x{}, y{};
  for (int64_t i : {int64_t(0), m - 8})
    for (int64_t r = i; r < i + 8; ++r)
      for (int64_t blk = 0; blk < k / kBlock; ++blk) {
        decode(a, r, blk, x);
        decode(b, r, blk, y);
        if (std::memcmp(&x, &y, sizeof(Decoded)) != 0) return false;  // no padding: 32 + 12
      }
  return true;
}

int64_t gemm_int8_act_bytes(int64_t n, int64_t k) { return n * act_row_bytes(k); }

void gemm_int8_quantize(const float* x, int64_t n, int64_t k, int64_t ldx, uint8_t* xq, int ith,
                        int nth) {
  const int64_t rb = act_row_bytes(k), nb = k / kBlock;
  const QuantizeRowFn vec = vnni_quantize_row();
  for (int64_t r = n * ith / nth; r < n * (ith + 1) / nth; ++r) {
    uint8_t* q = xq + r * rb;
    float* d = reinterpret_cast<float*>(q + k);
    if (vec) {
      vec(x + r * ldx, k, q, d, d + nb, &quantize_block);
    } else {
      for (int64_t b = 0; b < nb; ++b)
        quantize_block(x + r * ldx + b * kBlock, q + b * kBlock, d + b, d + nb + b);
    }
  }
}

namespace {

RowsFn loops_fn(Int8Loops l) {
  switch (l) {
    case Int8Loops::avx512vnni: return vnni_rows();
    case Int8Loops::avxvnni: return avxvnni_rows();
    case Int8Loops::avx2: return avx2_rows();
  }
  return nullptr;
}

// The CPU's best loops: AVX-512 VNNI's, else AVX-VNNI's, else AVX2's, else the portable ones.
RowsFn best_rows() {
  static const RowsFn best = [] {
    for (Int8Loops l : {Int8Loops::avx512vnni, Int8Loops::avxvnni, Int8Loops::avx2})
      if (const RowsFn f = loops_fn(l)) return f;
    return RowsFn(&rows_portable);
  }();
  return best;
}

}  // namespace

// The loops where this CPU has them: AVX-512 VNNI's block loops over one tile and two and its
// vector unpacking; else the best 256-bit block loops (or the portable ones) with the scalar
// unpacking.
Loops vector_loops() {
  static const Loops L = [] {
    Loops l;
    l.rows = vnni_rows();
    if (!l.rows) return Loops{best_rows()};
    l.rows2 = vnni_rows2();
    l.interleaved = vnni_interleaved_quants();
    l.row_quants = vnni_row_quants();
    return l;
  }();
  return L;
}

void gemm_int8_run(const Int8Weights& w, const uint8_t* xq, int64_t n, int64_t k, float* c,
                   int64_t ldc, int ith, int nth) {
  gemm_int8_check(w, k);
  run(w, xq, n, k, c, ldc, ith, nth, vector_loops());
}

bool gemm_int8_run_on(Int8Loops loops, const Int8Weights& w, const uint8_t* xq, int64_t n,
                      int64_t k, float* c, int64_t ldc) {
  gemm_int8_check(w, k);
  const RowsFn f = loops_fn(loops);
  if (!f) return false;
  run(w, xq, n, k, c, ldc, 0, 1, Loops{f});
  return true;
}

std::optional<Int8Loops> gemm_int8_loops() {
  for (Int8Loops l : {Int8Loops::avx512vnni, Int8Loops::avxvnni, Int8Loops::avx2})
    if (loops_fn(l)) return l;
  return std::nullopt;
}

void gemm_int8_run_portable(const Int8Weights& w, const uint8_t* xq, int64_t n, int64_t k, float* c,
                            int64_t ldc) {
  gemm_int8_check(w, k);
  run(w, xq, n, k, c, ldc, 0, 1, Loops{&rows_portable});
}

void gemm_int8_unpack_only(const Int8Weights& w, int64_t k, int ith, int nth) {
  gemm_int8_check(w, k);
  Loops L = vector_loops();
  L.rows = nullptr;
  L.rows2 = nullptr;
  run(w, nullptr, 0, k, nullptr, 0, ith, nth, L);
}

bool gemm_int8_vnni() { return vnni_rows() != nullptr; }

// From 16 rows: below, the tile's unpacking (every weight once per call) outweighs the rows'
// products. TODO(lead): measure the crossover against ggml's products on a quiet machine.
int64_t gemm_int8_min_rows(Int8Format) { return gemm_int8_vnni() ? 16 : 0; }

}  // namespace spattn::kernels
