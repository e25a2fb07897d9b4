// The KV widening (flash-inl.h): tiles of a PackedKVData stored as f16, bf16 or q8_0 (its
// k_type / v_type) read back as F32Ops' f32 layouts, whole or a few slots at a time, and the
// per-thread buffers that hold them (WidenedTiles).
//
// Included by flash-inl.h (inside its HWY_BEFORE_NAMESPACE region), once per SIMD target:
// the include guard toggles with HWY_TARGET_TOGGLE, as Highway's foreach_target needs.

#if defined(SPATTN_KERNELS_FLASH_KV_WIDEN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPATTN_KERNELS_FLASH_KV_WIDEN_INL_H_
#undef SPATTN_KERNELS_FLASH_KV_WIDEN_INL_H_
#else
#define SPATTN_KERNELS_FLASH_KV_WIDEN_INL_H_
#endif

namespace spattn::kernels::HWY_NAMESPACE {

// Stored K/V types (PackedKVData::k_type / v_type, kernels/packed_kv.hpp) under F32Ops: rows
// are rounded into their storage as they are packed, and tiles are widened back to F32Ops'
// layouts as the loop reads them (WidenedTiles), so the micro-kernels stay as they are and
// the values they see are exactly the stored ones (f16 / bf16 exact in f32; q8_0's q * d is
// exact too: 8-bit q times an 11-bit scale).

// Lanes(df) values stored as kT (f16 or bf16) at p, as f32 (exact: both are f32 with fewer
// bits): what the widening writes and what decode's in-place kernels read (group_tiles-inl.h).
template <KVType kT>
HWY_INLINE VF LoadStored(DF df, const uint16_t* HWY_RESTRICT p) {
  static_assert(traits(kT).value_bytes() == 2);
  if constexpr (traits(kT).widening == Widening::half) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  } else {  // Widening::upper_half, bf16: the upper half of an f32
    const hn::Rebind<uint16_t, DF> d16;
    const hn::RebindToUnsigned<DF> du;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
  }
}

// n (a multiple of the vector length) 2-byte values stored as kT widened to f32.
template <KVType kT>
inline void Widen16(const uint16_t* HWY_RESTRICT src, float* HWY_RESTRICT dst, int64_t n) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  for (int64_t i = 0; i < n; i += N) hn::Store(LoadStored<kT>(df, src + i), df, dst + i);
}

// N int8 values at q times the f32 scales s.
HWY_INLINE VF DequantQ8(DF df, const int8_t* HWY_RESTRICT q, VF s) {
  const hn::Rebind<int8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  return hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, q))), s);
}

// Slots [sj, sj + n) of a K tile into slots [dj, dj + n) of dst, F32Ops' layout [d][64]: the
// keys a gathered piece takes, widened without the rest of their tile. Each dimension's row
// widens whole vectors (q8_0) or whole 16-key groups (f16 / bf16) around the slots and keeps
// the slots. One function per stored type; WidenKeysK dispatches.
inline void WidenKeysKF32(const unsigned char* tile, int64_t sj, int64_t n, int64_t d,
                          float* HWY_RESTRICT dst, int64_t dj) {
  const float* f = reinterpret_cast<const float*>(tile);
  for (int64_t c = 0; c < d; ++c)
    std::memcpy(dst + c * kTileKeys + dj, f + c * kTileKeys + sj, size_t(n) * 4);
}

