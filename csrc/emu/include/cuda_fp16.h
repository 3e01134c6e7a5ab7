// Stand-in for cuda_fp16.h (CPU emulator): __half as its IEEE binary16 bits, with exact
// round-to-nearest-even conversion from float, as the GPU's __float2half_rn.
#pragma once
#include <cstdint>
#include <cstring>

#include "cuda_runtime.h"

struct __half {
  uint16_t bits;
};
typedef __half half;

inline float __half2float(__half h) {
  const uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu, man = h.bits & 0x3ffu, out;
  if (exp == 0) {
    if (man == 0) {
      out = sign;
    } else {  // subnormal
      int e = -1;
      do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
      out = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    out = sign | 0x7f800000u | (man << 13);
  } else {
    out = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

inline __half __float2half_rn(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return __half{(uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u))};
  if (ax >= 0x477ff000u) return __half{(uint16_t)(sign | 0x7c00u)};  // rounds to inf
  if (ax < 0x38800000u) {  // half subnormal or zero: value / 2^-24, rounded to nearest even
    if (ax < 0x33000000u) return __half{sign};  // below half the smallest subnormal
    const int e = (int)(ax >> 23);
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const int shift = 126 - e;  // m * 2^(e-150) / 2^-24 = m >> (126 - e)
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half_ = 1u << (shift - 1);
    if (rem > half_ || (rem == half_ && (r & 1u))) ++r;
    return __half{(uint16_t)(sign | r)};
  }
  uint32_t r = ((ax >> 13) - ((127 - 15) << 10));
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return __half{(uint16_t)(sign | r)};
}
inline __half __float2half(float f) { return __float2half_rn(f); }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
