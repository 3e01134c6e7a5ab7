// cuemu runtime: fibers, the per-block scheduler, barriers, warp collectives, shared memory,
// launch checks and the host API of the stand-in cuda_runtime.h. See cuemu.h.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cuda_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUEMU_ASAN 1
#endif
#endif
#ifdef CUEMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
#define CUEMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CUEMU_TSAN 1
#endif
#endif
#ifdef CUEMU_TSAN
// ThreadSanitizer's fiber API: each CUDA thread is a TSan fiber, and every switch through the
// block scheduler synchronises (flag 0), so TSan reports races between blocks running on
// different OS threads (CUEMU_THREADS > 1), not the scheduler's own hand-offs.
extern "C" {
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
}
#endif

// Exact-size host allocation (no rounding up), so that AddressSanitizer builds catch a write
// one element past the end of a "device" buffer or a __shared__ array.
static void* exact_alloc(size_t align, size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, align, bytes ? bytes : 1) != 0) return nullptr;
  return p;
}

// ---- context switch (x86-64 System V; other targets use ucontext) ---------------------------
#if defined(__x86_64__)
extern "C" void cuemu_ctx_switch(void** save_sp, void* to_sp);
asm(R"(
    .text
    .globl cuemu_ctx_switch
    .type cuemu_ctx_switch,@function
cuemu_ctx_switch:
    .cfi_startproc
    endbr64
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size cuemu_ctx_switch,.-cuemu_ctx_switch
    .section .note.GNU-stack,"",@progbits
    .text
)");
#else
#include <ucontext.h>
#endif

