// KV cache types: names, sizes and ggml's q8_0 quantizer (a key is rounded exactly as
// llama.cpp's q8_0 cache rounds it). The rounding of a row, kv_round_row, is a kernel
// (kernels/kv_round.cpp).
#include "spattn/kv_type.hpp"

#include <algorithm>
#include <cstring>

#include "ggml-cpu.h"
#include "ggml.h"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"

namespace spattn {

const char* kv_type_name(KVType t) { return traits(t).name.data(); }

KVType parse_kv_type(std::string_view s) {
  for (KVType t : kKVTypes)
    if (s == traits(t).name) return t;
  detail::fail("unknown KV cache type '", s, "' (expected ", storage_names(kKVTypes), ")");
}

double kv_type_bytes_per_element(KVType t) {
  return double(traits(t).block_bytes) / double(traits(t).block);
}

namespace {
// ggml's block_q8_0: an f16 scale, then 32 int8 values.
constexpr int64_t kQ8Block = traits(KVType::q8_0).block;
constexpr int64_t kQ8BlockBytes = traits(KVType::q8_0).block_bytes;
}  // namespace

void kv_quantize_q8_0(const float* src, int64_t n, int8_t* qs, uint16_t* scales) {
  SPATTN_CHECK(n % kQ8Block == 0, "q8_0: a row of ", n,
               " values is not a whole number of blocks of 32");
  static const ggml_from_float_t quantize = ggml_get_type_traits_cpu(GGML_TYPE_Q8_0)->from_float;
  unsigned char buf[8 * kQ8BlockBytes];
  for (int64_t b0 = 0; b0 < n; b0 += 8 * kQ8Block) {
    const int64_t m = std::min<int64_t>(8 * kQ8Block, n - b0);
    quantize(src + b0, buf, m);
    for (int64_t b = 0; b < m / kQ8Block; ++b) {
      const unsigned char* blk = buf + b * kQ8BlockBytes;
      std::memcpy(scales + b0 / kQ8Block + b, blk, 2);
      std::memcpy(qs + b0 + b * kQ8Block, blk + 2, kQ8Block);
    }
  }
}

}  // namespace spattn
