#include "spattn/dtype.hpp"

#include "spattn/error.hpp"

namespace spattn {

const char* dtype_name(DType t) { return traits(t).name.data(); }

DType parse_dtype(std::string_view s) {
  for (DType t : kDTypes)
    if (s == traits(t).name) return t;
  // The spellings of other libraries (numpy, PyTorch).
  if (s == "float32" || s == "fp32") return DType::f32;
  if (s == "bfloat16") return DType::bf16;
  if (s == "float16" || s == "fp16" || s == "half") return DType::f16;
  detail::fail("unknown dtype '", s, "' (expected ", storage_names(kDTypes), ")");
}

// IEEE half <-> single, bit-exact, round to nearest even.
float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    u = sign | (uint32_t(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (incl. inf)
  if (a < 0x38800000u) {                                  // subnormal or zero in half
    if (a < 0x33000000u) return uint16_t(sign);           // below half of min subnormal
    uint32_t e = a >> 23;
    uint32_t man = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14..24
    uint32_t half_man = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_man & 1u))) ++half_man;
    return uint16_t(sign | half_man);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // round mantissa to 10 bits
  return uint16_t(sign | ((r - 0x38000000u) >> 13));
}

}  // namespace spattn
