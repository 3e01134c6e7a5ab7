// Graph-transformer message passing, CUDA backend.
//
// attend: one warp per (destination node, head). Each lane owns channels lane, lane+32, ...
// (R registers), the logit q.(k+e) is a warp-shuffle reduction, and the softmax over the
// node's incoming edges is online (running max and sum, accumulators rescaled when the max
// grows), so one pass over the edges reads each source row once and writes nothing per edge.
// Accumulation is float32 for every storage dtype.
// attend backward (training): two warp-per-(node, head) kernels, described above them.
// epilogue: one block per node (concat/head mean, skip or beta gate, LayerNorm, ReLU).
// layer: both in one launch, a block per node (inference; the two kernels keep the
// attention output for training).
// pool: one block per graph, threads over features.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/cuda_check.h"
#include "common/dtype.h"
#include "graph_conv/graph_conv_cuda.h"

namespace rasfast {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 4;

template <DType D> __device__ __forceinline__ void store_val(void* p, int64_t i, float v);
template <> __device__ __forceinline__ void store_val<DType::F32>(void* p, int64_t i, float v) {
  static_cast<float*>(p)[i] = v;
}
template <> __device__ __forceinline__ void store_val<DType::F16>(void* p, int64_t i, float v) {
  static_cast<uint16_t*>(p)[i] = __half_as_ushort(__float2half_rn(v));
}
template <> __device__ __forceinline__ void store_val<DType::BF16>(void* p, int64_t i, float v) {
  static_cast<uint16_t*>(p)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One warp's attention for destination node i and head h: the softmax over i's incoming
// edges of scale * q.(k + e) applied to (v + e), written to dst[0..C) (float32).
template <DType D, int R>
__device__ __forceinline__ void attend_warp(const int64_t* __restrict__ indptr,
                                            const int64_t* __restrict__ src,
                                            const int64_t* __restrict__ eid,
                                            const typename Storage<D>::type* __restrict__ nodes,
                                            int64_t W, const typename Storage<D>::type* __restrict__ e,
                                            int64_t ES, int64_t H, int64_t C, float scale,
                                            int64_t i, int64_t h, int lane, float* __restrict__ dst) {
  using T = typename Storage<D>::type;
  const int64_t HC = H * C;
  float q[R], acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t c = lane + (int64_t)r * kWarp;
    q[r] = c < C ? Storage<D>::load(nodes, i * W + h * C + c) : 0.f;
    acc[r] = 0.f;
  }
  float m = -INFINITY, s = 0.f;
  const int64_t b = indptr[i], end = indptr[i + 1];
  for (int64_t t = b; t < end; ++t) {
    const int64_t j = src[t];
    const T* krow = nodes + j * W + HC + h * C;
    const T* vrow = nodes + j * W + 2 * HC + h * C;
    const T* erow = e ? e + eid[t] * ES + h * C : nullptr;
    float ev[R], part = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t c = lane + (int64_t)r * kWarp;
      ev[r] = (erow && c < C) ? Storage<D>::load(erow, c) : 0.f;
      if (c < C) part += q[r] * (Storage<D>::load(krow, c) + ev[r]);
    }
    const float l = warp_sum(part) * scale;
    if (l > m) {
      const float f = expf(m - l);  // 0 on the first edge (m = -inf)
      s *= f;
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] *= f;
      m = l;
    }
    const float p = expf(l - m);
    s += p;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t c = lane + (int64_t)r * kWarp;
      if (c < C) acc[r] += p * (Storage<D>::load(vrow, c) + ev[r]);
    }
  }
  const float inv = s > 0.f ? 1.f / s : 0.f;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t c = lane + (int64_t)r * kWarp;
    if (c < C) dst[c] = acc[r] * inv;
  }
}