namespace cuemu {

thread_local ThreadView* tl_view = nullptr;

namespace {

// ---------------------------------------------------------------------------- settings
enum class Order { Forward, Reverse, Random };

struct Settings {
  Order order = Order::Forward;
  uint64_t seed = 1;
  int threads = 1;
  int arch = 90;
  size_t stack_bytes = 256 * 1024;
};

Settings read_settings() {
  Settings s;
  if (const char* o = std::getenv("CUEMU_ORDER")) {
    const std::string v(o);
    if (v == "reverse") s.order = Order::Reverse;
    else if (v == "random") s.order = Order::Random;
    else if (v.empty() || v == "forward") s.order = Order::Forward;
    else throw std::invalid_argument("CUEMU_ORDER: expected forward, reverse or random, got '" + v + "'");
  }
  if (const char* v = std::getenv("CUEMU_SEED")) s.seed = std::strtoull(v, nullptr, 10);
  if (const char* v = std::getenv("CUEMU_THREADS")) s.threads = std::max(1, std::atoi(v));
  if (const char* v = std::getenv("CUEMU_ARCH")) s.arch = std::atoi(v) >= 90 ? 90 : 80;
  if (const char* v = std::getenv("CUEMU_STACK_KB")) s.stack_bytes = std::max<size_t>(64, std::strtoull(v, nullptr, 10)) * 1024;
  return s;
}

// Shared memory limits of the real targets (bytes).
constexpr size_t kStaticSmemLimit = 48 * 1024;
size_t optin_smem_limit(int arch) { return arch >= 90 ? 232448 : 166912; }  // 227 KB / 163 KB

// ------------------------------------------------------------------------------- fibers
struct Stack {
  char* base = nullptr;  // mapping start (guard page)
  size_t size = 0;       // usable bytes above the guard page
  char* lo() const { return base + page(); }
  char* hi() const { return lo() + size; }
  static size_t page() { return (size_t)sysconf(_SC_PAGESIZE); }
};

Stack make_stack(size_t bytes) {
  Stack s;
  s.size = (bytes + Stack::page() - 1) / Stack::page() * Stack::page();
  void* p = mmap(nullptr, s.size + Stack::page(), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  s.base = static_cast<char*>(p);
  mprotect(s.base, Stack::page(), PROT_NONE);  // a fiber overflowing its stack faults here
  return s;
}

// Stacks are reused across blocks and launches (per OS thread).
struct StackPool {
  std::vector<Stack> stacks;
  size_t bytes = 0;
  ~StackPool() {
    for (auto& s : stacks) munmap(s.base, s.size + Stack::page());
  }
  void ensure(size_t n, size_t want) {
    if (want != bytes) {
      for (auto& s : stacks) munmap(s.base, s.size + Stack::page());
      stacks.clear();
      bytes = want;
    }
    while (stacks.size() < n) stacks.push_back(make_stack(bytes));
  }
};
thread_local StackPool tl_stacks;

enum class St { Ready, Barrier, Warp, Done };

struct Block;

struct Thread {
  ThreadView v;
  int linear = 0;
  St st = St::Ready;
  const char* file = nullptr;  // where it waits
  int line = 0;
  void* sp = nullptr;
  Stack stack;
  Block* blk = nullptr;
  bool started = false;
#ifndef __x86_64__
  ucontext_t uc;
#endif
#ifdef CUEMU_ASAN
  void* fake_stack = nullptr;
#endif
#ifdef CUEMU_TSAN
  void* tsan_fiber = nullptr;
#endif
};

struct Warp {
  unsigned arrived = 0;  // lanes waiting in the current collective
  unsigned mask = 0;
  Coll kind = Coll::Sync;
  const char* file = nullptr;
  int line = 0;
  int width = 32;
  unsigned exited = 0;
  uint64_t vals[32];
  int args[32];
  uint64_t results[32];
};

struct Block {
  const LaunchSite* site = nullptr;
  const std::function<void()>* body = nullptr;
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  int live = 0;
  int at_barrier = 0;
  const char* bar_file = nullptr;
  int bar_line = 0;
  int bar_first = -1;
  std::unordered_map<const void*, void*> statics;
  std::vector<void*> allocations;
  size_t static_bytes = 0;
  void* dynamic = nullptr;
  size_t dynamic_bytes = 0;
  size_t smem_limit = 0;
  // the byte shared memory is poisoned with at the block's start: 0xFF (a float read before
  // any write is NaN), 0xA5 under CUEMU_ORDER=random (a kernel that leaves ~0 sentinels
  // unwritten, trusting the 0xFF, reads ordinary garbage there instead)
  unsigned char poison = 0xff;
  void* sched_sp = nullptr;
#ifndef __x86_64__
  ucontext_t sched_uc;
#endif
#ifdef CUEMU_ASAN
  const void* sched_stack_bottom = nullptr;
  size_t sched_stack_size = 0;
  void* sched_fake = nullptr;
#endif
#ifdef CUEMU_TSAN
  void* sched_tsan = nullptr;
#endif
  std::string fault;
};

thread_local Block* tl_block = nullptr;
thread_local Thread* tl_thread = nullptr;

std::string site_str(const char* file, int line) {
  std::string f = file ? file : "?";
  const auto slash = f.rfind("/csrc/");
  if (slash != std::string::npos) f = f.substr(slash + 1);
  return f + ":" + std::to_string(line);
}

std::string tid_str(const Thread& t) {
  std::ostringstream o;
  o << "thread " << t.linear << " (" << t.v.thread_idx.x << "," << t.v.thread_idx.y << ","
    << t.v.thread_idx.z << ")";
  return o.str();
}

// Compact list of thread numbers: "0-31, 64, 96-127".
std::string ranges(const std::vector<int>& ids) {
  std::ostringstream o;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (i) o << ", ";
    o << ids[i];
    if (j > i) o << "-" << ids[j];
    i = j + 1;
  }
  return o.str();
}

// Back to the scheduler. The caller has set its state; returns when rescheduled.
void yield_to_scheduler(Thread& t, bool final_exit = false) {
  Block& b = *t.blk;
#ifdef CUEMU_TSAN
  __tsan_switch_to_fiber(b.sched_tsan, 0);
#endif
#ifdef CUEMU_ASAN
  __sanitizer_start_switch_fiber(final_exit ? nullptr : &t.fake_stack, b.sched_stack_bottom, b.sched_stack_size);
#endif
#if defined(__x86_64__)
  cuemu_ctx_switch(&t.sp, b.sched_sp);
#else
  swapcontext(&t.uc, &b.sched_uc);
#endif
#ifdef CUEMU_ASAN
  __sanitizer_finish_switch_fiber(t.fake_stack, &b.sched_stack_bottom, &b.sched_stack_size);
#endif
  (void)final_exit;
}

// A fault inside a kernel: recorded, and this thread never runs again.
[[noreturn]] void kernel_fault(const std::string& msg) {
  Thread* t = tl_thread;
  Block& b = *t->blk;
  if (b.fault.empty()) b.fault = msg;
  t->st = St::Done;
  yield_to_scheduler(*t, true);
  std::abort();  // never resumed
}

void release_barrier(Block& b) {
  for (auto& t : b.threads)
    if (t.st == St::Barrier) t.st = St::Ready;
  b.at_barrier = 0;
  b.bar_file = nullptr;
  b.bar_first = -1;
}

std::string coll_name(Coll k) {
  switch (k) {
    case Coll::Sync: return "__syncwarp";
    case Coll::Shfl: return "__shfl_sync";
    case Coll::ShflXor: return "__shfl_xor_sync";
    case Coll::ShflUp: return "__shfl_up_sync";
    case Coll::ShflDown: return "__shfl_down_sync";
    case Coll::Ballot: return "__ballot_sync";
    case Coll::Any: return "__any_sync";
    case Coll::All: return "__all_sync";
    case Coll::MatchAny: return "__match_any_sync";
  }
  return "?";
}

std::string lanes_str(unsigned m) {
  std::vector<int> l;
  for (int i = 0; i < 32; ++i)
    if (m >> i & 1u) l.push_back(i);
  return ranges(l);
}

// Thread exit: it no longer holds back barriers; a warp collective waiting for it is a bug.
void on_exit(Thread& t) {
  Block& b = *t.blk;
  b.live--;
  Warp& w = b.warps[(size_t)(t.linear / 32)];
  const int lane = t.linear % 32;
  w.exited |= 1u << lane;
  if (w.arrived && (w.mask >> lane & 1u)) {
    std::ostringstream o;
    o << "lane " << lane << " of warp " << t.linear / 32 << " (" << tid_str(t) << ") exited while lanes "
      << lanes_str(w.arrived) << " wait for it in " << coll_name(w.kind) << " at " << site_str(w.file, w.line)
      << " (mask 0x" << std::hex << w.mask << ")";
    if (b.fault.empty()) b.fault = o.str();
    return;
  }
  if (b.at_barrier > 0 && b.at_barrier == b.live) release_barrier(b);
}

extern "C" void cuemu_fiber_main() {
  Thread& t = *tl_thread;
  Block& b = *t.blk;
#ifdef CUEMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b.sched_stack_bottom, &b.sched_stack_size);
#endif
  try {
    (*b.body)();
  } catch (const std::exception& e) {
    if (b.fault.empty()) b.fault = tid_str(t) + ": " + e.what();
  } catch (...) {
    if (b.fault.empty()) b.fault = tid_str(t) + ": unknown exception";
  }
  t.st = St::Done;
  on_exit(t);
  yield_to_scheduler(t, true);
  std::abort();
}

void start_fiber(Thread& t) {
#ifdef CUEMU_ASAN
  // the stack is reused: drop the redzones of the frames its last fiber left behind
  __asan_unpoison_memory_region(t.stack.lo(), t.stack.size);
#endif
#if defined(__x86_64__)
  // Initial frame popped by cuemu_ctx_switch: mxcsr/fpu cw, r15..rbp, return address.
  uintptr_t top = reinterpret_cast<uintptr_t>(t.stack.hi()) & ~uintptr_t(15);
  uint64_t* sp = reinterpret_cast<uint64_t*>(top - 8 * 10);  // sp % 16 == 0 here
  sp = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(sp) - 8);  // sp % 16 == 8: entry sees an aligned call
  uint32_t mxcsr;
  uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  std::memset(sp, 0, 8 * 9);
  std::memcpy(sp, &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(sp) + 4, &fpucw, 2);
  // sp[0] mxcsr/fpu cw, sp[1..6] r15 r14 r13 r12 rbx rbp, sp[7] the return address;
  // sp[8] (0) is the fake return address of cuemu_fiber_main, where unwinders stop
  sp[7] = reinterpret_cast<uint64_t>(&cuemu_fiber_main);
  t.sp = sp;
#else
  getcontext(&t.uc);
  t.uc.uc_stack.ss_sp = t.stack.lo();
  t.uc.uc_stack.ss_size = t.stack.size;
  t.uc.uc_link = nullptr;
  makecontext(&t.uc, (void (*)())cuemu_fiber_main, 0);
#endif
}

void resume(Block& b, Thread& t) {
  tl_thread = &t;
  tl_view = &t.v;
  if (!t.started) {
    t.started = true;
    start_fiber(t);
#ifdef CUEMU_TSAN
    t.tsan_fiber = __tsan_create_fiber(0);
#endif
  }
#ifdef CUEMU_TSAN
  b.sched_tsan = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(t.tsan_fiber, 0);
#endif
#ifdef CUEMU_ASAN
  __sanitizer_start_switch_fiber(&b.sched_fake, t.stack.lo(), t.stack.size);
#endif
#if defined(__x86_64__)
  cuemu_ctx_switch(&b.sched_sp, t.sp);
#else
  swapcontext(&b.sched_uc, &t.uc);
#endif
#ifdef CUEMU_ASAN
  __sanitizer_finish_switch_fiber(b.sched_fake, nullptr, nullptr);
#endif
  tl_thread = nullptr;
  tl_view = nullptr;
}

std::string deadlock_report(const Block& b) {
  std::map<std::string, std::vector<int>> at;
  for (const auto& t : b.threads) {
    if (t.st == St::Done) continue;
    std::string where = t.st == St::Barrier ? "__syncthreads at " + site_str(t.file, t.line)
                                            : "a warp collective at " + site_str(t.file, t.line);
    at[where].push_back(t.linear);
  }
  std::ostringstream o;
  o << "deadlock: no thread can proceed;";
  for (auto& kv : at) o << " threads " << ranges(kv.second) << " wait in " << kv.first << ";";
  for (size_t w = 0; w < b.warps.size(); ++w) {
    const Warp& wp = b.warps[w];
    if (!wp.arrived) continue;
    o << " warp " << w << " " << coll_name(wp.kind) << " (mask 0x" << std::hex << wp.mask << std::dec
      << ") misses lanes " << lanes_str(wp.mask & ~wp.arrived) << ";";
  }
  return o.str();
}

std::vector<int> pass_order(int n, Order order, std::mt19937_64& rng) {
  std::vector<int> idx((size_t)n);
  for (int i = 0; i < n; ++i) idx[(size_t)i] = i;
  if (order == Order::Reverse) std::reverse(idx.begin(), idx.end());
  if (order == Order::Random) std::shuffle(idx.begin(), idx.end(), rng);
  return idx;
}

struct GridRun {
  const LaunchSite* site;
  const std::function<void()>* body;
  dim3 grid, block;
  size_t dynamic_smem, smem_limit;
  Settings settings;
};

// Runs one block to completion (or its first fault); returns the fault, empty if none.
std::string run_block(const GridRun& g, uint64_t linear_block, std::mt19937_64& rng) {
  const int n = (int)(g.block.x * g.block.y * g.block.z);
  Block b;
  b.site = g.site;
  b.body = g.body;
  b.smem_limit = g.smem_limit;
  b.poison = g.settings.order == Order::Random ? 0xa5 : 0xff;
  b.threads.resize((size_t)n);
  b.warps.resize((size_t)((n + 31) / 32));
  b.live = n;
  tl_stacks.ensure((size_t)n, g.settings.stack_bytes);
  const uint3 bidx{(unsigned)(linear_block % g.grid.x), (unsigned)(linear_block / g.grid.x % g.grid.y),
                   (unsigned)(linear_block / ((uint64_t)g.grid.x * g.grid.y))};
  for (int i = 0; i < n; ++i) {
    Thread& t = b.threads[(size_t)i];
    t.linear = i;
    t.blk = &b;
    t.stack = tl_stacks.stacks[(size_t)i];
    t.v.thread_idx = uint3{(unsigned)(i % g.block.x), (unsigned)(i / g.block.x % g.block.y),
                           (unsigned)(i / (g.block.x * g.block.y))};
    t.v.block_idx = bidx;
    t.v.block_dim = g.block;
    t.v.grid_dim = g.grid;
  }
  // the tail warp's missing lanes count as exited (they never existed)
  if (n % 32) b.warps.back().exited = ~0u << (n % 32);
  b.dynamic_bytes = g.dynamic_smem;
  b.dynamic = exact_alloc(16, g.dynamic_smem);
  std::memset(b.dynamic, b.poison, std::max<size_t>(g.dynamic_smem, 1));
  Block* saved_block = tl_block;
  tl_block = &b;
  // Warp-greedy: a warp keeps running until all its lanes wait at __syncthreads or have
  // exited, as a GPU may let one warp run far ahead of the others between barriers. So a
  // missing __syncthreads (a warp reading what another has not written yet) shows.
  const int nwarps = (n + 31) / 32;
  while (b.live > 0 && b.fault.empty()) {
    bool progress = false;
    for (int w : pass_order(nwarps, g.settings.order, rng)) {
      for (bool warp_progress = true; warp_progress && b.fault.empty();) {
        warp_progress = false;
        for (int l : pass_order(std::min(32, n - 32 * w), g.settings.order, rng)) {
          Thread& t = b.threads[(size_t)(32 * w + l)];
          if (t.st != St::Ready) continue;
          warp_progress = progress = true;
          resume(b, t);
          if (!b.fault.empty()) break;
        }
      }
      if (!b.fault.empty()) break;
    }
    if (!progress && b.live > 0 && b.fault.empty()) b.fault = deadlock_report(b);
  }
  tl_block = saved_block;
#ifdef CUEMU_TSAN
  for (auto& t : b.threads)
    if (t.tsan_fiber) __tsan_destroy_fiber(t.tsan_fiber);
#endif
  for (void* p : b.allocations) std::free(p);
  std::free(b.dynamic);
  if (b.fault.empty()) return {};
  std::ostringstream o;
  o << "block (" << bidx.x << "," << bidx.y << "," << bidx.z << "): " << b.fault;
  return o.str();
}

// ------------------------------------------------------------------- errors and attributes
thread_local cudaError_t tl_last_error = cudaSuccess;  // cleared by cudaGetLastError
thread_local cudaError_t tl_message_code = cudaSuccess; // kept for cudaGetErrorString
thread_local std::string tl_last_message;

void set_error(cudaError_t e, const std::string& msg) {
  tl_last_error = e;
  tl_message_code = e;
  tl_last_message = msg;
}

std::mutex g_attr_mutex;
std::unordered_map<const void*, int>& max_dynamic_smem() {
  static std::unordered_map<const void*, int> m;
  return m;
}

}  // namespace

