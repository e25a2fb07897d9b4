// spattn._core.cuda_attention: a method run on torch CUDA tensors, read and written in place
// through raw device pointers and element strides that the Python layer takes from torch
// (data_ptr(), stride()). The extension neither links nor includes torch: a tensor crosses as
// (pointer, shape, strides), the stream as the integer torch.cuda.current_stream().cuda_stream.
// The work runs on that stream, on the tensors' device (made current for the call).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "report_dict.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"

namespace spattn::python {
namespace {

// One device tensor argument as the Python layer passes it: (data_ptr, shape, strides), the
// strides in elements as torch gives them.
using DeviceArg = std::tuple<uintptr_t, std::vector<int64_t>, std::vector<int64_t>>;

struct DeviceBatch {
  bool has_batch = false;
  int64_t batch = 1, batch_stride = 0;
  TensorView first;
  TensorView at(int64_t b) const {
    TensorView v = first;
    v.data = static_cast<char*>(v.data) + b * batch_stride * int64_t(dtype_size(v.dtype));
    return v;
  }
};

DeviceBatch device_batch(const DeviceArg& arg, const char* name, AxisOrder order, DType t) {
  struct {
    uintptr_t ptr;
    const std::vector<int64_t>&shape, &strides;
  } a{std::get<0>(arg), std::get<1>(arg), std::get<2>(arg)};
  const size_t rank = a.shape.size();
  const char* shape =
      order == AxisOrder::bshd ? "[batch, seq, heads, dim]" : "[batch, heads, seq, dim]";
  SPATTN_CHECK(rank == 3 || rank == 4, name, " must have rank 4 ", shape,
               " or 3 (the same without batch), got rank ", rank);
  SPATTN_CHECK(a.strides.size() == rank, name, ": ", a.strides.size(), " strides for rank ", rank);
  for (size_t i = 0; i < rank; ++i)
    SPATTN_CHECK(a.strides[i] >= 0, name, ": negative strides are not supported");
  DeviceBatch b;
  b.has_batch = rank == 4;
  const size_t off = b.has_batch ? 1 : 0;
  b.batch = b.has_batch ? a.shape[0] : 1;
  b.batch_stride = b.has_batch ? a.strides[0] : 0;
  const size_t h = off + (order == AxisOrder::bshd ? 1 : 0);
  const size_t s = off + (order == AxisOrder::bshd ? 0 : 1);
  TensorView& v = b.first;
  v.data = reinterpret_cast<void*>(a.ptr);
  v.dtype = t;
  v.heads = a.shape[h];
  v.seq = a.shape[s];
  v.dim = a.shape[off + 2];
  v.stride_head = a.strides[h];
  v.stride_seq = a.strides[s];
  v.stride_dim = a.strides[off + 2];
  SPATTN_CHECK(b.batch > 0, name, ": batch must be > 0, got ", b.batch);
  return b;
}

DType device_dtype(const std::string& name) {
  if (name == "bf16") return DType::bf16;
  if (name == "f16") return DType::f16;
  throw py::type_error("CUDA tensors: dtype must be bfloat16 or float16, got " + name);
}

// out and lse are torch tensors the Python layer allocated on q's device: out with q's shape
// and layout, lse (pointer 0: not asked for) [batch, heads, q_len] or [heads, q_len], f32,
// contiguous. Returns the reports, one per batch element (a dict without a batch axis).
py::object cuda_attention(const DeviceArg& q, const DeviceArg& k, const DeviceArg& v,
                          const DeviceArg& out, uintptr_t lse, const std::string& dtype, int device,
                          uintptr_t stream, const std::string& method, bool causal,
                          std::optional<double> scale, const std::string& layout,
                          std::optional<int> threads, bool return_report) {
  const DType t = device_dtype(dtype);
  const AxisOrder order = parse_axis_order(layout);
  const DeviceBatch bq = device_batch(q, "q", order, t), bk = device_batch(k, "k", order, t),
                    bv = device_batch(v, "v", order, t), bo = device_batch(out, "out", order, t);
  SPATTN_CHECK(bq.has_batch == bk.has_batch && bk.has_batch == bv.has_batch,
               "q, k, v must all have a batch axis or none (ranks ", std::get<1>(q).size(), ", ",
               std::get<1>(k).size(), ", ", std::get<1>(v).size(), ")");
  SPATTN_CHECK(bq.batch == bk.batch && bk.batch == bv.batch, "q, k, v batch sizes must match (",
               bq.batch, ", ", bk.batch, ", ", bv.batch, ")");
  SPATTN_CHECK(std::get<1>(out) == std::get<1>(q), "out must have q's shape");
  AttnOptions opt = options(causal, scale, threads);
  opt.stream = reinterpret_cast<void*>(stream);
  const std::unique_ptr<Method> m = make_method(method);
  const TensorView& q0 = bq.first;
  std::vector<MethodReport> reports(size_t(bq.batch));
  {
    py::gil_scoped_release release;
    const cuda::DeviceGuard on(device);
    // Method::run takes the GPU path for device memory and the host path otherwise: a pointer
    // that is not device memory here is a caller's mistake, named before it is read.
    SPATTN_CHECK(cuda::is_device_pointer(q0.data), "q is not in CUDA device memory");
    float* lse_data = reinterpret_cast<float*>(lse);
    for (int64_t b = 0; b < bq.batch; ++b)
      reports[size_t(b)] = m->run(bq.at(b), bk.at(b), bv.at(b), bo.at(b), opt,
                                  lse_data ? lse_data + b * q0.heads * q0.seq : nullptr);
  }
  if (!return_report) return py::none();
  if (!bq.has_batch) return report_dict(reports[0], method);
  py::list l;
  for (const auto& r : reports) l.append(report_dict(r, method));
  return l;
}

}  // namespace

void bind_cuda(py::module_& m) {
  using namespace pybind11::literals;
  m.def("cuda_attention", &cuda_attention, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "dtype"_a,
        "device"_a, "stream"_a, "method"_a, "causal"_a, "scale"_a, "layout"_a, "threads"_a,
        "return_report"_a);
  m.def("cuda_built", &cuda::built);
  m.def("cuda_device_count", &cuda::device_count);
}

}  // namespace spattn::python
