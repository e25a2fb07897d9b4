#include "spattn/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <limits>
#if __has_include(<sys/mman.h>)
#include <sys/mman.h>  // madvise
#endif

#include "spattn/error.hpp"

namespace spattn {

TensorView TensorView::hsd(void* data, DType t, int64_t heads, int64_t seq, int64_t dim) {
  return TensorView{data, t, heads, seq, dim, seq * dim, dim, 1};
}

TensorView TensorView::shd(void* data, DType t, int64_t heads, int64_t seq, int64_t dim) {
  return TensorView{data, t, heads, seq, dim, dim, heads * dim, 1};
}

TensorView TensorView::rows(int64_t begin, int64_t len) const {
  SPATTN_CHECK(begin >= 0 && len >= 0 && begin + len <= seq, "rows [", begin, ", ", begin + len,
               ") out of range for seq ", seq);
  TensorView v = *this;
  v.data = seq > 0 && len > 0 ? ptr(0, begin, 0) : data;
  v.seq = len;
  return v;
}

TensorView TensorView::head_range(int64_t begin, int64_t len) const {
  SPATTN_CHECK(begin >= 0 && len >= 0 && begin + len <= heads, "heads [", begin, ", ", begin + len,
               ") out of range for ", heads, " heads");
  TensorView v = *this;
  v.data = heads > 0 && len > 0 ? ptr(begin, 0, 0) : data;
  v.heads = len;
  return v;
}

std::string TensorView::shape_str() const {
  return "[" + std::to_string(heads) + ", " + std::to_string(seq) + ", " + std::to_string(dim) +
         "] " + dtype_name(dtype);
}

void* aligned_alloc_bytes(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
#ifdef MADV_HUGEPAGE
  // A large buffer (a layer's KV cache, a long workload) goes on transparent huge pages where
  // the system offers them only on request (THP "madvise", a common default): decode reads a
  // layer's whole cache each token, and a page selection (Quest) reads 16-key pieces scattered
  // over it, each touching several 4 KiB pages; with 2 MiB pages the TLB stops missing.
  // Measured on code-small-32k's shape at 32K keys (bench_decode's BM_QuestDecode, six layers'
  // caches, Zen 5, five alternating runs each): dense decode 1.57-1.81 ms a layer against
  // 1.94-2.03 on 4 KiB pages (BENCHMARKS.md, "Sparse decode (issue 22), stage 3").
  constexpr size_t kHuge = size_t(2) << 20;
  if (rounded >= 2 * kHuge) {
    rounded = (rounded + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, rounded);
    SPATTN_CHECK(p, "out of memory allocating ", bytes, " bytes");
    madvise(p, rounded, MADV_HUGEPAGE);  // advice only: without THP it changes nothing
    return p;
  }
#endif
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  SPATTN_CHECK(p || rounded == 0, "out of memory allocating ", bytes, " bytes");
  return p;
}

void aligned_free(void* p) noexcept { std::free(p); }

void Tensor::Free::operator()(void* p) const noexcept { aligned_free(p); }

Tensor::Tensor(DType t, int64_t heads, int64_t seq, int64_t dim)
    : dtype_(t), heads_(heads), seq_(seq), dim_(dim) {
  SPATTN_CHECK(heads >= 0 && seq >= 0 && dim >= 0, "negative tensor shape [", heads, ", ", seq,
               ", ", dim, "]");
  SPATTN_CHECK(heads == 0 || seq == 0 || dim == 0 ||
                   (heads <= std::numeric_limits<int64_t>::max() / seq / dim / 4),
               "tensor shape too large");
  size_t bytes = nbytes();
  if (bytes) {
    buf_.reset(static_cast<char*>(aligned_alloc_bytes(bytes)));
    std::memset(buf_.get(), 0, bytes);
  }
}

Tensor Tensor::copy_of(const TensorView& v, DType t) {
  Tensor out(t, v.heads, v.seq, v.dim);
  copy_into(v, out.view());
  return out;
}

void copy_into(const TensorView& src, const TensorView& dst) {
  SPATTN_CHECK(src.heads == dst.heads && src.seq == dst.seq && src.dim == dst.dim, "copy: shape ",
               src.shape_str(), " does not match ", dst.shape_str());
  if (src.numel() == 0) return;
  SPATTN_CHECK(src.data && dst.data, "copy: null data");
  for (int64_t h = 0; h < src.heads; ++h)
    for (int64_t s = 0; s < src.seq; ++s) {
      if (src.dtype == dst.dtype && src.stride_dim == 1 && dst.stride_dim == 1) {
        std::memcpy(dst.ptr(h, s), src.ptr(h, s), size_t(src.dim) * dtype_size(src.dtype));
      } else {
        for (int64_t d = 0; d < src.dim; ++d) dst.set(h, s, d, src.get(h, s, d));
      }
    }
}

}  // namespace spattn