// ---------------------------------------------------------------------- public runtime
void fail_outside_kernel(const char* what) {
  throw std::logic_error(std::string("cuemu: ") + what + " read outside a kernel");
}

void fail(const std::string& message) {
  if (tl_thread == nullptr) throw std::logic_error("cuemu: " + message);
  kernel_fault(tid_str(*tl_thread) + ": " + message);
}

void syncthreads(const char* file, int line) {
  Thread* tp = tl_thread;
  if (tp == nullptr) fail_outside_kernel("__syncthreads");
  Thread& t = *tp;
  Block& b = *t.blk;
  if (b.at_barrier > 0 && (b.bar_line != line || std::strcmp(b.bar_file, file) != 0)) {
    std::vector<int> waiting;
    for (const auto& o : b.threads)
      if (o.st == St::Barrier) waiting.push_back(o.linear);
    kernel_fault("divergent __syncthreads: " + tid_str(t) + " reached " + site_str(file, line) +
                 " while threads " + ranges(waiting) + " wait at " + site_str(b.bar_file, b.bar_line));
  }
  const int lane = t.linear % 32;
  const Warp& w = b.warps[(size_t)(t.linear / 32)];
  if (w.arrived && (w.mask >> lane & 1u) && !(w.arrived >> lane & 1u)) {
    kernel_fault(tid_str(t) + " reached __syncthreads at " + site_str(file, line) + " while lanes " +
                 lanes_str(w.arrived) + " of its warp wait for it in " + coll_name(w.kind) + " at " +
                 site_str(w.file, w.line));
  }
  if (b.at_barrier == 0) {
    b.bar_file = file;
    b.bar_line = line;
    b.bar_first = t.linear;
  }
  b.at_barrier++;
  t.st = St::Barrier;
  t.file = file;
  t.line = line;
  if (b.at_barrier == b.live) release_barrier(b);
  yield_to_scheduler(t);
}

