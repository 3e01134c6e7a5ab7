// CUDA theme kernels (DESIGN.md section 3). Written to be simple and deterministic:
//
//   keys_kernel      PPD scan: 64 corpus rows x 64 queries per block, T in shared-memory
//                    tiles (coalesced loads, f16/bf16 converted to float32), 4x4 register
//                    block per thread, ||q||^2 + ||c||^2 - 2 q.c with every (row, query)
//                    computed by the same instruction sequence -> ordered uint32 keys.
//   hist/pick        multi-block radix select per query over the keys (11/11/10-bit
//                    digits, integer atomics) -> K-th key; eqcount/last_eq -> the id of the
//                    last threshold-equal row in scope (ties by lower id).
//   score_kernel     fused path: one warp per query scans its rows, scores only in-scope
//                    rows (warp dot, fixed butterfly sum) into a per-warp sorted top-k list
//                    in shared memory -> candidate lists -> merge_kernel (k rounds of
//                    block arg-best over the (score desc, id asc) order).
//   theme_scope      keys + cut -> order-preserving compaction (ballot) -> CUB segmented
//                    stable radix sort of (key, id).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cub/cub.cuh>
#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/cuda_check.h"
#include "common/device_info.h"
#include "common/dtype.h"
#include "common/vec16.h"
#include "common/scratch.h"
#include "theme/theme_cuda.h"

