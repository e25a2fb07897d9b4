// K and V in the flash loop's tile layout: the storage behind the public PackedKV, and what the
// loop packs for itself when a caller passes raw tensors.
//
// Per kv head, `tiles_cap` tiles of kTileKeys keys; packed key i lives in tile i / 64, slot
// i % 64. Slots past `size` are zero, so appending in pieces writes the same bytes as packing
// at once. Each packed key keeps its original position: the causal mask compares positions,
// not packed indices, so keys may be packed in any order (a permutation, a gathered subset).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/flash_common.hpp"
#include "spattn/dtype.hpp"
#include "spattn/kv_type.hpp"
#include "spattn/storage_type.hpp"
#include "spattn/tensor.hpp"

namespace spattn::kernels {

// The operand format of a packed K/V (see flash-inl.h): f32 everywhere, or bf16 pairs for
// AVX512_BF16's vdpbf16ps. Rows of the storage table (spattn/storage_type.hpp, kDotOperand).
enum class Operands : uint8_t { f32, bf16_dot };
constexpr StorageType storage_of(Operands o) {
  switch (o) {
    case Operands::f32: return StorageType::f32;
    case Operands::bf16_dot: return StorageType::bf16;
  }
  return StorageType::f32;  // not reached for a valid Operands
}
constexpr const StorageTraits& traits(Operands o) { return storage_traits(storage_of(o)); }
inline constexpr std::array kOperands = {Operands::f32, Operands::bf16_dot};
static_assert(storage_detail::covers(kOperands, kDotOperand));

// Storage of the K and V tiles under Operands::f32, each fixed at construction (KVType):
//   f32          K [d][64] floats, V [64][dp] floats: what the micro-kernels read directly;
//   f16, bf16    K [4][d][16] (groups of 16 keys, stored_k_index), V [64][dp], 2-byte elements;
//   q8_0         K: int8 [d][64] then f16 scales [d/32][64] (one per key and block of 32 dims);
//                V: int8 [64][dp] then f16 scales [64][dp/32] (d % 32 == 0, so dp == d).
// A tile stored in any type but f32 is widened to the f32 layout, tile by tile, as the loop
// reads it (flash_kv_widen-inl.h: WidenedTiles), or, f16 / bf16 for decode's few rows, read
// in place (group_tiles-inl.h). Operands::bf16_dot keeps its own pair layouts (bf16).
// Where V is K (PackedKVData::v_is_k) the one stored tile has V's layout, in any type: see
// there.

// Keys per group of a K tile stored in 16 bits, and element (c, j) of such a tile: a group's
// keys lie in one 16 x d block, so a 16-key piece (Quest's page) reads one contiguous run
// (4 KiB at d 128) where [d][64] made it d runs of 32 bytes, each a separate cache line. A
// whole tile widens to F32Ops' [d][64] as fast either way (16 values a row and group).
inline constexpr int64_t kKeyGroup = 16;
inline constexpr int64_t stored_k_index(int64_t d, int64_t c, int64_t j) {
  return ((j / kKeyGroup) * d + c) * kKeyGroup + j % kKeyGroup;
}
// Element (c, j) of a K tile stored as t: 16-bit types in key groups, the others [d][64].
inline constexpr int64_t stored_k_slot(KVType t, int64_t d, int64_t c, int64_t j) {
  switch (t) {
    case KVType::f16:
    case KVType::bf16: return stored_k_index(d, c, j);
    case KVType::f32:
    case KVType::q8_0: break;
  }
  return c * kTileKeys + j;
}

struct AlignedFree {
  void operator()(void* p) const noexcept { aligned_free(p); }
};

struct PackedKVData {
  Operands ops = Operands::f32;
  DType dtype = DType::f32;  // dtype of the tensors it was packed from
  int64_t kv_heads = 0, dim = 0;
  int64_t dp = 0;  // head dim of the V layout, padded to 16
  int64_t capacity = 0, tiles_cap = 0, size = 0;
  KVType k_type = KVType::f32, v_type = KVType::f32;  // storage (f32 under bf16_dot: see there)
  // V is K: one tile a key stores both, in V's layout (rows [64][v_row()] as k_type: a key's
  // values contiguous), and v_bytes / v_tile name the K tiles (v_tile_bytes 0). DeepSeek's latent
  // cache, whose V is the first kv_lora_rank values of each cached K row (llama.cpp's MLA cache
  // holds K only); the caller drops the output values past those. Rows, not K's [d][64] or
  // 16-key groups, because decode reads a few thousand scattered keys of the latent (DSA's
  // top-k): a key is then its own 1,152 bytes (f16, 576 dims), where a key group costs 18 KB
  // for each key it holds. K's columns are transposed from the rows as they are read
  // (ColumnsFromRows, flash_kv_widen-inl.h). Operands::f32 only; v_type then records k_type.
  bool v_is_k = false;
  int64_t k_elems = 0, v_elems = 0;            // elements per tile
  int64_t k_tile_bytes = 0, v_tile_bytes = 0;  // bytes per tile in storage
  std::unique_ptr<unsigned char[], AlignedFree> k, v;
  std::vector<int64_t> positions;  // [size] original position of each packed key
  bool identity = true;            // positions[i] == i for every i
  bool ascending = true;           // positions strictly increasing
  int64_t max_position = -1;
  std::vector<int64_t> tile_min, tile_max;  // [tiles_cap] over each tile's filled slots

