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
#include <string>
#include <vector>

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

// dot_tile(rows, nrows, qs, nq, ld, out): out[b * nrows + r] = <rows[r], qs[b]> over ld floats.
// rows/qs are 64-byte aligned with stride ld (multiple of kPad), nrows a multiple of 4,
// nq a multiple of 4. R rows x 4 queries of accumulators stay in registers.
using DotTileFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*);
// dot(a, b, n): <a, b> for unaligned a, b of n floats.
using DotFn = float (*)(const float*, const float*, int64_t);

#define RASFAST_THEME_KERNELS(SUFFIX, ATTR, W, R)                                              \
  RASFAST_THEME_DOT(SUFFIX, ATTR, W)                                                           \
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
            out[(b0 + j) * nrows + r0 + i] = s;                                                \
          }                                                                                    \
      }                                                                                        \
    }                                                                                          \
  }

#define RASFAST_THEME_DOT(SUFFIX, ATTR, W)                                                     \
  typedef float vec_##SUFFIX __attribute__((vector_size(4 * W)));                             \
  typedef float uvec_##SUFFIX __attribute__((vector_size(4 * W), aligned(4)));                \
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
RASFAST_THEME_DOT(avx512, __attribute__((target("avx512f"))), 16)

// AVX-512 dot_tile with a transposing reduction: the 16 accumulators of a 4-row x 4-query
// block (16 lanes each) are summed into ONE vector of 16 dot products by 4 levels of
// two-source shuffles + adds (15 adds) instead of 16 x 15 scalar adds. The addition tree
// is the same for every (row, query) lane, so results stay position-independent.
#define RF_SH(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
__attribute__((target("avx512f"))) static void dot_tile_avx512t(
    const float* __restrict rows, int64_t nrows, const float* __restrict qs, int64_t nq,
    int64_t ld, float* __restrict out) {
  typedef vec_avx512 V;
  for (int64_t r0 = 0; r0 < nrows; r0 += 4) {
    for (int64_t b0 = 0; b0 < nq; b0 += 4) {
      V x[16];
      _Pragma("GCC unroll 16") for (int m = 0; m < 16; ++m) x[m] = V{};
      const float* rp = rows + r0 * ld;
      const float* qp = qs + b0 * ld;
      for (int64_t t = 0; t < ld; t += 16) {
        V q0 = *(const V*)(qp + t), q1 = *(const V*)(qp + ld + t);
        V q2 = *(const V*)(qp + 2 * ld + t), q3 = *(const V*)(qp + 3 * ld + t);
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; ++i) {
          V c = *(const V*)(rp + i * ld + t);
          x[4 * i + 0] += c * q0;
          x[4 * i + 1] += c * q1;
          x[4 * i + 2] += c * q2;
          x[4 * i + 3] += c * q3;
        }
      }
      V y[8], z[4], u[2];
      _Pragma("GCC unroll 8") for (int p = 0; p < 8; ++p)
        y[p] = RF_SH(x[2 * p], x[2 * p + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
               RF_SH(x[2 * p], x[2 * p + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
      _Pragma("GCC unroll 4") for (int p = 0; p < 4; ++p)
        z[p] = RF_SH(y[2 * p], y[2 * p + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
               RF_SH(y[2 * p], y[2 * p + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
      _Pragma("GCC unroll 2") for (int p = 0; p < 2; ++p)
        u[p] = RF_SH(z[2 * p], z[2 * p + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
               RF_SH(z[2 * p], z[2 * p + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
      const V v = RF_SH(u[0], u[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
                  RF_SH(u[0], u[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
      // lane m = <row r0 + m / 4, query b0 + m % 4>
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) out[(b0 + j) * nrows + r0 + i] = v[4 * i + j];
    }
  }
}
#undef RF_SH
RASFAST_THEME_KERNELS(avx2, __attribute__((target("avx2,fma"))), 8, 2)
#endif
RASFAST_THEME_KERNELS(base, , 4, 2)

#undef RASFAST_THEME_KERNELS
#undef RASFAST_THEME_DOT

struct Simd {
  DotTileFn dot_tile;
  DotFn dot;
  const char* name;
};

// The variants this CPU can run, best first.
inline std::vector<Simd> simd_variants() {
  std::vector<Simd> v;
#if defined(RASFAST_THEME_X86)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) v.push_back({dot_tile_avx512t, dot_avx512, "avx512"});
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    v.push_back({dot_tile_avx2, dot_avx2, "avx2"});
#endif
  v.push_back({dot_tile_base, dot_base, "sse2"});
  return v;
}

// The active variant (the best one unless a test forced another with set_simd).
inline Simd& simd_state() {
  static Simd s = simd_variants().front();
  return s;
}
inline const Simd& simd() { return simd_state(); }

inline bool set_simd(const std::string& name) {
  for (const Simd& v : simd_variants())
    if (name == v.name) { simd_state() = v; return true; }
  return false;
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
