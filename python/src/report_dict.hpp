// A MethodReport as plain Python objects: numbers, dicts, lists, and the block mask (when the
// method built one) as a boolean numpy array [heads, query blocks, key blocks].
#pragma once
#include <pybind11/pybind11.h>

#include <string>

#include "spattn/report.hpp"

namespace spattn::python {

pybind11::dict report_dict(const MethodReport& r, const std::string& method);
// The mask as a boolean array [heads, n_qb, n_kb]; None when null.
pybind11::object mask_array(const BlockMask* mask);

}  // namespace spattn::python
