"""The CUDA emulator catches the bug classes it is meant to catch.

Each test compiles a small C++ program: a kernel (inline below, or a real rasfast .cu file
with one line changed) through csrc/emu/rewrite.py, the emulator runtime, and a main() that
launches it; then runs it and reads what it printed. Sanitizer builds (AddressSanitizer,
ThreadSanitizer) are compiled the same way with -fsanitize.
"""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EMU = REPO / "csrc" / "emu"
sys.path.insert(0, str(EMU))
import rewrite  # noqa: E402

pytestmark = [pytest.mark.cuda_emu, pytest.mark.timeout(600)]

CXX = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
if CXX is None:
    pytest.skip("no C++ compiler", allow_module_level=True)

INCLUDES = [f"-I{EMU / 'include'}", f"-I{EMU}", f"-I{REPO / 'csrc'}"]

# scratch_cuda.cpp needs pybind11; a harness takes its scratch from cudaMalloc instead
SCRATCH_STUB = """
#include "common/scratch.h"
namespace rasfast {
void* scratch_alloc(size_t bytes, cudaStream_t, int* kind) {
  *kind = kScratchPool;
  void* p = nullptr;
  if (bytes) cudaMalloc(&p, bytes);
  return p;
}
void scratch_free(void* p, cudaStream_t, int) noexcept { cudaFree(p); }
}  // namespace rasfast
"""

_objects = {}


def _runtime_object(tmp_root: Path, flags) -> Path:
    key = tuple(flags)
    if key not in _objects:
        out = tmp_root / f"runtime_{len(_objects)}.o"
        subprocess.run([CXX, "-std=c++17", "-O1", "-g", "-ffp-contract=off", *flags, *INCLUDES, "-c",
                        str(EMU / "runtime" / "runtime.cpp"), "-o", str(out)], check=True)
        _objects[key] = out
    return _objects[key]


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory):
    return tmp_path_factory.mktemp("cuemu")


def build(tmp_root: Path, name: str, cuda_src: str, main_src: str, flags=(), filename=None) -> Path:
    """Compiles ``cuda_src`` (CUDA, rewritten) + ``main_src`` (C++) + the runtime; the binary."""
    d = tmp_root / name
    d.mkdir(exist_ok=True)
    src = d / (filename or "kernel.cu")
    src.write_text(cuda_src)
    cpp = d / "kernel.cu.cpp"
    cpp.write_text(f'#line 1 "{src}"\n' + rewrite.rewrite(cuda_src))
    (d / "main.cpp").write_text(main_src)
    exe = d / "prog"
    subprocess.run([CXX, "-std=c++17", "-O1", "-g", "-ffp-contract=off", *flags, *INCLUDES, str(cpp),
                    str(d / "main.cpp"), str(_runtime_object(tmp_root, flags)), "-o", str(exe), "-lpthread"],
                   check=True)
    return exe


def run(exe: Path, **env):
    e = dict(os.environ, **{k: str(v) for k, v in env.items()})
    p = subprocess.run([str(exe)], capture_output=True, text=True, env=e, timeout=300)
    return p.returncode, p.stdout + p.stderr


def line_of(src: str, needle: str, nth: int = 0) -> int:
    lines = [i + 1 for i, l in enumerate(src.splitlines()) if needle in l]
    return lines[nth]


# ---------------------------------------------------------------- a removed __syncthreads
SELECT_MAIN = SCRATCH_STUB + r"""
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>
#include "select/select_cuda.h"

int main() {
  const int64_t rows = 4, n = 3000, k = 100;
  std::mt19937 rng(7);
  std::normal_distribution<float> d;
  std::vector<float> x(rows * n);
  for (auto& v : x) v = d(rng);
  std::vector<int64_t> out(rows * k);
  std::vector<float> vals(rows * k);
  const size_t ws_bytes = rasfast::select_k_cuda_workspace(0, rows, n, k, true);
  std::vector<unsigned long long> ws(ws_bytes / 8 + 1);  // 8-byte aligned, like a device block
  try {
    rasfast::select_k_cuda_launch(x.data(), 0, rows, n, k, false, true, out.data(), vals.data(),
                                  ws.data(), ws_bytes, nullptr);
  } catch (const std::exception& e) {
    std::printf("FAULT %s\n", e.what());
    return 0;
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    const float* row = x.data() + r * n;
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return row[a] < row[b]; });
    for (int64_t j = 0; j < k; ++j)
      if (out[r * k + j] != idx[j]) { std::printf("MISMATCH row %ld rank %ld\n", (long)r, (long)j); return 0; }
  }
  std::printf("MATCH\n");
  return 0;
}
"""


