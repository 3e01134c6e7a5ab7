// Error checking for CUDA host code: every runtime call goes through RASFAST_CUDA_CHECK,
// which throws std::runtime_error (pybind11 turns it into RuntimeError) with the call site.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#define RASFAST_CUDA_CHECK(expr)                                                        \
  do {                                                                                  \
    cudaError_t rasfast_err_ = (expr);                                                  \
    if (rasfast_err_ != cudaSuccess) {                                                  \
      throw std::runtime_error(std::string("CUDA error at ") + __FILE__ + ":" +         \
                               std::to_string(__LINE__) + ": " +                        \
                               cudaGetErrorString(rasfast_err_) + " (" #expr ")");      \
    }                                                                                   \
  } while (0)

namespace rasfast {
// Python passes torch.cuda.current_stream().cuda_stream (an integer handle).
inline cudaStream_t as_stream(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }
template <class T> T* as_dptr(uintptr_t p) { return reinterpret_cast<T*>(p); }
}  // namespace rasfast