template <KVType kT>
inline void WidenKeysK16(const unsigned char* tile, int64_t sj, int64_t n, int64_t d,
                         float* HWY_RESTRICT dst, int64_t dj) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  alignas(64) float row[kTileKeys];
  static_assert(kKeyGroup % hn::MaxLanes(DF()) == 0);  // a group is whole vectors
  const uint16_t* h = reinterpret_cast<const uint16_t*>(tile);
  const int64_t g0 = sj / kKeyGroup, g1 = (sj + n + kKeyGroup - 1) / kKeyGroup;
  // In place when the slots are whole groups and land on whole vectors, else through a row.
  const bool direct = g0 * kKeyGroup == sj && g1 * kKeyGroup == sj + n && dj % N == 0;
  for (int64_t c = 0; c < d; ++c) {
    for (int64_t g = g0; g < g1; ++g)
      Widen16<kT>(h + stored_k_index(d, c, g * kKeyGroup),
                  direct ? dst + c * kTileKeys + dj + (g - g0) * kKeyGroup : row + g * kKeyGroup,
                  kKeyGroup);
    if (!direct) std::memcpy(dst + c * kTileKeys + dj, row + sj, size_t(n) * 4);
  }
}

inline void WidenKeysKQ8(const unsigned char* tile, int64_t sj, int64_t n, int64_t d,
                         float* HWY_RESTRICT dst, int64_t dj) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  alignas(64) float row[kTileKeys];
  const int64_t s0 = sj / N * N, s1 = (sj + n + N - 1) / N * N;
  // In place when the slots are whole vectors at the same offset, else through a row.
  const bool direct = s0 == sj && s1 == sj + n && dj % N == 0;
  const int8_t* q = reinterpret_cast<const int8_t*>(tile);
  const hwy::float16_t* sc = reinterpret_cast<const hwy::float16_t*>(tile + d * kTileKeys);
  const hn::Rebind<hwy::float16_t, DF> dh;
  for (int64_t c = 0; c < d; ++c) {
    float* out = direct ? dst + c * kTileKeys + dj : row + s0;
    for (int64_t j = s0; j < s1; j += N) {
      const VF s = hn::PromoteTo(df, hn::LoadU(dh, sc + (c / 32) * kTileKeys + j));
      hn::Store(DequantQ8(df, q + c * kTileKeys + j, s), df, out + (j - s0));
    }
    if (!direct) std::memcpy(dst + c * kTileKeys + dj, row + sj, size_t(n) * 4);
  }
}

// Slots [sj, sj + n) of K tile `tile` (stored as t) into slots [dj, dj + n) of dst.
inline void WidenKeysK(KVType t, const unsigned char* tile, int64_t sj, int64_t n, int64_t d,
                       float* HWY_RESTRICT dst, int64_t dj) {
  switch (t) {
    case KVType::f32: return WidenKeysKF32(tile, sj, n, d, dst, dj);
    case KVType::f16: return WidenKeysK16<KVType::f16>(tile, sj, n, d, dst, dj);
    case KVType::bf16: return WidenKeysK16<KVType::bf16>(tile, sj, n, d, dst, dj);
    case KVType::q8_0: return WidenKeysKQ8(tile, sj, n, d, dst, dj);
  }
}

// Slots sj[0, m) (ascending) of a K tile stored as 16-bit kT into slots [dj, dj + m) of dst,
// F32Ops' layout [d][64]: a gathered piece's few keys of a tile. Only the key groups holding a
// listed slot are read (a group is d rows of 16 stored values, contiguous), and each row's
// listed values are widened and compressed into place. Widening the tile whole for them wrote
// d x 64 floats (147 KB at DeepSeek's 576-dim latent) for each tile a decode step's list
// touched: at 8K deep on V3.2's attention the largest part of the gather.
template <KVType kT>
inline void WidenListedK16(const unsigned char* tile, const int32_t* HWY_RESTRICT sj, int64_t m,
                           int64_t d, float* HWY_RESTRICT dst, int64_t dj) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const int64_t N = int64_t(hn::Lanes(df));
  const uint16_t* h = reinterpret_cast<const uint16_t*>(tile);
  HWY_ALIGN int32_t listed[kKeyGroup];
  for (int64_t a = 0; a < m;) {
    const int64_t g = sj[a] / kKeyGroup;
    std::fill(listed, listed + kKeyGroup, 0);
    for (; a < m && sj[a] / kKeyGroup == g; ++a) listed[sj[a] % kKeyGroup] = 1;
    for (int64_t v0 = 0; v0 < kKeyGroup; v0 += N) {
      const auto keep = hn::RebindMask(df, hn::Ne(hn::Load(di, listed + v0), hn::Zero(di)));
      const int64_t n = int64_t(hn::CountTrue(df, keep));
      if (n == 0) continue;
      // Compressed in a register, then a masked store: AVX-512's compress to memory is
      // microcoded on AMD's Zen cores (Highway's CompressBlendedStore measured 1.6x slower
      // than this on Zen 5).
      const auto first = hn::FirstN(df, size_t(n));
      const uint16_t* from = h + stored_k_index(d, 0, g * kKeyGroup + v0);
      for (int64_t c = 0; c < d; ++c)
        hn::BlendedStore(hn::Compress(LoadStored<kT>(df, from + c * kKeyGroup), keep), first, df,
                         dst + c * kTileKeys + dj);
      dj += n;
    }
  }
}