namespace rasfast {
namespace theme_cuda {
namespace {

// ----------------------------------------------------------------------------- helpers
template <DType D> struct Dev;
template <> struct Dev<DType::F32> {
  using T = float;
  __device__ __forceinline__ static float ld(const float* p, int64_t i) { return p[i]; }
};
template <> struct Dev<DType::F16> {
  using T = uint16_t;
  __device__ __forceinline__ static float ld(const uint16_t* p, int64_t i) {
    return __half2float(__ushort_as_half(p[i]));
  }
};
template <> struct Dev<DType::BF16> {
  using T = uint16_t;
  __device__ __forceinline__ static float ld(const uint16_t* p, int64_t i) {
    return __uint_as_float((uint32_t)p[i] << 16);
  }
};

inline unsigned grid_dim(int64_t n, int64_t per) {
  const int64_t g = (n + per - 1) / per;
  if (g > 2147483647) throw std::invalid_argument("problem too large for one launch");
  return (unsigned)(g < 1 ? 1 : g);
}

void check_launch() { RASFAST_CUDA_CHECK(cudaGetLastError()); }

DType dtype_of(int code) {
  if (code < 0 || code > 2) throw std::invalid_argument("dtype code must be 0, 1 or 2");
  return static_cast<DType>(code);
}

// ----------------------------------------------------------------------------- pass 1
constexpr int KR = 64, KQ = 64, KT = 32, KTHREADS = 256;

template <DType D>
__global__ void __launch_bounds__(KTHREADS) keys_kernel(const float* __restrict__ q,
                                                        const typename Dev<D>::T* __restrict__ c,
                                                        int64_t B, int64_t N, int64_t T, bool ip,
                                                        uint32_t* __restrict__ keys) {
  __shared__ float cs[KT][KR + 1];
  __shared__ float qs[KT][KQ + 1];
  __shared__ float cn_s[KR], qn_s[KQ];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t r0 = (int64_t)blockIdx.x * KR, q0 = (int64_t)blockIdx.y * KQ;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  float norm = 0.f;  // threads 0..63: ||row r0+tid||^2; 64..127: ||query q0+tid-64||^2
  for (int64_t t0 = 0; t0 < T; t0 += KT) {
#pragma unroll
    for (int m = 0; m < (KR * KT) / KTHREADS; ++m) {
      const int e = tid + m * KTHREADS, r = e / KT, t = e % KT;
      const int64_t row = r0 + r, col = t0 + t;
      cs[t][r] = (row < N && col < T) ? Dev<D>::ld(c, row * T + col) : 0.f;
      const int64_t qq = q0 + r;
      qs[t][r] = (qq < B && col < T) ? q[qq * T + col] : 0.f;
    }
    __syncthreads();
    if (tid < KR) {
      for (int t = 0; t < KT; ++t) norm = fmaf(cs[t][tid], cs[t][tid], norm);
    } else if (tid < KR + KQ) {
      for (int t = 0; t < KT; ++t) norm = fmaf(qs[t][tid - KR], qs[t][tid - KR], norm);
    }
#pragma unroll 8
    for (int t = 0; t < KT; ++t) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = cs[t][tx + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = qs[t][ty + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  if (tid < KR) cn_s[tid] = norm;
  else if (tid < KR + KQ) qn_s[tid - KR] = norm;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t qq = q0 + ty + 16 * j;
    if (qq >= B) continue;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = r0 + tx + 16 * i;
      if (row >= N) continue;
      float v;
      if (ip) {
        v = acc[i][j];
      } else {
        const float base = __fadd_rn(qn_s[ty + 16 * j], cn_s[tx + 16 * i]);
        v = __fsub_rn(base, __fmul_rn(2.f, acc[i][j]));
      }
      keys[qq * N + row] = select_key(v, ip);
    }
  }
}

template <DType D>
void launch_keys(const float* q, const void* c, int64_t B, int64_t N, int64_t T, bool ip,
                 uint32_t* keys, cudaStream_t s) {
  dim3 grid(grid_dim(N, KR), grid_dim(B, KQ));
  if (grid.y > 65535) throw std::invalid_argument("B too large for one launch");
  keys_kernel<D><<<grid, KTHREADS, 0, s>>>(q, static_cast<const typename Dev<D>::T*>(c), B, N, T,
                                           ip, keys);
  check_launch();
}

void scan(const float* q, const void* c, DType dt, int64_t B, int64_t N, int64_t T, bool ip,
          uint32_t* keys, cudaStream_t s) {
  RASFAST_DISPATCH_DTYPE(dt, D, { launch_keys<D>(q, c, B, N, T, ip, keys, s); })
}

// ----------------------------------------------------------------------------- select
constexpr int kBins = 2048;
constexpr int64_t kChunk = 4096;  // rows per chunk for tie counting / compaction

__global__ void init_select(const int64_t B, int64_t K, uint32_t* prefix, uint32_t* pmask,
                            int64_t* want) {
  const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (b < B) { prefix[b] = 0; pmask[b] = 0; want[b] = K; }
}

__global__ void hist_kernel(const uint32_t* __restrict__ keys, int64_t N,
                            const uint32_t* __restrict__ prefix, const uint32_t* __restrict__ pmask,
                            int shift, uint32_t dmask, unsigned int* __restrict__ hist) {
  __shared__ unsigned int h[kBins];
  const int64_t b = blockIdx.y;
  for (int i = threadIdx.x; i < kBins; i += blockDim.x) h[i] = 0;
  __syncthreads();
  const uint32_t pf = prefix[b], pm = pmask[b];
  const uint32_t* kb = keys + b * N;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N;
       i += (int64_t)gridDim.x * blockDim.x) {
    const uint32_t k = kb[i];
    if ((k & pm) == pf) atomicAdd(&h[(k >> shift) & dmask], 1u);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kBins; i += blockDim.x)
    if (h[i]) atomicAdd(&hist[b * kBins + i], h[i]);
}

// One thread per query: the digit bin holding the want-th key; narrows the prefix.
__global__ void pick_kernel(const unsigned int* __restrict__ hist, int64_t B, int shift,
                            uint32_t dmask, uint32_t* prefix, uint32_t* pmask, int64_t* want) {
  const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  int64_t cum = 0, w = want[b];
  uint32_t bin = 0;
  for (; bin <= dmask; ++bin) {
    const int64_t h = hist[b * kBins + bin];
    if (cum + h >= w) break;
    cum += h;
  }
  if (bin > dmask) bin = dmask;  // unreachable when 1 <= want <= count (defensive)
  want[b] = w - cum;
  prefix[b] |= bin << shift;
  pmask[b] |= dmask << shift;
}

__global__ void eqcount_kernel(const uint32_t* __restrict__ keys, int64_t N,
                               const uint32_t* __restrict__ thr, int64_t nchunks,
                               unsigned int* __restrict__ counts) {
  __shared__ unsigned int cnt;
  const int64_t b = blockIdx.y, c = blockIdx.x;
  if (threadIdx.x == 0) cnt = 0;
  __syncthreads();
  const uint32_t th = thr[b];
  const int64_t i1 = min(N, (c + 1) * kChunk);
  unsigned int mine = 0;
  for (int64_t i = c * kChunk + threadIdx.x; i < i1; i += blockDim.x) mine += keys[b * N + i] == th;
  if (mine) atomicAdd(&cnt, mine);
  __syncthreads();
  if (threadIdx.x == 0) counts[b * nchunks + c] = cnt;
}

// One thread per query: id of the want-th row (by id) whose key equals the threshold.
__global__ void last_eq_kernel(const uint32_t* __restrict__ keys, int64_t N, int64_t B,
                               const uint32_t* __restrict__ thr, const int64_t* __restrict__ want,
                               const unsigned int* __restrict__ counts, int64_t nchunks,
                               int64_t* __restrict__ last) {
  const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  const uint32_t th = thr[b];
  const int64_t w = want[b];
  int64_t acc = 0, res = -1;
  for (int64_t c = 0; c < nchunks && res < 0; ++c) {
    const int64_t n = counts[b * nchunks + c];
    if (acc + n < w) { acc += n; continue; }
    const int64_t i1 = min(N, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < i1; ++i) {
      if (keys[b * N + i] == th && ++acc == w) { res = i; break; }
    }
  }
  last[b] = res;
}

// Scope cut of every query of a key block: thr[b] (= K-th key) and last[b].
struct Cuts {
  Scratch prefix, pmask, want, last;
  Cuts(int64_t B, cudaStream_t s)
      : prefix(sizeof(uint32_t) * B, s), pmask(sizeof(uint32_t) * B, s), want(sizeof(int64_t) * B, s),
        last(sizeof(int64_t) * B, s) {}
  const uint32_t* thr() const { return prefix.as<uint32_t>(); }
  const int64_t* last_eq() const { return last.as<int64_t>(); }
};

void find_cuts(const uint32_t* keys, int64_t B, int64_t N, int64_t K, Cuts& cuts, cudaStream_t s) {
  uint32_t* prefix = cuts.prefix.as<uint32_t>();
  uint32_t* pmask = cuts.pmask.as<uint32_t>();
  int64_t* want = cuts.want.as<int64_t>();
  init_select<<<grid_dim(B, 128), 128, 0, s>>>(B, K, prefix, pmask, want);
  check_launch();
  Scratch hist(sizeof(unsigned int) * kBins * B, s);
  const int shifts[3] = {21, 10, 0};
  const uint32_t dmasks[3] = {2047u, 2047u, 1023u};
  const unsigned gx = grid_dim(std::min<int64_t>(N, 256 * 256), 256);
  if (B > 65535) throw std::invalid_argument("B too large for one launch");
  for (int p = 0; p < 3; ++p) {
    RASFAST_CUDA_CHECK(cudaMemsetAsync(hist.p, 0, sizeof(unsigned int) * kBins * B, s));
    hist_kernel<<<dim3(gx, (unsigned)B), 256, 0, s>>>(keys, N, prefix, pmask, shifts[p], dmasks[p],
                                                      hist.as<unsigned int>());
    check_launch();
    pick_kernel<<<grid_dim(B, 128), 128, 0, s>>>(hist.as<unsigned int>(), B, shifts[p], dmasks[p],
                                                 prefix, pmask, want);
    check_launch();
  }
  const int64_t nchunks = (N + kChunk - 1) / kChunk;
  Scratch counts(sizeof(unsigned int) * nchunks * B, s);
  eqcount_kernel<<<dim3(grid_dim(nchunks, 1), (unsigned)B), 256, 0, s>>>(
      keys, N, prefix, nchunks, counts.as<unsigned int>());
  check_launch();
  last_eq_kernel<<<grid_dim(B, 64), 64, 0, s>>>(keys, N, B, prefix, want, counts.as<unsigned int>(),
                                                nchunks, cuts.last.as<int64_t>());
  check_launch();
}

__device__ __forceinline__ bool in_scope(uint32_t key, int64_t i, uint32_t thr, int64_t last) {
  return key < thr || (key == thr && i <= last);
}

// ----------------------------------------------------------------------------- top-k
__device__ __forceinline__ bool better(float sa, int64_t ia, float sb, int64_t ib) {
  return sa > sb || (sa == sb && ia < ib);
}

// Warp-cooperative dot product; the xor butterfly gives every lane the same, bit-identical
// sum, and the same for every row.
// Rows whose bytes are a whole number of 16-byte vectors, with the row and the query 16-byte
// aligned, are read in vectors, up to kAhead of them in flight per lane before the first is
// used (docs/gpu.md, "Row loads in flight"): before, each lane read its 2- or 4-byte elements
// one dependent iteration at a time (a 768-wide float16 row: 24 scalar loads a lane).
constexpr int kAhead = 4;

template <DType D>
__device__ __forceinline__ float warp_dot(const float* __restrict__ qv,
                                          const typename Dev<D>::T* __restrict__ row, int64_t Dm,
                                          int lane) {
  constexpr int V = Unpack<D>::kElems;
  float acc = 0.f;
  if (Dm % V == 0 && aligned16(row) && aligned16(qv)) {  // the same for the whole warp
    const int64_t nv = Dm / V;
    for (int64_t v0 = lane; v0 < nv; v0 += 32 * kAhead) {
      Vec16 rv[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        const int64_t v = v0 + 32 * u;
        if (v < nv) rv[u] = load16(row + v * V);
      }
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        const int64_t v = v0 + 32 * u;
        if (v < nv) acc += dot16<D>(rv[u], qv + v * V);
      }
    }
  } else {
    for (int64_t d = lane; d < Dm; d += 32) acc = fmaf(qv[d], Dev<D>::ld(row, d), acc);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  return acc;
}

// Sorted (best first) list of up to k candidates, updated by lane 0 only.
__device__ __forceinline__ void list_insert(float* ls, int64_t* li, int& n, int k, float s,
                                            int64_t id) {
  if (n == k && !better(s, id, ls[k - 1], li[k - 1])) return;
  int j = n < k ? n++ : k - 1;
  while (j > 0 && better(s, id, ls[j - 1], li[j - 1])) {
    ls[j] = ls[j - 1];
    li[j] = li[j - 1];
    --j;
  }
  ls[j] = s;
  li[j] = id;
}

constexpr int kWarps = 8;
constexpr int64_t kRowsPerBlock = 4096;
// The gathered scoring of a few queries (a per-question call: B = 1, a scope of 2,000 rows)
// gives its blocks fewer rows, down to 8 a warp, until the grid covers every SM twice: at
// 4,096 rows a block such a call was one block, 8 warps each scoring 250 rows one after
// another, every row a dependent gather from memory (the launch log of rasfast.device_work
// showed it; the sixth H100 run timed the per-question call at 1.54 ms).
constexpr int64_t kMinRowsPerBlock = kWarps * 8;
inline int64_t gather_rows_per_block(int64_t B, int64_t Ks) {
  const int64_t want = 2 * (int64_t)std::max(1, sm_count());
  int64_t rpb = kRowsPerBlock;
  while (rpb > kMinRowsPerBlock && B * ((Ks + rpb - 1) / rpb) < want) rpb /= 2;
  return rpb;
}

template <DType D>
__global__ void __launch_bounds__(kWarps * 32) score_kernel(
    const float* __restrict__ qe, const typename Dev<D>::T* __restrict__ emb, int64_t B, int64_t N,
    int64_t Dm, const uint32_t* __restrict__ keys, const uint32_t* __restrict__ thr,
    const int64_t* __restrict__ last, bool all, float w, bool ip, int k, int64_t M,
    float* __restrict__ cand_s, int64_t* __restrict__ cand_i) {
  extern __shared__ unsigned char smem[];
  float* ls_all = reinterpret_cast<float*>(smem);
  int64_t* li_all = reinterpret_cast<int64_t*>(smem + sizeof(float) * kWarps * k + 8 * kWarps);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = (int64_t)blockIdx.x * kWarps + warp;  // queries vary fastest across blocks
  const int64_t blk = blockIdx.y;
  if (b >= B) return;  // whole warp exits; no block-level sync below
  float* ls = ls_all + warp * k;
  int64_t* li = li_all + warp * k;
  int n = 0;
  const uint32_t th = all ? 0xffffffffu : thr[b];
  const int64_t le = all ? N : last[b];
  const int64_t i0 = blk * kRowsPerBlock, i1 = min(N, i0 + kRowsPerBlock);
  const float* qv = qe + b * Dm;
  for (int64_t base = i0; base < i1; base += 32) {
    const int64_t i = base + lane;
    const uint32_t key = i < i1 ? keys[b * N + i] : 0xffffffffu;
    const bool in = i < i1 && (all || in_scope(key, i, th, le));
    unsigned mask = __ballot_sync(0xffffffffu, in);
    while (mask) {
      const int l = __ffs(mask) - 1;
      mask &= mask - 1;
      const int64_t r = base + l;
      const uint32_t kr = __shfl_sync(0xffffffffu, key, l);
      const float dense = warp_dot<D>(qv, emb + r * Dm, Dm, lane);
      float score = dense;
      if (w != 0.f) {
        const float v = key_to_float(ip ? ~kr : kr);
        const float theme = ip ? v : -v;
        score = (1.f - w) * dense + w * theme;
      }
      if (lane == 0) list_insert(ls, li, n, k, score, r);
      __syncwarp();
    }
  }
  if (lane == 0) {
    float* os = cand_s + (b * M + blk) * k;
    int64_t* oi = cand_i + (b * M + blk) * k;
    for (int j = 0; j < k; ++j) {
      os[j] = j < n ? ls[j] : -INFINITY;
      oi[j] = j < n ? li[j] : -1;
    }
  }
}

template <DType D>
__global__ void __launch_bounds__(kWarps * 32) gather_score_kernel(
    const float* __restrict__ qe, const typename Dev<D>::T* __restrict__ emb, int64_t Dm,
    const int64_t* __restrict__ scope, int64_t Ks, int64_t rows_per_block, int k, int64_t M,
    float* __restrict__ cand_s, int64_t* __restrict__ cand_i) {
  extern __shared__ unsigned char smem[];
  float* ls_all = reinterpret_cast<float*>(smem);
  int64_t* li_all = reinterpret_cast<int64_t*>(smem + sizeof(float) * kWarps * k + 8 * kWarps);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.y, blk = blockIdx.x;
  float* ls = ls_all + warp * k;
  int64_t* li = li_all + warp * k;
  int n = 0;
  const int64_t per_warp = rows_per_block / kWarps;
  const int64_t j0 = blk * rows_per_block + warp * per_warp, j1 = min(Ks, j0 + per_warp);
  const float* qv = qe + b * Dm;
  for (int64_t base = j0; base < j1; base += 32) {
    const int64_t j = base + lane;
    const int64_t id = j < j1 ? scope[b * Ks + j] : -1;
    unsigned mask = __ballot_sync(0xffffffffu, id >= 0);
    while (mask) {
      const int l = __ffs(mask) - 1;
      mask &= mask - 1;
      const int64_t r = __shfl_sync(0xffffffffu, id, l);
      const float dense = warp_dot<D>(qv, emb + r * Dm, Dm, lane);
      if (lane == 0) list_insert(ls, li, n, k, dense, r);
      __syncwarp();
    }
  }
  if (lane == 0) {
    const int64_t list = blk * kWarps + warp;
    float* os = cand_s + (b * M + list) * k;
    int64_t* oi = cand_i + (b * M + list) * k;
    for (int j = 0; j < k; ++j) {
      os[j] = j < n ? ls[j] : -INFINITY;
      oi[j] = j < n ? li[j] : -1;
    }
  }
}

// One block per query: k rounds of block-wide arg-best over the candidates that rank after
// the previous pick. Candidate ids are unique per query, so the order is total.
__global__ void merge_kernel(const float* __restrict__ cand_s, const int64_t* __restrict__ cand_i,
                             int64_t M, int k, int64_t* __restrict__ out_i,
                             float* __restrict__ out_s) {
  __shared__ float bs[256];
  __shared__ int64_t bi[256];
  const int64_t b = blockIdx.x;
  const int64_t total = M * k;
  const float* cs = cand_s + b * total;
  const int64_t* ci = cand_i + b * total;
  float ps = INFINITY;
  int64_t pi = -1;
  bool first = true;
  for (int j = 0; j < k; ++j) {
    float s = -INFINITY;
    int64_t id = -1;
    for (int64_t x = threadIdx.x; x < total; x += blockDim.x) {
      const int64_t cid = ci[x];
      if (cid < 0) continue;
      const float csx = cs[x];
      if (!first && !better(ps, pi, csx, cid)) continue;  // already picked or ranks before
      if (id < 0 || better(csx, cid, s, id)) { s = csx; id = cid; }
    }
    bs[threadIdx.x] = s;
    bi[threadIdx.x] = id;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
      if ((int)threadIdx.x < o) {
        const float s2 = bs[threadIdx.x + o];
        const int64_t i2 = bi[threadIdx.x + o];
        if (i2 >= 0 && (bi[threadIdx.x] < 0 || better(s2, i2, bs[threadIdx.x], bi[threadIdx.x]))) {
          bs[threadIdx.x] = s2;
          bi[threadIdx.x] = i2;
        }
      }
      __syncthreads();
    }
    const float best_s = bs[0];
    const int64_t best_i = bi[0];
    __syncthreads();
    if (threadIdx.x == 0) {
      out_i[b * k + j] = best_i;
      out_s[b * k + j] = best_i < 0 ? -INFINITY : best_s;
    }
    if (best_i < 0) {  // nothing left: pad the rest
      for (int jj = j + 1 + threadIdx.x; jj < k; jj += blockDim.x) {
        out_i[b * k + jj] = -1;
        out_s[b * k + jj] = -INFINITY;
      }
      return;
    }
    ps = best_s;
    pi = best_i;
    first = false;
  }
}

size_t list_smem(int k) { return (sizeof(float) + sizeof(int64_t)) * kWarps * (size_t)k + 16 * kWarps; }

void check_k(int64_t k) {
  if (k < 1 || k > kMaxK)
    throw std::invalid_argument("k: the cuda backend supports 1 <= k <= " + std::to_string(kMaxK) +
                                ", got " + std::to_string(k));
}

// Keys for query blocks small enough that B_blk x N uint32 stays below 2 GiB (and B_blk
// fits a grid's y dimension).
int64_t query_block(int64_t B, int64_t N) {
  const int64_t budget = int64_t(1) << 29;
  const int64_t qb = std::min<int64_t>(B, budget / std::max<int64_t>(N, 1));
  return std::max<int64_t>(1, std::min<int64_t>(qb, 65535));
}

// ----------------------------------------------------------------------------- theme_scope
__global__ void count_in_kernel(const uint32_t* __restrict__ keys, int64_t N,
                                const uint32_t* __restrict__ thr, const int64_t* __restrict__ last,
                                int64_t nchunks, unsigned int* __restrict__ counts) {
  __shared__ unsigned int cnt;
  const int64_t b = blockIdx.y, c = blockIdx.x;
  if (threadIdx.x == 0) cnt = 0;
  __syncthreads();
  const int64_t i1 = min(N, (c + 1) * kChunk);
  unsigned int mine = 0;
  for (int64_t i = c * kChunk + threadIdx.x; i < i1; i += blockDim.x)
    mine += in_scope(keys[b * N + i], i, thr[b], last[b]);
  if (mine) atomicAdd(&cnt, mine);
  __syncthreads();
  if (threadIdx.x == 0) counts[b * nchunks + c] = cnt;
}

__global__ void offsets_kernel(const unsigned int* __restrict__ counts, int64_t B, int64_t nchunks,
                               int64_t K, int64_t* __restrict__ offs, int* __restrict__ seg) {
  const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (b > B) return;
  seg[b] = (int)(b * K);
  if (b == B) return;
  int64_t acc = b * K;
  for (int64_t c = 0; c < nchunks; ++c) {
    offs[b * nchunks + c] = acc;
    acc += counts[b * nchunks + c];
  }
}

// One warp per (chunk, query): order-preserving compaction of in-scope (key, id) pairs.
__global__ void compact_kernel(const uint32_t* __restrict__ keys, int64_t N,
                               const uint32_t* __restrict__ thr, const int64_t* __restrict__ last,
                               int64_t nchunks, const int64_t* __restrict__ offs,
                               uint32_t* __restrict__ out_k, int64_t* __restrict__ out_i) {
  const int64_t b = blockIdx.y, c = blockIdx.x;
  const int lane = threadIdx.x;
  int64_t pos = offs[b * nchunks + c];
  const int64_t i1 = min(N, (c + 1) * kChunk);
  for (int64_t base = c * kChunk; base < i1; base += 32) {
    const int64_t i = base + lane;
    const uint32_t key = i < i1 ? keys[b * N + i] : 0u;
    const bool in = i < i1 && in_scope(key, i, thr[b], last[b]);
    const unsigned mask = __ballot_sync(0xffffffffu, in);
    if (in) {
      const int64_t at = pos + __popc(mask & ((1u << lane) - 1u));
      out_k[at] = key;
      out_i[at] = i;
    }
    pos += __popc(mask);
  }
}

}  // namespace

// ============================================================================= launchers
void scan_keys(uintptr_t q, uintptr_t corpus, int dtype_code, int64_t B, int64_t N, int64_t T,
               bool ip, uintptr_t out_keys, uintptr_t stream) {
  if (B < 1 || N < 1 || T < 1) throw std::invalid_argument("scan_keys: B, N, T must be >= 1");
  scan(as_dptr<const float>(q), reinterpret_cast<const void*>(corpus), dtype_of(dtype_code), B, N,
       T, ip, as_dptr<uint32_t>(out_keys), as_stream(stream));
}

void theme_scope(uintptr_t q, uintptr_t corpus, int dtype_code, int64_t B, int64_t N, int64_t T,
                 int64_t K, bool ip, uintptr_t out_ids, uintptr_t stream) {
  if (B < 1 || N < 1 || T < 1) throw std::invalid_argument("theme_scope: B, N, T must be >= 1");
  if (K < 1 || K > N) throw std::invalid_argument("K must be in [1, N]");
  const DType dt = dtype_of(dtype_code);
  cudaStream_t s = as_stream(stream);
  const int64_t qb = query_block(B, N);
  Scratch keys(sizeof(uint32_t) * qb * N, s);
  const int64_t nchunks = (N + kChunk - 1) / kChunk;
  for (int64_t b0 = 0; b0 < B; b0 += qb) {
    const int64_t nb = std::min(qb, B - b0);
    if (nb * K > 2147483647) throw std::invalid_argument("B x K too large for one sort");
    scan(as_dptr<const float>(q) + b0 * T, reinterpret_cast<const void*>(corpus), dt, nb, N, T, ip,
         keys.as<uint32_t>(), s);
    Cuts cuts(nb, s);
    find_cuts(keys.as<uint32_t>(), nb, N, K, cuts, s);
    Scratch counts(sizeof(unsigned int) * nb * nchunks, s), offs(sizeof(int64_t) * nb * nchunks, s),
        seg(sizeof(int) * (nb + 1), s);
    count_in_kernel<<<dim3(grid_dim(nchunks, 1), (unsigned)nb), 256, 0, s>>>(
        keys.as<uint32_t>(), N, cuts.thr(), cuts.last_eq(), nchunks, counts.as<unsigned int>());
    check_launch();
    offsets_kernel<<<grid_dim(nb + 1, 64), 64, 0, s>>>(counts.as<unsigned int>(), nb, nchunks, K,
                                                       offs.as<int64_t>(), seg.as<int>());
    check_launch();
    Scratch ck(sizeof(uint32_t) * nb * K, s), ci(sizeof(int64_t) * nb * K, s),
        sk(sizeof(uint32_t) * nb * K, s);
    compact_kernel<<<dim3(grid_dim(nchunks, 1), (unsigned)nb), 32, 0, s>>>(
        keys.as<uint32_t>(), N, cuts.thr(), cuts.last_eq(), nchunks, offs.as<int64_t>(),
        ck.as<uint32_t>(), ci.as<int64_t>());
    check_launch();
    int64_t* out = as_dptr<int64_t>(out_ids) + b0 * K;
    size_t temp = 0;
    RASFAST_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairs(
        nullptr, temp, ck.as<uint32_t>(), sk.as<uint32_t>(), ci.as<int64_t>(), out, (int)(nb * K),
        (int)nb, seg.as<int>(), seg.as<int>() + 1, 0, 32, s));
    Scratch tmp(temp, s);
    RASFAST_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairs(
        tmp.p, temp, ck.as<uint32_t>(), sk.as<uint32_t>(), ci.as<int64_t>(), out, (int)(nb * K),
        (int)nb, seg.as<int>(), seg.as<int>() + 1, 0, 32, s));
  }
}

