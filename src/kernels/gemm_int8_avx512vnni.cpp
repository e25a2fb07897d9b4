// The integer product's block loops on AVX-512 VNNI (gemm_int8.hpp): per block of 32 columns,
// eight vpdpbusd a row of activations, each adding four u8 x s8 products to every one of the
// tile's 16 weight rows (the activations' four bytes broadcast from memory), then the block's
// int32 sums scaled into the f32 outputs. Up to 8 activation rows at a time share each weight
// vector: 8 int32 and 8 f32 accumulators, the weight vector and the scales stay in registers.
// The functions carry their own target attribute and run only where the CPU reports
// AVX512_VNNI, so the file builds for any x86-64 baseline.
#include "kernels/gemm_int8_tile.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

// GCC 12's intrinsics pass _mm512_undefined_*() (a self-initialized variable) as the unused
// merge operand of unmasked conversions and reductions, which -Wuninitialized reports at every
// use in a function with its own target attribute.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define SPATTN_VNNI_ATTR \
  __attribute__((target("avx2,fma,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))

namespace spattn::kernels::gemm_int8_detail {
namespace {

// acc[r] = corr + row r's products with block bi's column groups [g0, g1) (four columns a
// group: one vpdpbusd each).
template <int R>
SPATTN_VNNI_ATTR inline void dots(__m512i acc[R], const TileBlock& t, const int32_t* corr,
                                  const uint8_t* const xq[R], int64_t bi, int g0, int g1) {
  for (int r = 0; r < R; ++r) acc[r] = _mm512_load_si512(corr);
  for (int g = g0; g < g1; ++g) {
    const __m512i wv = _mm512_load_si512(t.q + g * 64);
    for (int r = 0; r < R; ++r) {
      int32_t x4;
      __builtin_memcpy(&x4, xq[r] + bi * kBlock + 4 * g, 4);
      acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_set1_epi32(x4), wv);
    }
  }
}

template <Scaling SC, int R>
SPATTN_VNNI_ATTR void rows_r(const TileBlock* tb, int64_t nbt, const ActRows& a, int64_t b0,
                             int64_t r0, float* c, int64_t ldc, int64_t m0, int mrows, bool first) {
  const __mmask16 mask = __mmask16((1u << mrows) - 1u);
  const uint8_t* xq[R];
  const float* xd[R];
  const float* xs[R];
  __m512 out[R];
  for (int r = 0; r < R; ++r) {
    xq[r] = a.q(r0 + r) + b0 * kBlock;
    xd[r] = a.d(r0 + r) + b0;
    xs[r] = a.s(r0 + r) + b0;
    out[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, c + (r0 + r) * ldc + m0);
  }
  for (int64_t bi = 0; bi < nbt; ++bi) {
    const TileBlock& t = tb[bi];
    __m512i lo[R];
    dots<R>(lo, t, t.corr, xq, bi, 0, SC == Scaling::halves ? 4 : 8);
    const __m512 s0 = _mm512_load_ps(t.s0);
    if constexpr (SC == Scaling::halves) {
      __m512i hi[R];
      dots<R>(hi, t, t.corr_hi, xq, bi, 4, 8);
      const __m512 s1 = _mm512_load_ps(t.s1);
      for (int r = 0; r < R; ++r) {
        const __m512 part = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi[r]), s1,
                                            _mm512_mul_ps(_mm512_cvtepi32_ps(lo[r]), s0));
        out[r] = _mm512_fmadd_ps(part, _mm512_set1_ps(xd[r][bi]), out[r]);
      }
    } else {
      for (int r = 0; r < R; ++r)
        out[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo[r]),
                                 _mm512_mul_ps(s0, _mm512_set1_ps(xd[r][bi])), out[r]);
      if constexpr (SC == Scaling::min) {
        const __m512 mn = _mm512_load_ps(t.mn);
        for (int r = 0; r < R; ++r)
          out[r] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(xs[r][bi]), out[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(c + (r0 + r) * ldc + m0, mask, out[r]);
}

template <Scaling SC>
SPATTN_VNNI_ATTR void rows_sc(const TileBlock* tb, int64_t nbt, const ActRows& a, int64_t b0,
                              int64_t r0, int64_t rows, float* c, int64_t ldc, int64_t m0,
                              int mrows, bool first) {
  constexpr int R = 8;
  int64_t r = r0;
  for (; r + R <= r0 + rows; r += R) rows_r<SC, R>(tb, nbt, a, b0, r, c, ldc, m0, mrows, first);
  switch (r0 + rows - r) {
    case 7: return rows_r<SC, 7>(tb, nbt, a, b0, r, c, ldc, m0, mrows, first);
    case 6: return rows_r<SC, 6>(tb, nbt, a, b0, r, c, ldc, m0, mrows, first);
    case 5: return rows_r<SC, 5>(tb, nbt, a, b0, r, c, ldc, m0, mrows, first);
    case 4: return rows_r<SC, 4>(tb, nbt, a, b0, r, c, ldc, m0, mrows, first);
    case 3: return rows_r<SC, 3>(tb, nbt, a, b0, r, c, ldc, m0, mrows, first);
    case 2: return rows_r<SC, 2>(tb, nbt, a, b0, r, c, ldc, m0, mrows, first);
    case 1: return rows_r<SC, 1>(tb, nbt, a, b0, r, c, ldc, m0, mrows, first);
    default: return;
  }
}

void rows_vnni(Scaling sc, const TileBlock* tb, int64_t nbt, const ActRows& a, int64_t b0,
               int64_t r0, int64_t rows, float* c, int64_t ldc, int64_t m0, int mrows, bool first) {
  switch (sc) {
    case Scaling::plain:
      return rows_sc<Scaling::plain>(tb, nbt, a, b0, r0, rows, c, ldc, m0, mrows, first);
    case Scaling::min:
      return rows_sc<Scaling::min>(tb, nbt, a, b0, r0, rows, c, ldc, m0, mrows, first);
    case Scaling::halves:
      return rows_sc<Scaling::halves>(tb, nbt, a, b0, r0, rows, c, ldc, m0, mrows, first);
  }
}

// Two tiles (32 weight rows) against R activation rows: each broadcast activation dword feeds
// two vpdpbusd, so a block needs 2 + R loads for 2R products instead of 1 + R for R. R = 6 for
// the plain and min scalings (2R int32 and 2R f32 accumulators, two weight vectors and the
// broadcast: 30 of the 32 registers), 4 for halves (whose first half's scaled sums stay live
// through the second half: 2R more). Each output's arithmetic is rows_r's, in the same order:
// the same bits.
template <int R>
SPATTN_VNNI_ATTR inline void dots2(__m512i la[R], __m512i lb[R], const TileBlock& s,
                                   const TileBlock& t, const int32_t* corr_a, const int32_t* corr_b,
                                   const uint8_t* const xq[R], int64_t bi, int g0, int g1) {
  for (int r = 0; r < R; ++r) {
    la[r] = _mm512_load_si512(corr_a);
    lb[r] = _mm512_load_si512(corr_b);
  }
  for (int g = g0; g < g1; ++g) {
    const __m512i wa = _mm512_load_si512(s.q + g * 64);
    const __m512i wb = _mm512_load_si512(t.q + g * 64);
    for (int r = 0; r < R; ++r) {
      int32_t x4;
      __builtin_memcpy(&x4, xq[r] + bi * kBlock + 4 * g, 4);
      const __m512i x = _mm512_set1_epi32(x4);
      la[r] = _mm512_dpbusd_epi32(la[r], x, wa);
      lb[r] = _mm512_dpbusd_epi32(lb[r], x, wb);
    }
  }
}

template <Scaling SC, int R>
SPATTN_VNNI_ATTR void rows2_r(const TileBlock* ta, const TileBlock* tb, int64_t nbt,
                              const ActRows& a, int64_t b0, int64_t r0, float* c, int64_t ldc,
                              int64_t m0, int mrows_b, bool first) {
  const __mmask16 mask_b = __mmask16((1u << mrows_b) - 1u);
  const uint8_t* xq[R];
  const float* xd[R];
  const float* xs[R];
  __m512 oa[R], ob[R];
  for (int r = 0; r < R; ++r) {
    xq[r] = a.q(r0 + r) + b0 * kBlock;
    xd[r] = a.d(r0 + r) + b0;
    xs[r] = a.s(r0 + r) + b0;
    float* cr = c + (r0 + r) * ldc + m0;
    oa[r] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(cr);
    ob[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask_b, cr + kRows);
  }
  for (int64_t bi = 0; bi < nbt; ++bi) {
    const TileBlock& s = ta[bi];
    const TileBlock& t = tb[bi];
    __m512i la[R], lb[R];
    dots2<R>(la, lb, s, t, s.corr, t.corr, xq, bi, 0, SC == Scaling::halves ? 4 : 8);
    const __m512 sa = _mm512_load_ps(s.s0), sb = _mm512_load_ps(t.s0);
    if constexpr (SC == Scaling::halves) {
      __m512 pa[R], pb[R];
      for (int r = 0; r < R; ++r) {
        pa[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(la[r]), sa);
        pb[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(lb[r]), sb);
      }
      dots2<R>(la, lb, s, t, s.corr_hi, t.corr_hi, xq, bi, 4, 8);
      const __m512 ha = _mm512_load_ps(s.s1), hb = _mm512_load_ps(t.s1);
      for (int r = 0; r < R; ++r) {
        const __m512 dx = _mm512_set1_ps(xd[r][bi]);
        oa[r] = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(la[r]), ha, pa[r]), dx, oa[r]);
        ob[r] = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(lb[r]), hb, pb[r]), dx, ob[r]);
      }
    } else {
      for (int r = 0; r < R; ++r) {
        const __m512 dx = _mm512_set1_ps(xd[r][bi]);
        oa[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(la[r]), _mm512_mul_ps(sa, dx), oa[r]);
        ob[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lb[r]), _mm512_mul_ps(sb, dx), ob[r]);
      }
      if constexpr (SC == Scaling::min) {
        const __m512 ma = _mm512_load_ps(s.mn), mb = _mm512_load_ps(t.mn);
        for (int r = 0; r < R; ++r) {
          const __m512 sx = _mm512_set1_ps(xs[r][bi]);
          oa[r] = _mm512_fnmadd_ps(ma, sx, oa[r]);
          ob[r] = _mm512_fnmadd_ps(mb, sx, ob[r]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    float* cr = c + (r0 + r) * ldc + m0;
    _mm512_storeu_ps(cr, oa[r]);
    _mm512_mask_storeu_ps(cr + kRows, mask_b, ob[r]);
  }
}

template <Scaling SC>
SPATTN_VNNI_ATTR void rows2_sc(const TileBlock* ta, const TileBlock* tb, int64_t nbt,
                               const ActRows& a, int64_t b0, int64_t r0, int64_t rows, float* c,
                               int64_t ldc, int64_t m0, int mrows_b, bool first) {
  constexpr int R = SC == Scaling::halves ? 4 : 6;
  int64_t r = r0;
  for (; r + R <= r0 + rows; r += R)
    rows2_r<SC, R>(ta, tb, nbt, a, b0, r, c, ldc, m0, mrows_b, first);
  switch (r0 + rows - r) {
    case 5:
      if constexpr (R > 5) return rows2_r<SC, 5>(ta, tb, nbt, a, b0, r, c, ldc, m0, mrows_b, first);
      return;
    case 4:
      if constexpr (R > 4) return rows2_r<SC, 4>(ta, tb, nbt, a, b0, r, c, ldc, m0, mrows_b, first);
      return;
    case 3: return rows2_r<SC, 3>(ta, tb, nbt, a, b0, r, c, ldc, m0, mrows_b, first);
    case 2: return rows2_r<SC, 2>(ta, tb, nbt, a, b0, r, c, ldc, m0, mrows_b, first);
    case 1: return rows2_r<SC, 1>(ta, tb, nbt, a, b0, r, c, ldc, m0, mrows_b, first);
    default: return;
  }
}

void rows2_vnni(Scaling sc, const TileBlock* ta, const TileBlock* tb, int64_t nbt, const ActRows& a,
                int64_t b0, int64_t r0, int64_t rows, float* c, int64_t ldc, int64_t m0,
                int mrows_b, bool first) {
  switch (sc) {
    case Scaling::plain:
      return rows2_sc<Scaling::plain>(ta, tb, nbt, a, b0, r0, rows, c, ldc, m0, mrows_b, first);
    case Scaling::min:
      return rows2_sc<Scaling::min>(ta, tb, nbt, a, b0, r0, rows, c, ldc, m0, mrows_b, first);
    case Scaling::halves:
      return rows2_sc<Scaling::halves>(ta, tb, nbt, a, b0, r0, rows, c, ldc, m0, mrows_b, first);
  }
}

// x rounded to the nearest integer, ties away from zero (std::round's rule, which the portable
// quantizer and ggml's q8_0 use; the vector unit's own rounding sends ties to even): truncate,
// then step away from zero where the dropped fraction is at least one half. |x| <= 127 here.
SPATTN_VNNI_ATTR inline __m512 round_half_away(__m512 x) {
  const __m512 t = _mm512_roundscale_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(x, t));
  const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f),
                                  _mm512_and_ps(x, _mm512_set1_ps(-0.0f)));  // +-1 as x's sign
  return _mm512_mask_add_ps(t, up, t, one);
}

SPATTN_VNNI_ATTR void quantize_row_vnni(const float* x, int64_t k, uint8_t* q, float* d, float* s,
                                        BlockFn fallback) {
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const float* v = x + b * kBlock;
    const __m512 a0 = _mm512_abs_ps(_mm512_loadu_ps(v));
    const __m512 a1 = _mm512_abs_ps(_mm512_loadu_ps(v + 16));
    // A NaN or an infinity fails "< inf": such a block takes the portable path.
    if (_mm512_cmp_ps_mask(a0, inf, _CMP_LT_OQ) != 0xFFFF ||
        _mm512_cmp_ps_mask(a1, inf, _CMP_LT_OQ) != 0xFFFF) {
      fallback(v, q + b * kBlock, d + b, s + b);
      continue;
    }
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
    const float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(_mm512_loadu_ps(v), vid)));
    const __m512i q1 =
        _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(_mm512_loadu_ps(v + 16), vid)));
    const __m128i off = _mm_set1_epi8(char(0x80));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * kBlock),
                     _mm_xor_si128(_mm512_cvtepi32_epi8(q0), off));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * kBlock + 16),
                     _mm_xor_si128(_mm512_cvtepi32_epi8(q1), off));
    d[b] = db;
    s[b] = db * float(_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)));
  }
}