// Slots sj[0, m) (ascending) of K tile `tile` (stored as t) into slots [dj, dj + m) of dst,
// without the rest of the tile where t is 16-bit (WidenListedK16). Returns false, leaving dst,
// for f32 (read in place) and q8_0 (a vector widened per slot and row costs what the tile does).
inline bool WidenListedK(KVType t, const unsigned char* tile, const int32_t* sj, int64_t m,
                         int64_t d, float* HWY_RESTRICT dst, int64_t dj) {
  switch (t) {
    case KVType::f16: return WidenListedK16<KVType::f16>(tile, sj, m, d, dst, dj), true;
    case KVType::bf16: return WidenListedK16<KVType::bf16>(tile, sj, m, d, dst, dj), true;
    case KVType::f32:
    case KVType::q8_0: break;
  }
  return false;
}

// Slots [sj, sj + n) of a q8_0 V tile into slots [dj, dj + n) of dst, F32Ops' layout [64][dp].
inline void WidenKeysVQ8(const unsigned char* tile, int64_t sj, int64_t n, int64_t dp,
                         float* HWY_RESTRICT dst, int64_t dj) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  static_assert(32 % hn::MaxLanes(DF()) == 0);  // a vector lies in one block of 32
  const int8_t* q = reinterpret_cast<const int8_t*>(tile);
  const uint16_t* sc = reinterpret_cast<const uint16_t*>(tile + kTileKeys * dp);
  for (int64_t j = sj; j < sj + n; ++j)
    for (int64_t c = 0; c < dp; c += N) {
      const VF s = hn::Set(df, f16_to_f32(sc[j * (dp / 32) + c / 32]));
      hn::Store(DequantQ8(df, q + j * dp + c, s), df, dst + (dj + j - sj) * dp + c);
    }
}

// Slots [sj, sj + n) of V tile `tile` (stored as t) into slots [dj, dj + n) of dst, F32Ops'
// layout [64][dp]: rows, so only those rows are read. dp is a multiple of 16: whole vectors.
inline void WidenKeysV(KVType t, const unsigned char* tile, int64_t sj, int64_t n, int64_t dp,
                       float* HWY_RESTRICT dst, int64_t dj) {
  const auto* h = reinterpret_cast<const uint16_t*>(tile) + sj * dp;
  switch (t) {
    case KVType::f32:
      std::memcpy(dst + dj * dp, reinterpret_cast<const float*>(tile) + sj * dp,
                  size_t(n * dp) * 4);
      return;
    case KVType::f16: return Widen16<KVType::f16>(h, dst + dj * dp, n * dp);
    case KVType::bf16: return Widen16<KVType::bf16>(h, dst + dj * dp, n * dp);
    case KVType::q8_0: return WidenKeysVQ8(tile, sj, n, dp, dst, dj);
  }
}

