// CUDA kernels of the segment family.
//
// segment_topk_scores, two launches:
//   score_kernel: every candidate position j in [0, M) over the whole grid (not one block per
//     query: a few long queries still fill the GPU). A group of G lanes (G = 4 .. 32, sized to
//     the row) scores one row, reading it in 16-byte vectors where aligned; the query row is
//     found by a binary search of the offsets. float32 accumulation, written to scratch[j].
//     The bytes that must move: M rows of D elements (gathered through cand_ids or not), read
//     once; M ids; 4 M bytes of scores written.
//   topk_select_kernel: one block per query selects its n best of scratch[ptr[b], ptr[b+1])
//     with a block-wide radix select over 64-bit keys (8-bit digits from the top, stopping as
//     soon as the digit's bin holds exactly the keys still wanted: usually 1-2 passes over
//     the segment's scores, read from L2), gathers exactly n keys and sorts only those
//     (bitonic, next power of two of n). The old design bitonic-sorted 4,096 keys per
//     chunk whatever n and the segment's length.
// segment_max_rank, one launch: a block per query builds an open-addressing hash table of
//   its groups in its own 2 * len slots of global memory (initialised by the block itself:
//   no fill launches), atomicMax of the ordered score key, then the same radix select over
//   the slots.
// Keys sort ascending as (~ordered(score), position | group): best score first, ties by the
// lower position / group id -- the order of rasfast/reference/segment.py. The value checks
// of the inputs are done here, flagged in `err` (segment_cuda.h), so the host launches no
// validation pass of its own.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "common/cuda_check.h"
#include "common/device_info.h"
#include "common/dtype.h"
#include "common/vec16.h"
#include "segment/segment_cuda.h"

