// PackedKV: packing K/V once into the loop's tile layout (per SIMD target, since the packers
// live with the micro-kernels in flash-inl.h), appending in pieces or in a chosen key order.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/packed_kv.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "kernels/flash-inl.h"

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {
void AppendEntry(PackedKVData* kv, const TensorView* k, const TensorView* v,
                 const int64_t* src_rows, int64_t first, int64_t n, int threads) {
  PackAppend(*kv, *k, *v, src_rows, first, n, threads);
}
Operands OperandsEntry(DType dtype, bool bf16_dot) { return OperandsHere(dtype, bf16_dot); }
// Tiles [0, tiles) of every head of src widened into dst's f32 tiles.
void WidenTilesEntry(const PackedKVData* src, PackedKVData* dst, int64_t tiles) {
  for (int64_t h = 0; h < src->kv_heads; ++h)
    for (int64_t t = 0; t < tiles; ++t) {
      WidenTileK(*src, h, t, dst->k_tile<float>(h, t));
      WidenKeysVOf(*src, h, t, 0, kTileKeys, dst->v_tile<float>(h, t), 0);
    }
}
}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <cstring>

#include "core/threading.hpp"
#include "spattn/packed_kv.hpp"

namespace spattn {
namespace kernels {
HWY_EXPORT(AppendEntry);
HWY_EXPORT(OperandsEntry);
HWY_EXPORT(WidenTilesEntry);

Operands operands_for(DType dtype, bool bf16_dot) {
  return HWY_DYNAMIC_DISPATCH(OperandsEntry)(dtype, bf16_dot);
}

void init_packed(PackedKVData& kv, Operands ops, DType dtype, int64_t kv_heads, int64_t dim,
                 int64_t capacity, bool zero_all, KVType k_type, KVType v_type, bool v_is_k) {
  SPATTN_CHECK(kv_heads > 0, "PackedKV: kv heads must be > 0, got ", kv_heads);
  SPATTN_CHECK(dim > 0 && dim % 8 == 0 && dim <= kMaxHeadDim,
               "PackedKV: head dim must be a multiple of 8 up to ", kMaxHeadDim, ", got ", dim);
  SPATTN_CHECK(capacity > 0 && capacity <= (int64_t(1) << 31),
               "PackedKV: capacity must be in [1, 2^31] keys, got ", capacity);
  for (KVType t : {k_type, v_type})
    SPATTN_CHECK(t != KVType::q8_0 || dim % 32 == 0,
                 "PackedKV: a q8_0 cache needs a head dim "
                 "that is a multiple of 32 (q8_0 blocks are 32 values), got ",
                 dim);
  SPATTN_CHECK(ops == Operands::f32 || (k_type == KVType::f32 && v_type == KVType::f32),
               "internal: bf16 dot operands keep their own storage");
  SPATTN_CHECK(!v_is_k || ops == Operands::f32, "internal: V read from K needs f32 operands");
  if (v_is_k) v_type = k_type;
  kv = PackedKVData{};
  kv.v_is_k = v_is_k;
  kv.ops = ops;
  kv.dtype = dtype;
  kv.k_type = k_type;
  kv.v_type = v_type;
  kv.kv_heads = kv_heads;
  kv.dim = dim;
  kv.dp = (dim + 15) / 16 * 16;
  kv.capacity = capacity;
  kv.tiles_cap = (capacity + kTileKeys - 1) / kTileKeys;
  kv.k_elems = dim * kTileKeys;
  kv.v_elems = kTileKeys * kv.dp;
  // Whole blocks of the stored type (q8_0: one f16 scale per 32 values; every layout holds 64
  // keys x a multiple of 32 dims); bf16 dot operands keep their own storage, bf16 pairs.
  const auto tile_bytes = [&](KVType t, int64_t elems) {
    const auto of = [&](const StorageTraits& s) { return elems / s.block * s.block_bytes; };
    switch (ops) {
      case Operands::bf16_dot: return of(traits(ops));
      case Operands::f32: break;
    }
    return of(traits(t));
  };
  // Where V is K its one tile has V's layout (PackedKVData::v_is_k).
  kv.k_tile_bytes = tile_bytes(k_type, v_is_k ? kTileKeys * kv.v_row() : kv.k_elems);
  kv.v_tile_bytes = v_is_k ? 0 : tile_bytes(v_type, kv.v_elems);
  const size_t tiles = size_t(kv_heads * kv.tiles_cap);
  const auto bytes = [&](int64_t per_tile) {
    return per_tile == 0
               ? nullptr
               : static_cast<unsigned char*>(aligned_alloc_bytes(tiles * size_t(per_tile)));
  };
  kv.k.reset(bytes(kv.k_tile_bytes));
  kv.v.reset(bytes(kv.v_tile_bytes));
  empty_packed(kv, zero_all);
}

namespace {
// No keys recorded (storage untouched).
void forget_positions(PackedKVData& kv) {
  kv.size = 0;
  kv.positions.clear();
  kv.identity = kv.ascending = true;
  kv.max_position = -1;
  kv.tile_min.assign(size_t(kv.tiles_cap), std::numeric_limits<int64_t>::max());
  kv.tile_max.assign(size_t(kv.tiles_cap), -1);
}

// Zeroes tiles [t0, t1) of every head.
void zero_tiles(PackedKVData& kv, int64_t t0, int64_t t1) {
  if (t1 <= t0) return;
  const size_t kt = size_t(kv.k_tile_bytes), vt = size_t(kv.v_tile_bytes);
  for (int64_t h = 0; h < kv.kv_heads; ++h) {
    const size_t first = size_t(h * kv.tiles_cap + t0), count = size_t(t1 - t0);
    std::memset(kv.k.get() + first * kt, 0, count * kt);
    if (vt) std::memset(kv.v.get() + first * vt, 0, count * vt);
  }
}
}  // namespace

void clear_slots(PackedKVData& kv, int64_t from, int64_t to) {
  if (to <= from) return;
  const int64_t t_from = from / kTileKeys, t_to = (to + kTileKeys - 1) / kTileKeys;
  // Whole tiles at once; only the first tile may keep slots below `from`.
  const int64_t a = from % kTileKeys;
  zero_tiles(kv, a == 0 ? t_from : t_from + 1, t_to);
  if (a == 0) return;
  const int64_t b = std::min(to - t_from * kTileKeys, kTileKeys);  // slots [a, b) of tile t_from
  const int64_t d = kv.dim, dp = kv.dp;
  for (int64_t h = 0; h < kv.kv_heads; ++h) {
    if (kv.ops == Operands::f32) {
      // K [d][64] (16-bit types: stored_k_index) and V [64][dp] in the stored element size;
      // q8_0's scales after the values, K's [d/32][64], V's [64][dp/32]. Where V is K, its
      // tile is V's (v_bytes names it).
      unsigned char* kt = kv.k_bytes(h, t_from);
      unsigned char* vt = kv.v_bytes(h, t_from);
      const int64_t ke = traits(kv.k_type).value_bytes(), ve = traits(kv.v_type).value_bytes();
      for (int64_t c = 0; c < d && !kv.v_is_k; ++c)
        for (int64_t j = a; j < b; ++j)
          std::memset(kt + stored_k_slot(kv.k_type, d, c, j) * ke, 0, size_t(ke));
      const int64_t rs = kv.v_row();
      std::memset(vt + a * rs * ve, 0, size_t((b - a) * rs * ve));
      if (kv.k_type == KVType::q8_0 && !kv.v_is_k) {
        uint16_t* sc = reinterpret_cast<uint16_t*>(kt + d * kTileKeys);
        for (int64_t c = 0; c < d / 32; ++c)
          std::fill(sc + c * kTileKeys + a, sc + c * kTileKeys + b, uint16_t(0));
      }
      if (kv.v_type == KVType::q8_0) {
        uint16_t* sc = reinterpret_cast<uint16_t*>(vt + kTileKeys * dp);
        std::fill(sc + a * (dp / 32), sc + b * (dp / 32), uint16_t(0));
      }
    } else {  // bf16 pairs: K [d/2][64][2] (dims paired), V [32][dp][2] (keys paired)
      uint16_t* kt = kv.k_tile<uint16_t>(h, t_from);
      uint16_t* vt = kv.v_tile<uint16_t>(h, t_from);
      for (int64_t c2 = 0; c2 < d / 2; ++c2)
        std::fill(kt + (c2 * kTileKeys + a) * 2, kt + (c2 * kTileKeys + b) * 2, uint16_t(0));
      for (int64_t j = a; j < b; ++j)
        for (int64_t c = 0; c < dp; ++c) vt[(j / 2) * dp * 2 + c * 2 + (j & 1)] = 0;
    }
  }
}

void empty_packed(PackedKVData& kv, bool zero_all) {
  const size_t kt = size_t(kv.k_tile_bytes), vt = size_t(kv.v_tile_bytes);
  // Zero slots are what the micro-kernels read past the last key; appends rely on them.
  if (zero_all) {
    std::memset(kv.k.get(), 0, size_t(kv.kv_heads * kv.tiles_cap) * kt);
    if (vt) std::memset(kv.v.get(), 0, size_t(kv.kv_heads * kv.tiles_cap) * vt);
  } else {
    for (int64_t h = 0; h < kv.kv_heads; ++h) {
      const size_t last = size_t(h * kv.tiles_cap + kv.tiles_cap - 1);
      std::memset(kv.k.get() + last * kt, 0, kt);
      if (vt) std::memset(kv.v.get() + last * vt, 0, vt);
    }
  }
  forget_positions(kv);
}

void check_positions(const PackedKVData& kv, const int64_t* positions, int64_t n) {
  SPATTN_CHECK(n >= 0 && kv.size + n <= kv.capacity, "PackedKV: appending ", n, " keys to ",
               kv.size, " exceeds the capacity of ", kv.capacity);
  for (int64_t i = 0; positions && i < n; ++i)
    SPATTN_CHECK(positions[i] >= 0 && positions[i] < (int64_t(1) << 40), "PackedKV: position ",
                 positions[i], " of key ", i, " is out of range [0, 2^40)");
}

namespace {
// Key idx (== kv.size) at position pos: the flags and spans it changes, then size.
void record_key(PackedKVData& kv, int64_t pos) {
  const int64_t idx = kv.size;
  if (kv.identity && pos != idx) kv.identity = false;
  if (kv.ascending && idx > 0 && pos <= kv.positions[size_t(idx - 1)]) kv.ascending = false;
  kv.max_position = std::max(kv.max_position, pos);
  const size_t t = size_t(idx / kTileKeys);
  kv.tile_min[t] = std::min(kv.tile_min[t], pos);
  kv.tile_max[t] = std::max(kv.tile_max[t], pos);
  kv.size = idx + 1;
}
}  // namespace

void reserve_positions(PackedKVData& kv, int64_t n) {
  const size_t need = size_t(kv.size + n), have = kv.positions.capacity();
  if (have < need)  // need <= capacity (check_positions)
    kv.positions.reserve(std::max(need, std::min(2 * have, size_t(kv.capacity))));
}

void add_positions(PackedKVData& kv, const int64_t* positions, int64_t n) {
  check_positions(kv, positions, n);
  reserve_positions(kv, n);  // the one allocation, before anything changes
  for (int64_t i = 0; i < n; ++i) {
    kv.positions.push_back(positions ? positions[i] : kv.size);
    record_key(kv, kv.positions.back());
  }
}

void keep_keys(PackedKVData& kv, int64_t n) {
  clear_slots(kv, n, kv.size);
  kv.positions.resize(size_t(n));  // shrinks: no allocation
  kv.size = 0;
  kv.identity = kv.ascending = true;
  kv.max_position = -1;
  std::fill(kv.tile_min.begin(), kv.tile_min.end(), std::numeric_limits<int64_t>::max());
  std::fill(kv.tile_max.begin(), kv.tile_max.end(), -1);
  for (int64_t i = 0; i < n; ++i) record_key(kv, kv.positions[size_t(i)]);
}

void widen_packed(const PackedKVData& src, PackedKVData& dst) {
  SPATTN_CHECK(src.ops == Operands::f32, "internal: a bf16-pair cache is not widened");
  init_packed(dst, Operands::f32, src.dtype, src.kv_heads, src.dim, std::max<int64_t>(src.size, 1),
              /*zero_all=*/false);
  // Slots past size read as zero in src (clear_slots), so the last tile widens to zeros there.
  const int64_t tiles = (src.size + kTileKeys - 1) / kTileKeys;
  HWY_DYNAMIC_DISPATCH(WidenTilesEntry)(&src, &dst, tiles);
  add_positions(dst, src.positions.data(), src.size);
}

void key_rows(const PackedKVData& kv, std::vector<float>& rows) {
  SPATTN_CHECK(!kv.widened() && kv.ops == Operands::f32,
               "internal: key rows are read from f32 tiles");
  rows.resize(size_t(kv.kv_heads * kv.size * kv.dim));
  for (int64_t h = 0; h < kv.kv_heads; ++h)
    for (int64_t j0 = 0; j0 < kv.size; j0 += kTileKeys) {
      const float* tile = kv.k_tile<float>(h, j0 / kTileKeys);
      const int64_t n = std::min(kTileKeys, kv.size - j0);
      float* dst = rows.data() + (h * kv.size + j0) * kv.dim;
      for (int64_t c = 0; c < kv.dim; ++c)
        for (int64_t j = 0; j < n; ++j) dst[j * kv.dim + c] = tile[c * kTileKeys + j];
    }
}

int64_t PackedKVData::causal_prefix(int64_t pos) const {
  if (identity) return std::clamp<int64_t>(pos + 1, 0, size);
  if (ascending)
    return int64_t(std::upper_bound(positions.begin(), positions.end(), pos) - positions.begin());
  return size;
}

void check_tensor(const TensorView& t, const char* name, bool finite);

}  // namespace kernels

namespace {
void check_kv(const kernels::PackedKVData& d, const TensorView& k, const TensorView& v) {
  kernels::check_tensor(k, "k", true);
  kernels::check_tensor(v, "v", true);
  SPATTN_CHECK(k.heads == d.kv_heads && v.heads == d.kv_heads && k.dim == d.dim && v.dim == d.dim &&
                   k.seq == v.seq,
               "PackedKV: k ", k.shape_str(), " and v ", v.shape_str(), " must both be [",
               d.kv_heads, ", n, ", d.dim, "]");
  SPATTN_CHECK(k.dtype == d.dtype && v.dtype == d.dtype, "PackedKV holds ", dtype_name(d.dtype),
               " keys; k is ", dtype_name(k.dtype), " and v ", dtype_name(v.dtype));
}
}  // namespace

PackedKV::PackedKV(int64_t kv_heads, int64_t dim, DType dtype, int64_t capacity, bool bf16_dot,
                   KVType k_type, KVType v_type, bool v_is_k)
    : d_(std::make_unique<kernels::PackedKVData>()) {
  // A stored type other than f32 is read through the f32 operands (widened per tile), except
  // bf16 for both, which bf16 inputs may keep as bf16 pairs for vdpbf16ps (bf16_dot).
  const bool f32_store = k_type == KVType::f32 && v_type == KVType::f32;
  const bool bf16_store = k_type == KVType::bf16 && v_type == KVType::bf16;
  kernels::Operands ops = kernels::Operands::f32;
  // Values read from the keys are transposed from f32 K tiles: the f32 operands only.
  if ((f32_store || bf16_store) && !v_is_k) ops = kernels::operands_for(dtype, bf16_dot);
  if (ops == kernels::Operands::bf16_dot) k_type = v_type = KVType::f32;  // the pairs' own
  kernels::init_packed(*d_, ops, dtype, kv_heads, dim, capacity, true, k_type, v_type, v_is_k);
}
PackedKV::PackedKV(PackedKV&&) noexcept = default;
PackedKV& PackedKV::operator=(PackedKV&&) noexcept = default;
PackedKV::~PackedKV() = default;

PackedKV PackedKV::pack(const TensorView& k, const TensorView& v, int64_t capacity, int threads,
                        bool bf16_dot, KVType k_type, KVType v_type, bool v_is_k) {
  SPATTN_CHECK(capacity == 0 || capacity >= k.seq, "PackedKV: capacity ", capacity,
               " is below the ", k.seq, " keys given");
  PackedKV kv(k.heads, k.dim, k.dtype, capacity ? capacity : k.seq, bf16_dot, k_type, v_type,
              v_is_k);
  kv.append(k, v, {}, threads);
  return kv;
}

void PackedKV::append(const TensorView& k, const TensorView& v, std::span<const int64_t> positions,
                      int threads) {
  check_kv(*d_, k, v);
  SPATTN_CHECK(positions.empty() || int64_t(positions.size()) == k.seq,
               "PackedKV: ", positions.size(), " positions for ", k.seq, " keys");
  const int64_t base = d_->size;
  std::vector<int64_t> natural;
  if (positions.empty()) {
    natural.resize(size_t(k.seq));
    for (int64_t i = 0; i < k.seq; ++i) natural[size_t(i)] = base + i;
    positions = natural;
  }
  write_rows(k, v, nullptr, positions.data(), k.seq, threads);
}

void PackedKV::append_rows(const TensorView& k, const TensorView& v, std::span<const int64_t> order,
                           std::span<const int64_t> positions, int threads) {
  check_kv(*d_, k, v);
  const int64_t n = int64_t(order.size());
  SPATTN_CHECK(positions.empty() || positions.size() == order.size(),
               "PackedKV: ", positions.size(), " positions for ", n, " rows");
  std::vector<uint8_t> seen(size_t(k.seq), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = order[size_t(i)];
    SPATTN_CHECK(r >= 0 && r < k.seq, "PackedKV: row ", r, " (order entry ", i, ") is outside [0, ",
                 k.seq, ")");
    SPATTN_CHECK(!seen[size_t(r)], "PackedKV: row ", r, " appears twice in the order");
    seen[size_t(r)] = 1;
  }
  write_rows(k, v, order.data(), positions.empty() ? order.data() : positions.data(), n, threads);
}

// The rows go into the slots past size() first and size() grows after, so a failure on the
// way (a format this SIMD target cannot write, a thread's exception) leaves the cache as it
// was: the slots it wrote are zeroed again.
void PackedKV::write_rows(const TensorView& k, const TensorView& v, const int64_t* src_rows,
                          const int64_t* positions, int64_t n, int threads) {
  kernels::PackedKVData& d = *d_;
  kernels::check_positions(d, positions, n);
  const int t = resolve_threads(threads);
  kernels::reserve_positions(d, n);
  try {
    HWY_DYNAMIC_DISPATCH(kernels::AppendEntry)(&d, &k, &v, src_rows, d.size, n, t);
  } catch (...) {
    kernels::clear_slots(d, d.size, d.size + n);
    throw;
  }
  kernels::add_positions(d, positions, n);  // checked and reserved: cannot throw now
}

void PackedKV::clear() { kernels::empty_packed(*d_, /*zero_all=*/true); }

void PackedKV::truncate(int64_t n) {
  kernels::PackedKVData& d = *d_;
  SPATTN_CHECK(n >= 0 && n <= d.size, "PackedKV: truncate to ", n, " keys, outside [0, ", d.size,
               "]");
  if (n < d.size) kernels::keep_keys(d, n);
}

PackedKV PackedKV::copy(int64_t keys) const {
  const kernels::PackedKVData& d = *d_;
  if (keys < 0) keys = d.size;
  SPATTN_CHECK(keys <= d.size, "PackedKV: copy of ", keys, " keys from ", d.size);
  PackedKV c;
  c.d_ = std::make_unique<kernels::PackedKVData>();
  kernels::PackedKVData& e = *c.d_;
  kernels::init_packed(e, d.ops, d.dtype, d.kv_heads, d.dim, d.capacity, /*zero_all=*/false,
                       d.k_type, d.v_type, d.v_is_k);
  // The tiles holding keys are copied, the rest zeroed; then the last one's tail past `keys`.
  const int64_t tiles = (keys + kernels::kTileKeys - 1) / kernels::kTileKeys;
  const size_t kt = size_t(d.k_tile_bytes), vt = size_t(d.v_tile_bytes);
  for (int64_t h = 0; h < d.kv_heads; ++h) {
    const size_t first = size_t(h * d.tiles_cap);
    std::memcpy(e.k.get() + first * kt, d.k.get() + first * kt, size_t(tiles) * kt);
    if (vt) std::memcpy(e.v.get() + first * vt, d.v.get() + first * vt, size_t(tiles) * vt);
  }
  kernels::zero_tiles(e, tiles, e.tiles_cap);
  kernels::clear_slots(e, keys, tiles * kernels::kTileKeys);
  kernels::add_positions(e, d.positions.data(), keys);
  return c;
}

// Scalar: a caller reads back a few keys (a summary rebuilt after a truncation), never a tile.
void PackedKV::read_key(int64_t kvh, int64_t i, float* out) const {
  const kernels::PackedKVData& d = *d_;
  SPATTN_CHECK(d.ops == kernels::Operands::f32,
               "PackedKV: read_key of a cache packed as bf16 pairs is not supported");
  SPATTN_CHECK(kvh >= 0 && kvh < d.kv_heads && i >= 0 && i < d.size, "PackedKV: read_key(", kvh,
               ", ", i, ") outside ", d.kv_heads, " heads x ", d.size, " keys");
  const int64_t t = i / kernels::kTileKeys, jj = i % kernels::kTileKeys, n = d.dim;
  const unsigned char* tile = d.k_bytes(kvh, t);
  if (d.v_is_k) {  // the key is its value row (V's layout)
    const int64_t dp = d.v_row();
    switch (d.k_type) {
      case KVType::f32:
        std::memcpy(out, reinterpret_cast<const float*>(tile) + jj * dp, size_t(n) * 4);
        return;
      case KVType::f16:
      case KVType::bf16: {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(tile) + jj * dp;
        for (int64_t c = 0; c < n; ++c)
          out[c] = d.k_type == KVType::f16 ? f16_to_f32(h[c]) : bf16_to_f32(h[c]);
        return;
      }
      case KVType::q8_0: {  // int8 [64][dp], then f16 scales [64][dp/32]
        const int8_t* q = reinterpret_cast<const int8_t*>(tile) + jj * dp;
        const uint16_t* sc =
            reinterpret_cast<const uint16_t*>(tile + kernels::kTileKeys * dp) + jj * (dp / 32);
        for (int64_t c = 0; c < n; ++c) out[c] = float(q[c]) * f16_to_f32(sc[c / 32]);
        return;
      }
    }
  }
  switch (d.k_type) {
    case KVType::f32: {
      const float* f = reinterpret_cast<const float*>(tile);
      for (int64_t c = 0; c < n; ++c) out[c] = f[c * kernels::kTileKeys + jj];
      return;
    }
    case KVType::f16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(tile);
      for (int64_t c = 0; c < n; ++c) out[c] = f16_to_f32(h[kernels::stored_k_index(n, c, jj)]);
      return;
    }
    case KVType::bf16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(tile);
      for (int64_t c = 0; c < n; ++c) out[c] = bf16_to_f32(h[kernels::stored_k_index(n, c, jj)]);
      return;
    }
    case KVType::q8_0: {  // [d][64] int8, then f16 scales [d/32][64]
      const int8_t* q = reinterpret_cast<const int8_t*>(tile);
      const uint16_t* sc = reinterpret_cast<const uint16_t*>(tile + n * kernels::kTileKeys);
      for (int64_t c = 0; c < n; ++c)
        out[c] = float(q[c * kernels::kTileKeys + jj]) *
                 f16_to_f32(sc[(c / 32) * kernels::kTileKeys + jj]);
      return;
    }
  }
}

int64_t PackedKV::size() const { return d_->size; }
int64_t PackedKV::capacity() const { return d_->capacity; }
size_t PackedKV::bytes() const { return d_->bytes(); }
bool PackedKV::v_is_k() const { return d_->v_is_k; }
int64_t PackedKV::kv_heads() const { return d_->kv_heads; }
int64_t PackedKV::dim() const { return d_->dim; }
DType PackedKV::dtype() const { return d_->dtype; }
bool PackedKV::bf16_operands() const { return d_->ops == kernels::Operands::bf16_dot; }
KVType PackedKV::k_type() const { return bf16_operands() ? KVType::bf16 : d_->k_type; }
KVType PackedKV::v_type() const { return bf16_operands() ? KVType::bf16 : d_->v_type; }
std::span<const int64_t> PackedKV::positions() const { return d_->positions; }
int64_t PackedKV::max_position() const { return d_->max_position; }

}  // namespace spattn
#endif  // HWY_ONCE