def _select_source(remove_barrier: bool, kernel: str = "radix_pass(const") -> str:
    src = (REPO / "csrc" / "select" / "select_kernels.cu").read_text()
    if remove_barrier:
        # the barrier between zeroing the block's histogram and counting into it
        start = src.index("h[b] = 0;", src.index(kernel))
        at = src.index("__syncthreads();", start)
        src = src[:at] + "/* removed */   " + src[at + len("__syncthreads();"):]
    return src


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_real_kernel_with_a_removed_syncthreads_gives_wrong_results(tmp_root, order):
    # the barrier removed is the radix passes', so the runs that must see it keep the call on
    # them: the harness's rows are short enough for the one-launch select (the default since
    # the sixteenth session), and k = 100 is within the filtered pass's reach
    radix = dict(RASFAST_SELECT_FILTER_K=0, RASFAST_SELECT_SMALL_N=0)
    good = build(tmp_root, "select_good", _select_source(False), SELECT_MAIN)
    rc, out = run(good, CUEMU_ORDER=order, **radix)
    assert rc == 0 and "MATCH" in out and "MISMATCH" not in out, out
    for other in ({}, {"RASFAST_SELECT_FILTER_K": 256}):  # the default path, the filtered pass
        rc, out = run(good, CUEMU_ORDER=order, **other)
        assert rc == 0 and "MATCH" in out and "MISMATCH" not in out, (other, out)
    bad = build(tmp_root, "select_bad", _select_source(True), SELECT_MAIN)
    rc, out = run(bad, CUEMU_ORDER=order, **radix)
    assert rc == 0 and ("MISMATCH" in out or "FAULT" in out), out


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_short_row_select_with_a_removed_syncthreads_gives_wrong_results(tmp_root, order):
    """The same for the one-launch short-row select (the default for the harness's rows): the
    barrier in its on-chip passes (select_row_on_chip, which both short-row kernels call)."""
    bad = build(tmp_root, "select_small_bad", _select_source(True, "select_row_on_chip(const"), SELECT_MAIN)
    rc, out = run(bad, CUEMU_ORDER=order)
    assert rc == 0 and ("MISMATCH" in out or "FAULT" in out), out


# ------------------------------------------------------------- small kernels with one bug
def harness(kernel: str, launch: str) -> str:
    return kernel, textwrap.dedent("""
        #include <cstdio>
        #include <stdexcept>
        #include <vector>
        #include "cuda_runtime.h"
        void launch(int* out);
        int main() {
          std::vector<int> out(4096, 0);
          try {
            launch(out.data());
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) { std::printf("LAUNCH_ERROR %s\\n", cudaGetErrorString(e)); return 0; }
          } catch (const std::exception& e) {
            std::printf("FAULT %s\\n", e.what());
            return 0;
          }
          std::printf("OK");
          for (int i = 0; i < 8; ++i) std::printf(" %d", out[i]);
          std::printf("\\n");
          return 0;
        }
        """) + "\n// launch\n" + launch


def _run_kernel(tmp_root, name, kernel, launch_body, flags=(), **env):
    cuda_src = kernel + "\nvoid launch(int* out) {\n" + launch_body + "\n}\n"
    _, main_src = harness(kernel, "")
    exe = build(tmp_root, name, cuda_src, main_src, flags=flags)
    return run(exe, **env), cuda_src


