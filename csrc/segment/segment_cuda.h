// Host launchers of the CUDA segment kernels (segment_kernels.cu), bound in segment_cuda.cpp.
// All pointers are device pointers; every launch is ordered on `stream`.
//
// Error flag `err` (int64 [1], set by the caller to kNoError): the kernels lower it
// (atomicMin) to
//   - a value < kScoreError when an input fails a check (q_emb not finite, a cand_ids /
//     group id out of range, NaN in item_scores, CSR offsets not 0 = p[0] <= ... <= p[B] = M):
//     the caller re-runs its checks to name the argument;
//   - kScoreError + j for the first candidate position j whose score is not finite.
// The kernels clamp every offset and skip every bad id, so bad input never reads or writes
// out of bounds.
#pragma once
#include <cstdint>

namespace rasfast {
namespace segment_cuda {

// n (or k) may be at most kMaxN: the selected keys of one query sit in shared memory.
constexpr int64_t kMaxN = 2048;
constexpr int64_t kScoreError = int64_t(1) << 40;
constexpr int64_t kNoError = int64_t(1) << 62;

// Sets *err to kNoError on `stream` (one single-thread launch): for callers without torch.
void reset_flag(uintptr_t err, uintptr_t stream);

// q: float32 [B, D]; emb: [M or T, D] in storage dtype `dtype_code` (T rows); ids: int64 [M]
// or 0 (then T = M and candidate j is row j); ptr: int64 [B + 1]; scratch: float32 [M];
// out: int64/float32 [B, n]. `vec`: q and emb are 16-byte aligned and a row is a whole
// number of 16-byte vectors (the host checks it), so rows are read in 16-byte loads.
void topk_scores(uintptr_t q, uintptr_t emb, int dtype_code, int64_t D, int64_t T,
                 uintptr_t ids, uintptr_t ptr, int64_t B, int64_t M, int64_t n, bool vec,
                 uintptr_t scratch, uintptr_t out_ids, uintptr_t out_scores, uintptr_t err,
                 uintptr_t stream);

// scores: float32 [M]; groups: int64 [M] (valid: [0, 2^31)); ptr: int64 [B + 1]; slot_keys:
// int64 [2M] and slot_vals: uint32 [2M], uninitialised (each query's block initialises its
// own hash table of 2 * len slots); out: int64/float32 [B, k].
void max_rank(uintptr_t scores, uintptr_t groups, uintptr_t ptr, int64_t B, int64_t M, int64_t k,
              uintptr_t slot_keys, uintptr_t slot_vals, uintptr_t out_ids, uintptr_t out_scores,
              uintptr_t err, uintptr_t stream);

}  // namespace segment_cuda
}  // namespace rasfast
