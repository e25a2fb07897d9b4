// MMInference's grid head: the stride space, the online stride/phase search (Algorithm 1), the
// permuted layout the kernel computes it on (Algorithm 5), the natural band and the coverage.
// See spattn/grid.hpp for the rules; this file is their one statement.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "masks/vertical_slash_estimate.hpp"
#include "spattn/error.hpp"
#include "spattn/grid.hpp"

namespace spattn {

namespace {

constexpr int64_t kTile = kKeyBlock;  // the kernels' 64-key tile

int64_t tile_of(int64_t pos) { return pos / kTile; }
int64_t residue(int64_t pos, int64_t g_phase, int64_t stride) {
  return ((pos - g_phase) % stride + stride) % stride;
}
int64_t sink_end(const GridConfig& c, int64_t kv_len) {
  return std::min(c.sink_blocks * kTile, kv_len);
}
// First key position the grid pass may add for a row at position `pos`: keys before the local
// band, i.e. in tiles < tile(pos) - local_blocks.
int64_t band_begin(const GridConfig& c, int64_t pos) {
  return std::max<int64_t>(0, (tile_of(pos) - c.local_blocks) * kTile);
}
// The position a key carries in the grid pass: the first row position whose band leaves it out.
int64_t grid_key_position(const GridConfig& c, int64_t j) {
  return (tile_of(j) + c.local_blocks + 1) * kTile;
}
int64_t lines_on(const GridConfig& c) { return int64_t(c.hline) + c.vline + c.slash; }

void check_prefill_alignment(int64_t q_len, int64_t kv_len) {
  SPATTN_CHECK(q_len >= 1 && q_len <= kv_len, "grid: q_len ", q_len,
               " must be in [1, kv_len=", kv_len, "]");
  SPATTN_CHECK((kv_len - q_len) % kTile == 0, "grid: kv_len - q_len (", kv_len - q_len,
               ") must be a multiple of ", kTile, " (query tiles aligned with key tiles)");
}

}  // namespace

void check_grid_config(const GridConfig& c) {
  SPATTN_CHECK(c.hline || c.vline || c.slash,
               "grid: at least one of hline, vline, slash must be on");
  SPATTN_CHECK(c.frame_stride >= 0, "grid: frame_stride must be >= 0 (0: none), got ",
               c.frame_stride);
  SPATTN_CHECK(c.max_stride >= 1, "grid: max_stride must be >= 1, got ", c.max_stride);
  SPATTN_CHECK(c.min_stride >= 1 && c.min_stride <= c.max_stride,
               "grid: min_stride must be in [1, max_stride=", c.max_stride, "], got ",
               c.min_stride);
  SPATTN_CHECK(c.last_q >= 1, "grid: last_q must be >= 1, got ", c.last_q);
  SPATTN_CHECK(c.sink_blocks >= 0, "grid: sink_blocks must be >= 0, got ", c.sink_blocks);
  SPATTN_CHECK(c.local_blocks >= 0, "grid: local_blocks must be >= 0, got ", c.local_blocks);
  SPATTN_CHECK(std::isfinite(c.density_weight) && c.density_weight >= 0,
               "grid: density_weight must be finite and >= 0, got ", c.density_weight);
}

void check_grid_lines(const GridLines& g, int64_t kv_len) {
  SPATTN_CHECK(g.stride >= 1, "grid: stride must be >= 1, got ", g.stride);
  SPATTN_CHECK(g.stride <= kv_len, "grid: stride ", g.stride, " is above the length ", kv_len);
  SPATTN_CHECK(g.phase >= 0 && g.phase < g.stride, "grid: phase must be in [0, stride=", g.stride,
               "), got ", g.phase);
}

std::vector<int64_t> grid_stride_space(const GridConfig& c, int64_t kv_len) {
  check_grid_config(c);
  std::vector<int64_t> s;
  const int64_t hi = std::min(c.max_stride, kv_len);
  if (c.frame_stride > 0)
    for (int64_t div = 1; div <= 8; div *= 2)
      if (c.frame_stride % div == 0 && c.frame_stride / div >= 8) s.push_back(c.frame_stride / div);
  for (int64_t x = 1; x <= hi; x *= 2)
    if (x >= c.min_stride) s.push_back(x);
  s.erase(std::remove_if(s.begin(), s.end(), [&](int64_t x) { return x > hi; }), s.end());
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  SPATTN_CHECK(!s.empty(), "grid: no stride in [", c.min_stride, ", ", hi, "] to search");
  return s;
}

std::vector<GridLines> grid_estimate(const TensorView& q, const TensorView& k, const GridConfig& c,
                                     const AttnOptions& opt) {
  check_grid_config(c);
  SPATTN_CHECK(opt.causal, "grid: needs causal attention");
  SPATTN_CHECK(q.heads > 0 && k.heads > 0 && q.heads % k.heads == 0 && q.dim == k.dim &&
                   q.seq > 0 && q.seq <= k.seq,
               "grid: bad shapes q ", q.shape_str(), ", k ", k.shape_str());
  const int64_t lk = k.seq, n = std::min(c.last_q, q.seq);
  const std::vector<int64_t> strides = grid_stride_space(c, lk);
  const int64_t s_end = sink_end(c, lk);
  std::vector<int64_t> est_rows(static_cast<size_t>(n));
  std::iota(est_rows.begin(), est_rows.end(), q.seq - n);
  // Algorithm 1's A_hat, the same estimate as vertical-slash's (one sgemm per head).
  masks::AHatEstimator est(q, k, nullptr, opt);
  std::vector<double> vert(static_cast<size_t>(lk)), slash(static_cast<size_t>(lk)), bucket;
  std::vector<GridLines> out(size_t(q.heads));
  for (int64_t h = 0; h < q.heads; ++h) {
    std::fill(vert.begin(), vert.end(), 0.0);
    std::fill(slash.begin(), slash.end(), 0.0);
    double total = 0;
    est.head(h, est_rows, [&](int64_t p, const double* e, double l, int64_t) {
      // Only keys the grid pass could add: after the sink tiles, before the local band.
      for (int64_t j = s_end; j < band_begin(c, p); ++j) {
        const double a = e[j] / l;
        vert[size_t(j)] += a;
        slash[size_t(p - j)] += a;
        total += a;
      }
    });
    out[size_t(h)] = grid_choose_lines(vert.data(), slash.data(), total, c, lk, strides, bucket);
  }
  return out;
}

GridLines grid_choose_lines(const double* vert, const double* slash, double total,
                            const GridConfig& c, int64_t kv_len,
                            const std::vector<int64_t>& strides, std::vector<double>& bucket) {
  const int64_t s_end = sink_end(c, kv_len);
  GridLines best{strides.back(), 0};
  double best_score = -1e300;
  for (int64_t s : strides) {
    bucket.assign(size_t(s), 0.0);
    for (int64_t j = s_end; j < kv_len; ++j) bucket[size_t(j % s)] += vert[size_t(j)];
    int64_t ph = 0;
    for (int64_t x = 1; x < s; ++x)
      if (bucket[size_t(x)] > bucket[size_t(ph)]) ph = x;
    double diag = 0;
    for (int64_t o = 0; o < kv_len; o += s) diag += slash[size_t(o)];
    const double captured = (c.vline ? bucket[size_t(ph)] : 0.0) + (c.slash ? diag : 0.0);
    const double share = total > 0 ? captured / total : 0.0;
    const double score = share - c.density_weight * double(lines_on(c)) / double(s);
    if (score > best_score) best_score = score, best = {s, ph};
  }
  return best;
}

int64_t grid_sink_end(const GridConfig& c, int64_t kv_len) { return sink_end(c, kv_len); }

GridLayout grid_layout(const GridLines& g, const GridConfig& c, int64_t q_len, int64_t kv_len) {
  check_grid_config(c);
  check_grid_lines(g, kv_len);
  check_prefill_alignment(q_len, kv_len);
  const int64_t s = g.stride, first = sink_end(c, kv_len), off = kv_len - q_len;
  GridLayout L;
  // Keys by residue class: class c holds first key j >= first with residue c, then every s-th.
  std::vector<KeyRange> cls(static_cast<size_t>(s));
  L.order.reserve(size_t(std::max<int64_t>(0, kv_len - first)));
  for (int64_t r = 0; r < s; ++r) {
    cls[size_t(r)].begin = int64_t(L.order.size());
    int64_t j =
        first + residue(g.phase + r - first, 0, s);  // smallest j >= first, j = phase + r (mod s)
    for (; j < kv_len; j += s) {
      L.order.push_back(j);
      L.positions.push_back(grid_key_position(c, j));
    }
    cls[size_t(r)].end = int64_t(L.order.size());
  }
  L.groups.resize(size_t(s));
  for (int64_t r = 0; r < q_len; ++r)
    L.groups[size_t(residue(off + r, g.phase, s))].rows.push_back(r);
  const KeyRange all{0, int64_t(L.order.size())};
  for (int64_t r = 0; r < s; ++r) {
    auto& keys = L.groups[size_t(r)].keys;
    if (c.hline && r == 0) {
      keys.push_back(all);
      continue;
    }
    if (c.vline) keys.push_back(cls[0]);
    if (c.slash && !(c.vline && r == 0)) keys.push_back(cls[size_t(r)]);
  }
  L.groups.erase(std::remove_if(L.groups.begin(), L.groups.end(),
                                [](const RowGroup& x) { return x.rows.empty() || x.keys.empty(); }),
                 L.groups.end());
  return L;
}

BlockMask grid_band_mask(const GridConfig& c, int64_t heads, int64_t q_len, int64_t kv_len) {
  check_grid_config(c);
  check_prefill_alignment(q_len, kv_len);
  const int64_t off = kv_len - q_len;
  BlockMask m(heads, q_len, kv_len, kTile, kTile, /*causal=*/true);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
      const int64_t t = tile_of(off + qb * kTile);  // every row of the block is in this tile
      const int64_t sinks = std::min(c.sink_blocks, t + 1),
                    lo = std::max<int64_t>(0, t - c.local_blocks);
      for (int64_t b = 0; b < sinks; ++b) m.blocks.push_back(int32_t(b));
      for (int64_t b = std::max(lo, sinks); b <= t; ++b) m.blocks.push_back(int32_t(b));
      m.offsets[size_t(h * m.n_qb() + qb + 1)] = int64_t(m.blocks.size());
    }
  return m;
}

