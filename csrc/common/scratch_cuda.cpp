// Scratch allocation for the CUDA kernels (see common/scratch.h): torch's caching allocator
// through Python callbacks that rasfast registers, else a rasfast-owned memory pool.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "common/registry.h"
#include "common/scratch.h"

namespace rasfast {
namespace {
namespace py = pybind11;

// Leaked on purpose: no Python object may be destroyed after the interpreter shuts down.
py::object* g_alloc = nullptr;  // (nbytes, device, stream) -> pointer
py::object* g_free = nullptr;   // (pointer) -> None
std::mutex g_mutex;

cudaMemPool_t fallback_pool(int device) {
  static std::map<int, cudaMemPool_t> pools;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = pools.find(device);
  if (it != pools.end()) return it->second;
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool;
  RASFAST_CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
  // keep freed blocks for the next call instead of returning them at every synchronisation
  uint64_t keep = UINT64_MAX;
  RASFAST_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  pools[device] = pool;
  return pool;
}

// The allocator behind scratch: torch's caching allocator through the registered callback,
// else the rasfast-owned pool.
void* raw_alloc(size_t bytes, int device, cudaStream_t stream, bool* from_torch) {
  *from_torch = false;
  {
    py::gil_scoped_acquire gil;  // launchers run with the GIL released
    if (g_alloc != nullptr) {
      const auto p = (*g_alloc)(bytes, device, reinterpret_cast<uintptr_t>(stream)).cast<uintptr_t>();
      *from_torch = true;
      return reinterpret_cast<void*>(p);
    }
  }
  void* p = nullptr;
  RASFAST_CUDA_CHECK(cudaMallocFromPoolAsync(&p, bytes, fallback_pool(device), stream));
  return p;
}

void raw_free(void* p, cudaStream_t stream, bool from_torch) noexcept {
  if (p == nullptr) return;
  if (from_torch) {
    py::gil_scoped_acquire gil;
    try {
      if (g_free != nullptr) (*g_free)(reinterpret_cast<uintptr_t>(p));
    } catch (...) {
      PyErr_Clear();  // a destructor must not throw; the block stays with torch's cache
    }
    return;
  }
  cudaFreeAsync(p, stream);
}

// A per-(device, stream) bump arena: blocks are taken from the top and given back in any
// order (a block is reclaimed once every block above it is free; RAII scratch frees in
// reverse order anyway). Reuse across calls is safe because every user of one arena
// enqueues on the same stream. It grows only while nothing lives in it, to the largest need
// seen (a call that did not fit records it), up to kScratchArenaMax.
constexpr size_t kArenaAlign = 256;
constexpr size_t kScratchArenaMax = size_t(64) << 20;
struct ArenaBlock {
  size_t off, size;
  bool freed;
};
struct Arena {
  void* base = nullptr;
  size_t cap = 0, top = 0, want = 0;
  bool from_torch = false;
  std::vector<ArenaBlock> live;
};
std::mutex g_arena_mutex;
std::map<std::pair<int, uintptr_t>, Arena>& arenas() {
  static auto* m = new std::map<std::pair<int, uintptr_t>, Arena>();  // leaked, like the callbacks
  return *m;
}

}  // namespace

void* scratch_alloc(size_t bytes, cudaStream_t stream, int* kind) {
  *kind = kScratchPool;
  if (bytes == 0) return nullptr;
  int device = 0;
  RASFAST_CUDA_CHECK(cudaGetDevice(&device));
  const size_t need = (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  if (need <= kScratchArenaMax) {
    // The GIL is never held while waiting for this mutex (launchers release it), so taking
    // the GIL inside raw_alloc below cannot deadlock.
    std::lock_guard<std::mutex> lock(g_arena_mutex);
    Arena& a = arenas()[{device, reinterpret_cast<uintptr_t>(stream)}];
    const size_t target = std::min(kScratchArenaMax, std::max(a.want, need));
    if (a.live.empty() && a.cap < target) {
      if (a.base != nullptr) raw_free(a.base, stream, a.from_torch);
      a.base = nullptr;
      a.cap = a.top = 0;
      const size_t cap = std::min(kScratchArenaMax, std::max(target, size_t(1) << 20));
      a.base = raw_alloc(cap, device, stream, &a.from_torch);
      a.cap = cap;
    }
    if (a.top + need <= a.cap) {
      void* p = static_cast<char*>(a.base) + a.top;
      a.live.push_back(ArenaBlock{a.top, need, false});
      a.top += need;
      *kind = kScratchArena;
      return p;
    }
    a.want = std::max(a.want, a.top + need);  // the next call grows the arena to fit
  }
  bool from_torch = false;
  void* p = raw_alloc(bytes, device, stream, &from_torch);
  *kind = from_torch ? kScratchTorch : kScratchPool;
  return p;
}

void scratch_free(void* p, cudaStream_t stream, int kind) noexcept {
  if (p == nullptr) return;
  if (kind != kScratchArena) {
    raw_free(p, stream, kind == kScratchTorch);
    return;
  }
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return;
  std::lock_guard<std::mutex> lock(g_arena_mutex);
  auto it = arenas().find({device, reinterpret_cast<uintptr_t>(stream)});
  if (it == arenas().end()) return;
  Arena& a = it->second;
  const size_t off = static_cast<size_t>(static_cast<char*>(p) - static_cast<char*>(a.base));
  for (auto b = a.live.rbegin(); b != a.live.rend(); ++b) {
    if (b->off == off && !b->freed) {
      b->freed = true;
      break;
    }
  }
  while (!a.live.empty() && a.live.back().freed) {
    a.top = a.live.back().off;
    a.live.pop_back();
  }
}

namespace {

void bind(py::module_& m) {
  m.def("set_scratch_allocator",
        [](py::object alloc, py::object free) {
          if (alloc.is_none() != free.is_none())
            throw std::invalid_argument("alloc and free must both be callables or both None");
          // replaced objects are leaked like the first ones (a free may still be pending)
          g_alloc = alloc.is_none() ? nullptr : new py::object(alloc);
          g_free = free.is_none() ? nullptr : new py::object(free);
        },
        py::arg("alloc"), py::arg("free"),
        "Scratch memory from alloc(nbytes, device, stream) -> ptr and free(ptr) (torch's "
        "caching allocator); None, None: a rasfast-owned stream-ordered pool.");
  m.def("scratch_allocator", []() { return g_alloc != nullptr ? "callback" : "pool"; },
        "Where scratch memory comes from: 'callback' (registered allocator) or 'pool'.");
  m.def("release_scratch", []() {
          py::gil_scoped_release nogil;
          std::lock_guard<std::mutex> lock(g_arena_mutex);
          size_t freed = 0;
          for (auto& kv : arenas()) {
            Arena& a = kv.second;
            if (a.base == nullptr || !a.live.empty()) continue;
            raw_free(a.base, reinterpret_cast<cudaStream_t>(kv.first.second), a.from_torch);
            freed += a.cap;
            a = Arena();
          }
          return freed;
        },
        "Returns the scratch arenas' memory that no call is using to its allocator; the bytes freed.");
}

}  // namespace
RASFAST_REGISTER(scratch_cuda, bind);
}  // namespace rasfast