namespace rasfast {
namespace segment_cuda {
namespace {

constexpr int kScoreThreads = 256;
constexpr int kAhead = 4;  // 16-byte row loads a lane has in flight in score_kernel
constexpr int kSelectThreads = 256;
constexpr unsigned long long kSentinel = ~0ull;
constexpr unsigned long long kInputError = 0ull;  // any value < kScoreError; the host re-checks

__device__ __forceinline__ unsigned long long make_key(float score, uint32_t low) {
  return ((unsigned long long)(~float_to_key(score)) << 32) | low;
}

__device__ __forceinline__ float key_score(unsigned long long key) {
  return key_to_float(~(uint32_t)(key >> 32));
}

__device__ __forceinline__ int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// ------------------------------------------------------------------------- scoring
// The query of position j: the last b with ptr[b] <= j (offsets clamped into [0, M], so a
// bad ptr still gives an in-range b; it is flagged by topk_select_kernel).
__device__ __forceinline__ int64_t query_of(const int64_t* ptr, int64_t B, int64_t M, int64_t j) {
  int64_t lo = 0, hi = B - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) >> 1;
    if (clamp64(ptr[mid], 0, M) <= j) lo = mid; else hi = mid - 1;
  }
  return lo;
}

template <DType S>
__global__ void __launch_bounds__(kScoreThreads, 4) score_kernel(const float* __restrict q, const typename Storage<S>::type* __restrict emb,
                             int64_t D, int64_t T, const int64_t* __restrict ids,
                             const int64_t* __restrict ptr, int64_t B, int64_t M, int G, bool vec,
                             float* __restrict scratch, unsigned long long* err) {
  using Elem = typename Storage<S>::type;
  constexpr int V = Unpack<S>::kElems;
  const int lane = threadIdx.x & 31, sub = lane % G;
  const int rows_per_warp = 32 / G;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  // the loop is warp-uniform (every lane runs every shuffle); a group past M scores nothing
  for (int64_t base = warp * rows_per_warp; base < M; base += warps * rows_per_warp) {
    const int64_t j = base + lane / G;
    const bool active = j < M;
    float acc = 0.f;
    bool bad_id = false;
    if (active) {
      const int64_t row = ids ? ids[j] : j;
      bad_id = row < 0 || row >= T;
      if (!bad_id) {
        const Elem* r = emb + row * D;
        if (vec) {
          // The row's 16-byte loads go out kAhead at a time before the first is used, and the
          // first batch before the query's binary search (which does not decide the row), so
          // the search's dependent offset reads overlap the row's DRAM latency. Before, each
          // lane had one row load in flight after the search: at D = 384 float32 (3 loads a
          // lane) the H100 read at 38% of the copy rate (docs/gpu.md, segment ops).
          const int64_t nv = D / V, step = (int64_t)G * kAhead;
          Vec16 rv[kAhead];
#pragma unroll
          for (int u = 0; u < kAhead; ++u) {
            const int64_t v = sub + (int64_t)u * G;
            if (v < nv) rv[u] = load16(r + v * V);
          }
          const float* qb = q + query_of(ptr, B, M, j) * D;
          for (int64_t v0 = sub; v0 < nv; v0 += step) {
#pragma unroll
            for (int u = 0; u < kAhead; ++u) {
              const int64_t v = v0 + (int64_t)u * G;
              if (v >= nv) break;
              acc += dot16<S>(rv[u], qb + v * V);
            }
            if (v0 + step < nv) {  // the next batch (rows longer than kAhead * G vectors)
#pragma unroll
              for (int u = 0; u < kAhead; ++u) {
                const int64_t v = v0 + step + (int64_t)u * G;
                if (v < nv) rv[u] = load16(r + v * V);
              }
            }
          }
        } else {
          const float* qb = q + query_of(ptr, B, M, j) * D;
          for (int64_t d = sub; d < D; d += G) acc += qb[d] * Storage<S>::load(r, d);
        }
      }
    }
    for (int o = G >> 1; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (active && sub == 0) {
      scratch[j] = bad_id ? 0.f : acc;
      if (bad_id) atomicMin(err, kInputError);
      else if (!isfinite(acc)) atomicMin(err, (unsigned long long)kScoreError + (unsigned long long)j);
    }
  }
}

// The same scores, a warp a chunk of consecutive positions (the default for rows in 16-byte
// vectors). The seventh GPU session (H200, torch.profiler) timed score_kernel above at 187 us
// for 1024 x 200 rows of 384 float32 (314 MB: 1.7 TB/s, 40% of the copy rate), where torch's
// gemv over the same rows took 87 us: a warp there scores one row and exits, so each row pays
// a block's start, the query's binary search (10 dependent offset reads) and its whole DRAM
// latency with nothing else in flight. Here a warp's lane groups walk a chunk of `chunk`
// positions (P = 32 / G rows a step), the query of each found once by the binary search and
// then by stepping forward (positions are consecutive), and the next step's row is loaded
// before this step's is scored. RASFAST_SEGMENT_CHUNKS=0 keeps score_kernel (tests, and the
// roofline run's same-run comparison).
template <DType S>
__device__ __forceinline__ void load_row_head(const typename Storage<S>::type* __restrict emb,
                                              int64_t D, int64_t T, const int64_t* __restrict ids,
                                              int64_t j, bool active, int G, int sub, Vec16* rv,
                                              const typename Storage<S>::type** row, bool* bad) {
  constexpr int V = Unpack<S>::kElems;
  *row = nullptr;
  *bad = false;
  if (!active) return;
  const int64_t r = ids ? ids[j] : j;
  *bad = r < 0 || r >= T;
  if (*bad) return;
  *row = emb + r * D;
  const int64_t nv = D / V;
#pragma unroll
  for (int u = 0; u < kAhead; ++u) {
    const int64_t v = sub + (int64_t)u * G;
    if (v < nv) rv[u] = load16(*row + v * V);
  }
}

// 3 blocks an SM (at most 85 registers a thread): two rows' kAhead vectors a lane in
// registers; the cap of score_kernel (4: 64 registers) spilled 58-124 bytes here
constexpr int kChunkBlocksPerSM = 3;

template <DType S>
__global__ void __launch_bounds__(kScoreThreads, kChunkBlocksPerSM) score_chunks_kernel(
    const float* __restrict q, const typename Storage<S>::type* __restrict emb, int64_t D, int64_t T,
    const int64_t* __restrict ids, const int64_t* __restrict ptr, int64_t B, int64_t M, int G,
    int64_t chunk, float* __restrict scratch, unsigned long long* err) {
  using Elem = typename Storage<S>::type;
  constexpr int V = Unpack<S>::kElems;
  const int lane = threadIdx.x & 31, sub = lane % G, grp = lane / G;
  const int P = 32 / G;
  const int64_t nv = D / V, step = (int64_t)G * kAhead;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (int64_t c0 = warp * chunk; c0 < M; c0 += warps * chunk) {  // warp-uniform
    const int64_t c1 = c0 + chunk < M ? c0 + chunk : M;
    const int64_t steps = (c1 - c0 + P - 1) / P;
    int64_t j = c0 + grp;
    Vec16 cur[kAhead];
    const Elem* row;
    bool bad;
    load_row_head<S>(emb, D, T, ids, j, j < c1, G, sub, cur, &row, &bad);
    int64_t b = query_of(ptr, B, M, j < c1 ? j : c1 - 1);
    for (int64_t t = 0; t < steps; ++t) {
      const bool active = j < c1;
      const int64_t jn = j + P;
      Vec16 nxt[kAhead];
      const Elem* row_n;
      bool bad_n;
      load_row_head<S>(emb, D, T, ids, jn, jn < c1, G, sub, nxt, &row_n, &bad_n);
      // the query of position j: the last b with ptr[b] <= j (clamped as in query_of)
      while (b + 1 < B && clamp64(ptr[b + 1], 0, M) <= j) ++b;
      float acc = 0.f;
      if (active && !bad) {
        const float* qb = q + b * D;
        for (int64_t v0 = sub; v0 < nv; v0 += step) {
          if (v0 != sub) {  // rows longer than kAhead * G vectors: the next batch
#pragma unroll
            for (int u = 0; u < kAhead; ++u) {
              const int64_t v = v0 + (int64_t)u * G;
              if (v < nv) cur[u] = load16(row + v * V);
            }
          }
#pragma unroll
          for (int u = 0; u < kAhead; ++u) {
            const int64_t v = v0 + (int64_t)u * G;
            if (v >= nv) break;
            acc += dot16<S>(cur[u], qb + v * V);
          }
        }
      }
      for (int o = G >> 1; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (active && sub == 0) {
        scratch[j] = bad ? 0.f : acc;
        if (bad) atomicMin(err, kInputError);
        else if (!isfinite(acc)) atomicMin(err, (unsigned long long)kScoreError + (unsigned long long)j);
      }
#pragma unroll
      for (int u = 0; u < kAhead; ++u) cur[u] = nxt[u];
      row = row_n;
      bad = bad_n;
      j = jn;
    }
  }
}

// ------------------------------------------------------------------------- block select
struct SelectShared {
  unsigned int hist[256];
  unsigned long long prefix;
  long long need;
  int done;
  int count;     // keys gathered below the selected prefix
  int count_eq;  // keys gathered equal to it
};

// Ascending bitonic sort of P (a power of two) keys in shared memory by the whole block.
__device__ void bitonic_sort(unsigned long long* buf, int P) {
  for (int k = 2; k <= P; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < P; i += blockDim.x) {
        const int ixj = i ^ j;
        if (ixj > i) {
          const unsigned long long a = buf[i], c = buf[ixj];
          const bool up = (i & k) == 0;
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

// The `n` smallest of the keys key_of(i), i in [0, count), sorted ascending into
// buf[0, min(n, count)); returns min(n, count). Keys are unique except kSentinel (which
// sorts last and which callers drop). A radix select over 8-bit digits from the top finds
// the n-th smallest key's leading digits; it stops at the first digit whose bin holds
// exactly the keys still wanted, so every key whose leading digits are <= that prefix is
// selected (n of them). buf holds at least n <= kMaxN keys.
template <class KeyOf>
__device__ int block_select_smallest(unsigned long long* buf, int64_t count, int n, SelectShared& sh,
                                     KeyOf key_of) {
  const int take = count < n ? (int)count : n;
  if (count <= n) {
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) buf[i] = key_of(i);
  } else {
    unsigned long long prefix = 0;
    long long need = n;
    int shift = 56;
    for (;; shift -= 8) {
      for (int i = threadIdx.x; i < 256; i += blockDim.x) sh.hist[i] = 0;
      __syncthreads();
      const unsigned long long hm = shift >= 56 ? 0ull : (~0ull << (shift + 8));
      for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
        const unsigned long long key = key_of(i);
        if ((key & hm) == (prefix & hm)) atomicAdd(&sh.hist[(key >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (threadIdx.x < 32) {  // warp 0 picks the digit: 8 bins per lane, a warp scan
        const int lane = threadIdx.x;
        unsigned int local = 0;
        for (int t = 0; t < 8; ++t) local += sh.hist[lane * 8 + t];
        unsigned int incl = local;
        for (int o = 1; o < 32; o <<= 1) {
          const unsigned int up = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += up;
        }
        const long long excl = (long long)incl - local;
        if (excl < need && need <= (long long)incl) {
          long long before = excl;
          for (int t = 0; t < 8; ++t) {
            const unsigned int h = sh.hist[lane * 8 + t];
            if (need <= before + (long long)h) {
              const long long left = need - before;
              sh.prefix = prefix | ((unsigned long long)(lane * 8 + t) << shift);
              sh.need = left;
              sh.done = (long long)h == left;
              break;
            }
            before += h;
          }
        }
      }
      __syncthreads();
      prefix = sh.prefix;
      need = sh.need;
      const bool done = sh.done != 0;
      __syncthreads();  // every thread has read sh before the next pass rewrites it
      if (done || shift == 0) break;
    }
    // n - need keys lie below the prefix, and `need` of the keys equal to it are wanted: all
    // of them (need == the bin's count) unless they repeat (kSentinel), when any will do
    if (threadIdx.x == 0) sh.count = sh.count_eq = 0;
    __syncthreads();
    const unsigned long long top = prefix >> shift;
    const int below = n - (int)need;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
      const unsigned long long key = key_of(i);
      const unsigned long long lead = key >> shift;
      if (lead < top) {
        buf[atomicAdd(&sh.count, 1)] = key;
      } else if (lead == top) {
        const int slot = atomicAdd(&sh.count_eq, 1);
        if (slot < need) buf[below + slot] = key;
      }
    }
  }
  int P = 1;
  while (P < take) P <<= 1;
  for (int i = take + threadIdx.x; i < P; i += blockDim.x) buf[i] = kSentinel;
  __syncthreads();
  if (take > 1) bitonic_sort(buf, P);
  return take;
}

// This block's query segment [s, e), clamped into [0, M]; flags bad offsets (block 0 also
// checks both ends). False for the one block of an empty batch (B == 0), which only checks.
__device__ __forceinline__ bool block_segment(const int64_t* ptr, int64_t B, int64_t M, int64_t* s,
                                              int64_t* e, unsigned long long* err) {
  const int64_t b = blockIdx.x;
  if (b == 0 && threadIdx.x == 0 && (ptr[0] != 0 || ptr[B] != M)) atomicMin(err, kInputError);
  if (b >= B) return false;
  const int64_t s0 = ptr[b], e0 = ptr[b + 1];
  if (threadIdx.x == 0 && e0 < s0) atomicMin(err, kInputError);
  *s = clamp64(s0, 0, M);
  *e = clamp64(e0, *s, M);
  return true;
}

__global__ void topk_select_kernel(const float* __restrict q, int64_t D, const int64_t* __restrict ptr,
                                   int64_t B, int64_t M, int n, const float* __restrict scratch,
                                   int64_t* __restrict out_ids, float* __restrict out_scores,
                                   unsigned long long* err) {
  __shared__ unsigned long long buf[kMaxN];
  __shared__ SelectShared sh;
  int64_t s, e;
  if (!block_segment(ptr, B, M, &s, &e, err)) return;
  const int64_t b = blockIdx.x;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
    if (!isfinite(q[b * D + d])) atomicMin(err, kInputError);
  const float* sc = scratch + s;
  const int take = block_select_smallest(buf, e - s, n, sh,
                                         [&](int64_t j) { return make_key(sc[j], (uint32_t)j); });
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const bool ok = i < take;
    const int64_t j = ok ? (int64_t)(buf[i] & 0xffffffffull) : -1;
    out_ids[b * n + i] = ok ? s + j : -1;
    out_scores[b * n + i] = ok ? sc[j] : -INFINITY;
  }
}

__device__ __forceinline__ uint32_t hash_group(uint64_t g) {
  g ^= g >> 33;
  g *= 0xff51afd7ed558ccdull;
  g ^= g >> 33;
  return (uint32_t)g;
}

__global__ void max_rank_kernel(const float* __restrict scores, const int64_t* __restrict groups,
                                const int64_t* __restrict ptr, int64_t B, int64_t M, int k,
                                unsigned long long* slot_keys, unsigned int* slot_vals,
                                int64_t* __restrict out_ids, float* __restrict out_scores,
                                unsigned long long* err) {
  __shared__ unsigned long long buf[kMaxN];
  __shared__ SelectShared sh;
  int64_t s, e;
  if (!block_segment(ptr, B, M, &s, &e, err)) return;
  const int64_t b = blockIdx.x;
  const int64_t len = e - s, cap = 2 * len, base = 2 * s;
  unsigned long long* keys = slot_keys + base;
  unsigned int* vals = slot_vals + base;
  for (int64_t i = threadIdx.x; i < cap; i += blockDim.x) {
    keys[i] = kSentinel;
    vals[i] = 0u;  // below the key of every non-NaN float
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const float v = scores[s + j];
    const int64_t g = groups[s + j];
    if (isnan(v) || g < 0 || g >= (int64_t(1) << 31)) {
      atomicMin(err, kInputError);
      continue;
    }
    if (v == -INFINITY) continue;  // absent items
    int64_t h = hash_group((uint64_t)g) % cap;
    // at most len distinct groups in 2 * len slots: a free slot exists unless offsets
    // overlap (a bad ptr, flagged): the probe is bounded either way
    int64_t probes = 0;
    for (; probes < cap; ++probes) {
      const unsigned long long prev = atomicCAS(keys + h, kSentinel, (unsigned long long)g);
      if (prev == kSentinel || prev == (unsigned long long)g) {
        atomicMax(vals + h, float_to_key(v));
        break;
      }
      h = h + 1 == cap ? 0 : h + 1;
    }
    if (probes == cap) atomicMin(err, kInputError);
  }
  __syncthreads();
  const int take = block_select_smallest(buf, cap, k, sh, [&](int64_t i) {
    const unsigned long long g = keys[i];
    return g == kSentinel ? kSentinel : (((unsigned long long)(~vals[i]) << 32) | g);
  });
  for (int i = threadIdx.x; i < k; i += blockDim.x) {
    const unsigned long long key = i < take ? buf[i] : kSentinel;
    const bool ok = key != kSentinel;
    out_ids[b * k + i] = ok ? (int64_t)(key & 0xffffffffull) : -1;
    out_scores[b * k + i] = ok ? key_score(key) : -INFINITY;
  }
}

// Lanes per row: the smallest power of two >= the row's load units, at least 4, at most 32.
int lanes_per_row(int64_t units) {
  int G = 32;
  while (G > 4 && G / 2 >= units) G /= 2;
  return G;
}

// RASFAST_SEGMENT_CHUNKS=0: score_kernel (a warp a row) instead of score_chunks_kernel.
bool score_in_chunks() {
  const char* env = std::getenv("RASFAST_SEGMENT_CHUNKS");
  return !(env && env[0] == '0' && env[1] == '\0');
}

// Positions a warp walks in score_chunks_kernel: M spread over one wave of resident warps
// (at least P, a multiple of P = the rows a step), so that every SM has warps to switch
// between and each warp has rows to stream.
template <DType S>
int64_t score_chunk(int64_t M, int P) {
  static int resident[3] = {0, 0, 0};  // per dtype: blocks of the kernel an SM holds
  int& per_sm = resident[(int)S];
  if (per_sm == 0) {
    int b = 0;
    RASFAST_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, score_chunks_kernel<S>,
                                                                     kScoreThreads, 0));
    per_sm = b > 0 ? b : 1;
  }
  const int64_t warps = (int64_t)per_sm * sm_count() * (kScoreThreads / 32);
  int64_t chunk = (M + warps - 1) / warps;
  chunk = (chunk + P - 1) / P * P;
  return chunk > 0 ? chunk : P;
}

}  // namespace

__global__ void reset_flag_kernel(unsigned long long* err) { *err = (unsigned long long)kNoError; }

void reset_flag(uintptr_t err, uintptr_t stream) {
  reset_flag_kernel<<<1, 1, 0, as_stream(stream)>>>(as_dptr<unsigned long long>(err));
  RASFAST_CUDA_CHECK(cudaGetLastError());
}

void topk_scores(uintptr_t q, uintptr_t emb, int dtype_code, int64_t D, int64_t T,
                 uintptr_t ids, uintptr_t ptr, int64_t B, int64_t M, int64_t n, bool vec,
                 uintptr_t scratch, uintptr_t out_ids, uintptr_t out_scores, uintptr_t err,
                 uintptr_t stream) {
  DType dt = static_cast<DType>(dtype_code);
  cudaStream_t st = as_stream(stream);
  if (M > 0 && B > 0) {
    RASFAST_DISPATCH_DTYPE(dt, S, {
      constexpr int V = Unpack<S>::kElems;
      const int G = lanes_per_row(vec ? D / V : D);
      if (vec && score_in_chunks()) {
        const int64_t chunk = score_chunk<S>(M, 32 / G);
        const int64_t warps_needed = (M + chunk - 1) / chunk;
        const int64_t blocks = (warps_needed + kScoreThreads / 32 - 1) / (kScoreThreads / 32);
        score_chunks_kernel<S><<<(unsigned)blocks, kScoreThreads, 0, st>>>(
            as_dptr<const float>(q), as_dptr<const typename Storage<S>::type>(emb), D, T,
            as_dptr<const int64_t>(ids), as_dptr<const int64_t>(ptr), B, M, G, chunk,
            as_dptr<float>(scratch), as_dptr<unsigned long long>(err));
      } else {
        const int64_t rows_per_block = (kScoreThreads / 32) * (32 / G);
        int64_t blocks = (M + rows_per_block - 1) / rows_per_block;
        if (blocks > 65535LL * 8) blocks = 65535LL * 8;  // grid-stride beyond
        score_kernel<S><<<(unsigned)blocks, kScoreThreads, 0, st>>>(
            as_dptr<const float>(q), as_dptr<const typename Storage<S>::type>(emb), D, T,
            as_dptr<const int64_t>(ids), as_dptr<const int64_t>(ptr), B, M, G, vec,
            as_dptr<float>(scratch), as_dptr<unsigned long long>(err));
      }
    })
    RASFAST_CUDA_CHECK(cudaGetLastError());
  }
  topk_select_kernel<<<(unsigned)(B > 0 ? B : 1), kSelectThreads, 0, st>>>(
      as_dptr<const float>(q), D, as_dptr<const int64_t>(ptr), B, M, (int)n,
      as_dptr<const float>(scratch), as_dptr<int64_t>(out_ids), as_dptr<float>(out_scores),
      as_dptr<unsigned long long>(err));
  RASFAST_CUDA_CHECK(cudaGetLastError());
}

void max_rank(uintptr_t scores, uintptr_t groups, uintptr_t ptr, int64_t B, int64_t M, int64_t k,
              uintptr_t slot_keys, uintptr_t slot_vals, uintptr_t out_ids, uintptr_t out_scores,
              uintptr_t err, uintptr_t stream) {
  max_rank_kernel<<<(unsigned)(B > 0 ? B : 1), kSelectThreads, 0, as_stream(stream)>>>(
      as_dptr<const float>(scores), as_dptr<const int64_t>(groups), as_dptr<const int64_t>(ptr), B,
      M, (int)k, as_dptr<unsigned long long>(slot_keys), as_dptr<unsigned int>(slot_vals),
      as_dptr<int64_t>(out_ids), as_dptr<float>(out_scores), as_dptr<unsigned long long>(err));
  RASFAST_CUDA_CHECK(cudaGetLastError());
}

}  // namespace segment_cuda
}  // namespace rasfast
