// Host entry of the CUDA select_k (select_kernels.cu), called by select_bind_cuda.cpp.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace rasfast {
// Indices of the k smallest (largest) entries of each row of x[rows, n] (dtype code of
// common/dtype.h) into out[rows, k] (int64, device), ties by lower index, sorted by
// (value, index) when `sorted`. Enqueued on `stream`; arguments must be pre-validated
// (1 <= k <= n < 2^32). Throws std::runtime_error on a CUDA error.
void select_k_cuda_launch(const void* x, int dtype_code, int64_t rows, int64_t n, int64_t k,
                          bool largest, bool sorted, int64_t* out, cudaStream_t stream);
}  // namespace rasfast