// Slots [sj, sj + n) of a V tile whose rows lie rs values apart (dp, or where V is K the dim
// unpadded: PackedKVData::v_row) into slots [dj, dj + n) of dst ([64][dp], dims rs.. dp zero).
inline void WidenStridedV(KVType t, const unsigned char* tile, int64_t sj, int64_t n, int64_t rs,
                          int64_t dp, float* HWY_RESTRICT dst, int64_t dj) {
  if (rs == dp) return WidenKeysV(t, tile, sj, n, dp, dst, dj);
  const int64_t N = int64_t(hn::Lanes(DF()));
  const int64_t whole = rs / N * N;
  for (int64_t j = 0; j < n; ++j) {
    float* out = dst + (dj + j) * dp;
    const auto* h = reinterpret_cast<const uint16_t*>(tile) + (sj + j) * rs;
    switch (t) {
      case KVType::f32:
        std::memcpy(out, reinterpret_cast<const float*>(tile) + (sj + j) * rs, size_t(rs) * 4);
        break;
      case KVType::f16:
        Widen16<KVType::f16>(h, out, whole);
        for (int64_t c = whole; c < rs; ++c) out[c] = f16_to_f32(h[c]);
        break;
      case KVType::bf16:
        Widen16<KVType::bf16>(h, out, whole);
        for (int64_t c = whole; c < rs; ++c) out[c] = bf16_to_f32(h[c]);
        break;
      case KVType::q8_0:  // d % 32 == 0: rows are never narrower than dp
        HWY_ASSERT(false);
    }
    std::fill(out + rs, out + dp, 0.0f);
  }
}

// Slots [sj, sj + n) of head kvh's V tile t, rows as kv stores them, into slots [dj, dj + n)
// of dst ([64][dp]).
inline void WidenKeysVOf(const PackedKVData& kv, int64_t kvh, int64_t t, int64_t sj, int64_t n,
                         float* HWY_RESTRICT dst, int64_t dj) {
  WidenStridedV(kv.v_type, kv.v_bytes(kvh, t), sj, n, kv.v_row(), kv.dp, dst, dj);
}

// Value rows as key columns: where V is K (PackedKVData::v_is_k) a key is stored once, as its
// value row (V's layout, rows v_row() apart), and a K tile of the Scores micro-kernel's layout
// ([d][64]) is transposed from the rows where a path needs one (ScoresOverRows below does not).
// On AVX2 and up 8 x 8 blocks transposed in registers (unpack within 128-bit blocks, then
// 64-bit pairs, then the halves: the usual AVX sequence, through 256-bit vectors on every x86
// target); a scalar transpose of DeepSeek's 576-dim tile cost about what
// its P.V product does. Other targets and the last n % 8 keys: element by element.

// f32 rows rows[0, n) (dims [0, d)) as columns [dj, dj + n) of k ([d][ld]: a K tile's [d][64]
// by default).
inline void RowsToColumns(const float* const* HWY_RESTRICT rows, int64_t n, int64_t d,
                          float* HWY_RESTRICT k, int64_t dj, int64_t ld = kTileKeys) {
  int64_t j0 = 0;
  const int64_t whole = d / 8 * 8;  // dims in whole blocks of 8
#if HWY_TARGET <= HWY_AVX2
  const hn::FixedTag<float, 8> d8;
  const hn::FixedTag<double, 4> dd;
  using V8 = hn::Vec<decltype(d8)>;
  for (; j0 + 8 <= n; j0 += 8)
    for (int64_t c0 = 0; c0 < whole; c0 += 8) {
      V8 r[8], t[8], u[8];
      for (int i = 0; i < 8; ++i) r[i] = hn::LoadU(d8, rows[j0 + i] + c0);
      for (int i = 0; i < 8; i += 2) {
        t[i] = hn::InterleaveLower(d8, r[i], r[i + 1]);
        t[i + 1] = hn::InterleaveUpper(d8, r[i], r[i + 1]);
      }
      for (int i = 0; i < 8; i += 4)
        for (int h = 0; h < 2; ++h) {
          const auto a = hn::BitCast(dd, t[i + h]), b = hn::BitCast(dd, t[i + h + 2]);
          u[i + 2 * h] = hn::BitCast(d8, hn::InterleaveLower(dd, a, b));
          u[i + 2 * h + 1] = hn::BitCast(d8, hn::InterleaveUpper(dd, a, b));
        }
      // u[q] holds dims c0 + q of keys j0..j0+3 in its lower 128 bits and dims c0 + 4 + q of
      // them in its upper; u[4 + q] the same dims of keys j0+4..j0+7. A dim's row of 8 keys
      // joins the two halves.
      float* out = k + c0 * ld + dj + j0;
      for (int q = 0; q < 4; ++q) {
        hn::StoreU(hn::ConcatLowerLower(d8, u[4 + q], u[q]), d8, out + q * ld);
        hn::StoreU(hn::ConcatUpperUpper(d8, u[4 + q], u[q]), d8, out + (4 + q) * ld);
      }
    }
#endif
  // The keys past the last 8 (every key below AVX2), and the dims past the last 8.
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = j < j0 ? whole : 0; c < d; ++c) k[c * ld + dj + j] = rows[j][c];
}

