// Entry point of rasfast._C, the CPU module. Families register themselves
// (common/registry.h); this file only adds module-wide helpers.
#include <omp.h>

#include "common/registry.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "rasfast CPU kernels (C++17 + OpenMP). Entry points take numpy buffers.";
  m.def("omp_max_threads", []() { return omp_get_max_threads(); },
        "Number of OpenMP threads the CPU kernels use.");
  m.def("set_num_threads", [](int n) { omp_set_num_threads(n); }, pybind11::arg("n"));
  rasfast::run_binding_registry(m);
}
