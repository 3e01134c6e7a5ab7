// Ordered integer keys straight from the storage bits, one per dtype, for the CPU select.
//
// float32 uses the 32-bit float_to_key map of common/dtype.h. float16 and bfloat16 are
// ordered directly on their 16 bits with the same sign-flip trick (monotone in the value,
// -0.0 folded onto +0.0), so they are never converted to float: the key space is 16 bits
// and one histogram pass finds the exact threshold. NaN is detected on the key: NaN keys
// lie strictly above the key of +inf or strictly below the key of -inf.
#pragma once
#include <cstdint>
#include <cstring>

#include "common/dtype.h"

namespace rasfast {
namespace select_detail {

template <DType D> struct KeyTraits;

template <> struct KeyTraits<DType::F32> {
  using Raw = uint32_t;
  static constexpr int kBits = 32;
  static constexpr uint32_t kMask = 0xffffffffu;
  static constexpr int kTopBits = 11;   // first histogram digit (2048 bins, L1-resident)
  static inline uint32_t key(uint32_t u) {
    u = (u << 1) == 0 ? 0u : u;                                  // -0.0 -> +0.0
    return u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);     // sign-flip order map
  }
  // The same map without a branch: vectorises in pure scans (the small-k filter), while
  // key() measured faster in the histogram/scatter loops of the radix path.
  static inline uint32_t key_vec(uint32_t u) {
    u &= 0u - (uint32_t)((u << 1) != 0);
    return u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);
  }
  // Inverse of key() (zero comes back as +0.0; callers re-read the sign from the row).
  static inline uint32_t bits(uint32_t key) { return (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key; }
  static constexpr uint32_t kZeroKey = 0x80000000u;
  static constexpr uint32_t kPosInf = 0x7f800000u ^ 0x80000000u;  // key(+inf)
  static constexpr uint32_t kNegInf = ~0xff800000u;               // key(-inf)
};

template <DType D> struct Key16 {
  using Raw = uint16_t;
  static constexpr int kBits = 16;
  static constexpr uint32_t kMask = 0xffffu;
  static constexpr int kTopBits = 16;   // the whole key: one pass gives the exact threshold
  static inline uint32_t key(uint32_t h) {  // branch-free, so that scans vectorise
    h &= 0u - (uint32_t)((h & 0x7fffu) != 0);       // -0.0 -> +0.0
    return h ^ (((h >> 15) * 0x7fffu) | 0x8000u);   // negative: ~h; positive: h | 0x8000
  }
  static inline uint32_t key_vec(uint32_t h) { return key(h); }
  static inline uint32_t bits(uint32_t key) { return (key & 0x8000u) ? (key & 0x7fffu) : (~key & 0xffffu); }
  static constexpr uint32_t kZeroKey = 0x8000u;
};
template <> struct KeyTraits<DType::F16> : Key16<DType::F16> {
  static constexpr uint32_t kPosInf = 0x7c00u | 0x8000u;
  static constexpr uint32_t kNegInf = ~0xfc00u & 0xffffu;
};
template <> struct KeyTraits<DType::BF16> : Key16<DType::BF16> {
  static constexpr uint32_t kPosInf = 0x7f80u | 0x8000u;
  static constexpr uint32_t kNegInf = ~0xff80u & 0xffffu;
};

// The selection key of element i of a row: smallest-first order, inverted for largest.
template <DType D>
inline uint32_t select_key_at(const typename KeyTraits<D>::Raw* row, int64_t i, uint32_t flip) {
  return KeyTraits<D>::key(row[i]) ^ flip;
}

template <DType D> inline bool is_nan_key(uint32_t unflipped_key) {
  return unflipped_key > KeyTraits<D>::kPosInf || unflipped_key < KeyTraits<D>::kNegInf;
}

}  // namespace select_detail
}  // namespace rasfast
