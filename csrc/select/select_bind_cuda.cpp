// Python binding of the CUDA select_k (rasfast._cuda.select_k): raw device pointers and a
// stream handle in, validated again here so a wrong call raises instead of faulting.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>

#include "common/cuda_check.h"
#include "common/registry.h"
#include "select/select_cuda.h"

namespace rasfast {
namespace {
namespace py = pybind11;

void select_k_cuda(uintptr_t x, int dtype_code, int64_t rows, int64_t n, int64_t k, bool largest,
                   bool sorted, uintptr_t out, uintptr_t stream) {
  if (dtype_code < 0 || dtype_code > 2)
    throw py::value_error("dtype code must be 0 (float32), 1 (float16) or 2 (bfloat16)");
  if (rows < 0) throw py::value_error("rows must be >= 0");
  if (n < 1 || n >= (int64_t(1) << 32)) throw py::value_error("N must be in [1, 2^32)");
  if (k < 1 || k > n) throw py::value_error("k must be in [1, N]");
  if (rows > 0 && (x == 0 || out == 0)) throw py::value_error("x and out must be device pointers");
  py::gil_scoped_release nogil;
  select_k_cuda_launch(reinterpret_cast<const void*>(x), dtype_code, rows, n, k, largest, sorted,
                       as_dptr<int64_t>(out), as_stream(stream));
}

void bind(py::module_& m) {
  m.def("select_k", &select_k_cuda, py::arg("x"), py::arg("dtype_code"), py::arg("rows"),
        py::arg("n"), py::arg("k"), py::arg("largest"), py::arg("sorted"), py::arg("out"),
        py::arg("stream"),
        "Indices of the k smallest/largest entries per row of the device matrix x[rows, n] "
        "(ties by lower index) into the device int64 out[rows, k], enqueued on `stream`.");
}

}  // namespace
RASFAST_REGISTER(select_cuda, bind);
}  // namespace rasfast
