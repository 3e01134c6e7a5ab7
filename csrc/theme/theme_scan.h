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
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

// Visits the keys of the queries of `qs` tile by tile: sink(i0, nr, tk) gets rows
// [i0, i0 + nr) with tk[b * kTileRows + r] the key of (query b, row i0 + r). Each thread
// handles one contiguous range of tiles in order (schedule(static)). Row i of the scan is
// corpus row i * row_step (row_step > 1 scans a strided sample; a row's key does not depend
// on its place in a tile). Returns false if any distance is not finite (NaN/inf, overflow).
template <DType D, class Sink>
bool scan_tiles(const PaddedQueries& qs, const typename Storage<D>::type* corpus, int64_t N,
                bool ip, Sink&& sink, int64_t row_step = 1) {
  const Simd& s = simd();
  const int64_t T = qs.dim, ld = qs.ld, Bp = qs.Bp, B = qs.B;
  const int64_t ntiles = (N + kTileRows - 1) / kTileRows;
  int bad = 0;
#pragma omp parallel reduction(| : bad)
  {
    FloatBuf tile = aligned_floats(kTileRows * ld);
    FloatBuf dots = aligned_floats(kTileRows * Bp);
    std::vector<uint32_t> tk((size_t)(kTileRows * B));
    float cn[kTileRows];
#pragma omp for schedule(static)
    for (int64_t t = 0; t < ntiles; ++t) {
      const int64_t i0 = t * kTileRows;
      const int64_t nr = std::min(kTileRows, N - i0);
      for (int64_t r = 0; r < nr; ++r) {
        float* dst = tile.get() + r * ld;
        load_row<D>(corpus + (i0 + r) * row_step * T, dst, T);
        cn[r] = ip ? 0.f : s.dot(dst, dst, T);
      }
      // Rows nr..nr4 of the last tile hold stale finite data; their results are unused.
      const int64_t nr4 = (nr + 3) / 4 * 4;
      s.dot_tile(tile.get(), nr4, qs.data.get(), Bp, ld, dots.get());
      // Keys of this tile, query by query (contiguous, vectorisable). v - v is NaN
      // exactly when v is NaN or inf, so `chk` flags a non-finite distance.
      float chk = 0.f;
      for (int64_t b = 0; b < B; ++b) {
        uint32_t* kb = tk.data() + b * kTileRows;
        const float* db = dots.get() + b * nr4;
        const float qn = qs.norm[(size_t)b];
        if (ip) {
#pragma omp simd reduction(+ : chk)
          for (int64_t r = 0; r < nr; ++r) {
            chk += db[r] - db[r];
            kb[r] = ~float_to_key(db[r]);
          }
        } else {
#pragma omp simd reduction(+ : chk)
          for (int64_t r = 0; r < nr; ++r) {
            const float v = qn + cn[r] - 2.f * db[r];
            chk += v - v;
            kb[r] = float_to_key(v);
          }
        }
      }
      bad |= chk != 0.f;
      sink(i0, nr, tk.data());
    }
  }
  return bad == 0;
}

// keys[b * N + i] for the queries of `qs`; returns false if any distance is not finite.
template <DType D>
bool scan_keys(const PaddedQueries& qs, const typename Storage<D>::type* corpus, int64_t N,
               bool ip, uint32_t* keys) {
  const int64_t B = qs.B;
  return scan_tiles<D>(qs, corpus, N, ip, [=](int64_t i0, int64_t nr, const uint32_t* tk) {
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(keys + b * N + i0, tk + b * kTileRows, (size_t)nr * sizeof(uint32_t));
  });
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

// Exact cut by radix select (find_threshold) plus a scan for the last tied row.
inline ScopeCut scope_cut_radix(const uint32_t* kb, int64_t N, int64_t K, int threads) {
  ScopeCut c;
  const Threshold th = find_threshold(N, K, [kb](int64_t i) { return kb[i]; }, threads);
  c.key = th.key;
  const int64_t n_eq = K - th.n_less;  // >= 1
  int64_t seen = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (kb[i] == th.key && ++seen == n_eq) { c.last_eq = i; break; }
  }
  return c;
}

// A strided sample of kSample keys brackets the K-th key of N: [lo, hi] are the sample
// keys of rank K/N * kSample -+ (4 standard deviations + 16). Used when N >= kMinSampledN.
constexpr int64_t kSample = 16384;
constexpr int64_t kMinSampledN = 8 * kSample;
inline int64_t sample_step(int64_t N) { return N / kSample; }

struct Bracket {
  uint32_t lo = 0, hi = UINT32_MAX;
  bool inside(uint32_t k) const { return (uint32_t)(k - lo) <= (uint32_t)(hi - lo); }
};

inline Bracket bracket_from_sample(std::vector<uint32_t>& samp, int64_t N, int64_t K) {
  Bracket br;
  const int64_t S = (int64_t)samp.size();
  const double p = (double)K / (double)N;
  const int64_t r = (int64_t)(p * S);
  const int64_t margin = (int64_t)(4.0 * std::sqrt(S * p * (1.0 - p))) + 16;
  if (r - margin > 0) {
    std::nth_element(samp.begin(), samp.begin() + (r - margin), samp.end());
    br.lo = samp[(size_t)(r - margin)];
  }
  if (r + margin < S) {
    std::nth_element(samp.begin(), samp.begin() + (r + margin), samp.end());
    br.hi = samp[(size_t)(r + margin)];
  }
  return br;
}

