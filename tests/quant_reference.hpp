// Plain scalar decoders of ggml's block formats, written from the block layouts (ggml's
// ggml-common.h structs and the format descriptions), one small function per type and one
// output element at a time, so that a slip in ggml's loops or in spattn's use of them shows up
// as a difference. They are the reference twins of `gguf::dequantize_row`: the tests compare
// the two bit for bit (tests/model/test_quant_formats.cpp) and so does the fuzz target
// (fuzz/fuzz_quant.cpp). Every multiply is written in ggml's operand order (scale first, then
// the integer, each rounded to float) so that equal bits are the right expectation; nothing
// here is fused or vectorized.
//
// All multi-byte fields are little-endian, as GGUF stores them. "f16" fields are IEEE
// binary16; "e" is the element index inside its block.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "spattn/gguf.hpp"

namespace spattn::test::quant_ref {

inline uint16_t u16_at(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t u32_at(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// IEEE binary16 -> binary32, from the format: 1 sign bit, 5 exponent bits (bias 15), 10
// mantissa bits. Exact for every finite value; a NaN keeps its payload and comes back quiet
// (as every hardware conversion returns it).
inline float f16(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0u);
  } else if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in binary32.
    const float v = std::ldexp(float(mant), -24);
    bits = sign | std::bit_cast<uint32_t>(v);
  } else {
    bits = sign | uint32_t(exp - 15 + 127) << 23 | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}
inline float f16_at(const uint8_t* p) { return f16(u16_at(p)); }

// bfloat16 is the top half of a binary32: every pattern, NaNs included, widens unchanged.
inline float bf16(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

// ---- 32-value blocks ----

// q8_0 (34 bytes): f16 d, then 32 int8 quants. x = q * d.
inline float q8_0(const uint8_t* b, int e) { return float(int8_t(b[2 + e])) * f16_at(b); }

// The 4-bit quant of element e of a 32-value block whose 16 bytes hold element j in the low
// nibble of byte j and element j + 16 in the high nibble of byte j.
inline int nibble32(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 0xf : qs[e - 16] >> 4; }

// q4_0 (18 bytes): f16 d, 16 bytes of nibbles. x = (q - 8) * d.
inline float q4_0(const uint8_t* b, int e) { return float(nibble32(b + 2, e) - 8) * f16_at(b); }

// q4_1 (20 bytes): f16 d, f16 m, 16 bytes of nibbles. x = q * d + m.
inline float q4_1(const uint8_t* b, int e) {
  const float scaled = float(nibble32(b + 4, e)) * f16_at(b);
  return scaled + f16_at(b + 2);
}

// The fifth bit of element e: bit e of the 32-bit qh word.
inline int high_bit32(const uint8_t* qh, int e) { return int((u32_at(qh) >> e) & 1); }

// q5_0 (22 bytes): f16 d, u32 qh (bit e is element e's fifth bit), 16 bytes of nibbles.
// x = (q - 16) * d.
inline float q5_0(const uint8_t* b, int e) {
  const int q = nibble32(b + 6, e) | high_bit32(b + 2, e) << 4;
  return float(q - 16) * f16_at(b);
}

// q5_1 (24 bytes): f16 d, f16 m, u32 qh, 16 bytes of nibbles. x = q * d + m.
inline float q5_1(const uint8_t* b, int e) {
  const int q = nibble32(b + 8, e) | high_bit32(b + 4, e) << 4;
  const float scaled = float(q) * f16_at(b);
  return scaled + f16_at(b + 2);
}

// The 16 signed values of ggml's iq4_nl non-linear grid.
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// iq4_nl (18 bytes): f16 d, 16 bytes of nibbles indexing the grid. x = d * grid[q].
inline float iq4_nl(const uint8_t* b, int e) {
  return f16_at(b) * float(kIq4Values[nibble32(b + 2, e)]);
}

// mxfp4 (17 bytes; OCP Microscaling's MXFP4, as ggml stores it): an E8M0 exponent e (scale
// 2^(e - 127)), 16 bytes of nibbles laid out as in iq4_nl, each an E2M1 value (sign, 2 exponent
// bits, 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6). ggml keeps the values doubled, as integers,
// and the scale halved: x = kFp4[q] * 2^(e - 128), every such power of two a float (2^-128, at
// e = 0, a subnormal).
inline constexpr int8_t kFp4Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
inline float mxfp4(const uint8_t* b, int e) {
  return float(kFp4Doubled[nibble32(b + 1, e)]) * std::ldexp(1.0f, int(b[0]) - 128);
}

// ---- 256-value super-blocks (the K-quants and iq4_xs) ----
//
// q2_K, q3_K and q6_K hold their low bits 4 values per byte (q6_K: 2 per byte) across strips:
// the super-block is two halves of 128; in half h, the 32 bytes (h*32 ...) each hold one value
// of each of four 32-value strips, strip s in bits 2s..2s+1. So element e is byte
// h*32 + (e % 32) of the low-bit array, strip s = (e % 128) / 32.

// q2_K (84 bytes): 16 scale bytes (low nibble: scale, high nibble: min, one per 16 values),
// 64 bytes of 2-bit quants, f16 d, f16 dmin. x = (d * scale) * q - (dmin * min).
inline float q2_K(const uint8_t* b, int e) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const int h = e / 128, s = (e % 128) / 32, l = e % 32;
  const int q = (qs[h * 32 + l] >> (2 * s)) & 3;
  const uint8_t sc = scales[e / 16];
  const float dl = f16_at(b + 80) * float(sc & 0xf);
  const float ml = f16_at(b + 82) * float(sc >> 4);
  return dl * float(q) - ml;
}

// q3_K (110 bytes): 32 bytes hmask (element e's high bit is bit (e / 32) of byte e % 32),
// 64 bytes of 2-bit quants, 12 bytes holding sixteen 6-bit scales, f16 d.
// q = low2 - (high bit ? 0 : 4), in -4..3; x = (d * (scale - 32)) * q.
inline int q3_K_scale(const uint8_t* s12, int i) {  // scale i of 16, 0..63
  const int low4 = i < 8 ? s12[i] & 0xf : s12[i - 8] >> 4;
  const int high2 = (s12[8 + i % 4] >> (2 * (i / 4))) & 3;
  return low4 | high2 << 4;
}
inline float q3_K(const uint8_t* b, int e) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const int h = e / 128, s = (e % 128) / 32, l = e % 32;
  const int low2 = (qs[h * 32 + l] >> (2 * s)) & 3;
  const bool high = (hmask[l] >> (e / 32)) & 1;
  const int q = low2 - (high ? 0 : 4);
  const float dl = f16_at(b + 108) * float(q3_K_scale(b + 96, e / 16) - 32);
  return dl * float(q);
}

