// Stand-in for the CUDA toolkit's cuda_runtime.h when the kernels are built for the CPU
// emulator (target rasfast._cuda_emu, see csrc/emu/runtime/cuemu.h). Found before any real
// toolkit header because csrc/emu/include comes first on the include path.
//
// Memory is host memory: "device pointers" are CPU pointers, streams are synchronous.
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "runtime/cuemu.h"

#define RASFAST_CUDA_EMU 1

// ---- qualifiers ------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#ifndef __restrict__
#define __restrict__ __restrict
#endif
// __shared__ and kernel<<<...>>> are rewritten by csrc/emu/rewrite.py before compilation;
// a declaration the rewriter missed fails to compile here instead of silently becoming a
// per-thread variable.
#define __shared__ __shared__was_not_rewritten_by_cuemu

// ---- builtin variables ----------------------------------------------------------------
#define threadIdx (::cuemu::view("threadIdx").thread_idx)
#define blockIdx (::cuemu::view("blockIdx").block_idx)
#define blockDim (::cuemu::view("blockDim").block_dim)
#define gridDim (::cuemu::view("gridDim").grid_dim)
constexpr int warpSize = 32;

// ---- barriers and warp collectives (each names its call site) --------------------------
#define __syncthreads() ::cuemu::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) ::cuemu::intr::SyncWarpAt{__FILE__, __LINE__}(__VA_ARGS__)
#define __shfl_sync(...) ::cuemu::intr::shfl(::cuemu::Coll::Shfl, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) ::cuemu::intr::shfl(::cuemu::Coll::ShflXor, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) ::cuemu::intr::shfl(::cuemu::Coll::ShflUp, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) ::cuemu::intr::shfl(::cuemu::Coll::ShflDown, __FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(mask, pred) \
  ((unsigned)::cuemu::warp_collective(::cuemu::Coll::Ballot, (mask), (pred) ? 1u : 0u, 0, 32, __FILE__, __LINE__))
#define __any_sync(mask, pred) \
  ((int)::cuemu::warp_collective(::cuemu::Coll::Any, (mask), (pred) ? 1u : 0u, 0, 32, __FILE__, __LINE__))
#define __all_sync(mask, pred) \
  ((int)::cuemu::warp_collective(::cuemu::Coll::All, (mask), (pred) ? 1u : 0u, 0, 32, __FILE__, __LINE__))
#define __match_any_sync(mask, value) \
  ((unsigned)::cuemu::warp_collective(::cuemu::Coll::MatchAny, (mask), ::cuemu::to_bits(value), 0, 32, __FILE__, __LINE__))
#define __threadfence() std::atomic_thread_fence(std::memory_order_seq_cst)
#define __threadfence_block() std::atomic_thread_fence(std::memory_order_seq_cst)

namespace cuemu {
namespace intr {
struct SyncWarpAt {  // __syncwarp() and __syncwarp(mask) with the call site
  const char* file;
  int line;
  void operator()(unsigned mask = 0xffffffffu) const { warp_collective(Coll::Sync, mask, 0, 0, 32, file, line); }
};
template <class T>
T shfl(Coll kind, const char* file, int line, unsigned mask, T var, int arg, int width = 32) {
  return from_bits<T>(warp_collective(kind, mask, to_bits(var), arg, width, file, line));
}
}  // namespace intr
}  // namespace cuemu

// ---- integer and float intrinsics --------------------------------------------------------
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline unsigned int __brev(unsigned int x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}
inline float __uint_as_float(unsigned int u) { return cuemu::from_bits<float>(u); }
inline unsigned int __float_as_uint(float f) { return (unsigned int)cuemu::to_bits(f); }
inline float __int_as_float(int i) { return cuemu::from_bits<float>((uint32_t)i); }
inline int __float_as_int(float f) { return (int)(uint32_t)cuemu::to_bits(f); }
inline double __longlong_as_double(long long i) { return cuemu::from_bits<double>((uint64_t)i); }
inline long long __double_as_longlong(double d) { return (long long)cuemu::to_bits(d); }
// Correctly rounded (round-to-nearest-even) single operations: what the _rn intrinsics
// promise, and what the emulator's -ffp-contract=off keeps from being fused.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
template <class T>
inline T __ldg(const T* p) { return *p; }
using std::isfinite;  // CUDA's device math has these unqualified
using std::isinf;
using std::isnan;