uint64_t warp_collective(Coll kind, unsigned mask, uint64_t value, int arg, int width, const char* file,
                         int line) {
  Thread* tp = tl_thread;
  if (tp == nullptr) fail_outside_kernel(coll_name(kind).c_str());
  Thread& t = *tp;
  Block& b = *t.blk;
  const int lane = t.linear % 32;
  Warp& w = b.warps[(size_t)(t.linear / 32)];
  const std::string here = coll_name(kind) + " at " + site_str(file, line);
  if (!(mask >> lane & 1u))
    kernel_fault(tid_str(t) + " (lane " + std::to_string(lane) + ") called " + here +
                 " with a mask that does not name it (0x" + [&] { std::ostringstream o; o << std::hex << mask; return o.str(); }() + ")");
  if (width < 1 || width > 32 || (width & (width - 1)))
    kernel_fault(here + ": width must be a power of two in [1, 32], got " + std::to_string(width));
  if (mask & w.exited)
    kernel_fault(tid_str(t) + " reached " + here + " but lanes " + lanes_str(mask & w.exited) +
                 " named in its mask have exited");
  if (w.arrived) {
    const bool same_site = w.line == line && std::strcmp(w.file, file) == 0;
    if (w.kind != kind || w.mask != mask || (kind != Coll::Sync && !same_site)) {
      std::ostringstream o;
      o << "warp " << t.linear / 32 << " diverged: lane " << lane << " reached " << here << " (mask 0x"
        << std::hex << mask << ") while lanes " << lanes_str(w.arrived) << " wait in " << coll_name(w.kind)
        << " at " << site_str(w.file, w.line) << " (mask 0x" << w.mask << ")";
      kernel_fault(o.str());
    }
  } else {
    w.kind = kind;
    w.mask = mask;
    w.file = file;
    w.line = line;
    w.width = width;
  }
  w.vals[lane] = value;
  w.args[lane] = arg;
  w.arrived |= 1u << lane;
  t.file = file;
  t.line = line;
  t.st = St::Warp;
  if ((w.arrived & mask) == mask) {
    // everyone is here: compute every lane's result, release them
    uint64_t ballot = 0;
    for (int l = 0; l < 32; ++l)
      if ((mask >> l & 1u) && w.vals[l]) ballot |= 1ull << l;
    for (int l = 0; l < 32; ++l) {
      if (!(mask >> l & 1u)) continue;
      const int seg = l & ~(w.width - 1);
      int src = l;
      switch (kind) {
        case Coll::Sync: w.results[l] = 0; continue;
        case Coll::Ballot: w.results[l] = ballot; continue;
        case Coll::Any: w.results[l] = ballot != 0; continue;
        case Coll::All: w.results[l] = ballot == (uint64_t)mask; continue;
        case Coll::MatchAny: {
          uint64_t m = 0;
          for (int o = 0; o < 32; ++o)
            if ((mask >> o & 1u) && w.vals[o] == w.vals[l]) m |= 1ull << o;
          w.results[l] = m;
          continue;
        }
        case Coll::Shfl: src = seg + (w.args[l] & (w.width - 1)); break;
        // CUDA: a lane may read an earlier width-group; a later one gives its own value
        case Coll::ShflXor: src = l ^ w.args[l]; if (src >= seg + w.width) src = l; break;
        case Coll::ShflUp: src = (l - seg) >= w.args[l] ? l - w.args[l] : l; break;
        case Coll::ShflDown: src = (l - seg) + w.args[l] < w.width ? l + w.args[l] : l; break;
      }
      if (src < 0 || src > 31 || !(mask >> src & 1u)) {
        std::ostringstream o;
        o << here << ": lane " << l << " reads lane " << src << ", which is not in the mask 0x" << std::hex
          << mask << " (undefined on a GPU)";
        kernel_fault(o.str());
      }
      w.results[l] = w.vals[src];
    }
    for (int l = 0; l < 32; ++l)
      if (mask >> l & 1u) b.threads[(size_t)((t.linear / 32) * 32 + l)].st = St::Ready;
    w.arrived = 0;
  }
  yield_to_scheduler(t);
  return w.results[lane];
}

