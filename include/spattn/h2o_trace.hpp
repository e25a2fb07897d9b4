// Heavy-hitter traces: the memory sets chunked_h2o kept during one prompt's prefill, per layer,
// chunk and q head, on disk ("Chunked Sparse Attention for Prefill Optimization", Task 8.4:
// which tokens become heavy hitters). `spattn run --attn chunked_h2o --h2o-trace DIR` writes
// one file per layer, DIR/layer<N>.h2o; `spattn h2o-report` reads them.
//
// File format (version 1). An 8-byte magic "SPH2OTR1", then only unsigned LEB128 varints (7
// bits per byte, low first, high bit set on every byte but the last; at most 10 bytes, value
// below 2^63):
//
//   layer  heads  tokens  chunk(S)  local(L)  heavy(H)  n_chunks
//   n_chunks times:  begin  length                   chunk c = positions [begin, begin+length)
//     heads times:   count  p_0  (p_1-p_0-1) ...     M_c of that q head: sorted positions,
//                                                    the first as is, then gaps minus one
//
// M_c is the memory set built after chunk c (what chunk c+1 attends to): Local_c (the chunk's
// last L positions) and Heavy_c (the H best-scored earlier positions). Only chunks whose M_c
// was built are written (not the prompt's last). Gaps make a memory set of mostly consecutive
// positions one byte per position. Parsing treats the bytes as untrusted: every count, position
// and order is checked (chunks consecutive from 0, lengths within S, positions strictly
// increasing and below the chunk's end, at most L + H per set, nothing after the last set),
// and a failure is an Error naming the file and what is wrong.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "spattn/chunked_h2o.hpp"

namespace spattn {

struct H2OTraceLayer {
  int64_t layer = 0, heads = 0, tokens = 0;
  int64_t chunk = 0, local = 0, heavy = 0;  // S, L, H
  struct Chunk {
    int64_t begin = 0, end = 0;
    std::vector<std::vector<int64_t>> memory;  // [q head]: M_c, sorted positions
  };
  std::vector<Chunk> chunks;
};

// A layer's trace from what ChunkedH2OLayer recorded over one prompt of `tokens` tokens.
// Throws Error when the record holds more than one prompt (chunks not consecutive from 0).
H2OTraceLayer h2o_trace_layer(const ChunkedH2OTrace& t, int64_t layer, int64_t heads,
                              int64_t tokens, const ChunkedH2OParams& p);

std::string h2o_trace_to_bytes(const H2OTraceLayer& t);
H2OTraceLayer h2o_trace_from_bytes(std::span<const uint8_t> bytes, const std::string& origin);

// DIR/layer<N>.h2o for each layer (DIR must exist).
void write_h2o_trace(const std::string& dir, const std::vector<H2OTraceLayer>& layers);
// Every DIR/layer*.h2o, sorted by layer; Error unless there is at least one, their layers are
// distinct and they agree on heads, tokens, S, L and H.
std::vector<H2OTraceLayer> read_h2o_trace(const std::string& dir);

}  // namespace spattn
