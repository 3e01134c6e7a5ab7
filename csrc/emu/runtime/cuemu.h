// cuemu: CUDA on the CPU, for tests. Each CUDA thread of a block runs as a user-space fiber
// on one OS thread; a fiber runs until it reaches a barrier, a warp collective or its end,
// then the block's scheduler picks the next one: lanes of the same warp first, so a warp
// runs ahead of the others until all its lanes wait at a __syncthreads (a legal GPU
// schedule, and the one that exposes a missing barrier). So barriers and warp collectives are real
// rendezvous points, and code that relies on an ordering CUDA does not promise (a missing
// __syncthreads, a lane that leaves before a shuffle) computes wrong results or stops with
// a message naming the threads and source lines.
//
// What it checks: barriers reached by every live thread of the block at the same call site;
// warp collectives (shuffles, ballots, match, __syncwarp) reached by every lane named in
// the mask, none of them exited; shared memory poisoned at every block start (0xFF; 0xA5
// under CUEMU_ORDER=random, so that a ~0 sentinel never written is caught there);
// launch limits (threads per block, grid/block dimensions, static shared memory <= 48 KB,
// dynamic shared memory above 48 KB only after cudaFuncSetAttribute, the sm_80 / sm_90
// opt-in maximum). What it cannot: speed, occupancy, FMA contraction and the GPU's
// approximate expf/rsqrtf, races between blocks (blocks run one after another unless
// CUEMU_THREADS > 1), asynchronous stream ordering.
//
// Environment:
//   CUEMU_ORDER    = forward | reverse | random   order of the warps, of the lanes within a
//                    warp, and of the blocks (correct kernels do not depend on it)
//   CUEMU_SEED     = integer seed for CUEMU_ORDER=random (default 1)
//   CUEMU_THREADS  = OS threads running blocks concurrently (default 1)
//   CUEMU_ARCH     = 80 | 90 : the shared-memory limits checked (default 90)
//
// This header is what the kernels see (through the stand-in cuda_runtime.h); it has no
// dependency beyond the C++17 standard library.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

struct uint3 {
  unsigned int x, y, z;
};

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

struct CUstream_st;  // never defined: the emulator has one (synchronous) stream
typedef CUstream_st* cudaStream_t;

