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

// Where a scratch block came from (how scratch_free returns it).
enum ScratchKind : int { kScratchPool = 0, kScratchTorch = 1, kScratchArena = 2 };

// Allocates `bytes` (0: nullptr) usable on `stream`; *kind says where from. Small blocks come
// from a per-(device, stream) arena that is itself one block of the allocator above, kept
// between calls: a launcher's scratch then costs no allocation and no Python round trip once
// the arena has grown to the launcher's need (at most kScratchArenaMax bytes; larger needs
// take the allocator, where one call's work dwarfs the round trip).
void* scratch_alloc(size_t bytes, cudaStream_t stream, int* kind);
// Frees (stream-ordered) what scratch_alloc returned; never throws.
void scratch_free(void* p, cudaStream_t stream, int kind) noexcept;

// Scratch memory on a stream, freed when the owner goes out of scope.
struct Scratch {
  void* p = nullptr;
  cudaStream_t s;
  int kind = kScratchPool;
  Scratch(size_t bytes, cudaStream_t st) : s(st) { p = scratch_alloc(bytes, s, &kind); }
  ~Scratch() { scratch_free(p, s, kind); }
  template <class T> T* as() const { return static_cast<T*>(p); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

}  // namespace rasfast
