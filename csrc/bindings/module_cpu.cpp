// Entry point of rasfast._C, the CPU module. Families register themselves
// (common/registry.h); this file only adds module-wide helpers.
#include <omp.h>

#include "common/parallel.h"
#include "common/registry.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "rasfast CPU kernels (C++17 + OpenMP). Entry points take numpy buffers.";
  m.def("omp_max_threads", []() { return rasfast::max_threads(); },
        "Number of threads the CPU kernels use at most (rasfast.set_num_threads, else "
        "OpenMP's default).");
  m.def("set_num_threads", [](int n) { rasfast::thread_cap().store(n > 0 ? n : 0); },
        pybind11::arg("n"),
        "Caps the threads of every CPU kernel call, from any Python thread (0: OpenMP's "
        "default).");
  m.def("idle_cores", []() { return rasfast::idle_cores(); },
        "Cores other processes leave idle now (the default width of a large call).");
  m.def("idle_cores_settled", []() { return rasfast::idle_cores_settled(); },
        "idle_cores as a region of at least settled_work() units reads it: busy only if two "
        "more readings 0.3 ms apart agree (a blip of another task does not halve it).");
  m.def("settled_work", []() { return rasfast::kSettledWork; },
        "Work units from which a region reads idle_cores_settled.");
  m.def("enter_threads", [](int64_t work) {
          const int saved = omp_get_max_threads();
          const int outer = rasfast::op_outer_width();
          if (outer == 0) rasfast::op_outer_width() = saved;  // kernels inside size from it
          omp_set_num_threads(rasfast::threads_for(work));
          return pybind11::make_tuple(saved, outer);
        }, pybind11::arg("work"),
        "Sets the calling thread's OpenMP width to what a CPU kernel with `work` units would "
        "use (the busy-machine rules) and returns what exit_threads restores: torch ops run "
        "in between (oneDNN GEMMs, at::parallel_for) share this OpenMP runtime and follow it; "
        "a kernel called in between sizes its own width from the width before the call.");
  m.def("exit_threads", [](int saved, int outer) {
          omp_set_num_threads(saved > 0 ? saved : 1);
          rasfast::op_outer_width() = outer;
        }, pybind11::arg("saved"), pybind11::arg("outer"),
        "Restores the widths enter_threads returned.");
  m.def("parallel_grain", []() { return rasfast::kParallelGrain; },
        "Work units below which a CPU kernel call runs on one thread (twice this).");
  rasfast::run_binding_registry(m);
}
