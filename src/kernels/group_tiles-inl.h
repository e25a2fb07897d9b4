// Key tiles read in place from a cache stored in 16 bits (f16 / bf16), for decode's few rows.
//
// Under F32Ops a stored tile is widened into the thread's scratch and then scored and summed
// from there (flash-inl.h: WidenedTiles). Decode has one to eight rows (a kv head's q heads),
// so each K and V value is used by at most two micro-kernel strips: widening first writes and
// reads back 32 KiB of f32 for every 16 KiB the tile holds, in a burst between bursts of
// arithmetic. These micro-kernels instead convert each vector as the FMAs take it, straight
// from the cache. The values are the same (f16 and bf16 are exact in f32) and every entry is
// the same dot product summed in the same order as F32Ops::Scores / PV, so a tile read here
// gives the same bits as the tile widened.
//
// A GroupTile is 64 keys as four groups of 16, each wherever the cache holds it: K groups
// [d][16] (stored_k_index) and V rows [16][dp]. A whole tile is its four groups in order; a
// decode over chosen pages (Quest) takes the groups its ranges touch, four at a time, with no
// copy (flash-inl.h: RunTile's group path).
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
// dp at most 256 (init_packed).
alignas(64) inline constexpr uint16_t kZeroGroup[256 * kKeyGroup] = {};

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

// S[npad][64] = Q K^T (unscaled), F32Ops' strips over the groups: the K vector of dim k at key
// column col is g.k[col / 16] + k * 16 + col % 16 (a vector lies in one group).
template <KVType kT>
HWY_NOINLINE void GroupScores(const float* q, int64_t npad, const GroupTile& g, int64_t d,
                              float* s) {
  static_assert(kKeyGroup % hn::MaxLanes(DF()) == 0);
  const DF df;
  F32Ops::ScoresOf(q, npad, d, [&](int64_t k, int64_t col) {
    return LoadStored<kT>(df, g.k[col / kKeyGroup] + k * kKeyGroup + col % kKeyGroup);
  }, s);
}

// O[npad][dp] = alpha O + P V, F32Ops' strips over the groups: key j's V row is
// g.v[j / 16] + (j % 16) * dp.
template <KVType kT>
HWY_NOINLINE void GroupPV(const float* p, int64_t npad, const GroupTile& g, int64_t dp,
                          const float* alpha, float* o) {
  const DF df;
  F32Ops::PVOf(p, npad, [&](int64_t j, int64_t col) {
    return LoadStored<kT>(df, g.v[j / kKeyGroup] + (j % kKeyGroup) * dp + col);
  }, dp, alpha, o);
}

// The stored types' dispatch (one branch per tile).
inline void GroupScoresOf(KVType t, const float* q, int64_t npad, const GroupTile& g, int64_t d,
                          float* s) {
  if (t == KVType::f16) GroupScores<KVType::f16>(q, npad, g, d, s);
  else GroupScores<KVType::bf16>(q, npad, g, d, s);
}
inline void GroupPVOf(KVType t, const float* p, int64_t npad, const GroupTile& g, int64_t dp,
                      const float* alpha, float* o) {
  if (t == KVType::f16) GroupPV<KVType::f16>(p, npad, g, dp, alpha, o);
  else GroupPV<KVType::bf16>(p, npad, g, dp, alpha, o);
}

// The V a group tile's step sums (TileStep::Run calls GroupPVOf with it).
struct GroupV {
  const GroupTile* g;
  KVType type;
};

// Whether this call reads stored tiles in place: F32Ops over a cache whose K and V are both
// stored in 16 bits, npad rows at most kInPlaceRows.
template <class Ops>
inline bool ReadsInPlace(const PackedKVData& kv, int64_t npad) {
  const auto half = [](KVType t) { return t == KVType::f16 || t == KVType::bf16; };
  return std::is_same_v<typename Ops::T, float> && kv.ops == Operands::f32 && half(kv.k_type) &&
         half(kv.v_type) && npad <= kInPlaceRows;
}

}  // namespace spattn::kernels::HWY_NAMESPACE

#endif  // include guard
