// Host launchers of the CUDA segment kernels (segment_kernels.cu), bound in segment_cuda.cpp.
// All pointers are device pointers; every launch is ordered on `stream`.
#pragma once
#include <cstdint>

namespace rasfast {
namespace segment_cuda {

// The per-query selection keeps the running best in a shared-memory buffer of kSelectCap
// 64-bit keys; n (or k) may be at most kMaxN so every merge round adds >= kMaxN candidates.
constexpr int64_t kSelectCap = 4096;
constexpr int64_t kMaxN = 2048;

// q: float32 [B, D]; emb: [M or T, D] in storage dtype `dtype_code`; ids: int64 [M] or 0;
// ptr: int64 [B + 1]; scratch: float32 [M]; out: int64/float32 [B, n]; err: int64 [1]
// holding a large value, lowered (atomicMin) to the position of a non-finite score.
void topk_scores(uintptr_t q, uintptr_t emb, int dtype_code, int64_t D, uintptr_t ids,
                 uintptr_t ptr, int64_t B, int64_t n, uintptr_t scratch, uintptr_t out_ids,
                 uintptr_t out_scores, uintptr_t err, uintptr_t stream);

// scores: float32 [M]; groups: int64 [M] in [0, 2^31); ptr: int64 [B + 1]; slot_keys:
// int64 [2M] filled with -1 and slot_vals: uint32 [2M] zeroed (a hash table per query over
// its 2 * len slots); out: int64/float32 [B, k].
void max_rank(uintptr_t scores, uintptr_t groups, uintptr_t ptr, int64_t B, int64_t k,
              uintptr_t slot_keys, uintptr_t slot_vals, uintptr_t out_ids, uintptr_t out_scores,
              uintptr_t stream);

}  // namespace segment_cuda
}  // namespace rasfast