void* shared_static(const void* site, size_t bytes, size_t align, const char* name, const char* file, int line) {
  Thread* tp = tl_thread;
  if (tp == nullptr) fail_outside_kernel("__shared__ memory");
  Block& b = *tp->blk;
  auto it = b.statics.find(site);
  if (it != b.statics.end()) return it->second;
  b.static_bytes += bytes;
  if (b.static_bytes > kStaticSmemLimit)
    kernel_fault("static __shared__ memory reaches " + std::to_string(b.static_bytes) + " bytes with '" + name +
                 "' (" + site_str(file, line) + "); the limit is 48 KB (49152 bytes)");
  if (b.static_bytes + b.dynamic_bytes > b.smem_limit)
    kernel_fault("static (" + std::to_string(b.static_bytes) + ") + dynamic (" + std::to_string(b.dynamic_bytes) +
                 ") shared memory exceeds the device's " + std::to_string(b.smem_limit) + " bytes per block");
  const size_t al = std::max<size_t>(align, 16);
  void* p = exact_alloc(al, bytes);
  std::memset(p, b.poison, bytes);  // poisoned: a read before any write shows
  b.allocations.push_back(p);
  b.statics.emplace(site, p);
  return p;
}

void* shared_dynamic(const char* file, int line) {
  Thread* tp = tl_thread;
  if (tp == nullptr) fail_outside_kernel("extern __shared__ memory");
  (void)file;
  (void)line;
  return tp->blk->dynamic;
}

