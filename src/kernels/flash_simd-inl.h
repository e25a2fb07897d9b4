// The flash loop's SIMD basics (flash-inl.h): the vector type, the micro-kernels' register
// blocking, exp2, and the element access and prefetching that packing and gathering share.
//
// Included by flash-inl.h (inside its HWY_BEFORE_NAMESPACE region), once per SIMD target:
// the include guard toggles with HWY_TARGET_TOGGLE, as Highway's foreach_target needs.

#if defined(SPATTN_KERNELS_FLASH_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPATTN_KERNELS_FLASH_SIMD_INL_H_
#undef SPATTN_KERNELS_FLASH_SIMD_INL_H_
#else
#define SPATTN_KERNELS_FLASH_SIMD_INL_H_
#endif

namespace spattn::kernels::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Register blocking of the micro-kernels: kR rows x kCV vectors of accumulators.
// Rows are padded to kR; the f32 micro-kernels take kRWide rows at a time while they can (6 x 4
// = 24 of the 32 AVX-512 registers: fewer K and V loads per FMA than 4 x 4), then kR.
#if HWY_TARGET == HWY_AVX3
inline constexpr int kR = 4, kCV = 4, kRWide = 6;
#else
inline constexpr int kR = 4, kCV = 2, kRWide = 4;
#endif
// Rows [0, WideRows(npad)) go in kRWide strips and the rest in kR strips: a multiple of both,
// so no strip reaches past npad (a multiple of kR).
inline int64_t WideRows(int64_t npad) {
  constexpr int64_t l = std::lcm(kR, kRWide);
  return npad / l * l;
}

// 2^x, Cephes exp2f polynomial on [-0.5, 0.5] (max relative error ~2e-7 over the range);
// exactly 0 for x < -126 (and -inf), so masked scores add nothing.
HWY_INLINE VF Exp2(DF df, VF x) {
  const hn::RebindToSigned<DF> di;
  const VF xc = hn::Max(x, hn::Set(df, -126.0f));
  const VF n = hn::Round(xc);
  const VF f = hn::Sub(xc, n);
  VF p = hn::Set(df, 1.535336188319500e-4f);
  p = hn::MulAdd(p, f, hn::Set(df, 1.339887440266574e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 9.618437357674640e-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 5.550332471162809e-2f));
  p = hn::MulAdd(p, f, hn::Set(df, 2.402264791363012e-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 6.931472028550421e-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 1.0f));
  const auto bits = hn::ShiftLeft<23>(hn::ConvertTo(di, n));
  const VF r = hn::BitCast(df, hn::Add(hn::BitCast(di, p), bits));
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(df, -126.0f)), r);
}

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Element access for packing (packing is O(L d); the loop is O(L^2 d)).
inline void LoadRowF32(const TensorView& t, int64_t h, int64_t s, int64_t d, float* dst) {
  if (t.stride_dim == 1) {
    const void* src = t.ptr(h, s);
    switch (t.dtype) {
      case DType::f32: std::memcpy(dst, src, size_t(d) * 4); return;
      case DType::bf16: {
        const uint16_t* p = static_cast<const uint16_t*>(src);
        for (int64_t c = 0; c < d; ++c) dst[c] = bf16_to_f32(p[c]);
        return;
      }
      case DType::f16: {
        const hn::Rebind<hwy::float16_t, DF> dh;
        const hwy::float16_t* p = static_cast<const hwy::float16_t*>(src);
        const DF df;
        const int64_t N = int64_t(hn::Lanes(df));
        int64_t c = 0;
        for (; c + N <= d; c += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, p + c)), df, dst + c);
        for (; c < d; ++c) dst[c] = f16_to_f32(static_cast<const uint16_t*>(src)[c]);
        return;
      }
    }
  }
  for (int64_t c = 0; c < d; ++c) dst[c] = t.get(h, s, c);
}

