// 16-byte vector loads of rows and their float values, shared by the kernels that stream
// rows of a storage dtype (segment scoring, theme's gathered dense scores). A lane that
// issues several of these before using the first keeps several DRAM reads in flight: the
// rows' loads are the kernels' whole traffic (docs/gpu.md, "Row loads in flight").
#pragma once
#include <cstdint>

#include "common/dtype.h"

namespace rasfast {

struct alignas(16) Vec16 {
  uint32_t w[4];
};

__device__ __forceinline__ Vec16 load16(const void* p) { return *reinterpret_cast<const Vec16*>(p); }

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Elements of storage dtype S per 16-byte vector, and their float values.
template <DType S> struct Unpack;
template <> struct Unpack<DType::F32> {
  static constexpr int kElems = 4;
  static __device__ __forceinline__ void run(const Vec16& v, float* out) {
    for (int i = 0; i < 4; ++i) out[i] = bits_to_float(v.w[i]);
  }
};
template <> struct Unpack<DType::F16> {
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void run(const Vec16& v, float* out) {
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = half_bits_to_float((uint16_t)(v.w[i] & 0xffffu));
      out[2 * i + 1] = half_bits_to_float((uint16_t)(v.w[i] >> 16));
    }
  }
};
template <> struct Unpack<DType::BF16> {
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void run(const Vec16& v, float* out) {
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = bits_to_float(v.w[i] << 16);
      out[2 * i + 1] = bits_to_float(v.w[i] & 0xffff0000u);
    }
  }
};

// q . e over V = Unpack<S>::kElems elements: e from a row vector, q (float32) from memory in
// 16-byte loads (q must be 16-byte aligned).
template <DType S>
__device__ __forceinline__ float dot16(const Vec16& row, const float* q) {
  constexpr int V = Unpack<S>::kElems;
  float e[V];
  Unpack<S>::run(row, e);
  float acc = 0.f;
#pragma unroll
  for (int t = 0; t < V; t += 4) {
    float qv[4];
    Unpack<DType::F32>::run(load16(q + t), qv);
    acc += qv[0] * e[t] + qv[1] * e[t + 1] + qv[2] * e[t + 2] + qv[3] * e[t + 3];
  }
  return acc;
}

}  // namespace rasfast
