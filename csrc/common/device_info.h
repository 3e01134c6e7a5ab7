// Attributes of the current device, read from the runtime once per device: the
// multiprocessor count (launchers size their grids, select_k's passes, or their blocks, beam
// search, by it) and the opt-in shared memory per block (select_k's on-chip sort).
#pragma once
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "common/cuda_check.h"

namespace rasfast {

inline int device_attribute(cudaDeviceAttr attr, int slot) {
  static std::mutex m;
  static std::vector<int> cache[2];
  int dev = 0;
  RASFAST_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(m);
  std::vector<int>& c = cache[slot];
  if ((int)c.size() <= dev) c.resize(dev + 1, 0);
  if (c[dev] == 0) RASFAST_CUDA_CHECK(cudaDeviceGetAttribute(&c[dev], attr, dev));
  return c[dev];
}

inline int sm_count() { return device_attribute(cudaDevAttrMultiProcessorCount, 0); }

// Bytes of shared memory a block may have after cudaFuncSetAttribute (227 KB on sm_90,
// 163 KB on sm_80, 99 KB on sm_86 / sm_89).
inline int smem_optin() { return device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, 1); }

}  // namespace rasfast