void set_max_dynamic_smem(const void* fn, int bytes) {
  std::lock_guard<std::mutex> lock(g_attr_mutex);
  max_dynamic_smem()[fn] = bytes;
}

namespace {
struct AtomicCounters {
  std::atomic<uint64_t> launches{0}, memsets{0}, copies_d2h{0}, copies_other{0}, syncs{0}, allocs{0};
  std::atomic<uint64_t> device_ns{0};
};
thread_local int t_device_depth = 0;
uint64_t now_ns() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}
AtomicCounters g_counters;
}  // namespace

Counters counters() {
  return Counters{g_counters.launches.load(), g_counters.memsets.load(), g_counters.copies_d2h.load(),
                  g_counters.copies_other.load(), g_counters.syncs.load(), g_counters.allocs.load(),
                  g_counters.device_ns.load()};
}
void reset_counters() {
  g_counters.launches = 0;
  g_counters.memsets = 0;
  g_counters.copies_d2h = 0;
  g_counters.copies_other = 0;
  g_counters.syncs = 0;
  g_counters.allocs = 0;
  g_counters.device_ns = 0;
}
void add_device_ns(uint64_t ns) { g_counters.device_ns += ns; }
namespace {
std::atomic<bool> g_dry_run{false};
}
void set_dry_run(bool on) { g_dry_run = on; }
bool dry_run() { return g_dry_run.load(std::memory_order_relaxed); }
DeviceTime::DeviceTime() : start_(now_ns()), outer_(t_device_depth++ == 0) {}
DeviceTime::~DeviceTime() {
  --t_device_depth;
  if (outer_) add_device_ns(now_ns() - start_);
}
void count_launch() { ++g_counters.launches; }
namespace {
std::atomic<bool> g_log_on{false};
std::mutex g_log_mutex;
std::vector<LaunchRecord> g_log;
}  // namespace
void set_launch_log(bool on) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  g_log_on = on;
  g_log.clear();
}
void log_launch(const char* kernel, uint64_t blocks, uint32_t threads) {
  if (!g_log_on.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(g_log_mutex);
  g_log.push_back(LaunchRecord{kernel, "", blocks, threads, 0});
}
std::vector<LaunchRecord> take_launch_log() {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  std::vector<LaunchRecord> out;
  out.swap(g_log);
  return out;
}
void count_memset() { ++g_counters.memsets; }
void count_copy(bool d2h, bool blocking) {
  if (d2h) ++g_counters.copies_d2h; else ++g_counters.copies_other;
  if (blocking || d2h) ++g_counters.syncs;  // a D2H copy's result is read by the host
}
void count_sync() { ++g_counters.syncs; }
void count_alloc() { ++g_counters.allocs; }

void run_grid(const LaunchSite& site, dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream,
              const std::function<void()>& body) {
  (void)stream;
  count_launch();
  const DeviceTime device_time;
  const std::string where = "kernel " + std::string(site.name) + " launched at " + site_str(site.file, site.line);
  GridRun g{&site, &body, grid, block, dynamic_smem, 0, read_settings()};
  g.smem_limit = optin_smem_limit(g.settings.arch);
  const uint64_t threads = (uint64_t)block.x * block.y * block.z;
  std::ostringstream bad;
  if (block.x == 0 || block.y == 0 || block.z == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0)
    bad << "grid (" << grid.x << "," << grid.y << "," << grid.z << ") or block (" << block.x << "," << block.y
        << "," << block.z << ") has a zero dimension";
  else if (threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
    bad << "block (" << block.x << "," << block.y << "," << block.z << ") exceeds 1024 threads or the per-dimension limits";
  else if (grid.x > 2147483647u || grid.y > 65535u || grid.z > 65535u)
    bad << "grid (" << grid.x << "," << grid.y << "," << grid.z << ") exceeds the grid dimension limits";
  if (!bad.str().empty()) {
    set_error(cudaErrorInvalidConfiguration, "invalid configuration argument: " + where + ": " + bad.str());
    return;
  }
  if (dynamic_smem > kStaticSmemLimit) {
    int allowed = 0;
    {
      std::lock_guard<std::mutex> lock(g_attr_mutex);
      auto it = max_dynamic_smem().find(site.fn);
      if (it != max_dynamic_smem().end()) allowed = it->second;
    }
    if ((size_t)allowed < dynamic_smem || dynamic_smem > g.smem_limit) {
      set_error(cudaErrorInvalidValue,
                "invalid argument: " + where + " asks for " + std::to_string(dynamic_smem) +
                    " bytes of dynamic shared memory; above 48 KB that needs cudaFuncSetAttribute("
                    "cudaFuncAttributeMaxDynamicSharedMemorySize) (set: " + std::to_string(allowed) +
                    ") and at most " + std::to_string(g.smem_limit) + " bytes on sm_" + std::to_string(g.settings.arch));
      return;
    }
  }
  if (g_log_on.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log.push_back(LaunchRecord{std::string(site.name), site_str(site.file, site.line),
                                 (uint64_t)grid.x * grid.y * grid.z, (uint32_t)threads, dynamic_smem});
  }
  if (dry_run()) return;  // checked and counted, not run (cuemu.h)
  const uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
  std::vector<uint64_t> order((size_t)nblocks);
  for (uint64_t i = 0; i < nblocks; ++i) order[(size_t)i] = i;
  // random: a fresh permutation per launch (CUEMU_SEED and the launch's number in the process),
  // so two calls of one op can order their atomics differently, as two calls on a GPU do (the
  // sixth H100 session found 9 tests comparing unsorted select_k answers elementwise; one
  // fixed permutation per grid gave both calls the same order)
  static std::atomic<uint64_t> launch_serial{0};
  const uint64_t launch_no = launch_serial.fetch_add(1) + 1;
  const uint64_t seed = g.settings.order == Order::Random
      ? g.settings.seed + 0x9E3779B97F4A7C15ull * launch_no : g.settings.seed;
  std::mt19937_64 rng(seed);
  if (g.settings.order == Order::Reverse) std::reverse(order.begin(), order.end());
  if (g.settings.order == Order::Random) std::shuffle(order.begin(), order.end(), rng);

  std::string fault;
  const int nthreads = (int)std::min<uint64_t>((uint64_t)g.settings.threads, nblocks);
  if (nthreads <= 1) {
    for (uint64_t blk : order) {
      fault = run_block(g, blk, rng);
      if (!fault.empty()) break;
    }
  } else {
    std::atomic<uint64_t> next{0};
    std::atomic<bool> stop{false};
    std::mutex m;
    std::vector<std::thread> pool;
    for (int w = 0; w < nthreads; ++w) {
      pool.emplace_back([&, w]() {
        std::mt19937_64 local(seed + (uint64_t)w + 1);
        for (;;) {
          const uint64_t i = next.fetch_add(1);
          if (i >= nblocks || stop.load()) return;
          std::string f = run_block(g, order[(size_t)i], local);
          if (!f.empty()) {
            std::lock_guard<std::mutex> lock(m);
            if (fault.empty()) fault = f;
            stop = true;
            return;
          }
        }
      });
    }
    for (auto& th : pool) th.join();
  }
  if (!fault.empty()) {
    set_error(cudaErrorLaunchFailure, "cuemu: " + where + ", " + fault);
    throw std::runtime_error("cuemu: " + where + ", " + fault);
  }
}

}  // namespace cuemu

// ------------------------------------------------------------------------------ host API
using cuemu::set_error;

namespace {
const char* error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}
}  // namespace

