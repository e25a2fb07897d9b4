// The flash loop's raw AVX-512 intrinsics, compiled only for Highway's AVX3 targets: the
// shifted-tile permute (ShiftedVectors / ShiftIndex, and F32Ops' permuted score strip) and
// Bf16DotOps, the bf16 operand format whose vdpbf16ps Highway has no operation for. Every
// other target compiles none of it (F32Ops' portable paths run there).
//
// Included by flash-inl.h (inside its HWY_BEFORE_NAMESPACE region), once per SIMD target:
// the include guard toggles with HWY_TARGET_TOGGLE, as Highway's foreach_target needs.

#if defined(SPATTN_KERNELS_FLASH_AVX512_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPATTN_KERNELS_FLASH_AVX512_INL_H_
#undef SPATTN_KERNELS_FLASH_AVX512_INL_H_
#else
#define SPATTN_KERNELS_FLASH_AVX512_INL_H_
#endif

#if HWY_TARGET == HWY_AVX3
#include <immintrin.h>

namespace spattn::kernels::HWY_NAMESPACE {

// A shifted tile on AVX-512 (F32Ops / Bf16DotOps::ScoresShifted): row k's slots are the 64
// words from word sj of row k of the tile at kt, then of the tile after it (rows x 64 words
// on). w gets the five aligned 16-word vectors of row 0 they lie in; ShiftIndex(sj) picks
// vector c's lanes out of w[c] and w[c + 1] with one two-source permute. Aligned loads and a
// permute ran the f32 score kernel faster than unaligned loads (most of which cross a cache
// line).
template <typename W>
inline void ShiftedVectors(const W* kt, int64_t rows, int64_t sj, const W** w) {
  for (int64_t i = 0; i < 5; ++i) {
    const int64_t v = sj / 16 + i;
    w[i] = v < 4 ? kt + v * 16 : kt + rows * kTileKeys + (v - 4) * 16;
  }
}
inline __m512i ShiftIndex(int64_t sj) {
  return _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                          _mm512_set1_epi32(int(sj % 16)));
}