void scoped_dense(uintptr_t q_emb, uintptr_t emb, int dtype_code, int64_t B, int64_t N, int64_t D,
                  uintptr_t scope, int64_t Ks, int64_t k, uintptr_t out_ids, uintptr_t out_scores,
                  uintptr_t stream) {
  if (B < 1 || N < 1 || D < 1) throw std::invalid_argument("scoped_dense: B, N, D must be >= 1");
  check_k(k);
  if (B > 65535) throw std::invalid_argument("B too large for one launch");
  const DType dt = dtype_of(dtype_code);
  cudaStream_t s = as_stream(stream);
  const int64_t rpb = gather_rows_per_block(B, Ks);
  const int64_t nblk = std::max<int64_t>(1, (Ks + rpb - 1) / rpb);
  const int64_t M = nblk * kWarps;
  Scratch cs(sizeof(float) * B * M * k, s), ci(sizeof(int64_t) * B * M * k, s);
  RASFAST_DISPATCH_DTYPE(dt, DT, {
    gather_score_kernel<DT><<<dim3(grid_dim(nblk, 1), (unsigned)B), kWarps * 32, list_smem((int)k),
                              s>>>(as_dptr<const float>(q_emb),
                                   reinterpret_cast<const typename Dev<DT>::T*>(emb), D,
                                   as_dptr<const int64_t>(scope), Ks, rpb, (int)k, M,
                                   cs.as<float>(), ci.as<int64_t>());
  })
  check_launch();
  merge_kernel<<<(unsigned)B, 256, 0, s>>>(cs.as<float>(), ci.as<int64_t>(), M, (int)k,
                                            as_dptr<int64_t>(out_ids), as_dptr<float>(out_scores));
  check_launch();
}

