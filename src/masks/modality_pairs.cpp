// Boundary-head pieces (Q-boundary and 2D-boundary), their kernel plan and their coverage (spattn/modality_boundary.hpp).
// pair_plan is the one place a pair's mask is turned into keys: the kernel driver and the
// coverage both read it, so coverage is exactly what the kernel computed.
#include <algorithm>
#include <numeric>

#include "masks/vertical_slash_estimate.hpp"
#include "spattn/error.hpp"
#include "spattn/modality_boundary.hpp"
#include "spattn/modality_heads.hpp"

namespace spattn {

namespace {

// Modalities that have at least one token.
std::vector<uint8_t> present_modalities(const ModalityLayout& layout) {
  std::vector<uint8_t> seen(size_t(kMaxModality) + 1, 0), out;
  for (uint8_t id : layout.ids) seen[id] = 1;
  for (size_t m = 0; m < seen.size(); ++m)
    if (seen[m]) out.push_back(uint8_t(m));
  return out;
}

// Tiles of at most 64 rows, cut where the rows stop being consecutive: a tile spanning two
// segments of its modality would give its rows every diagonal key in between.
std::vector<std::vector<int64_t>> consecutive_tiles(const std::vector<int64_t>& rows) {
  std::vector<std::vector<int64_t>> tiles;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (tiles.empty() || tiles.back().size() == 64 || rows[i] != tiles.back().back() + 1)
      tiles.emplace_back();
    tiles.back().push_back(rows[i]);
  }
  return tiles;
}

void coalesce(std::vector<KeyRange>& r) {
  std::sort(r.begin(), r.end(),
            [](const KeyRange& a, const KeyRange& b) { return a.begin < b.begin; });
  size_t n = 0;
  for (const KeyRange& x : r) {
    if (x.begin >= x.end) continue;
    if (n > 0 && x.begin <= r[n - 1].end)
      r[n - 1].end = std::max(r[n - 1].end, x.end);
    else
      r[n++] = x;
  }
  r.resize(n);
}

}  // namespace

namespace {
// The keys a piece may hold, ascending.
std::vector<int64_t> piece_keys(const ModalityLayout& layout, uint8_t k_modality) {
  if (k_modality != kAnyModality) return modality_positions(layout, k_modality);
  std::vector<int64_t> all(layout.ids.size());
  std::iota(all.begin(), all.end(), 0);
  return all;
}
}  // namespace

std::vector<ModalityPairIndex> vertical_slash_pairs(const ModalityLayout& layout, int64_t q_len,
                                                    const VerticalSlashConfig& c, bool split_keys,
                                                    const PieceEstimate& estimate) {
  check_vertical_slash_config(c);
  const int64_t kv_len = int64_t(layout.ids.size());
  SPATTN_CHECK(q_len >= 1 && q_len <= kv_len, "vertical_slash_pairs: q_len ", q_len,
               " must be in [1, ", kv_len, "]");
  std::vector<ModalityPairIndex> out;
  const std::vector<uint8_t> mods = present_modalities(layout);
  const std::vector<uint8_t> key_mods = split_keys ? mods : std::vector<uint8_t>{kAnyModality};
  for (uint8_t mq : mods) {
    const std::vector<int64_t> rows = modality_rows(layout, mq, q_len);
    if (rows.empty()) continue;
    // The query modality's last queries (section 3.2: its final segment).
    const size_t n = std::min(rows.size(), size_t(c.last_q));
    const std::vector<int64_t> est_rows(rows.end() - std::ptrdiff_t(n), rows.end());
    for (uint8_t mk : key_mods) {
      VerticalSlashIndex x = estimate(est_rows, piece_keys(layout, mk));
      SPATTN_CHECK(x.columns.size() == 1 && x.offsets.size() == 1,
                   "vertical_slash_pairs: a piece's estimate must give one head");
      ModalityPairIndex p;
      p.q_modality = mq, p.k_modality = mk;
      p.columns = std::move(x.columns[0]);
      p.offsets = std::move(x.offsets[0]);
      out.push_back(std::move(p));
    }
  }
  return out;
}