// Scores over a K tile held as rows (where V is K: its value rows, widened once for both
// products) without transposing the tile: S^T = K Q^T, each key's value broadcast against
// vectors of Q^T's rows, then S^T's 64 x npad block transposed into S (a ninth of the tile at
// 576 dims and 64 rows). Each entry is the same dot product, summed over the dims in the same order
// from zero with one FMA a dim, as F32Ops::Scores takes it over [d][64] columns: the same bits.
// Transposing the tile instead (ColumnsFromRows) cost the latent's dense decode at 32K about
// a seventh of its time.

// Lanes of Q^T's rows: npad rounded to whole vectors.
inline int64_t RowsOfQT(int64_t npad) { return RoundUp(npad, int64_t(hn::Lanes(DF()))); }

// qt [d][RowsOfQT(npad)] = Q^T of q [npad][d] (rows past npad zero).
inline void TransposeQ(const float* HWY_RESTRICT q, int64_t npad, int64_t d,
                       float* HWY_RESTRICT qt) {
  const int64_t ld = RowsOfQT(npad);
  const float* rows[kMaxTileRows + kR];
  for (int64_t r = 0; r < npad; ++r) rows[r] = q + r * d;
  RowsToColumns(rows, npad, d, qt, 0, ld);
  if (ld > npad)
    for (int64_t c = 0; c < d; ++c) std::fill(qt + c * ld + npad, qt + (c + 1) * ld, 0.0f);
}

// st's keys [j0, j0 + JK) x row vectors [v0, v0 + RV): JK x RV accumulators.
template <int JK, int RV>
HWY_INLINE void RowScoreStrip(const float* HWY_RESTRICT qt, int64_t ld,
                              const float* HWY_RESTRICT krows, int64_t rs, int64_t d,
                              float* HWY_RESTRICT st) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  VF acc[JK][RV];
  for (int j = 0; j < JK; ++j)
    for (int v = 0; v < RV; ++v) acc[j][v] = hn::Zero(df);
  for (int64_t c = 0; c < d; ++c) {
    VF b[RV];
    for (int v = 0; v < RV; ++v) b[v] = hn::Load(df, qt + c * ld + v * N);
    for (int j = 0; j < JK; ++j) {
      const VF a = hn::Set(df, krows[j * rs + c]);
      for (int v = 0; v < RV; ++v) acc[j][v] = hn::MulAdd(a, b[v], acc[j][v]);
    }
  }
  for (int j = 0; j < JK; ++j)
    for (int v = 0; v < RV; ++v) hn::Store(acc[j][v], df, st + j * ld + v * N);
}