void scoped_search(uintptr_t q_ppd, uintptr_t ppd, int ppd_code, uintptr_t q_emb, uintptr_t emb,
                   int emb_code, int64_t B, int64_t N, int64_t T, int64_t D, int64_t K, int64_t k,
                   double w, bool ip, uintptr_t out_ids, uintptr_t out_scores, uintptr_t stream) {
  if (B < 1 || N < 1 || T < 1 || D < 1)
    throw std::invalid_argument("scoped_search: B, N, T, D must be >= 1");
  if (K < 1 || K > N) throw std::invalid_argument("K must be in [1, N]");
  if (!(w >= 0.0 && w <= 1.0)) throw std::invalid_argument("theme_weight must be in [0, 1]");
  check_k(k);
  const DType dp = dtype_of(ppd_code), de = dtype_of(emb_code);
  cudaStream_t s = as_stream(stream);
  const int64_t qb = query_block(B, N);
  const int64_t nblk = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  Scratch keys(sizeof(uint32_t) * qb * N, s);
  Scratch cs(sizeof(float) * qb * nblk * k, s), ci(sizeof(int64_t) * qb * nblk * k, s);
  for (int64_t b0 = 0; b0 < B; b0 += qb) {
    const int64_t nb = std::min(qb, B - b0);
    scan(as_dptr<const float>(q_ppd) + b0 * T, reinterpret_cast<const void*>(ppd), dp, nb, N, T, ip,
         keys.as<uint32_t>(), s);
    const bool all = K >= N;
    Cuts cuts(nb, s);
    if (!all) find_cuts(keys.as<uint32_t>(), nb, N, K, cuts, s);
    const dim3 grid(grid_dim(nb, kWarps), grid_dim(nblk, 1));
    if (grid.y > 65535) throw std::invalid_argument("N too large for one launch");
    RASFAST_DISPATCH_DTYPE(de, DT, {
      score_kernel<DT><<<grid, kWarps * 32, list_smem((int)k), s>>>(
          as_dptr<const float>(q_emb) + b0 * D, reinterpret_cast<const typename Dev<DT>::T*>(emb),
          nb, N, D, keys.as<uint32_t>(), cuts.thr(), cuts.last_eq(), all, (float)w, ip, (int)k,
          nblk, cs.as<float>(), ci.as<int64_t>());
    })
    check_launch();
    merge_kernel<<<(unsigned)nb, 256, 0, s>>>(cs.as<float>(), ci.as<int64_t>(), nblk, (int)k,
                                               as_dptr<int64_t>(out_ids) + b0 * k,
                                               as_dptr<float>(out_scores) + b0 * k);
    check_launch();
  }
}

}  // namespace theme_cuda
}  // namespace rasfast
