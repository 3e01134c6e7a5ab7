// Checked access to numpy buffers handed to the CPU module.
//
// The Python layer (rasfast/_arrays.py) validates user input and produces C-contiguous
// numpy arrays; these checks are a second line of defence so that a wrong call from
// Python raises instead of reading out of bounds.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "common/dtype.h"

namespace rasfast {

namespace py = pybind11;

inline void require(bool ok, const std::string& msg) {
  if (!ok) throw py::value_error(msg);
}

inline std::string shape_str(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + ")";
}

// Checks rank, C-contiguity, item size and (optionally) each dim (-1 = any).
inline void check_buffer(const py::array& a, const char* name, int ndim, py::ssize_t itemsize,
                         std::vector<int64_t> dims = {}) {
  require(a.ndim() == ndim, std::string(name) + ": expected rank " + std::to_string(ndim) +
                                ", got shape " + shape_str(a));
  require((a.flags() & py::array::c_style) != 0, std::string(name) + ": must be C-contiguous");
  require(a.itemsize() == itemsize, std::string(name) + ": expected item size " +
                                        std::to_string(itemsize) + ", got " +
                                        std::to_string(a.itemsize()));
  for (size_t i = 0; i < dims.size(); ++i) {
    require(dims[i] < 0 || a.shape((py::ssize_t)i) == dims[i],
            std::string(name) + ": dim " + std::to_string(i) + " must be " +
                std::to_string(dims[i]) + ", got shape " + shape_str(a));
  }
}

inline DType dtype_from_code(int code) {
  require(code >= 0 && code <= 2, "dtype code must be 0 (float32), 1 (float16) or 2 (bfloat16)");
  return static_cast<DType>(code);
}

inline py::ssize_t dtype_itemsize(DType d) { return d == DType::F32 ? 4 : 2; }

template <class T> T* mutable_ptr(py::array& a) { return static_cast<T*>(a.mutable_data()); }
template <class T> const T* const_ptr(const py::array& a) { return static_cast<const T*>(a.data()); }

}  // namespace rasfast