// S [npad][64] = Q K^T (unscaled) for K as 64 rows rs apart, from qt (TransposeQ); st: scratch
// of 64 x RowsOfQT(npad) floats.
HWY_NOINLINE inline void ScoresOverRows(const float* HWY_RESTRICT qt, int64_t npad,
                                        const float* HWY_RESTRICT krows, int64_t rs, int64_t d,
                                        float* HWY_RESTRICT st, float* HWY_RESTRICT s) {
  constexpr int kJK = 4;
  constexpr int kRV = hn::MaxLanes(DF()) >= 16 ? 4 : 2;  // 16 accumulators of 32 registers, or 8
  const int64_t N = int64_t(hn::Lanes(DF())), ld = RowsOfQT(npad), vecs = ld / N;
  for (int64_t j0 = 0; j0 < kTileKeys; j0 += kJK)
    for (int64_t v0 = 0; v0 < vecs; v0 += kRV) {
      const float* q = qt + v0 * N;
      const float* k = krows + j0 * rs;
      float* out = st + j0 * ld + v0 * N;
      switch (std::min<int64_t>(kRV, vecs - v0)) {
        case 1: RowScoreStrip<kJK, 1>(q, ld, k, rs, d, out); break;
        case 2: RowScoreStrip<kJK, 2>(q, ld, k, rs, d, out); break;
        case 3: RowScoreStrip<kJK, 3>(q, ld, k, rs, d, out); break;
        default: RowScoreStrip<kJK, kRV>(q, ld, k, rs, d, out); break;
      }
    }
  const float* rows[kTileKeys];
  for (int64_t j = 0; j < kTileKeys; ++j) rows[j] = st + j * ld;
  RowsToColumns(rows, kTileKeys, npad, s, 0);
}

// Slots slots[0, n) of a tile of value rows stored as t (rs values apart) as columns
// [dj, dj + n) of dst ([d][64]): f32 rows transposed in place, others widened 8 rows at a time
// first.
inline void ColumnsFromRows(KVType t, const unsigned char* tile, const int32_t* slots, int64_t n,
                            int64_t d, int64_t rs, int64_t dp, float* HWY_RESTRICT dst,
                            int64_t dj) {
  HWY_ALIGN float buf[8 * kMaxHeadDim];
  const float* rows[8];
  for (int64_t j0 = 0; j0 < n; j0 += 8) {
    const int64_t m = std::min<int64_t>(8, n - j0);
    for (int64_t i = 0; i < m; ++i) {
      if (t == KVType::f32) {
        rows[i] = reinterpret_cast<const float*>(tile) + slots[j0 + i] * rs;
      } else {
        WidenStridedV(t, tile, slots[j0 + i], 1, rs, dp, buf, i);
        rows[i] = buf + i * dp;
      }
    }
    RowsToColumns(rows, m, d, dst, dj + j0);
  }
}

// Slots [sj, sj + n) of K tile t of head kvh, in either layout (rows where V is K), into slots
// [dj, dj + n) of dst ([d][64]).
inline void WidenKeysKOf(const PackedKVData& kv, int64_t kvh, int64_t t, int64_t sj, int64_t n,
                         float* HWY_RESTRICT dst, int64_t dj) {
  if (!kv.v_is_k) return WidenKeysK(kv.k_type, kv.k_bytes(kvh, t), sj, n, kv.dim, dst, dj);
  int32_t slots[kTileKeys];
  std::iota(slots, slots + n, int32_t(sj));
  ColumnsFromRows(kv.k_type, kv.k_bytes(kvh, t), slots, n, kv.dim, kv.v_row(), kv.dp, dst, dj);
}

// K tile t of head kvh whole, in either layout, into dst ([d][64]).
inline void WidenTileK(const PackedKVData& kv, int64_t kvh, int64_t t, float* HWY_RESTRICT dst) {
  WidenKeysKOf(kv, kvh, t, 0, kTileKeys, dst, 0);
}

