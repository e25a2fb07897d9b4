// Tensor views [heads, seq, dim] with arbitrary element strides, and an owning Tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "spattn/dtype.hpp"

namespace spattn {

// A non-owning view. Strides are in elements, so both [heads, seq, dim] and
// [seq, heads, dim] buffers are read without copies.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t heads = 0, seq = 0, dim = 0;
  int64_t stride_head = 0, stride_seq = 0, stride_dim = 1;

  // [heads, seq, dim], dim fastest.
  static TensorView hsd(void* data, DType t, int64_t heads, int64_t seq, int64_t dim);
  // [seq, heads, dim]: the layout most models keep their QKV in.
  static TensorView shd(void* data, DType t, int64_t heads, int64_t seq, int64_t dim);

  int64_t offset(int64_t h, int64_t s, int64_t d) const {
    return h * stride_head + s * stride_seq + d * stride_dim;
  }
  void* ptr(int64_t h, int64_t s, int64_t d = 0) const {
    return static_cast<char*>(data) + offset(h, s, d) * int64_t(dtype_size(dtype));
  }
  float get(int64_t h, int64_t s, int64_t d) const { return load_as_f32(ptr(h, s, d), dtype); }
  void set(int64_t h, int64_t s, int64_t d, float v) const {
    store_from_f32(ptr(h, s, d), dtype, v);
  }
  // Rows [begin, begin+len) of the sequence axis, same heads and dims.
  TensorView rows(int64_t begin, int64_t len) const;
  // Heads [begin, begin+len).
  TensorView head_range(int64_t begin, int64_t len) const;
  int64_t numel() const { return heads * seq * dim; }
  bool is_hsd_contiguous() const {
    return stride_dim == 1 && stride_seq == dim && stride_head == seq * dim;
  }
  std::string shape_str() const;  // "[h, s, d] bf16"
};

// Owning, 64-byte aligned, contiguous [heads, seq, dim], zero-filled.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType t, int64_t heads, int64_t seq, int64_t dim);
  // A contiguous copy of any view, converted to dtype t.
  static Tensor copy_of(const TensorView& v, DType t);
  static Tensor copy_of(const TensorView& v) { return copy_of(v, v.dtype); }

  TensorView view() const { return TensorView::hsd(buf_.get(), dtype_, heads_, seq_, dim_); }
  operator TensorView() const { return view(); }
  void* data() const { return buf_.get(); }
  template <class T>
  T* data_as() const {
    return reinterpret_cast<T*>(buf_.get());
  }
  DType dtype() const { return dtype_; }
  int64_t heads() const { return heads_; }
  int64_t seq() const { return seq_; }
  int64_t dim() const { return dim_; }
  int64_t numel() const { return heads_ * seq_ * dim_; }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool empty() const { return !buf_; }

 private:
  struct Free {
    void operator()(void* p) const noexcept;
  };
  std::unique_ptr<char[], Free> buf_;
  DType dtype_ = DType::f32;
  int64_t heads_ = 0, seq_ = 0, dim_ = 0;
};

// Copies src into dst element by element, converting dtype. Shapes must match.
void copy_into(const TensorView& src, const TensorView& dst);

// 64-byte aligned allocation for kernel scratch; throws Error on failure.
void* aligned_alloc_bytes(size_t bytes);
void aligned_free(void* p) noexcept;

}  // namespace spattn
