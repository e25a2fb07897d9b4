// Token-sparse attention: each query row attends to its own list of keys (DeepSeek V3.2's
// sparse attention, DSA: the lightning indexer's top-k tokens), shared by every head of the
// row. The third sparse form beside the block-sparse and query-sparse ones
// (spattn/sparse_attention.hpp), through the same flash loop: a row's keys are gathered 64 at a
// time from the packed cache (the loop's key_columns), and rows that see every causal key (a
// row whose list would hold them all) run in dense tiles.
#pragma once
#include <cstdint>
#include <vector>

#include "spattn/attention.hpp"

namespace spattn {

class PackedKV;

// The keys each query row reads: row i's are keys[offsets[i], offsets[i + 1]) (packed indices,
// ascending, unique), or, when all[i], every key up to its own position (no list).
struct TokenSelection {
  std::vector<int64_t> offsets{0};
  std::vector<int64_t> keys;
  std::vector<uint8_t> all;

  int64_t rows() const { return int64_t(all.size()); }
  void add_all() { all.push_back(1), offsets.push_back(offsets.back()); }
  // Appends a row of keys (sorted here).
  void add(std::vector<int64_t> row);
  int64_t count(int64_t i) const { return offsets[size_t(i) + 1] - offsets[size_t(i)]; }
  const int64_t* row(int64_t i) const { return keys.data() + offsets[size_t(i)]; }
};

// q [Hq, Lq, d] at the bottom right of the cache (or at opt.q_start), out [Hq, Lq, d], keys at
// ascending positions (natural order, or with gaps); sel has Lq rows of slots. Each row's
// output is softmax attention over its listed keys (or every causal key), the keys past its
// position masked. Exactly attention over the gathered
// keys, up to float rounding. Throws Error for a selection of another row count or a key
// outside the cache. Stats count the score entries computed.
void attention_token_sparse(const TensorView& q, const PackedKV& kv, const TensorView& out,
                            const TokenSelection& sel, const AttnOptions& opt = {},
                            float* lse = nullptr, Stats* stats = nullptr);

}  // namespace spattn
