// ggml tensor types and metadata value types: names, block sizes and the row conversions
// to and from f32 that the model loader and the writer use.
#include <cmath>
#include <cstring>

#include "spattn/dtype.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"

namespace spattn::gguf {

namespace {
// q8_0 (ggml's block_q8_0): 32 int8 values sharing one f16 scale d; value = d * q.
constexpr int64_t kQ8Block = 32;
constexpr int64_t kQ8Bytes = 2 + kQ8Block;
}  // namespace

const char* type_name(GgmlType t) {
  switch (t) {
    case GgmlType::f32: return "f32";
    case GgmlType::f16: return "f16";
    case GgmlType::q8_0: return "q8_0";
    case GgmlType::bf16: return "bf16";
  }
  return "unknown";
}

int64_t block_size(GgmlType t) { return t == GgmlType::q8_0 ? kQ8Block : 1; }

int64_t block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::f32: return 4;
    case GgmlType::f16:
    case GgmlType::bf16: return 2;
    case GgmlType::q8_0: return kQ8Bytes;
  }
  detail::fail("gguf: unknown tensor type ", uint32_t(t));
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
  switch (t) {
    case GgmlType::f32: std::memcpy(dst, src, size_t(n) * 4); return;
    case GgmlType::f16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case GgmlType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case GgmlType::q8_0: {
      SPATTN_CHECK(n % kQ8Block == 0, "dequantize_row: q8_0 row of ", n,
                   " values is not a multiple of 32");
      for (int64_t b = 0; b < n / kQ8Block; ++b) {
        const uint8_t* blk = src + b * kQ8Bytes;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        const float d = f16_to_f32(h);
        for (int64_t j = 0; j < kQ8Block; ++j)
          dst[b * kQ8Block + j] = d * float(static_cast<int8_t>(blk[2 + j]));
      }
      return;
    }
  }
  detail::fail("dequantize_row: unknown tensor type ", uint32_t(t));
}

void quantize_row(GgmlType t, const float* src, uint8_t* dst, int64_t n) {
  switch (t) {
    case GgmlType::f32: std::memcpy(dst, src, size_t(n) * 4); return;
    case GgmlType::f16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case GgmlType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case GgmlType::q8_0: {
      SPATTN_CHECK(n % kQ8Block == 0, "quantize_row: q8_0 row of ", n,
                   " values is not a multiple of 32");
      for (int64_t b = 0; b < n / kQ8Block; ++b) {
        const float* x = src + b * kQ8Block;
        float amax = 0;
        for (int64_t j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;  // as ggml's quantize_row_q8_0_ref
        const float id = d != 0 ? 1.0f / d : 0.0f;
        uint8_t* blk = dst + b * kQ8Bytes;
        const uint16_t h = f32_to_f16(d);
        std::memcpy(blk, &h, 2);
        for (int64_t j = 0; j < kQ8Block; ++j)
          blk[2 + j] = uint8_t(static_cast<int8_t>(std::lround(x[j] * id)));
      }
      return;
    }
  }
  detail::fail("quantize_row: unknown tensor type ", uint32_t(t));
}

}  // namespace spattn::gguf