template <DType D, int R>
__global__ void attend_kernel(const int64_t* __restrict__ indptr, const int64_t* __restrict__ src,
                              const int64_t* __restrict__ eid, const void* __restrict__ nodes_v,
                              int64_t W, const void* __restrict__ e_v, int64_t ES, int64_t N,
                              int64_t H, int64_t C, float scale, float* __restrict__ agg) {
  using T = typename Storage<D>::type;
  const int64_t warp = (int64_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarp;
  if (warp >= N * H) return;  // whole warp exits together
  const int64_t i = warp / H, h = warp % H;
  attend_warp<D, R>(indptr, src, eid, static_cast<const T*>(nodes_v), W, static_cast<const T*>(e_v),
                    ES, H, C, scale, i, h, threadIdx.x % kWarp, agg + (i * H + h) * C);
}

// ------------------------------------------------------------------- attention backward
// The backward of attend in PyG's direct form (float32; the CPU twin and its formulas are in
// graph_conv_cpu.cpp, graph_conv_attend_backward). Two kernels, no atomics (deterministic):
// back_dst: one warp per (destination node i, head h). Pass 1 over i's in-edges writes each
// edge's logit scale * q_i.(k_j + e_p) and d_p = d_agg_i.(v_j + e_p) into alpha / dl (lane 0,
// then __syncwarp); pass 2 over those scalars gives the softmax's max, sum and
// s = sum a_p d_p; pass 3 turns them into a_p and dl_p = a_p (d_p - s) scale (kept for
// back_src), accumulates dq_i = sum dl_p (k_j + e_p) and writes de_p = dl_p q_i + a_p d_agg_i.
// back_src: one warp per (source node j, head h) over j's out-edges in ascending CSR
// position (reverse CSR rptr / rpos): dk_j = sum dl_p q_dst(p), dv_j = sum a_p d_agg_dst(p).
// Each row of q/k/v/e is read twice per edge (pass 1 and 3, back_src); no [E, H, C]
// intermediate is written besides de itself.
template <int R>
__global__ void attend_back_dst_kernel(const int64_t* __restrict__ indptr, const int64_t* __restrict__ src,
                                       const int64_t* __restrict__ roe, const float* __restrict__ nodes,
                                       int64_t W, const float* __restrict__ e,
                                       const float* __restrict__ dagg, int64_t N, int64_t H, int64_t C,
                                       float scale, float* __restrict__ d_nodes, int64_t Wd,
                                       float* __restrict__ de, float* __restrict__ dl,
                                       float* __restrict__ alpha) {
  const int64_t warp = (int64_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (warp >= N * H) return;  // whole warp exits together
  const int64_t i = warp / H, h = warp % H, HC = H * C;
  float q[R], g[R], dq[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t c = lane + (int64_t)r * kWarp;
    q[r] = c < C ? nodes[i * W + h * C + c] : 0.f;
    g[r] = c < C ? dagg[i * HC + h * C + c] : 0.f;
    dq[r] = 0.f;
  }
  const int64_t b = indptr[i], end = indptr[i + 1];
  float m = -INFINITY;
  for (int64_t p = b; p < end; ++p) {  // pass 1: logits and d_p
    const int64_t j = src[p];
    const float* krow = nodes + j * W + HC + h * C;
    const float* vrow = krow + HC;
    const float* erow = e ? e + roe[p] * HC + h * C : nullptr;
    float pl = 0.f, pd = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t c = lane + (int64_t)r * kWarp;
      if (c < C) {
        const float ev = erow ? erow[c] : 0.f;
        pl += q[r] * (krow[c] + ev);
        pd += g[r] * (vrow[c] + ev);
      }
    }
    const float l = warp_sum(pl) * scale, d = warp_sum(pd);
    if (lane == 0) {
      alpha[p * H + h] = l;
      dl[p * H + h] = d;
    }
    m = fmaxf(m, l);
  }
  __syncwarp();
  float sum = 0.f;
  for (int64_t p = b; p < end; ++p) sum += expf(alpha[p * H + h] - m);  // pass 2
  float s = 0.f;
  for (int64_t p = b; p < end; ++p) s += expf(alpha[p * H + h] - m) / sum * dl[p * H + h];
  __syncwarp();  // every lane has read pass 1's scalars before lane 0 overwrites them
  for (int64_t p = b; p < end; ++p) {  // pass 3
    const float a = expf(alpha[p * H + h] - m) / sum;
    const float dlp = a * (dl[p * H + h] - s) * scale;
    __syncwarp();
    if (lane == 0) {
      alpha[p * H + h] = a;
      dl[p * H + h] = dlp;
    }
    const int64_t j = src[p];
    const float* krow = nodes + j * W + HC + h * C;
    const float* erow = e ? e + roe[p] * HC + h * C : nullptr;
    float* derow = e ? de + p * HC + h * C : nullptr;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t c = lane + (int64_t)r * kWarp;
      if (c < C) {
        const float ev = erow ? erow[c] : 0.f;
        dq[r] += dlp * (krow[c] + ev);
        if (derow) derow[c] = dlp * q[r] + a * g[r];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t c = lane + (int64_t)r * kWarp;
    if (c < C) d_nodes[i * Wd + h * C + c] = dq[r];
  }
}

template <int R>
__global__ void attend_back_src_kernel(const int64_t* __restrict__ rptr, const int64_t* __restrict__ rpos,
                                       const int64_t* __restrict__ dst, const float* __restrict__ nodes,
                                       int64_t W, const float* __restrict__ dagg, int64_t N, int64_t H,
                                       int64_t C, float* __restrict__ d_nodes, int64_t Wd,
                                       const float* __restrict__ dl, const float* __restrict__ alpha) {
  const int64_t warp = (int64_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (warp >= N * H) return;
  const int64_t j = warp / H, h = warp % H, HC = H * C;
  float dk[R], dv[R];
#pragma unroll
  for (int r = 0; r < R; ++r) dk[r] = dv[r] = 0.f;
  for (int64_t t = rptr[j]; t < rptr[j + 1]; ++t) {
    const int64_t p = rpos[t], i = dst[p];
    const float wl = dl[p * H + h], wa = alpha[p * H + h];
    const float* qrow = nodes + i * W + h * C;
    const float* grow = dagg + i * HC + h * C;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t c = lane + (int64_t)r * kWarp;
      if (c < C) {
        dk[r] += wl * qrow[c];
        dv[r] += wa * grow[c];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t c = lane + (int64_t)r * kWarp;
    if (c < C) {
      d_nodes[j * Wd + HC + h * C + c] = dk[r];
      d_nodes[j * Wd + 2 * HC + h * C + c] = dv[r];
    }
  }
}

template <int R>
void launch_attend_back(const int64_t* indptr, const int64_t* src, const int64_t* roe,
                        const int64_t* rptr, const int64_t* rpos, const int64_t* dst,
                        const float* nodes, int64_t W, const float* e, const float* dagg, int64_t N,
                        int64_t H, int64_t C, float scale, float* d_nodes, int64_t Wd, float* de,
                        float* dl, float* alpha, cudaStream_t stream) {
  const int64_t warps = N * H;
  const unsigned blocks = (unsigned)((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  attend_back_dst_kernel<R><<<blocks, kWarpsPerBlock * kWarp, 0, stream>>>(
      indptr, src, roe, nodes, W, e, dagg, N, H, C, scale, d_nodes, Wd, de, dl, alpha);
  attend_back_src_kernel<R><<<blocks, kWarpsPerBlock * kWarp, 0, stream>>>(
      rptr, rpos, dst, nodes, W, dagg, N, H, C, d_nodes, Wd, dl, alpha);
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
__device__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, nw = blockDim.x / kWarp;
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[w] = v;
  __syncthreads();
  float t = lane < nw ? red[lane] : 0.f;
  return warp_sum(t);
}

// The layer's epilogue for node i over its attention output a[H * C] (float32): concat or
// head mean, skip or beta gate, LayerNorm, ReLU, written to out's row i. row: F floats of
// shared memory, red: kWarp; every thread of the block calls it.
template <DType D>
__device__ __forceinline__ void epilogue_row(const float* a, int64_t i, int64_t H, int64_t C,
                                             bool concat, const typename Storage<D>::type* nodes,
                                             int64_t W, int64_t skip_col, bool has_skip,
                                             const float* __restrict__ wb,
                                             const float* __restrict__ lw,
                                             const float* __restrict__ lb, float eps, bool relu,
                                             void* out, float* row, float* red) {
  const int64_t F = concat ? H * C : C;
  const auto* sk = nodes + i * W + skip_col;
  float z = 0.f;
  for (int64_t f = threadIdx.x; f < F; f += blockDim.x) {
    float v;
    if (concat) {
      v = a[f];
    } else {
      v = 0.f;
      for (int64_t h = 0; h < H; ++h) v += a[h * C + f];
      v /= (float)H;
    }
    if (has_skip && wb) {
      const float r = Storage<D>::load(sk, f);
      z += wb[f] * v + wb[F + f] * r + wb[2 * F + f] * (v - r);
    } else if (has_skip) {
      v += Storage<D>::load(sk, f);
    }
    row[f] = v;
  }
  if (has_skip && wb) {
    const float g = 1.f / (1.f + expf(-block_sum(z, red)));
    for (int64_t f = threadIdx.x; f < F; f += blockDim.x)
      row[f] = g * Storage<D>::load(sk, f) + (1.f - g) * row[f];
  }
  __syncthreads();
  float mu = 0.f, inv = 1.f;
  if (lw) {
    float s = 0.f;
    for (int64_t f = threadIdx.x; f < F; f += blockDim.x) s += row[f];
    mu = block_sum(s, red) / (float)F;
    float v2 = 0.f;
    for (int64_t f = threadIdx.x; f < F; f += blockDim.x) v2 += (row[f] - mu) * (row[f] - mu);
    inv = rsqrtf(block_sum(v2, red) / (float)F + eps);
  }
  for (int64_t f = threadIdx.x; f < F; f += blockDim.x) {
    float v = row[f];
    if (lw) v = (v - mu) * inv * lw[f] + lb[f];
    if (relu) v = fmaxf(v, 0.f);
    store_val<D>(out, i * F + f, v);
  }
}

template <DType D>
__global__ void epilogue_kernel(const float* __restrict__ agg, int64_t H, int64_t C, bool concat,
                                const void* __restrict__ nodes_v, int64_t W, int64_t skip_col,
                                bool has_skip, const float* __restrict__ wb,
                                const float* __restrict__ lw, const float* __restrict__ lb,
                                float eps, bool relu, void* out) {
  using T = typename Storage<D>::type;
  extern __shared__ float row[];  // F floats
  __shared__ float red[kWarp];
  const int64_t i = blockIdx.x;
  epilogue_row<D>(agg + i * H * C, i, H, C, concat, static_cast<const T*>(nodes_v), W, skip_col,
                  has_skip, wb, lw, lb, eps, relu, out, row, red);
}

// attend and epilogue in one launch: a block per node, warp h its head h's attention into
// shared memory, then the block's epilogue from there (no [N, H, C] round trip through
// memory, one launch a layer instead of two). The same arithmetic as the two kernels, so the
// same results bit for bit.
template <DType D, int R>
__global__ void layer_kernel(const int64_t* __restrict__ indptr, const int64_t* __restrict__ src,
                             const int64_t* __restrict__ eid, const void* __restrict__ nodes_v,
                             int64_t W, const void* __restrict__ e_v, int64_t ES, int64_t H,
                             int64_t C, float scale, bool concat, int64_t skip_col, bool has_skip,
                             const float* __restrict__ wb, const float* __restrict__ lw,
                             const float* __restrict__ lb, float eps, bool relu, void* out) {
  using T = typename Storage<D>::type;
  extern __shared__ float ag[];  // H * C floats of attention, then F floats of row
  __shared__ float red[kWarp];
  const T* nodes = static_cast<const T*>(nodes_v);
  const int64_t i = blockIdx.x;
  const int h = threadIdx.x / kWarp;
  if (h < H)
    attend_warp<D, R>(indptr, src, eid, nodes, W, static_cast<const T*>(e_v), ES, H, C, scale, i, h,
                      threadIdx.x % kWarp, ag + (int64_t)h * C);
  __syncthreads();
  epilogue_row<D>(ag, i, H, C, concat, nodes, W, skip_col, has_skip, wb, lw, lb, eps, relu, out,
                  ag + H * C, red);
}

template <DType D>
__global__ void pool_kernel(const void* __restrict__ h_v, const int64_t* __restrict__ gp, int64_t F,
                            float* __restrict__ out) {
  using T = typename Storage<D>::type;
  const T* h = static_cast<const T*>(h_v);
  const int64_t g = blockIdx.x, b = gp[g], e = gp[g + 1];
  const float inv = e > b ? 1.f / (float)(e - b) : 0.f;
  for (int64_t f = threadIdx.x; f < F; f += blockDim.x) {
    float s = 0.f;
    for (int64_t i = b; i < e; ++i) s += Storage<D>::load(h, i * F + f);
    out[g * F + f] = s * inv;
  }
}

// Calls f(std::integral_constant<int, R>{}) for the R registers a lane needs for C channels
// (R * 32 >= C, R a power of 2 up to 32: C <= 1024), the template argument of the kernels
// that keep a row of channels in registers.
template <class F>
void with_lane_registers(int64_t C, F&& f) {
  if (C <= 32) f(std::integral_constant<int, 1>{});
  else if (C <= 64) f(std::integral_constant<int, 2>{});
  else if (C <= 128) f(std::integral_constant<int, 4>{});
  else if (C <= 256) f(std::integral_constant<int, 8>{});
  else if (C <= 512) f(std::integral_constant<int, 16>{});
  else f(std::integral_constant<int, 32>{});
}

// Threads of an epilogue block, the layer kernel's too (a warp a head there, so at most 8
// heads): the same count in both, so their block sums add in the same order and the results
// agree bit for bit; 256 threads leave ptxas 255 registers a thread for the attention's
// 3 x R per-lane values at C = 1024 (it uses 162-184 there, 48 at C = 128). Below 4 heads
// most of the block's warps would idle through the attention: the two kernels serve those.
constexpr unsigned kEpilogueThreads = 256;
constexpr int64_t kLayerMaxHeads = kEpilogueThreads / kWarp;
constexpr int64_t kLayerMinHeads = 4;

template <DType D, int R>
void launch_attend(const int64_t* indptr, const int64_t* src, const int64_t* eid, const void* nodes,
                   int64_t W, const void* e, int64_t ES, int64_t N, int64_t H, int64_t C,
                   float scale, float* agg, cudaStream_t stream) {
  const int64_t warps = N * H;
  const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  attend_kernel<D, R><<<(unsigned)blocks, kWarpsPerBlock * kWarp, 0, stream>>>(
      indptr, src, eid, nodes, W, e, ES, N, H, C, scale, agg);
}

}  // namespace

void graph_conv_attend_cuda_launch(const int64_t* indptr, const int64_t* src, const int64_t* eid,
                                   int dtype_code, const void* nodes, int64_t node_width,
                                   const void* e, int64_t e_stride, int64_t N, int64_t H,
                                   int64_t C, float scale, float* agg, cudaStream_t stream) {
  if (N == 0) return;
  const DType dt = static_cast<DType>(dtype_code);
  RASFAST_DISPATCH_DTYPE(dt, D, {
    with_lane_registers(C, [&](auto r) {
      launch_attend<D, decltype(r)::value>(indptr, src, eid, nodes, node_width, e, e_stride, N, H, C,
                                           scale, agg, stream);
    });
  })
  RASFAST_CUDA_CHECK(cudaGetLastError());
}

void graph_conv_attend_backward_cuda_launch(const int64_t* indptr, const int64_t* src,
                                            const int64_t* roe, const int64_t* rptr,
                                            const int64_t* rpos, const int64_t* dst,
                                            const float* nodes, int64_t node_width, const float* e,
                                            const float* dagg, int64_t N, int64_t H, int64_t C,
                                            float scale, float* d_nodes, int64_t d_width, float* de,
                                            float* dl, float* alpha, cudaStream_t stream) {
  if (N == 0) return;
  with_lane_registers(C, [&](auto r) {
    launch_attend_back<decltype(r)::value>(indptr, src, roe, rptr, rpos, dst, nodes, node_width, e,
                                           dagg, N, H, C, scale, d_nodes, d_width, de, dl, alpha,
                                           stream);
  });
  RASFAST_CUDA_CHECK(cudaGetLastError());
}

void graph_conv_epilogue_cuda_launch(const float* agg, int64_t N, int64_t H, int64_t C,
                                     bool concat, int dtype_code, const void* nodes,
                                     int64_t node_width, int64_t skip_col, bool has_skip,
                                     const float* w_beta, const float* ln_w, const float* ln_b,
                                     float eps, bool relu, void* out, cudaStream_t stream) {
  if (N == 0) return;
  const int64_t F = concat ? H * C : C;
  const size_t smem = (size_t)F * sizeof(float);
  const DType dt = static_cast<DType>(dtype_code);
  RASFAST_DISPATCH_DTYPE(dt, D, {
    if (smem > 48 * 1024)
      RASFAST_CUDA_CHECK(cudaFuncSetAttribute(epilogue_kernel<D>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    epilogue_kernel<D><<<(unsigned)N, kEpilogueThreads, smem, stream>>>(agg, H, C, concat, nodes, node_width,
                                                          skip_col, has_skip, w_beta, ln_w, ln_b,
                                                          eps, relu, out);
  })
  RASFAST_CUDA_CHECK(cudaGetLastError());
}

bool graph_conv_layer_fusable(int64_t H, int64_t C, bool concat) {
  const int64_t F = concat ? H * C : C;
  return H >= kLayerMinHeads && H <= kLayerMaxHeads && C >= 1 && C <= 1024 &&
         (H * C + F) * 4 <= 48 * 1024;
}

void graph_conv_layer_cuda_launch(const int64_t* indptr, const int64_t* src, const int64_t* eid,
                                  int dtype_code, const void* nodes, int64_t node_width,
                                  const void* e, int64_t e_stride, int64_t N, int64_t H, int64_t C,
                                  float scale, bool concat, int64_t skip_col, bool has_skip,
                                  const float* w_beta, const float* ln_w, const float* ln_b,
                                  float eps, bool relu, void* out, cudaStream_t stream) {
  if (N == 0) return;
  const int64_t F = concat ? H * C : C;
  const size_t smem = (size_t)(H * C + F) * sizeof(float);
  const unsigned threads = kEpilogueThreads;
  const DType dt = static_cast<DType>(dtype_code);
  RASFAST_DISPATCH_DTYPE(dt, D, {
    with_lane_registers(C, [&](auto r) {
      layer_kernel<D, decltype(r)::value><<<(unsigned)N, threads, smem, stream>>>(
          indptr, src, eid, nodes, node_width, e, e_stride, H, C, scale, concat, skip_col, has_skip,
          w_beta, ln_w, ln_b, eps, relu, out);
    });
  })
  RASFAST_CUDA_CHECK(cudaGetLastError());
}

void graph_conv_pool_cuda_launch(const void* h, int dtype_code, const int64_t* graph_ptr, int64_t G,
                                 int64_t F, float* out, cudaStream_t stream) {
  if (G == 0 || F == 0) return;
  const DType dt = static_cast<DType>(dtype_code);
  RASFAST_DISPATCH_DTYPE(dt, D, {
    pool_kernel<D><<<(unsigned)G, 256, 0, stream>>>(h, graph_ptr, F, out);
  })
  RASFAST_CUDA_CHECK(cudaGetLastError());
}

}  // namespace rasfast
