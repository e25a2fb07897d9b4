// A weight row's columns widened to f32, one decoder per format (gemm_widen.hpp's
// WeightFormat): the policy of the prefill product's tile. Each decoder is the format's
// definition vectorized, with ggml's operand order in every multiply (scale first, then the
// integer, each rounded to float) and nothing fused (the file that includes this one is compiled
// with -ffp-contract=off), so it returns the bits of ggml's own decoders and of
// tests/quant_reference.hpp's scalar twins.
//
// Included by gemm_widen.cpp inside its target namespace region (HWY_BEFORE_NAMESPACE).

#if defined(SPATTN_KERNELS_WEIGHT_WIDEN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPATTN_KERNELS_WEIGHT_WIDEN_INL_H_
#undef SPATTN_KERNELS_WEIGHT_WIDEN_INL_H_
#else
#define SPATTN_KERNELS_WEIGHT_WIDEN_INL_H_
#endif

namespace spattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace widen {

// A block's f16 scale. On x86 from AVX2 on, the F16C instruction in line: a call to the generic
// conversion from AVX-512 code cost a vzeroupper and a stall per block (a third of q8_0's
// widening time).
HWY_INLINE float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return _cvtsh_ss(h);
#else
  return f16_to_f32(h);
#endif
}

// kc f16 values from row into d.
HWY_INLINE void F16(const uint16_t* row, int64_t kc, float* d) {
  int64_t t = 0;
#if !(HWY_ARCH_X86 && HWY_TARGET > HWY_AVX2)
  // (x86 below AVX2 has no F16C: Highway's emulated widening maps inf and NaN to finite values,
  // so those targets take the scalar conversion.)
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t L = int64_t(hn::Lanes(df));
  const auto* s = reinterpret_cast<const hwy::float16_t*>(row);
  for (; t + L <= kc; t += L) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, s + t)), df, d + t);
#endif
  for (; t < kc; ++t) d[t] = f16_to_f32(row[t]);
}

// The lanes a decoder takes at a time: at most 16, so that a run of lanes never crosses one of
// q6_K's 16-value scale groups.
using DF = hn::CappedTag<float, 16>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
// Every decoder's tags: the f32 lanes, their integer twins, and as many bytes to widen from.
constexpr DF df;
constexpr DI di;
constexpr DU du;
constexpr hn::Rebind<uint8_t, DU> du8;
constexpr hn::Rebind<int8_t, DI> di8;
HWY_INLINE int64_t Lanes() { return int64_t(hn::Lanes(df)); }

// q8_0, kc / 32 blocks from b: x = q * d.
HWY_INLINE void Q8_0(const uint8_t* b, int64_t kc, float* d) {
  const int64_t L = Lanes();
  for (int64_t blk = 0; blk < kc / 32; ++blk, b += 34, d += 32) {
    const auto scale = hn::Set(df, F16At(b));
    const auto* q = reinterpret_cast<const int8_t*>(b + 2);
    for (int64_t t = 0; t < 32; t += L)
      hn::StoreU(hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(di8, q + t))), scale), df,
                 d + t);
  }
}

// q6_K, one super-block of 256 values from b: two halves of 128, each four strips of 32 whose
// low nibbles share 64 bytes of ql and whose top two bits share 32 bytes of qh; one int8 scale
// per 16 values. x = (d * scale) * (q - 32).
HWY_INLINE void Q6_K(const uint8_t* b, float* y) {
  const int64_t L = Lanes();
  const float dd = F16At(b + 208);
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const auto m4 = hn::Set(du, 0xF), m3 = hn::Set(du, 3);
  const auto bias = hn::Set(di, 32);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b + 64 * h;
    const uint8_t* qh = b + 128 + 32 * h;
    const int8_t* s = sc + 8 * h;
    float* d = y + 128 * h;
    for (int64_t l = 0; l < 32; l += L) {
      const auto lo0 = hn::PromoteTo(du, hn::LoadU(du8, ql + l));
      const auto lo1 = hn::PromoteTo(du, hn::LoadU(du8, ql + 32 + l));
      const auto hi = hn::PromoteTo(du, hn::LoadU(du8, qh + l));
      // Strip s's top two bits: bits 2s, 2s + 1 of qh, moved to bits 4 and 5.
      const auto h0 = hn::ShiftLeft<4>(hn::And(hi, m3));
      const auto h1 = hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(hi), m3));
      const auto h2 = hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(hi), m3));
      const auto h3 = hn::ShiftLeft<4>(hn::ShiftRight<6>(hi));
      const auto q1 = hn::Or(hn::And(lo0, m4), h0);
      const auto q2 = hn::Or(hn::And(lo1, m4), h1);
      const auto q3 = hn::Or(hn::ShiftRight<4>(lo0), h2);
      const auto q4 = hn::Or(hn::ShiftRight<4>(lo1), h3);
      const int is = int(l / 16);
      const auto put = [&](hn::Vec<DU> q, int strip) {
        const auto v = hn::ConvertTo(df, hn::Sub(hn::BitCast(di, q), bias));
        hn::StoreU(hn::Mul(hn::Set(df, dd * float(s[is + 2 * strip])), v), df, d + 32 * strip + l);
      };
      put(q1, 0);
      put(q2, 1);
      put(q3, 2);
      put(q4, 3);
    }
  }
}

