// F32Ops, the flash loop's f32 operand format (flash-inl.h): packing a tile's keys, and the
// score (Q K^T) and P V micro-kernels, on every SIMD target.
//
// Included by flash-inl.h (inside its HWY_BEFORE_NAMESPACE region), once per SIMD target:
// the include guard toggles with HWY_TARGET_TOGGLE, as Highway's foreach_target needs.

#if defined(SPATTN_KERNELS_FLASH_F32_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPATTN_KERNELS_FLASH_F32_OPS_INL_H_
#undef SPATTN_KERNELS_FLASH_F32_OPS_INL_H_
#else
#define SPATTN_KERNELS_FLASH_F32_OPS_INL_H_
#endif

namespace spattn::kernels::HWY_NAMESPACE {

// ---------------------------------------------------------------------------------------
// F32Ops: f32 operands. Q tile [rows][d]; K tile transposed [d][64]; V tile [64][dp].
struct F32Ops {
  using T = float;
  // V tiles hold keys in pairs (a gathered copy keeps a key's parity to copy whole pairs).
  static constexpr bool kKeyPairs = false;
  static int64_t q_stride(int64_t d) { return d; }
  static int64_t k_tile_elems(int64_t d) { return d * kTileKeys; }
  static int64_t v_tile_elems(int64_t dp) { return kTileKeys * dp; }

  static void PackQ(const TensorView& q, int64_t h, const int64_t* rows, int64_t n, int64_t npad,
                    int64_t d, T* dst) {
    for (int64_t r = 0; r < n; ++r) LoadRowF32(q, h, rows[r], d, dst + r * d);
    std::fill(dst + n * d, dst + npad * d, 0.0f);
  }
  // Slot jj of a K tile and of a V tile (its padding [d, dp) zeroed) from row s of k / v.
  // Other slots are left as they are (zero in a fresh tile).
  static void PackKeyK(const TensorView& k, int64_t h, int64_t s, int64_t jj, int64_t d, T* tile,
                       float* row_buf) {
    LoadRowF32(k, h, s, d, row_buf);
    for (int64_t c = 0; c < d; ++c) tile[c * kTileKeys + jj] = row_buf[c];
  }
  static void PackKeyV(const TensorView& v, int64_t h, int64_t s, int64_t jj, int64_t d, int64_t dp,
                       T* tile, float*) {
    LoadRowF32(v, h, s, d, tile + jj * dp);
    std::fill(tile + jj * dp + d, tile + (jj + 1) * dp, 0.0f);
  }
  // Copies slot sj of packed tiles into slot dj of others (gathering packed keys).
  static void CopyKeyK(const T* src, int64_t sj, T* dst, int64_t dj, int64_t d) {
    for (int64_t c = 0; c < d; ++c) dst[c * kTileKeys + dj] = src[c * kTileKeys + sj];
  }
  static void CopyKeyV(const T* src, int64_t sj, T* dst, int64_t dj, int64_t dp) {
    std::memcpy(dst + dj * dp, src + sj * dp, size_t(dp) * sizeof(T));
  }
  // Copies slots sj[0, m) of one packed tile into slots dj.. of another (CopyListedWords).
  static void CopyListedK(const T* src, const int32_t* sj, int64_t m, T* dst, int64_t dj,
                          int64_t d) {
    CopyListedWords(src, sj, m, dst, dj, d);
  }
  // Copies n consecutive slots sj.. of packed tiles into slots dj.. of others (a key range
  // shifted off the 64-key grid): row copies, not per-key scatters.
  static void CopyKeysK(const T* src, int64_t sj, T* dst, int64_t dj, int64_t n, int64_t d) {
    for (int64_t c = 0; c < d; ++c)
      CopyWords(src + c * kTileKeys + sj, dst + c * kTileKeys + dj, n);
  }
  static void CopyKeysV(const T* src, int64_t sj, T* dst, int64_t dj, int64_t n, int64_t dp) {
    std::memcpy(dst + dj * dp, src + sj * dp, size_t(n * dp) * sizeof(T));
  }
  // Prefetches slots [sj, sj + n) of a K tile and a V tile.
  static void PrefetchKeys(const T* kt, const T* vt, int64_t sj, int64_t n, int64_t d, int64_t dp) {
    PrefetchRows(kt + sj, d, kTileKeys * 4, n * 4);
    PrefetchRows(vt + sj * dp, 1, 0, n * dp * 4);
  }
  // Zeroes slots [from, 64) of a K tile and a V tile (a partly filled gathered tile: its
  // scores there are masked, and P = 0 times a zero V adds nothing).
  static void ZeroKeys(T* kt, T* vt, int64_t from, int64_t d, int64_t dp) {
    for (int64_t c = 0; c < d; ++c)
      std::fill(kt + c * kTileKeys + from, kt + (c + 1) * kTileKeys, 0.0f);
    std::fill(vt + from * dp, vt + kTileKeys * dp, 0.0f);
  }

