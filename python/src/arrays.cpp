#include "arrays.hpp"

#include <utility>

#include "spattn/error.hpp"

namespace spattn::python {

AxisOrder parse_axis_order(const std::string& layout) {
  if (layout == "bshd") return AxisOrder::bshd;
  if (layout == "bhsd") return AxisOrder::bhsd;
  detail::fail(
      "layout must be 'bshd' ([batch, seq, heads, dim]) or 'bhsd' ([batch, heads, seq, "
      "dim]), got '",
      layout, "'");
}

TensorView BatchedView::at(int64_t b) const {
  TensorView t = first;
  t.data = static_cast<char*>(first.data) + b * batch_stride * int64_t(dtype_size(first.dtype));
  return t;
}

DType array_dtype(const py::array& a, const char* name, const std::string& tag) {
  const py::dtype dt = a.dtype();
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (tag == "bf16") {
    if (kind == 'i' && size == 2) return DType::bf16;
    throw py::type_error(std::string(name) + ": bfloat16 data must come as int16 bits");
  }
  if (kind == 'f' && size == 4) return DType::f32;
  if (kind == 'f' && size == 2) return DType::f16;
  throw py::type_error(std::string(name) + ": dtype " + std::string(py::str(py::object(dt))) +
                       " is not supported; pass float32, float16 or bfloat16");
}

namespace {

bool strides_readable(const py::array& a) {
  const auto item = a.itemsize();
  for (py::ssize_t i = 0; i < a.ndim(); ++i)
    if (a.strides(i) < 0 || a.strides(i) % item != 0) return false;
  return true;
}

}  // namespace

BatchedView batched_view(const py::handle& obj, const char* name, AxisOrder order,
                         const std::string& tag) {
  if (!py::isinstance<py::array>(obj))
    throw py::type_error(std::string(name) + ": expected a numpy array or a torch tensor, got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  BatchedView b;
  b.array = py::reinterpret_borrow<py::array>(obj);
  const DType t = array_dtype(b.array, name, tag);
  const auto rank = b.array.ndim();
  const char* shape =
      order == AxisOrder::bshd ? "[batch, seq, heads, dim]" : "[batch, heads, seq, dim]";
  SPATTN_CHECK(rank == 3 || rank == 4, name, " must have rank 4 ", shape,
               " or 3 (the same without batch), got rank ", rank);
  if (!strides_readable(b.array))
    b.array = py::module_::import("numpy").attr("ascontiguousarray")(b.array);
  const py::array& a = b.array;
  const int64_t item = a.itemsize();
  b.has_batch = rank == 4;
  const int off = b.has_batch ? 1 : 0;
  b.batch = b.has_batch ? a.shape(0) : 1;
  b.batch_stride = b.has_batch ? a.strides(0) / item : 0;
  const int h_axis = off + (order == AxisOrder::bshd ? 1 : 0);
  const int s_axis = off + (order == AxisOrder::bshd ? 0 : 1);
  TensorView& v = b.first;
  v.data = const_cast<void*>(a.data());
  v.dtype = t;
  v.heads = a.shape(h_axis);
  v.seq = a.shape(s_axis);
  v.dim = a.shape(off + 2);
  v.stride_head = a.strides(h_axis) / item;
  v.stride_seq = a.strides(s_axis) / item;
  v.stride_dim = a.strides(off + 2) / item;
  SPATTN_CHECK(b.batch > 0, name, ": batch must be > 0, got ", b.batch);
  return b;
}

TensorView single_view(const BatchedView& b, const char* name) {
  SPATTN_CHECK(b.batch == 1, name,
               ": this function takes one sequence (no batch axis, or a "
               "batch of 1), got batch ",
               b.batch);
  return b.first;
}

py::dtype numpy_dtype(DType t) {
  switch (t) {
    case DType::f32: return py::dtype("float32");
    case DType::f16: return py::dtype("float16");
    case DType::bf16: break;  // numpy has no bfloat16: its bits, as int16
  }
  return py::dtype("int16");
}

py::array new_array(DType t, const std::vector<int64_t>& shape) {
  std::vector<py::ssize_t> s(shape.begin(), shape.end());
  return py::array(numpy_dtype(t), s);
}

py::array tensor_to_array(Tensor t) {
  auto* owned = new Tensor(std::move(t));
  py::capsule free(owned, [](void* p) { delete static_cast<Tensor*>(p); });
  const auto item = py::ssize_t(dtype_size(owned->dtype()));
  const std::vector<py::ssize_t> shape{owned->heads(), owned->seq(), owned->dim()};
  const std::vector<py::ssize_t> strides{owned->seq() * owned->dim() * item, owned->dim() * item,
                                         item};
  return py::array(numpy_dtype(owned->dtype()), shape, strides, owned->data(), free);
}

}  // namespace spattn::python
