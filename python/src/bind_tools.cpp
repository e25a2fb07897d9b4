// The tools as functions: generated workloads, metrics, .npy/.safetensors files, BLASST
// calibration and the bench records. Each is one library call; the package's Python layer
// only shapes arguments and results.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "core/threading.hpp"
#include "spattn/bench.hpp"
#include "spattn/blasst.hpp"
#include "spattn/calibration.hpp"
#include "spattn/error.hpp"
#include "spattn/io.hpp"
#include "spattn/method.hpp"
#include "spattn/metrics.hpp"
#include "spattn/workload.hpp"

namespace spattn::python {
namespace {

using namespace pybind11::literals;

struct Qkv {
  BatchedView qb, kb, vb;
  TensorView q, k, v;
};

Qkv single_qkv(const py::handle& q, const py::handle& k, const py::handle& v,
               const std::string& tag, const std::string& layout) {
  const AxisOrder order = parse_axis_order(layout);
  Qkv x{batched_view(q, "q", order, tag),
        batched_view(k, "k", order, tag),
        batched_view(v, "v", order, tag),
        {},
        {},
        {}};
  x.q = single_view(x.qb, "q");
  x.k = single_view(x.kb, "k");
  x.v = single_view(x.vb, "v");
  return x;
}

AttnOptions attn_options(bool causal, int threads) {
  AttnOptions opt;
  opt.causal = causal;
  opt.threads = resolve_threads(threads);
  return opt;
}

WorkloadConfig workload_config(const std::string& kind, int64_t seq, int64_t heads,
                               int64_t kv_heads, int64_t dim, const std::string& dtype,
                               uint64_t seed, int64_t q_len) {
  WorkloadConfig cfg;
  cfg.kind = parse_workload_kind(kind);
  cfg.seq = seq;
  cfg.q_len = q_len;
  cfg.heads = heads;
  cfg.kv_heads = kv_heads;
  cfg.dim = dim;
  cfg.dtype = parse_dtype(dtype);
  cfg.seed = seed;
  return cfg;
}

py::dict workload(const std::string& kind, int64_t seq, int64_t heads, int64_t kv_heads,
                  int64_t dim, const std::string& dtype, uint64_t seed, int64_t q_len) {
  const WorkloadConfig cfg = workload_config(kind, seq, heads, kv_heads, dim, dtype, seed, q_len);
  Workload w;
  {
    py::gil_scoped_release release;
    w = make_workload(cfg);
  }
  py::dict d;
  d["dtype"] = dtype_name(w.q.dtype());
  d["q"] = tensor_to_array(std::move(w.q));
  d["k"] = tensor_to_array(std::move(w.k));
  d["v"] = tensor_to_array(std::move(w.v));
  d["kind"] = workload_kind_name(cfg.kind);
  d["seq"] = cfg.seq;
  d["seed"] = cfg.seed;
  d["modality"] = py::array_t<uint8_t>(py::ssize_t(w.layout.ids.size()), w.layout.ids.data());
  d["sink_tokens"] = w.sink_tokens;
  d["local_window"] = w.local_window;
  py::list verticals, slashes, needles, segments;
  for (const auto& x : w.verticals)
    verticals.append(
        py::dict("head"_a = x.head, "key"_a = x.key, "q_begin"_a = x.q_begin, "q_end"_a = x.q_end));
  for (const auto& x : w.slashes)
    slashes.append(py::dict("head"_a = x.head, "offset"_a = x.offset, "q_begin"_a = x.q_begin,
                            "q_end"_a = x.q_end));
  for (const auto& x : w.needles)
    needles.append(py::dict("head"_a = x.head, "key"_a = x.key, "query"_a = x.query));
  for (const auto& x : w.layout.segments())
    segments.append(py::dict("begin"_a = x.begin, "end"_a = x.end, "modality"_a = x.modality));
  d["verticals"] = verticals;
  d["slashes"] = slashes;
  d["needles"] = needles;
  d["segments"] = segments;
  d["frame_tokens"] = w.layout.frame_tokens;
  d["grid_stride"] = w.grid_stride;
  d["grid_phase"] = w.grid_phase;
  return d;
}

py::dict recall(const py::handle& q, const py::handle& k, const py::handle& v,
                const std::string& tag, const std::string& method, bool causal,
                const std::string& layout, int threads, int64_t max_rows) {
  const Qkv x = single_qkv(q, k, v, tag, layout);
  SPATTN_CHECK(max_rows >= 1, "max_rows must be >= 1, got ", max_rows);
  const AttnOptions opt = attn_options(causal, threads);
  const std::unique_ptr<Method> m = make_method(method);
  Recall r;
  {
    py::gil_scoped_release release;
    const Tensor out(DType::f32, x.q.heads, x.q.seq, x.q.dim);
    const MethodReport rep = m->run(x.q, x.k, x.v, out, opt);
    AttnOptions unchecked = opt;
    unchecked.check_finite = false;
    r = attention_recall(x.q, x.k, *rep.coverage, unchecked, max_rows);
  }
  return py::dict("mean"_a = r.mean, "worst"_a = r.worst, "rows"_a = r.rows);
}

py::dict output_error(const py::handle& out, const py::handle& ref, const std::string& out_tag,
                      const std::string& ref_tag, const std::string& layout) {
  const AxisOrder order = parse_axis_order(layout);
  const BatchedView ob = batched_view(out, "out", order, out_tag);
  const BatchedView rb = batched_view(ref, "ref", order, ref_tag);
  const OutputError e = compare_outputs(single_view(ob, "out"), single_view(rb, "ref"));
  return py::dict("rel_l2"_a = e.rel_l2, "cosine_min"_a = e.cosine_min,
                  "cosine_mean"_a = e.cosine_mean, "max_abs"_a = e.max_abs);
}

double oracle_mass(const py::handle& q, const py::handle& k, const py::handle& v,
                   const std::string& tag, int64_t head, double budget, int64_t block_q,
                   int64_t block_k, bool causal, const std::string& layout, int threads) {
  const Qkv x = single_qkv(q, k, v, tag, layout);
  SPATTN_CHECK(head >= 0 && head < x.q.heads, "head must be in [0, ", x.q.heads, "), got ", head);
  SPATTN_CHECK(budget > 0 && budget <= 1, "budget must be in (0, 1], got ", budget);
  const AttnOptions opt = attn_options(causal, threads);
  py::gil_scoped_release release;
  return oracle_topk_mass(block_mass(x.q, x.k, x.v, head, block_q, block_k, opt), budget);
}

py::dict load(const std::string& path, const std::string& layout) {
  QKV x;
  {
    py::gil_scoped_release release;
    x = load_qkv(path, parse_layout(layout));
  }
  py::dict d;
  d["dtype"] = dtype_name(x.q.dtype());
  d["q"] = tensor_to_array(std::move(x.q));
  d["k"] = tensor_to_array(std::move(x.k));
  d["v"] = tensor_to_array(std::move(x.v));
  return d;
}

void save(const std::string& path, const py::handle& q, const py::handle& k, const py::handle& v,
          const std::string& tag, const std::string& layout) {
  const Qkv x = single_qkv(q, k, v, tag, layout);
  py::gil_scoped_release release;
  save_qkv(path, x.q, x.k, x.v);
}

CalibrationOptions calibration_options(double fit_min, double fit_max, std::optional<double> gamma,
                                       bool length_slope, bool curvature, const std::string& order,
                                       bool causal, int threads, const std::string& source) {
  CalibrationOptions c;
  c.curvature = curvature;
  c.fit_min = fit_min;
  c.fit_max = fit_max;
  c.gamma = gamma;
  c.length_slope = length_slope;
  c.order = parse_blasst_order(order);
  c.attn = attn_options(causal, threads);
  c.source = source;
  return c;
}

// BlasstCalibrator over arrays the caller holds (model dumps, their own tensors).
class Calibrator {
 public:
  Calibrator(double fit_min, double fit_max, std::optional<double> gamma, bool length_slope,
             bool curvature, const std::string& order, bool causal, int threads,
             const std::string& source)
      : cal_(calibration_options(fit_min, fit_max, gamma, length_slope, curvature, order, causal,
                                 threads, source)) {}
  void add(const py::handle& q, const py::handle& k, const py::handle& v, const std::string& tag,
           const std::string& layout) {
    const Qkv x = single_qkv(q, k, v, tag, layout);
    py::gil_scoped_release release;
    cal_.add(x.q, x.k, x.v);
  }
  std::string fit() const { return calibration_to_json(cal_.fit()); }