// Listed slots sj[0, m) (ascending) of K tile t of head kvh into slots [dj, dj + m) of dst,
// without the rest of the tile: rows where V is K, 16-bit key groups (WidenListedK). False,
// leaving dst, where neither applies.
inline bool WidenListedKOf(const PackedKVData& kv, int64_t kvh, int64_t t, const int32_t* sj,
                           int64_t m, float* HWY_RESTRICT dst, int64_t dj) {
  if (!kv.v_is_k) return WidenListedK(kv.k_type, kv.k_bytes(kvh, t), sj, m, kv.dim, dst, dj);
  ColumnsFromRows(kv.k_type, kv.k_bytes(kvh, t), sj, m, kv.dim, kv.v_row(), kv.dp, dst, dj);
  return true;
}

// The loop's f32 view of a PackedKVData whose tiles are stored in other types: one tile of a
// head's K, and one of its V, widened into per-thread buffers. A tile is widened once per
// visit run: consecutive reads of the same tile reuse it. Tiles stored as f32 are read in
// place, but for K where V is K (its tile holds rows: ColumnsFromRows). Where V is K, also
// the buffers of ScoresOverRows: Q^T of the item's rows and the scores' transpose.
struct WidenedTiles {
  std::unique_ptr<float[], void (*)(float*)> buf{nullptr, [](float* p) { aligned_free(p); }};
  float *k = nullptr, *v = nullptr;
  float *qt = nullptr, *st = nullptr;          // where V is K
  int64_t kh = -1, kt = -1, vh = -1, vt = -1;  // the tiles k and v hold

  void init(const PackedKVData& kv) {
    if (!kv.widened()) return;
    const int64_t rows = kv.v_is_k ? RowsOfQT(kMaxTileRows) : 0;
    buf.reset(static_cast<float*>(
        aligned_alloc_bytes(size_t(kv.k_elems + kv.v_elems + rows * (kv.dim + kTileKeys)) * 4)));
    k = buf.get();
    v = k + kv.k_elems;
    if (kv.v_is_k) qt = v + kv.v_elems, st = qt + rows * kv.dim;
  }
  // Tile t of head kvh, as f32 in F32Ops' layout.
  const float* K(const PackedKVData& kv, int64_t kvh, int64_t t) {
    if (kv.k_type == KVType::f32 && !kv.v_is_k) return kv.k_tile<float>(kvh, t);
    if (kh != kvh || kt != t) kh = kvh, kt = t, WidenTileK(kv, kvh, t, k);
    return k;
  }
  const float* V(const PackedKVData& kv, int64_t kvh, int64_t t) {
    if (kv.v_type == KVType::f32 && kv.v_row() == kv.dp) return kv.v_tile<float>(kvh, t);
    if (vh != kvh || vt != t) vh = kvh, vt = t, WidenKeysVOf(kv, kvh, t, 0, kTileKeys, v, 0);
    return v;
  }
  // Keys [a, a + 64) of head kvh, a off the grid (the end of tile a / 64, the start of the
  // next), widened as one tile of their own: half the work of widening both tiles whole.
  const float* KRun(const PackedKVData& kv, int64_t kvh, int64_t a) {
    const int64_t t = a / kTileKeys, sj = a % kTileKeys;
    kh = -1;  // the buffer no longer holds whole tiles
    WidenKeysKOf(kv, kvh, t, sj, kTileKeys - sj, k, 0);
    WidenKeysKOf(kv, kvh, t + 1, 0, sj, k, kTileKeys - sj);
    return k;
  }
  const float* VRun(const PackedKVData& kv, int64_t kvh, int64_t a) {
    const int64_t t = a / kTileKeys, sj = a % kTileKeys;
    vh = -1;
    WidenKeysVOf(kv, kvh, t, sj, kTileKeys - sj, v, 0);
    WidenKeysVOf(kv, kvh, t + 1, 0, sj, v, kTileKeys - sj);
    return v;
  }
};

}  // namespace spattn::kernels::HWY_NAMESPACE

#endif  // include guard