std::vector<ModalityPairIndex> vertical_slash_pairs(const TensorView& q, const TensorView& k,
                                                    const ModalityLayout& layout,
                                                    const VerticalSlashConfig& c,
                                                    const AttnOptions& opt, bool split_keys) {
  SPATTN_CHECK(opt.causal, "vertical_slash_pairs: needs causal attention");
  SPATTN_CHECK(q.heads == 1 && k.heads == 1 && q.dim == k.dim && q.seq >= 1 && q.seq <= k.seq,
               "vertical_slash_pairs: takes one head, got q ", q.shape_str(), ", k ",
               k.shape_str());
  layout.validate(k.seq);
  return vertical_slash_pairs(
      layout, q.seq, c, split_keys,
      [&](const std::vector<int64_t>& est_rows, const std::vector<int64_t>& keys) {
        std::vector<int64_t> forced(std::min(keys.size(), size_t(c.sink)));
        std::iota(forced.begin(), forced.end(), 0);
        return masks::estimate_vertical_slash(q, k, c, opt, est_rows, &keys, forced);
      });
}

std::vector<ModalityPairIndex> a_shape_pairs(const ModalityLayout& layout, int64_t q_len,
                                             int64_t sink, int64_t local, bool split_keys) {
  SPATTN_CHECK(sink >= 0, "a_shape_pairs: sink must be >= 0, got ", sink);
  SPATTN_CHECK(local >= 1, "a_shape_pairs: local must be >= 1, got ", local);
  const int64_t kv_len = int64_t(layout.ids.size());
  SPATTN_CHECK(q_len >= 1 && q_len <= kv_len, "a_shape_pairs: q_len ", q_len, " must be in [1, ",
               kv_len, "]");
  std::vector<int64_t> diagonals(size_t(std::min(local, kv_len)));
  std::iota(diagonals.begin(), diagonals.end(), 0);
  std::vector<ModalityPairIndex> out;
  const std::vector<uint8_t> mods = present_modalities(layout);
  const std::vector<uint8_t> key_mods = split_keys ? mods : std::vector<uint8_t>{kAnyModality};
  for (uint8_t mq : mods) {
    if (modality_rows(layout, mq, q_len).empty()) continue;
    for (uint8_t mk : key_mods) {
      ModalityPairIndex p;
      p.q_modality = mq, p.k_modality = mk;
      // The sink of the key modality, or for a Q-boundary piece the query modality's own.
      p.columns = modality_positions(layout, mk == kAnyModality ? mq : mk);
      p.columns.resize(std::min(p.columns.size(), size_t(sink)));
      p.offsets = diagonals;
      out.push_back(std::move(p));
    }
  }
  return out;
}

