// What spattn.plot.mask draws, computed as `spattn mask` computes it: the method's block mask
// for one head, the oracle top-k mask with the same number of blocks per query block (or a
// fixed top-k), and the exact block mass.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "core/threading.hpp"
#include "report_dict.hpp"
#include "spattn/error.hpp"
#include "spattn/mask_figure.hpp"
#include "spattn/method.hpp"
#include "spattn/metrics.hpp"

namespace spattn::python {
namespace {

using namespace pybind11::literals;

py::array_t<bool> rows_grid(const BlockRows& rows, int64_t n_kb) {
  py::array_t<bool> a({py::ssize_t(rows.size()), py::ssize_t(n_kb)});
  bool* p = a.mutable_data();
  std::fill(p, p + a.size(), false);
  for (size_t qb = 0; qb < rows.size(); ++qb)
    for (int32_t kb : rows[qb]) p[int64_t(qb) * n_kb + kb] = true;
  return a;
}

py::dict mask_panels(const py::handle& q, const py::handle& k, const py::handle& v,
                     const std::string& tag, const std::string& method, int64_t head, int64_t topk,
                     bool causal, const std::string& layout, int threads) {
  const AxisOrder order = parse_axis_order(layout);
  const BatchedView qb = batched_view(q, "q", order, tag), kb = batched_view(k, "k", order, tag),
                    vb = batched_view(v, "v", order, tag);
  const TensorView qv = single_view(qb, "q"), kv = single_view(kb, "k"), vv = single_view(vb, "v");
  SPATTN_CHECK(head >= 0 && head < qv.heads, "head must be in [0, ", qv.heads, "), got ", head);
  SPATTN_CHECK(topk >= 0, "topk must be >= 0 (0: the method's budget), got ", topk);
  AttnOptions opt;
  opt.causal = causal;
  opt.threads = resolve_threads(threads);
  const std::unique_ptr<Method> m = make_method(method);
  MethodReport report;
  BlockMassGrid g;
  {
    py::gil_scoped_release release;
    const Tensor out(DType::f32, qv.heads, qv.seq, qv.dim);
    report = m->run(qv, kv, vv, out, opt);
    const BlockMask* mask = report.mask.get();
    SPATTN_CHECK(mask, "method '", m->name(),
                 "' builds no block mask to draw; use a mask-building method such as "
                 "vertical_slash or a_shape");
    mask->check_matches(qv.heads, qv.seq, kv.seq, opt.causal);
    SPATTN_CHECK(mask->block_k % kKeyBlock == 0, "method '", m->name(), "' uses key blocks of ",
                 mask->block_k, "; block mass is measured in multiples of ", kKeyBlock);
    g = block_mass(qv, kv, vv, head, mask->block_q, mask->block_k, opt);
  }
  const BlockRows method_rows = head_rows(*report.mask, head);
  std::vector<int64_t> budget(size_t(g.n_qb), topk);
  if (topk == 0)
    for (size_t i = 0; i < budget.size(); ++i) budget[i] = int64_t(method_rows[i].size());
  const BlockRows oracle_rows = oracle_topk_rows(g, budget);
  py::array_t<float> mass({g.n_qb, g.n_kb});
  std::copy(g.mass.begin(), g.mass.end(), mass.mutable_data());
  std::vector<int64_t> causal_blocks;
  for (int64_t i = 0; i < g.n_qb; ++i) causal_blocks.push_back(g.causal_blocks(i));
  return py::dict("method"_a = method, "head"_a = head, "heads"_a = qv.heads, "q_len"_a = qv.seq,
                  "kv_len"_a = kv.seq, "causal"_a = causal, "block_q"_a = g.block_q,
                  "block_k"_a = g.block_k, "method_mask"_a = rows_grid(method_rows, g.n_kb),
                  "oracle_mask"_a = rows_grid(oracle_rows, g.n_kb), "mass"_a = mass,
                  "causal_blocks"_a = causal_blocks,
                  "method_density"_a = block_density(g, method_rows),
                  "method_mass"_a = mass_captured(g, method_rows),
                  "oracle_density"_a = block_density(g, oracle_rows),
                  "oracle_mass"_a = mass_captured(g, oracle_rows), "oracle_topk"_a = topk,
                  "sparsity"_a = report.stats.sparsity());
}

}  // namespace

void bind_mask(py::module_& m) {
  m.def("mask_panels", &mask_panels, "q"_a, "k"_a, "v"_a, "tag"_a, "method"_a, "head"_a, "topk"_a,
        "causal"_a, "layout"_a, "threads"_a);
}

}  // namespace spattn::python
