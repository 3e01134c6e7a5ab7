// The current device's multiprocessor count, read from the runtime once per device: launchers
// size their grids (select_k's passes) or their blocks (beam search) by it.
#pragma once
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "common/cuda_check.h"

namespace rasfast {

inline int sm_count() {
  static std::mutex m;
  static std::vector<int> cache;
  int dev = 0;
  RASFAST_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(m);
  if ((int)cache.size() <= dev) cache.resize(dev + 1, 0);
  if (cache[dev] == 0)
    RASFAST_CUDA_CHECK(cudaDeviceGetAttribute(&cache[dev], cudaDevAttrMultiProcessorCount, dev));
  return cache[dev];
}

}  // namespace rasfast