def test_barrier_reached_at_two_call_sites(tmp_root):
    kernel = textwrap.dedent("""
        #include "cuda_runtime.h"
        __global__ void k(int* out) {
          __shared__ int s[64];
          s[threadIdx.x] = threadIdx.x;
          if (threadIdx.x < 32) {
            __syncthreads();
          } else {
            __syncthreads();
          }
          out[threadIdx.x] = s[63 - threadIdx.x];
        }
        """)
    (rc, out), src = _run_kernel(tmp_root, "two_sites", kernel, "k<<<1, 64>>>(out);")
    assert rc == 0 and "FAULT" in out and "divergent __syncthreads" in out, out
    assert f"kernel.cu:{line_of(src, '__syncthreads', 0)}" in out
    assert f"kernel.cu:{line_of(src, '__syncthreads', 1)}" in out


def test_lane_exits_before_a_shuffle(tmp_root):
    kernel = textwrap.dedent("""
        #include "cuda_runtime.h"
        __global__ void k(int* out) {
          if (threadIdx.x == 5) return;
          int v = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
          out[threadIdx.x] = v;
        }
        """)
    (rc, out), src = _run_kernel(tmp_root, "lane_exit", kernel, "k<<<1, 32>>>(out);")
    assert rc == 0 and "FAULT" in out and "exited" in out and "lane" in out and "5" in out, out
    assert f"kernel.cu:{line_of(src, '__shfl_xor_sync')}" in out


def test_correct_shuffle_and_ballot_results(tmp_root):
    kernel = textwrap.dedent("""
        #include "cuda_runtime.h"
        __global__ void k(int* out) {
          int v = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
          unsigned b = __ballot_sync(0xffffffffu, threadIdx.x % 3 == 0);
          unsigned m = __match_any_sync(0xffffffffu, threadIdx.x / 8);
          int s = __shfl_sync(0xffffffffu, (int)threadIdx.x * 10, 7);
          if (threadIdx.x == 0) { out[0] = v; out[1] = (int)b; out[2] = (int)m; out[3] = s; }
        }
        """)
    (rc, out), _ = _run_kernel(tmp_root, "shfl_ok", kernel, "k<<<1, 32>>>(out);")
    want_ballot = sum(1 << i for i in range(32) if i % 3 == 0)
    vals = [int(v) for v in out.split()[1:]]
    assert rc == 0 and out.startswith("OK"), out
    assert vals[0] == 1 and vals[1] == want_ballot - 2**32 * (want_ballot >= 2**31) and vals[2] == 0xff
    assert vals[3] == 70


def test_warp_deadlock_is_reported(tmp_root):
    kernel = textwrap.dedent("""
        #include "cuda_runtime.h"
        __global__ void k(int* out) {
          if (threadIdx.x == 3) {
            __syncthreads();
          } else {
            out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 2);
            __syncthreads();
          }
        }
        """)
    (rc, out), _ = _run_kernel(tmp_root, "deadlock", kernel, "k<<<1, 64>>>(out);",
                               CUEMU_ORDER="reverse")
    assert rc == 0 and "FAULT" in out, out
    assert "deadlock" in out or "divergent" in out or "wait for it" in out, out


def test_shared_memory_is_poisoned_per_block(tmp_root):
    kernel = textwrap.dedent("""
        #include "cuda_runtime.h"
        __global__ void k(int* out) {
          __shared__ int s[32];
          if (blockIdx.x == 0) s[threadIdx.x] = 7;   // block 1 must not see block 0's writes
          __syncthreads();
          out[blockIdx.x * 32 + threadIdx.x] = s[threadIdx.x];
        }
        """)
    (rc, out), _ = _run_kernel(tmp_root, "poison", kernel, "k<<<2, 32>>>(out); ", CUEMU_ORDER="forward")
    assert rc == 0 and out.startswith("OK 7 7"), out
    # block 1 read uninitialised shared memory: every byte 0xFF (a float NaN); under the
    # random order 0xA5, so that a kernel trusting unwritten memory to read as ~0 fails there
    for order, want in (("forward", -1), ("reverse", -1), ("random", 0xA5A5A5A5 - 2**32)):
        (rc, out), _ = _run_kernel(tmp_root, "poison2", kernel, "k<<<2, 32>>>(out); out[0] = out[32];",
                                   CUEMU_ORDER=order)
        assert rc == 0 and out.startswith(f"OK {want} "), (order, out)


