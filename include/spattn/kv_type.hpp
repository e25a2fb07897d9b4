// KV cache storage types, as llama.cpp spells them for -ctk / -ctv: the type a PackedKV (and the
// model runner's cache) stores its keys or values in. Compute is always f32: the kernels widen
// f16 / bf16 and dequantize q8_0 tile by tile as they read them.
// KVType itself, with its sizes and how each type widens, is a row set of the storage table
// (spattn/storage_type.hpp).
#pragma once
#include <cstdint>
#include <string_view>

#include "spattn/storage_type.hpp"

namespace spattn {

const char* kv_type_name(KVType t);
// "f32", "f16", "bf16" or "q8_0"; anything else throws Error
// "unknown KV cache type 'x' (expected f32, f16, bf16 or q8_0)".
KVType parse_kv_type(std::string_view s);
// Bytes a row of n elements takes in type t (n a multiple of 32 for q8_0).
double kv_type_bytes_per_element(KVType t);

// Rounds n values as a cache of type t stores them and reads them back: f16 / bf16 round to
// nearest even; q8_0 quantizes with ggml's CPU quantizer (the one llama.cpp's cache writes
// with: per block d = max|x| / 127, q = round(x * 127 / max|x|)) and dequantizes (q * d);
// f32 copies. src and dst may be the same. q8_0 needs n % 32 == 0 (Error otherwise).
void kv_round_row(KVType t, const float* src, float* dst, int64_t n);
// ggml's q8_0 quantizer on n values (n % 32 == 0): n int8 values and n / 32 f16 scales.
void kv_quantize_q8_0(const float* src, int64_t n, int8_t* qs, uint16_t* scales);

}  // namespace spattn
