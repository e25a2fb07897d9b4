// Key tiles read in place from a cache stored in 16 bits (f16 / bf16), for decode's few rows.
//
// Under F32Ops a stored tile is widened into the thread's scratch and then scored and summed
// from there (flash_kv_widen-inl.h: WidenedTiles). Decode has one to eight rows (a kv head's
// q heads), so each K and V value is used by at most two micro-kernel strips: widening first
// writes and reads back 32 KiB of f32 for every 16 KiB the tile holds, in a burst between
// bursts of arithmetic. These micro-kernels instead convert each vector as the FMAs take it, straight
// from the cache. The values are the same (f16 and bf16 are exact in f32) and every entry is
// the same dot product summed in the same order as F32Ops::Scores / PV, so a tile read here
// gives the same bits as the tile widened.
//
// A GroupTile is 64 keys as four groups of 16, each wherever the cache holds it: K groups
// [d][16] (stored_k_index) and V rows [16][dp]. A whole tile is its four groups in order; a
// decode over chosen pages (Quest) takes the groups its ranges touch, four at a time, with no
// copy (flash_tile-inl.h: RunTile's group path).
//
// Included by flash-inl.h, inside its target namespace region (HWY_BEFORE_NAMESPACE).

#if defined(SPATTN_KERNELS_GROUP_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPATTN_KERNELS_GROUP_TILES_INL_H_
#undef SPATTN_KERNELS_GROUP_TILES_INL_H_
#else
#define SPATTN_KERNELS_GROUP_TILES_INL_H_
#endif

namespace spattn::kernels::HWY_NAMESPACE {

inline constexpr int64_t kGroupsPerTile = kTileKeys / kKeyGroup;
static_assert(kGroupsPerTile == 4);

// Up to this many rows (two strips of kR) read stored tiles in place; more rows would convert
// each K vector once per strip, and one widening into scratch then costs less (prefill).
inline constexpr int64_t kInPlaceRows = 2 * kR;

// Zeros standing in for the missing groups of a last, partial group tile: masked scores, and
// P = 0 times a zero V adds nothing. A K group is d x 16 and a V group 16 x dp values, d and
// dp at most kMaxHeadDim (init_packed).
alignas(64) inline constexpr uint16_t kZeroGroup[kMaxHeadDim * kKeyGroup] = {};

struct GroupTile {
  const uint16_t* k[kGroupsPerTile];  // K group [d][16]
  const uint16_t* v[kGroupsPerTile];  // V rows [16][dp]
};

// Tile t of head kvh as its four groups.
inline GroupTile TileGroups(const PackedKVData& kv, int64_t kvh, int64_t t) {
  GroupTile g;
  const auto* k = reinterpret_cast<const uint16_t*>(kv.k_bytes(kvh, t));
  const auto* v = reinterpret_cast<const uint16_t*>(kv.v_bytes(kvh, t));
  for (int64_t c = 0; c < kGroupsPerTile; ++c) {
    g.k[c] = k + c * kv.dim * kKeyGroup;
    g.v[c] = v + c * kKeyGroup * kv.dp;
  }
  return g;
}

// Decode's rows go in strips of kR = 4 where three or four are left, else of two or one. A row
// past n is padding, whose scores the step masks and whose output nothing reads, so the strips
// cover about n rows where F32Ops' cover npad (a multiple of 4): a kv head's two q heads
// (code-small-32k) compute two rows, not four, and four (the 1B shape) stay one strip, each K
// vector loaded once for them. Each entry is still one dot product (or P V sum) in F32Ops'
// order, whatever the blocking: the same bits.
//
// P V's strips of one or two rows are kGroupPVVectors wide, a whole 128-wide V row on AVX-512
// (2 x 8 vectors of accumulators): each V row is read once, front to back, where F32Ops'
// 4-vector strip passes over the tile twice, taking half of every row each time.
inline constexpr int kGroupPVVectors = 2 * kCV;

// Calls strip.template operator()<R>(r0) for the row strips of rows [0, n), as above.
template <class Strip>
HWY_INLINE void ForRowStrips(int64_t n, const Strip& strip) {
  for (int64_t r0 = 0; r0 < n;) {
    if (n - r0 >= 3)
      strip.template operator()<kR>(r0), r0 += kR;
    else if (n - r0 == 2)
      strip.template operator()<2>(r0), r0 += 2;
    else
      strip.template operator()<1>(r0), r0 += 1;
  }
}

// S[n][64] = Q K^T (unscaled) for rows [0, n) (strips as above): the K vector of dim k
// at key column col is g.k[col / 16] + k * 16 + col % 16 (a vector lies in one group).
template <KVType kT>
HWY_NOINLINE void GroupScores(const float* q, int64_t n, const GroupTile& g, int64_t d, float* s) {
  static_assert(kKeyGroup % hn::MaxLanes(DF()) == 0);
  static_assert(kTileKeys % (kCV * hn::MaxLanes(DF())) == 0);
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto kvec = [&](int64_t k, int64_t col) {
    return LoadStored<kT>(df, g.k[col / kKeyGroup] + k * kKeyGroup + col % kKeyGroup);
  };
  for (int64_t col0 = 0; col0 < kTileKeys; col0 += kCV * N)
    ForRowStrips(n, [&]<int R>(int64_t r0) {
      F32Ops::ScoreStripOf<R, kCV>(q + r0 * d, d, kvec, col0, s + r0 * kTileKeys);
    });
}

// O[n][dp] = alpha O + P V for rows [0, n) (strips as above): key j's V row is
// g.v[j / 16] + (j % 16) * dp.
template <KVType kT>
HWY_NOINLINE void GroupPV(const float* p, int64_t n, const GroupTile& g, int64_t dp,
                          const float* alpha, float* o) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto vvec = [&](int64_t j, int64_t col) {
    return LoadStored<kT>(df, g.v[j / kKeyGroup] + (j % kKeyGroup) * dp + col);
  };
  // Strips of R rows, kGroupPVVectors wide where they fit in the registers (R <= 2).
  ForRowStrips(n, [&]<int R>(int64_t r0) {
    const float* pr = p + r0 * kTileKeys;
    const float* al = alpha + r0;
    float* orow = o + r0 * dp;
    int64_t c0 = 0;
    if constexpr (R <= 2)
      for (; c0 + kGroupPVVectors * N <= dp; c0 += kGroupPVVectors * N)
        F32Ops::PVStripOf<R, kGroupPVVectors>(pr, vvec, dp, c0, al, orow);
    for (; c0 + kCV * N <= dp; c0 += kCV * N) F32Ops::PVStripOf<R, kCV>(pr, vvec, dp, c0, al, orow);
    for (; c0 < dp; c0 += N) F32Ops::PVStripOf<R, 1>(pr, vvec, dp, c0, al, orow);
  });
}

