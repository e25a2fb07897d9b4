// Everything a PackedKV holds, compared: the bytes of its whole capacity (slots past size()
// included, which later appends and the kernels' full-tile reads rely on being zero), its
// positions, flags and per-tile spans.
#pragma once
#include <cstring>
#include <string>

#include "kernels/packed_kv.hpp"
#include "spattn/packed_kv.hpp"

namespace spattn::test {

// "" when a and b hold the same state, else what differs first.
inline std::string packed_kv_difference(const PackedKV& a, const PackedKV& b) {
  const kernels::PackedKVData &x = a.data(), &y = b.data();
  if (x.ops != y.ops || x.dtype != y.dtype || x.k_type != y.k_type || x.v_type != y.v_type ||
      x.kv_heads != y.kv_heads || x.dim != y.dim || x.capacity != y.capacity ||
      x.v_is_k != y.v_is_k)
    return "format or geometry";
  if (x.size != y.size) return "size " + std::to_string(x.size) + " vs " + std::to_string(y.size);
  if (x.positions != y.positions) return "positions";
  if (x.identity != y.identity || x.ascending != y.ascending) return "order flags";
  if (x.max_position != y.max_position) return "max_position";
  if (x.tile_min != y.tile_min || x.tile_max != y.tile_max) return "tile spans";
  const size_t tiles = size_t(x.kv_heads * x.tiles_cap);
  if (std::memcmp(x.k.get(), y.k.get(), tiles * size_t(x.k_tile_bytes)) != 0) return "K bytes";
  if (x.v_tile_bytes && std::memcmp(x.v.get(), y.v.get(), tiles * size_t(x.v_tile_bytes)) != 0)
    return "V bytes";
  return "";
}

}  // namespace spattn::test