namespace cuemu {

// Per-thread view the builtin variables read (threadIdx, blockIdx, blockDim, gridDim).
struct ThreadView {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

// The fiber running now on this OS thread (nullptr on the host).
extern thread_local ThreadView* tl_view;

[[noreturn]] void fail_outside_kernel(const char* what);  // a builtin read on the host
[[noreturn]] void fail(const std::string& message);       // a misuse found inside a kernel

inline ThreadView& view(const char* what) {
  ThreadView* v = tl_view;
  if (v == nullptr) fail_outside_kernel(what);
  return *v;
}

// ---- synchronisation (implemented in runtime.cpp) -----------------------------------
void syncthreads(const char* file, int line);
// Warp collective over the lanes in `mask`: every lane deposits `value`; returns, per
// `kind`, the value of lane `arg` (shfl), of lane ^ arg (xor), the ballot, the match mask.
enum class Coll : int { Sync = 0, Shfl, ShflXor, ShflUp, ShflDown, Ballot, Any, All, MatchAny };
uint64_t warp_collective(Coll kind, unsigned mask, uint64_t value, int arg, int width,
                         const char* file, int line);

// ---- shared memory ------------------------------------------------------------------
// Storage of one __shared__ declaration for the running block: the same address for every
// thread of the block, fresh (poisoned with 0xFF) for every block.
void* shared_static(const void* site, size_t bytes, size_t align, const char* name,
                    const char* file, int line);
void* shared_dynamic(const char* file, int line);

template <class T>
T& block_shared(const void* site, const char* name, const char* file, int line) {
  static_assert(std::is_trivially_destructible<T>::value, "__shared__ types must be trivial");
  return *static_cast<T*>(shared_static(site, sizeof(T), alignof(T), name, file, line));
}
template <class T>
T* dynamic_shared(const char* file, int line) {
  return static_cast<T*>(shared_dynamic(file, line));
}

// ---- launches -----------------------------------------------------------------------
struct LaunchSite {
  const void* fn;      // kernel identity (for cudaFuncSetAttribute)
  const char* name;    // as written at the launch
  const char* file;
  int line;
};

// Runs body() once per CUDA thread of every block; records a launch error (returned by
// cudaGetLastError) or a kernel fault (thrown as std::runtime_error after the grid stops).
void run_grid(const LaunchSite& site, dim3 grid, dim3 block, size_t dynamic_smem,
              cudaStream_t stream, const std::function<void()>& body);

template <class... P>
struct Launcher {
  void (*fn)(P...);
  LaunchSite site;
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  template <class... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
    const std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
    auto f = fn;
    // every CUDA thread gets its own copy of the parameters, as on a GPU
    run_grid(site, grid, block, smem, stream, [&params, f]() {
      std::tuple<std::decay_t<P>...> mine = params;
      std::apply(f, mine);
    });
  }
};

template <class... P>
Launcher<P...> launch(void (*fn)(P...), const char* name, const char* file, int line, dim3 grid,
                      dim3 block, size_t smem = 0, cudaStream_t stream = nullptr) {
  return Launcher<P...>{fn, LaunchSite{reinterpret_cast<const void*>(fn), name, file, line},
                        grid, block, smem, stream};
}

// ---- work counters --------------------------------------------------------------------
// What the host code asked of the "device" since the last reset: what a GPU run would pay
// for in launches, host round trips and allocations. rasfast._cuda_emu exposes them
// (emu_counters / emu_reset_counters) so tests can hold each op to a budget.
struct Counters {
  uint64_t launches;    // kernel launches (valid or not)
  uint64_t memsets;     // cudaMemset(Async)
  uint64_t copies_d2h;  // device-to-host copies (each one waits for the device)
  uint64_t copies_other;
  uint64_t syncs;       // cudaDeviceSynchronize / cudaStreamSynchronize, and blocking copies
  uint64_t allocs;      // cudaMalloc(Async) / pool allocations
  uint64_t device_ns;   // wall time spent running the "device" work above (kernels, cub
                        // sorts, memsets, copies): a call's wall time less this is its host time
};
Counters counters();
void reset_counters();
void count_launch();
void add_device_ns(uint64_t ns);

// The launch log (off unless turned on): each kernel launch's shape, what a GPU's
// occupancy depends on (a grid of fewer blocks than the SMs leaves most of the device idle),
// so a per-question call's kernels can be read without a GPU (rasfast.device_work).
struct LaunchRecord {
  std::string kernel;  // the kernel expression as written at the launch
  std::string site;    // file:line
  uint64_t blocks;     // grid.x * grid.y * grid.z
  uint32_t threads;    // per block
  uint64_t dynamic_smem;
};
void set_launch_log(bool on);
std::vector<LaunchRecord> take_launch_log();  // the records since the last take, cleared
// A launch the emulator stands in for (cub's device-wide kernels): blocks 0 = not modelled.
void log_launch(const char* kernel, uint64_t blocks, uint32_t threads);

// Dry run: launches, cub sorts, memsets and copies are counted and checked but not run, so a
// host path can be timed warm (an emulated kernel's milliseconds leave the caches cold for
// the host code after it). Results are garbage meanwhile: for benchmarks of host time only.
void set_dry_run(bool on);
bool dry_run();

// Adds its scope's wall time to Counters::device_ns (nested scopes count once).
class DeviceTime {
 public:
  DeviceTime();
  ~DeviceTime();
  DeviceTime(const DeviceTime&) = delete;
  DeviceTime& operator=(const DeviceTime&) = delete;

 private:
  uint64_t start_;
  bool outer_;
};

// ---- kernel attributes (cudaFuncSetAttribute) ---------------------------------------
void set_max_dynamic_smem(const void* fn, int bytes);

// ---- bit casts used by the intrinsics -------------------------------------------------
template <class T>
uint64_t to_bits(const T& v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type over 8 bytes");
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <class T>
T from_bits(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof(T));
  return v;
}

}  // namespace cuemu
