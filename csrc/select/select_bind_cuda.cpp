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

void check_args(int dtype_code, int64_t rows, int64_t n, int64_t k) {
  if (dtype_code < 0 || dtype_code > 2)
    throw py::value_error("dtype code must be 0 (float32), 1 (float16) or 2 (bfloat16)");
  if (rows < 0) throw py::value_error("rows must be >= 0");
  if (n < 1 || n >= (int64_t(1) << 32)) throw py::value_error("N must be in [1, 2^32)");
  if (k < 1 || k > n) throw py::value_error("k must be in [1, N]");
}

size_t workspace_bytes(int dtype_code, int64_t rows, int64_t n, int64_t k, bool sorted) {
  check_args(dtype_code, rows, n, k);
  return select_k_cuda_workspace(dtype_code, rows, n, k, sorted);
}

void select_k_cuda(uintptr_t x, int dtype_code, int64_t rows, int64_t n, int64_t k, bool largest,
                   bool sorted, uintptr_t out, uintptr_t out_vals, uintptr_t workspace,
                   size_t workspace_size, uintptr_t stream) {
  check_args(dtype_code, rows, n, k);
  if (rows > 0 && (x == 0 || out == 0 || out_vals == 0 || workspace == 0))
    throw py::value_error("x, out, out_vals and workspace must be device pointers");
  py::gil_scoped_release nogil;
  select_k_cuda_launch(reinterpret_cast<const void*>(x), dtype_code, rows, n, k, largest, sorted,
                       as_dptr<int64_t>(out), reinterpret_cast<void*>(out_vals),
                       reinterpret_cast<void*>(workspace), workspace_size, as_stream(stream));
}

void bind(py::module_& m) {
  m.def("select_k_workspace_bytes", &workspace_bytes, py::arg("dtype_code"), py::arg("rows"),
        py::arg("n"), py::arg("k"), py::arg("sorted"),
        "Bytes of device workspace select_k needs for these arguments.");
  m.def("select_k", &select_k_cuda, py::arg("x"), py::arg("dtype_code"), py::arg("rows"),
        py::arg("n"), py::arg("k"), py::arg("largest"), py::arg("sorted"), py::arg("out"),
        py::arg("out_vals"), py::arg("workspace"), py::arg("workspace_bytes"), py::arg("stream"),
        "Indices and values of the k smallest/largest entries per row of the device matrix "
        "x[rows, n] (ties by lower index, NaN above +inf) into the device int64 out[rows, k] "
        "and out_vals[rows, k] (x's dtype), enqueued on `stream` with no host synchronisation; "
        "workspace: select_k_workspace_bytes(...) bytes of device memory.");
}

}  // namespace
RASFAST_REGISTER(select_cuda, bind);
}  // namespace rasfast
