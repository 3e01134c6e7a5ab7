// Storage dtypes shared by all kernels and the float <-> ordered-key mapping used by
// every radix select. Host/device neutral (usable from .cpp and .cu).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define RASFAST_HD __host__ __device__ __forceinline__
#else
#define RASFAST_HD inline
#endif

namespace rasfast {

// Matches rasfast/_arrays.py DTYPE_CODES.
enum class DType : int { F32 = 0, F16 = 1, BF16 = 2 };

RASFAST_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

RASFAST_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

// IEEE half (binary16) bits -> float, exact (handles subnormals, inf, nan).
RASFAST_HD float half_bits_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return bits_to_float(bits);
}

// bfloat16 bits -> float is a shift.
RASFAST_HD float bf16_bits_to_float(uint16_t b) { return bits_to_float((uint32_t)b << 16); }

template <DType D> struct Storage;
template <> struct Storage<DType::F32> {
  using type = float;
  static RASFAST_HD float load(const float* p, int64_t i) { return p[i]; }
};
template <> struct Storage<DType::F16> {
  using type = uint16_t;
  static RASFAST_HD float load(const uint16_t* p, int64_t i) { return half_bits_to_float(p[i]); }
};
template <> struct Storage<DType::BF16> {
  using type = uint16_t;
  static RASFAST_HD float load(const uint16_t* p, int64_t i) { return bf16_bits_to_float(p[i]); }
};

// Order-preserving float -> uint32 map: a < b  <=>  key(a) < key(b) for non-NaN floats.
// -0.0 is canonicalised to +0.0 so that the two zeros tie (as they compare equal), and
// ties are broken by index like every other backend.
RASFAST_HD uint32_t float_to_key(float f) {
  uint32_t u = float_to_bits(f);
  if ((u << 1) == 0) u = 0;  // -0.0 -> +0.0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

RASFAST_HD float key_to_float(uint32_t k) {
  uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  return bits_to_float(u);
}

// Key for selection in the requested direction: smallest-first keys are ascending;
// for largest-first the key is inverted so the same "k smallest keys" code applies.
RASFAST_HD uint32_t select_key(float f, bool largest) {
  uint32_t k = float_to_key(f);
  return largest ? ~k : k;
}

// Dispatch a generic lambda on the runtime dtype: DISPATCH_DTYPE(dt, D, { ... use D ... })
#define RASFAST_DISPATCH_DTYPE(dt, D, ...)                           \
  switch (dt) {                                                      \
    case ::rasfast::DType::F32: {                                    \
      constexpr ::rasfast::DType D = ::rasfast::DType::F32;          \
      __VA_ARGS__ break;                                             \
    }                                                                \
    case ::rasfast::DType::F16: {                                    \
      constexpr ::rasfast::DType D = ::rasfast::DType::F16;          \
      __VA_ARGS__ break;                                             \
    }                                                                \
    case ::rasfast::DType::BF16: {                                   \
      constexpr ::rasfast::DType D = ::rasfast::DType::BF16;         \
      __VA_ARGS__ break;                                             \
    }                                                                \
  }

}  // namespace rasfast
