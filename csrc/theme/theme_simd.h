// SIMD building blocks of the theme kernels, compiled three times (AVX-512, AVX2+FMA,
// baseline SSE2) with GCC target attributes and picked at run time, because the build
// uses no -march flag (one wheel for every x86-64 CPU).
//
// Every routine computes a given (row, query) value with the same instruction sequence
// wherever the row sits in a tile, so identical corpus rows get bit-identical distances
// and ties are resolved by id exactly like the reference's stable sort.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RASFAST_THEME_X86 1
#endif

#include "common/dtype.h"

namespace rasfast {
namespace theme {

// Padded row stride (floats) of tiles and query matrices: a multiple of the widest vector.
constexpr int64_t kPad = 16;
inline int64_t padded(int64_t n) { return (n + kPad - 1) / kPad * kPad; }

// 64-byte aligned float buffer, zero-initialised.
struct AlignedFree { void operator()(float* p) const { std::free(p); } };
using FloatBuf = std::unique_ptr<float[], AlignedFree>;
inline FloatBuf aligned_floats(int64_t n) {
  size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) / 64 * 64;
  float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return FloatBuf(p);
}

// dot_tile(rows, nrows, qs, nq, ld, out): out[r * nq + b] = <rows[r], qs[b]> over ld floats.
// rows/qs are 64-byte aligned with stride ld (multiple of kPad), nrows a multiple of 4,
// nq a multiple of 4. R rows x 4 queries of accumulators stay in registers.
using DotTileFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*);
// dot(a, b, n): <a, b> for unaligned a, b of n floats.
using DotFn = float (*)(const float*, const float*, int64_t);

#define RASFAST_THEME_KERNELS(SUFFIX, ATTR, W, R)                                              \
  typedef float vec_##SUFFIX __attribute__((vector_size(4 * W)));                             \
  typedef float uvec_##SUFFIX __attribute__((vector_size(4 * W), aligned(4)));                \
  ATTR static void dot_tile_##SUFFIX(const float* __restrict rows, int64_t nrows,              \
                                     const float* __restrict qs, int64_t nq, int64_t ld,       \
                                     float* __restrict out) {                                  \
    typedef vec_##SUFFIX V;                                                                    \
    for (int64_t r0 = 0; r0 < nrows; r0 += R) {                                                \
      for (int64_t b0 = 0; b0 < nq; b0 += 4) {                                                 \
        V acc[R][4];                                                                           \
        _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i)                                    \
          _Pragma("GCC unroll 4") for (int j = 0; j < 4; ++j) acc[i][j] = V{};                 \
        const float* rp = rows + r0 * ld;                                                      \
        const float* qp = qs + b0 * ld;                                                        \
        for (int64_t t = 0; t < ld; t += W) {                                                  \
          V q0 = *(const V*)(qp + t), q1 = *(const V*)(qp + ld + t);                           \
          V q2 = *(const V*)(qp + 2 * ld + t), q3 = *(const V*)(qp + 3 * ld + t);              \
          _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i) {                                \
            V c = *(const V*)(rp + i * ld + t);                                                \
            acc[i][0] += c * q0;                                                               \
            acc[i][1] += c * q1;                                                               \
            acc[i][2] += c * q2;                                                               \
            acc[i][3] += c * q3;                                                               \
          }                                                                                    \
        }                                                                                      \
        for (int i = 0; i < R; ++i)                                                            \
          for (int j = 0; j < 4; ++j) {                                                        \
            float s = 0.f;                                                                     \
            for (int l = 0; l < W; ++l) s += acc[i][j][l];                                     \
            out[(r0 + i) * nq + b0 + j] = s;                                                   \
          }                                                                                    \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
  ATTR static float dot_##SUFFIX(const float* __restrict a, const float* __restrict b,         \
                                 int64_t n) {                                                  \
    typedef uvec_##SUFFIX U;                                                                   \
    typedef vec_##SUFFIX V;                                                                    \
    V acc0 = V{}, acc1 = V{};                                                                  \
    int64_t t = 0;                                                                             \
    for (; t + 2 * W <= n; t += 2 * W) {                                                       \
      acc0 += *(const U*)(a + t) * *(const U*)(b + t);                                         \
      acc1 += *(const U*)(a + t + W) * *(const U*)(b + t + W);                                 \
    }                                                                                          \
    for (; t + W <= n; t += W) acc0 += *(const U*)(a + t) * *(const U*)(b + t);                \
    acc0 += acc1;                                                                              \
    float s = 0.f;                                                                             \
    for (int l = 0; l < W; ++l) s += acc0[l];                                                  \
    for (; t < n; ++t) s += a[t] * b[t];                                                       \
    return s;                                                                                  \
  }

#if defined(RASFAST_THEME_X86)
RASFAST_THEME_KERNELS(avx512, __attribute__((target("avx512f"))), 16, 4)
RASFAST_THEME_KERNELS(avx2, __attribute__((target("avx2,fma"))), 8, 2)
#endif
RASFAST_THEME_KERNELS(base, , 4, 2)

#undef RASFAST_THEME_KERNELS

struct Simd {
  DotTileFn dot_tile;
  DotFn dot;
  const char* name;
};

inline const Simd& simd() {
  static const Simd s = []() -> Simd {
#if defined(RASFAST_THEME_X86)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return {dot_tile_avx512, dot_avx512, "avx512"};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return {dot_tile_avx2, dot_avx2, "avx2"};
#endif
    return {dot_tile_base, dot_base, "sse2"};
  }();
  return s;
}

// ---- storage -> float32 conversion of whole rows (into padded, aligned buffers) --------
#if defined(RASFAST_THEME_X86)
__attribute__((target("avx2,f16c"))) static void half_to_float_f16c(const uint16_t* src,
                                                                     float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(src + i))));
  for (; i < n; ++i) dst[i] = half_bits_to_float(src[i]);
}
#endif

inline bool has_f16c() {
#if defined(RASFAST_THEME_X86)
  static const bool ok = (__builtin_cpu_init(), __builtin_cpu_supports("f16c") &&
                                                    __builtin_cpu_supports("avx2"));
  return ok;
#else
  return false;
#endif
}

// dst[0:n] = float(src[0:n]); the caller keeps dst's padding zero.
template <DType D>
inline void load_row(const typename Storage<D>::type* src, float* dst, int64_t n) {
  if constexpr (D == DType::F32) {
    std::memcpy(dst, src, sizeof(float) * (size_t)n);
  } else if constexpr (D == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(src[i]);
  } else {
#if defined(RASFAST_THEME_X86)
    if (has_f16c()) { half_to_float_f16c(src, dst, n); return; }
#endif
    for (int64_t i = 0; i < n; ++i) dst[i] = half_bits_to_float(src[i]);
  }
}

}  // namespace theme
}  // namespace rasfast