// q4_K and q5_K: eight 32-value sub-blocks, each with a 6-bit scale and a 6-bit min packed in
// 12 bytes: sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scale) and 4-7 (min); sub-blocks
// 4-7 in the nibbles of bytes 8-11 (scale low, min high) with their top 2 bits in the top 2
// bits of bytes 0-3 (scale) and 4-7 (min).
inline void k_scale_min(const uint8_t* s12, int j, int& sc, int& mn) {
  if (j < 4) {
    sc = s12[j] & 63;
    mn = s12[j + 4] & 63;
  } else {
    sc = (s12[j + 4] & 0xf) | (s12[j - 4] >> 6) << 4;
    mn = (s12[j + 4] >> 4) | (s12[j] >> 6) << 4;
  }
}

// The 4 low bits of element e in q4_K / q5_K: 64-value groups of 32 bytes, the group's first
// 32 values in the low nibbles, the next 32 in the high nibbles.
inline int nibble256(const uint8_t* qs, int e) {
  const uint8_t byte = qs[(e / 64) * 32 + e % 32];
  return (e % 64) < 32 ? byte & 0xf : byte >> 4;
}

// q4_K (144 bytes): f16 d, f16 dmin, 12 scale bytes, 128 bytes of nibbles.
// x = (d * scale) * q - (dmin * min) for the element's 32-value sub-block.
inline float q4_K(const uint8_t* b, int e) {
  int sc, mn;
  k_scale_min(b + 4, e / 32, sc, mn);
  const float dl = f16_at(b) * float(sc);
  const float ml = f16_at(b + 2) * float(mn);
  return dl * float(nibble256(b + 16, e)) - ml;
}

// q5_K (176 bytes): f16 d, f16 dmin, 12 scale bytes, 32 bytes qh (element e's fifth bit is
// bit e / 32 of byte e % 32), 128 bytes of nibbles. x = (d * scale) * q - (dmin * min).
inline float q5_K(const uint8_t* b, int e) {
  int sc, mn;
  k_scale_min(b + 4, e / 32, sc, mn);
  const int high = (b[16 + e % 32] >> (e / 32)) & 1;
  const int q = nibble256(b + 48, e) | high << 4;
  const float dl = f16_at(b) * float(sc);
  const float ml = f16_at(b + 2) * float(mn);
  return dl * float(q) - ml;
}

