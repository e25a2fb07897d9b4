// One key tile's arithmetic outside the micro-kernels (flash-inl.h): masking scores (causal,
// window, range, by position), row maxima, the online-softmax update and the final O / l.
//
// Included by flash-inl.h (inside its HWY_BEFORE_NAMESPACE region), once per SIMD target:
// the include guard toggles with HWY_TARGET_TOGGLE, as Highway's foreach_target needs.

#if defined(SPATTN_KERNELS_FLASH_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPATTN_KERNELS_FLASH_SOFTMAX_INL_H_
#undef SPATTN_KERNELS_FLASH_SOFTMAX_INL_H_
#else
#define SPATTN_KERNELS_FLASH_SOFTMAX_INL_H_
#endif

namespace spattn::kernels::HWY_NAMESPACE {

// Masks scores outside [lo, hi), past each row's causal limit and (window > 0) below its
// sliding window's start to -inf; returns the number of score entries left.
inline int64_t MaskTile(float* s, int64_t n, const int64_t* pos, bool causal, int64_t j0,
                        int64_t lo, int64_t hi, int64_t window = 0) {
  int64_t kept = 0;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t row_hi = causal ? std::min(hi, pos[r] + 1) : hi;
    const int64_t row_lo = window > 0 ? std::max(lo, window_start(pos[r], window)) : lo;
    const int64_t a = std::clamp<int64_t>(row_lo - j0, 0, kTileKeys);
    const int64_t b = std::clamp<int64_t>(row_hi - j0, a, kTileKeys);
    float* row = s + r * kTileKeys;
    std::fill(row, row + a, kNegInf);
    std::fill(row + b, row + kTileKeys, kNegInf);
    kept += b - a;
  }
  return kept;
}

// Row maxima of the scaled scores (x = S c), into tile_max.
inline void RowMax(const float* s, int64_t n, float c, float* tile_max) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  for (int64_t r = 0; r < n; ++r) {
    VF mx = hn::Set(df, kNegInf);
    for (int64_t j = 0; j < kTileKeys; j += N)
      mx = hn::Max(mx, hn::Load(df, s + r * kTileKeys + j));
    tile_max[r] = hn::GetLane(hn::MaxOfLanes(df, mx)) * c;
  }
}

// Online-softmax update of rows [0, n): turns S into P in place, updates m and l, writes the
// O rescale factors alpha and, when observing, each row's log-sum-exp over this tile.
template <bool kObserve>
inline void SoftmaxUpdate(float* s, int64_t n, float c, const float* tile_max, float* m, float* l,
                          float* alpha, float* block_lse) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const VF vc = hn::Set(df, c);
  for (int64_t r = 0; r < n; ++r) {
    const float m_new = std::max(m[r], tile_max[r]);
    // A row that has seen no key keeps m = -inf; use 0 so exp2 sees -inf, not NaN.
    const float m_use = m_new == kNegInf ? 0.0f : m_new;
    // Past the first tiles the running max rarely moves: skip the libm call when it did not
    // (exp2(0) is exactly 1, so the result is the same bits).
    alpha[r] = m[r] == m_use ? 1.0f : std::exp2(m[r] - m_use);
    const VF vm = hn::Set(df, m_use);
    VF sum = hn::Zero(df);
    float* row = s + r * kTileKeys;
    for (int64_t j = 0; j < kTileKeys; j += N) {
      const VF p = Exp2(df, hn::MulSub(hn::Load(df, row + j), vc, vm));
      sum = hn::Add(sum, p);
      hn::Store(p, df, row + j);
    }
    const float rs = hn::GetLane(hn::SumOfLanes(df, sum));
    l[r] = l[r] * alpha[r] + rs;
    m[r] = m_new;
    if constexpr (kObserve) block_lse[r] = rs;
  }
  // The tile LSE, ln 2 (m + log2 rs) with m the max after the tile as above, in a second pass
  // over the rows, a vector of rows at a time rather than a scalar libm call per row (MOMO's
  // observer reads it for every sampled row and key tile). Lanes past n (up to a multiple of
  // N; the scratch holds kMaxTileRows >= that) compute values nobody reads.
  if constexpr (kObserve) {
    static_assert(kMaxTileRows % int64_t(hn::MaxLanes(DF())) == 0);
    const VF ninf = hn::Set(df, kNegInf), zero = hn::Zero(df), ln2 = hn::Set(df, kLn2);
    for (int64_t r = 0; r < n; r += N) {
      const VF rs = hn::Load(df, block_lse + r), mr = hn::Load(df, m + r);
      const VF m_use = hn::IfThenElse(hn::Eq(mr, ninf), zero, mr);
      const VF lse = hn::Mul(hn::Add(m_use, hn::Log2(df, rs)), ln2);
      hn::Store(hn::IfThenElse(hn::Gt(rs, zero), lse, ninf), df, block_lse + r);
    }
  }
}

// Masks entries by original key position: (r, jj) is kept when jj < count, key index
// key(jj) lies in [lo, hi), and (causal) its position kpos[key(jj)] (or key(jj) itself when kpos
// is null) is <= pos[r] and (window > 0) > pos[r] - window. Used for gathered tiles and for
// packed K/V in a permuted order.
template <class KeyOf>
inline int64_t MaskByPosition(float* s, int64_t n, const int64_t* pos, bool causal,
                              const int64_t* kpos, KeyOf key, int64_t count, int64_t lo, int64_t hi,
                              int64_t window = 0) {
  int64_t kept = 0;
  for (int64_t r = 0; r < n; ++r) {
    float* row = s + r * kTileKeys;
    for (int64_t jj = 0; jj < kTileKeys; ++jj) {
      bool keep = jj < count;
      if (keep) {
        const int64_t j = key(jj), kp = kpos ? kpos[j] : j;
        keep =
            j >= lo && j < hi && (!causal || kp <= pos[r]) && (window <= 0 || kp > pos[r] - window);
      }
      if (!keep) row[jj] = kNegInf;
      kept += keep;
    }
  }
  return kept;
}

// Writes O / l (and LSE) of rows [0, n) to output rows out_rows.
inline void Finalize(const Problem& p, int64_t h, const int64_t* out_rows, int64_t n, int64_t dp,
                     const float* o, const float* m, const float* l) {
  const int64_t out_len = p.out.seq;
  for (int64_t r = 0; r < n; ++r) {
    store_row(p.out, h, out_rows[r], o + r * dp, p.dim, l[r] > 0 ? 1.0f / l[r] : 0.0f);
    if (p.lse) p.lse[h * out_len + out_rows[r]] = RowLse(m[r], l[r]);
  }
}

// Masks the keys of `keys` (sorted packed indices) that lie in [lo, hi) out of a tile starting
// at packed key j0; returns how many unmasked (row, key) entries that removed.
inline int64_t MaskKeys(float* s, int64_t n, const std::vector<int64_t>& keys, int64_t j0,
                        int64_t lo, int64_t hi) {
  int64_t dropped = 0;
  for (auto it = std::lower_bound(keys.begin(), keys.end(), lo); it != keys.end() && *it < hi; ++it)
    for (int64_t r = 0; r < n; ++r) {
      float& x = s[r * kTileKeys + (*it - j0)];
      if (x != kNegInf) x = kNegInf, ++dropped;
    }
  return dropped;
}

}  // namespace spattn::kernels::HWY_NAMESPACE

#endif  // include guard
