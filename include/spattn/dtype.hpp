// Element types of tensor storage (DType, defined with the other storage vocabularies in
// spattn/storage_type.hpp). Compute is always f32; storage may be f32, bf16 or f16.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "spattn/storage_type.hpp"

namespace spattn {

inline constexpr size_t dtype_size(DType t) { return size_t(traits(t).block_bytes); }
const char* dtype_name(DType t);
// Parses "f32" / "float32", "bf16" / "bfloat16", "f16" / "float16"; throws Error otherwise.
DType parse_dtype(std::string_view s);

// Scalar conversions (portable; kernels use SIMD versions in src/kernels).
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even, overflow to inf

inline float load_as_f32(const void* p, DType t) {
  switch (t) {
    case DType::f32: return *static_cast<const float*>(p);
    case DType::bf16: return bf16_to_f32(*static_cast<const uint16_t*>(p));
    case DType::f16: return f16_to_f32(*static_cast<const uint16_t*>(p));
  }
  return 0.0f;  // not reached for a valid DType
}
inline void store_from_f32(void* p, DType t, float v) {
  switch (t) {
    case DType::f32: *static_cast<float*>(p) = v; break;
    case DType::bf16: *static_cast<uint16_t*>(p) = f32_to_bf16(v); break;
    case DType::f16: *static_cast<uint16_t*>(p) = f32_to_f16(v); break;
  }
}

}  // namespace spattn
