// DeepSeek's sparse attention (DSA, DeepSeek-V3.2-Exp's "lightning indexer" and top-k token
// selection): the indexer's scores and each query's selected tokens, and the runner's `dsa`
// backend that attends only over them (src/methods/dsa.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/long_row_scores.hpp"
#include "spattn/token_sparse.hpp"

namespace spattn {

// One call's indexer rows at one layer, as the session computes them (llama.cpp's deepseek32
// graph): q [n][heads][dim] from the q latent and k [n][dim] from the normed input, each
// turned by RoPE and the Hadamard rotation and rounded as llama.cpp's indexer cache and product
// round them; w [n][heads], the per-head weights already scaled by 1 / sqrt(dim x heads).
struct IndexerRows {
  const float *q = nullptr, *k = nullptr, *w = nullptr;
  int64_t heads = 0, dim = 0;
};

// The indexer's keys of a layer, packed for the score micro-kernels in chunks of kChunk keys.
// Appending past a chunk packs it once; truncating drops what lies past.
class IndexerKeys {
 public:
  static constexpr int64_t kChunk = 4096;
  // Keys a score call takes at a time (indexer_scores): a block's heads x kBlock products stay
  // in the L2 for the head sum. Divides kChunk.
  static constexpr int64_t kBlock = 256;
  // Room for `capacity` keys up front, as the KV cache is allocated: a vector grown as keys
  // arrive copies them all each time it doubles, and a 32K prompt's first decoded token paid
  // 16 MB of copy and 32 MB of fresh pages a layer for it (about 60 ms a layer, 2 Zen 5 cores).
  explicit IndexerKeys(int64_t dim = 0, int64_t capacity = 0) : dim_(dim) {
    rows_.reserve(size_t(dim * capacity));
  }
  // A copy holds the rows, with the original's room; it packs them again when read.
  IndexerKeys(const IndexerKeys& o) : dim_(o.dim_) {
    rows_.reserve(o.rows_.capacity());
    rows_ = o.rows_;
  }
  IndexerKeys& operator=(const IndexerKeys& o) {
    if (this == &o) return *this;
    dim_ = o.dim_;
    rows_.reserve(o.rows_.capacity());
    rows_ = o.rows_, chunks_.clear();
    return *this;
  }
  IndexerKeys(IndexerKeys&&) = default;
  IndexerKeys& operator=(IndexerKeys&&) = default;
  int64_t size() const { return int64_t(rows_.size()) / (dim_ > 0 ? dim_ : 1); }
  int64_t dim() const { return dim_; }
  void truncate(int64_t n);
  void append(const float* k, int64_t n);
  // Packs the chunks of the first n keys not packed yet (the last one again when it has grown
  // since); then chunk() reads them from any thread.
  void pack(int64_t n);
  const kernels::LongRowKeys& chunk(int64_t c) const { return chunks_[size_t(c)]; }
  const float* row(int64_t j) const { return rows_.data() + j * dim_; }
  // Bytes held: the rows' room and the packed chunks.
  size_t bytes() const;

 private:
  int64_t dim_ = 0;
  std::vector<float> rows_;
  std::vector<kernels::LongRowKeys> chunks_;
};

// scores[s] = I[t][s] = sum_h w[t][h] ReLU(q[t][h] . k[s]) for s in [begin, end): one query
// row's scores over a range of keys (the DeepSeek-V3.2-Exp report's Eq. 1), begin a multiple
// of kBlock. The dot products on the score micro-kernels (f32), the head sum in float in head
// order, as ggml's fused lightning indexer adds: the same bits however a caller splits the
// range. scratch holds at least heads x kBlock floats; keys packed past end.
void indexer_scores(const float* q, const float* w, int64_t heads, const IndexerKeys& keys,
                    int64_t begin, int64_t end, float* scores, float* scratch);

// x = H x / sqrt(n) for the n x n Walsh-Hadamard matrix H in Sylvester's order (n a power of
// two): llama.cpp's rotation of the indexer's queries and keys (ggml_gen_hadamard), as a fast
// transform. Orthonormal, so it leaves their products unchanged but for rounding, and the
// stored keys' f16 rounding falls where llama.cpp's does.
void hadamard_rotate(float* x, int64_t n);

// What a layer's call brings the dsa backend (LayerCall::dsa): the call's indexer rows, and the
// layer's indexer keys, which the session keeps (every position's, whichever backend runs) and
// has already extended by the call's rows.
// A full indexer layer's selection, which the layers sharing it (GLM-5.2) attend over: the
// call's rows (one process; rows[0]) or the rank's two runs (across ranks).
struct DsaCarry {
  TokenSelection rows[2];
};
struct DsaCall {
  IndexerRows rows;
  IndexerKeys* keys = nullptr;
  int64_t top_k = 0;
  // shared: the layer has no indexer of its own and attends over carry's selection; else,
  // with carry, its selection goes there for the layers after it.
  bool shared = false;
  DsaCarry* carry = nullptr;
};

// What top_k_as_ggml works in, kept by a caller from row to row.
struct TopKScratch {
  std::vector<int32_t> order;
  std::vector<float> values;
  std::vector<int64_t> candidates;
};
// The k of the n scores that llama.cpp's ggml_top_k keeps on the CPU, into out (in the order
// the call leaves them): std::partial_sort of the indices by greater score, as ggml-cpu does
// it, so that the tokens tied at the cut are the ones llama.cpp keeps (not the earliest:
// src/methods/dsa.cpp says why). 0 < k <= n.
void top_k_as_ggml(const float* scores, int64_t n, int64_t k, TopKScratch& scratch,
                   std::vector<int64_t>& out);

// Each row's tokens: every key up to its position while there are at most top_k, else the
// top_k of highest score, ties at the cut settled as llama.cpp settles them (top_k_as_ggml).
// Rows at positions pos0.. (n of them); the keys already hold theirs.
TokenSelection dsa_select(const IndexerRows& rows, int64_t n, int64_t pos0, IndexerKeys& keys,
                          int64_t top_k, int threads);

}  // namespace spattn
