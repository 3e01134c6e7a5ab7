// Stand-in for cub::DeviceRadixSort::SortPairs (CPU emulator): the same two-call protocol
// (a first call with d_temp_storage == nullptr asks for the scratch size, the second sorts)
// and the same result: a stable ascending sort of the key bits [begin_bit, end_bit).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <vector>

#include "cuda_runtime.h"

namespace cub {
namespace emu {

// Scratch the emulator asks for: small but nonzero, so the caller's allocation path runs.
inline size_t temp_bytes_for(int64_t items) { return 256 + (size_t)(items > 0 ? items : 0) * 2; }

template <class K>
inline uint64_t key_bits(K k, int begin_bit, int end_bit) {
  static_assert(std::is_unsigned<K>::value, "the emulated radix sort takes unsigned keys");
  uint64_t u = (uint64_t)k >> begin_bit;
  const int w = end_bit - begin_bit;
  return w >= 64 ? u : (u & ((uint64_t(1) << w) - 1));
}

template <class K, class V>
cudaError_t sort_range(const K* keys_in, K* keys_out, const V* vals_in, V* vals_out, int64_t n,
                       int begin_bit, int end_bit) {
  if (n <= 0 || cuemu::dry_run()) return cudaSuccess;
  const cuemu::DeviceTime device_time;
  std::vector<int64_t> order((size_t)n);
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return key_bits(keys_in[a], begin_bit, end_bit) < key_bits(keys_in[b], begin_bit, end_bit);
  });
  std::vector<K> ks((size_t)n);
  std::vector<V> vs((size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    ks[(size_t)i] = keys_in[order[(size_t)i]];
    vs[(size_t)i] = vals_in[order[(size_t)i]];
  }
  std::memcpy(keys_out, ks.data(), sizeof(K) * (size_t)n);  // in and out may alias
  std::memcpy(vals_out, vs.data(), sizeof(V) * (size_t)n);
  return cudaSuccess;
}

// What a GPU pays for one device-wide radix sort: an upfront histogram, a scan, then one
// onesweep kernel per 8-bit digit (counted as launches, like the emulated kernels).
inline void count_sort_launches(int begin_bit, int end_bit) {
  const int passes = (end_bit - begin_bit + 7) / 8;
  for (int i = 0; i < 2 + passes; ++i) {
    cuemu::count_launch();
    cuemu::log_launch(i == 0 ? "cub::DeviceRadixSort histogram" : i == 1 ? "cub::DeviceRadixSort scan"
                                                                         : "cub::DeviceRadixSort onesweep pass",
                      0, 0);
  }
}

inline bool bad_bits(int begin_bit, int end_bit, size_t key_size) {
  return begin_bit < 0 || end_bit > (int)(8 * key_size) || begin_bit > end_bit;
}

}  // namespace emu

struct DeviceRadixSort {
  template <class K, class V, class NumItemsT>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const K* d_keys_in,
                               K* d_keys_out, const V* d_values_in, V* d_values_out, NumItemsT num_items,
                               int begin_bit = 0, int end_bit = sizeof(K) * 8,
                               cudaStream_t stream = nullptr) {
    (void)stream;
    if (num_items < 0 || emu::bad_bits(begin_bit, end_bit, sizeof(K))) return cudaErrorInvalidValue;
    const size_t need = emu::temp_bytes_for((int64_t)num_items);
    if (d_temp_storage == nullptr) {
      temp_storage_bytes = need;
      return cudaSuccess;
    }
    if (temp_storage_bytes < need) return cudaErrorInvalidValue;
    emu::count_sort_launches(begin_bit, end_bit);
    return emu::sort_range(d_keys_in, d_keys_out, d_values_in, d_values_out, (int64_t)num_items,
                           begin_bit, end_bit);
  }

  template <class K, class NumItemsT>
  static cudaError_t SortKeys(void* d_temp_storage, size_t& temp_storage_bytes, const K* d_keys_in,
                              K* d_keys_out, NumItemsT num_items, int begin_bit = 0,
                              int end_bit = sizeof(K) * 8, cudaStream_t stream = nullptr) {
    (void)stream;
    if (num_items < 0 || emu::bad_bits(begin_bit, end_bit, sizeof(K))) return cudaErrorInvalidValue;
    const size_t need = emu::temp_bytes_for((int64_t)num_items);
    if (d_temp_storage == nullptr) {
      temp_storage_bytes = need;
      return cudaSuccess;
    }
    if (temp_storage_bytes < need) return cudaErrorInvalidValue;
    emu::count_sort_launches(begin_bit, end_bit);
    std::vector<unsigned char> none((size_t)(num_items > 0 ? num_items : 0));
    return emu::sort_range(d_keys_in, d_keys_out, none.data(), none.data(), (int64_t)num_items,
                           begin_bit, end_bit);
  }
};

}  // namespace cub
