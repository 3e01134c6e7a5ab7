// CPU select_k of one row, two algorithms, both exact with ties broken by lower index.
//
// Results are built as 64-bit composites  (key << 32) | index , so that ordering the
// composites orders by (key, index): the tie rule falls out of plain integer order.
// (Rows must have fewer than 2^32 elements; select_cpu.cpp falls back otherwise.)
//
// * filter path (small k): one streaming pass keeps a buffer of candidates with key below
//   the current k-th best key; the test runs block-wise over 64 elements with
//   branch-free, vectorisable code, and the buffer is cut back to k (nth_element) when full.
//   An adversarial order (e.g. a descending row for smallest-k) admits too many candidates;
//   then the path gives up and the radix path runs instead, so the worst case stays O(N).
// * radix path (any k): pass 1 histograms the top digit of the key (11 bits of a float32
//   key; all 16 bits of a float16/bfloat16 key), which locates the bucket b holding the
//   k-th key. Pass 2 scatters every element of a bucket below b straight to its final
//   bucket range in the output (a counting sort by the top digit, for free) and the
//   elements of bucket b into a candidate list. The remaining low key bits are sorted per
//   bucket (stable LSD radix; elements arrive in index order), and the candidates give
//   the last k - n_less places. Two passes over the row in all.
// Both run on `threads` OpenMP threads over contiguous chunks of the row (for long rows
// when there are fewer rows than threads); chunks keep index order, so ties stay exact.
#pragma once
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "select/select_keys.h"

