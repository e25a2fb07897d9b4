// ggml's CPU repack (its CPU_REPACK buffer type: interleaved layouts its faster products read),
// as the model loader uses it, and one matrix repacked by it on its own (the integer products'
// tests and bench-products read ggml's own layout, never a copy of its code).
#pragma once
#include <cstdint>
#include <vector>

#include "ggml-backend.h"
#include "spattn/gguf.hpp"

namespace spattn::model {

// The CPU backend's repack buffer type, or null where this ggml has none.
ggml_backend_buffer_type_t repack_buffer_type();

// m rows of k values of `type` in ggml's own layout (contiguous, `plain`) repacked by ggml as
// the loader repacks a matrix: the repacked bytes, or none where ggml would not repack such a
// matrix on this CPU.
std::vector<uint8_t> ggml_repacked(gguf::GgmlType type, const void* plain, int64_t m, int64_t k);

}  // namespace spattn::model
