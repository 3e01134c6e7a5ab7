// Pass 1 of the theme kernels: one streaming pass over the corpus PPD matrix for a block
// of queries, writing an ordered uint32 key per (query, row): float_to_key(squared L2)
// for metric l2, the inverted key of the inner product for metric ip, so that "the K
// smallest keys" is the scope in both cases.
//
// The corpus is read once in tiles of kTileRows rows, converted to float32 into a
// padded, aligned buffer that stays in L1/L2, and multiplied with all queries there
// (||q||^2 + ||c||^2 - 2 q.c, float32 accumulation). Threads split the tiles.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "select/radix_select.h"
#include "theme/theme_simd.h"

namespace rasfast {
namespace theme {

constexpr int64_t kTileRows = 64;

// Float32 queries padded to [Bp, ld] (Bp a multiple of 4, ld of kPad), zero padding.
struct PaddedQueries {
  int64_t B = 0, Bp = 0, dim = 0, ld = 0;
  FloatBuf data;
  std::vector<float> norm;  // ||q_b||^2, computed like the corpus norms
};

inline PaddedQueries pad_queries(const float* q, int64_t B, int64_t dim) {
  PaddedQueries p;
  p.B = B;
  p.Bp = (B + 3) / 4 * 4;
  p.dim = dim;
  p.ld = padded(dim);
  p.data = aligned_floats(p.Bp * p.ld);
  p.norm.resize((size_t)B);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(q + b * dim, q + (b + 1) * dim, p.data.get() + b * p.ld);
    p.norm[(size_t)b] = simd().dot(p.data.get() + b * p.ld, p.data.get() + b * p.ld, dim);
  }
  return p;
}

// keys[b * N + i] for the queries of `qs`; returns false if any distance is not finite
// (NaN/inf in the corpus, or overflow).
template <DType D>
bool scan_keys(const PaddedQueries& qs, const typename Storage<D>::type* corpus, int64_t N,
               bool ip, uint32_t* keys) {
  const Simd& s = simd();
  const int64_t T = qs.dim, ld = qs.ld, Bp = qs.Bp, B = qs.B;
  const int64_t ntiles = (N + kTileRows - 1) / kTileRows;
  int bad = 0;
#pragma omp parallel reduction(| : bad)
  {
    FloatBuf tile = aligned_floats(kTileRows * ld);
    FloatBuf dots = aligned_floats(kTileRows * Bp);
    float cn[kTileRows];
#pragma omp for schedule(static)
    for (int64_t t = 0; t < ntiles; ++t) {
      const int64_t i0 = t * kTileRows;
      const int64_t nr = std::min(kTileRows, N - i0);
      for (int64_t r = 0; r < nr; ++r) {
        float* dst = tile.get() + r * ld;
        load_row<D>(corpus + (i0 + r) * T, dst, T);
        cn[r] = ip ? 0.f : s.dot(dst, dst, T);
      }
      // Rows nr..nr4 of the last tile hold stale finite data; their results are unused.
      const int64_t nr4 = (nr + 3) / 4 * 4;
      s.dot_tile(tile.get(), nr4, qs.data.get(), Bp, ld, dots.get());
      for (int64_t b = 0; b < B; ++b) {
        uint32_t* kb = keys + b * N + i0;
        const float qn = qs.norm[(size_t)b];
        for (int64_t r = 0; r < nr; ++r) {
          const float dot = dots[r * Bp + b];
          const float v = ip ? dot : qn + cn[r] - 2.f * dot;
          bad |= !std::isfinite(v);
          kb[r] = select_key(v, ip);
        }
      }
    }
  }
  return bad == 0;
}

// Membership rule of a query's scope: key < key_th, or key == key_th and i <= last_eq
// (the first K - n_less rows with the threshold key, by id). all: K >= N.
struct ScopeCut {
  uint32_t key = 0;
  int64_t last_eq = -1;
  bool all = false;
  bool contains(uint32_t k, int64_t i) const {
    return all || k < key || (k == key && i <= last_eq);
  }
};

inline ScopeCut scope_cut(const uint32_t* kb, int64_t N, int64_t K, int threads) {
  ScopeCut c;
  if (K >= N) { c.all = true; return c; }
  const Threshold th = find_threshold(N, K, [kb](int64_t i) { return kb[i]; }, threads);
  c.key = th.key;
  const int64_t n_eq = K - th.n_less;  // >= 1
  int64_t seen = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (kb[i] == th.key && ++seen == n_eq) { c.last_eq = i; break; }
  }
  return c;
}

// Cuts for queries [0, B) of a key block, in parallel over queries when there are enough.
inline std::vector<ScopeCut> scope_cuts(const uint32_t* keys, int64_t B, int64_t N, int64_t K) {
  std::vector<ScopeCut> cuts((size_t)B);
  const int threads = omp_get_max_threads();
  if (B >= threads) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t b = 0; b < B; ++b) cuts[(size_t)b] = scope_cut(keys + b * N, N, K, 1);
  } else {
    for (int64_t b = 0; b < B; ++b) cuts[(size_t)b] = scope_cut(keys + b * N, N, K, threads);
  }
  return cuts;
}

// Queries per pass-1 block so that the key matrix stays within budget (B x N uint32).
inline int64_t query_block(int64_t B, int64_t N) {
  constexpr int64_t kKeyBudget = int64_t(1) << 25;  // 128 MiB of keys
  return std::max<int64_t>(1, std::min<int64_t>(B, kKeyBudget / std::max<int64_t>(N, 1)));
}

}  // namespace theme
}  // namespace rasfast
