// Intra-modality A-shape and vertical-slash indexes (see spattn/modality_heads.hpp).
#include "spattn/modality_heads.hpp"

#include <algorithm>
#include <numeric>

#include "masks/vertical_slash_estimate.hpp"
#include "spattn/error.hpp"

namespace spattn {

std::vector<int64_t> modality_positions(const ModalityLayout& layout, uint8_t modality) {
  std::vector<int64_t> out;
  for (size_t j = 0; j < layout.ids.size(); ++j)
    if (layout.ids[j] == modality) out.push_back(int64_t(j));
  return out;
}

std::vector<int64_t> modality_rows(const ModalityLayout& layout, uint8_t modality, int64_t q_len) {
  const int64_t kv_len = int64_t(layout.ids.size());
  SPATTN_CHECK(q_len >= 0 && q_len <= kv_len, "modality_rows: q_len ", q_len, " must be in [0, ",
               kv_len, "] (the layout's tokens)");
  std::vector<int64_t> out;
  for (int64_t r = 0; r < q_len; ++r)
    if (layout.ids[size_t(query_position(r, q_len, kv_len))] == modality) out.push_back(r);
  return out;
}

namespace {

void check_modality(const ModalityLayout& layout, uint8_t modality, int64_t q_len, int64_t kv_len,
                    const char* who) {
  layout.validate(kv_len);
  SPATTN_CHECK(modality <= kMaxModality, who, ": modality ", int(modality), " is not an id (0..",
               int(kMaxModality), ")");
  SPATTN_CHECK(q_len >= 1 && q_len <= kv_len, who, ": q_len ", q_len, " must be in [1, ", kv_len,
               "]");
}

}  // namespace

VerticalSlashIndex a_shape_index_for_modality(const ModalityLayout& layout, uint8_t modality,
                                              int64_t heads, int64_t q_len, int64_t kv_len,
                                              int64_t sink, int64_t local, int64_t tile_rows) {
  const char* who = "a_shape_index_for_modality";
  check_modality(layout, modality, q_len, kv_len, who);
  SPATTN_CHECK(heads >= 1, who, ": heads must be >= 1, got ", heads);
  SPATTN_CHECK(sink >= 0, who, ": sink must be >= 0, got ", sink);
  SPATTN_CHECK(local >= 1, who, ": local must be >= 1 (each row sees itself), got ", local);
  SPATTN_CHECK(tile_rows >= 1 && tile_rows <= 128, who, ": tile_rows must be in [1, 128], got ",
               tile_rows);
  std::vector<int64_t> sinks = modality_positions(layout, modality);
  sinks.resize(std::min(sinks.size(), size_t(sink)));
  std::vector<int64_t> diagonals(static_cast<size_t>(std::min(local, kv_len)));
  std::iota(diagonals.begin(), diagonals.end(), 0);
  VerticalSlashIndex x;
  x.heads = heads;
  x.tile_rows = tile_rows;
  x.columns.assign(size_t(heads), sinks);
  x.offsets.assign(size_t(heads), diagonals);
  x.rows = modality_rows(layout, modality, q_len);
  return x;
}

VerticalSlashIndex vertical_slash_index_for_modality(const TensorView& q, const TensorView& k,
                                                     const ModalityLayout& layout, uint8_t modality,
                                                     const VerticalSlashConfig& c,
                                                     const AttnOptions& opt) {
  const char* who = "vertical_slash_index_for_modality";
  check_vertical_slash_config(c);
  SPATTN_CHECK(opt.causal, who, ": needs causal attention");
  SPATTN_CHECK(q.heads > 0 && k.heads > 0 && q.heads % k.heads == 0 && q.dim == k.dim, who,
               ": bad shapes q ", q.shape_str(), ", k ", k.shape_str());
  check_modality(layout, modality, q.seq, k.seq, who);
  std::vector<int64_t> rows = modality_rows(layout, modality, q.seq);
  const std::vector<int64_t> keys = modality_positions(layout, modality);
  // The modality's last queries: the newest rows of its newest segments (§3.2).
  const size_t n = std::min(rows.size(), size_t(c.last_q));
  const std::vector<int64_t> est_rows(rows.end() - std::ptrdiff_t(n), rows.end());
  std::vector<int64_t> forced(std::min(keys.size(), size_t(c.sink)));
  std::iota(forced.begin(), forced.end(), 0);
  VerticalSlashIndex x = masks::estimate_vertical_slash(q, k, c, opt, est_rows, &keys, forced);
  x.rows = std::move(rows);
  return x;
}

}  // namespace spattn