const char* cudaGetErrorName(cudaError_t e) { return error_name(e); }

const char* cudaGetErrorString(cudaError_t e) {
  // the detailed message of the most recent error of this kind on this thread
  if (e != cudaSuccess && !cuemu::tl_last_message.empty() && cuemu::tl_message_code == e)
    return cuemu::tl_last_message.c_str();
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = cuemu::tl_last_error;
  cuemu::tl_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return cuemu::tl_last_error; }
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d != 0) {
    set_error(cudaErrorInvalidDevice, "invalid device ordinal: the emulator has device 0 only");
    return cudaErrorInvalidDevice;
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  const int arch = cuemu::read_settings().arch;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 49152; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    // few SMs, so that grids sized by the SM count still have several blocks per row and
    // stay quick to emulate; CUEMU_SMS sets another count (132: an H100's grids, for the
    // launch log of a dry run, benchmarks/launch_shapes_emu.py)
    case cudaDevAttrMultiProcessorCount: {
      const char* v = std::getenv("CUEMU_SMS");
      *value = v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : 4;
      break;
    }
    case cudaDevAttrComputeCapabilityMajor: *value = arch / 10; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)cuemu::optin_smem_limit(arch); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 0;  // 0: the emulator, not a CUDA runtime
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  cuemu::count_sync();
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  cuemu::count_sync();
  return cudaSuccess;
}

