// CUDA kernels of the segment family: one block per query.
//   topk_scores: warps score the query's candidates (float32 accumulation from any storage
//     dtype, rows read directly or through cand_ids) into a scratch vector, then the block
//     selects the top-n with a chunked bitonic merge in shared memory.
//   max_rank: the block reduces its items to groups with a per-query open-addressing hash
//     table in global memory (atomicCAS on the group, atomicMax on the ordered score key),
//     then selects the top-k groups with the same chunked bitonic merge.
// Keys sort ascending as (~ordered(score), position | group): best score first, ties by the
// lower position / group id -- the order of rasfast/reference/segment.py.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/cuda_check.h"
#include "common/dtype.h"
#include "segment/segment_cuda.h"

namespace rasfast {
namespace segment_cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kCap = (int)kSelectCap;
constexpr unsigned long long kSentinel = ~0ull;

__device__ __forceinline__ unsigned long long make_key(float score, uint32_t low) {
  return ((unsigned long long)(~float_to_key(score)) << 32) | low;
}

__device__ __forceinline__ float key_score(unsigned long long key) {
  return key_to_float(~(uint32_t)(key >> 32));
}

// Ascending bitonic sort of kCap keys in shared memory by the whole block.
__device__ void bitonic_sort(unsigned long long* buf) {
  for (int k = 2; k <= kCap; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < kCap; i += blockDim.x) {
        int ixj = i ^ j;
        if (ixj > i) {
          unsigned long long a = buf[i], c = buf[ixj];
          bool up = (i & k) == 0;
          if ((a > c) == up) {
            buf[i] = c;
            buf[ixj] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

// Keeps the `keep` smallest keys produced by key_of(i) for i in [0, count) in buf[0, keep).
template <class KeyOf>
__device__ void select_smallest(unsigned long long* buf, int64_t count, int keep, KeyOf key_of) {
  for (int i = threadIdx.x; i < kCap; i += blockDim.x) buf[i] = kSentinel;
  __syncthreads();
  const int chunk = kCap - keep;
  for (int64_t c0 = 0; c0 < count; c0 += chunk) {
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) {
      int64_t j = c0 + i;
      buf[keep + i] = j < count ? key_of(j) : kSentinel;
    }
    __syncthreads();
    bitonic_sort(buf);
  }
}

template <DType S>
__global__ void topk_kernel(const float* __restrict q, const typename Storage<S>::type* __restrict emb,
                            int64_t D, const int64_t* __restrict ids, const int64_t* __restrict ptr,
                            int64_t n, float* __restrict scratch, int64_t* __restrict out_ids,
                            float* __restrict out_scores, unsigned long long* err) {
  __shared__ unsigned long long buf[kCap];
  const int64_t b = blockIdx.x, s = ptr[b], len = ptr[b + 1] - s;
  const float* qb = q + b * D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int64_t j = warp; j < len; j += warps) {
    const int64_t row = ids ? ids[s + j] : s + j;
    const typename Storage<S>::type* r = emb + row * D;
    float acc = 0.f;
    for (int64_t d = lane; d < D; d += 32) acc += qb[d] * Storage<S>::load(r, d);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) {
      scratch[s + j] = acc;
      if (!isfinite(acc)) atomicMin(err, (unsigned long long)(s + j));
    }
  }
  __syncthreads();
  select_smallest(buf, len, (int)n, [&](int64_t j) { return make_key(scratch[s + j], (uint32_t)j); });
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    unsigned long long key = buf[i];
    bool ok = key != kSentinel;
    int64_t j = ok ? (int64_t)(key & 0xffffffffull) : -1;
    out_ids[b * n + i] = ok ? s + j : -1;
    out_scores[b * n + i] = ok ? scratch[s + j] : -INFINITY;
  }
}

__device__ __forceinline__ uint32_t hash_group(uint64_t g) {
  g ^= g >> 33;
  g *= 0xff51afd7ed558ccdull;
  g ^= g >> 33;
  return (uint32_t)g;
}

__global__ void max_rank_kernel(const float* __restrict scores, const int64_t* __restrict groups,
                                const int64_t* __restrict ptr, int64_t k,
                                unsigned long long* slot_keys, unsigned int* slot_vals,
                                int64_t* __restrict out_ids, float* __restrict out_scores) {
  __shared__ unsigned long long buf[kCap];
  const int64_t b = blockIdx.x, s = ptr[b], len = ptr[b + 1] - s;
  const int64_t cap = 2 * len, base = 2 * s;
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    float v = scores[s + j];
    if (v == -INFINITY) continue;  // absent items
    unsigned long long g = (unsigned long long)groups[s + j];
    int64_t h = hash_group(g) % cap;
    while (true) {  // at most len distinct groups in 2 * len slots: a free slot exists
      unsigned long long prev = atomicCAS(slot_keys + base + h, kSentinel, g);
      if (prev == kSentinel || prev == g) {
        atomicMax(slot_vals + base + h, float_to_key(v));
        break;
      }
      h = h + 1 == cap ? 0 : h + 1;
    }
  }
  __syncthreads();
  select_smallest(buf, cap, (int)k, [&](int64_t i) {
    unsigned long long g = slot_keys[base + i];
    if (g == kSentinel) return kSentinel;
    return ((unsigned long long)(~slot_vals[base + i]) << 32) | g;
  });
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
    unsigned long long key = buf[i];
    bool ok = key != kSentinel;
    out_ids[b * k + i] = ok ? (int64_t)(key & 0xffffffffull) : -1;
    out_scores[b * k + i] = ok ? key_score(key) : -INFINITY;
  }
}

}  // namespace

void topk_scores(uintptr_t q, uintptr_t emb, int dtype_code, int64_t D, uintptr_t ids,
                 uintptr_t ptr, int64_t B, int64_t n, uintptr_t scratch, uintptr_t out_ids,
                 uintptr_t out_scores, uintptr_t err, uintptr_t stream) {
  if (B == 0) return;
  DType dt = static_cast<DType>(dtype_code);
  RASFAST_DISPATCH_DTYPE(dt, S, {
    topk_kernel<S><<<(unsigned)B, kThreads, 0, as_stream(stream)>>>(
        as_dptr<const float>(q), as_dptr<const typename Storage<S>::type>(emb), D,
        as_dptr<const int64_t>(ids), as_dptr<const int64_t>(ptr), n, as_dptr<float>(scratch),
        as_dptr<int64_t>(out_ids), as_dptr<float>(out_scores), as_dptr<unsigned long long>(err));
  })
  RASFAST_CUDA_CHECK(cudaGetLastError());
}

void max_rank(uintptr_t scores, uintptr_t groups, uintptr_t ptr, int64_t B, int64_t k,
              uintptr_t slot_keys, uintptr_t slot_vals, uintptr_t out_ids, uintptr_t out_scores,
              uintptr_t stream) {
  if (B == 0) return;
  max_rank_kernel<<<(unsigned)B, kThreads, 0, as_stream(stream)>>>(
      as_dptr<const float>(scores), as_dptr<const int64_t>(groups), as_dptr<const int64_t>(ptr), k,
      as_dptr<unsigned long long>(slot_keys), as_dptr<unsigned int>(slot_vals),
      as_dptr<int64_t>(out_ids), as_dptr<float>(out_scores));
  RASFAST_CUDA_CHECK(cudaGetLastError());
}

}  // namespace segment_cuda
}  // namespace rasfast
