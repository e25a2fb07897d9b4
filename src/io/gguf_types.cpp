// ggml tensor types and metadata value types: names, block sizes and the row conversions
// to and from f32 that the model loader and the writer use, all from ggml's own type table.
#include <cstring>

#include "ggml.h"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"

namespace spattn::gguf {

namespace {
ggml_type as_ggml(GgmlType t) { return static_cast<ggml_type>(t); }
}  // namespace

bool is_known_type(uint32_t id) {
  return id < uint32_t(GGML_TYPE_COUNT) && ggml_blck_size(static_cast<ggml_type>(id)) > 0;
}

const char* type_name(GgmlType t) {
  return is_known_type(uint32_t(t)) ? ggml_type_name(as_ggml(t)) : "unknown";
}

int64_t block_size(GgmlType t) {
  SPATTN_CHECK(is_known_type(uint32_t(t)), "gguf: unknown tensor type ", uint32_t(t));
  return ggml_blck_size(as_ggml(t));
}

int64_t block_bytes(GgmlType t) {
  SPATTN_CHECK(is_known_type(uint32_t(t)), "gguf: unknown tensor type ", uint32_t(t));
  return int64_t(ggml_type_size(as_ggml(t)));
}

size_t row_bytes(GgmlType t, int64_t n) {
  SPATTN_CHECK(n >= 0 && n % block_size(t) == 0, "gguf: a row of ", n, " ", type_name(t),
               " values is not a whole number of ", block_size(t), "-value blocks");
  return size_t(n / block_size(t)) * size_t(block_bytes(t));
}

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::u8: return "u8";
    case ValueType::i8: return "i8";
    case ValueType::u16: return "u16";
    case ValueType::i16: return "i16";
    case ValueType::u32: return "u32";
    case ValueType::i32: return "i32";
    case ValueType::f32: return "f32";
    case ValueType::boolean: return "bool";
    case ValueType::string: return "string";
    case ValueType::array: return "array";
    case ValueType::u64: return "u64";
    case ValueType::i64: return "i64";
    case ValueType::f64: return "f64";
  }
  return "unknown";
}

void dequantize_row(GgmlType t, const uint8_t* src, float* dst, int64_t n) {
  SPATTN_CHECK(is_known_type(uint32_t(t)), "dequantize_row: unknown tensor type ", uint32_t(t));
  SPATTN_CHECK(n >= 0 && n % block_size(t) == 0, "dequantize_row: ", type_name(t), " row of ", n,
               " values is not a multiple of ", block_size(t));
  if (t == GgmlType::f32) {  // ggml has no conversion for its own f32
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
  const ggml_type_traits* tr = ggml_get_type_traits(as_ggml(t));
  SPATTN_CHECK(tr->to_float != nullptr, "dequantize_row: ", type_name(t),
               " has no conversion to f32");
  tr->to_float(src, dst, n);
}

void quantize_row(GgmlType t, const float* src, uint8_t* dst, int64_t n) {
  SPATTN_CHECK(is_known_type(uint32_t(t)), "quantize_row: unknown tensor type ", uint32_t(t));
  SPATTN_CHECK(n >= 0 && n % block_size(t) == 0, "quantize_row: ", type_name(t), " row of ", n,
               " values is not a multiple of ", block_size(t));
  SPATTN_CHECK(!ggml_quantize_requires_imatrix(as_ggml(t)), "quantize_row: ", type_name(t),
               " needs an importance matrix");
  // q8_1 and q8_K are ggml's activation formats (the other operand of a product): no
  // quantizer for weights.
  const bool weight_format = t == GgmlType::f32 || t == GgmlType::f16 || t == GgmlType::bf16 ||
                             (ggml_get_type_traits(as_ggml(t))->is_quantized &&
                              t != GgmlType::q8_1 && t != GgmlType::q8_K);
  SPATTN_CHECK(weight_format, "quantize_row: ", type_name(t), " is not a weight format");
  ggml_quantize_chunk(as_ggml(t), src, dst, 0, 1, n, nullptr);
}

}  // namespace spattn::gguf
