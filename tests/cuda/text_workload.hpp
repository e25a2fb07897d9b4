// The GPU tests' usual input: the project's `text` workload (make_workload) in bf16 with 4 q
// heads over 2 kv heads, at a given length, head dim and seed; and the method tests' inputs
// built from it (make_input).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>

#include "spattn/tensor.hpp"
#include "spattn/workload.hpp"
#include "test_util.hpp"

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

// The output tolerance of a device method against the host's on the same mask.
inline double out_tol(DType t) { return t == DType::bf16 ? 1.6e-2 : 2.5e-3; }

struct Input {
  Tensor q, k, v;  // in the device dtype, on the host
};

// q [hq, lq, d] and k, v [hkv, lkv, d]: the text workload's (the last lq rows of q; hq 4 over
// hkv 2), or iid random; q scaled by q_scale (extreme logits at 8 and more).
inline Input make_input(bool text, DType t, int64_t d, int64_t hq, int64_t hkv, int64_t lq,
                        int64_t lkv, float q_scale, uint64_t seed) {
  Input in;
  if (text) {
    const Workload w = text_workload(lkv, d, seed);
    EXPECT_EQ(hq, 4);
    EXPECT_EQ(hkv, 2);
    in.q = Tensor(t, hq, lq, d), in.k = Tensor(t, hkv, lkv, d), in.v = Tensor(t, hkv, lkv, d);
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t s = 0; s < lq; ++s)
        for (int64_t c = 0; c < d; ++c)
          in.q.view().set(h, s, c, q_scale * w.q.view().get(h, lkv - lq + s, c));
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t s = 0; s < lkv; ++s)
        for (int64_t c = 0; c < d; ++c) {
          in.k.view().set(h, s, c, w.k.view().get(h, s, c));
          in.v.view().set(h, s, c, w.v.view().get(h, s, c));
        }
    return in;
  }
  in.q = random_tensor(t, hq, lq, d, seed, q_scale);
  in.k = random_tensor(t, hkv, lkv, d, seed + 1);
  in.v = random_tensor(t, hkv, lkv, d, seed + 2);
  return in;
}

}  // namespace spattn::test