// Keys inside a bracket, in id order, and the count of keys below it.
struct Candidates {
  int64_t n_below = 0;
  std::vector<uint32_t> key;
  std::vector<int64_t> id;
};

// The cut from the candidates, or false when the K-th key is outside the bracket.
inline bool cut_from_candidates(const Candidates& cd, int64_t K, ScopeCut* cut) {
  const int64_t m = (int64_t)cd.key.size(), n_below = cd.n_below;
  if (!(n_below < K && K <= n_below + m)) return false;
  std::vector<uint32_t> sel(cd.key);
  const int64_t want = K - n_below;  // 1-based rank inside the candidates
  std::nth_element(sel.begin(), sel.begin() + (want - 1), sel.end());
  ScopeCut c;
  c.key = sel[(size_t)(want - 1)];
  int64_t n_less = n_below;
  for (uint32_t k : cd.key) n_less += k < c.key;
  const int64_t n_eq = K - n_less;  // >= 1
  int64_t seen = 0;
  for (int64_t j = 0; j < m; ++j) {
    if (cd.key[(size_t)j] == c.key && ++seen == n_eq) { c.last_eq = cd.id[(size_t)j]; break; }
  }
  *cut = c;
  return true;
}

// The cut in one pass over the keys: a strided sample brackets the K-th key; one pass
// counts the keys below the bracket and collects those inside it (vectorised test per
// block of 256 keys); the K-th key and the last tied id are then found among these few
// candidates. Exact: when the bracket misses (unlucky sample), the radix path runs.
inline ScopeCut scope_cut(const uint32_t* kb, int64_t N, int64_t K, int threads) {
  ScopeCut c;
  if (K >= N) { c.all = true; return c; }
  if (N < kMinSampledN) return scope_cut_radix(kb, N, K, threads);
  const int64_t step = sample_step(N);
  std::vector<uint32_t> samp((size_t)kSample);
  for (int64_t j = 0; j < kSample; ++j) samp[(size_t)j] = kb[j * step];
  const Bracket br = bracket_from_sample(samp, N, K);
  Candidates cd;
  cd.key.reserve(4096);
  cd.id.reserve(4096);
  constexpr int64_t kBlk = 256;
  for (int64_t i0 = 0; i0 < N; i0 += kBlk) {
    const int64_t i1 = std::min(N, i0 + kBlk);
    int64_t below = 0, inside = 0;
#pragma omp simd reduction(+ : below, inside)
    for (int64_t i = i0; i < i1; ++i) {
      below += kb[i] < br.lo;
      inside += br.inside(kb[i]);
    }
    cd.n_below += below;
    if (inside) {
      for (int64_t i = i0; i < i1; ++i) {
        if (br.inside(kb[i])) { cd.key.push_back(kb[i]); cd.id.push_back(i); }
      }
    }
  }
  if (!cut_from_candidates(cd, K, &c)) return scope_cut_radix(kb, N, K, threads);
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

// The [B, N] key matrix (64 MiB at B=16, N=1M). A large one is 2 MiB-aligned and advised to
// use transparent huge pages: with 4 KiB pages its first touch costs ~16k page faults per
// call. A small one (a question's few thousand rows) is not: rounded up to a huge page, the
// 8 KB of keys of 1 query x 2,000 rows cost the kernel zeroing a whole 2 MiB page on every
// call, ~60 us of an ~80 us call at 8 rows (perf: clear_page_erms under the first write).
struct KeyMatrix {
  static constexpr size_t kHuge = size_t(2) << 20;
  uint32_t* p = nullptr;
  explicit KeyMatrix(int64_t n) {
    const size_t want = (size_t)(n > 0 ? n : 1) * sizeof(uint32_t);
    if (want < 2 * kHuge) {
      p = static_cast<uint32_t*>(std::aligned_alloc(64, (want + 63) / 64 * 64));
      if (!p) throw std::bad_alloc();
      return;
    }
    const size_t bytes = (want + kHuge - 1) / kHuge * kHuge;
    p = static_cast<uint32_t*>(std::aligned_alloc(kHuge, bytes));
    if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);  // advisory; ignored where THP is off
#endif
  }
  ~KeyMatrix() { std::free(p); }
  KeyMatrix(const KeyMatrix&) = delete;
  KeyMatrix& operator=(const KeyMatrix&) = delete;
  uint32_t* get() const { return p; }
};

// Queries per pass-1 block so that the key matrix stays within budget (B x N uint32).
inline int64_t query_block(int64_t B, int64_t N) {
  constexpr int64_t kKeyBudget = int64_t(1) << 25;  // 128 MiB of keys
  return std::max<int64_t>(1, std::min<int64_t>(B, kKeyBudget / std::max<int64_t>(N, 1)));
}

}  // namespace theme
}  // namespace rasfast
