// When and how wide the CPU kernels run in parallel (issue 23: busy machines).
//
// A RAG server shares its cores with tokenisers, web workers and other requests. There an
// OpenMP region pays for itself only when its work dwarfs thread start-up and barriers:
// a barrier waits for the slowest thread, and on an oversubscribed machine that thread may
// be descheduled for a whole time slice (milliseconds). So every op runs serially below
// kParallelGrain units of work (about 1 ms of one core), and the width of every region is
// rasfast::max_threads(): the cap set with rasfast.set_num_threads(n) (all threads of the
// process), else OpenMP's default (OMP_NUM_THREADS, else the core count) limited to the cores
// that other processes leave idle at the time of the call.
#pragma once

#include <dirent.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

namespace rasfast {

// ~1 ms of scalar work on one core; "work" is the op's inner-loop element count (a
// multiply-add, a key compared, a byte scanned).
constexpr int64_t kParallelGrain = int64_t(1) << 22;

inline std::atomic<int>& thread_cap() {
  static std::atomic<int> cap{0};  // 0: OpenMP's default
  return cap;
}

// The calling thread's OpenMP width before an op narrowed it for its own torch work
// (enter_threads, rasfast/_threads.py), 0 outside such an op. A kernel the op calls takes its
// width from this, not from the narrowed one: the op's scope sizes the op's torch work, and
// must not make its kernel serial (issue 31).
inline int& op_outer_width() {
  static thread_local int width = 0;
  return width;
}

inline int max_threads() {
  const int cap = thread_cap().load(std::memory_order_relaxed);
  if (cap > 0) return cap;
  const int outer = op_outer_width();
  return outer > 0 ? outer : omp_get_max_threads();
}

// Threads of this process that are runnable now (state R in /proc/self/task/*/stat): this
// thread, and OpenMP or torch workers still spinning after their last region. They are not
// "other work": without subtracting them a call right after another would see the machine
// busy with its own idle spinners.
inline int running_threads_of_this_process() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char path[64];
      std::snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
      if (std::FILE* f = std::fopen(path, "r")) {
        char state = 0;  // "pid (comm) S ...": comm may hold spaces, so scan from the last ')'
        char buf[512];
        const size_t len = std::fread(buf, 1, sizeof buf - 1, f);
        buf[len] = 0;
        if (const char* r = std::strrchr(buf, ')')) state = r[1] == ' ' ? r[2] : 0;
        n += state == 'R';
        std::fclose(f);
      }
    }
    closedir(d);
  }
  return n < 1 ? 1 : n;
}

// Cores not busy with other work right now: the processor count minus the other runnable
// tasks (/proc/loadavg's "running" field counts this thread too), at least 1. OpenMP threads
// beyond the idle cores only time-slice against the other processes, and every barrier
// then waits for a descheduled thread (a 2-thread theme search took 1.45x its 1-thread time
// with both cores busy). Where /proc is absent, every core.
inline int idle_cores_now() {
  const int procs = omp_get_num_procs();
  int idle = procs;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    int running = 0, total = 0;
    if (std::fscanf(f, "%*f %*f %*f %d/%d", &running, &total) == 2 && running >= 1)
      idle = procs - (running - running_threads_of_this_process());
    std::fclose(f);
  }
  return idle < 1 ? 1 : (idle > procs ? procs : idle);
}

inline std::atomic<int64_t>& idle_stamp() { static std::atomic<int64_t> s{0}; return s; }
inline std::atomic<int>& idle_cached() { static std::atomic<int> c{0}; return c; }

// idle_cores_now(), read at most every 10 ms.
inline int idle_cores() {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  const int c = idle_cached().load(std::memory_order_relaxed);
  if (c > 0 && now - idle_stamp().load(std::memory_order_relaxed) < 10) return c;
  const int idle = idle_cores_now();
  idle_cached().store(idle, std::memory_order_relaxed);
  idle_stamp().store(now, std::memory_order_relaxed);
  return idle;
}

// Regions of at least this much work look twice before they narrow: one reading of
// /proc/loadavg sees another runnable task at ~1.5% of instants on a quiet 2-core VM (a
// short-lived process, a kernel worker), and a training layer's backward (~3 s) taken at
// half width for such a blip cost more than a whole layer's attention. Two more readings
// 0.3 ms apart (<= 1% of a region this large) must agree that the cores are busy.
constexpr int64_t kSettledWork = 64 * kParallelGrain;

// Kept 10 ms like idle_cores(), so back-to-back large calls on a busy machine pay the two
// re-readings once per 10 ms, not once a call.
inline int idle_cores_settled() {
  static std::atomic<int64_t> stamp{0};
  static std::atomic<int> cached{0};
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  const int c = cached.load(std::memory_order_relaxed);
  if (c > 0 && now - stamp.load(std::memory_order_relaxed) < 10) return c;
  const int procs = omp_get_num_procs();
  int idle = idle_cores();
  for (int i = 0; i < 2 && idle < procs; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    const int again = idle_cores_now();
    if (again > idle) idle = again;
  }
  idle_cached().store(idle, std::memory_order_relaxed);
  cached.store(idle, std::memory_order_relaxed);
  stamp.store(now, std::memory_order_relaxed);
  return idle;
}

// Threads for a region of `work` units: 1 below the grain, else up to one per grain of work,
// at most max_threads() and, unless the user set the cap, at most the idle cores.
inline int threads_for(int64_t work) {
  if (work < 2 * kParallelGrain) return 1;
  const int64_t by_work = work / kParallelGrain;
  int n = max_threads();
  if (thread_cap().load(std::memory_order_relaxed) == 0) {
    const int idle = work >= kSettledWork ? idle_cores_settled() : idle_cores();
    n = idle < n ? idle : n;
  }
  return by_work < n ? static_cast<int>(by_work) : n;
}

inline bool parallel_worth_it(int64_t work) { return work >= 2 * kParallelGrain; }

}  // namespace rasfast

namespace rasfast {

// Sets the width of every OpenMP region an entry point starts (from this calling thread:
// the nthreads ICV is per thread, so concurrent Python threads do not interfere) to
// threads_for(work), and restores it on exit. Per-thread tables sized with
// omp_get_max_threads() inside the call see the same width.
class ThreadScope {
 public:
  explicit ThreadScope(int64_t work) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads_for(work));
  }
  ~ThreadScope() { omp_set_num_threads(saved_); }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
};

}  // namespace rasfast
