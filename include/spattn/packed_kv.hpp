// PackedKV: K and V packed once into the kernels' tile layout, then reused by any number of
// calls and passes (a KV cache that grows chunk by chunk, the two passes of a method, every
// q head of a GQA group), optionally in a key order the caller chooses.
//
// Keys are appended in order; each keeps its original position, which the causal mask uses, so
// a permuted or gathered key order (grid heads, vertical lines, memory sets) is masked as the
// original sequence would be. Block masks and key ranges given with a PackedKV index packed
// keys (the order they were appended in), not positions.
//
// Query positions: row i of q sits at position q_start + i when AttnOptions::q_start >= 0, else
// bottom-right against the newest key (position max_position() - Lq + 1 + i), which for keys in
// natural order is the usual Lkv - Lq + i.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/blasst.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/kv_type.hpp"

namespace spattn {
namespace kernels {
struct PackedKVData;
}

class PackedKV {
 public:
  // An empty cache of `capacity` keys per kv head, for k/v of `dtype` and head dim `dim`
  // (a multiple of 8, at most 256). The operand format is fixed here, for the object's life:
  // bf16 pairs for vdpbf16ps when dtype is bf16, bf16_dot is true (AttnOptions::bf16_dot) and
  // this CPU has AVX512_BF16; f32 otherwise. Calls over it compute in that format whatever
  // their own options say.
  // k_type / v_type: how keys and values are stored (llama.cpp's -ctk / -ctv; spattn/kv_type.hpp):
  // rows are rounded to them as they are appended (q8_0 as ggml quantizes; needs dim % 32 ==
  // 0), and the kernels widen them to f32 tile by tile as they read. bf16 pairs for vdpbf16ps
  // are used only with both types f32 (the pairs round to bf16 themselves) or both bf16.
  // v_is_k: no values are stored; each key is its own value row (the f32 operands, v_type
  // ignored; appends still take a v, which must have k's shape and is not read). DeepSeek's
  // latent cache (DeepSeek-V2's paper, section 2.1.2): V is the first kv_lora_rank values of
  // the cached latent row, so a caller keeps those values of each output row and drops the rest
  // (which weigh the rope key). Half the memory of storing the latent twice, as llama.cpp's MLA
  // cache (K only) does.
  PackedKV(int64_t kv_heads, int64_t dim, DType dtype, int64_t capacity, bool bf16_dot = true,
           KVType k_type = KVType::f32, KVType v_type = KVType::f32, bool v_is_k = false);
  // Packs every key of k, v (positions 0..Lkv-1); capacity 0 means exactly Lkv.
  static PackedKV pack(const TensorView& k, const TensorView& v, int64_t capacity = 0,
                       int threads = 0, bool bf16_dot = true, KVType k_type = KVType::f32,
                       KVType v_type = KVType::f32, bool v_is_k = false);
  PackedKV(PackedKV&&) noexcept;
  PackedKV& operator=(PackedKV&&) noexcept;
  ~PackedKV();

  // Appends every row of k, v ([kv_heads, n, dim], the cache's dtype) with positions
  // size() .. size() + n - 1 when positions is empty, else the given ones (n of them, >= 0).
  // All or nothing: every argument is checked and the rows written before size() grows; a call
  // that throws leaves the cache as it was, bytes included.
  void append(const TensorView& k, const TensorView& v, std::span<const int64_t> positions = {},
              int threads = 0);
  // Appends rows order[0], order[1], ... of k, v (a permutation or a gathered subset; any
  // row at most once) with their row indices as positions, or the given positions.
  void append_rows(const TensorView& k, const TensorView& v, std::span<const int64_t> order,
                   std::span<const int64_t> positions = {}, int threads = 0);
  // Drops every key (capacity and format stay).
  void clear();
  // Keeps the first n keys (0 <= n <= size()) and drops the rest: the bytes, positions and
  // spans are what appending those n keys to an empty cache gives, so later appends and calls
  // compute what they would have without the dropped keys.
  void truncate(int64_t n);
  // A new cache of the same capacity, format and dtype holding this one's first `keys` keys
  // (all when -1): the bytes this one would hold after truncate(keys), copied, not repacked.
  PackedKV copy(int64_t keys = -1) const;

  int64_t size() const;
  int64_t capacity() const;
  size_t bytes() const;  // storage held: K and V tiles at capacity, and the positions
  bool v_is_k() const;   // values are the keys (no V stored; see the constructor)
  int64_t kv_heads() const;
  int64_t dim() const;
  DType dtype() const;
  bool bf16_operands() const;  // packed as bf16 pairs for vdpbf16ps
  KVType k_type() const;       // how keys are stored (bf16 for bf16 pairs)
  KVType v_type() const;       // how values are stored (k_type() when v_is_k())
  std::span<const int64_t> positions() const;
  int64_t max_position() const;  // -1 when empty

  // Packed key i of kv head kvh as stored (widened to f32: the values the kernels compute
  // with), dim() floats into out. Not for caches packed as bf16 pairs (Error).
  void read_key(int64_t kvh, int64_t i, float* out) const;

  const kernels::PackedKVData& data() const { return *d_; }

 private:
  PackedKV() = default;
  void write_rows(const TensorView& k, const TensorView& v, const int64_t* src_rows,
                  const int64_t* positions, int64_t n, int threads);
  std::unique_ptr<kernels::PackedKVData> d_;
};

// The dense and block-sparse forms and the query-sparse pass over a packed K/V. q is
// [Hq, Lq, d] with Hq a multiple of kv.kv_heads(); opt.q_start places the queries (see above).
void attention_dense(const TensorView& q, const PackedKV& kv, const TensorView& out,
                     const AttnOptions& opt = {}, float* lse = nullptr, Stats* stats = nullptr);
// Both sparse forms take an optional BLASST skip rule (spattn/blasst.hpp, BlasstSkip).
void attention_block_sparse(const TensorView& q, const PackedKV& kv, const TensorView& out,
                            const BlockMask& mask, const AttnOptions& opt = {},
                            float* lse = nullptr, Stats* stats = nullptr,
                            const BlasstSkip* skip = nullptr);
// Compact output as attention_query_sparse; the observer sees packed 64-key tiles. Under a
// skip rule the observer also sees each skipped tile, with LSE -inf for every row (the tile's
// mass is not computed), so it is told of every tile either way.
void attention_query_sparse(const TensorView& q, const PackedKV& kv,
                            const std::vector<int64_t>& rows, const TensorView& out,
                            const AttnOptions& opt = {}, float* lse = nullptr,
                            BlockLseObserver* observer = nullptr, Stats* stats = nullptr,
                            const BlasstSkip* skip = nullptr);

}  // namespace spattn
