// Python arrays as spattn tensor views, read in place through their strides, and spattn
// tensors handed to Python without a copy. numpy has no bfloat16: bf16 data crosses as int16
// arrays holding the raw bits, tagged "bf16" (the package's Python layer views torch bfloat16
// tensors that way, and back).
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "spattn/tensor.hpp"

namespace spattn::python {

namespace py = pybind11;

// The axis order of q, k, v and out: flash-attn's [batch, seq, heads, dim] or
// [batch, heads, seq, dim]; the batch axis may be left out.
enum class AxisOrder { bshd, bhsd };
AxisOrder parse_axis_order(const std::string& layout);  // throws Error naming `layout`

// An array argument of rank 3 or 4, viewed as one TensorView per batch element.
struct BatchedView {
  py::array array;  // holds the buffer alive
  bool has_batch = false;
  int64_t batch = 1;
  int64_t batch_stride = 0;  // elements
  TensorView first;          // batch element 0
  TensorView at(int64_t b) const;
};

// Element type of `a`: float32 -> f32, float16 -> f16, int16 tagged "bf16" -> bf16. Throws
// py::type_error naming `name` for any other dtype (integers, float64, objects).
DType array_dtype(const py::array& a, const char* name, const std::string& tag);

// Reads `obj` in place when its strides are non-negative multiples of its item size (any
// contiguous array, a transpose, a slice); otherwise (negative or odd byte strides) reads a
// C-contiguous copy. Throws py::type_error for non-arrays and bad dtypes, Error for bad ranks.
BatchedView batched_view(const py::handle& obj, const char* name, AxisOrder order,
                         const std::string& tag);

// One sequence's [heads, seq, dim] view: rank 3 in `order` without batch, or rank 4 with a
// batch of 1. For the tools, which judge one problem at a time.
TensorView single_view(const BatchedView& b, const char* name);

// A new C-contiguous array of `shape` in dtype t (bf16 as int16 bits).
py::array new_array(DType t, const std::vector<int64_t>& shape);
// The array's numpy dtype for t (bf16 as int16).
py::dtype numpy_dtype(DType t);
// Hands an owning tensor to Python as [heads, seq, dim] without a copy.
py::array tensor_to_array(Tensor t);

}  // namespace spattn::python
