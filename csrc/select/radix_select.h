// CPU radix selection over ordered float keys (common/dtype.h float_to_key).
//
// select_rows() writes, for each row, the indices of the k smallest keys with ties broken
// by lower index, in O(N) per row: three histogram passes over 11/11/10-bit digits find
// the k-th key ("threshold"), then one pass gathers every index with a smaller key plus
// the first (k - n_less) indices equal to it. Optionally the k results are sorted by
// (key, index) with a stable LSD radix sort over the candidates (which are gathered in
// index order, so stability gives the index tie-break for free).
//
// Kernel families that need "the K-th distance" without materialising a sorted list
// (theme scoping) use find_threshold() directly.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/dtype.h"

namespace rasfast {

struct Threshold {
  uint32_t key;    // the k-th smallest key (1-based k)
  int64_t n_less;  // number of keys strictly smaller than `key` (n_less < k)
};

namespace detail {
constexpr int kDigitBits[3] = {11, 11, 10};
constexpr int kDigitShift[3] = {21, 10, 0};

// Finds the k-th smallest key. `key_at(i)` returns the key of element i in [0, n).
// Parallel over the row with `threads` OpenMP threads when threads > 1 (for long rows
// when there are fewer rows than threads). Candidates surviving the first pass are
// compacted so later passes touch only them.
template <class KeyAt>
Threshold find_threshold_impl(int64_t n, int64_t k, KeyAt key_at, int threads) {
  uint32_t prefix = 0, prefix_mask = 0;
  int64_t n_less = 0;  // keys strictly below the current prefix range
  int64_t want = k;    // rank (1-based) within the current prefix range
  std::vector<uint32_t> cand;  // keys still matching the prefix after pass 0
  for (int pass = 0; pass < 3; ++pass) {
    const int bits = kDigitBits[pass], shift = kDigitShift[pass];
    const uint32_t nb = 1u << bits, dmask = nb - 1;
    std::vector<int64_t> hist(nb, 0);
    if (pass == 0) {
      if (threads > 1) {
        std::vector<int64_t> local((size_t)threads * nb, 0);
#pragma omp parallel num_threads(threads)
        {
          int64_t* h = local.data() + (size_t)omp_get_thread_num() * nb;
#pragma omp for schedule(static)
          for (int64_t i = 0; i < n; ++i) ++h[(key_at(i) >> shift) & dmask];
        }
        for (int t = 0; t < threads; ++t)
          for (uint32_t b = 0; b < nb; ++b) hist[b] += local[(size_t)t * nb + b];
      } else {
        for (int64_t i = 0; i < n; ++i) ++hist[(key_at(i) >> shift) & dmask];
      }
    } else {
      for (uint32_t key : cand) ++hist[(key >> shift) & dmask];
    }
    uint32_t b = 0;
    int64_t cum = 0;
    for (; b < nb; ++b) {
      if (cum + hist[b] >= want) break;
      cum += hist[b];
    }
    n_less += cum;
    want -= cum;
    prefix |= b << shift;
    prefix_mask |= dmask << shift;
    // Compact the survivors of this digit for the next pass.
    if (pass == 0) {
      cand.reserve((size_t)hist[b]);
      for (int64_t i = 0; i < n; ++i) {
        uint32_t key = key_at(i);
        if ((key & prefix_mask) == prefix) cand.push_back(key);
      }
    } else if (pass == 1) {
      size_t w = 0;
      for (uint32_t key : cand)
        if ((key & prefix_mask) == prefix) cand[w++] = key;
      cand.resize(w);
    }
  }
  return Threshold{prefix, n_less};
}

// Stable LSD radix sort of (key, idx) pairs by key; skips digits that are constant.
inline void sort_pairs_by_key(std::vector<uint32_t>& keys, std::vector<int64_t>& idx) {
  const size_t m = keys.size();
  if (m < 2) return;
  std::vector<uint32_t> k2(m);
  std::vector<int64_t> i2(m);
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = pass == 0 ? 0 : (pass == 1 ? 11 : 22);
    const uint32_t nb = pass == 2 ? 1024u : 2048u, dmask = nb - 1;
    std::vector<size_t> count(nb + 1, 0);
    for (size_t i = 0; i < m; ++i) ++count[((keys[i] >> shift) & dmask) + 1];
    bool trivial = false;
    for (uint32_t b = 0; b < nb; ++b)
      if (count[b + 1] == m) { trivial = true; break; }
    if (trivial) continue;
    for (uint32_t b = 0; b < nb; ++b) count[b + 1] += count[b];
    for (size_t i = 0; i < m; ++i) {
      size_t dst = count[(keys[i] >> shift) & dmask]++;
      k2[dst] = keys[i];
      i2[dst] = idx[i];
    }
    keys.swap(k2);
    idx.swap(i2);
  }
}
}  // namespace detail

template <class KeyAt>
Threshold find_threshold(int64_t n, int64_t k, KeyAt key_at, int threads = 1) {
  return detail::find_threshold_impl(n, k, key_at, threads);
}

// Selects the k smallest keys of one row: writes k indices to out_idx (sorted by
// (key, index) when `sorted`, else in index order).
template <class KeyAt>
void select_row(int64_t n, int64_t k, KeyAt key_at, bool sorted, int64_t* out_idx, int threads) {
  if (k <= 0) return;
  const Threshold th = find_threshold(n, k, key_at, threads);
  const int64_t n_eq = k - th.n_less;  // how many ties at the threshold to take, lowest first
  std::vector<uint32_t> keys;
  std::vector<int64_t> idx;
  if (sorted) { keys.reserve((size_t)k); idx.reserve((size_t)k); }
  int64_t w = 0, eq_taken = 0;
  for (int64_t i = 0; i < n && w < k; ++i) {
    const uint32_t key = key_at(i);
    const bool take = key < th.key || (key == th.key && eq_taken++ < n_eq);
    if (!take) continue;
    if (sorted) { keys.push_back(key); idx.push_back(i); }
    else out_idx[w] = i;
    ++w;
  }
  if (sorted) {
    detail::sort_pairs_by_key(keys, idx);
    std::memcpy(out_idx, idx.data(), sizeof(int64_t) * (size_t)k);
  }
}

}  // namespace rasfast