// One block of a whole interleaved tile (InterleavedQuants): per column group, the two groups'
// 64-byte lines, their 4-byte runs g % 2 (dwords of that parity: group a's 8 rows, then group
// b's) in one two-source permute, the nibble shifted down and mapped through the 16-entry
// table (vpshufb); the rows' sums by vpdpbusd against ones, as the scalar unpack adds them.
SPATTN_VNNI_ATTR void interleaved_quants_vnni(const InterleavedQuants& iq, TileBlock& t) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i lut =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(iq.lut)));
  const __m512i nib = _mm512_set1_epi8(0x0f);
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i sum = _mm512_setzero_si512();
  for (int g = 0; g < 8; ++g) {
    const __m512i la = _mm512_loadu_si512(iq.a + iq.line[g] * 64);
    const __m512i lb = _mm512_loadu_si512(iq.b + iq.line[g] * 64);
    __m512i v = _mm512_permutex2var_epi32(la, g % 2 ? odd : even, lb);
    v = _mm512_and_si512(_mm512_srl_epi16(v, _mm_cvtsi32_si128(iq.shift[g])), nib);
    v = _mm512_shuffle_epi8(lut, v);
    _mm512_store_si512(t.q + g * 64, v);
    sum = _mm512_dpbusd_epi32(sum, ones, v);
  }
  _mm512_store_si512(t.corr, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7)));
}