namespace rasfast {
namespace select_detail {

inline uint64_t compose(uint32_t key, int64_t i) { return ((uint64_t)key << 32) | (uint64_t)i; }

inline void chunk_bounds(int64_t n, int t, int threads, int64_t* lo, int64_t* hi) {
  *lo = n * t / threads;
  *hi = n * (t + 1) / threads;
}

// Sorts composites whose keys share their top bits (one bucket), by (key, index).
// Large buckets: stable LSD radix over the low `rest_bits` key bits, correct because the
// input is in index order; small ones: std::sort on the full composite.
inline void sort_bucket(uint64_t* a, size_t m, int rest_bits, std::vector<uint64_t>& tmp) {
  if (m < 2 || rest_bits == 0) return;
  if (m <= 2048) {
    std::sort(a, a + m);
    return;
  }
  if (tmp.size() < m) tmp.resize(m);
  uint64_t* src = a;
  uint64_t* dst = tmp.data();
  uint32_t count[2048];
  for (int shift = 32; shift < 32 + rest_bits; shift += 11) {
    const int bits = std::min(11, 32 + rest_bits - shift);
    const uint32_t nb = 1u << bits, mask = nb - 1;
    std::memset(count, 0, sizeof(uint32_t) * nb);
    for (size_t i = 0; i < m; ++i) ++count[(src[i] >> shift) & mask];
    uint32_t sum = 0;
    bool trivial = false;
    for (uint32_t d = 0; d < nb; ++d) {
      if (count[d] == m) trivial = true;
      const uint32_t c = count[d];
      count[d] = sum;
      sum += c;
    }
    if (trivial) continue;  // every element has this digit: nothing to move
    for (size_t i = 0; i < m; ++i) dst[count[(src[i] >> shift) & mask]++] = src[i];
    std::swap(src, dst);
  }
  if (src != a) std::memcpy(a, src, m * sizeof(uint64_t));
}

// Writes the `need` smallest composites of c[0..m) to dst, in (key, index) order when
// `sorted`. c holds one bucket: all keys share the bits above their low `rest_bits`, and
// c is in index order. A big bucket (data in a narrow value range) is narrowed by further
// 11-bit digits, MSD-style, instead of being sorted or partitioned whole: only the
// elements below the threshold sub-bucket are (bucket-)sorted. c is reused as scratch.
inline void take_smallest(uint64_t* c, size_t m, size_t need, int rest_bits, bool sorted,
                          uint64_t* dst, std::vector<uint64_t>& tmp) {
  while (true) {
    if (m <= 16384 || rest_bits == 0 || need == m) {
      if (sorted) sort_bucket(c, m, rest_bits, tmp);
      else if (rest_bits > 0 && need < m) std::nth_element(c, c + (need - 1), c + m);
      std::memcpy(dst, c, need * sizeof(uint64_t));  // rest_bits == 0: all tie, index order
      return;
    }
    const int bits = std::min(11, rest_bits);
    const int shift = 32 + rest_bits - bits;
    const uint32_t nb = 1u << bits, mask = nb - 1;
    std::vector<size_t> count(nb, 0);
    for (size_t i = 0; i < m; ++i) ++count[(c[i] >> shift) & mask];
    size_t cum = 0;
    uint32_t b = 0;
    for (; b < nb; ++b) {
      if (cum + count[b] >= need) break;
      cum += count[b];
    }
    // Sub-buckets below b go to dst (by digit when sorted); sub-bucket b moves to the front
    // of c, in index order (w <= i, so the in-place compaction is safe).
    std::vector<size_t> off(b + 1, 0);
    for (uint32_t d = 0; d < b; ++d) off[d + 1] = off[d] + count[d];
    size_t w = 0, wl = 0;
    for (size_t i = 0; i < m; ++i) {
      const uint64_t ci = c[i];
      const uint32_t d = (uint32_t)(ci >> shift) & mask;
      if (d < b) dst[sorted ? off[d]++ : wl++] = ci;
      else if (d == b) c[w++] = ci;
    }
    if (sorted) {
      size_t at = 0;
      for (uint32_t d = 0; d < b; ++d) {
        sort_bucket(dst + at, count[d], rest_bits - bits, tmp);
        at += count[d];
      }
    }
    dst += cum;
    need -= cum;
    m = count[b];
    rest_bits -= bits;
  }
}

// Writes indices (and raw values, when vals != nullptr) of composites c[lo..hi) to out.
// c may alias out (composites are read before the slot is overwritten). Values are
// decoded from the key, not gathered from the row (a random read per value); only a
// zero is re-read, to keep the sign of -0.0.
template <DType D>
inline void finalize(const uint64_t* c, int64_t lo, int64_t hi, uint32_t flip,
                     const typename KeyTraits<D>::Raw* row, int64_t* out,
                     typename KeyTraits<D>::Raw* vals) {
  using KT = KeyTraits<D>;
  using Raw = typename KT::Raw;
  for (int64_t i = lo; i < hi; ++i) {
    const uint64_t ci = c[i];  // read before out[i] (which may be c[i]) is written
    const int64_t idx = (int64_t)(ci & 0xffffffffu);
    out[i] = idx;
    if (vals) {
      const uint32_t key = (uint32_t)(ci >> 32) ^ flip;
      vals[i] = key == KT::kZeroKey ? row[idx] : (Raw)KT::bits(key);
    }
  }
}

// ---- filter path --------------------------------------------------------------------

// Keeps in `buf` the (at most) k smallest composites of row[lo, hi). Returns false when
// it admitted more than `budget` candidates (the caller then uses the radix path).
template <DType D>
bool filter_chunk(const typename KeyTraits<D>::Raw* row, int64_t lo, int64_t hi, int64_t k,
                  uint32_t flip, int64_t budget, std::vector<uint64_t>& buf, bool* nan) {
  using KT = KeyTraits<D>;
  const size_t cap = (size_t)std::max<int64_t>(2 * k, k + 256);
  buf.clear();
  buf.reserve(cap);
  int64_t i = lo;
  bool bad = false;
  // Fill: the first `cap` elements all enter.
  for (; i < hi && buf.size() < cap; ++i) {
    const uint32_t ku = KT::key(row[i]);
    bad |= is_nan_key<D>(ku);
    buf.push_back(compose(ku ^ flip, i));
  }
  uint32_t tau = 0;  // admit key < tau
  bool open = true;  // false once tau == 0: nothing can enter any more
  auto cut = [&]() {
    if ((int64_t)buf.size() > k) {
      std::nth_element(buf.begin(), buf.begin() + (k - 1), buf.end());
      buf.resize((size_t)k);
    }
    tau = (uint32_t)(*std::max_element(buf.begin(), buf.end()) >> 32);
    open = tau != 0;
  };
  if (i < hi) cut();
  int64_t admitted = 0;
  while (i < hi) {
    const int64_t e = std::min(i + 64, hi);
    uint32_t any = 0, anynan = 0;
    for (int64_t j = i; j < e; ++j) {  // branch-free: vectorises
      const uint32_t ku = KT::key_vec(row[j]);
      any |= (uint32_t)((ku ^ flip) < tau);
      anynan |= (uint32_t)(ku > KT::kPosInf) | (uint32_t)(ku < KT::kNegInf);
    }
    bad |= anynan != 0;
    if (any && open) {
      for (int64_t j = i; j < e; ++j) {
        const uint32_t kk = KT::key(row[j]) ^ flip;
        if (kk < tau) {
          buf.push_back(compose(kk, j));
          if (buf.size() >= cap) {
            admitted += (int64_t)(cap - (size_t)k);
            if (admitted > budget) { *nan |= bad; return false; }
            cut();
          }
        }
      }
    }
    i = e;
  }
  if ((int64_t)buf.size() > k) {
    std::nth_element(buf.begin(), buf.begin() + (k - 1), buf.end());
    buf.resize((size_t)k);
  }
  *nan |= bad;
  return true;
}

// ---- radix path ---------------------------------------------------------------------

struct RadixScratch {
  std::vector<uint32_t> hist;     // [threads][bins]
  std::vector<int64_t> offset;    // [threads][bins] bucket write cursors (sorted output)
  std::vector<uint64_t> less;     // composites of buckets below b, per-thread regions
  std::vector<uint64_t> cand;     // composites of the threshold bucket b, per-thread regions
  std::vector<uint64_t> tmp;      // sort buffer
};

// Histogram of the top key digit of row[lo, hi) into h (kBins counters); true if NaN seen.
template <DType D>
bool top_histogram(const typename KeyTraits<D>::Raw* row, int64_t lo, int64_t hi, uint32_t flip,
                   uint32_t* h) {
  using KT = KeyTraits<D>;
  constexpr int kRest = KT::kBits - KT::kTopBits;
  constexpr uint32_t kBins = 1u << KT::kTopBits;
  uint32_t anynan = 0;
  auto nan_of = [](uint32_t ku) {
    return (uint32_t)(ku > KT::kPosInf) | (uint32_t)(ku < KT::kNegInf);
  };
  if constexpr (kBins <= 2048) {
    // Four interleaved sub-histograms: clustered data hits the same bin again and again,
    // and a single histogram would serialise on store-to-load forwarding.
    uint32_t sub[4][kBins];
    std::memset(sub, 0, sizeof(sub));
    int64_t i = lo;
    for (; i + 4 <= hi; i += 4) {
      const uint32_t k0 = KT::key(row[i]), k1 = KT::key(row[i + 1]);
      const uint32_t k2 = KT::key(row[i + 2]), k3 = KT::key(row[i + 3]);
      anynan |= nan_of(k0) | nan_of(k1) | nan_of(k2) | nan_of(k3);
      ++sub[0][(k0 ^ flip) >> kRest];
      ++sub[1][(k1 ^ flip) >> kRest];
      ++sub[2][(k2 ^ flip) >> kRest];
      ++sub[3][(k3 ^ flip) >> kRest];
    }
    for (; i < hi; ++i) {
      const uint32_t ku = KT::key(row[i]);
      anynan |= nan_of(ku);
      ++sub[0][(ku ^ flip) >> kRest];
    }
    for (uint32_t d = 0; d < kBins; ++d) h[d] = sub[0][d] + sub[1][d] + sub[2][d] + sub[3][d];
  } else {
    for (int64_t i = lo; i < hi; ++i) {
      const uint32_t ku = KT::key(row[i]);
      anynan |= nan_of(ku);
      ++h[(ku ^ flip) >> kRest];
    }
  }
  return anynan != 0;
}

// Full radix select of one row into out[0..k) (as composites first, then indices).
// When the threshold bucket of the top digit holds a large share of the row (values in a
// narrow range, e.g. distances), a second histogram pass over the row splits that bucket
// by the next 11 bits before anything is compacted, so the candidate list stays small.
template <DType D>
void radix_row(const typename KeyTraits<D>::Raw* row, int64_t n, int64_t k, uint32_t flip,
               bool sorted, int threads, int64_t* out, typename KeyTraits<D>::Raw* vals,
               RadixScratch& s, bool* nan) {
  using KT = KeyTraits<D>;
  constexpr int kRest = KT::kBits - KT::kTopBits;
  constexpr uint32_t kBins = 1u << KT::kTopBits;
  constexpr int kBits2 = 11;  // second-level digit (only when kRest >= kBits2)
  constexpr uint32_t kBins2 = 1u << kBits2;
  const int T = threads;
  s.hist.assign((size_t)T * kBins, 0);
  if (sorted) s.offset.resize((size_t)T * kBins);
  uint64_t* comp = reinterpret_cast<uint64_t*>(out);  // out doubles as composite storage
  std::vector<int64_t> less_at(T + 1, 0), cand_at(T + 1, 0);  // per-thread region starts
  std::vector<int64_t> less_n(T, 0), cand_n(T, 0);
  std::vector<uint32_t> hist2;                                  // [threads][kBins2]
  bool bad = false, two = false;
  uint32_t b = 0, b2 = 0;
  int64_t n_less = 0, n_b = 0;
  int lvl_shift = kRest;   // keys are classified by kk >> lvl_shift against `cut`
  uint32_t cut = 0;
#pragma omp parallel num_threads(T) if (T > 1) reduction(|| : bad)
  {
    const int t = omp_get_thread_num();
    int64_t lo, hi;
    chunk_bounds(n, t, T, &lo, &hi);
    uint32_t* h = s.hist.data() + (size_t)t * kBins;
    bad = top_histogram<D>(row, lo, hi, flip, h) || bad;
#pragma omp barrier
#pragma omp single
    {
      // Bucket b holds the k-th key; n_less keys lie in buckets below it.
      int64_t cum = 0;
      for (b = 0; b < kBins; ++b) {
        int64_t c = 0;
        for (int u = 0; u < T; ++u) c += s.hist[(size_t)u * kBins + b];
        if (cum + c >= k) { n_b = c; break; }
        cum += c;
      }
      n_less = cum;
      cut = b;
      two = kRest >= kBits2 && n_b > std::max<int64_t>(n / 8, 65536);
      if (two) hist2.assign((size_t)T * kBins2, 0);
    }
    if (two) {
      uint32_t* h2 = hist2.data() + (size_t)t * kBins2;
      for (int64_t i = lo; i < hi; ++i) {
        const uint32_t kk = KT::key(row[i]) ^ flip;
        if ((kk >> kRest) == b) ++h2[(kk >> (kRest - kBits2)) & (kBins2 - 1)];
      }
#pragma omp barrier
#pragma omp single
      {
        int64_t cum = 0;
        for (b2 = 0; b2 < kBins2; ++b2) {
          int64_t c = 0;
          for (int u = 0; u < T; ++u) c += hist2[(size_t)u * kBins2 + b2];
          if (n_less + cum + c >= k) { n_b = c; break; }
          cum += c;
        }
        n_less += cum;
        lvl_shift = kRest - kBits2;
        cut = (b << kBits2) | b2;
      }
    }
#pragma omp single
    {
      // Per-thread regions of the two lists, each with one slack slot (see below).
      for (int u = 0; u < T; ++u) {
        int64_t c = 0, cb = 0;
        for (uint32_t d = 0; d < b; ++d) c += s.hist[(size_t)u * kBins + d];
        if (two) {
          for (uint32_t d2 = 0; d2 < b2; ++d2) cb += hist2[(size_t)u * kBins2 + d2];
          cand_n[u] = hist2[(size_t)u * kBins2 + b2];
        } else {
          cand_n[u] = s.hist[(size_t)u * kBins + b];
        }
        less_n[u] = c + cb;
        less_at[u + 1] = less_at[u] + less_n[u] + 1;
        cand_at[u + 1] = cand_at[u] + cand_n[u] + 1;
      }
      s.less.resize((size_t)less_at[T]);
      s.cand.resize((size_t)cand_at[T]);
      if (sorted) {  // final bucket ranges of out, split per thread in index order
        int64_t pos = 0;
        for (uint32_t d = 0; d < b; ++d)
          for (int u = 0; u < T; ++u) {
            s.offset[(size_t)u * kBins + d] = pos;
            pos += s.hist[(size_t)u * kBins + d];
          }
        if (two)  // the part of bucket b below the second-level threshold
          for (int u = 0; u < T; ++u) {
            s.offset[(size_t)u * kBins + b] = pos;
            for (uint32_t d2 = 0; d2 < b2; ++d2) pos += hist2[(size_t)u * kBins2 + d2];
          }
      }
    }
    // Branch-free compaction: whether an element is kept is data-dependent (a random
    // branch when k is a fair fraction of N), so each element is written to both lists
    // and only the cursor of its list advances; the slack slot absorbs the last write.
    uint64_t* L = s.less.data() + less_at[t];
    uint64_t* C = s.cand.data() + cand_at[t];
    const int sh = lvl_shift;
    const uint32_t cu = cut;
    int64_t wl = 0, wc = 0;
    for (int64_t i = lo; i < hi; ++i) {
      const uint32_t kk = KT::key(row[i]) ^ flip;
      const uint32_t d = kk >> sh;
      const uint64_t c = compose(kk, i);
      L[wl] = c;
      C[wc] = c;
      wl += d < cu;
      wc += d == cu;
    }
    if (sorted) {
      // Counting-sort scatter by the top digit to the final bucket ranges (stable).
      int64_t* off = s.offset.data() + (size_t)t * kBins;
      for (int64_t j = 0; j < wl; ++j) {
        const uint64_t c = L[j];
        comp[off[(uint32_t)(c >> 32) >> kRest]++] = c;
      }
    } else {
      int64_t at = 0;
      for (int u = 0; u < t; ++u) at += less_n[u];
      std::memcpy(comp + at, L, sizeof(uint64_t) * (size_t)wl);
    }
  }
  *nan |= bad;
  // Candidates of the threshold bucket, contiguous and in index order.
  uint64_t* cand = s.cand.data();
  for (int u = 1, at = (int)cand_n[0]; u < T; at += (int)cand_n[u], ++u)
    std::memmove(cand + at, cand + cand_at[u], sizeof(uint64_t) * (size_t)cand_n[u]);
  const int64_t need = k - n_less;  // 1 <= need <= n_b
  if (kRest > 0 && sorted) {
    // Sort the low key bits within each top-digit bucket of the "less" part.
    const uint32_t nbk = two ? b + 1 : b;
    std::vector<int64_t> start(nbk + 1, 0);
    for (uint32_t d = 0; d < nbk; ++d) {
      int64_t c = 0;
      for (int u = 0; u < T; ++u) c += s.hist[(size_t)u * kBins + d];
      if (d == b) {  // two-level: only the part of bucket b below b2 is in "less"
        c = 0;
        for (int u = 0; u < T; ++u)
          for (uint32_t d2 = 0; d2 < b2; ++d2) c += hist2[(size_t)u * kBins2 + d2];
      }
      start[d + 1] = start[d] + c;
    }
#pragma omp parallel num_threads(T) if (T > 1)
    {
      std::vector<uint64_t> tmp;
#pragma omp for schedule(dynamic, 1)
      for (int64_t d = 0; d < (int64_t)nbk; ++d)
        sort_bucket(comp + start[d], (size_t)(start[d + 1] - start[d]), kRest, tmp);
    }
  }
  take_smallest(cand, (size_t)n_b, (size_t)need, two ? kRest - kBits2 : kRest, sorted,
                comp + n_less, s.tmp);
#pragma omp parallel num_threads(T) if (T > 1)
  {
    int64_t lo, hi;
    chunk_bounds(k, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
    finalize<D>(comp, lo, hi, flip, row, out, vals);
  }
}

// ---- one row ------------------------------------------------------------------------

constexpr int64_t kShortRow = 4096;  // rows up to this length always take the filter path

struct RowScratch {
  RadixScratch radix;
  std::vector<std::vector<uint64_t>> bufs;  // per thread (filter path)
};

// Chooses the filter path for small k, the radix path otherwise (or when filtering
// admits too many candidates). Returns true if a NaN was seen.
template <DType D>
bool select_one_row(const typename KeyTraits<D>::Raw* row, int64_t n, int64_t k, bool largest,
                    bool sorted, int threads, int64_t* out, typename KeyTraits<D>::Raw* vals,
                    RowScratch& s) {
  const uint32_t flip = largest ? KeyTraits<D>::kMask : 0u;
  bool nan = false;
  // Short rows (a question's few hundred candidates) take the filter path: its fill, one
  // nth_element and a short stream beat the radix path's histogram passes there. The C++
  // call, float32, Zen 4, radix -> filter: 4 x 500 at k = 10 36-42 -> 11 us, k = 250
  // 47 -> 20; 64 x 300 at k = 10 489 -> 119; 4 x 4,096 at k = 30 71 -> 28, k = 512
  // 87 -> 75; 4 x 1,024 at k = 1,000 91 -> 51. Not for k near n on the longer ones: at
  // 4 x 4,096, k = 2,000 the filter path took 376 us, the radix path 125.
  const bool short_row = n <= kShortRow && (k * 8 <= n || n <= 1024);
  if ((k * 256 <= n && k <= 16384) || short_row) {
    const int T = std::max(1, std::min<int>(threads, (int)(n / 32768)));
    if ((int)s.bufs.size() < T) s.bufs.resize((size_t)T);
    std::atomic<bool> ok{true};
    bool nan_f = false;
#pragma omp parallel num_threads(T) if (T > 1) reduction(|| : nan_f)
    {
      const int t = omp_get_thread_num();
      int64_t lo, hi;
      chunk_bounds(n, t, T, &lo, &hi);
      bool my_nan = false;
      const int64_t budget = short_row ? INT64_MAX : (hi - lo) / 8 + 4 * k;
      if (!filter_chunk<D>(row, lo, hi, k, flip, budget, s.bufs[(size_t)t], &my_nan)) ok = false;
      nan_f = nan_f || my_nan;
    }
    if (ok) {
      std::vector<uint64_t>& all = s.bufs[0];
      for (int t = 1; t < T; ++t) all.insert(all.end(), s.bufs[(size_t)t].begin(), s.bufs[(size_t)t].end());
      if ((int64_t)all.size() > k) {
        std::nth_element(all.begin(), all.begin() + (k - 1), all.end());
        all.resize((size_t)k);
      }
      if (sorted) std::sort(all.begin(), all.end());
      finalize<D>(all.data(), 0, k, flip, row, out, vals);
      return nan_f;
    }
  }
  radix_row<D>(row, n, k, flip, sorted, threads, out, vals, s.radix, &nan);
  return nan;
}

}  // namespace select_detail
}  // namespace rasfast