  // R rows x CV vectors of accumulators, the K vector of dim k at key column col from
  // kvec(k, col); every entry is one dot product summed over k in order, so neither the
  // blocking nor where the K vectors come from (a tile, or a 16-bit cache read in place:
  // group_tiles-inl.h) changes a bit.
  template <int R, int CV, class KVec>
  static HWY_INLINE void ScoreStripOf(const T* HWY_RESTRICT q, int64_t d, const KVec& kvec,
                                      int64_t col0, float* HWY_RESTRICT s) {
    const DF df;
    const int64_t N = int64_t(hn::Lanes(df));
    VF acc[R][CV];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < CV; ++c) acc[r][c] = hn::Zero(df);
    for (int64_t k = 0; k < d; ++k) {
      VF b[CV];
      for (int c = 0; c < CV; ++c) b[c] = kvec(k, col0 + c * N);
      for (int r = 0; r < R; ++r) {
        const VF a = hn::Set(df, q[r * d + k]);
        for (int c = 0; c < CV; ++c) acc[r][c] = hn::MulAdd(a, b[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < CV; ++c) hn::Store(acc[r][c], df, s + r * kTileKeys + col0 + c * N);
  }

  // S[npad][64] = Q K^T (unscaled) over the K vectors kvec gives (ScoreStripOf).
  template <class KVec>
  static HWY_INLINE void ScoresOf(const T* q, int64_t npad, int64_t d, const KVec& kvec, float* s) {
    const int64_t N = int64_t(hn::Lanes(DF()));
    constexpr int64_t kChunk = kCV;
    static_assert(kTileKeys % 16 == 0);
    for (int64_t col0 = 0; col0 < kTileKeys; col0 += kChunk * N) {
      const int64_t vecs = std::min<int64_t>(kChunk, (kTileKeys - col0) / N);
      int64_t r0 = 0;
      if (vecs == kCV)
        for (; r0 < WideRows(npad); r0 += kRWide)
          ScoreStripOf<kRWide, kCV>(q + r0 * d, d, kvec, col0, s + r0 * kTileKeys);
      for (; r0 < npad; r0 += kR) {
        if (vecs == kCV)
          ScoreStripOf<kR, kCV>(q + r0 * d, d, kvec, col0, s + r0 * kTileKeys);
        else
          ScoreStripOf<kR, 1>(q + r0 * d, d, kvec, col0, s + r0 * kTileKeys);
      }
    }
  }
  // S[npad][64] = Q K^T (unscaled) over K tile kt. Not inlined (nor PV): inlined into the
  // loop, GCC 12 ran out of registers there and kept a PV accumulator in memory, a
  // store-to-load chain that cost the f32 loop a fifth of its speed.
  static HWY_NOINLINE void Scores(const T* q, int64_t npad, const T* kt, int64_t d, float* s) {
    const DF df;
    ScoresOf(
        q, npad, d, [&](int64_t k, int64_t col) { return hn::Load(df, kt + k * kTileKeys + col); },
        s);
  }

  // A shifted tile: packed keys sj, sj + 1, ... of tile kt and, past its end, of the tile after
  // it (a head's K tiles lie back to back, kt + d x 64 words on), as slots 0..63. Below
  // AVX-512 (and there when no vector straddles the boundary), vectors of slots come from one
  // row of either tile (unaligned loads), except the one the tile boundary
  // cuts, whose lanes `lo` come from kt and the rest from the next tile: it goes last in its
  // strip (kBlendLast), so only one vector per strip pays a second load. Every entry is the
  // same dot product, summed in the same order, as in the keys' own tiles.
  template <int R, int CV, bool kBlendLast>
  static HWY_INLINE void ScoreStripShifted(const T* HWY_RESTRICT q, int64_t d, const T* const* src,
                                           const T* hi, hn::Mask<DF> lo, const int64_t* col,
                                           float* HWY_RESTRICT s) {
    const DF df;
    VF acc[R][CV];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < CV; ++c) acc[r][c] = hn::Zero(df);
    for (int64_t k = 0; k < d; ++k) {
      VF b[CV];
      for (int c = 0; c < CV; ++c) b[c] = hn::LoadU(df, src[c] + k * kTileKeys);
      if constexpr (kBlendLast)
        b[CV - 1] = hn::IfThenElse(lo, b[CV - 1], hn::LoadU(df, hi + k * kTileKeys));
      for (int r = 0; r < R; ++r) {
        const VF a = hn::Set(df, q[r * d + k]);
        for (int c = 0; c < CV; ++c) acc[r][c] = hn::MulAdd(a, b[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < CV; ++c) hn::Store(acc[r][c], df, s + r * kTileKeys + col[c]);
  }

  // S[npad][64] = Q K^T over the shifted tile at slot sj (0 < sj < 64) of kt.
  static HWY_NOINLINE void ScoresShifted(const T* q, int64_t npad, const T* kt, int64_t sj,
                                         int64_t d, float* s) {
#if HWY_TARGET == HWY_AVX3
    if (sj % 16 != 0) return ScoresShiftedPermF32(q, npad, kt, sj, d, s);  // flash_avx512-inl.h
#endif
    const DF df;
    const int64_t N = int64_t(hn::Lanes(df)), vecs = kTileKeys / N;
    static_assert(kTileKeys / int64_t(hn::MaxLanes(DF())) % kCV == 0);
    const T* next = kt + d * kTileKeys;
    const T* src[kTileKeys];
    int64_t col[kTileKeys];
    int64_t nv = 0, cut = -1;
    for (int64_t v = 0; v < vecs; ++v) {
      const int64_t o = sj + v * N;
      if (o + N <= kTileKeys)
        src[nv] = kt + o, col[nv++] = v * N;
      else if (o >= kTileKeys)
        src[nv] = next + (o - kTileKeys), col[nv++] = v * N;
      else
        cut = v;
    }
    const T* hi = nullptr;
    auto lo = hn::FirstN(df, 0);
    if (cut >= 0) {
      const int64_t o = sj + cut * N;
      src[nv] = kt + o, col[nv++] = cut * N;
      hi = next + (o - kTileKeys);  // lanes [kTileKeys - o, N): the next tile's first keys
      lo = hn::FirstN(df, size_t(kTileKeys - o));
    }
    for (int64_t g = 0; g < nv; g += kCV) {
      const bool blend = cut >= 0 && g + kCV >= nv;
      int64_t r0 = 0;
      for (; r0 < WideRows(npad); r0 += kRWide) {
        if (blend)
          ScoreStripShifted<kRWide, kCV, true>(q + r0 * d, d, src + g, hi, lo, col + g,
                                               s + r0 * kTileKeys);
        else
          ScoreStripShifted<kRWide, kCV, false>(q + r0 * d, d, src + g, hi, lo, col + g,
                                                s + r0 * kTileKeys);
      }
      for (; r0 < npad; r0 += kR) {
        if (blend)
          ScoreStripShifted<kR, kCV, true>(q + r0 * d, d, src + g, hi, lo, col + g,
                                           s + r0 * kTileKeys);
        else
          ScoreStripShifted<kR, kCV, false>(q + r0 * d, d, src + g, hi, lo, col + g,
                                            s + r0 * kTileKeys);
      }
    }
  }
  // The V rows of a shifted tile: V tiles also lie back to back, so they are one stretch.
  static const T* ShiftedV(const T* vt, int64_t sj, int64_t dp) { return vt + sj * dp; }

  // O's R rows x CV vectors from column c0 on, alpha O + P V, the V vector of key j at column
  // col from vvec(j, col): each entry summed over the keys in order, wherever V comes from.
  template <int R, int CV, class VVec>
  static HWY_INLINE void PVStripOf(const float* HWY_RESTRICT p, const VVec& vvec, int64_t dp,
                                   int64_t c0, const float* alpha, float* HWY_RESTRICT o) {
    const DF df;
    const int64_t N = int64_t(hn::Lanes(df));
    VF acc[R][CV];
    for (int r = 0; r < R; ++r) {
      const VF al = hn::Set(df, alpha[r]);
      for (int c = 0; c < CV; ++c) acc[r][c] = hn::Mul(al, hn::Load(df, o + r * dp + c0 + c * N));
    }
    for (int64_t j = 0; j < kTileKeys; ++j) {
      VF b[CV];
      for (int c = 0; c < CV; ++c) b[c] = vvec(j, c0 + c * N);
      for (int r = 0; r < R; ++r) {
        const VF a = hn::Set(df, p[r * kTileKeys + j]);
        for (int c = 0; c < CV; ++c) acc[r][c] = hn::MulAdd(a, b[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < CV; ++c) hn::Store(acc[r][c], df, o + r * dp + c0 + c * N);
  }

  // O[npad][dp] = alpha O + P V over the V vectors vvec gives (PVStripOf).
  template <class VVec>
  static HWY_INLINE void PVOf(const float* p, int64_t npad, const VVec& vvec, int64_t dp,
                              const float* alpha, float* o) {
    const int64_t N = int64_t(hn::Lanes(DF()));
    for (int64_t c0 = 0; c0 < dp; c0 += kCV * N) {
      const int64_t vecs = std::min<int64_t>(kCV, (dp - c0) / N);
      int64_t r0 = 0;
      if (vecs == kCV)
        for (; r0 < WideRows(npad); r0 += kRWide)
          PVStripOf<kRWide, kCV>(p + r0 * kTileKeys, vvec, dp, c0, alpha + r0, o + r0 * dp);
      for (; r0 < npad; r0 += kR) {
        const float* pr = p + r0 * kTileKeys;
        float* orow = o + r0 * dp;
        switch (vecs) {
          case kCV: PVStripOf<kR, kCV>(pr, vvec, dp, c0, alpha + r0, orow); break;
          default:
            for (int64_t c = 0; c < vecs; ++c)
              PVStripOf<kR, 1>(pr, vvec, dp, c0 + c * N, alpha + r0, orow);
        }
      }
    }
  }
  // O[npad][dp] = alpha O + P V over V tile vt.
  static HWY_NOINLINE void PV(const float* p, int64_t npad, const T* vt, int64_t dp,
                              const float* alpha, float* o) {
    const DF df;
    PVOf(
        p, npad, [&](int64_t j, int64_t col) { return hn::Load(df, vt + j * dp + col); }, dp, alpha,
        o);
  }
};

}  // namespace spattn::kernels::HWY_NAMESPACE

#endif  // include guard
