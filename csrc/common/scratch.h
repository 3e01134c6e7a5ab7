// Scratch device memory for the CUDA kernels (module rasfast._cuda only).
//
// When rasfast's Python layer has registered torch's caching allocator (it does so the first
// time it loads rasfast._cuda; see rasfast/dispatch.py), scratch comes from it, on the launch
// stream: reused across calls, counted in torch.cuda.memory_stats(), and returned to torch's
// cache on free exactly like a tensor's memory. Without a registered allocator (the module used
// on its own) it comes from a rasfast-owned stream-ordered pool whose release threshold keeps
// freed memory for reuse, not cudaMallocAsync on a pool that returns it at every sync.
// Implemented in common/scratch_cuda.cpp; no pybind11 or torch headers here, so .cu files can
// include it.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace rasfast {

// Allocates `bytes` (0: nullptr) usable on `stream`; *from_torch says which allocator.
void* scratch_alloc(size_t bytes, cudaStream_t stream, bool* from_torch);
// Frees (stream-ordered) what scratch_alloc returned; never throws.
void scratch_free(void* p, cudaStream_t stream, bool from_torch) noexcept;

// Scratch memory on a stream, freed when the owner goes out of scope.
struct Scratch {
  void* p = nullptr;
  cudaStream_t s;
  bool from_torch = false;
  Scratch(size_t bytes, cudaStream_t st) : s(st) { p = scratch_alloc(bytes, s, &from_torch); }
  ~Scratch() { scratch_free(p, s, from_torch); }
  template <class T> T* as() const { return static_cast<T*>(p); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

}  // namespace rasfast
