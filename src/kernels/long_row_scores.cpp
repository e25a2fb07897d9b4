// Long-row Q K^T (long_row_scores.hpp) through the flash kernel's Scores micro-kernels.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/long_row_scores.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstring>

#include "kernels/flash-inl.h"
#include "kernels/long_row_scores.hpp"
#include "spattn/error.hpp"

HWY_BEFORE_NAMESPACE();
namespace spattn::kernels::HWY_NAMESPACE {

// Keys [from, to) of k into their slots of tiles already zeroed.
template <class Ops>
void PackRows(const float* k, int64_t from, int64_t to, int64_t w, void* dst) {
  using T = typename Ops::T;
  T* t = static_cast<T*>(dst);
  const int64_t elems = Ops::k_tile_elems(w);
  std::vector<float> row_buf(size_t(w) + 16);
  const TensorView kv = TensorView::shd(const_cast<float*>(k), DType::f32, 1, to, w);
  for (int64_t j = from; j < to; ++j)
    Ops::PackKeyK(kv, 0, j, j % kTileKeys, w, t + (j / kTileKeys) * elems, row_buf.data());
}

template <class Ops>
void PackWith(const float* k, int64_t n, int64_t w, int64_t tiles, void* dst) {
  using T = typename Ops::T;
  std::fill(static_cast<T*>(dst), static_cast<T*>(dst) + tiles * Ops::k_tile_elems(w), T(0));
  PackRows<Ops>(k, 0, n, w, dst);
}

template <class Ops>
void ScoresWith(const float* q, int64_t rows, const LongRowKeys& keys, int64_t first, int64_t cols,
                float alpha, float* s, int64_t lds) {
  using T = typename Ops::T;
  const int64_t w = keys.w, npad = (rows + kR - 1) / kR * kR;
  const int64_t elems = Ops::k_tile_elems(w);
  std::unique_ptr<T[], void (*)(void*)> qp(
      static_cast<T*>(aligned_alloc_bytes(size_t(npad * w) * sizeof(T))), aligned_free);
  std::unique_ptr<float[], void (*)(void*)> tile(
      static_cast<float*>(aligned_alloc_bytes(size_t(npad * kTileKeys) * sizeof(float))),
      aligned_free);
  std::vector<int64_t> idx(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) idx[size_t(r)] = r;
  const TensorView qv = TensorView::shd(const_cast<float*>(q), DType::f32, 1, rows, w);
  Ops::PackQ(qv, 0, idx.data(), rows, npad, w, qp.get());
  const T* kt = reinterpret_cast<const T*>(keys.data.get()) + (first / kTileKeys) * elems;
  for (int64_t j0 = 0; j0 < cols; j0 += kTileKeys) {
    Ops::Scores(qp.get(), npad, kt + (j0 / kTileKeys) * elems, w, tile.get());
    const int64_t n = std::min(kTileKeys, cols - j0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t jj = 0; jj < n; ++jj)
        s[r * lds + j0 + jj] = alpha * tile[size_t(r * kTileKeys + jj)];
  }
}

// Returns whether the tiles are bf16 pairs: only the AVX3 target has them.
bool PackEntry(const float* k, int64_t n, int64_t w, int64_t tiles, bool bf16, void* dst) {
#if HWY_TARGET == HWY_AVX3
  if (bf16 && bf16_dot_supported()) {
    PackWith<Bf16DotOps>(k, n, w, tiles, dst);
    return true;
  }
#endif
  (void)bf16;
  PackWith<F32Ops>(k, n, w, tiles, dst);
  return false;
}

void AppendEntry(const float* k, int64_t from, int64_t to, int64_t w, bool bf16, void* dst) {
#if HWY_TARGET == HWY_AVX3
  if (bf16) return PackRows<Bf16DotOps>(k, from, to, w, dst);
#else
  SPATTN_CHECK(!bf16, "long-row scores: bf16 tiles on a target without them");
#endif
  PackRows<F32Ops>(k, from, to, w, dst);
}

void ScoresEntry(const float* q, int64_t rows, const LongRowKeys* keys, int64_t first, int64_t cols,
                 float alpha, float* s, int64_t lds) {
#if HWY_TARGET == HWY_AVX3
  if (keys->bf16) return ScoresWith<Bf16DotOps>(q, rows, *keys, first, cols, alpha, s, lds);
#else
  SPATTN_CHECK(!keys->bf16, "long-row scores: bf16 tiles on a target without them");
#endif
  ScoresWith<F32Ops>(q, rows, *keys, first, cols, alpha, s, lds);
}

}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spattn::kernels {
HWY_EXPORT(PackEntry);
HWY_EXPORT(AppendEntry);
HWY_EXPORT(ScoresEntry);

// The bf16 tiles exist only in the AVX3 target's code (the one dispatched to where the CPU has
// AVX-512; see simd_target_name).
bool long_row_bf16_supported() {
  const int64_t best = hwy::SupportedTargets() & HWY_TARGETS;
  return bf16_dot_supported() && (best & -best) == HWY_AVX3;
}

void copy_row_f32(const TensorView& t, int64_t h, int64_t s, float* dst) {
  if (t.dtype == DType::f32 && t.stride_dim == 1) {
    std::memcpy(dst, t.ptr(h, s), size_t(t.dim) * sizeof(float));
    return;
  }
  for (int64_t c = 0; c < t.dim; ++c) dst[c] = t.get(h, s, c);
}

LongRowKeys pack_long_row_keys(const float* k, int64_t n, int64_t w, bool bf16, int64_t capacity) {
  SPATTN_CHECK(n >= 0 && w >= 2 && w % 2 == 0, "long-row scores: ", n, " keys of ", w,
               " values (an even number >= 2)");
  LongRowKeys keys;
  keys.n = n;
  keys.w = w;
  keys.tiles = std::max<int64_t>(1, (std::max(n, capacity) + kTileKeys - 1) / kTileKeys);
  keys.data.reset(static_cast<unsigned char*>(
      aligned_alloc_bytes(size_t(keys.tiles * w * kTileKeys) * sizeof(float))));
  keys.bf16 = HWY_DYNAMIC_DISPATCH(PackEntry)(k, n, w, keys.tiles, bf16, keys.data.get());
  return keys;
}

void append_long_row_keys(LongRowKeys& keys, const float* k, int64_t n) {
  SPATTN_CHECK(n >= keys.n && n <= keys.room(), "long-row scores: appending to ", n, " keys of ",
               keys.n, " packed, room for ", keys.room());
  HWY_DYNAMIC_DISPATCH(AppendEntry)(k, keys.n, n, keys.w, keys.bf16, keys.data.get());
  keys.n = n;
}

void long_row_scores(const float* q, int64_t rows, const LongRowKeys& keys, int64_t cols,
                     float alpha, float* s, int64_t lds, int64_t first) {
  SPATTN_CHECK(rows >= 0 && cols >= 0 && first >= 0 && first % kTileKeys == 0 &&
                   first + cols <= keys.n && lds >= cols,
               "long-row scores: ", rows, " x ", cols, " scores from key ", first, " of ", keys.n,
               " keys, stride ", lds);
  if (rows == 0 || cols == 0) return;
  HWY_DYNAMIC_DISPATCH(ScoresEntry)(q, rows, &keys, first, cols, alpha, s, lds);
}

}  // namespace spattn::kernels
#endif  // HWY_ONCE