// Copies n (< a few vectors) 32-bit words: one row of a K tile's slots, for the many short
// copies of gathering (a memcpy call per row cost more than the copy).
template <typename W>
HWY_INLINE void CopyWords(const W* HWY_RESTRICT src, W* HWY_RESTRICT dst, int64_t n) {
  static_assert(sizeof(W) == 4);
  const hn::ScalableTag<W> dw;
  const int64_t N = int64_t(hn::Lanes(dw));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::LoadU(dw, src + i), dw, dst + i);
  if (i < n) {
    const auto m = hn::FirstN(dw, size_t(n - i));
    hn::BlendedStore(hn::MaskedLoad(m, dw, src + i), m, dw, dst + i);
  }
}

// Copies the words at slots sj[0, m) of each of `rows` rows of a K tile (kTileKeys words a row)
// into slots [dj, dj + m) of another: one tile's listed keys gathered row by row, so that each
// row's few lines are read and written once for all m keys. Key by key, every key writes a line
// of each row: at DeepSeek V3.2's 576-dim keys that was 94% of the gather, and the gather more
// than the scores and P V together.
template <typename W>
HWY_INLINE void CopyListedWords(const W* HWY_RESTRICT src, const int32_t* HWY_RESTRICT sj,
                                int64_t m, W* HWY_RESTRICT dst, int64_t dj, int64_t rows) {
  static_assert(sizeof(W) == 4);
  for (int64_t r = 0; r < rows; ++r) {
    const W* from = src + r * kTileKeys;
    W* to = dst + r * kTileKeys + dj;
    for (int64_t i = 0; i < m; ++i) to[i] = from[sj[i]];
  }
}

// Keys keys[0, count) of token-major rows (dim floats a key, key * dim < 2^31) into slots
// [0, count) of a K tile ([dim][kTileKeys]): a tile row at a time, its slots gathered a vector at
// a time, so that every store fills whole lines of the tile and the rows' lines are read in
// order. (Key by key, each key stores into dim lines of the tile: the same cost as copying it
// out of a packed tile.)
HWY_INLINE void KeyRowsToTile(const float* HWY_RESTRICT rows, const int64_t* keys, int64_t count,
                              int64_t dim, float* HWY_RESTRICT tile) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t N = int64_t(hn::Lanes(df));
  HWY_ALIGN int32_t off[kTileKeys];
  for (int64_t jj = 0; jj < count; ++jj) off[jj] = int32_t(keys[jj] * dim);
  const int64_t vectors = count / N * N;
  for (int64_t c = 0; c < dim; ++c) {
    const float* from = rows + c;
    float* to = tile + c * kTileKeys;
    int64_t jj = 0;
    for (; jj < vectors; jj += N)
      hn::StoreU(hn::GatherIndex(df, from, hn::LoadU(di, off + jj)), df, to + jj);
    for (; jj < count; ++jj) to[jj] = from[off[jj]];
  }
}

// Prefetches `rows` rows of `bytes` bytes each, `stride` bytes apart, from p: the slots of
// keys a gathered tile will copy next (their rows are scattered, so the hardware prefetcher
// does not see them coming).
inline void PrefetchRows(const void* p, int64_t rows, int64_t stride, int64_t bytes) {
  const char* b = static_cast<const char*>(p);
  for (int64_t r = 0; r < rows; ++r, b += stride) {
    for (int64_t o = 0; o < bytes; o += 64) hwy::Prefetch(b + o);
    hwy::Prefetch(b + bytes - 1);
  }
}

// Prefetches [p, p + bytes) into the L2 (prefetcht1, not the L1: a tile is 16 KiB stored as f16
// and is widened into scratch that the L1 has to hold). For the next tiles of a contiguous
// range of a cache stored as f16 / bf16 / q8_0: decode over such a cache is bound by memory,
// and the loop reads each tile in one burst (its widening) between bursts of arithmetic, which
// the hardware prefetcher does not cover (RunTile's plain range loop calls it).
inline void PrefetchL2(const void* p, int64_t bytes) {
  const char* b = static_cast<const char*>(p);
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(b + o, 0, 2);
}

}  // namespace spattn::kernels::HWY_NAMESPACE

#endif  // include guard
