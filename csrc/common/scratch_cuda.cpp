// Scratch allocation for the CUDA kernels (see common/scratch.h): torch's caching allocator
// through Python callbacks that rasfast registers, else a rasfast-owned memory pool.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <map>
#include <mutex>

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

}  // namespace

void* scratch_alloc(size_t bytes, cudaStream_t stream, bool* from_torch) {
  *from_torch = false;
  if (bytes == 0) return nullptr;
  int device = 0;
  RASFAST_CUDA_CHECK(cudaGetDevice(&device));
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

void scratch_free(void* p, cudaStream_t stream, bool from_torch) noexcept {
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
}

}  // namespace
RASFAST_REGISTER(scratch_cuda, bind);
}  // namespace rasfast
