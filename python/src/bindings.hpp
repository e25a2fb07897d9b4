// The parts of the spattn._core module, one per file.
#pragma once
#include <pybind11/pybind11.h>

namespace spattn::python {
void bind_attention(pybind11::module_& m);  // attention, the method catalog
void bind_tools(pybind11::module_& m);      // workload, metrics, io, calibration, bench
void bind_mask(pybind11::module_& m);       // block mass and the panels of spattn.plot.mask
void bind_cuda(pybind11::module_& m);       // attention on torch CUDA tensors (device pointers)
}  // namespace spattn::python