namespace {
// Device allocations are host allocations poisoned with 0xFF (cudaMalloc does not zero).
void* emu_alloc(size_t bytes) {
  void* p = exact_alloc(256, bytes);
  if (p) std::memset(p, 0xff, bytes);
  return p;
}
}  // namespace

cudaError_t cudaMalloc(void** p, size_t bytes) {
  cuemu::count_alloc();
  *p = emu_alloc(bytes);
  if (*p == nullptr) {
    set_error(cudaErrorMemoryAllocation, "out of memory");
    return cudaErrorMemoryAllocation;
  }
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) { return cudaMalloc(p, bytes); }
cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
namespace {
void emu_copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}
}  // namespace
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  cuemu::count_memset();
  const cuemu::DeviceTime device_time;
  if (bytes && !cuemu::dry_run()) std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) { return cudaMemset(p, value, bytes); }
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  cuemu::count_copy(kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDefault, true);
  const cuemu::DeviceTime device_time;
  emu_copy(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  cuemu::count_copy(kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDefault, false);
  const cuemu::DeviceTime device_time;
  emu_copy(dst, src, bytes);
  return cudaSuccess;
}
struct cudaMemPoolEmu {
  int device;
};
cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  *pool = new cudaMemPoolEmu{props ? props->location.id : 0};
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return cudaSuccess; }
cudaError_t cudaMallocFromPoolAsync(void** p, size_t bytes, cudaMemPool_t, cudaStream_t s) {
  return cudaMallocAsync(p, bytes, s);
}