@pytest.mark.parametrize("launch,expect", [
    ("k<<<1, 2048>>>(out);", "1024 threads"),
    ("k<<<0, 32>>>(out);", "zero dimension"),
    ("k<<<1, 32, 64 * 1024>>>(out);", "cudaFuncSetAttribute"),
    ("cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024);"
     "k<<<1, 32, 300 * 1024>>>(out);", "at most"),
])
def test_launch_limits(tmp_root, launch, expect):
    kernel = textwrap.dedent("""
        #include "cuda_runtime.h"
        __global__ void k(int* out) { out[threadIdx.x] = 1; }
        """)
    (rc, out), _ = _run_kernel(tmp_root, f"limits_{abs(hash(launch))}", kernel, launch)
    assert rc == 0 and "LAUNCH_ERROR" in out and expect in out, out


def test_dynamic_smem_with_the_attribute_runs(tmp_root):
    kernel = textwrap.dedent("""
        #include "cuda_runtime.h"
        __global__ void k(int* out) {
          extern __shared__ __align__(16) unsigned char smem[];
          int* s = reinterpret_cast<int*>(smem);
          s[16000 + threadIdx.x] = threadIdx.x;
          __syncthreads();
          out[threadIdx.x] = s[16000 + 31 - threadIdx.x];
        }
        """)
    launch = ("cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024);"
              "k<<<1, 32, 100 * 1024>>>(out);")
    (rc, out), _ = _run_kernel(tmp_root, "dyn_ok", kernel, launch)
    assert rc == 0 and out.startswith("OK 31 30"), out


def test_static_shared_memory_over_48k(tmp_root):
    kernel = textwrap.dedent("""
        #include "cuda_runtime.h"
        __global__ void k(int* out) {
          __shared__ float big[13000];   // 52,000 bytes
          big[threadIdx.x] = 1.f;
          out[threadIdx.x] = (int)big[threadIdx.x];
        }
        """)
    (rc, out), _ = _run_kernel(tmp_root, "static48", kernel, "k<<<1, 32>>>(out);")
    assert rc == 0 and "FAULT" in out and "48 KB" in out and "big" in out, out


# ------------------------------------------------------------------------- sanitizers
def _sanitizer_works(tmp_root, flag) -> bool:
    d = tmp_root / f"probe{flag}"
    d.mkdir(exist_ok=True)
    (d / "p.cpp").write_text("int main() { return 0; }\n")
    p = subprocess.run([CXX, flag, str(d / "p.cpp"), "-o", str(d / "p")], capture_output=True)
    return p.returncode == 0 and subprocess.run([str(d / "p")]).returncode == 0


OOB = {
    "shared": """
        __global__ void k(int* out) {
          __shared__ int s[32];
          s[threadIdx.x] = 1;           // 33 threads: thread 32 writes past s
          __syncthreads();
          out[threadIdx.x] = s[threadIdx.x % 32];
        }
        """,
    "global": """
        __global__ void k(int* out) {
          out[threadIdx.x] = 1;         // out holds 32 ints; thread 32 writes past it
        }
        """,
}


@pytest.mark.slow
@pytest.mark.parametrize("where", ["shared", "global"])
def test_address_sanitizer_finds_out_of_bounds_writes(tmp_root, where):
    if not _sanitizer_works(tmp_root, "-fsanitize=address"):
        pytest.fail("AddressSanitizer does not link here (gcc's libasan is expected with g++)")
    kernel = '#include "cuda_runtime.h"\n' + textwrap.dedent(OOB[where])
    launch = ("int* d = nullptr; cudaMalloc((void**)&d, 32 * sizeof(int));"
              "k<<<1, 33>>>(d); cudaFree(d);") if where == "global" else "k<<<1, 33>>>(out);"
    flags = ("-fsanitize=address", "-fno-omit-frame-pointer")
    (rc, out), src = _run_kernel(tmp_root, f"asan_{where}", kernel, launch, flags=flags,
                                 ASAN_OPTIONS="detect_leaks=0")
    assert rc != 0 and "AddressSanitizer" in out and "heap-buffer-overflow" in out, out
    assert "kernel.cu:" in out  # the report names the kernel's source line
    # the same kernel within bounds is clean under ASan
    fixed = kernel.replace("s[threadIdx.x] = 1;", "if (threadIdx.x < 32) s[threadIdx.x] = 1;").replace(
        "out[threadIdx.x] = 1;", "if (threadIdx.x < 32) out[threadIdx.x] = 1;")
    (rc, out), _ = _run_kernel(tmp_root, f"asan_{where}_ok", fixed, launch, flags=flags,
                               ASAN_OPTIONS="detect_leaks=0")
    assert rc == 0 and "AddressSanitizer" not in out, out