 private:
  BlasstCalibrator cal_;
};

std::string calibrate_generated(const std::string& kind, const std::vector<int64_t>& lengths,
                                int64_t heads, int64_t kv_heads, int64_t dim,
                                const std::string& dtype, uint64_t seed, int64_t samples,
                                double fit_min, double fit_max, std::optional<double> gamma,
                                bool length_slope, bool curvature, const std::string& order,
                                bool causal, int threads) {
  const WorkloadConfig base = workload_config(kind, 1, heads, kv_heads, dim, dtype, seed, 0);
  const CalibrationOptions opt =
      calibration_options(fit_min, fit_max, gamma, length_slope, curvature, order, causal, threads,
                          std::string(workload_kind_name(base.kind)) + " workload");
  py::gil_scoped_release release;
  return calibration_to_json(calibrate_on_workloads(opt, base, lengths, samples));
}

py::dict evaluate(const std::string& calibration_json, const std::string& origin,
                  const std::string& kind, const std::vector<int64_t>& lengths, int64_t heads,
                  int64_t kv_heads, int64_t dim, const std::string& dtype, uint64_t seed,
                  int64_t samples, const std::vector<double>& targets, double fixed_lambda,
                  bool causal, int threads) {
  const Calibration c = calibration_from_json(calibration_json, origin);
  const WorkloadConfig base = workload_config(kind, 1, heads, kv_heads, dim, dtype, seed, 0);
  const AttnOptions attn = attn_options(causal, threads);
  CalibrationEvaluation e;
  {
    py::gil_scoped_release release;
    e = evaluate_calibration(c, base, lengths, samples, targets, fixed_lambda, attn);
  }
  return py::dict("lengths"_a = e.lengths, "targets"_a = e.targets,
                  "fixed_lambda"_a = e.fixed_lambda, "first_seed"_a = e.first_seed,
                  "samples"_a = e.samples, "sparsity"_a = e.sparsity, "fixed"_a = e.fixed);
}

std::string bench(const py::handle& q, const py::handle& k, const py::handle& v,
                  const std::string& tag, const std::string& layout,
                  const std::vector<std::string>& specs, bool causal, int repeat, int threads,
                  const std::string& bf16_path, const std::string& workload, uint64_t seed) {
  BenchOptions o;
  o.repeat = repeat;
  o.bf16_path = bf16_path;
  check_bench_options(o);
  const BenchMethods methods = make_bench_methods(specs, {}, causal);
  const Qkv x = single_qkv(q, k, v, tag, layout);
  const AttnOptions opt = attn_options(causal, threads);
  BenchSource src;
  src.workload = workload;
  src.seed = seed;
  py::gil_scoped_release release;
  return bench_json(run_bench(methods, x.q, x.k, x.v, opt, o), src);
}

}  // namespace

void bind_tools(py::module_& m) {
  m.def("workload", &workload, "kind"_a, "seq"_a, "heads"_a, "kv_heads"_a, "dim"_a, "dtype"_a,
        "seed"_a, "q_len"_a);
  m.def("recall", &recall, "q"_a, "k"_a, "v"_a, "tag"_a, "method"_a, "causal"_a, "layout"_a,
        "threads"_a, "max_rows"_a);
  m.def("output_error", &output_error, "out"_a, "ref"_a, "out_tag"_a, "ref_tag"_a, "layout"_a);
  m.def("oracle_mass", &oracle_mass, "q"_a, "k"_a, "v"_a, "tag"_a, "head"_a, "budget"_a,
        "block_q"_a, "block_k"_a, "causal"_a, "layout"_a, "threads"_a);
  m.def("load_qkv", &load, "path"_a, "layout"_a);
  m.def("save_qkv", &save, "path"_a, "q"_a, "k"_a, "v"_a, "tag"_a, "layout"_a);
  py::class_<Calibrator>(m, "Calibrator")
      .def(py::init<double, double, std::optional<double>, bool, bool, const std::string&, bool,
                    int, const std::string&>(),
           "fit_min"_a, "fit_max"_a, "gamma"_a, "length_slope"_a, "curvature"_a, "order"_a,
           "causal"_a, "threads"_a, "source"_a)
      .def("add", &Calibrator::add, "q"_a, "k"_a, "v"_a, "tag"_a, "layout"_a)
      .def("fit", &Calibrator::fit);
  m.def("calibrate_workloads", &calibrate_generated, "kind"_a, "lengths"_a, "heads"_a, "kv_heads"_a,
        "dim"_a, "dtype"_a, "seed"_a, "samples"_a, "fit_min"_a, "fit_max"_a, "gamma"_a,
        "length_slope"_a, "curvature"_a, "order"_a, "causal"_a, "threads"_a);
  m.def("evaluate_calibration", &evaluate, "calibration_json"_a, "origin"_a, "kind"_a, "lengths"_a,
        "heads"_a, "kv_heads"_a, "dim"_a, "dtype"_a, "seed"_a, "samples"_a, "targets"_a,
        "fixed_lambda"_a, "causal"_a, "threads"_a);
  m.def("load_calibration",
        [](const std::string& path) { return calibration_to_json(load_calibration(path)); });
  m.def("save_calibration", [](const std::string& path, const std::string& json) {
    save_calibration(path, calibration_from_json(json, path));
  });
  m.def("lambda_for", [](const std::string& json, double sparsity, int64_t length) {
    return calibration_from_json(json).lambda_for(sparsity, length);
  });
  m.def("bench", &bench, "q"_a, "k"_a, "v"_a, "tag"_a, "layout"_a, "specs"_a, "causal"_a,
        "repeat"_a, "threads"_a, "bf16_path"_a, "workload"_a, "seed"_a);
}

}  // namespace spattn::python
