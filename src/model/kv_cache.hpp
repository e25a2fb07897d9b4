// The model runner's KV cache: per layer, the keys and values of every token so far, packed for
// the kernels (one PackedKV per layer: what dense and chunked prefill and decode attend over)
// and, when asked, the same rows as tensors for library methods, which take k and v as views
// (prefill with --attn SPEC). One append writes both, so they hold the same tokens always.
//
// Appends are staged: a forward pass appends its rows to each layer in turn (a layer's
// attention sees its own new rows at once), and they count only when commit() is called with
// every layer holding them; rollback() returns every layer to the committed tokens, bytes
// included. A pass that fails in any layer therefore leaves the cache as it was.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "spattn/kv_type.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/quest.hpp"
#include "spattn/tensor.hpp"

namespace spattn::model {

class KVCache {
 public:
  // n_layer layers of kv_heads x dim keys with room for `capacity` tokens, given as `dtype`
  // rows (appends give rows of this dtype) and stored as k_type / v_type (llama.cpp's -ctk /
  // -ctv; the packed tiles hold them in that type). raw: keep every row as a tensor too
  // (raw_k, raw_v), in `dtype`, holding the values the packed cache holds (rounded to k_type /
  // v_type), so methods read the same keys as the kernels over the packed cache.
  // quest_page > 0: per layer also Quest's page summaries (spattn/quest.hpp) of that page
  // size, written by every append and kept through commit, rollback, truncate and fork; in
  // the layers quest_layers marks (empty: every layer). A layer that never decodes by Quest
  // (its dense layers, a sliding window's) then pays neither their memory nor their appends.
  // v_is_k: every layer's values are its keys (PackedKV's v_is_k: DeepSeek's latent cache),
  // stored once as k_type (v_type ignored); appends' v is not read, and raw_v is raw_k.
  KVCache(int64_t n_layer, int64_t kv_heads, int64_t dim, int64_t capacity, DType dtype, bool raw,
          KVType k_type = KVType::f32, KVType v_type = KVType::f32, int64_t quest_page = 0,
          QuestSums quest_sums = QuestSums::cache, const std::vector<bool>& quest_layers = {},
          bool v_is_k = false);
  KVCache(KVCache&&) noexcept = default;
  KVCache& operator=(KVCache&&) noexcept = default;

  int64_t n_layer() const { return int64_t(packed_.size()); }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t dim() const { return dim_; }
  int64_t capacity() const { return capacity_; }
  DType dtype() const { return dtype_; }
  KVType k_type() const { return k_type_; }
  KVType v_type() const { return v_type_; }
  bool v_is_k() const { return v_is_k_; }
  bool has_raw() const { return !raw_k_.empty(); }
  size_t packed_bytes() const;  // every layer's PackedKV storage, at capacity
  // The K and V tiles' bytes one token takes over every layer, as stored (-ctk / -ctv; q8_0's
  // scales included, the token's position not): what each token adds to packed_bytes().
  size_t bytes_per_token() const;
  size_t raw_bytes() const;  // the raw rows' tensors, at capacity (0 without raw)

  // Committed tokens: what every layer holds outside a pass.
  int64_t size() const { return size_; }
  // Rows layer l holds now: committed and staged.
  int64_t layer_size(int64_t l) const;
  bool staged() const;  // some layer holds rows not yet committed

  // Stages k, v ([kv_heads, n, dim], the cache's dtype) after layer l's rows, at positions
  // layer_size(l) .. or the given ones (a context-parallel rank holds the positions it owns;
  // packed cache only: not with raw rows or Quest's pages); a refused call changes nothing.
  void append(int64_t l, const TensorView& k, const TensorView& v, int threads,
              std::span<const int64_t> positions = {});
  // The staged rows become committed. Every layer must hold the same number of rows (else
  // Error, and nothing changes).
  void commit();
  // Drops every staged row: each layer as it was at the last commit, bytes included.
  void rollback();
  // Keeps the first n committed tokens, 0 <= n <= size(); nothing may be staged.
  void truncate(int64_t n);
  // A new cache of the same shape, dtype and capacity holding the first n committed tokens
  // (all when -1): the tiles are copied, nothing is recomputed. Nothing may be staged.
  KVCache fork(int64_t n = -1) const;

  const PackedKV& packed(int64_t l) const;
  // Whether layer l keeps page summaries.
  bool has_pages(int64_t l) const {
    return l >= 0 && size_t(l) < pages_.size() && pages_[size_t(l)].has_value();
  }
  // Layer l's page summaries (has_pages(l) only, else Error), covering layer_size(l) keys.
  const QuestPages& pages(int64_t l) const;
  size_t pages_bytes() const;
  // Layer l's rows [0, layer_size(l)) as [kv_heads, rows, dim] views; has_raw() only.
  TensorView raw_k(int64_t l) const;
  TensorView raw_v(int64_t l) const;

 private:
  KVCache() = default;
  void check_layer(int64_t l) const;
  int64_t kv_heads_ = 0, dim_ = 0, capacity_ = 0, size_ = 0;
  DType dtype_ = DType::f32;
  KVType k_type_ = KVType::f32, v_type_ = KVType::f32;
  bool v_is_k_ = false;
  std::vector<PackedKV> packed_;
  std::vector<Tensor> raw_k_, raw_v_;             // raw_v_ empty where v_is_k
  std::vector<std::optional<QuestPages>> pages_;  // per layer (empty where none), or none
};

}  // namespace spattn::model
