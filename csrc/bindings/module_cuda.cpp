// Entry point of rasfast._cuda. cudart is linked statically, so this module imports on a
// machine with no GPU driver; device_count() then returns 0 and the reason is reported.
#include <cuda_runtime.h>

#include <string>

#include "common/registry.h"

// rasfast._cuda on a GPU build; rasfast._cuda_emu when the same sources are compiled for the
// CPU emulator (csrc/emu).
#ifndef RASFAST_CUDA_MODULE_NAME
#define RASFAST_CUDA_MODULE_NAME _cuda
#endif

PYBIND11_MODULE(RASFAST_CUDA_MODULE_NAME, m) {
  m.doc() = "rasfast CUDA kernels. Entry points take raw device pointers and a stream handle.";
  m.def("device_count", []() {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) { cudaGetLastError(); return 0; }
    return n;
  });
  m.def("device_status", []() -> std::string {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) { cudaGetLastError(); return cudaGetErrorString(err); }
    return n > 0 ? "ok" : "no CUDA device";
  });
  m.def("runtime_version", []() { int v = 0; cudaRuntimeGetVersion(&v); return v; });
#ifdef RASFAST_CUDA_EMU
  m.attr("emulated") = true;  // kernels run on the CPU emulator (csrc/emu), on host memory
  m.def("emu_counters", []() {
    const cuemu::Counters c = cuemu::counters();
    pybind11::dict d;
    d["launches"] = c.launches;
    d["memsets"] = c.memsets;
    d["copies_d2h"] = c.copies_d2h;
    d["copies_other"] = c.copies_other;
    d["syncs"] = c.syncs;
    d["allocs"] = c.allocs;
    d["device_ns"] = c.device_ns;
    return d;
  }, "What the host code asked of the emulated device since the last reset: kernel launches, "
     "memsets, device-to-host and other copies, synchronisations, allocations, and device_ns, "
     "the wall time spent running that work (a call's wall time less it is its host time).");
  m.def("emu_reset_counters", []() { cuemu::reset_counters(); });
  m.def("emu_set_launch_log", [](bool on) { cuemu::set_launch_log(on); }, pybind11::arg("on"),
        "Record each kernel launch's shape (cleared when turned on or off).");
  m.def("emu_take_launch_log", []() {
    pybind11::list out;
    for (const cuemu::LaunchRecord& r : cuemu::take_launch_log()) {
      pybind11::dict d;
      d["kernel"] = r.kernel;
      d["site"] = r.site;
      d["blocks"] = r.blocks;
      d["threads"] = r.threads;
      d["dynamic_smem"] = r.dynamic_smem;
      out.append(d);
    }
    return out;
  }, "The launches recorded since the last call (kernel expression, file:line, blocks, "
     "threads a block, dynamic shared memory bytes), then cleared.");
  m.def("emu_set_dry_run", [](bool on) { cuemu::set_dry_run(on); }, pybind11::arg("on"),
        "Dry run: launches, sorts and memsets are checked and counted but not run, so a host "
        "path can be timed warm; results are garbage meanwhile (host-time benchmarks only).");
#else
  m.attr("emulated") = false;
#endif
  rasfast::run_binding_registry(m);
}