// q6_K (210 bytes): 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 int8 scales (one
// per 16 values), f16 d. In half h, the strip s (0..3) of 32 values takes its low nibbles from
// ql[h*64 + (s % 2) * 32 + l] (low nibble for s < 2, high for s >= 2) and its high bits from bits
// 2s..2s+1 of qh[h*32 + l]. q = bits - 32, in -32..31; x = (d * scale) * q.
inline float q6_K(const uint8_t* b, int e) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int h = e / 128, s = (e % 128) / 32, l = e % 32;
  const uint8_t lo_byte = ql[h * 64 + (s % 2) * 32 + l];
  const int lo = s < 2 ? lo_byte & 0xf : lo_byte >> 4;
  const int hi = (qh[h * 32 + l] >> (2 * s)) & 3;
  const int q = (lo | hi << 4) - 32;
  const int8_t scale = int8_t(b[192 + e / 16]);
  return (f16_at(b + 208) * float(scale)) * float(q);
}

// iq4_xs (136 bytes): f16 d, u16 scales_h, 4 bytes scales_l, 128 bytes of nibbles. Eight
// 32-value sub-blocks, sub-block j with a 6-bit scale: low 4 bits the nibble j % 2 of
// scales_l[j / 2], high 2 bits bits 2j..2j+1 of scales_h. Inside a sub-block its 16 bytes hold
// the values as in iq4_nl. x = (d * (scale - 32)) * grid[q].
inline float iq4_xs(const uint8_t* b, int e) {
  const int j = e / 32;
  const int low4 = (b[4 + j / 2] >> (4 * (j % 2))) & 0xf;
  const int high2 = (u16_at(b + 2) >> (2 * j)) & 3;
  const float dl = f16_at(b) * float((low4 | high2 << 4) - 32);
  return dl * float(kIq4Values[nibble32(b + 8 + j * 16, e % 32)]);
}

// ---- one-value "blocks" ----
inline float f16_elem(const uint8_t* b, int) { return f16_at(b); }
inline float bf16_elem(const uint8_t* b, int) { return bf16(u16_at(b)); }

// The formats with a reference decoder: type, values per block, bytes per block, decoder, and
// the byte offsets of the block's f16 scale fields (d, m, dmin), which edge tests set.
struct Format {
  gguf::GgmlType type;
  int block;
  int bytes;
  float (*decode)(const uint8_t* block, int e);
  std::vector<int> f16_fields;
};

inline const std::vector<Format>& formats() {
  using T = gguf::GgmlType;
  static const std::vector<Format> f = {
      {T::q8_0, 32, 34, q8_0, {0}},      {T::q4_0, 32, 18, q4_0, {0}},
      {T::q4_1, 32, 20, q4_1, {0, 2}},   {T::q5_0, 32, 22, q5_0, {0}},
      {T::q5_1, 32, 24, q5_1, {0, 2}},   {T::q2_K, 256, 84, q2_K, {80, 82}},
      {T::q3_K, 256, 110, q3_K, {108}},  {T::q4_K, 256, 144, q4_K, {0, 2}},
      {T::q5_K, 256, 176, q5_K, {0, 2}}, {T::q6_K, 256, 210, q6_K, {208}},
      {T::iq4_nl, 32, 18, iq4_nl, {0}},  {T::iq4_xs, 256, 136, iq4_xs, {0}},
      {T::mxfp4, 32, 17, mxfp4, {}},     {T::f16, 1, 2, f16_elem, {0}},
      {T::bf16, 1, 2, bf16_elem, {}},
  };
  return f;
}

inline const Format* find_format(gguf::GgmlType t) {
  for (const Format& f : formats())
    if (f.type == t) return &f;
  return nullptr;
}

// Whether ggml's value `got` is the reference's `want`: the same bits, except that in the
// block formats any NaN stands for any NaN. There a NaN comes out of arithmetic, and when both
// operands of an add or multiply are NaN (a NaN scale times a quant, minus a NaN min) C leaves
// open which one the result carries: compilers swap the operands of commutative operations
// (the fuzz build's clang-compiled ggml returns the other one than gcc's). The f16 and bf16
// conversions do no arithmetic on two NaNs, so their NaN bits must match too.
inline bool same_value(const Format& f, float got, float want) {
  if (std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want)) return true;
  return f.block > 1 && std::isnan(got) && std::isnan(want);
}

// Decodes n values (whole blocks) of format f at src.
inline void decode_row(const Format& f, const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = f.decode(src + (i / f.block) * f.bytes, int(i % f.block));
}

}  // namespace spattn::test::quant_ref
