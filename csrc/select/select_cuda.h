// Host entry of the CUDA select_k (select_kernels.cu), called by select_bind_cuda.cpp.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace rasfast {
// Bytes of device workspace select_k_cuda_launch needs for these arguments (0 when rows == 0).
size_t select_k_cuda_workspace(int dtype_code, int64_t rows, int64_t n, int64_t k, bool sorted);

// Indices of the k smallest (largest) entries of each row of x[rows, n] (dtype code of
// common/dtype.h) into out[rows, k] (int64, device) and their values into out_vals[rows, k]
// (x's dtype), ties by lower index, NaN above +inf (as torch.sort), sorted by (value, index)
// when `sorted`, else in unspecified order. Enqueued on `stream` with no host
// synchronisation and no allocation: `workspace` holds select_k_cuda_workspace(...) bytes.
// Arguments must be pre-validated (1 <= k <= n < 2^32). Throws std::runtime_error on a CUDA
// error.
void select_k_cuda_launch(const void* x, int dtype_code, int64_t rows, int64_t n, int64_t k,
                          bool largest, bool sorted, int64_t* out, void* out_vals, void* workspace,
                          size_t workspace_bytes, cudaStream_t stream);
}  // namespace rasfast