// CUDA's min/max accept mixed integer types (the device math API's overloads).
template <class A, class B, class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return (C)a < (C)b ? (C)a : (C)b;
}
template <class A, class B, class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return (C)a < (C)b ? (C)b : (C)a;
}

// ---- atomics (real atomics: blocks may run on several OS threads) ------------------------
namespace cuemu {
template <class T> struct same { using type = T; };  // the value's type follows the pointer's
}
template <class T>
inline T atomicAdd(T* p, typename cuemu::same<T>::type v) {
  if constexpr (std::is_floating_point<T>::value) {
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    T desired;
    do {
      desired = old + v;
    } while (!__atomic_compare_exchange(p, &old, &desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return old;
  } else {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
  }
}
template <class T>
inline T atomicSub(T* p, typename cuemu::same<T>::type v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
template <class T>
inline T atomicExch(T* p, typename cuemu::same<T>::type v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
template <class T>
inline T atomicCAS(T* p, typename cuemu::same<T>::type compare, typename cuemu::same<T>::type val) {
  __atomic_compare_exchange_n(p, &compare, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;  // the old value either way
}
template <class T>
inline T atomicMax(T* p, typename cuemu::same<T>::type v) {
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
template <class T>
inline T atomicMin(T* p, typename cuemu::same<T>::type v) {
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
template <class T>
inline T atomicOr(T* p, typename cuemu::same<T>::type v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <class T>
inline T atomicAnd(T* p, typename cuemu::same<T>::type v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }

// ---- host API ----------------------------------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorLaunchFailure = 719,
};
typedef cudaError_t cudaError;

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

// Memory pools (scratch_cuda.cpp's fallback pool): plain host allocations here.
struct cudaMemPoolEmu;
typedef cudaMemPoolEmu* cudaMemPool_t;
enum cudaMemAllocationType { cudaMemAllocationTypePinned = 1 };
enum cudaMemLocationType { cudaMemLocationTypeDevice = 1 };
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
struct cudaMemLocation {
  cudaMemLocationType type;
  int id;
};
struct cudaMemPoolProps {
  cudaMemAllocationType allocType;
  int handleTypes;
  cudaMemLocation location;
  void* win32SecurityAttributes;
  unsigned char reserved[64];
};

const char* cudaGetErrorString(cudaError_t err);
const char* cudaGetErrorName(cudaError_t err);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaRuntimeGetVersion(int* v);
cudaError_t cudaDriverGetVersion(int* v);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t s);
cudaError_t cudaFreeAsync(void* p, cudaStream_t s);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s = nullptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s = nullptr);
cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaMallocFromPoolAsync(void** p, size_t bytes, cudaMemPool_t pool, cudaStream_t s);

// Occupancy: the emulator has no register file; it answers 2 blocks per multiprocessor, so
// grids sized from it keep several blocks per row on its few multiprocessors.
template <class F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, F* fn, int block_size, size_t smem) {
  (void)fn;
  (void)smem;
  if (blocks == nullptr || block_size <= 0 || block_size > 1024) return cudaErrorInvalidValue;
  *blocks = 2;
  return cudaSuccess;
}

template <class F>
cudaError_t cudaFuncSetAttribute(F* fn, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  cuemu::set_max_dynamic_smem(reinterpret_cast<const void*>(fn), value);
  return cudaSuccess;
}

#ifndef INFINITY
#define INFINITY __builtin_inff()
#endif