// One block of a whole tile in ggml's own layout (RowQuants): each column group one gather of
// the 16 rows' 4 bytes (two with high bits), the nibble cut and mapped as the descriptor says;
// the rows' sums by vpdpbusd against ones, as the scalar unpack adds them. Why: the scalar unpack
// (decode_block a row at a time, then 4-byte copies) took a fifth of a q8_0 product's time and a
// quarter of a q6_K one's once the products themselves ran near half the int8 peak.
SPATTN_VNNI_ATTR void row_quants_vnni(const RowQuants& rq, TileBlock& t) {
  const __m512i offs =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(int32_t(rq.row_bytes)));
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i nib = _mm512_set1_epi8(0x0f);
  const __m512i hmask = _mm512_set1_epi8(char(rq.hi_mask));
  const __m512i bias = _mm512_set1_epi8(rq.bias);
  const __m512i low4 = _mm512_set1_epi32(0xf), spread = _mm512_set1_epi32(0x204081),
                byte_lsb = _mm512_set1_epi32(0x01010101);
  const __m512i lut =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rq.lut)));
  __m512i lo_sum = _mm512_setzero_si512(), hi_sum = _mm512_setzero_si512();
  for (int g = 0; g < 8; ++g) {
    __m512i v = _mm512_i32gather_epi32(offs, rq.rows + rq.lo[g], 1);
    if (rq.lo_shift[g] >= 0) {
      v = _mm512_and_si512(_mm512_srl_epi16(v, _mm_cvtsi32_si128(rq.lo_shift[g])), nib);
      if (rq.use_lut) v = _mm512_shuffle_epi8(lut, v);
    }
    if (rq.hi[g] >= 0) {
      __m512i h = _mm512_i32gather_epi32(offs, rq.rows + rq.hi[g], 1);
      if (rq.hi_packed) {
        // Bits 0-3 of the shifted word to bit 0 of bytes 0-3: x (1 + 2^7 + 2^14 + 2^21) puts bit
        // i of x at bit 8i (the four copies of x do not overlap, so nothing carries).
        h = _mm512_and_si512(_mm512_srl_epi32(h, _mm_cvtsi32_si128(rq.hi_shift[g])), low4);
        h = _mm512_and_si512(_mm512_mullo_epi32(h, spread), byte_lsb);
      } else {
        h = _mm512_and_si512(_mm512_srl_epi16(h, _mm_cvtsi32_si128(rq.hi_shift[g])), hmask);
      }
      v = _mm512_or_si512(v, _mm512_slli_epi16(h, 4));
    }
    v = _mm512_add_epi8(v, bias);
    _mm512_store_si512(t.q + g * 64, v);
    if (rq.halves && g >= 4)
      hi_sum = _mm512_dpbusd_epi32(hi_sum, ones, v);
    else
      lo_sum = _mm512_dpbusd_epi32(lo_sum, ones, v);
  }
  const __m512i zero = _mm512_setzero_si512();
  _mm512_store_si512(t.corr, _mm512_sub_epi32(zero, _mm512_slli_epi32(lo_sum, 7)));
  _mm512_store_si512(t.corr_hi, _mm512_sub_epi32(zero, _mm512_slli_epi32(hi_sum, 7)));
}

bool cpu_has_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
}

bool has_vnni() {
  static const bool has = cpu_has_vnni();
  return has;
}

}  // namespace

RowsFn vnni_rows() { return has_vnni() ? &rows_vnni : nullptr; }
Rows2Fn vnni_rows2() { return has_vnni() ? &rows2_vnni : nullptr; }
RowQuantsFn vnni_row_quants() { return has_vnni() ? &row_quants_vnni : nullptr; }
QuantizeRowFn vnni_quantize_row() { return has_vnni() ? &quantize_row_vnni : nullptr; }
QuantsFn vnni_interleaved_quants() { return has_vnni() ? &interleaved_quants_vnni : nullptr; }

}  // namespace spattn::kernels::gemm_int8_detail

#else

namespace spattn::kernels::gemm_int8_detail {
RowsFn vnni_rows() { return nullptr; }
Rows2Fn vnni_rows2() { return nullptr; }
RowQuantsFn vnni_row_quants() { return nullptr; }
QuantizeRowFn vnni_quantize_row() { return nullptr; }
QuantsFn vnni_interleaved_quants() { return nullptr; }
}  // namespace spattn::kernels::gemm_int8_detail

#endif
