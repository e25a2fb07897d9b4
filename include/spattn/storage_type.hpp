// Storage types: one table for every type spattn stores values in, whichever vocabulary names
// it. Tensors passed to the kernels (DType), the KV cache (KVType), the weights prefill's
// product widens (kernels::WeightFormat) and the operand formats of the flash loop
// (kernels::Operands) are each a subset of the rows below; a GGUF file's types (gguf::GgmlType)
// are ggml's whole list, of which these rows are the ones spattn reads itself (ggml decodes the
// rest). What a type is (its block, its bytes, how it widens to the f32 the kernels compute
// in, which kernels take it) is written once, here.
//
// Each vocabulary maps onto the table by an exhaustive switch (storage_of): spattn's sources
// build with -Werror=switch-enum, so a type added to a vocabulary and not to the table, or to
// a kernel's dispatch, fails to compile instead of falling into a default.
// docs/development/add-a-storage-type.md lists the places a new type touches.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace spattn {

// Element types of tensor storage (TensorView::dtype). Compute is always f32.
enum class DType : uint8_t { f32, bf16, f16 };

// KV cache storage types, as llama.cpp spells them for -ctk / -ctv (spattn/kv_type.hpp).
enum class KVType : uint8_t {
  f32,   // 4 bytes per element, as given
  f16,   // IEEE half, rounded to nearest even (llama.cpp's default cache type)
  bf16,  // bfloat16, rounded to nearest even
  q8_0,  // ggml's q8_0: blocks of 32 along the head dim, int8 values and one f16 scale each
};

// Every storage type of the table, one row each.
enum class StorageType : uint8_t { f32, f16, bf16, q8_0, q6_K, q5_K, q3_K };

// How a stored value becomes f32.
enum class Widening : uint8_t {
  none,         // f32: read as is
  half,         // IEEE binary16: converted (exact)
  upper_half,   // bfloat16: the upper 16 bits of an f32, shifted into place (exact)
  int8_scaled,  // blocks of int8 values times one f16 scale a block (exact in f32)
  k_quant,      // ggml's K-quant super-blocks, decoded as ggml decodes them (weight_widen-inl.h)
};

// Which kernels take a type (bits of StorageTraits::kernels).
enum StorageUse : unsigned {
  kTensor = 1u << 0,       // a TensorView's elements: attention inputs and outputs (DType)
  kKVCache = 1u << 1,      // a PackedKV's / the runner's cache (KVType), widened tile by tile
  kKVInPlace = 1u << 2,    // a cache tile decode reads in place, widened as the FMAs take it
                           // (kernels/group_tiles-inl.h) rather than into scratch first
  kDotOperand = 1u << 3,   // the flash loop's operands (kernels::Operands): f32, and bf16
                           // pairs for AVX512_BF16's dot products
  kWeightWiden = 1u << 4,  // prefill's product widens weights of it (kernels::WeightFormat)
};

struct StorageTraits {
  StorageType type;
  std::string_view name;  // ggml's name, which llama.cpp's flags and GGUF files use
  uint32_t ggml_id;       // its gguf::GgmlType (ggml's type number)
  int64_t block;          // values a block holds
  int64_t block_bytes;    // bytes a block takes
  int64_t scale_bytes;    // of those, the block's scale (int8_scaled: stored after the values)
  Widening widening;
  unsigned kernels;  // StorageUse bits

  constexpr bool takes(StorageUse use) const { return (kernels & use) != 0; }
  // Bytes of one value without its block's scale (int8_scaled: 1; k_quant: 0, not addressable).
  constexpr int64_t value_bytes() const {
    return widening == Widening::k_quant ? 0 : (block_bytes - scale_bytes) / block;
  }
};

