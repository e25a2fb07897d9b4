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

// Lanes(df) stored values at p as f32: exactly Widen16's values.
template <KVType kT>
HWY_INLINE VF LoadStored(DF df, const uint16_t* HWY_RESTRICT p) {
  static_assert(kT == KVType::f16 || kT == KVType::bf16);
  if constexpr (kT == KVType::f16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  } else {  // bf16: the upper half of an f32
    const hn::Rebind<uint16_t, DF> d16;
    const hn::RebindToUnsigned<DF> du;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
  }
}

// F32Ops::ScoreStrip with K vector c at kc[c] + k * 16 (a group's dim-k row).
template <KVType kT, int R, int CV>
HWY_INLINE void GroupScoreStrip(const float* HWY_RESTRICT q, int64_t d, const uint16_t* const* kc,
                                int64_t col0, float* HWY_RESTRICT s) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  VF acc[R][CV];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CV; ++c) acc[r][c] = hn::Zero(df);
  for (int64_t k = 0; k < d; ++k) {
    VF b[CV];
    for (int c = 0; c < CV; ++c) b[c] = LoadStored<kT>(df, kc[c] + k * kKeyGroup);
    for (int r = 0; r < R; ++r) {
      const VF a = hn::Set(df, q[r * d + k]);
      for (int c = 0; c < CV; ++c) acc[r][c] = hn::MulAdd(a, b[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CV; ++c) hn::Store(acc[r][c], df, s + r * kTileKeys + col0 + c * N);
}

// S[npad][64] = Q K^T (unscaled), as F32Ops::Scores over the tile widened.
template <KVType kT>
HWY_NOINLINE void GroupScores(const float* q, int64_t npad, const GroupTile& g, int64_t d,
                              float* s) {
  const int64_t N = int64_t(hn::Lanes(DF()));
  static_assert(kKeyGroup % hn::MaxLanes(DF()) == 0);  // a vector lies in one group
  for (int64_t col0 = 0; col0 < kTileKeys; col0 += kCV * N) {
    const int64_t vecs = std::min<int64_t>(kCV, (kTileKeys - col0) / N);
    const uint16_t* kc[kCV];
    for (int64_t c = 0; c < vecs; ++c) {
      const int64_t j = col0 + c * N;
      kc[c] = g.k[j / kKeyGroup] + j % kKeyGroup;
    }
    int64_t r0 = 0;
    if (vecs == kCV)
      for (; r0 < WideRows(npad); r0 += kRWide)
        GroupScoreStrip<kT, kRWide, kCV>(q + r0 * d, d, kc, col0, s + r0 * kTileKeys);
    for (; r0 < npad; r0 += kR) {
      if (vecs == kCV) GroupScoreStrip<kT, kR, kCV>(q + r0 * d, d, kc, col0, s + r0 * kTileKeys);
      else GroupScoreStrip<kT, kR, 1>(q + r0 * d, d, kc, col0, s + r0 * kTileKeys);
    }
  }
}

// F32Ops::PVStrip with key j's V row at g.v[j / 16] + (j % 16) * dp.
template <KVType kT, int R, int CV>
HWY_INLINE void GroupPVStrip(const float* HWY_RESTRICT p, const GroupTile& g, int64_t dp,
                             int64_t c0, const float* alpha, float* HWY_RESTRICT o) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  VF acc[R][CV];
  for (int r = 0; r < R; ++r) {
    const VF al = hn::Set(df, alpha[r]);
    for (int c = 0; c < CV; ++c) acc[r][c] = hn::Mul(al, hn::Load(df, o + r * dp + c0 + c * N));
  }
  for (int64_t gi = 0; gi < kGroupsPerTile; ++gi)
    for (int64_t jj = 0; jj < kKeyGroup; ++jj) {
      const uint16_t* row = g.v[gi] + jj * dp + c0;
      const int64_t j = gi * kKeyGroup + jj;
      VF b[CV];
      for (int c = 0; c < CV; ++c) b[c] = LoadStored<kT>(df, row + c * N);
      for (int r = 0; r < R; ++r) {
        const VF a = hn::Set(df, p[r * kTileKeys + j]);
        for (int c = 0; c < CV; ++c) acc[r][c] = hn::MulAdd(a, b[c], acc[r][c]);
      }
    }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CV; ++c) hn::Store(acc[r][c], df, o + r * dp + c0 + c * N);
}

// O[npad][dp] = alpha O + P V, as F32Ops::PV over the tile widened.
template <KVType kT>
HWY_NOINLINE void GroupPV(const float* p, int64_t npad, const GroupTile& g, int64_t dp,
                          const float* alpha, float* o) {
  const int64_t N = int64_t(hn::Lanes(DF()));
  for (int64_t c0 = 0; c0 < dp; c0 += kCV * N) {
    const int64_t vecs = std::min<int64_t>(kCV, (dp - c0) / N);
    int64_t r0 = 0;
    if (vecs == kCV)
      for (; r0 < WideRows(npad); r0 += kRWide)
        GroupPVStrip<kT, kRWide, kCV>(p + r0 * kTileKeys, g, dp, c0, alpha + r0, o + r0 * dp);
    for (; r0 < npad; r0 += kR) {
      const float* pr = p + r0 * kTileKeys;
      float* orow = o + r0 * dp;
      if (vecs == kCV) {
        GroupPVStrip<kT, kR, kCV>(pr, g, dp, c0, alpha + r0, orow);
      } else {
        for (int64_t c = 0; c < vecs; ++c)
          GroupPVStrip<kT, kR, 1>(pr, g, dp, c0 + c * N, alpha + r0, orow);
      }
    }
  }
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
