// Decode attention: q_len 1..16 new queries at the end of a long KV cache (bottom-right causal).
//
// The q heads of one GQA group are processed together against their shared kv head, so each
// K/V byte is read once per group. The key sequence is split across threads (flash-decoding)
// and the partial (O, LSE) results are merged exactly. K and V are read in place (no packing:
// at q_len <= 16 reading the cache is the whole cost).
//
// With lambda > 0 this is BLASST's decode kernel: scores of `batch` 64-key blocks are computed
// back to back, the running max is updated with their maxima, and only the value blocks whose
// max is not ln(lambda) below it are loaded and multiplied. Skipped V blocks are never read.
#pragma once
#include "spattn/attention.hpp"

namespace spattn {

// The most query rows attention_decode takes; methods send longer queries to prefill kernels.
inline constexpr int64_t kMaxDecodeQueries = 16;

struct DecodeOptions {
  double lambda = 0.0;  // BLASST threshold in [0, 1]; 0: dense decode
  int64_t batch = 4;    // key blocks scored back to back before their V blocks are loaded
};

// q [Hq, Lq, d] with 1 <= Lq <= 16, k/v [Hkv, Lkv, d], out [Hq, Lq, d]. Stats count score
// entries of V blocks that were used (skipped blocks: tiles_skipped).
void attention_decode(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const AttnOptions& opt = {},
                      const DecodeOptions& dopt = {}, float* lse = nullptr,
                      Stats* stats = nullptr);

}  // namespace spattn