PairPlan pair_plan(const ModalityPairIndex& p, const ModalityLayout& layout, int64_t q_len) {
  const int64_t kv_len = int64_t(layout.ids.size());
  for (size_t i = 0; i < p.columns.size(); ++i) {
    const int64_t c = p.columns[i];
    SPATTN_CHECK(c >= 0 && c < kv_len &&
                     (p.k_modality == kAnyModality || layout.ids[size_t(c)] == p.k_modality),
                 "pair_plan: column ", c, " is not a key of modality ", int(p.k_modality));
    SPATTN_CHECK(i == 0 || c > p.columns[i - 1], "pair_plan: columns must be strictly increasing");
  }
  for (size_t i = 0; i < p.offsets.size(); ++i)
    SPATTN_CHECK(p.offsets[i] >= 0 && (i == 0 || p.offsets[i] > p.offsets[i - 1]),
                 "pair_plan: offsets must be >= 0 and strictly increasing");
  PairPlan plan;
  const std::vector<int64_t>& cols = p.columns;
  std::vector<int64_t> rest;  // the key modality's keys that are not columns, ascending
  for (int64_t j : piece_keys(layout, p.k_modality))
    if (!std::binary_search(cols.begin(), cols.end(), j)) rest.push_back(j);
  plan.order = cols;
  plan.order.insert(plan.order.end(), rest.begin(), rest.end());
  const int64_t nc = int64_t(cols.size());
  for (std::vector<int64_t>& rows : consecutive_tiles(modality_rows(layout, p.q_modality, q_len))) {
    PairTile t;
    const int64_t p0 = query_position(rows.front(), q_len, kv_len);
    const int64_t p1 = query_position(rows.back(), q_len, kv_len);
    const int64_t visible_cols = std::upper_bound(cols.begin(), cols.end(), p1) - cols.begin();
    if (visible_cols > 0) t.keys.push_back({0, visible_cols});
    // A run of consecutive diagonals o0..o1 covers [p0 - o1, p1 - o0]: one search per run
    // (A-shape's local band is one run).
    for (size_t x = 0; x < p.offsets.size();) {
      size_t y = x;
      while (y + 1 < p.offsets.size() && p.offsets[y + 1] == p.offsets[y] + 1) ++y;
      const int64_t o0 = p.offsets[x], o1 = p.offsets[y];
      x = y + 1;
      if (p1 - o0 < 0) break;  // offsets ascend: the rest are further left still
      const int64_t a =
          std::lower_bound(rest.begin(), rest.end(), std::max<int64_t>(0, p0 - o1)) - rest.begin();
      const int64_t b = std::upper_bound(rest.begin(), rest.end(), p1 - o0) - rest.begin();
      if (a < b) t.keys.push_back({nc + a, nc + b});
    }
    coalesce(t.keys);
    t.rows = std::move(rows);
    if (!t.keys.empty()) plan.tiles.push_back(std::move(t));
  }
  return plan;
}

namespace {

// Row queries walk the row's tile's packed ranges back to positions: building costs one pass
// over the rows, so run() (which builds it) is not charged for what only recall reads.
class PairsCoverage final : public Coverage {
 public:
  PairsCoverage(std::vector<PairPlan> plans, int64_t q_len, int64_t kv_len)
      : plans_(std::move(plans)), q_len_(q_len), kv_len_(kv_len) {
    for (const PairPlan& plan : plans_) {
      std::vector<int32_t> tile_of(size_t(q_len), -1);
      for (size_t t = 0; t < plan.tiles.size(); ++t)
        for (int64_t r : plan.tiles[t].rows) tile_of[size_t(r)] = int32_t(t);
      tile_of_.push_back(std::move(tile_of));
    }
  }
  void row_ranges(int64_t, int64_t row, std::vector<KeyRange>& out) const override {
    const int64_t lim = causal_limit(row, q_len_, kv_len_);
    std::vector<KeyRange> r;
    for (size_t x = 0; x < plans_.size(); ++x) {
      const int32_t t = tile_of_[x][size_t(row)];
      if (t < 0) continue;
      const PairPlan& plan = plans_[x];
      for (const KeyRange& kr : plan.tiles[size_t(t)].keys)
        for (int64_t i = kr.begin; i < kr.end; ++i) {
          const int64_t j = plan.order[size_t(i)];
          if (j >= lim) continue;
          if (!r.empty() && r.back().end == j)
            ++r.back().end;
          else
            r.push_back({j, j + 1});
        }
    }
    coalesce(r);
    out.insert(out.end(), r.begin(), r.end());
  }

 private:
  std::vector<PairPlan> plans_;
  std::vector<std::vector<int32_t>> tile_of_;  // per plan: q row -> tile, -1 when not its row
  int64_t q_len_, kv_len_;
};

}  // namespace

std::vector<PairPlan> pair_plans(const std::vector<ModalityPairIndex>& pairs,
                                 const ModalityLayout& layout, int64_t q_len) {
  std::vector<PairPlan> plans;
  plans.reserve(pairs.size());
  for (const ModalityPairIndex& p : pairs) plans.push_back(pair_plan(p, layout, q_len));
  return plans;
}

std::unique_ptr<Coverage> modality_pairs_coverage(std::vector<PairPlan> plans, int64_t q_len,
                                                  int64_t kv_len) {
  return std::make_unique<PairsCoverage>(std::move(plans), q_len, kv_len);
}

}  // namespace spattn
