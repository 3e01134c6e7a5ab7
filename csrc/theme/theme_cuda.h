// Host launchers of the CUDA theme kernels (theme_kernels.cu), bound in theme_cuda.cpp.
// All pointers are device pointers; queries are float32, corpora in their storage dtype
// (dtype codes of common/dtype.h); every launch is ordered on `stream`.
#pragma once
#include <cstdint>

namespace rasfast {
namespace theme_cuda {

// Largest k the CUDA top-k lists support (per-warp lists live in shared memory).
constexpr int64_t kMaxK = 256;

void theme_scope(uintptr_t q, uintptr_t corpus, int dtype_code, int64_t B, int64_t N, int64_t T,
                 int64_t K, bool ip, uintptr_t out_ids, uintptr_t stream);

void scoped_dense(uintptr_t q_emb, uintptr_t emb, int dtype_code, int64_t B, int64_t N, int64_t D,
                  uintptr_t scope, int64_t Ks, int64_t k, uintptr_t out_ids, uintptr_t out_scores,
                  uintptr_t stream);

void scoped_search(uintptr_t q_ppd, uintptr_t ppd, int ppd_code, uintptr_t q_emb, uintptr_t emb,
                   int emb_code, int64_t B, int64_t N, int64_t T, int64_t D, int64_t K, int64_t k,
                   double w, bool ip, uintptr_t out_ids, uintptr_t out_scores, uintptr_t stream);

// Pass 1 alone (uint32 keys [B, N]), for the GPU bandwidth benchmark.
void scan_keys(uintptr_t q, uintptr_t corpus, int dtype_code, int64_t B, int64_t N, int64_t T,
               bool ip, uintptr_t out_keys, uintptr_t stream);

}  // namespace theme_cuda
}  // namespace rasfast
