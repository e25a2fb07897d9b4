// The ggml types the quantized-block fuzz target picks from, by its input's first byte (byte %
// count): every id the reader accepts, ascending. Shared with the seed writer so each seed
// names the type its blocks were made for.
#pragma once
#include <cstdint>
#include <vector>

#include "spattn/gguf.hpp"

namespace spattn::fuzz {

inline const std::vector<gguf::GgmlType>& quant_fuzz_types() {
  static const std::vector<gguf::GgmlType> types = [] {
    std::vector<gguf::GgmlType> v;
    for (uint32_t id = 0; id < 256; ++id)
      if (gguf::is_known_type(id)) v.push_back(gguf::GgmlType(id));
    return v;
  }();
  return types;
}

}  // namespace spattn::fuzz
