// Packing (flash-inl.h): rows of k and v into a PackedKVData's tiles in its operand format,
// rounded into a stored type where it has one, and a q head's single columns into tiles of
// their own (HeadColumns).
//
// Included by flash-inl.h (inside its HWY_BEFORE_NAMESPACE region), once per SIMD target:
// the include guard toggles with HWY_TARGET_TOGGLE, as Highway's foreach_target needs.

#if defined(SPATTN_KERNELS_FLASH_PACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPATTN_KERNELS_FLASH_PACK_INL_H_
#undef SPATTN_KERNELS_FLASH_PACK_INL_H_
#else
#define SPATTN_KERNELS_FLASH_PACK_INL_H_
#endif

namespace spattn::kernels::HWY_NAMESPACE {

// ---------------------------------------------------------------------------------------
// x rounded to the bits of kT, a 16-bit stored type (f16 or bf16).
template <KVType kT>
inline uint16_t RoundStored(float x) {
  static_assert(traits(kT).value_bytes() == 2);
  if constexpr (traits(kT).widening == Widening::half)
    return f32_to_f16(x);
  else
    return f32_to_bf16(x);  // Widening::upper_half
}

// Slot jj of a K tile stored in 16 bits (groups of 16 keys, stored_k_index) from an f32 row.
template <KVType kT>
inline void StoreKeyK16(unsigned char* tile, int64_t jj, const float* row, int64_t d) {
  uint16_t* h = reinterpret_cast<uint16_t*>(tile);
  for (int64_t c = 0; c < d; ++c) h[stored_k_index(d, c, jj)] = RoundStored<kT>(row[c]);
}

// Slot jj of a K tile stored as t (f32 and q8_0 [d][64], q8_0 scales [d/32][64] after the
// values; f16 / bf16 in groups of 16 keys, stored_k_index) from an f32 row.
inline void StoreKeyK(KVType t, unsigned char* tile, int64_t jj, const float* row, int64_t d) {
  switch (t) {
    case KVType::f32: {
      float* f = reinterpret_cast<float*>(tile);
      for (int64_t c = 0; c < d; ++c) f[c * kTileKeys + jj] = row[c];
      return;
    }
    case KVType::f16: return StoreKeyK16<KVType::f16>(tile, jj, row, d);
    case KVType::bf16: return StoreKeyK16<KVType::bf16>(tile, jj, row, d);
    case KVType::q8_0: {
      int8_t qs[kMaxHeadDim];
      uint16_t sc[kMaxHeadDim / 32];
      kv_quantize_q8_0(row, d, qs, sc);
      int8_t* q = reinterpret_cast<int8_t*>(tile);
      uint16_t* scales = reinterpret_cast<uint16_t*>(tile + d * kTileKeys);
      for (int64_t c = 0; c < d; ++c) q[c * kTileKeys + jj] = qs[c];
      for (int64_t b = 0; b < d / 32; ++b) scales[b * kTileKeys + jj] = sc[b];
      return;
    }
  }
}

// Slot jj of a V tile stored in 16 bits ([64][dp]), its padding [d, dp) zero.
template <KVType kT>
inline void StoreKeyV16(unsigned char* tile, int64_t jj, const float* row, int64_t d, int64_t dp) {
  uint16_t* h = reinterpret_cast<uint16_t*>(tile) + jj * dp;
  for (int64_t c = 0; c < d; ++c) h[c] = RoundStored<kT>(row[c]);
  std::fill(h + d, h + dp, uint16_t(0));
}

// Slot jj of a V tile stored as t ([64][dp], q8_0 scales [64][dp/32] after the values), its
// padding [d, dp) zero.
inline void StoreKeyV(KVType t, unsigned char* tile, int64_t jj, const float* row, int64_t d,
                      int64_t dp) {
  switch (t) {
    case KVType::f32: {
      float* f = reinterpret_cast<float*>(tile) + jj * dp;
      std::copy_n(row, d, f);
      std::fill(f + d, f + dp, 0.0f);
      return;
    }
    case KVType::f16: return StoreKeyV16<KVType::f16>(tile, jj, row, d, dp);
    case KVType::bf16: return StoreKeyV16<KVType::bf16>(tile, jj, row, d, dp);
    case KVType::q8_0:  // d % 32 == 0, so dp == d
      kv_quantize_q8_0(row, d, reinterpret_cast<int8_t*>(tile) + jj * dp,
                       reinterpret_cast<uint16_t*>(tile + kTileKeys * dp) + jj * (dp / 32));
      return;
  }
}

// Packing into a PackedKVData (kernels/packed_kv.hpp): rows src_rows[i] of k, v (or rows
// 0.. when null) become packed keys first, first + 1, ... Items are (kv head, tile), so each
// tile is written by one thread; slots outside the range keep their bytes.
template <class Ops>
void PackRange(PackedKVData& kv, const TensorView& k, const TensorView& v, const int64_t* src_rows,
               int64_t first, int64_t n, int threads) {
  using T = typename Ops::T;
  if (n <= 0) return;
  const int64_t t0 = first / kTileKeys, t1 = (first + n - 1) / kTileKeys + 1;
  parallel_for(kv.kv_heads * (t1 - t0), threads, [&](int64_t item, int) {
    alignas(64) float row_buf[kMaxHeadDim];  // a row of d floats, or of dp 16-bit values
    const int64_t h = item / (t1 - t0), t = t0 + item % (t1 - t0);
    const int64_t a = std::max(first, t * kTileKeys), b = std::min(first + n, (t + 1) * kTileKeys);
    T* kt = kv.k_tile<T>(h, t);
    T* vt = kv.v_tile<T>(h, t);
    for (int64_t i = a; i < b; ++i) {
      const int64_t src = src_rows ? src_rows[i - first] : i - first;
      Ops::PackKeyK(k, h, src, i - t * kTileKeys, kv.dim, kt, row_buf);
      Ops::PackKeyV(v, h, src, i - t * kTileKeys, kv.dim, kv.dp, vt, row_buf);
    }
  });
}

// PackRange for tiles stored in other types (k_type / v_type): each row rounded into them.
inline void PackRangeStored(PackedKVData& kv, const TensorView& k, const TensorView& v,
                            const int64_t* src_rows, int64_t first, int64_t n, int threads) {
  if (n <= 0) return;
  const int64_t t0 = first / kTileKeys, t1 = (first + n - 1) / kTileKeys + 1;
  parallel_for(kv.kv_heads * (t1 - t0), threads, [&](int64_t item, int) {
    alignas(64) float row[kMaxHeadDim];
    const int64_t h = item / (t1 - t0), t = t0 + item % (t1 - t0);
    const int64_t a = std::max(first, t * kTileKeys), b = std::min(first + n, (t + 1) * kTileKeys);
    for (int64_t i = a; i < b; ++i) {
      const int64_t src = src_rows ? src_rows[i - first] : i - first;
      LoadRowF32(k, h, src, kv.dim, row);
      // Where V is K the key is stored once, as its value row (PackedKVData::v_is_k).
      if (!kv.v_is_k) {
        StoreKeyK(kv.k_type, kv.k_bytes(h, t), i - t * kTileKeys, row, kv.dim);
        LoadRowF32(v, h, src, kv.dim, row);
      }
      StoreKeyV(kv.v_type, kv.v_bytes(h, t), i - t * kTileKeys, row, kv.dim, kv.v_row());
    }
  });
}

// The operand format this target uses for inputs of `dtype`: bf16 pairs when the caller asks
// for the dot-product path (AttnOptions::bf16_dot) and it can run here.
inline Operands OperandsHere(DType dtype, bool bf16_dot) {
#if HWY_TARGET == HWY_AVX3
  if (dtype == DType::bf16 && bf16_dot && bf16_dot_supported()) return Operands::bf16_dot;
#endif
  return Operands::f32;
}

// Writes rows src_rows[0..n) (or all rows of k when null) of k, v into slots first.. of kv,
// with their formats' packer. Positions and size are the caller's to record afterwards.
inline void PackAppend(PackedKVData& kv, const TensorView& k, const TensorView& v,
                       const int64_t* src_rows, int64_t first, int64_t n, int threads) {
#if HWY_TARGET == HWY_AVX3
  if (kv.ops == Operands::bf16_dot) {
    PackRange<Bf16DotOps>(kv, k, v, src_rows, first, n, threads);
    return;
  }
#endif
  SPATTN_CHECK(kv.ops == Operands::f32,
               "this K/V was packed for bf16 dot products, which the SIMD target now running "
               "lacks");
  if (kv.widened()) {
    PackRangeStored(kv, k, v, src_rows, first, n, threads);
    return;
  }
  PackRange<F32Ops>(kv, k, v, src_rows, first, n, threads);
}

// Packs all of k, v (natural order) into a fresh kv.
inline void PackInto(PackedKVData& kv, Operands ops, const TensorView& k, const TensorView& v,
                     int threads) {
  // Every slot but the last tile's tail is written below: only that tail needs zeroing.
  init_packed(kv, ops, k.dtype, k.heads, k.dim, k.seq, /*zero_all=*/false);
  PackAppend(kv, k, v, nullptr, 0, k.seq, threads);
  add_positions(kv, nullptr, k.seq);
}

// One q head's columns (kPackedColumns), packed once per call: `keys` are packed indices of
// the main K/V (sorted, unique), `kv` holds their K and V tiles (one head) copied bit for bit
// from the main tiles, with the keys' original positions.
struct HeadColumns {
  std::vector<int64_t> keys;
  PackedKVData kv;
};

// Packs every q head's head_columns() into tiles of its own, copying slots of the main packed
// tiles (so the values are the same bits as the keys' own tiles), heads in parallel.
template <class Ops, class Policy>
std::vector<HeadColumns> PackHeadColumns(const Problem& p, const Policy& pol,
                                         const PackedKVData& main) {
  using T = typename Ops::T;
  std::vector<HeadColumns> out(static_cast<size_t>(p.q.heads));
  parallel_for(p.q.heads, p.threads, [&](int64_t h, int) {
    HeadColumns& c = out[size_t(h)];
    pol.head_columns(p, h, c.keys);
    std::sort(c.keys.begin(), c.keys.end());
    c.keys.erase(std::unique(c.keys.begin(), c.keys.end()), c.keys.end());
    c.keys.erase(std::remove_if(c.keys.begin(), c.keys.end(),
                                [&](int64_t j) { return j < 0 || j >= main.size; }),
                 c.keys.end());
    const int64_t n = int64_t(c.keys.size());
    if (n == 0) return;
    init_packed(c.kv, main.ops, main.dtype, 1, main.dim, n);
    std::vector<int64_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = main.positions[size_t(c.keys[size_t(i)])];
    add_positions(c.kv, pos.data(), n);
    const int64_t kvh = h / p.group;
    // Stored types are widened (the column tiles hold f32): the same values as the loop reads.
    WidenedTiles win;
    win.init(main);
    const auto k_of = [&](int64_t jt) -> const T* {
      if constexpr (std::is_same_v<T, float>) return win.K(main, kvh, jt);
      return main.k_tile<T>(kvh, jt);
    };
    const auto v_of = [&](int64_t jt) -> const T* {
      if constexpr (std::is_same_v<T, float>) return win.V(main, kvh, jt);
      return main.v_tile<T>(kvh, jt);
    };
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = c.keys[size_t(i)], jt = j / kTileKeys, sj = j % kTileKeys;
      T* kt = c.kv.k_tile<T>(0, i / kTileKeys);
      T* vt = c.kv.v_tile<T>(0, i / kTileKeys);
      Ops::CopyKeyK(k_of(jt), sj, kt, i % kTileKeys, main.dim);
      Ops::CopyKeyV(v_of(jt), sj, vt, i % kTileKeys, main.dp);
    }
  });
  return out;
}

}  // namespace spattn::kernels::HWY_NAMESPACE

#endif  // include guard