@pytest.mark.slow
def test_thread_sanitizer_finds_a_race_between_blocks(tmp_root):
    if not _sanitizer_works(tmp_root, "-fsanitize=thread"):
        pytest.fail("ThreadSanitizer does not link here (gcc's libtsan is expected with g++)")
    racy = textwrap.dedent("""
        #include "cuda_runtime.h"
        __global__ void k(int* out) {
          if (threadIdx.x == 0) out[0] += 1;   // every block, no atomic: a race between blocks
        }
        """)
    flags = ("-fsanitize=thread",)
    (rc, out), _ = _run_kernel(tmp_root, "tsan_race", racy, "k<<<64, 32>>>(out);", flags=flags,
                               CUEMU_THREADS=2, TSAN_OPTIONS="halt_on_error=0 exitcode=66")
    assert "ThreadSanitizer: data race" in out and "kernel.cu:" in out, out
    fixed = racy.replace("out[0] += 1;", "atomicAdd(&out[0], 1);")
    (rc, out), _ = _run_kernel(tmp_root, "tsan_ok", fixed, "k<<<64, 32>>>(out);", flags=flags,
                               CUEMU_THREADS=2, TSAN_OPTIONS="halt_on_error=0 exitcode=66")
    assert rc == 0 and "ThreadSanitizer" not in out and out.startswith("OK 64"), out


def test_sub_warp_shuffles_follow_cuda(tmp_root):
    """width < 32: shfl reads inside the lane's group, up/down keep their own value past the
    group's edge, xor may read an earlier group but not a later one."""
    kernel = textwrap.dedent("""
        #include "cuda_runtime.h"
        __global__ void k(int* out) {
          const int v = (int)threadIdx.x * 10;
          const int a = __shfl_sync(0xffffffffu, v, 3, 8);       // lane 3 of each group of 8
          const int u = __shfl_up_sync(0xffffffffu, v, 2, 8);
          const int d = __shfl_down_sync(0xffffffffu, v, 3, 8);
          const int x = __shfl_xor_sync(0xffffffffu, v, 8, 8);   // 8 lanes away: another group
          if (threadIdx.x == 9) { out[0] = a; out[1] = u; out[2] = d; }
          if (threadIdx.x == 10) { out[3] = u; }
          if (threadIdx.x == 13) { out[4] = d; }
          if (threadIdx.x == 0) { out[5] = x; }
          if (threadIdx.x == 8) { out[6] = x; }
        }
        """)
    (rc, out), _ = _run_kernel(tmp_root, "subwarp", kernel, "k<<<1, 32>>>(out);")
    vals = [int(v) for v in out.split()[1:]]
    assert rc == 0 and out.startswith("OK"), out
    # lane 9 (group 8-15): shfl -> lane 11; up 2 -> its own (9 - 8 < 2); down 3 -> lane 12
    assert vals[:3] == [110, 90, 120]
    assert vals[3] == 80          # lane 10: up 2 -> lane 8
    assert vals[4] == 130         # lane 13: down 3 would be lane 16, the next group -> own
    assert vals[5] == 0           # lane 0: xor 8 -> lane 8, a later group -> own value
    assert vals[6] == 0           # lane 8: xor 8 -> lane 0, an earlier group -> lane 0's value