namespace {

class GridCoverage final : public Coverage {
 public:
  GridCoverage(std::vector<GridLines> lines, const GridConfig& c, int64_t q_len, int64_t kv_len)
      : lines_(std::move(lines)), c_(c), q_len_(q_len), kv_len_(kv_len) {}

  void row_ranges(int64_t head, int64_t row, std::vector<KeyRange>& out) const override {
    const GridLines& g = lines_[size_t(head)];
    const int64_t pos = kv_len_ - q_len_ + row, first = sink_end(c_, kv_len_);
    const int64_t band = band_begin(c_, pos), s = g.stride;
    const auto push = [&](int64_t b, int64_t e) {
      if (e <= b) return;
      if (!out.empty() && out.back().end >= b)
        out.back().end = std::max(out.back().end, e);
      else
        out.push_back({b, e});
    };
    push(0, std::min(first, pos + 1));
    // The grid pass: keys in [first, band) on the row's lines.
    const int64_t rc = residue(pos, g.phase, s);
    if (c_.hline && rc == 0) {
      push(first, band);
    } else {
      // Two arithmetic progressions (class 0 and the row's class), merged in order.
      int64_t a = c_.vline ? first + residue(g.phase - first, 0, s) : band;
      int64_t b =
          c_.slash && !(c_.vline && rc == 0) ? first + residue(g.phase + rc - first, 0, s) : band;
      while (a < band || b < band) {
        const int64_t j = std::min(a, b);
        push(j, j + 1);
        if (a == j) a += s;
        if (b == j) b += s;
      }
    }
    push(std::max(band, first), pos + 1);
  }

 private:
  std::vector<GridLines> lines_;
  GridConfig c_;
  int64_t q_len_, kv_len_;
};

}  // namespace

std::unique_ptr<Coverage> grid_coverage(std::vector<GridLines> lines, const GridConfig& c,
                                        int64_t q_len, int64_t kv_len) {
  check_grid_config(c);
  check_prefill_alignment(q_len, kv_len);
  for (const GridLines& g : lines) check_grid_lines(g, kv_len);
  return std::make_unique<GridCoverage>(std::move(lines), c, q_len, kv_len);
}

}  // namespace spattn
