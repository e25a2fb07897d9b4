#include "model/kv_cache.hpp"

#include "kernels/packed_kv.hpp"
#include "spattn/error.hpp"

namespace spattn::model {

namespace {
// Rounds every row of t in place as a cache of type `type` stores it (kv_round_row).
void round_rows(const TensorView& t, KVType type) {
  if (type == KVType::f32) return;
  std::vector<float> row(size_t(t.dim));
  for (int64_t h = 0; h < t.heads; ++h)
    for (int64_t s = 0; s < t.seq; ++s) {
      for (int64_t c = 0; c < t.dim; ++c) row[size_t(c)] = t.get(h, s, c);
      kv_round_row(type, row.data(), row.data(), t.dim);
      for (int64_t c = 0; c < t.dim; ++c) t.set(h, s, c, row[size_t(c)]);
    }
}
}  // namespace

KVCache::KVCache(int64_t n_layer, int64_t kv_heads, int64_t dim, int64_t capacity, DType dtype,
                 bool raw, KVType k_type, KVType v_type, int64_t quest_page, QuestSums quest_sums,
                 const std::vector<bool>& quest_layers, bool v_is_k)
    : kv_heads_(kv_heads),
      dim_(dim),
      capacity_(capacity),
      dtype_(dtype),
      k_type_(k_type),
      v_type_(v_is_k ? k_type : v_type),
      v_is_k_(v_is_k) {
  SPATTN_CHECK(n_layer >= 1, "KV cache: layers must be >= 1, got ", n_layer);
  packed_.reserve(size_t(n_layer));
  for (int64_t l = 0; l < n_layer; ++l)
    packed_.emplace_back(kv_heads, dim, dtype, capacity, /*bf16_dot=*/true, k_type, v_type_,
                         v_is_k);
  SPATTN_CHECK(quest_layers.empty() || int64_t(quest_layers.size()) == n_layer,
               "KV cache: Quest's layer list has ", quest_layers.size(), " entries for ", n_layer,
               " layers");
  if (quest_page > 0) {
    pages_.resize(size_t(n_layer));
    for (int64_t l = 0; l < n_layer; ++l)
      if (quest_layers.empty() || quest_layers[size_t(l)])
        pages_[size_t(l)].emplace(kv_heads, dim, quest_page, capacity, k_type, quest_sums);
  }
  if (raw)
    for (int64_t l = 0; l < n_layer; ++l) {
      raw_k_.emplace_back(dtype, kv_heads, capacity, dim);
      if (!v_is_k) raw_v_.emplace_back(dtype, kv_heads, capacity, dim);
    }
}

void KVCache::check_layer(int64_t l) const {
  SPATTN_CHECK(l >= 0 && l < n_layer(), "KV cache: layer ", l, " outside [0, ", n_layer(), ")");
}

int64_t KVCache::layer_size(int64_t l) const {
  check_layer(l);
  return packed_[size_t(l)].size();
}

bool KVCache::staged() const {
  for (const PackedKV& p : packed_)
    if (p.size() != size_) return true;
  return false;
}

void KVCache::append(int64_t l, const TensorView& k, const TensorView& v, int threads,
                     std::span<const int64_t> positions) {
  check_layer(l);
  SPATTN_CHECK(positions.empty() || (!has_raw() && !has_pages(l)),
               "KV cache: rows at given positions go to the packed cache only");
  PackedKV& p = packed_[size_t(l)];
  const int64_t at = p.size();
  // The packed rows first (they check everything), then the raw copy, which cannot fail on
  // rows the packer took; should it, the packed rows go again.
  p.append(k, v, positions, threads);
  if (has_raw()) {
    try {
      const TensorView rk = raw_k_[size_t(l)].view().rows(at, k.seq);
      copy_into(k, rk);
      round_rows(rk, k_type_);
      if (!v_is_k_) {
        const TensorView rv = raw_v_[size_t(l)].view().rows(at, v.seq);
        copy_into(v, rv);
        round_rows(rv, v_type_);
      }
    } catch (...) {
      p.truncate(at);
      throw;
    }
  }
  if (has_pages(l)) {
    try {
      pages_[size_t(l)]->append(k);
    } catch (...) {
      p.truncate(at);
      throw;
    }
  }
}

void KVCache::commit() {
  const int64_t n = packed_.front().size();
  for (int64_t l = 0; l < n_layer(); ++l)
    SPATTN_CHECK(packed_[size_t(l)].size() == n, "KV cache: layer ", l, " holds ",
                 packed_[size_t(l)].size(), " tokens and layer 0 ", n,
                 ": a pass must append to every layer before it commits");
  size_ = n;
}

void KVCache::rollback() {
  // Raw rows past a layer's size are never read (raw_k/raw_v end there), so only the packed
  // caches, whose tails the kernels read as zeros, are restored.
  for (PackedKV& p : packed_)
    if (p.size() > size_) p.truncate(size_);
  for (size_t l = 0; l < pages_.size(); ++l)
    if (pages_[l] && pages_[l]->size() > size_) pages_[l]->truncate(size_, packed_[l]);
}

void KVCache::truncate(int64_t n) {
  SPATTN_CHECK(!staged(), "KV cache: truncate during a pass (rows staged but not committed)");
  SPATTN_CHECK(n >= 0 && n <= size_, "KV cache: truncate to ", n, " tokens, outside [0, ", size_,
               "]");
  for (PackedKV& p : packed_) p.truncate(n);
  for (size_t l = 0; l < pages_.size(); ++l)
    if (pages_[l]) pages_[l]->truncate(n, packed_[l]);
  size_ = n;
}

KVCache KVCache::fork(int64_t n) const {
  SPATTN_CHECK(!staged(), "KV cache: fork during a pass (rows staged but not committed)");
  if (n < 0) n = size_;
  SPATTN_CHECK(n <= size_, "KV cache: fork of ", n, " tokens from ", size_);
  KVCache c;
  c.kv_heads_ = kv_heads_;
  c.dim_ = dim_;
  c.capacity_ = capacity_;
  c.dtype_ = dtype_;
  c.k_type_ = k_type_;
  c.v_type_ = v_type_;
  c.v_is_k_ = v_is_k_;
  c.size_ = n;
  c.packed_.reserve(packed_.size());
  for (const PackedKV& p : packed_) c.packed_.push_back(p.copy(n));
  for (size_t l = 0; l < pages_.size(); ++l) {
    c.pages_.push_back(pages_[l]);
    if (c.pages_.back()) c.pages_.back()->truncate(n, c.packed_[l]);
  }
  for (size_t l = 0; l < raw_k_.size(); ++l) {
    c.raw_k_.emplace_back(dtype_, kv_heads_, capacity_, dim_);
    if (n > 0) copy_into(raw_k_[l].view().rows(0, n), c.raw_k_[l].view().rows(0, n));
  }
  for (size_t l = 0; l < raw_v_.size(); ++l) {
    c.raw_v_.emplace_back(dtype_, kv_heads_, capacity_, dim_);
    if (n > 0) copy_into(raw_v_[l].view().rows(0, n), c.raw_v_[l].view().rows(0, n));
  }
  return c;
}

const PackedKV& KVCache::packed(int64_t l) const {
  check_layer(l);
  return packed_[size_t(l)];
}

const QuestPages& KVCache::pages(int64_t l) const {
  check_layer(l);
  SPATTN_CHECK(has_pages(l), "KV cache: layer ", l, " keeps no Quest page summaries");
  return *pages_[size_t(l)];
}

size_t KVCache::pages_bytes() const {
  size_t b = 0;
  for (const auto& p : pages_)
    if (p) b += p->bytes();
  return b;
}

TensorView KVCache::raw_k(int64_t l) const {
  check_layer(l);
  SPATTN_CHECK(has_raw(), "KV cache: made without raw rows");
  return raw_k_[size_t(l)].view().rows(0, packed_[size_t(l)].size());
}

TensorView KVCache::raw_v(int64_t l) const {
  check_layer(l);
  SPATTN_CHECK(has_raw(), "KV cache: made without raw rows");
  if (v_is_k_) return raw_k(l);
  return raw_v_[size_t(l)].view().rows(0, packed_[size_t(l)].size());
}

size_t KVCache::packed_bytes() const {
  size_t b = 0;
  for (const PackedKV& c : packed_) b += c.bytes();
  return b;
}

size_t KVCache::bytes_per_token() const {
  size_t b = 0;
  for (const PackedKV& p : packed_) {
    const kernels::PackedKVData& d = p.data();
    b += size_t(d.kv_heads * (d.k_tile_bytes + d.v_tile_bytes) / kernels::kTileKeys);
  }
  return b;
}

size_t KVCache::raw_bytes() const {
  size_t b = 0;
  for (const auto* raw : {&raw_k_, &raw_v_})
    for (const Tensor& t : *raw) b += t.nbytes();
  return b;
}

}  // namespace spattn::model
