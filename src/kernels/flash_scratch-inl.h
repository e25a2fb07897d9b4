// A work item's per-thread scratch and the loop's typed view of the packed K/V (flash-inl.h):
// where each key tile's K and V come from (in place, widened, shifted, or copied into a
// gathered tile).
//
// Included by flash-inl.h (inside its HWY_BEFORE_NAMESPACE region), once per SIMD target:
// the include guard toggles with HWY_TARGET_TOGGLE, as Highway's foreach_target needs.

#if defined(SPATTN_KERNELS_FLASH_SCRATCH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPATTN_KERNELS_FLASH_SCRATCH_INL_H_
#undef SPATTN_KERNELS_FLASH_SCRATCH_INL_H_
#else
#define SPATTN_KERNELS_FLASH_SCRATCH_INL_H_
#endif

namespace spattn::kernels::HWY_NAMESPACE {

// (kPackFragments) Keys [src, src + n) of a range, copied into slots [dst, dst + n) of a
// gathered tile; src -1: slot dst left empty (kKeyPairs).
struct Piece {
  int64_t src, dst, n;
};
// The rest of a range up to this many keys is packed into gathered tiles; more is computed
// as a tile of its own (copying ~50 keys costs more than the ~14 wasted slots).
inline constexpr int64_t kPackedPieceMax = 48;

// Per-thread scratch of one work item.
template <class Ops>
struct Scratch {
  using T = typename Ops::T;
  std::unique_ptr<float[], void (*)(float*)> buf{nullptr, [](float* p) { aligned_free(p); }};
  T* q = nullptr;
  float* s_own = nullptr;  // the scores / P buffer; s points here unless a kKeepP policy moved it
  float *s = nullptr, *o = nullptr, *m = nullptr, *l = nullptr, *alpha = nullptr,
        *tile_max = nullptr, *block_lse = nullptr;
  T *gk = nullptr, *gv = nullptr;  // gathered key / value tile
  int64_t rows[kMaxTileRows];
  int64_t out_rows[kMaxTileRows];
  int64_t pos[kMaxTileRows];
  std::vector<KeyRange> ranges;
  std::vector<int64_t> columns;
  std::vector<TileVisit> visits;  // kOrder policies: the item's key tiles in visiting order
  std::vector<Piece> pieces;      // kPackFragments: the gathered tile's pieces of ranges
  WidenedTiles win;               // tiles stored in other types, widened (F32Ops only)

  explicit Scratch(int64_t d, int64_t dp) {
    const int64_t R = kMaxTileRows + kR;
    auto floats = [](int64_t elems) { return (elems * int64_t(sizeof(T)) + 63) / 64 * 16; };
    const int64_t qf = floats(R * d), gkf = floats(kTileKeys * d), gvf = floats(kTileKeys * dp);
    const int64_t total = qf + gkf + gvf + R * kTileKeys + R * dp + 5 * R;
    buf.reset(static_cast<float*>(aligned_alloc_bytes(size_t(total) * 4)));
    float* f = buf.get();
    q = reinterpret_cast<T*>(f);
    f += qf;
    gk = reinterpret_cast<T*>(f);
    f += gkf;
    gv = reinterpret_cast<T*>(f);
    f += gvf;
    s = s_own = f;
    f += R * kTileKeys;
    o = f;
    f += R * dp;
    m = f;
    f += R;
    l = f;
    f += R;
    alpha = f;
    f += R;
    tile_max = f;
    f += R;
    block_lse = f;
  }
};

// K/V tiles as the loop reads them: a typed view of a PackedKVData.
template <class Ops>
struct KVTiles {
  using T = typename Ops::T;
  const PackedKVData& kv;
  const int64_t* kpos;  // original positions, or null when they equal the packed index
  const std::vector<HeadColumns>* columns = nullptr;  // per q head (kPackedColumns)
  // Tile t of head kvh: in place, or widened into the thread's scratch when stored in another
  // type.
  const T* k_tile(int64_t kvh, int64_t t, Scratch<Ops>& sc) const {
    if constexpr (std::is_same_v<T, float>)
      if (kv.widened()) return sc.win.K(kv, kvh, t);
    return kv.k_tile<T>(kvh, t);
  }
  const T* v_tile(int64_t kvh, int64_t t, Scratch<Ops>& sc) const {
    if constexpr (std::is_same_v<T, float>)
      if (kv.widened()) return sc.win.V(kv, kvh, t);
    return kv.v_tile<T>(kvh, t);
  }
  // Keys [a, a + 64) of head kvh, a off the grid, for a shifted tile: in place, the two tiles
  // they span, read shifted; stored in another type, one tile of their own widened from the
  // two (then scored as a plain tile).
  struct Run {
    const T *k, *v;
    bool shifted;
  };
  Run run(int64_t kvh, int64_t a, Scratch<Ops>& sc) const {
    const int64_t t = a / kTileKeys;
    if constexpr (std::is_same_v<T, float>)
      if (kv.widened()) {
        const float* k = sc.win.KRun(kv, kvh, a);  // first: VRun reads it where V is K
        return {k, sc.win.VRun(kv, kvh, a), false};
      }
    return {kv.k_tile<T>(kvh, t), Ops::ShiftedV(kv.v_tile<T>(kvh, t), a % kTileKeys, kv.dp), true};
  }
  // Slots [sj, sj + n) of tile t of head kvh into slots dj.. of the gathered tiles. Stored in
  // another type, only those slots are widened: a 16-key page would otherwise widen its whole
  // tile of 64 keys to keep a quarter of it.
  void copy_keys(int64_t kvh, int64_t t, int64_t sj, int64_t n, Scratch<Ops>& sc,
                 int64_t dj) const {
    if constexpr (std::is_same_v<T, float>)
      if (kv.widened()) {
        WidenKeysKOf(kv, kvh, t, sj, n, sc.gk, dj);
        WidenKeysVOf(kv, kvh, t, sj, n, sc.gv, dj);
        return;
      }
    Ops::CopyKeysK(kv.k_tile<T>(kvh, t), sj, sc.gk, dj, n, kv.dim);
    Ops::CopyKeysV(kv.v_tile<T>(kvh, t), sj, sc.gv, dj, n, kv.dp);
  }
};

}  // namespace spattn::kernels::HWY_NAMESPACE

#endif  // include guard
