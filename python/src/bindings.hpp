// The parts of the spattn._core module, one per file.
#pragma once
#include <pybind11/pybind11.h>

#include <optional>

#include "spattn/attention.hpp"

namespace spattn::python {
void bind_attention(pybind11::module_& m);  // attention, the method catalog
void bind_tools(pybind11::module_& m);      // workload, metrics, io, calibration, bench
void bind_mask(pybind11::module_& m);       // block mass and the panels of spattn.plot.mask
void bind_cuda(pybind11::module_& m);       // attention on torch CUDA tensors (device pointers)
// AttnOptions from the Python arguments every attention call takes (bind_attention.cpp):
// scale None: 1/sqrt(dim); threads None or 0: all. Bad values raise Error.
AttnOptions options(bool causal, std::optional<double> scale, std::optional<int> threads);
}  // namespace spattn::python