  // Tile t of head kvh as the operand format's elements (k_type / v_type f32, or bf16_dot).
  template <class T>
  T* k_tile(int64_t kvh, int64_t t) const {
    return reinterpret_cast<T*>(k_bytes(kvh, t));
  }
  template <class T>
  T* v_tile(int64_t kvh, int64_t t) const {
    return reinterpret_cast<T*>(v_bytes(kvh, t));
  }
  // Tile t of head kvh's storage, in any type.
  unsigned char* k_bytes(int64_t kvh, int64_t t) const {
    return k.get() + (kvh * tiles_cap + t) * k_tile_bytes;
  }
  unsigned char* v_bytes(int64_t kvh, int64_t t) const {
    if (v_is_k) return k_bytes(kvh, t);
    return v.get() + (kvh * tiles_cap + t) * v_tile_bytes;
  }
  // Storage held: K and V tiles at capacity (K only when v_is_k), and the positions.
  size_t bytes() const {
    return size_t(kv_heads * tiles_cap * (k_tile_bytes + v_tile_bytes)) +
           positions.capacity() * sizeof(int64_t);
  }
  // Values a stored V row takes: dp, or where V is K the dim unpadded, so that the latent cache
  // holds kv_lora_rank + rope values a token (a made-up file's 120 would pad to 128). A row
  // narrower than dp is widened (WidenStridedV), never read in place; q8_0's dims are whole
  // blocks of 32, so its rows are dp either way.
  int64_t v_row() const { return v_is_k ? dim : dp; }
  // Some tile is stored in a type the micro-kernels do not read (widened as it is read).
  // V is K's (v_is_k) counts: its tiles are made from K's as they are read.
  bool widened() const { return k_type != KVType::f32 || v_type != KVType::f32 || v_is_k; }
  // Packed tile t as a visit for the keys [begin, end) of a range: the positions it spans.
  TileVisit visit(int64_t t, int64_t begin, int64_t end) const {
    return identity ? natural_visit(t, begin, end, size)
                    : TileVisit{t, begin, end, tile_min[size_t(t)], tile_max[size_t(t)]};
  }
  // Positions to mask with: null when they equal the packed index.
  const int64_t* mask_positions() const { return identity ? nullptr : positions.data(); }
  // Packed keys a query at position `pos` may see form a prefix [0, limit) when positions
  // ascend; otherwise every packed key is a candidate and the mask decides.
  int64_t causal_prefix(int64_t pos) const;
};

// Storage for kv_heads x capacity keys of head dim `dim` in format `ops`, zeroed (zero_all), or
// only each head's last tile zeroed, for a caller that writes every other slot at once. K and V
// tiles are stored as k_type and v_type (f32 only under bf16_dot; q8_0 needs dim % 32 == 0);
// v_is_k: no V tiles (PackedKVData::v_is_k; f32 operands only, v_type ignored).
void init_packed(PackedKVData& kv, Operands ops, DType dtype, int64_t kv_heads, int64_t dim,
                 int64_t capacity, bool zero_all = true, KVType k_type = KVType::f32,
                 KVType v_type = KVType::f32, bool v_is_k = false);
// No keys: storage zeroed (zero_all) or each head's last tile only, positions and spans reset.
void empty_packed(PackedKVData& kv, bool zero_all);
// Throws Error unless n keys with these positions (null: natural) fit after the current ones.
void check_positions(const PackedKVData& kv, const int64_t* positions, int64_t n);
// Room in kv.positions for n more keys, allocated before anything changes. It grows at least
// twofold (up to the capacity): a decode step appends one key, and an exact reserve of
// size + 1 reallocated and copied every position at every step (a 32K cache's 256 KiB per
// layer and token: 18 us of a decode layer's 20 us append on Zen 5).
void reserve_positions(PackedKVData& kv, int64_t n);
// Records the positions of keys [size, size + n) and grows size. Callers check first
// (check_positions) and write the keys' data before, so that a failure leaves size alone.
void add_positions(PackedKVData& kv, const int64_t* positions, int64_t n);
// Keeps keys [0, n) and zeroes the rest: bytes, positions, flags and spans as appending those n
// keys to an empty cache gives. Allocates nothing (a rollback may call it while unwinding).
void keep_keys(PackedKVData& kv, int64_t n);
// Zeroes every head's slots [from, to) (keys past size must read as zero: see above), in the
// layouts the packers write (PackKeyK, PackKeyV of F32Ops, flash_f32_ops-inl.h, and of
// Bf16DotOps, flash_avx512-inl.h).
void clear_slots(PackedKVData& kv, int64_t from, int64_t to);

// dst: src's keys (same heads, dim, positions) in f32 tiles, the values the loop would widen
// tile by tile (bit for bit), at capacity src.size; V tiles of their own where src's V is K. For a call that reads each stored key many
// times (token-sparse prefill): each tile widened once instead of once per read.
void widen_packed(const PackedKVData& src, PackedKVData& dst);

// rows [kv_heads][size][dim]: f32 kv's keys token-major (a key's dims contiguous), for a gather
// that reads a few keys of each tile: a key's column of the [dim][64] K layout is dim lines.
void key_rows(const PackedKVData& kv, std::vector<float>& rows);

// The operand format the kernels use for inputs of this dtype on this machine's SIMD target:
// bf16 pairs only for bf16 inputs, when bf16_dot asks for them and the CPU has AVX512_BF16.
Operands operands_for(DType dtype, bool bf16_dot);

}  // namespace spattn::kernels