// q5_K, one super-block of 176 bytes: f16 d, f16 dmin, 12 bytes of six-bit scales and mins
// (sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scale) and 4-7 (min); 4-7 in the nibbles of
// bytes 8-11 with their top 2 bits in the top bits of bytes 0-7), 32 bytes qh (value l of 64-value
// group g takes its fifth bit from bit 2g of qh[l], or 2g + 1 in the group's second 32), 128 bytes
// of nibbles (each group's 32 bytes: its first 32 values low, the next 32 high).
// x = (d * sc) * q - (dmin * mn): a multiply, then a subtraction (gemm_widen.cpp is compiled with
// -ffp-contract=off, so the two are never fused into one rounding).
HWY_INLINE void Q5_K(const uint8_t* b, float* y) {
  const int64_t L = Lanes();
  const float d = F16At(b), dmin = F16At(b + 2);
  const uint8_t* s = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = uint8_t((s[j + 8] & 0xF) | (s[j] >> 6) << 4);
    mn[j + 4] = uint8_t((s[j + 8] >> 4) | (s[j + 4] >> 6) << 4);
  }
  const auto m4 = hn::Set(du, 0xF), one = hn::Set(du, 1);
  for (int g = 0; g < 4; ++g) {
    const auto d1 = hn::Set(df, d * float(sc[2 * g])), m1 = hn::Set(df, dmin * float(mn[2 * g]));
    const auto d2 = hn::Set(df, d * float(sc[2 * g + 1])),
               m2 = hn::Set(df, dmin * float(mn[2 * g + 1]));
    for (int64_t l = 0; l < 32; l += L) {
      const auto q = hn::PromoteTo(du, hn::LoadU(du8, qs + 32 * g + l));
      const auto h = hn::PromoteTo(du, hn::LoadU(du8, qh + l));
      const auto h1 = hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, 2 * g), one));
      const auto h2 = hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, 2 * g + 1), one));
      const auto v1 = hn::ConvertTo(df, hn::BitCast(di, hn::Or(hn::And(q, m4), h1)));
      const auto v2 = hn::ConvertTo(df, hn::BitCast(di, hn::Or(hn::ShiftRight<4>(q), h2)));
      hn::StoreU(hn::Sub(hn::Mul(d1, v1), m1), df, y + 64 * g + l);
      hn::StoreU(hn::Sub(hn::Mul(d2, v2), m2), df, y + 64 * g + 32 + l);
    }
  }
}

// q3_K, one super-block of 110 bytes: 32 bytes hmask (value e's third bit is bit e / 32 of
// hmask[e % 32]), 64 bytes of two-bit quants (in half h, the 32 bytes from 32 h hold strip s's
// value l in bits 2s, 2s + 1 of byte l), 12 bytes of sixteen six-bit scales (scale i: low 4 bits
// the nibble i / 8 of byte i % 8, top 2 bits bits 2 (i / 4), + 1 of byte 8 + i % 4), f16 d. One
// scale per 16 values. q = low2 - (third bit ? 0 : 4); x = (d * (scale - 32)) * q.
HWY_INLINE void Q3_K(const uint8_t* b, float* y) {
  const int64_t L = Lanes();
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* s12 = b + 96;
  const float d = F16At(b + 108);
  const auto m3 = hn::Set(du, 3), one = hn::Set(du, 1);
  for (int i = 0; i < 16; ++i) {  // 16 values a scale
    const int scale =
        (i < 8 ? s12[i] & 0xF : s12[i - 8] >> 4) | ((s12[8 + i % 4] >> (2 * (i / 4))) & 3) << 4;
    const auto dl = hn::Set(df, d * float(scale - 32));
    const int e0 = 16 * i, h = e0 / 128, strip = (e0 % 128) / 32, l0 = e0 % 32;
    for (int64_t l = 0; l < 16; l += L) {
      const auto lo_bytes = hn::PromoteTo(du, hn::LoadU(du8, qs + 32 * h + l0 + l));
      const auto hi_bytes = hn::PromoteTo(du, hn::LoadU(du8, hmask + l0 + l));
      const auto low = hn::And(hn::ShiftRightSame(lo_bytes, 2 * strip), m3);
      const auto high = hn::And(hn::ShiftRightSame(hi_bytes, e0 / 32), one);
      // low2 - 4 + 4 x third bit, in -4..3
      const auto q = hn::Sub(hn::BitCast(di, hn::Or(low, hn::ShiftLeft<2>(high))), hn::Set(di, 4));
      hn::StoreU(hn::Mul(dl, hn::ConvertTo(df, q)), df, y + e0 + l);
    }
  }
}

}  // namespace widen

// Row r of w, columns [t0, t0 + kc) (whole blocks of the format), into d.
HWY_INLINE void WidenRow(const WeightRows& w, int64_t r, int64_t t0, int64_t kc, float* d) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  switch (w.format) {
    case WeightFormat::f16:
      return widen::F16(reinterpret_cast<const uint16_t*>(base + r * w.row_bytes) + t0, kc, d);
    case WeightFormat::q8_0: return widen::Q8_0(base + r * w.row_bytes + t0 / 32 * 34, kc, d);
    case WeightFormat::q6_K:
      for (int64_t t = 0; t < kc; t += 256)
        widen::Q6_K(base + r * w.row_bytes + (t0 + t) / 256 * 210, d + t);
      return;
    case WeightFormat::q5_K:
      for (int64_t t = 0; t < kc; t += 256)
        widen::Q5_K(base + r * w.row_bytes + (t0 + t) / 256 * 176, d + t);
      return;
    case WeightFormat::q3_K:
      for (int64_t t = 0; t < kc; t += 256)
        widen::Q3_K(base + r * w.row_bytes + (t0 + t) / 256 * 110, d + t);
      return;
  }
}

}  // namespace spattn::kernels::HWY_NAMESPACE

#endif  // SPATTN_KERNELS_WEIGHT_WIDEN_INL_H_ toggle
