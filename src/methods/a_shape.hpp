// a_shape's parameters from its spec (a_shape.cpp), for a caller that runs the pattern itself:
// context parallelism's ring (src/dist/ring_attention.cpp, through the session).
#pragma once
#include <cstdint>

#include "spattn/method.hpp"

namespace spattn {

struct AShapeParams {
  int64_t sink = 128, local = 4096, block_q = 64, block_k = 64;
};
// Throws Error on a bad or unknown parameter, as make_method does.
AShapeParams a_shape_params(const MethodSpec& spec);

}  // namespace spattn
