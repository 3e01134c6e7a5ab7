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

// Writes indices (and raw values, when vals != nullptr) of composites c[0..k) to out.
// c may alias out (composites are read before the slot is overwritten).
template <class Raw>
inline void finalize(const uint64_t* c, int64_t lo, int64_t hi, const Raw* row, int64_t* out,
                     Raw* vals) {
  for (int64_t i = lo; i < hi; ++i) {
    const int64_t idx = (int64_t)(c[i] & 0xffffffffu);
    out[i] = idx;
    if (vals) vals[i] = row[idx];
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
      const uint32_t ku = KT::key(row[j]);
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
  std::vector<int64_t> offset;    // [threads][bins] write cursors
  std::vector<uint64_t> cand;     // composites of the threshold bucket
  std::vector<uint64_t> tmp;      // sort buffer
};

// Full radix select of one row into out[0..k) (as composites first, then indices).
template <DType D>
void radix_row(const typename KeyTraits<D>::Raw* row, int64_t n, int64_t k, uint32_t flip,
               bool sorted, int threads, int64_t* out, typename KeyTraits<D>::Raw* vals,
               RadixScratch& s, bool* nan) {
  using KT = KeyTraits<D>;
  constexpr int kRest = KT::kBits - KT::kTopBits;
  constexpr uint32_t kBins = 1u << KT::kTopBits;
  s.hist.assign((size_t)threads * kBins, 0);
  s.offset.resize((size_t)threads * kBins);
  uint64_t* comp = reinterpret_cast<uint64_t*>(out);  // out doubles as composite storage
  bool bad = false;
  uint32_t b = 0;
  int64_t n_less = 0, n_b = 0;
#pragma omp parallel num_threads(threads) if (threads > 1) reduction(|| : bad)
  {
    const int t = omp_get_thread_num();
    int64_t lo, hi;
    chunk_bounds(n, t, threads, &lo, &hi);
    uint32_t* h = s.hist.data() + (size_t)t * kBins;
    uint32_t anynan = 0;
    for (int64_t i = lo; i < hi; ++i) {
      const uint32_t ku = KT::key(row[i]);
      anynan |= (uint32_t)(ku > KT::kPosInf) | (uint32_t)(ku < KT::kNegInf);
      ++h[(ku ^ flip) >> kRest];
    }
    bad = bad || anynan != 0;
#pragma omp barrier
#pragma omp single
    {
      // Bucket b holding the k-th key, then per-thread write cursors: buckets below b
      // go to their final range of out, bucket b to the candidate list, each in index order.
      int64_t cum = 0;
      for (b = 0; b < kBins; ++b) {
        int64_t c = 0;
        for (int u = 0; u < threads; ++u) c += s.hist[(size_t)u * kBins + b];
        if (cum + c >= k) { n_b = c; break; }
        cum += c;
      }
      n_less = cum;
      int64_t pos = 0;
      for (uint32_t d = 0; d < b; ++d)
        for (int u = 0; u < threads; ++u) {
          s.offset[(size_t)u * kBins + d] = pos;
          pos += s.hist[(size_t)u * kBins + d];
        }
      pos = 0;
      for (int u = 0; u < threads; ++u) {
        s.offset[(size_t)u * kBins + b] = pos;
        pos += s.hist[(size_t)u * kBins + b];
      }
      s.cand.resize((size_t)n_b);
    }
    int64_t* off = s.offset.data() + (size_t)t * kBins;
    uint64_t* cand = s.cand.data();
    for (int64_t i = lo; i < hi; ++i) {
      const uint32_t kk = KT::key(row[i]) ^ flip;
      const uint32_t d = kk >> kRest;
      if (d < b) comp[off[d]++] = compose(kk, i);
      else if (d == b) cand[off[b]++] = compose(kk, i);
    }
  }
  *nan |= bad;
  const int64_t need = k - n_less;  // 1 <= need <= n_b
  uint64_t* cand = s.cand.data();
  if (kRest > 0) {
    if (sorted) {
      // Sort each bucket below b in place (bucket ranges from the histogram).
      std::vector<int64_t> start(b + 1, 0);
      for (uint32_t d = 0; d < b; ++d) {
        int64_t c = 0;
        for (int u = 0; u < threads; ++u) c += s.hist[(size_t)u * kBins + d];
        start[d + 1] = start[d] + c;
      }
#pragma omp parallel num_threads(threads) if (threads > 1)
      {
        std::vector<uint64_t> tmp;
#pragma omp for schedule(dynamic, 1)
        for (int64_t d = 0; d < (int64_t)b; ++d)
          sort_bucket(comp + start[d], (size_t)(start[d + 1] - start[d]), kRest, tmp);
      }
      sort_bucket(cand, (size_t)n_b, kRest, s.tmp);
    } else if (need < n_b) {
      std::nth_element(cand, cand + (need - 1), cand + n_b);
    }
  }
  // (kRest == 0: every candidate has the same key and they are in index order.)
  std::memcpy(comp + n_less, cand, sizeof(uint64_t) * (size_t)need);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    int64_t lo, hi;
    chunk_bounds(k, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
    finalize(comp, lo, hi, row, out, vals);
  }
}

// ---- one row ------------------------------------------------------------------------

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
  if (k * 64 <= n && k <= 16384) {
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
      const int64_t budget = (hi - lo) / 8 + 4 * k;
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
      finalize(all.data(), 0, k, row, out, vals);
      return nan_f;
    }
  }
  radix_row<D>(row, n, k, flip, sorted, threads, out, vals, s.radix, &nan);
  return nan;
}

}  // namespace select_detail
}  // namespace rasfast
