// spattn._core.attention: one method run over every batch element of q, k, v read in place,
// the GIL released while the kernels run.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "report_dict.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"

namespace spattn::python {
namespace {

struct Call {
  BatchedView q, k, v;
  AttnOptions opt;
};

Call make_call(const py::handle& q, const py::handle& k, const py::handle& v,
               const std::string& tag, const std::string& layout, AttnOptions opt) {
  const AxisOrder order = parse_axis_order(layout);
  Call c{batched_view(q, "q", order, tag), batched_view(k, "k", order, tag),
         batched_view(v, "v", order, tag), opt};
  SPATTN_CHECK(c.q.has_batch == c.k.has_batch && c.k.has_batch == c.v.has_batch,
               "q, k, v must all have a batch axis or none (ranks ", c.q.array.ndim(), ", ",
               c.k.array.ndim(), ", ", c.v.array.ndim(), ")");
  SPATTN_CHECK(c.q.batch == c.k.batch && c.k.batch == c.v.batch, "q, k, v batch sizes must match (",
               c.q.batch, ", ", c.k.batch, ", ", c.v.batch, ")");
  return c;
}

py::tuple attention(const py::handle& q, const py::handle& k, const py::handle& v,
                    const std::string& tag, const std::string& method, bool causal,
                    std::optional<double> scale, const std::string& layout, bool return_lse,
                    bool return_report, std::optional<int> threads, py::object out) {
  const Call c = make_call(q, k, v, tag, layout, options(causal, scale, threads));
  const std::unique_ptr<Method> m = make_method(method);
  const TensorView& q0 = c.q.first;
  if (out.is_none()) {
    std::vector<int64_t> shape(c.q.array.shape(), c.q.array.shape() + c.q.array.ndim());
    out = new_array(q0.dtype, shape);
  }
  const BatchedView o = batched_view(out, "out", parse_axis_order(layout), tag);
  SPATTN_CHECK(o.batch == c.q.batch && o.array.ndim() == c.q.array.ndim(),
               "out must have q's shape");
  SPATTN_CHECK(o.array.writeable(), "out must be writeable");
  py::object lse = py::none();
  float* lse_data = nullptr;
  if (return_lse) {
    std::vector<py::ssize_t> shape{q0.heads, q0.seq};
    if (c.q.has_batch) shape.insert(shape.begin(), c.q.batch);
    py::array_t<float> a(shape);
    lse_data = a.mutable_data();
    lse = a;
  }
  std::vector<MethodReport> reports(size_t(c.q.batch));
  {
    py::gil_scoped_release release;
    for (int64_t b = 0; b < c.q.batch; ++b)
      reports[size_t(b)] = m->run(c.q.at(b), c.k.at(b), c.v.at(b), o.at(b), c.opt,
                                  lse_data ? lse_data + b * q0.heads * q0.seq : nullptr);
  }
  py::object report = py::none();
  if (return_report) {
    if (c.q.has_batch) {
      py::list l;
      for (const auto& r : reports) l.append(report_dict(r, method));
      report = l;
    } else {
      report = report_dict(reports[0], method);
    }
  }
  return py::make_tuple(out, lse, report);
}

// What the C++ call costs on the same views: make the method, allocate the output, run it
// over every batch element. The other side of the Python overhead (python/benchmarks/overhead.py).
double cpp_call_seconds(const py::handle& q, const py::handle& k, const py::handle& v,
                        const std::string& tag, const std::string& method, bool causal,
                        const std::string& layout, std::optional<int> threads) {
  const Call c = make_call(q, k, v, tag, layout, options(causal, std::nullopt, threads));
  py::gil_scoped_release release;
  const auto t0 = std::chrono::steady_clock::now();
  const std::unique_ptr<Method> m = make_method(method);
  const TensorView& q0 = c.q.first;
  // The output in q's layout, as attention() allocates it.
  const Tensor buf(q0.dtype, c.q.batch * q0.heads, q0.seq, q0.dim);
  const int64_t per_batch = q0.heads * q0.seq * q0.dim * int64_t(dtype_size(q0.dtype));
  for (int64_t b = 0; b < c.q.batch; ++b) {
    void* data = static_cast<char*>(buf.data()) + b * per_batch;
    const TensorView out = parse_axis_order(layout) == AxisOrder::bshd
                               ? TensorView::shd(data, q0.dtype, q0.heads, q0.seq, q0.dim)
                               : TensorView::hsd(data, q0.dtype, q0.heads, q0.seq, q0.dim);
    m->run(c.q.at(b), c.k.at(b), c.v.at(b), out, c.opt);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

AttnOptions options(bool causal, std::optional<double> scale, std::optional<int> threads) {
  AttnOptions opt;
  opt.causal = causal;
  if (scale) {
    SPATTN_CHECK(std::isfinite(*scale) && *scale > 0,
                 "scale must be finite and > 0 (None: 1/sqrt(dim)), got ", *scale);
    opt.scale = float(*scale);
  }
  if (threads) {
    SPATTN_CHECK(*threads >= 0, "threads must be >= 0 (None or 0: all), got ", *threads);
    opt.threads = *threads;
  }
  return opt;
}

void bind_attention(py::module_& m) {
  using namespace pybind11::literals;
  m.def("attention", &attention, "q"_a, "k"_a, "v"_a, "tag"_a, "method"_a, "causal"_a, "scale"_a,
        "layout"_a, "return_lse"_a, "return_report"_a, "threads"_a, "out"_a);
  m.def("cpp_call_seconds", &cpp_call_seconds, "q"_a, "k"_a, "v"_a, "tag"_a, "method"_a, "causal"_a,
        "layout"_a, "threads"_a);
  m.def("method_catalog", [] {
    py::list l;
    for (const MethodInfo& i : method_catalog()) {
      py::dict d;
      d["name"] = i.name;
      d["default_spec"] = i.default_spec;
      d["evaluation_only"] = i.evaluation_only;
      d["causal_only"] = i.causal_only;
      d["count_param"] = i.count_param;
      l.append(d);
    }
    return l;
  });
  m.def("method_names", &method_names);
  m.def("simd_target", [] { return std::string(simd_target_name()); });
}

}  // namespace spattn::python
