// The GPU tests' usual input: the project's `text` workload (make_workload) in bf16 with 4 q
// heads over 2 kv heads, at a given length, head dim and seed.
#pragma once
#include <cstdint>

#include "spattn/workload.hpp"

namespace spattn::test {

inline Workload text_workload(int64_t seq, int64_t dim, uint64_t seed) {
  WorkloadConfig c;
  c.kind = WorkloadKind::text;
  c.seq = seq;
  c.heads = 4;
  c.kv_heads = 2;
  c.dim = dim;
  c.dtype = DType::bf16;
  c.seed = seed;
  return make_workload(c);
}

}  // namespace spattn::test