// AVX-512: the shifted row's vectors through ShiftedVectors / ShiftIndex (aligned loads and
// a permute), where the tile boundary cuts a vector (sj not a multiple of 16): R rows of
// F32Ops::ScoresShifted.
template <int R>
HWY_INLINE void ScoreStripPermF32(const float* HWY_RESTRICT q, int64_t d, const float* const* w,
                                  __m512i idx, float* HWY_RESTRICT s) {
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < d; ++k) {
    __m512 b[4];
    __m512 x = _mm512_load_ps(w[0] + k * kTileKeys);
    for (int c = 0; c < 4; ++c) {
      const __m512 y = _mm512_load_ps(w[c + 1] + k * kTileKeys);
      b[c] = _mm512_permutex2var_ps(x, idx, y);
      x = y;
    }
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(q[r * d + k]);
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_fmadd_ps(a, b[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4; ++c) _mm512_store_ps(s + r * kTileKeys + c * 16, acc[r][c]);
}
// S[npad][64] = Q K^T over the shifted tile at slot sj of kt, sj % 16 != 0 (F32Ops).
HWY_INLINE void ScoresShiftedPermF32(const float* q, int64_t npad, const float* kt, int64_t sj,
                                     int64_t d, float* s) {
  const float* w[5];
  ShiftedVectors(kt, d, sj, w);
  const __m512i idx = ShiftIndex(sj);
  int64_t r0 = 0;
  for (; r0 < WideRows(npad); r0 += kRWide)
    ScoreStripPermF32<kRWide>(q + r0 * d, d, w, idx, s + r0 * kTileKeys);
  for (; r0 < npad; r0 += kR) ScoreStripPermF32<kR>(q + r0 * d, d, w, idx, s + r0 * kTileKeys);
}

// ---------------------------------------------------------------------------------------
// Bf16DotOps: bf16 operands and vdpbf16ps, which computes per f32 lane
//   acc += a[2i] b[2i] + a[2i+1] b[2i+1].
// Pairs run along the contraction axis: K tile as [d/2][64][2] (pairs of dims per key), V tile
// as [32][dp][2] (pairs of keys per dim), Q as [rows][d] (a broadcast 32-bit word is a pair of
// dims) and P converted to bf16 [rows][64] (a 32-bit word is a pair of keys).
#define SPATTN_BF16_ATTR \
  __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx512bf16,fma,avx2")))

struct Bf16DotOps {
  using T = uint16_t;
  static constexpr bool kKeyPairs = true;
  static int64_t q_stride(int64_t d) { return d; }
  static int64_t k_tile_elems(int64_t d) { return d * kTileKeys; }
  static int64_t v_tile_elems(int64_t dp) { return kTileKeys * dp; }

  static void LoadRowBf16(const TensorView& t, int64_t h, int64_t s, int64_t d, T* dst) {
    if (t.dtype == DType::bf16 && t.stride_dim == 1) {
      std::memcpy(dst, t.ptr(h, s), size_t(d) * 2);
    } else {
      for (int64_t c = 0; c < d; ++c) dst[c] = f32_to_bf16(t.get(h, s, c));
    }
  }
  static void PackQ(const TensorView& q, int64_t h, const int64_t* rows, int64_t n, int64_t npad,
                    int64_t d, T* dst) {
    for (int64_t r = 0; r < n; ++r) LoadRowBf16(q, h, rows[r], d, dst + r * d);
    std::fill(dst + n * d, dst + npad * d, T(0));
  }
  static void PackKeyK(const TensorView& k, int64_t h, int64_t s, int64_t jj, int64_t d, T* tile,
                       float* row_buf) {
    T* row = reinterpret_cast<T*>(row_buf);
    LoadRowBf16(k, h, s, d, row);
    for (int64_t c = 0; c < d; c += 2) {
      tile[(c / 2) * kTileKeys * 2 + jj * 2] = row[c];
      tile[(c / 2) * kTileKeys * 2 + jj * 2 + 1] = row[c + 1];
    }
  }
  static void PackKeyV(const TensorView& v, int64_t h, int64_t s, int64_t jj, int64_t d, int64_t dp,
                       T* tile, float* row_buf) {
    T* row = reinterpret_cast<T*>(row_buf);
    LoadRowBf16(v, h, s, d, row);
    T* pair = tile + (jj / 2) * dp * 2 + (jj & 1);
    for (int64_t c = 0; c < d; ++c) pair[c * 2] = row[c];
    for (int64_t c = d; c < dp; ++c) pair[c * 2] = 0;
  }
  static void CopyKeyK(const T* src, int64_t sj, T* dst, int64_t dj, int64_t d) {
    for (int64_t c2 = 0; c2 < d / 2; ++c2) {
      dst[c2 * kTileKeys * 2 + dj * 2] = src[c2 * kTileKeys * 2 + sj * 2];
      dst[c2 * kTileKeys * 2 + dj * 2 + 1] = src[c2 * kTileKeys * 2 + sj * 2 + 1];
    }
  }
  static void CopyKeyV(const T* src, int64_t sj, T* dst, int64_t dj, int64_t dp) {
    const T* a = src + (sj / 2) * dp * 2 + (sj & 1);
    T* b = dst + (dj / 2) * dp * 2 + (dj & 1);
    for (int64_t c = 0; c < dp; ++c) b[c * 2] = a[c * 2];
  }
  // A key's pair of dims is one 32-bit word.
  static void CopyListedK(const T* src, const int32_t* sj, int64_t m, T* dst, int64_t dj,
                          int64_t d) {
    CopyListedWords(reinterpret_cast<const uint32_t*>(src), sj, m, reinterpret_cast<uint32_t*>(dst),
                    dj, d / 2);
  }
  static void CopyKeysK(const T* src, int64_t sj, T* dst, int64_t dj, int64_t n, int64_t d) {
    for (int64_t c2 = 0; c2 < d / 2; ++c2)
      CopyWords(reinterpret_cast<const uint32_t*>(src + c2 * kTileKeys * 2 + sj * 2),
                reinterpret_cast<uint32_t*>(dst + c2 * kTileKeys * 2 + dj * 2), n);
  }
  // V pairs keys: whole pair rows copy when both ends start on the same parity.
  static void CopyKeysV(const T* src, int64_t sj, T* dst, int64_t dj, int64_t n, int64_t dp) {
    int64_t i = 0;
    if ((sj & 1) == (dj & 1)) {
      if (sj & 1) CopyKeyV(src, sj, dst, dj, dp), i = 1;
      const int64_t pairs = (n - i) / 2;
      std::memcpy(dst + ((dj + i) / 2) * dp * 2, src + ((sj + i) / 2) * dp * 2,
                  size_t(pairs * dp * 2) * sizeof(T));
      i += pairs * 2;
    }
    for (; i < n; ++i) CopyKeyV(src, sj + i, dst, dj + i, dp);
  }
  static void PrefetchKeys(const T* kt, const T* vt, int64_t sj, int64_t n, int64_t d, int64_t dp) {
    PrefetchRows(kt + sj * 2, d / 2, kTileKeys * 4, n * 4);
    const int64_t a = sj / 2, b = (sj + n + 1) / 2;
    PrefetchRows(vt + a * dp * 2, 1, 0, (b - a) * dp * 4);
  }
  static void ZeroKey(T* kt, T* vt, int64_t j, int64_t d, int64_t dp) {
    for (int64_t c2 = 0; c2 < d / 2; ++c2)
      kt[c2 * kTileKeys * 2 + j * 2] = kt[c2 * kTileKeys * 2 + j * 2 + 1] = 0;
    T* b = vt + (j / 2) * dp * 2 + (j & 1);
    for (int64_t c = 0; c < dp; ++c) b[c * 2] = 0;
  }
  static void ZeroKeys(T* kt, T* vt, int64_t from, int64_t d, int64_t dp) {
    for (int64_t c2 = 0; c2 < d / 2; ++c2)
      std::fill(kt + c2 * kTileKeys * 2 + from * 2, kt + (c2 + 1) * kTileKeys * 2, T(0));
    for (int64_t j = from; j < kTileKeys; ++j) {
      T* b = vt + (j / 2) * dp * 2 + (j & 1);
      for (int64_t c = 0; c < dp; ++c) b[c * 2] = 0;
    }
  }

  // R rows x 4 vectors of accumulators (kRWide rows while a tile allows, then kR): more rows
  // per loaded K/V vector; each dot product keeps its order, so the blocking changes no bit.
  // load(k2, b) gives the 4 K vectors of dim pair k2: a packed tile's (AlignedK) or a shifted
  // tile's (ShiftedK).
  template <int R, class LoadK>
  SPATTN_BF16_ATTR static HWY_INLINE void ScoreStrip(const T* q, int64_t d, const LoadK& load,
                                                     float* s) {
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
    for (int64_t k2 = 0; k2 < d / 2; ++k2) {
      __m512bh b[4];
      load(k2, b);
      for (int r = 0; r < R; ++r) {
        int32_t pair;
        std::memcpy(&pair, q + r * d + 2 * k2, 4);
        const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
        for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], a, b[c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) _mm512_store_ps(s + r * kTileKeys + c * 16, acc[r][c]);
  }
  struct AlignedK {
    const T* kt;
    SPATTN_BF16_ATTR HWY_INLINE void operator()(int64_t k2, __m512bh* b) const {
      for (int c = 0; c < 4; ++c)
        b[c] = (__m512bh)_mm512_load_si512(kt + k2 * kTileKeys * 2 + c * 32);
    }
  };
  // The shifted tile of F32Ops::ScoresShifted on 32-bit words (a key's pair of dims), through
  // ShiftedVectors / ShiftIndex: one two-source permute per vector.
  struct ShiftedK {
    const uint32_t* const* w;
    __m512i idx;
    SPATTN_BF16_ATTR HWY_INLINE void operator()(int64_t k2, __m512bh* b) const {
      __m512i x = _mm512_load_si512(w[0] + k2 * kTileKeys);
      for (int c = 0; c < 4; ++c) {
        const __m512i y = _mm512_load_si512(w[c + 1] + k2 * kTileKeys);
        b[c] = (__m512bh)_mm512_permutex2var_epi32(x, idx, y);
        x = y;
      }
    }
  };
  template <class LoadK>
  SPATTN_BF16_ATTR static HWY_INLINE void ScoreRows(const T* q, int64_t npad, int64_t d,
                                                    const LoadK& load, float* s) {
    int64_t r0 = 0;
    for (; r0 < WideRows(npad); r0 += kRWide)
      ScoreStrip<kRWide>(q + r0 * d, d, load, s + r0 * kTileKeys);
    for (; r0 < npad; r0 += kR) ScoreStrip<kR>(q + r0 * d, d, load, s + r0 * kTileKeys);
  }

  SPATTN_BF16_ATTR static HWY_NOINLINE void Scores(const T* q, int64_t npad, const T* kt, int64_t d,
                                                   float* s) {
    ScoreRows(q, npad, d, AlignedK{kt}, s);
  }
  // sj even: V pairs keys, and a shifted tile keeps whole pairs.
  SPATTN_BF16_ATTR static HWY_NOINLINE void ScoresShifted(const T* q, int64_t npad, const T* kt,
                                                          int64_t sj, int64_t d, float* s) {
    const uint32_t* w[5];
    ShiftedVectors(reinterpret_cast<const uint32_t*>(kt), d / 2, sj, w);
    ScoreRows(q, npad, d, ShiftedK{w, ShiftIndex(sj)}, s);
  }
  static const T* ShiftedV(const T* vt, int64_t sj, int64_t dp) { return vt + (sj / 2) * dp * 2; }

  // Rows [0, R) of O's columns [c0, c0 + 16 vecs): alpha O + P V with P as bf16 pairs.
  template <int R>
  SPATTN_BF16_ATTR static HWY_INLINE void PVStrip(const uint16_t* pb, const T* vt, int64_t dp,
                                                  int64_t c0, int vecs, const float* alpha,
                                                  float* o) {
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r) {
      const __m512 al = _mm512_set1_ps(alpha[r]);
      for (int c = 0; c < vecs; ++c)
        acc[r][c] = _mm512_mul_ps(al, _mm512_load_ps(o + r * dp + c0 + c * 16));
    }
    for (int64_t j2 = 0; j2 < kTileKeys / 2; ++j2) {
      __m512bh b[4];
      for (int c = 0; c < vecs; ++c)
        b[c] = (__m512bh)_mm512_load_si512(vt + j2 * dp * 2 + (c0 + c * 16) * 2);
      for (int r = 0; r < R; ++r) {
        int32_t pair;
        std::memcpy(&pair, pb + r * kTileKeys + 2 * j2, 4);
        const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
        for (int c = 0; c < vecs; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], a, b[c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < vecs; ++c) _mm512_store_ps(o + r * dp + c0 + c * 16, acc[r][c]);
  }

  SPATTN_BF16_ATTR static HWY_NOINLINE void PV(const float* p, int64_t npad, const T* vt,
                                               int64_t dp, const float* alpha, float* o) {
    alignas(64) uint16_t pb[kMaxTileRows * kTileKeys];
    for (int64_t i = 0; i < npad * kTileKeys; i += 32) {
      const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_load_ps(p + i + 16), _mm512_load_ps(p + i));
      _mm512_store_si512(pb + i, (__m512i)h);
    }
    for (int64_t c0 = 0; c0 < dp; c0 += 4 * 16) {
      const int vecs = int(std::min<int64_t>(4, (dp - c0) / 16));
      int64_t r0 = 0;
      if (vecs == 4)
        for (; r0 < WideRows(npad); r0 += kRWide)
          PVStrip<kRWide>(pb + r0 * kTileKeys, vt, dp, c0, 4, alpha + r0, o + r0 * dp);
      for (; r0 < npad; r0 += kR)
        PVStrip<kR>(pb + r0 * kTileKeys, vt, dp, c0, vecs, alpha + r0, o + r0 * dp);
    }
  }
};
#undef SPATTN_BF16_ATTR

}  // namespace spattn::kernels::HWY_NAMESPACE
#endif  // HWY_TARGET == HWY_AVX3

#endif  // include guard