// The table, in StorageType's order. Block sizes and bytes are ggml's (ggml-common.h); a test
// checks them against gguf::block_size / block_bytes (ggml's own table).
inline constexpr StorageTraits kStorageTypes[] = {
    {StorageType::f32, "f32", 0, 1, 4, 0, Widening::none, kTensor | kKVCache | kDotOperand},
    {StorageType::f16, "f16", 1, 1, 2, 0, Widening::half,
     kTensor | kKVCache | kKVInPlace | kWeightWiden},
    {StorageType::bf16, "bf16", 30, 1, 2, 0, Widening::upper_half,
     kTensor | kKVCache | kKVInPlace | kDotOperand},
    {StorageType::q8_0, "q8_0", 8, 32, 34, 2, Widening::int8_scaled, kKVCache | kWeightWiden},
    {StorageType::q6_K, "q6_K", 14, 256, 210, 0, Widening::k_quant, kWeightWiden},
    {StorageType::q5_K, "q5_K", 13, 256, 176, 0, Widening::k_quant, kWeightWiden},
    {StorageType::q3_K, "q3_K", 11, 256, 110, 0, Widening::k_quant, kWeightWiden},
};

constexpr const StorageTraits& storage_traits(StorageType t) {
  return kStorageTypes[static_cast<size_t>(t)];
}

// Each vocabulary's row. Exhaustive: a new enumerator is a compile error until it has one.
constexpr StorageType storage_of(DType t) {
  switch (t) {
    case DType::f32: return StorageType::f32;
    case DType::bf16: return StorageType::bf16;
    case DType::f16: return StorageType::f16;
  }
  return StorageType::f32;  // not reached for a valid DType
}
constexpr StorageType storage_of(KVType t) {
  switch (t) {
    case KVType::f32: return StorageType::f32;
    case KVType::f16: return StorageType::f16;
    case KVType::bf16: return StorageType::bf16;
    case KVType::q8_0: return StorageType::q8_0;
  }
  return StorageType::f32;  // not reached for a valid KVType
}
constexpr const StorageTraits& traits(DType t) { return storage_traits(storage_of(t)); }
constexpr const StorageTraits& traits(KVType t) { return storage_traits(storage_of(t)); }

// Every value of each vocabulary, in its enum's order (for parsing and for the lists in error
// messages). The checks below tie each list to the table both ways.
inline constexpr std::array kDTypes = {DType::f32, DType::bf16, DType::f16};
inline constexpr std::array kKVTypes = {KVType::f32, KVType::f16, KVType::bf16, KVType::q8_0};

namespace storage_detail {
constexpr bool table_in_order() {
  for (size_t i = 0; i < std::size(kStorageTypes); ++i)
    if (static_cast<size_t>(kStorageTypes[i].type) != i) return false;
  return true;
}
// The values of `list` map to distinct rows that take `use`, and every such row is one of them.
template <class List>
constexpr bool covers(const List& list, StorageUse use) {
  size_t rows = 0;
  for (const StorageTraits& r : kStorageTypes) rows += r.takes(use);
  for (size_t i = 0; i < list.size(); ++i) {
    if (!storage_traits(storage_of(list[i])).takes(use)) return false;
    for (size_t j = 0; j < i; ++j)
      if (storage_of(list[j]) == storage_of(list[i])) return false;
  }
  return rows == list.size();
}
}  // namespace storage_detail
static_assert(storage_detail::table_in_order(), "kStorageTypes rows follow StorageType's order");
static_assert(storage_detail::covers(kDTypes, kTensor), "kDTypes and the table's kTensor rows");
static_assert(storage_detail::covers(kKVTypes, kKVCache), "kKVTypes and the table's kKVCache rows");

// Whether t is one of KVType's values (a cast from an integer may not be).
constexpr bool is_kv_type(KVType t) {
  for (KVType k : kKVTypes)
    if (k == t) return true;
  return false;
}

// The tensor dtype that holds t's values exactly: t itself where DType has it, else f32 (every
// stored type widens to f32 exactly: Widening).
constexpr DType dtype_holding(KVType t) {
  for (DType d : kDTypes)
    if (storage_of(d) == storage_of(t)) return d;
  return DType::f32;
}

// "a, b or c": the names of `list`'s types, for error messages.
template <class List>
std::string storage_names(const List& list) {
  std::string s;
  for (size_t i = 0; i < list.size(); ++i) {
    if (i > 0) s += i + 1 == list.size() ? " or " : ", ";
    s += traits(list[i]).name;
  }
  return s;
}

}  // namespace spattn
