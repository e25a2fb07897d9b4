#include "report_dict.hpp"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>

namespace spattn::python {

namespace py = pybind11;

py::object mask_array(const BlockMask* mask) {
  if (!mask) return py::none();
  const std::vector<uint8_t> grid = mask->to_dense();
  py::array_t<bool> a({mask->heads, mask->n_qb(), mask->n_kb()});
  std::transform(grid.begin(), grid.end(), a.mutable_data(), [](uint8_t x) { return x != 0; });
  return a;
}

py::dict report_dict(const MethodReport& r, const std::string& method) {
  py::dict d;
  d["method"] = method;
  d["path"] = kernel_path_name(r.path);
  // None, or why a block-selecting method ran the dense kernel ("budget", "estimate")
  d["dense_shortcut"] = r.dense_shortcut.empty() ? py::none() : py::cast(r.dense_shortcut);
  d["sparsity"] = r.stats.sparsity();
  d["score_entries"] = r.stats.score_entries;
  d["causal_entries"] = r.stats.causal_entries;
  d["tiles_visited"] = r.stats.tiles_visited;
  d["tiles_skipped"] = r.stats.tiles_skipped;
  d["flops"] = r.stats.flops;
  d["extras"] = r.extras;
  d["per_head"] = r.per_head;
  d["mask"] = mask_array(r.mask.get());
  d["block_q"] = r.mask ? py::cast(r.mask->block_q) : py::none();
  d["block_k"] = r.mask ? py::cast(r.mask->block_k) : py::none();
  return d;
}

}  // namespace spattn::python
