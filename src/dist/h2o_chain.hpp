// chunked_h2o across ranks: one layer's context-parallel prefill, equal to the one-process
// chunked_h2o prefill of the same prompt (the same memory sets, scores and outputs). See
// h2o_chain.cpp. Transport-free: bytes move through a Group.
#pragma once
#include <cstdint>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/chunked_h2o.hpp"
#include "spattn/context_parallel.hpp"
#include "spattn/kv_type.hpp"

namespace spattn::dist {

// The rank's rows of one layer: q, out [rows, Hq, d], k, v [rows, Hkv, d] (f32, as the cache
// rounded them), its zigzag runs in order. chunk: S (-ub), which z.grid must equal; memory:
// L + H, the largest memory set a message carries. opt: threads and scale.
struct H2OChainLayer {
  const float *q, *k, *v;
  float* out;
  int64_t q_heads, kv_heads, dim, chunk, memory;
  KVType k_type, v_type;  // the cache's: the memory rows travel as the ring's shards do
  AttnOptions opt;
};

// Runs `layer` (this rank's chunked_h2o state of the layer) over the prompt's chunks the rank
// holds, in position order with the other ranks: each chunk on its owner, the layer's state
// sent on from one owner to the next (Group::send / recv) where the chain changes rank. The
// bytes sent count as the layer's ring traffic (CommStats::ring_bytes_sent, ring_layers).
void h2o_chain_prefill(Group& g, const Zigzag& z, const H2OChainLayer& layer,
                       ChunkedH2OLayer& state, std::vector<unsigned char>& wire, Stats* stats);

}  // namespace spattn::dist
