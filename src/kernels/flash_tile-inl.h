// One work item of the flash loop (flash-inl.h): q head h's query tile t against every key
// tile its policy lets through (RunTile), and the per-tile step they share (TileStep).
//
// Included by flash-inl.h (inside its HWY_BEFORE_NAMESPACE region), once per SIMD target:
// the include guard toggles with HWY_TARGET_TOGGLE, as Highway's foreach_target needs.

#if defined(SPATTN_KERNELS_FLASH_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPATTN_KERNELS_FLASH_TILE_INL_H_
#undef SPATTN_KERNELS_FLASH_TILE_INL_H_
#else
#define SPATTN_KERNELS_FLASH_TILE_INL_H_
#endif

namespace spattn::kernels::HWY_NAMESPACE {

// The per-item state the tile step updates.
template <class Ops, class Policy>
struct TileStep {
  const Problem& p;
  const Policy& pol;
  typename Policy::Local& local;
  Scratch<Ops>& sc;
  Stats& st;
  TileView view;
  int64_t npad, dp;
  float c;  // scale * log2(e)

  // One key tile whose scores are in sc.s and whose masked entries number `kept`. v_tile: the
  // tile's V, or a callable giving it, called only when the tile is not skipped (a V stored in
  // another type is then widened only for the tiles whose V is read).
  template <class VTile>
  void Run(int64_t key_tile, const int64_t* gathered, int64_t n_keys, int64_t kept,
           VTile&& v_tile) {
    const int64_t n = view.n;
    // Padding rows stay finite and contribute nothing.
    std::fill(sc.s + n * kTileKeys, sc.s + npad * kTileKeys, kNegInf);
    RowMax(sc.s, npad, c, sc.tile_max);
    ++st.tiles_visited;
    view.key_tile = key_tile;
    view.gathered = gathered;
    view.n_keys = n_keys;
    view.entries = kept;
    if constexpr (Policy::Observers::kMaySkip) {
      view.m = sc.m;
      if (pol.skip(local, view)) {
        ++st.tiles_skipped;
        return;
      }
    }
    st.score_entries += kept;
    SoftmaxUpdate<Policy::Observers::kObserve>(sc.s, npad, c, sc.tile_max, sc.m, sc.l, sc.alpha,
                                               sc.block_lse);
    if constexpr (Policy::Observers::kOutput) {
      if constexpr (std::is_invocable_v<VTile>) {
        const auto v = v_tile();
        if constexpr (std::is_same_v<std::remove_cv_t<decltype(v)>, GroupV>)
          GroupPVOf(v.type, sc.s, n, *v.g, dp, sc.alpha, sc.o);
        else
          Ops::PV(sc.s, npad, v, dp, sc.alpha, sc.o);
      } else {
        Ops::PV(sc.s, npad, v_tile, dp, sc.alpha, sc.o);
      }
    }
    if constexpr (Policy::Observers::kObserve) {
      view.m = sc.m;
      view.l = sc.l;
      view.p = sc.s;
      view.lse = sc.block_lse;
      pol.observe(local, view);
    }
  }
};

// One work item: q head h, query tile t.
template <class Ops, class Policy>
void RunTile(const Problem& p, const Policy& pol, typename Policy::Local& local,
             const KVTiles<Ops>& kv, int64_t dp, int64_t h, int64_t t, Scratch<Ops>& sc,
             Stats& st) {
  const int64_t n = pol.rows(p, t, sc.rows, sc.out_rows);
  if (n <= 0) return;
  const int64_t npad = RoundUp(n, kR);
  const int64_t kvh = h / p.group;
  for (int64_t r = 0; r < n; ++r) sc.pos[r] = p.row_position(sc.rows[r]);
  // Packed keys the tile's last row may see: a prefix when positions ascend.
  const int64_t limit = p.causal ? kv.kv.causal_prefix(sc.pos[n - 1]) : p.kv_len;
  sc.ranges.clear();
  pol.key_ranges(p, h, t, limit, sc.ranges);
  NormalizeRanges(sc.ranges, limit);
  // A sliding window: keys before the first row's band are nobody's, so the ranges start at
  // its edge and the tiles below are never visited (a band of W keys costs O(W) per row, not
  // O(position)). In natural order only, where packed index = position; permuted keys are
  // masked by position below.
  if (p.window > 0 && !kv.kpos) {
    const int64_t lo = window_start(sc.pos[0], p.window);
    for (KeyRange& kr : sc.ranges) kr.begin = std::max(kr.begin, lo);
    std::erase_if(sc.ranges, [](const KeyRange& kr) { return kr.end <= kr.begin; });
  }

  Ops::PackQ(p.q, h, sc.rows, n, npad, p.dim, sc.q);
  const PackedKVData& d = kv.kv;
  // Where V is K a whole tile's scores are taken over its value rows (ScoresOverRows).
  constexpr bool kF32 = std::is_same_v<typename Ops::T, float>;
  if constexpr (kF32)
    if (d.v_is_k) TransposeQ(sc.q, npad, p.dim, sc.win.qt);
  std::fill(sc.o, sc.o + npad * dp, 0.0f);
  std::fill(sc.m, sc.m + npad, kNegInf);
  std::fill(sc.l, sc.l + npad, 0.0f);
  TileView view;
  view.h = h, view.t = t, view.n = n;
  view.q_rows = sc.rows, view.out_rows = sc.out_rows, view.row_pos = sc.pos;
  view.positions = kv.kpos;
  view.tile_max = sc.tile_max;
  if constexpr (Policy::TileState::kSeedMax) pol.seed_max(p, view, sc.m);
  if constexpr (Policy::TileState::kCarry) pol.load_state(p, view, sc.o, sc.m, sc.l, dp);
  TileStep<Ops, Policy> step{p, pol, local, sc, st, view, npad, dp, p.scale * kLog2e};
  // (kKeepP) Each tile's scores / P in the policy's buffer.
  const auto next_p = [&] {
    if constexpr (Policy::Observers::kKeepP) sc.s = pol.p_buffer(local, npad);
  };
  // Stored 16-bit K and V read in place (group_tiles-inl.h): decode's few rows.
  const bool in_place = ReadsInPlace<Ops>(d, npad);
  const auto group_scores = [&](const GroupTile& g) {
    if constexpr (std::is_same_v<typename Ops::T, float>)
      GroupScoresOf(d.k_type, sc.q, n, g, p.dim, sc.s);
  };
  // One key tile, limited to the keys [begin, end) of the range that brought it in.
  // Masks the scores of keys j0.. (packed indices; any j0 in natural order) to the range
  // [lo, hi) and causally (last_pos: the tile's last key position), and leaves out the keys a
  // packed column tile computes (all of them, for the rows that see them); returns the
  // entries kept.
  const auto mask_range = [&](int64_t j0, int64_t n_keys, int64_t lo, int64_t hi,
                              int64_t last_pos) {
    // (A window leaves a tile whole only when its first key is in the last row's band.)
    const bool full = lo <= j0 && j0 + kTileKeys <= hi && (!p.causal || last_pos <= sc.pos[0]) &&
                      (p.window <= 0 || (!kv.kpos && j0 >= window_start(sc.pos[n - 1], p.window)));
    int64_t kept;
    if (full)
      kept = n * kTileKeys;
    else if (!kv.kpos)
      kept = MaskTile(sc.s, n, sc.pos, p.causal, j0, lo, hi, p.window);
    else
      kept = MaskByPosition(
          sc.s, n, sc.pos, p.causal, kv.kpos, [j0](int64_t jj) { return j0 + jj; }, n_keys, lo, hi,
          p.window);
    if constexpr (Policy::KeySource::kPackedColumns)
      kept -= MaskKeys(sc.s, n, (*kv.columns)[size_t(h)].keys, j0, std::max(j0, lo),
                       std::min(j0 + kTileKeys, hi));
    return kept;
  };
  const auto visit = [&](const TileVisit& tv) {
    const int64_t jt = tv.tile, j0 = jt * kTileKeys;
    const int64_t n_keys = std::min(kTileKeys, p.kv_len - j0);
    // Permuted keys: a tile whose every key lies after the tile's last row adds nothing.
    if (p.causal && tv.first_pos > sc.pos[n - 1]) return;
    // ...and one whose every key lies before the first row's sliding window.
    if (p.window > 0 && tv.last_pos < window_start(sc.pos[0], p.window)) return;
    next_p();
    if (in_place) {
      const GroupTile g = TileGroups(d, kvh, jt);
      group_scores(g);
      const int64_t kept = mask_range(j0, n_keys, tv.begin, tv.end, tv.last_pos);
      step.Run(jt, nullptr, n_keys, kept, [&] { return GroupV{&g, d.v_type}; });
      return;
    }
    if constexpr (kF32)
      if (d.v_is_k) {
        const float* rows = kv.v_tile(kvh, jt, sc);
        ScoresOverRows(sc.win.qt, npad, rows, dp, p.dim, sc.win.st, sc.s);
        const int64_t kept = mask_range(j0, n_keys, tv.begin, tv.end, tv.last_pos);
        step.Run(jt, nullptr, n_keys, kept, rows);
        return;
      }
    Ops::Scores(sc.q, npad, kv.k_tile(kvh, jt, sc), p.dim, sc.s);
    const int64_t kept = mask_range(j0, n_keys, tv.begin, tv.end, tv.last_pos);
    step.Run(jt, nullptr, n_keys, kept, [&] { return kv.v_tile(kvh, jt, sc); });
  };
  // (kPackFragments) A range is computed 64 keys at a time from its first key, on the grid or
  // not (shifted tiles), and its last few keys (kPackedPieceMax or fewer) are copied, piece
  // after piece, into gathered tiles of 64, each computed once: the tiles computed are about
  // the keys needed over 64, not the tiles the ranges touch. Only where positions equal
  // packed indices.
  int64_t filled = 0;  // keys in the gathered tile sc.gk / sc.gv
  sc.pieces.clear();
  const auto run_gathered = [&] {
    if (filled == 0) return;
    if (filled < kTileKeys) Ops::ZeroKeys(sc.gk, sc.gv, filled, p.dim, dp);
    next_p();
    Ops::Scores(sc.q, npad, sc.gk, p.dim, sc.s);
    for (int64_t r = 0; r < n; ++r)
      std::fill(sc.s + r * kTileKeys + filled, sc.s + (r + 1) * kTileKeys, kNegInf);
    sc.columns.resize(size_t(filled));
    int64_t kept = 0;
    for (const Piece& pc : sc.pieces) {
      if (pc.src < 0) {  // a skipped slot (kKeyPairs)
        for (int64_t r = 0; r < n; ++r) sc.s[r * kTileKeys + pc.dst] = kNegInf;
        sc.columns[size_t(pc.dst)] = 0;
        continue;
      }
      std::iota(sc.columns.begin() + pc.dst, sc.columns.begin() + pc.dst + pc.n, pc.src);
      // Keys src.. in slots dst..: row r keeps those up to its position (and, with a
      // sliding window, from its band's start).
      if ((p.causal && pc.src + pc.n - 1 > sc.pos[0]) ||
          (p.window > 0 && pc.src < window_start(sc.pos[n - 1], p.window))) {
        for (int64_t r = 0; r < n; ++r) {
          const int64_t vis = std::clamp<int64_t>(sc.pos[r] + 1 - pc.src, 0, pc.n);
          const int64_t from =
              std::clamp<int64_t>(window_start(sc.pos[r], p.window) - pc.src, 0, vis);
          float* row = sc.s + r * kTileKeys + pc.dst;
          std::fill(row, row + from, kNegInf);
          std::fill(row + vis, row + pc.n, kNegInf);
          kept += vis - from;
        }
      } else {
        kept += n * pc.n;
      }
      if constexpr (Policy::KeySource::kPackedColumns)
        kept -= MaskKeys(sc.s, n, (*kv.columns)[size_t(h)].keys, pc.src - pc.dst, pc.src,
                         pc.src + pc.n);
    }
    step.Run(-1, sc.columns.data(), filled, kept, sc.gv);
    filled = 0;
    sc.pieces.clear();
  };
  // A shifted tile: packed keys [a, a + 64) (a off the 64-key grid) of a range [lo, hi), read
  // straight from the two packed tiles they lie in.
  const auto visit_shifted = [&](int64_t a, int64_t lo, int64_t hi) {
    const auto run = kv.run(kvh, a, sc);
    next_p();
    if (run.shifted)
      Ops::ScoresShifted(sc.q, npad, run.k, a % kTileKeys, p.dim, sc.s);
    else
      Ops::Scores(sc.q, npad, run.k, p.dim, sc.s);
    const int64_t n_keys = std::min(kTileKeys, p.kv_len - a);
    const int64_t kept = mask_range(a, n_keys, lo, hi, a + kTileKeys - 1);
    // The tile's keys, for the view (sc.columns is free until run_gathered fills it).
    sc.columns.resize(size_t(kTileKeys));
    std::iota(sc.columns.begin(), sc.columns.end(), a);
    step.Run(-1, sc.columns.data(), n_keys, kept, run.v);
  };
  // How a range [b, e) is computed: from b on, 64 keys at a time as one tile (shifted when off
  // the grid; with key pairs a shifted tile starts on an even key, so the first may start one
  // key early, masked) while more than kPackedPieceMax keys are left, then the rest as pieces,
  // one per packed tile they lie in, for gathered tiles. A slash line's range is as wide as
  // the query tile, so most ranges are one shifted tile and copy nothing.
  const auto split_range = [&](const KeyRange& kr, auto&& tile, auto&& piece) {
    int64_t x = kr.begin;
    while (kr.end - x > kPackedPieceMax) {
      int64_t a = x;
      if constexpr (Ops::kKeyPairs) a -= a & 1;
      // A shifted tile reads the tile after a's: the storage's last one has none.
      if (a % kTileKeys != 0 && a / kTileKeys + 1 >= d.tiles_cap) break;
      tile(a);
      x = a + kTileKeys;
    }
    for (int64_t s0 = x; s0 < kr.end;) {
      const int64_t s1 = std::min(kr.end, (s0 / kTileKeys + 1) * kTileKeys);
      piece(s0, s1);
      s0 = s1;
    }
  };
  // The pieces of the next range, prefetched: their copies otherwise wait on memory (the
  // hardware prefetcher does not see scattered short rows coming).
  const auto prefetch_piece = [&](int64_t lo, int64_t hi) {
    const int64_t jt = lo / kTileKeys;
    if (d.widened()) return;  // read once widened, from the thread's scratch
    Ops::PrefetchKeys(d.template k_tile<typename Ops::T>(kvh, jt),
                      d.template v_tile<typename Ops::T>(kvh, jt), lo % kTileKeys, hi - lo, p.dim,
                      dp);
  };
  // Keys [lo, hi) of one packed tile into the gathered tile (and the next, if it fills).
  const auto add_piece = [&](int64_t lo, int64_t hi) {
    const int64_t jt = lo / kTileKeys;
    while (lo < hi) {
      if constexpr (Ops::kKeyPairs) {
        // A key moved to the other half of a pair costs a scalar copy per dim: skip a slot
        // instead (zero K and V, masked below), so whole pairs copy.
        if ((filled & 1) != (lo & 1)) {
          Ops::ZeroKey(sc.gk, sc.gv, filled, p.dim, dp);
          sc.pieces.push_back({-1, filled, 1});
          if (++filled == kTileKeys) run_gathered();
          continue;
        }
      }
      const int64_t take = std::min(hi - lo, kTileKeys - filled);
      kv.copy_keys(kvh, jt, lo % kTileKeys, take, sc, filled);
      sc.pieces.push_back({lo, filled, take});
      filled += take;
      lo += take;
      if (filled == kTileKeys) run_gathered();
    }
  };
  // (kPackFragments, stored 16-bit keys read in place) Each range as the 16-key groups it
  // touches, four to a tile in the order met, wherever they lie: nothing is copied or shifted,
  // and a group's keys outside its range (at most 15 a range end) are masked. A Quest page is
  // whole groups (its size a multiple of 16). Not with kPackedColumns, whose keys the ranges
  // must leave out (MaskKeys in the paths below).
  const auto visit_groups = [&] {
    GroupTile g;
    int64_t first[kGroupsPerTile], lo[kGroupsPerTile], hi[kGroupsPerTile];
    int64_t ng = 0;
    const auto flush = [&] {
      if (ng == 0) return;
      for (int64_t c = ng; c < kGroupsPerTile; ++c)
        g.k[c] = g.v[c] = kZeroGroup, first[c] = lo[c] = hi[c] = 0;
      next_p();
      group_scores(g);
      sc.columns.resize(size_t(kTileKeys));
      for (int64_t c = 0; c < kGroupsPerTile; ++c)
        for (int64_t jj = 0; jj < kKeyGroup; ++jj)
          sc.columns[size_t(c * kKeyGroup + jj)] = first[c] + jj;
      // Groups wholly inside their ranges and visible to every row (Quest's pages: every
      // group, decode being non-causal) need no per-entry test: only the missing groups'
      // slots are masked.
      bool whole = p.window <= 0;
      for (int64_t c = 0; c < ng && whole; ++c)
        whole = lo[c] <= first[c] && first[c] + kKeyGroup <= hi[c] &&
                (!p.causal || first[c] + kKeyGroup - 1 <= sc.pos[0]);
      int64_t kept = 0;
      if (whole) {
        for (int64_t r = 0; r < n; ++r)
          std::fill(sc.s + r * kTileKeys + ng * kKeyGroup, sc.s + (r + 1) * kTileKeys, kNegInf);
        kept = n * ng * kKeyGroup;
      } else {
        for (int64_t slot = 0; slot < kTileKeys; ++slot) {
          const int64_t c = slot / kKeyGroup, j = sc.columns[size_t(slot)];
          for (int64_t r = 0; r < n; ++r) {
            const bool keep = j >= lo[c] && j < hi[c] && (!p.causal || j <= sc.pos[r]) &&
                              (p.window <= 0 || j >= window_start(sc.pos[r], p.window));
            if (!keep) sc.s[r * kTileKeys + slot] = kNegInf;
            kept += keep;
          }
        }
      }
      step.Run(-1, sc.columns.data(), ng * kKeyGroup, kept, [&] { return GroupV{&g, d.v_type}; });
      ng = 0;
    };
    const auto* k0 = reinterpret_cast<const uint16_t*>(d.k_bytes(kvh, 0));
    const auto* v0 = reinterpret_cast<const uint16_t*>(d.v_bytes(kvh, 0));
    for (const KeyRange& kr : sc.ranges)
      for (int64_t gi = kr.begin / kKeyGroup; gi * kKeyGroup < kr.end; ++gi) {
        // A head's tiles lie back to back, so group gi is the gi-th run of 16 keys.
        g.k[ng] = k0 + gi * p.dim * kKeyGroup;
        g.v[ng] = v0 + gi * kKeyGroup * dp;
        first[ng] = gi * kKeyGroup, lo[ng] = kr.begin, hi[ng] = kr.end;
        if (++ng == kGroupsPerTile) flush();
      }
    flush();
  };
  bool grouped = false;
  using Keys = typename Policy::KeySource;
  if constexpr (Keys::kPackFragments && !Keys::kOrder && !Keys::kPackedColumns)
    if (in_place && !kv.kpos) visit_groups(), grouped = true;
  if constexpr (Policy::KeySource::kOrder) {
    // The same tiles as below, listed first so the policy can choose their order.
    sc.visits.clear();
    for (const KeyRange& kr : sc.ranges)
      for (int64_t jt = kr.begin / kTileKeys; jt * kTileKeys < kr.end; ++jt)
        sc.visits.push_back(d.visit(jt, kr.begin, kr.end));
    pol.visit_order(p, view, sc.visits);
    for (const TileVisit& v : sc.visits) visit(v);
  } else if (!grouped) {
    for (size_t ri = 0; ri < sc.ranges.size(); ++ri) {
      const KeyRange& kr = sc.ranges[ri];
      if constexpr (Policy::KeySource::kPackFragments) {
        if (!kv.kpos) {
          if (ri + 1 < sc.ranges.size())
            split_range(
                sc.ranges[ri + 1], [](int64_t) {}, prefetch_piece);
          split_range(
              kr,
              [&](int64_t a) {
                if (a % kTileKeys != 0)
                  visit_shifted(a, kr.begin, kr.end);
                else
                  visit(d.visit(a / kTileKeys, kr.begin, kr.end));
              },
              add_piece);
          continue;
        }
      }
      for (int64_t jt = kr.begin / kTileKeys; jt * kTileKeys < kr.end; ++jt) {
        // A stored (widened) cache: this tile's V and the next tile's K start coming into the
        // L2 while this tile's K is widened and scored. The runner's decode over an f16 cache
        // at 16K depth (code-small-32k, 2 threads, Zen 5): 1.20-1.23x tokens/s (BENCHMARKS.md,
        // "Decode over an f16 cache"). Two or three tiles ahead measured no better.
        if (d.widened()) {
          if (!d.v_is_k) PrefetchL2(d.v_bytes(kvh, jt), d.v_tile_bytes);
          if ((jt + 1) * kTileKeys < kr.end) PrefetchL2(d.k_bytes(kvh, jt + 1), d.k_tile_bytes);
        }
        visit(d.visit(jt, kr.begin, kr.end));
      }
    }
    if constexpr (Policy::KeySource::kPackFragments) run_gathered();
  }
  if constexpr (Policy::KeySource::kGather) {
    sc.columns.clear();
    pol.key_columns(p, h, t, limit, sc.columns);
    NormalizeColumns(sc.columns, sc.ranges, limit);
    for (size_t i = 0; i < sc.columns.size(); i += size_t(kTileKeys)) {
      const int64_t count = std::min<int64_t>(kTileKeys, int64_t(sc.columns.size() - i));
      const int64_t* keys = sc.columns.data() + i;
      // Gathered from the packed tiles (never from raw K/V): the same values, bit for bit. A
      // short piece's empty slots read as zero, as a packed tile's do (a full one overwrites all).
      if (count < kTileKeys) {
        std::fill(sc.gk, sc.gk + d.k_elems, typename Ops::T(0));
        std::fill(sc.gv, sc.gv + d.v_elems, typename Ops::T(0));
      }
      // K from token-major rows where the policy has them (gather_key_rows), else from the
      // packed tiles a tile's keys at a time (they are sorted): row by row for all of them at
      // once. V key by key (a V slot is a row).
      bool k_done = false;
      if constexpr (std::is_same_v<typename Ops::T, float>)
        if (const float* rows = pol.gather_key_rows(p, kvh)) {
          KeyRowsToTile(rows, keys, count, p.dim, sc.gk);
          k_done = true;
          // The next piece's rows and V slots come into the L2 under this piece's arithmetic:
          // scattered keys, which the hardware prefetcher does not see coming.
          const int64_t next =
              d.widened()
                  ? 0
                  : std::min<int64_t>(kTileKeys, int64_t(sc.columns.size() - i) - kTileKeys);
          for (int64_t jj = 0; jj < next; ++jj) {
            const int64_t j = keys[kTileKeys + jj];
            PrefetchL2(rows + j * p.dim, p.dim * int64_t(sizeof(float)));
            PrefetchL2(d.template v_tile<float>(kvh, j / kTileKeys) + (j % kTileKeys) * dp,
                       dp * int64_t(sizeof(float)));
          }
        }
      int32_t slots[kTileKeys];
      for (int64_t jj = 0; jj < count;) {
        const int64_t jt = keys[jj] / kTileKeys;
        int64_t m = 0;
        for (; jj + m < count && keys[jj + m] / kTileKeys == jt; ++m)
          slots[m] = int32_t(keys[jj + m] % kTileKeys);
        // A stored cache: the listed keys widened alone (their K rows' values, their V rows),
        // not their tiles whole for them.
        bool listed = false;
        if constexpr (std::is_same_v<typename Ops::T, float>)
          if (d.widened()) {
            listed = true;
            if (!k_done && !WidenListedKOf(d, kvh, jt, slots, m, sc.gk, jj))
              Ops::CopyListedK(kv.k_tile(kvh, jt, sc), slots, m, sc.gk, jj, p.dim);
            for (int64_t a = 0; a < m; ++a) WidenKeysVOf(d, kvh, jt, slots[a], 1, sc.gv, jj + a);
          }
        if (!listed) {
          if (!k_done) Ops::CopyListedK(kv.k_tile(kvh, jt, sc), slots, m, sc.gk, jj, p.dim);
          const typename Ops::T* vt = kv.v_tile(kvh, jt, sc);
          for (int64_t a = 0; a < m; ++a) Ops::CopyKeyV(vt, slots[a], sc.gv, jj + a, dp);
        }
        jj += m;
      }
      next_p();
      Ops::Scores(sc.q, npad, sc.gk, p.dim, sc.s);
      const int64_t kept = MaskByPosition(
          sc.s, n, sc.pos, p.causal, kv.kpos, [keys](int64_t jj) { return keys[jj]; }, count, 0,
          p.kv_len, p.window);
      step.Run(-1, keys, count, kept, sc.gv);
    }
  }
  if constexpr (Policy::KeySource::kPackedColumns) {
    const HeadColumns& hc = (*kv.columns)[size_t(h)];
    const int64_t total = int64_t(hc.keys.size());
    // The columns the tile's last row may see: a prefix when positions ascend.
    const int64_t cols = total == 0 ? 0 : p.causal ? hc.kv.causal_prefix(sc.pos[n - 1]) : total;
    const int64_t* cpos = hc.kv.positions.data();
    for (int64_t i = 0; i < cols; i += kTileKeys) {
      const int64_t ct = i / kTileKeys, count = std::min(kTileKeys, cols - i);
      next_p();
      Ops::Scores(sc.q, npad, hc.kv.template k_tile<typename Ops::T>(0, ct), p.dim, sc.s);
      const bool full = count == kTileKeys && p.window <= 0 &&
                        (!p.causal || hc.kv.tile_max[size_t(ct)] <= sc.pos[0]);
      const int64_t kept = full
                               ? n * kTileKeys
                               : MaskByPosition(
                                     sc.s, n, sc.pos, p.causal, cpos,
                                     [i](int64_t jj) { return i + jj; }, count, 0, total, p.window);
      step.Run(-1, hc.keys.data() + i, count, kept, hc.kv.template v_tile<typename Ops::T>(0, ct));
    }
  }
  if constexpr (Policy::TileState::kCarry)
    pol.store_state(p, view, sc.o, sc.m, sc.l, dp);
  else if constexpr (Policy::Observers::kOutput)
    Finalize(p, h, sc.out_rows, n, dp, sc.o, sc.m, sc.l);
  if constexpr (Policy::Observers::kFinish) {
    // alpha is free once the last tile is done: it holds the rows' final LSE.
    for (int64_t r = 0; r < n; ++r) sc.alpha[r] = RowLse(sc.m[r], sc.l[r]);
    view.key_tile = -1, view.gathered = nullptr, view.n_keys = 0, view.entries = 0;
    view.m = sc.m, view.l = sc.l, view.p = nullptr, view.lse = nullptr;
    pol.finish(local, view, sc.alpha);
  }
  sc.s = sc.s_own;
}

}  // namespace spattn::kernels::HWY_NAMESPACE

#endif  // include guard