// The stored types' dispatch (one branch per tile); n: the item's rows (not padded). Only the
// types the table marks kKVInPlace come here (ReadsInPlace); the others are widened first.
inline void GroupScoresOf(KVType t, const float* q, int64_t n, const GroupTile& g, int64_t d,
                          float* s) {
  switch (t) {
    case KVType::f16: return GroupScores<KVType::f16>(q, n, g, d, s);
    case KVType::bf16: return GroupScores<KVType::bf16>(q, n, g, d, s);
    case KVType::f32:
    case KVType::q8_0: break;
  }
  SPATTN_CHECK(false, "internal: a ", kv_type_name(t), " cache tile is not read in place");
}
inline void GroupPVOf(KVType t, const float* p, int64_t n, const GroupTile& g, int64_t dp,
                      const float* alpha, float* o) {
  switch (t) {
    case KVType::f16: return GroupPV<KVType::f16>(p, n, g, dp, alpha, o);
    case KVType::bf16: return GroupPV<KVType::bf16>(p, n, g, dp, alpha, o);
    case KVType::f32:
    case KVType::q8_0: break;
  }
  SPATTN_CHECK(false, "internal: a ", kv_type_name(t), " cache tile is not read in place");
}

// The V a group tile's step sums (TileStep::Run calls GroupPVOf with it).
struct GroupV {
  const GroupTile* g;
  KVType type;
};

// Whether this call reads stored tiles in place: F32Ops over a cache whose K and V are both
// of types read in place (kKVInPlace: the 16-bit ones) and both stored (not v_is_k, whose
// values come transposed from K's widened tile), npad rows at most kInPlaceRows.
template <class Ops>
inline bool ReadsInPlace(const PackedKVData& kv, int64_t npad) {
  return std::is_same_v<typename Ops::T, float> && kv.ops == Operands::f32 &&
         traits(kv.k_type).takes(kKVInPlace) && traits(kv.v_type).takes(kKVInPlace) && !kv.v_is_k &&
         npad <= kInPlaceRows;
}

}  // namespace spattn::kernels::HWY_NAMESPACE

#endif  // include guard
