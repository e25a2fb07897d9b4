// spattn._core: the C++ library as a Python extension. Every spattn::Error becomes a
// ValueError carrying the library's message; type errors are raised as TypeError where the
// arrays are read (arrays.cpp).
#include <pybind11/pybind11.h>

#include "bindings.hpp"
#include "spattn/error.hpp"

PYBIND11_MODULE(_core, m) {
  m.doc() = "spattn's C++ library; use the spattn package, not this module";
  m.attr("__version__") = SPATTN_VERSION;  // project()'s VERSION (CMakeLists.txt)
  pybind11::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const spattn::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  spattn::python::bind_attention(m);
  spattn::python::bind_tools(m);
  spattn::python::bind_mask(m);
  spattn::python::bind_cuda(m);
}
