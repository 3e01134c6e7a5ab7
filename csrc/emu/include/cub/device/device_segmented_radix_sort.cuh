// Stand-in for cub::DeviceSegmentedRadixSort::SortPairs (CPU emulator): each segment
// [begin_offsets[s], end_offsets[s]) sorted stably by key bits; items outside every segment
// are left as they are in the output (cub leaves them undefined).
#pragma once
#include "cub/device/device_radix_sort.cuh"

namespace cub {

struct DeviceSegmentedRadixSort {
  template <class K, class V, class NumItemsT, class OffsetIt>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const K* d_keys_in,
                               K* d_keys_out, const V* d_values_in, V* d_values_out, NumItemsT num_items,
                               int num_segments, OffsetIt d_begin_offsets, OffsetIt d_end_offsets,
                               int begin_bit = 0, int end_bit = sizeof(K) * 8,
                               cudaStream_t stream = nullptr) {
    (void)stream;
    if (num_items < 0 || num_segments < 0 || emu::bad_bits(begin_bit, end_bit, sizeof(K)))
      return cudaErrorInvalidValue;
    const size_t need = emu::temp_bytes_for((int64_t)num_items) + 16 * (size_t)num_segments;
    if (d_temp_storage == nullptr) {
      temp_storage_bytes = need;
      return cudaSuccess;
    }
    if (temp_storage_bytes < need) return cudaErrorInvalidValue;
    emu::count_sort_launches(begin_bit, end_bit);
    for (int s = 0; s < num_segments; ++s) {
      const int64_t b = (int64_t)d_begin_offsets[s], e = (int64_t)d_end_offsets[s];
      if (b < 0 || e > (int64_t)num_items) return cudaErrorInvalidValue;
      if (e <= b) continue;
      const cudaError_t err = emu::sort_range(d_keys_in + b, d_keys_out + b, d_values_in + b,
                                              d_values_out + b, e - b, begin_bit, end_bit);
      if (err != cudaSuccess) return err;
    }
    return cudaSuccess;
  }
};

}  // namespace cub
