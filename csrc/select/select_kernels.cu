// select_k, CUDA backend: exact radix select on unique composite keys, with candidate
// filtering, no host synchronisation and no allocation.
//
// Every entry i of a row gets a unique composite key c = (key << I) | i: its order-preserving
// K-bit key (K = 32 for float32, 16 for float16/bfloat16; -0.0 == +0.0; NaN above +inf, as in
// torch.sort; inverted for largest) and its index in the low I = bits(N) bits. The contract's
// answer (the k smallest keys, ties by lower index) is exactly the k smallest composites, and
// the k-th composite T is unique, so the answer is {c <= T}: no tie pass.
//  1. Radix passes over 11-bit digits of c, most significant first, ceil((K + I) / 11)
//     launches. A pass histograms, in shared memory, the digit of the entries matching the
//     prefix fixed so far and adds it to the row's global histogram; the row's last block to
//     finish (an atomic ticket) scans the 2048 bins with the whole block and fixes the digit.
//     A row is done once the chosen bin holds exactly the entries still wanted: its later
//     passes return at once (with random floats, after the second or third pass).
//     The second pass filters (AIR top-k, RAFT/cuVS): it writes the entries below the first
//     digit's range straight to the output (all of them are answers) and copies the entries
//     in the range to a buffer (N/8 per row); later passes read that buffer, and copy what
//     still matches to ping-pong buffers, instead of the row. An overflowing buffer sends
//     the next pass back to the row (or to the first buffer).
//  2. The final write reads the first buffer (the row if it overflowed or never ran) and
//     writes the range's answers (c <= T) at per-row atomic positions, warp-aggregated.
//     So the row is read twice in all (passes one and two) when the first digit's range
//     fits the buffer; the answers come out unordered (sorted=False returns them so).
//  3. sorted: k <= 2048: one block per row sorts its k composites in shared memory (bitonic);
//     k <= 16,384: one block per row radix-sorts them in shared memory (sort_rows_radix);
//     rows of up to 65,536 entries with k <= 16,384 take the whole select in one launch
//     (select_rows_small, select_rows_small_sorted);
//     larger k: cub::DeviceRadixSort over (row-in-group, c). Indices and values are decoded
//     from the sorted composites.
// Scratch is the caller's workspace (select_k_workspace_bytes), zeroed by one memset, so a
// call is memset + passes + write (+ sort) launches, and can be captured in a CUDA graph.
// Loads are 16 bytes wide where the row's alignment allows (a scalar head and tail).
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <cstdlib>
#include <type_traits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_info.h"
#include "common/dtype.h"
#include "select/select_cuda.h"

namespace rasfast {
namespace {

constexpr int kThreads = 256;
constexpr int kDigitBits = 11;
constexpr int kBins = 1 << kDigitBits;
constexpr int kBinsPerThread = kBins / kThreads;
constexpr int kSmallSortK = 2048;  // sorted rows up to this k are sorted in shared memory
constexpr int kSortThreads = 512;
constexpr unsigned kFull = 0xffffffffu;

// Per row, zeroed by the launcher's one memset.
struct __align__(16) SelState {
  unsigned long long prefix;  // fixed high bits of the k-th composite
  unsigned long long mask;    // which bits are fixed
  long long n_less;           // entries below the prefix's range: all selected
  unsigned int done;          // every entry in the prefix's range is selected too
  unsigned int src;           // where the next pass reads: 0 the row, 1 buf[0], 2 buf[1]
  unsigned int count[2];      // entries written to buf[0] / buf[1] (past cap: overflowed)
  unsigned int out_count;     // answers written so far (second pass and final write)
  unsigned int s1;            // the first filter: 0 did not run, 1 its buffer holds the range, 2 overflowed
  unsigned long long p1_prefix, p1_mask;  // the range the first filter kept
  unsigned int s1_count;      // entries in the first-filter buffer (past cap: overflowed)
  unsigned int pad[3];
};

// Order-preserving keys on the raw storage words (no float conversion).
template <DType D> struct RawKey;
// Branch-free (selects, no branches): the row passes run this once per entry.
template <> struct RawKey<DType::F32> {
  using W = uint32_t;
  static constexpr int K = 32;
  static __device__ __forceinline__ uint32_t key(uint32_t u, bool largest) {
    const uint32_t a = u & 0x7fffffffu;
    u = a == 0 ? 0u : u;                    // -0.0 -> +0.0
    u = a > 0x7f800000u ? 0x7fffffffu : u;  // NaN (either sign) -> the largest key, above +inf
    const uint32_t k = u ^ ((uint32_t)((int32_t)u >> 31) | 0x80000000u);  // negative: ~u; else u | sign
    return k ^ (largest ? 0xffffffffu : 0u);
  }
  // The word a key came from, where the key determines it: false for a zero (-0.0 and +0.0
  // share a key) and a NaN (every NaN shares one), whose word the caller reads from the row.
  static __device__ __forceinline__ bool word(uint32_t key, bool largest, uint32_t* w) {
    const uint32_t k = key ^ (largest ? 0xffffffffu : 0u);
    const uint32_t u = (k & 0x80000000u) ? (k ^ 0x80000000u) : ~k;
    *w = u;
    return (u & 0x7fffffffu) != 0 && u != 0x7fffffffu;
  }
};
template <uint32_t kInf> struct Raw16Key {
  using W = uint16_t;
  static constexpr int K = 16;
  static __device__ __forceinline__ uint32_t key(uint16_t w, bool largest) {
    uint32_t u = w;
    const uint32_t a = u & 0x7fffu;
    u = a == 0 ? 0u : u;
    u = a > kInf ? 0x7fffu : u;
    const uint32_t k = u ^ ((u & 0x8000u) ? 0xffffu : 0x8000u);
    return k ^ (largest ? 0xffffu : 0u);
  }
  static __device__ __forceinline__ bool word(uint32_t key, bool largest, uint16_t* w) {  // as F32's
    const uint32_t k = (key ^ (largest ? 0xffffu : 0u)) & 0xffffu;
    const uint32_t u = (k & 0x8000u) ? (k ^ 0x8000u) : (~k & 0xffffu);
    *w = (uint16_t)u;
    return (u & 0x7fffu) != 0 && u != 0x7fffu;
  }
};
template <> struct RawKey<DType::F16> : Raw16Key<0x7c00u> {};
template <> struct RawKey<DType::BF16> : Raw16Key<0x7f80u> {};

constexpr int kUnroll = 4;  // 16-byte loads per thread in flight
struct alignas(16) V16 {
  uint32_t w[4];
};

__device__ __forceinline__ void chunk_of(int64_t n, int blk, int nblk, int64_t* lo, int64_t* hi) {
  const int64_t chunk = (n + nblk - 1) / nblk;
  *lo = min(n, (int64_t)blk * chunk);
  *hi = min(n, *lo + chunk);
}

// row[lo, hi) split for 16-byte loads: a scalar head [lo, a), whole vectors [a, b) (nvec of
// them, 16 / sizeof(W) entries each), a scalar tail [b, hi); nscalar = head + tail.
struct VecSplit {
  int64_t head, a, nvec, b, nscalar;
};

template <class W>
__device__ __forceinline__ VecSplit vec_split(const W* row, int64_t lo, int64_t hi) {
  constexpr int E = 16 / (int)sizeof(W);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(row + lo);
  int64_t head = (int64_t)(((16 - (addr & 15)) & 15) / sizeof(W));
  if (addr % sizeof(W) != 0) head = hi - lo;  // never for a tensor's storage: all scalar
  head = min(head, hi - lo);
  VecSplit v;
  v.head = head;
  v.a = lo + head;
  v.nvec = (hi - v.a) / E;
  v.b = v.a + v.nvec * E;
  v.nscalar = head + (hi - v.b);
  return v;
}

// A compile-time count of word slots: f(Slots<S>{}, ...) lets f unroll over exactly S
// entries (4 for float32's 16-byte loads, 8 for 16-bit words, 1 for a scalar) instead of
// kVec predicated slots, which for float32 doubled the element loop's instructions.
template <int S>
using Slots = std::integral_constant<int, S>;

// Calls g(pack, v) for row[a, b)'s whole 16-byte vectors, kUnroll a thread at a time:
// pack[u] is vector v + u * blockDim.x of the split (entries a + (v + u * blockDim.x) * E on),
// loaded when that is below nvec, else zero. Every thread of the block calls g equally often,
// so g may use warp collectives.
template <class W, class G>
__device__ __forceinline__ void for_vector_groups(const W* row, const VecSplit& sp, G& g) {
  constexpr int E = 16 / (int)sizeof(W);
  // kUnroll 16-byte loads in flight per thread before the first is used (the passes over
  // the row are bandwidth-bound: one load at a time left them at 40% of the copy rate)
  const int64_t step = (int64_t)blockDim.x * kUnroll;
  for (int64_t v0 = 0; v0 < sp.nvec; v0 += step) {
    const int64_t v = v0 + threadIdx.x;
    V16 pack[kUnroll] = {};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t vu = v + (int64_t)u * blockDim.x;
      if (vu < sp.nvec) pack[u] = *reinterpret_cast<const V16*>(row + sp.a + vu * E);
    }
    g(pack, v);
  }
}

// Entry e of a 16-byte vector's words, split with shifts (little-endian), not through a W
// pointer into the pack.
template <class W>
__device__ __forceinline__ W word_of(const V16& pack, int e) {
  return (W)(pack.w[e * sizeof(W) / 4] >> (8 * ((e * sizeof(W)) % 4)));
}

// Calls f(Slots<1>{}, w, i, m) for the scalar head and tail of row[lo, hi) (split sp), one
// entry a thread (m = 0 where a thread has none). Every thread of the block calls f equally
// often, so f may use warp collectives.
template <class W, class F>
__device__ __forceinline__ void for_scalars(const W* row, int64_t lo, const VecSplit& sp, F& f) {
  for (int64_t t0 = 0; t0 < sp.nscalar; t0 += blockDim.x) {
    const int64_t t = t0 + threadIdx.x;
    int64_t i = 0;
    int m = 0;
    W w[1] = {W(0)};
    if (t < sp.nscalar) {
      i = t < sp.a - lo ? lo + t : sp.b + (t - (sp.a - lo));
      w[0] = row[i];
      m = 1;
    }
    f(Slots<1>{}, w, i, m);
  }
}

// Calls f(Slots<S>{}, w, i0, m) for the words of row[lo, hi): w[0..m) are entries i0,
// i0 + 1, ..., m <= S. Every thread of the block calls f equally often (m may be 0), so f
// may use warp collectives. 16-byte loads between a scalar head and tail.
template <class W, class F>
__device__ __forceinline__ void for_words(const W* row, int64_t lo, int64_t hi, F& f) {
  constexpr int E = 16 / (int)sizeof(W);
  const VecSplit sp = vec_split(row, lo, hi);
  for_scalars(row, lo, sp, f);
  auto g = [&](const V16 (&pack)[kUnroll], int64_t v) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t vu = v + (int64_t)u * blockDim.x;
      const int m = vu < sp.nvec ? E : 0;
      W w[E];
#pragma unroll
      for (int e = 0; e < E; ++e) w[e] = word_of<W>(pack[u], e);
      f(Slots<E>{}, w, sp.a + vu * E, m);
    }
  };
  for_vector_groups(row, sp, g);
}

// Reserves m slots of *counter for this lane, warp-aggregated (one atomic per warp);
// returns the lane's first slot. Every lane of the warp must call it.
__device__ __forceinline__ unsigned warp_reserve(unsigned* counter, unsigned m) {
  const unsigned lane = threadIdx.x & 31;
  unsigned incl = m;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const unsigned v = __shfl_up_sync(kFull, incl, d);
    if ((int)lane >= d) incl += v;
  }
  const unsigned total = __shfl_sync(kFull, incl, 31);
  unsigned base = 0;
  if (lane == 31 && total) base = atomicAdd(counter, total);
  base = __shfl_sync(kFull, base, 31);
  return base + incl - m;
}

__device__ __forceinline__ unsigned long long low_bits(int bits) {
  return bits >= 64 ? ~0ull : ((1ull << bits) - 1);
}

// The value of an answer from its composite c (key above bit ibits, index below): from the key
// where it determines the word, else read from the row. Decoding sorted answers then streams
// instead of reading 2-4 bytes at random per answer (the sixth H100 session: decode_sorted
// 58 of 573 us of a 16 x 1M float32 select at k = 250,000).
template <DType D>
__device__ __forceinline__ typename RawKey<D>::W value_of(unsigned long long c, int ibits, bool largest,
                                                         const typename RawKey<D>::W* row) {
  typename RawKey<D>::W w;
  if (RawKey<D>::word((uint32_t)((c >> ibits) & low_bits(RawKey<D>::K)), largest, &w)) return w;
  return row[c & low_bits(ibits)];
}

// Writes a row's first k sorted composites sk[0..k) as indices and values (the on-chip sorts'
// last step; every thread of the block calls it).
template <DType D>
__device__ __forceinline__ void write_sorted(const unsigned long long* sk, int64_t k, int ibits, bool largest,
                                             const typename RawKey<D>::W* row, int64_t* out_idx,
                                             typename RawKey<D>::W* out_vals) {
  const unsigned long long imask = low_bits(ibits);
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
    const unsigned long long c = sk[i];
    out_idx[i] = (int64_t)(c & imask);
    out_vals[i] = value_of<D>(c, ibits, largest, row);
  }
}

// Where the answers go. mode 0: index and value; 1: the composite (sorted on chip next);
// 2: the composite with the row-in-group above bit tb (for a device-wide sort).
template <class W>
struct Out {
  int mode;
  int tb;
  int64_t k, group;
  int64_t* idx;
  W* vals;
  unsigned long long* keys;
  __device__ __forceinline__ void put(int64_t r, unsigned slot, unsigned long long c, int64_t i, W v) const {
    if ((int64_t)slot >= k) return;
    const size_t o = (size_t)r * (size_t)k + slot;
    if (mode == 0) {
      idx[o] = i;
      vals[o] = v;
    } else {
      keys[o] = (mode == 2 ? (unsigned long long)(r % group) << tb : 0ull) | c;
    }
  }
};

// What a radix pass writes besides its histogram, fixed at compile time so that each
// kind of pass is its own lean kernel: the first pass over a 1M-entry row, which only
// histograms, no longer carries the filter's and the copy's code and registers (one kernel
// for all three was 4,171 SASS instructions per 16 float32 entries, 63 registers; see
// docs/gpu.md, "select_k on the GPU").
// How a row pass tests an entry (radix_pass, below).
enum RowForm : int { kNoPrefix = 0, kKeyPrefix = 1, kComposite = 2 };
template <int F>
using RowFormOf = std::integral_constant<int, F>;

// Resident blocks per SM the row passes are compiled for (registers: 65,536 / (256 x
// blocks)). The histogram alone fits 32 registers without spills (ptxas, sm_80 and sm_90),
// so a full SM; the filtering passes hold their composites and fit 64.
constexpr int kHistBlocksPerSM = 8;
constexpr int kCopyBlocksPerSM = 4;

enum PassMode : int {
  kHistOnly = 0,     // the histogram only (the first pass; the last when it is not the second)
  kFirstFilter = 1,  // the second pass: below-range entries to the output, the range to s1buf
  kWriteBuf = 2,     // a middle pass: what still matches to a ping-pong buffer
  kFirstFilterPerVector = 3,  // kFirstFilter as the sixth H100 session timed it (RASFAST_SELECT_GROUPED=0)
};

// RASFAST_SELECT_GROUPED=0: the second and third radix passes as the sixth H100 session
// timed them (the first filter testing and committing per 16-byte vector; the third pass on an
// eighth of the grid), so that a run times both in the same session. Default: grouped.
bool select_grouped() {
  const char* env = std::getenv("RASFAST_SELECT_GROUPED");
  return !(env && env[0] == '0' && env[1] == '\0');
}

// The digit of a radix pass: the bin holding the want-th (1-based) of the entries counted
// in hist's kBins bins, each thread of the block owning kBins / Threads consecutive ones. The
// one thread whose bins hold it gets true, the digit, the count below the bin and the bin's
// count; every thread of the block must call it (a block scan). Shared by the radix passes
// (the row's last block, reading the global histogram) and the short-row select (shared).
template <int Threads, class Hist>
__device__ __forceinline__ bool pick_digit(Hist hist, unsigned long long want,
                                           typename cub::BlockScan<unsigned, Threads>::TempStorage& tmp,
                                           unsigned* digit, unsigned* below, unsigned* count) {
  constexpr int kPer = kBins / Threads;
  unsigned v[kPer];
  unsigned sum = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    v[j] = hist[threadIdx.x * kPer + j];
    sum += v[j];
  }
  unsigned before = 0;
  cub::BlockScan<unsigned, Threads>(tmp).ExclusiveSum(sum, before);
  if (!(before < want && before + sum >= want)) return false;
  unsigned cum = before;
  bool found = false;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (!found && cum + v[j] >= want) {
      found = true;
      *digit = (unsigned)(threadIdx.x * kPer + j);
      *below = cum;
      *count = v[j];
    }
    cum += v[j];
  }
  return true;
}

// The first filter (the second radix pass) over a row's whole 16-byte vectors (split sp).
// An entry is a candidate when its key is at most the top key of the prefix's range, key_max:
// every entry in the range (composite c with (c & M) == P) and every one below it (c < P)
// is one, and in the composite form (the digit reaching into the index bits) a few past the
// range are too, which the exact test drops. One compare an entry and one warp vote per
// kUnroll vectors a thread: a group no lane of the warp flags costs nothing more (at k = 10 on
// random rows, almost every group). A flagged group tests its candidates exactly, counts the
// in-range ones in the block's histogram h, and writes below-range ones to the output and
// in-range ones to the copy buffer (past cap: counted, not written; the next pass rereads
// the row), both reserved in one warp scan. Every thread of the block calls it equally often.
template <DType D>
__device__ __forceinline__ void filter_vector_groups(
    const typename RawKey<D>::W* row, const VecSplit& sp, bool largest, int ibits, int shift, unsigned dmask,
    unsigned long long P, unsigned long long M, unsigned* h, int64_t r, unsigned* out_cnt, unsigned* copy_cnt,
    unsigned long long* copy_to, int64_t cap, const Out<typename RawKey<D>::W>& out) {
  using W = typename RawKey<D>::W;
  constexpr int E = 16 / (int)sizeof(W);
  constexpr uint32_t kKeyMask = RawKey<D>::K == 32 ? 0xffffffffu : 0xffffu;
  // entry e's key in a group's keys (placed as word_of reads a word)
  auto key_at = [](const V16& keys, int e) -> uint32_t {
    return (keys.w[e * sizeof(W) / 4] >> (8 * ((e * sizeof(W)) % 4))) & kKeyMask;
  };
  static_assert(kUnroll * E <= 32, "a group's candidates are bits of one word");
  const uint32_t key_max = (uint32_t)((P | (~M & low_bits(RawKey<D>::K + ibits))) >> ibits);
  auto g = [&](const V16 (&pack)[kUnroll], int64_t v) {
    // the keys replace the words in the pack's registers (16-bit keys two a word): the
    // flagged entries' keys are read again below, and a word is read back from its key
    // (value_of: from the row only for a zero or a NaN); holding the words and the keys
    // both spilled (ptxas: 312 bytes a thread for 16-bit rows at 64 registers)
    V16 keys[kUnroll];
    uint32_t cand = 0;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      uint32_t cu = 0;
#pragma unroll
      for (int q = 0; q < 4; ++q) keys[u].w[q] = 0;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const uint32_t key = RawKey<D>::key(word_of<W>(pack[u], e), largest);
        keys[u].w[e * sizeof(W) / 4] |= key << (8 * ((e * sizeof(W)) % 4));
        if (key <= key_max) cu |= 1u << e;
      }
      if (v + (int64_t)u * blockDim.x < sp.nvec) cand |= cu << (u * E);  // else not loaded
    }
    if (!__any_sync(kFull, cand != 0)) return;
    // the exact test: in the range (histogram, buffer) or below it (output). This loop and
    // the writes' below are spelled out: one lambda over the flagged entries for both cost
    // 2 instructions an entry more on the "lane" path (select_sass_model.py, sm_90)
    uint32_t hit = 0, low = 0;
    if (cand) {  // most lanes hold none at k = 10,000 (2-3% of entries), and skip the loop
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const uint32_t bit = 1u << (u * E + e);
        if (cand & bit) {
          const uint64_t i = (uint64_t)(sp.a + (v + (int64_t)u * blockDim.x) * E + e);
          const unsigned long long c = ((unsigned long long)key_at(keys[u], e) << ibits) | i;
          if ((c & M) == P) {
            atomicAdd(&h[(unsigned)(c >> shift) & dmask], 1u);
            hit |= bit;
          } else if (c < P) {
            low |= bit;
          }
        }
      }
    }
    }
    // one warp scan reserves both: below-range counts in the low half-word, in-range ones in
    // the high (a warp's total of either is at most 32 x 32, so no carry crosses)
    const unsigned nlow = __popc(low), nhit = __popc(hit);
    const unsigned lane = threadIdx.x & 31;
    unsigned incl = nlow | (nhit << 16);
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const unsigned x = __shfl_up_sync(kFull, incl, d);
      if ((int)lane >= d) incl += x;
    }
    const unsigned total = __shfl_sync(kFull, incl, 31);
    unsigned base_low = 0, base_hit = 0;
    if (lane == 31) {
      if (total & 0xffffu) base_low = atomicAdd(out_cnt, total & 0xffffu);
      if (total >> 16) base_hit = atomicAdd(copy_cnt, total >> 16);
    }
    unsigned slot_low = __shfl_sync(kFull, base_low, 31) + (incl & 0xffffu) - nlow;
    unsigned slot_hit = __shfl_sync(kFull, base_hit, 31) + (incl >> 16) - nhit;
    const uint32_t put = hit | low;
    if (put) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const uint32_t bit = 1u << (u * E + e);
        if (put & bit) {
          const uint64_t i = (uint64_t)(sp.a + (v + (int64_t)u * blockDim.x) * E + e);
          const unsigned long long c = ((unsigned long long)key_at(keys[u], e) << ibits) | i;
          if (low & bit) {
            out.put(r, slot_low++, c, (int64_t)i, value_of<D>(c, ibits, largest, row));
          } else {
            if (slot_hit < (unsigned)cap) copy_to[slot_hit] = c;
            ++slot_hit;
          }
        }
      }
    }
    }
  };
  for_vector_groups(row, sp, g);
}

// One radix pass: the histogram of digit [shift, shift + dbits) of the entries matching the
// row's prefix; the row's last block fixes the digit. The second pass (kFirstFilter) also
// writes the entries below the prefix's range to the output (all selected) and copies those
// in the range to the row's first-filter buffer, which the next pass and the final write
// read instead of the row; later passes (kWriteBuf) copy them to a ping-pong buffer.
// Sources (state.src): 0 the row, 1 / 2 ping-pong buffer 0 / 1, 3 the first-filter buffer.
template <DType D, int kMode>
__global__ void __launch_bounds__(kThreads, kMode == kHistOnly ? kHistBlocksPerSM : kCopyBlocksPerSM)
radix_pass(const typename RawKey<D>::W* x, int64_t rows, int64_t n, int64_t k, bool largest,
           int ibits, int shift, int dbits, int64_t cap, SelState* st, unsigned* hist,
           unsigned* arrived, unsigned long long* buf, unsigned long long* s1buf,
           Out<typename RawKey<D>::W> out) {
  using W = typename RawKey<D>::W;
  using Scan = cub::BlockScan<unsigned, kThreads>;
  constexpr bool first_filter = kMode == kFirstFilter || kMode == kFirstFilterPerVector;
  constexpr bool grouped = kMode == kFirstFilter;
  constexpr bool copying = kMode != kHistOnly;
  __shared__ unsigned h[kBins];
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int is_last;
  const unsigned dmask = (1u << dbits) - 1u;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const SelState s = st[r];
    if (s.done) continue;  // the same for the whole block
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) h[b] = 0;
    __syncthreads();
    const unsigned long long P = s.prefix, M = s.mask;
    const int wb = s.src == 1 ? 1 : 0;  // the ping-pong buffer not being read
    unsigned long long* copy_to = first_filter
        ? s1buf + (size_t)r * (size_t)cap
        : buf + ((size_t)wb * (size_t)rows + (size_t)r) * (size_t)cap;
    unsigned* copy_cnt = first_filter ? &st[r].s1_count : &st[r].count[wb];
    // c[0..S): composites; w / i0: their words and first index (row sources only)
    // Writes the flagged entries: `low` ones (below the range, first filter) to the output,
    // `hit` ones (in the range) to the copy buffer. c[e] is set for flagged entries only.
    auto commit = [&](auto slots, const unsigned long long* c, const W* w, int64_t i0,
                      unsigned hit, unsigned nhit, unsigned low, unsigned nlow) {
      constexpr int S = decltype(slots)::value;
      if (first_filter && __any_sync(kFull, nlow != 0)) {
        unsigned slot = warp_reserve(&st[r].out_count, nlow);
#pragma unroll
        for (int e = 0; e < S; ++e)
          if (low & (1u << e)) out.put(r, slot++, c[e], i0 + e, w[e]);
      }
      if (__any_sync(kFull, nhit != 0)) {
        unsigned slot = warp_reserve(copy_cnt, nhit);
#pragma unroll
        for (int e = 0; e < S; ++e) {
          if (hit & (1u << e)) {
            if (slot < (unsigned)cap) copy_to[slot] = c[e];
            ++slot;
          }
        }
      }
    };
    if (first_filter || s.src == 0) {  // the first filter always reads the row
      const W* row = x + (size_t)r * (size_t)n;
      int64_t lo, hi;
      chunk_of(n, blockIdx.x, gridDim.x, &lo, &hi);
      // Three forms of the entry test, each its own loop, chosen once per row, not per
      // entry: no prefix yet (the first pass: every entry counts); a prefix and a digit
      // within the key part (the next passes), where the tests and the digit are 32-bit
      // operations on the key and the 64-bit composite is built only for entries that are
      // written; and the general form on the composite.
      const bool key_form = (M & low_bits(ibits)) == 0 && shift >= ibits;
      const uint32_t Mk = (uint32_t)(M >> ibits), Pk = (uint32_t)(P >> ibits);
      const int kshift = shift >= ibits ? shift - ibits : 0;
      // m is 0 or S (for_words): the test is per call, not per entry
      auto on_words = [&](auto slots, auto form, const W* w, int64_t i0, int m) {
        constexpr int S = decltype(slots)::value;
        constexpr int F = decltype(form)::value;
        if (!copying) {  // the histogram alone (no warp collective: a thread may skip)
          if (m == 0) return;
#pragma unroll
          for (int e = 0; e < S; ++e) {
            const uint32_t key = RawKey<D>::key(w[e], largest);
            if (F == kNoPrefix) {
              atomicAdd(&h[(key >> kshift) & dmask], 1u);
            } else if (F == kKeyPrefix) {
              if ((key & Mk) == Pk) atomicAdd(&h[(key >> kshift) & dmask], 1u);
            } else {
              const unsigned long long ce = ((unsigned long long)key << ibits) | (unsigned long long)(i0 + e);
              if ((ce & M) == P) atomicAdd(&h[(unsigned)(ce >> shift) & dmask], 1u);
            }
          }
          return;
        }
        constexpr bool kKey = F != kComposite;
        unsigned long long c[S];
        unsigned hit = 0, nhit = 0, low = 0, nlow = 0;
        if (m != 0) {
#pragma unroll
          for (int e = 0; e < S; ++e) {
            c[e] = 0;
            const uint32_t key = RawKey<D>::key(w[e], largest);
            const unsigned long long ce = ((unsigned long long)key << ibits) | (unsigned long long)(i0 + e);
            const bool match = kKey ? (key & Mk) == Pk : (ce & M) == P;
            if (match) {
              const unsigned d = kKey ? (key >> kshift) & dmask : (unsigned)(ce >> shift) & dmask;
              atomicAdd(&h[d], 1u);
              c[e] = ce;
              hit |= 1u << e;
              ++nhit;
            } else if (first_filter && (kKey ? key < Pk : ce < P)) {
              c[e] = ce;
              low |= 1u << e;
              ++nlow;
            }
          }
        }
        commit(slots, c, w, i0, hit, nhit, low, nlow);
      };
      // visit(f) with f the entry test of the row's form, chosen once per row
      auto with_form = [&](auto visit) {
        if (!copying && M == 0 && shift >= ibits) {  // the first pass
          auto f = [&](auto slots, const W* w, int64_t i0, int m) {
            on_words(slots, RowFormOf<kNoPrefix>{}, w, i0, m);
          };
          visit(f);
        } else if (key_form) {
          auto f = [&](auto slots, const W* w, int64_t i0, int m) {
            on_words(slots, RowFormOf<kKeyPrefix>{}, w, i0, m);
          };
          visit(f);
        } else {
          auto f = [&](auto slots, const W* w, int64_t i0, int m) {
            on_words(slots, RowFormOf<kComposite>{}, w, i0, m);
          };
          visit(f);
        }
      };
      if (first_filter && grouped) {
        // The second pass over the row, its 16-byte vectors a group of kUnroll a thread at a
        // time (16 float32 or 32 16-bit entries): one compare an entry against the range's
        // top key and one warp vote a group; only a group some lane of the warp flags sorts
        // its entries into in-range (histogram, buffer) and below-range (output) ones, and
        // reserves the slots of both in one warp scan. Per 16-byte vector, as on_words does,
        // the sixth H100 session counted 54 instructions an entry in this pass (86.6 us
        // against the histogram pass's 35.7 over the same 64 MB): an entry's composite was
        // built and tested twice whether it was wanted or not, and every vector that any lane
        // of the warp wrote took two votes and up to two warp scans for four entries.
        const VecSplit sp = vec_split(row, lo, hi);
        with_form([&](auto& f) { for_scalars(row, lo, sp, f); });
        filter_vector_groups<D>(row, sp, largest, ibits, shift, dmask, P, M, h, r, &st[r].out_count, copy_cnt,
                                copy_to, cap, out);
      } else {
        with_form([&](auto& f) { for_words(row, lo, hi, f); });
      }
    } else {
      const unsigned long long* in = s.src == 3
          ? s1buf + (size_t)r * (size_t)cap
          : buf + ((size_t)(s.src - 1) * (size_t)rows + (size_t)r) * (size_t)cap;
      const unsigned avail = s.src == 3 ? s.s1_count : (s.src == 1 ? s.count[0] : s.count[1]);
      int64_t lo, hi;
      chunk_of((int64_t)avail, blockIdx.x, gridDim.x, &lo, &hi);
      // kUnroll entries a thread loaded before any is tested, one vote (and, where a lane
      // of the warp keeps one, one warp scan) for all of them: one entry at a time, the
      // sixth H100 session measured this pass at 16.3 us for 2.2 MB (16 x 1M float32,
      // k = 10,000: ~17 dependent loads a thread, 12% occupancy)
      const W none[kUnroll] = {};
      const int64_t step = (int64_t)blockDim.x * kUnroll;
      for (int64_t t0 = lo + threadIdx.x; t0 - threadIdx.x < hi; t0 += step) {
        unsigned long long c[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t i = t0 + (int64_t)u * blockDim.x;
          c[u] = i < hi ? in[i] : 0ull;
        }
        unsigned hit = 0, nhit = 0;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (t0 + (int64_t)u * blockDim.x < hi && (c[u] & M) == P) {
            atomicAdd(&h[(unsigned)(c[u] >> shift) & dmask], 1u);
            hit |= 1u << u;
            ++nhit;
          }
        }
        // a buffer holds no below-range entries
        if (copying) commit(Slots<kUnroll>{}, c, none, 0, hit, nhit, 0, 0);
      }
    }
    __syncthreads();
    unsigned* gh = hist + (size_t)r * kBins;
    for (int b = threadIdx.x; b < kBins; b += blockDim.x)
      if (h[b]) atomicAdd(&gh[b], h[b]);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(&arrived[r], 1u) == gridDim.x - 1;
    __syncthreads();
    if (is_last) {
      __threadfence();
      volatile unsigned* vh = gh;
      const unsigned long long want = (unsigned long long)(k - s.n_less);  // >= 1
      unsigned digit = 0, below = 0, count = 0;
      if (pick_digit<kThreads>(vh, want, scan_tmp, &digit, &below, &count)) {  // exactly one thread
        SelState* w = &st[r];
        w->n_less = s.n_less + (long long)(below);
        w->prefix = P | ((unsigned long long)digit << shift);
        w->mask = M | ((unsigned long long)dmask << shift);
        w->done = (unsigned long long)count == want - below ? 1u : 0u;
        if (s.src == 1 || s.src == 2) w->count[s.src - 1] = 0;  // the buffer just read is free
        if (first_filter) {
          const unsigned wrote = *(volatile unsigned*)&w->s1_count;
          w->p1_prefix = P;
          w->p1_mask = M;
          w->s1 = wrote <= (unsigned)cap ? 1u : 2u;
          w->src = wrote <= (unsigned)cap ? 3u : 0u;
        } else if (copying) {
          const unsigned wrote = *(volatile unsigned*)&w->count[wb];
          const bool fits = wrote <= (unsigned)cap;
          w->src = fits ? (unsigned)(wb + 1) : (s.s1 == 1 ? 3u : 0u);
          if (!fits) w->count[wb] = 0;
        } else {
          w->src = 0;
        }
      }
#pragma unroll
      for (int j = 0; j < kBinsPerThread; ++j) gh[threadIdx.x * kBinsPerThread + j] = 0;
      if (threadIdx.x == 0) arrived[r] = 0;
    }
    __syncthreads();  // h and is_last are reused for the next row
  }
}

// Writes the answers the radix passes did not (composite <= T, not below the first filter's
// range), unordered: from the first-filter buffer when it held the range, else from the row.
template <DType D>
__global__ void __launch_bounds__(kThreads)
write_selected(const typename RawKey<D>::W* x, int64_t rows, int64_t n, bool largest, int ibits,
               SelState* st, int64_t cap, const unsigned long long* s1buf,
               Out<typename RawKey<D>::W> out) {
  using W = typename RawKey<D>::W;
  const unsigned long long imask = low_bits(ibits);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const SelState s = st[r];
    const unsigned long long T = s.prefix | (~s.mask & low_bits(out.tb));
    unsigned* out_cnt = &st[r].out_count;
    const W* row = x + (size_t)r * (size_t)n;
    // c[0..m) in the range of the first filter (or every entry, when it did not run)
    auto take = [&](auto slots, const unsigned long long* c, const W* w, int m, bool gather) {
      constexpr int S = decltype(slots)::value;
      unsigned hit = 0, nhit = 0;
#pragma unroll
      for (int e = 0; e < S; ++e) {
        if (e < m && c[e] <= T) {
          hit |= 1u << e;
          ++nhit;
        }
      }
      if (!__any_sync(kFull, nhit != 0)) return;
      unsigned slot = warp_reserve(out_cnt, nhit);
#pragma unroll
      for (int e = 0; e < S; ++e) {
        if (hit & (1u << e)) {
          const int64_t i = (int64_t)(c[e] & imask);
          out.put(r, slot++, c[e], i, gather ? (out.mode == 0 ? value_of<D>(c[e], ibits, largest, row) : W(0)) : w[e]);
        }
      }
    };
    if (s.s1 == 1) {
      const unsigned long long* in = s1buf + (size_t)r * (size_t)cap;
      int64_t lo, hi;
      chunk_of((int64_t)s.s1_count, blockIdx.x, gridDim.x, &lo, &hi);
      for (int64_t t0 = lo; t0 < hi; t0 += blockDim.x) {
        const int64_t i = t0 + threadIdx.x;
        unsigned long long c[1] = {0};
        int m = 0;
        if (i < hi) {
          c[0] = in[i];
          m = 1;
        }
        take(Slots<1>{}, c, nullptr, m, true);
      }
    } else {
      int64_t lo, hi;
      chunk_of(n, blockIdx.x, gridDim.x, &lo, &hi);
      const bool in_range_only = s.s1 == 2;  // the below-range entries are already written
      auto on_words = [&](auto slots, const W* w, int64_t i0, int m) {
        constexpr int S = decltype(slots)::value;
        unsigned long long c[S];
#pragma unroll
        for (int e = 0; e < S; ++e) {
          c[e] = e < m ? ((unsigned long long)RawKey<D>::key(w[e], largest) << ibits) | (unsigned long long)(i0 + e) : ~0ull;
          if (in_range_only && (c[e] & s.p1_mask) != s.p1_prefix) c[e] = ~0ull;  // never <= T
        }
        take(slots, c, w, m, false);
      };
      for_words(row, lo, hi, on_words);
    }
  }
}

__device__ __forceinline__ void bitonic_sort_shared(unsigned long long* sk, int pow2) {
  for (int size = 2; size <= pow2; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const int low = stride - 1;  // stride is a power of two: masks, not a division by it
      for (int i = threadIdx.x; i < (pow2 >> 1); i += blockDim.x) {
        const int lo = ((i & ~low) << 1) | (i & low);
        const int hi = lo + stride;
        const bool asc = (lo & size) == 0;
        const unsigned long long a = sk[lo], b = sk[hi];
        if ((a > b) == asc) {
          sk[lo] = b;
          sk[hi] = a;
        }
      }
      __syncthreads();
    }
  }
}

// ---- small k: one filtered pass -------------------------------------------------------
// For k <= kFilterK every block keeps the k smallest composites of its chunk of the row in
// shared memory and a threshold, the k-th of them once it has k: an entry enters the buffer
// only below the threshold, and when the buffer would overflow it is sorted and cut back to
// k, which lowers the threshold. On random data the threshold is the k-th of the first few
// thousand entries after one or two cuts, and almost nothing passes after that, so the row
// is read once, with one compare per entry (the radix passes read it twice: on the H100,
// 57 and 52 us at 37-41% of the copy rate for 16 x 1M float32). The same design as the
// "filtered" warp-sort select that RAFT/cuVS use for small k, at block granularity. A
// second launch sorts each row's blocks' candidates on chip (sort_rows_small) and writes the
// first k. Two launches, no memset; the worst input (every entry beats the threshold: a
// row in descending order for the k smallest) costs one cut per kFilterCap - kFilterK
// entries.
//
// The sixth H100 session timed this pass at 246 us for 16 x 1M float32 at k = 10 (301
// executed instructions per entry), slower than the radix passes, and it is off by default.
// The instructions were the cuts: each block (a wave of 6 per SM: ~20k entries each there)
// filled its 4,096-entry buffer before its first threshold and sorted all of it, 78
// barrier-separated stages of 8 compare-exchanges a thread at 27 SASS instructions each
// (a division per index): ~4.9M thread instructions a block, ~240 per entry. Since then:
//  - for k <= kFilterSampleK the first threshold comes from a sample (kFilterSample entries
//    evenly spaced over the chunk, sorted on chip): its k-th + 1, a valid bound since k
//    composites of the chunk lie at or below it. About k/512 of the chunk passes it, so on
//    random data the buffer never fills and the one cut left is the final one, over
//    next_pow2(~chunk * k / 512) entries (~512 at k = 10);
//  - the sort's index math uses masks (stride is a power of two): 14 SASS instructions a
//    compare-exchange instead of 27 (sm_90), and 36-39 registers instead of 38-40.
// A soft capacity (cuts at 512 entries, several a step when needed) was tried and dropped:
// the loop kept the pending entries live across the cut, 80 registers for 16-bit dtypes.
// Model at that shape (k = 10, ~20k entries a block): the sample's sort and the final cut,
// 45 stages each of one compare-exchange a thread (14 + ~28 for the stage and its barrier),
// ~3.8k instructions a thread, ~48 per entry; the measured 301 less the old cut's ~240
// leaves ~60 for the element loop and the rest, unchanged: ~110 in all. Not yet timed.
constexpr int kFilterK = 256;
constexpr int kFilterCap = 4096;     // composites in a block's buffer (32 KB)
constexpr int kFilterSampleK = 64;   // the sampled first threshold, up to this k
constexpr int kFilterSample = 512;   // entries in that sample (2 a thread)
constexpr int kFilterMerge = 4096;   // candidates per row the merge sorts on chip (32 KB)
constexpr int kFilterThreads = 256;
constexpr int kFilterEntries = 8;    // entries per thread and step from 16-byte loads

// Sorts the buffer's first min(*cnt, cap) composites, keeps the k smallest and makes the
// k-th the threshold (none while fewer than k). Every thread of the block calls it, after a
// barrier that follows every write of *cnt.
__device__ __forceinline__ void filter_cut(unsigned long long* buf, unsigned* cnt,
                                           unsigned long long* thr, int k) {
  const unsigned n = min(*cnt, (unsigned)kFilterCap);
  int pow2 = 1;
  while (pow2 < (int)n) pow2 <<= 1;
  for (int i = (int)n + threadIdx.x; i < pow2; i += blockDim.x) buf[i] = ~0ull;
  __syncthreads();
  bitonic_sort_shared(buf, pow2);  // ends with a barrier
  if (threadIdx.x == 0) {
    *cnt = min(n, (unsigned)k);
    *thr = n >= (unsigned)k ? buf[k - 1] : ~0ull;
  }
  __syncthreads();
}

template <DType D>
__global__ void __launch_bounds__(kFilterThreads)
filter_topk(const typename RawKey<D>::W* x, int64_t rows, int64_t n, int k, bool largest,
            int ibits, unsigned long long* cand) {
  using W = typename RawKey<D>::W;
  constexpr int E = 16 / (int)sizeof(W);
  constexpr int NL = kFilterEntries / E;   // 16-byte loads per thread and step
  constexpr int S = NL * E + 1;            // entries per thread and step: the loads, 1 scalar
  static_assert(kFilterThreads * S <= kFilterCap - kFilterK, "one cut per step must make room");
  static_assert(kFilterSample >= kFilterSampleK && kFilterSample % kFilterThreads == 0, "a sample holds k");
  __shared__ unsigned long long buf[kFilterCap];
  __shared__ unsigned cnt;
  __shared__ unsigned long long thr;
  // over[s % 3]: some entry of step s found the buffer full. Three slots, so that the reset
  // of a step's flag (thread 0, one step later) never meets a write or a read of it.
  __shared__ unsigned over[3];
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    if (threadIdx.x == 0) {
      cnt = 0;
      thr = ~0ull;
      over[0] = over[1] = over[2] = 0;
    }
    __syncthreads();
    const W* row = x + (size_t)r * (size_t)n;
    int64_t lo, hi;
    chunk_of(n, blockIdx.x, gridDim.x, &lo, &hi);
    if (k <= kFilterSampleK && hi - lo >= (int64_t)kFilterSample * 4) {
      // the first threshold from kFilterSample entries evenly spaced over the chunk: the k-th
      // of them + 1 (k composites of the chunk lie below it, so nothing at or above it is
      // an answer)
      for (int t = threadIdx.x; t < kFilterSample; t += blockDim.x) {
        const int64_t i = lo + (hi - lo) * t / kFilterSample;
        buf[t] = ((unsigned long long)RawKey<D>::key(row[i], largest) << ibits) | (unsigned long long)i;
      }
      __syncthreads();
      bitonic_sort_shared(buf, kFilterSample);  // ends with a barrier
      if (threadIdx.x == 0) thr = buf[k - 1] + 1;  // < ~0: composites have at most 63 bits
      __syncthreads();
    }
    // 16-byte loads over [a, b), scalars over the head [lo, a) and the tail [b, hi)
    const VecSplit sp = vec_split(row, lo, hi);
    const int64_t head = sp.head, a = sp.a, nvec = sp.nvec, b = sp.b, nscalar = sp.nscalar;
    const int64_t vstep = (int64_t)blockDim.x * NL;
    const int64_t steps = max((nvec + vstep - 1) / vstep, (nscalar + blockDim.x - 1) / blockDim.x);
    for (int64_t s = 0; s < steps; ++s) {
      V16 pack[NL];
      int64_t vi[NL];
#pragma unroll
      for (int u = 0; u < NL; ++u) {
        const int64_t v = s * vstep + (int64_t)u * blockDim.x + threadIdx.x;
        vi[u] = v < nvec ? a + v * E : -1;
        if (v < nvec) pack[u] = *reinterpret_cast<const V16*>(row + vi[u]);
      }
      const int64_t t = s * blockDim.x + threadIdx.x;
      const int64_t si = t < nscalar ? (t < head ? lo + t : b + (t - head)) : -1;
      const W sw = si >= 0 ? row[si] : W(0);
      // entry j: word and index
      auto word = [&](int j) -> W {
        if (j == S - 1) return sw;
        const int u = j / E, e = j % E;
        return (W)(pack[u].w[e * sizeof(W) / 4] >> (8 * ((e * sizeof(W)) % 4)));
      };
      auto index = [&](int j) -> int64_t { return j == S - 1 ? si : (vi[j / E] < 0 ? -1 : vi[j / E] + j % E); };
      auto comp = [&](int j) -> unsigned long long {
        return ((unsigned long long)RawKey<D>::key(word(j), largest) << ibits) | (unsigned long long)index(j);
      };
      const unsigned long long T = thr;
      unsigned pend = 0;
#pragma unroll
      for (int j = 0; j < S; ++j)
        if (index(j) >= 0 && comp(j) < T) pend |= 1u << j;
      // stores what fits; what does not stays pending (its slot is past the buffer)
      auto store = [&]() {
        const unsigned np = (unsigned)__popc(pend);
        if (!__any_sync(kFull, np != 0)) return;
        unsigned slot = warp_reserve(&cnt, np);
#pragma unroll
        for (int j = 0; j < S; ++j) {
          if (pend & (1u << j)) {
            if (slot < (unsigned)kFilterCap) {
              buf[slot] = comp(j);
              pend &= ~(1u << j);
            }
            ++slot;
          }
        }
      };
      store();
      if (pend) over[s % 3] = 1;
      __syncthreads();
      if (threadIdx.x == 0) over[(s + 2) % 3] = 0;  // step s - 1's flag: read before the barrier
      if (over[s % 3]) {  // the same for the whole block
        filter_cut(buf, &cnt, &thr, k);
        const unsigned long long T2 = thr;
#pragma unroll
        for (int j = 0; j < S; ++j)
          if ((pend & (1u << j)) && comp(j) >= T2) pend &= ~(1u << j);
        store();  // fits: at most kFilterThreads * S <= kFilterCap - k entries after a cut
      }
    }
    __syncthreads();
    if (cnt > (unsigned)k) filter_cut(buf, &cnt, &thr, k);  // the same for the whole block
    const unsigned kept = min(cnt, (unsigned)kFilterCap);
    unsigned long long* out = cand + ((size_t)r * gridDim.x + blockIdx.x) * (size_t)k;
    for (int i = threadIdx.x; i < k; i += blockDim.x) out[i] = i < (int)kept ? buf[i] : ~0ull;
    __syncthreads();  // buf, cnt, thr and over are reset for the next row
  }
}

// Sorted output for k <= kSmallSortK: one block per row sorts its composites on chip.
// The filtered path's merge uses it too: each row's `per_row` candidates (every block's k
// best, ~0 for none) sorted, the first k written.
template <DType D>
__global__ void __launch_bounds__(kSortThreads)
sort_rows_small(const unsigned long long* keys, int64_t rows, int64_t per_row, int64_t k, int pow2,
                int ibits, bool largest, const typename RawKey<D>::W* x, int64_t n, int64_t* out_idx,
                typename RawKey<D>::W* out_vals) {
  extern __shared__ unsigned long long sk[];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    for (int i = threadIdx.x; i < pow2; i += blockDim.x)
      sk[i] = i < per_row ? keys[(size_t)r * (size_t)per_row + i] : ~0ull;
    __syncthreads();
    bitonic_sort_shared(sk, pow2);
    write_sorted<D>(sk, k, ibits, largest, x + (size_t)r * (size_t)n, out_idx + (size_t)r * (size_t)k,
                    out_vals + (size_t)r * (size_t)k);
    __syncthreads();  // sk is reused for the next row
  }
}

// ---- sorted output for kSmallSortK < k <= kRadixSortMaxK: an on-chip radix sort per row ----
// The sixth H100 session put cub::DeviceRadixSort at 92 of the 245 us of kernels of a
// 16 x 1M float32 select at k = 10,000 (a histogram, a scan, seven onesweep passes over
// 160k keys of 56 bits at ~10.8 us each: latency, not bytes) and at ~320 of 565 us for
// 256 x 100k float16 at k = 10,000 (the shape where select_k trails torch.topk). Rows of up
// to 16,384 answers fit one block's shared memory (128 KB of keys on sm_80 / sm_90), so one
// launch sorts every row on chip: an LSD radix sort over 8-bit digits of the composite's tb
// bits (ceil(tb / 8) passes, 5 for 16-bit keys at N = 100k, 7 for float32 at N = 1M). A
// pass ranks each key stably (its warp's keys in position order: __match_any_sync over the
// digit, a per-warp count per digit in shared memory), scans the (digit, warp) counts with
// the block and scatters the keys to their new positions in shared memory. The composites
// are unique, so the order is the contract's (key, then index); the row's unused slots hold
// ~0, above every composite in the sorted bits or, where equal, after it by stability.
// Model (not yet timed; benchmarks/select_sass_model.py): 32-37 instructions a key a pass at
// 16-32 keys a thread, so 12,288 keys x 7 passes ~ 2.9M thread instructions a block, ~25-35 us
// at 1.5-2 instructions a cycle. RASFAST_SELECT_RADIX_SORT_K sets the largest k it takes (0:
// never, so the roofline can time cub's sort beside it). Short rows take the same sort inside
// the one-launch select (select_rows_small_sorted, below).
constexpr int kRadixSortThreads = 512;
constexpr int kRadixSortWarps = kRadixSortThreads / 32;
constexpr int kRadixSortDigitBits = 8;
constexpr int kRadixSortBins = 1 << kRadixSortDigitBits;
constexpr int kRadixSortCounters = kRadixSortBins * kRadixSortWarps;  // (digit, warp) counts
// a digit's row of warp counts is padded to 17 words: a warp's lanes, with different digits,
// then hit different banks (at 16 words apart every digit fell on two banks)
constexpr int kRadixSortStride = kRadixSortWarps + 1;
constexpr int kRadixSortCounterWords = kRadixSortBins * kRadixSortStride;
constexpr int kRadixSortMaxItems = 32;  // keys a thread holds: k <= 32 x 512 = 16,384
constexpr int64_t kRadixSortMaxK = (int64_t)kRadixSortMaxItems * kRadixSortThreads;

// Static shared memory besides the keys and counters, with room: sort_rows_radix's warp
// totals; select_rows_small_sorted's histogram, scan storage and state too.
constexpr size_t kRadixSortStatic = 4096;
constexpr size_t kSmallSortedStatic = sizeof(unsigned) * (1 << 11) + 4096;

constexpr size_t radix_sort_smem(int items) {
  return sizeof(unsigned long long) * (size_t)items * kRadixSortThreads +
         sizeof(unsigned) * (size_t)kRadixSortCounterWords;
}

// The block's ITEMS x kRadixSortThreads composites in sk, sorted in place over their low
// sort_bits bits (rounded up to a digit; above tb a composite's digit is 0). cnt: the
// counters (kRadixSortCounterWords), warp_total: kRadixSortWarps words, both shared. Every
// thread of the block calls it, after writing sk; sk is sorted once it returns (a barrier).
template <int ITEMS>
__device__ __forceinline__ void block_radix_sort(unsigned long long* sk, unsigned* cnt, unsigned* warp_total,
                                                 int sort_bits) {
  constexpr int kPer = kRadixSortCounters / kRadixSortThreads;
  static_assert(kRadixSortWarps % kPer == 0, "a thread's counts lie in one digit's row");
  const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
  const unsigned lanes_below = (1u << lane) - 1u;
  const int seg = warp * 32 * ITEMS;  // the warp's positions: seg + j * 32 + lane, j < ITEMS
  for (int shift = 0; shift < sort_bits; shift += kRadixSortDigitBits) {
    for (int i = threadIdx.x; i < kRadixSortCounterWords; i += blockDim.x) cnt[i] = 0;
    __syncthreads();  // sk written (the last scatter or the load), cnt zeroed
    unsigned long long v[ITEMS];
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) v[j] = sk[seg + j * 32 + lane];
    // each key's rank within its warp (in position order: j, then lane; < 32 x ITEMS) and,
    // above bit 16, its digit: the scatter reads the digit from here, not from the key
    // again (ptxas then kept each key's counter address alive across the barrier, a
    // register a key)
    unsigned rank_digit[ITEMS];
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
      const unsigned d = (unsigned)(v[j] >> shift) & (kRadixSortBins - 1);
      const unsigned peers = __match_any_sync(kFull, d);
      unsigned* c = &cnt[d * kRadixSortStride + warp];
      const unsigned base = *c;
      __syncwarp();
      if ((peers & lanes_below) == 0) *c = base + (unsigned)__popc(peers);  // the group's first lane
      __syncwarp();
      rank_digit[j] = (base + (unsigned)__popc(peers & lanes_below)) | (d << 16);
    }
    __syncthreads();  // every count in, every key read
    // exclusive scan of the counts in (digit, warp) order: each thread owns kPer of them.
    // A shuffle scan per warp and the warps' totals, not cub::BlockScan, whose raking warp
    // held its 16-entry segment in registers on top of the keys (spills at 32 keys).
    unsigned* mine = &cnt[(threadIdx.x / (kRadixSortWarps / kPer)) * kRadixSortStride +
                          (threadIdx.x % (kRadixSortWarps / kPer)) * kPer];
    unsigned sum = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) sum += mine[i];
    unsigned incl = sum;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned y = __shfl_up_sync(kFull, incl, o);
      if (lane >= o) incl += y;
    }
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();
    unsigned before = incl - sum;
    for (int w = 0; w < warp; ++w) before += warp_total[w];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const unsigned c = mine[i];
      mine[i] = before;
      before += c;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < ITEMS; ++j)
      sk[cnt[(rank_digit[j] >> 16) * kRadixSortStride + warp] + (rank_digit[j] & 0xffffu)] = v[j];
    __syncthreads();  // the scatter read cnt: the next pass zeroes it after this
  }
  if (sort_bits <= 0) __syncthreads();  // (never: tb >= 16) sk as written, every thread past it
}

// keys: each row's k composites (any order); sort_bits: the bits that order them. Writes
// indices and values, sorted.
template <DType D, int ITEMS>
__global__ void __launch_bounds__(kRadixSortThreads, 1)
sort_rows_radix(const unsigned long long* keys, int64_t rows, int64_t k, int sort_bits, int ibits,
                bool largest, const typename RawKey<D>::W* x, int64_t n, int64_t* out_idx,
                typename RawKey<D>::W* out_vals) {
  extern __shared__ unsigned long long sk[];  // ITEMS x threads keys, then the counters
  unsigned* cnt = reinterpret_cast<unsigned*>(sk + (size_t)ITEMS * kRadixSortThreads);
  __shared__ unsigned warp_total[kRadixSortWarps];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    // plain strided loops in and out (no per-key state kept across the passes: ptxas held
    // the unrolled form's predicates and addresses in registers through them)
    const unsigned long long* src = keys + (size_t)r * (size_t)k;
    for (int i = threadIdx.x; i < ITEMS * kRadixSortThreads; i += blockDim.x) sk[i] = i < k ? src[i] : ~0ull;
    block_radix_sort<ITEMS>(sk, cnt, warp_total, sort_bits);
    write_sorted<D>(sk, k, ibits, largest, x + (size_t)r * (size_t)n, out_idx + (size_t)r * (size_t)k,
                    out_vals + (size_t)r * (size_t)k);
    __syncthreads();  // sk is loaded with the next row's keys only after every thread is here
  }
}

// The keys a thread holds for k answers: the smallest compiled variant (8, 16, 24, 32).
int radix_sort_items(int64_t k) {
  const int64_t per = (k + kRadixSortThreads - 1) / kRadixSortThreads;
  return per <= 8 ? 8 : per <= 16 ? 16 : per <= 24 ? 24 : 32;
}

// The largest k the on-chip sort takes: kRadixSortMaxK, or RASFAST_SELECT_RADIX_SORT_K (0:
// never), and at most what the device's opt-in shared memory per block holds besides the
// kernel's static_bytes (99 KB on sm_86 / sm_89: 8,192).
int64_t radix_sort_k_limit(size_t static_bytes) {
  int64_t limit = kRadixSortMaxK;
  if (const char* env = std::getenv("RASFAST_SELECT_RADIX_SORT_K")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && v >= 0) limit = std::min<int64_t>(v, kRadixSortMaxK);
  }
  const size_t optin = (size_t)smem_optin() - static_bytes;  // less the kernel's static storage
  while (limit > kSmallSortK && radix_sort_smem(radix_sort_items(limit)) > optin)
    limit = (int64_t)(radix_sort_items(limit) - 8) * kRadixSortThreads;
  return limit > kSmallSortK ? limit : 0;
}

template <DType D, int ITEMS>
void launch_sort_rows_radix_items(const unsigned long long* keys, int64_t rows, int64_t k, int sort_bits,
                                  int ibits, bool largest, const typename RawKey<D>::W* x, int64_t n, int64_t* out_idx,
                                  typename RawKey<D>::W* out_vals, cudaStream_t stream) {
  const size_t smem = radix_sort_smem(ITEMS);
  RASFAST_CUDA_CHECK(cudaFuncSetAttribute(sort_rows_radix<D, ITEMS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  sort_rows_radix<D, ITEMS><<<(unsigned)std::min<int64_t>(rows, 65535), kRadixSortThreads, smem, stream>>>(
      keys, rows, k, sort_bits, ibits, largest, x, n, out_idx, out_vals);
}

template <DType D>
void launch_sort_rows_radix(const unsigned long long* keys, int64_t rows, int64_t k, int sort_bits,
                            int ibits, bool largest, const typename RawKey<D>::W* x, int64_t n, int64_t* out_idx,
                            typename RawKey<D>::W* out_vals, cudaStream_t stream) {
  switch (radix_sort_items(k)) {
    case 8: launch_sort_rows_radix_items<D, 8>(keys, rows, k, sort_bits, ibits, largest, x, n, out_idx, out_vals, stream); break;
    case 16: launch_sort_rows_radix_items<D, 16>(keys, rows, k, sort_bits, ibits, largest, x, n, out_idx, out_vals, stream); break;
    case 24: launch_sort_rows_radix_items<D, 24>(keys, rows, k, sort_bits, ibits, largest, x, n, out_idx, out_vals, stream); break;
    default: launch_sort_rows_radix_items<D, 32>(keys, rows, k, sort_bits, ibits, largest, x, n, out_idx, out_vals, stream); break;
  }
  RASFAST_CUDA_CHECK(cudaGetLastError());
}

// ---- short rows: the whole select in one launch -----------------------------------------
// A per-question call (one query's 20k theme distances, a batch of 8 x 50k) is launch-bound
// on a GPU: the sixth H100 session timed 1 x 20k float32 at k = 10 at 0.148 ms eager against
// 0.036 ms replayed from a CUDA graph, the radix path's memset, five passes, write and sort
// being eight launches. For rows up to kSmallRowMaxN entries and k <= kSmallSortK one block
// per row does it all: the radix passes over the row with the histogram in shared memory
// (the row stays in L1/L2 between passes), the digit picked by a block scan, then the
// answers {c : (c & mask) <= prefix} gathered on chip, bitonic-sorted and written, sorted
// either way. One launch, no workspace, no memset; RASFAST_SELECT_SMALL_N sets the largest
// row it takes (0: never, for tests and the roofline run's same-run comparison). Not yet
// timed on a GPU: one block a row reads a 20k-entry row five times from L1/L2 (~1k threads,
// 20 entries each a pass), where the radix path spreads it over many blocks but pays eight
// launches; the roofline's `radix ms (graph)` column compares the two at the same shapes.
constexpr int kSmallRowThreads = 1024;
constexpr int64_t kSmallRowMaxN = 65536;

// One row's radix passes by one block, the histogram in shared memory (h, kBins), a block
// scan picking each digit; then the answers {c : (c & mask) <= prefix}, exactly k of them,
// gathered into keys[0..k) in no order. Every thread of the block calls it; st is shared.
struct RowSelectState {
  unsigned long long prefix, mask;
  unsigned want, done, cnt;
};

template <DType D, int Threads>
__device__ __forceinline__ void select_row_on_chip(const typename RawKey<D>::W* row, int64_t n, int k,
                                                   bool largest, int ibits, int tb, unsigned* h,
                                                   typename cub::BlockScan<unsigned, Threads>::TempStorage& scan_tmp,
                                                   RowSelectState& st, unsigned long long* keys) {
  if (threadIdx.x == 0) {
    st.prefix = 0;
    st.mask = 0;
    st.want = (unsigned)k;
    st.done = 0;
    st.cnt = 0;
  }
  __syncthreads();
  for (int remaining = tb; remaining > 0 && !st.done;) {  // the same for the whole block
    const int dbits = min(kDigitBits, remaining);
    remaining -= dbits;
    const int shift = remaining;
    const unsigned dmask = (1u << dbits) - 1u;
    const unsigned long long P = st.prefix, M = st.mask;
    const unsigned want = st.want;
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) h[b] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const unsigned long long c =
          ((unsigned long long)RawKey<D>::key(row[i], largest) << ibits) | (unsigned long long)i;
      if ((c & M) == P) atomicAdd(&h[(unsigned)(c >> shift) & dmask], 1u);
    }
    __syncthreads();
    unsigned digit = 0, below = 0, count = 0;
    if (pick_digit<Threads>(h, want, scan_tmp, &digit, &below, &count)) {  // exactly one thread
      st.prefix = P | ((unsigned long long)digit << shift);
      st.mask = M | ((unsigned long long)dmask << shift);
      st.want = want - below;
      st.done = count == want - below ? 1u : 0u;  // the bin holds exactly the rest
    }
    __syncthreads();
  }
  // the answers: the fixed high bits below the prefix, or equal to it (the bin picked last
  // holds exactly the ones still wanted, or every bit is fixed and the prefix is the k-th)
  const unsigned long long P = st.prefix, M = st.mask;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const unsigned long long c =
        ((unsigned long long)RawKey<D>::key(row[i], largest) << ibits) | (unsigned long long)i;
    if ((c & M) <= P) {
      const unsigned slot = atomicAdd(&st.cnt, 1u);
      if (slot < (unsigned)k) keys[slot] = c;  // exactly k: a guard, not a case
    }
  }
}

template <DType D>
__global__ void __launch_bounds__(kSmallRowThreads)
select_rows_small(const typename RawKey<D>::W* x, int64_t rows, int64_t n, int k, bool largest,
                  int ibits, int tb, int64_t* out_idx, typename RawKey<D>::W* out_vals) {
  using Scan = cub::BlockScan<unsigned, kSmallRowThreads>;
  __shared__ unsigned h[kBins];
  __shared__ unsigned long long keys[kSmallSortK];
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ RowSelectState st;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const typename RawKey<D>::W* row = x + (size_t)r * (size_t)n;
    select_row_on_chip<D, kSmallRowThreads>(row, n, k, largest, ibits, tb, h, scan_tmp, st, keys);
    int pow2 = 1;
    while (pow2 < k) pow2 <<= 1;
    for (int i = k + threadIdx.x; i < pow2; i += blockDim.x) keys[i] = ~0ull;
    __syncthreads();
    bitonic_sort_shared(keys, pow2);  // ends with a barrier
    write_sorted<D>(keys, k, ibits, largest, row, out_idx + (size_t)r * (size_t)k, out_vals + (size_t)r * (size_t)k);
    __syncthreads();  // keys, h and the shared state are reset for the next row
  }
}

// Short rows with kSmallSortK < k <= 16,384: the same one-launch select, 512 threads a row,
// the answers gathered into dynamic shared memory and radix-sorted there (block_radix_sort).
// A per-question call at k = 10,000 (1 x 20k, 8 x 50k in the roofline) was eight launches:
// memset, five passes, write, sort. Taken for sorted answers on rows up to kSmallSortedMaxN:
// the seventh GPU session (H200, CUDA graphs) timed it at 0.091 ms against the radix passes'
// 0.098 at 1 x 20k float32, k = 10,000, but 0.177 against 0.113 at 8 x 50k (one block reads
// a 50k row five times), and unsorted at 8 x 50k it was 0.49x torch.topk (it sorts anyway).
// 32,768 lies between the two measured rows; the crossing itself was not timed.
constexpr int64_t kSmallSortedMaxN = 32768;
// Rows of kSmallSortedMaxN < n <= kSmallRowMaxN with k up to this take the filtered pass
// (layout_for; measured at k = 10 only, 8 x 50k: 0.038 against 0.067 ms eager)
constexpr int64_t kShortRowFilterK = 32;
template <DType D, int ITEMS>
__global__ void __launch_bounds__(kRadixSortThreads, 1)
select_rows_small_sorted(const typename RawKey<D>::W* x, int64_t rows, int64_t n, int k, bool largest,
                         int ibits, int tb, int64_t* out_idx, typename RawKey<D>::W* out_vals) {
  using Scan = cub::BlockScan<unsigned, kRadixSortThreads>;
  extern __shared__ unsigned long long sk[];  // ITEMS x threads keys, then the sort's counters
  unsigned* cnt = reinterpret_cast<unsigned*>(sk + (size_t)ITEMS * kRadixSortThreads);
  __shared__ unsigned h[kBins];
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ RowSelectState st;
  __shared__ unsigned warp_total[kRadixSortWarps];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const typename RawKey<D>::W* row = x + (size_t)r * (size_t)n;
    select_row_on_chip<D, kRadixSortThreads>(row, n, k, largest, ibits, tb, h, scan_tmp, st, sk);
    for (int i = k + threadIdx.x; i < ITEMS * kRadixSortThreads; i += blockDim.x) sk[i] = ~0ull;
    block_radix_sort<ITEMS>(sk, cnt, warp_total, tb);  // its first barrier follows the writes
    write_sorted<D>(sk, k, ibits, largest, row, out_idx + (size_t)r * (size_t)k, out_vals + (size_t)r * (size_t)k);
    __syncthreads();  // sk, h and the shared state are reset for the next row
  }
}

template <DType D, int ITEMS>
void launch_select_rows_small_sorted_items(const typename RawKey<D>::W* x, int64_t rows, int64_t n, int k,
                                           bool largest, int ibits, int tb, int64_t* out_idx,
                                           typename RawKey<D>::W* out_vals, cudaStream_t stream) {
  const size_t smem = radix_sort_smem(ITEMS);
  RASFAST_CUDA_CHECK(cudaFuncSetAttribute(select_rows_small_sorted<D, ITEMS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  select_rows_small_sorted<D, ITEMS><<<(unsigned)std::min<int64_t>(rows, int64_t(1) << 20), kRadixSortThreads,
                                       smem, stream>>>(x, rows, n, k, largest, ibits, tb, out_idx, out_vals);
}

template <DType D>
void launch_select_rows_small_sorted(const typename RawKey<D>::W* x, int64_t rows, int64_t n, int k,
                                     bool largest, int ibits, int tb, int64_t* out_idx,
                                     typename RawKey<D>::W* out_vals, cudaStream_t stream) {
  switch (radix_sort_items(k)) {
    case 8: launch_select_rows_small_sorted_items<D, 8>(x, rows, n, k, largest, ibits, tb, out_idx, out_vals, stream); break;
    case 16: launch_select_rows_small_sorted_items<D, 16>(x, rows, n, k, largest, ibits, tb, out_idx, out_vals, stream); break;
    case 24: launch_select_rows_small_sorted_items<D, 24>(x, rows, n, k, largest, ibits, tb, out_idx, out_vals, stream); break;
    default: launch_select_rows_small_sorted_items<D, 32>(x, rows, n, k, largest, ibits, tb, out_idx, out_vals, stream); break;
  }
  RASFAST_CUDA_CHECK(cudaGetLastError());
}

// Largest row of the one-launch select: kSmallRowMaxN, or RASFAST_SELECT_SMALL_N (0: never).
int64_t small_row_limit() {
  if (const char* env = std::getenv("RASFAST_SELECT_SMALL_N")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && v >= 0) return std::min<int64_t>(v, kSmallRowMaxN);
  }
  return kSmallRowMaxN;
}

// Decodes device-sorted composites (row-in-group bits above tb) into indices and values.
template <DType D>
__global__ void decode_sorted(const unsigned long long* keys, int64_t r0, int64_t items, int64_t k,
                              int ibits, bool largest, const typename RawKey<D>::W* x, int64_t n,
                              int64_t* out_idx, typename RawKey<D>::W* out_vals) {
  const unsigned long long imask = low_bits(ibits);
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < items;
       j += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = r0 + j / k;
    const unsigned long long c = keys[j];
    out_idx[r0 * k + j] = (int64_t)(c & imask);
    out_vals[r0 * k + j] = value_of<D>(c, ibits, largest, x + (size_t)r * (size_t)n);
  }
}

int bits_for(int64_t v) {  // bits needed to represent 0..v-1
  int b = 0;
  while (b < 62 && (int64_t(1) << b) < v) ++b;
  return b;
}

// One wave of resident pass blocks over all rows (fewer, longer blocks than 8 per SM: the
// first roofline run saw each row pass at 40% of the copy rate with 2.7 waves of short
// blocks, whose histogram zeroing, flush and ticket weigh on ~4 loads per thread).
template <DType D, int kMode>
int blocks_per_row(int64_t rows, int64_t n) {
  static int resident[3] = {0, 0, 0};  // per dtype: the pass kernel's blocks per SM
  int& per_sm = resident[(int)D];
  if (per_sm == 0) {
    int b = 0;
    RASFAST_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, radix_pass<D, kMode>, kThreads, 0));
    per_sm = std::max(1, b);
  }
  const int64_t by_size = (n + 8191) / 8192;  // >= 8192 entries per block
  const int64_t by_fill = std::max<int64_t>(1, ((int64_t)per_sm * sm_count()) / std::max<int64_t>(rows, 1));
  return (int)std::max<int64_t>(1, std::min<int64_t>({by_size, by_fill, 1024}));
}

// Blocks per row of the filtered pass: a wave of resident blocks over all rows, at least
// 4096 entries each, and at most kFilterMerge candidates per row for the merge.
template <DType D>
int filter_blocks_per_row(int64_t rows, int64_t n, int64_t k) {
  static int resident[3] = {0, 0, 0};
  int& per_sm = resident[(int)D];
  if (per_sm == 0) {
    int b = 0;
    RASFAST_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, filter_topk<D>, kFilterThreads, 0));
    per_sm = std::max(1, b);
  }
  const int64_t by_size = (n + 4095) / 4096;
  const int64_t by_fill = std::max<int64_t>(1, ((int64_t)per_sm * sm_count()) / std::max<int64_t>(rows, 1));
  const int64_t by_merge = std::max<int64_t>(1, kFilterMerge / std::max<int64_t>(k, 1));
  return (int)std::max<int64_t>(1, std::min<int64_t>({by_size, by_fill, by_merge, 1024}));
}

int filter_blocks(DType dt, int64_t rows, int64_t n, int64_t k) {
  int nb = 1;
  RASFAST_DISPATCH_DTYPE(dt, D, { nb = filter_blocks_per_row<D>(rows, n, k); })
  return nb;
}

// The largest k of the filtered pass: 0 (never) unless RASFAST_SELECT_FILTER_K names one, up
// to kFilterK (tests and benchmarks weigh the two paths at the same k). Off by default since
// the sixth H100 session (benchmarks/results/gpu_run6): at k = 10 the filtered pass took
// 0.26-0.34 ms of device time where the radix passes took 0.08-0.16 (16 x 1M, 4 x 10M and
// 256 x 100k, every dtype); Nsight Compute counted 301 instructions per entry in it.
int64_t filter_k_limit() {
  if (const char* env = std::getenv("RASFAST_SELECT_FILTER_K")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && v >= 0) return std::min<int64_t>(v, kFilterK);
  }
  return 0;
}

size_t align_up(size_t v) { return (v + 255) / 256 * 256; }

// The workspace: [state | histograms | tickets] (zeroed) | candidate buffers | sort keys;
// for the filtered pass (k <= kFilterK) only its candidates, rows x blocks x k composites.
struct Layout {
  int K = 32, ibits = 0, tb = 0;
  int64_t cap = 0, group = 1;
  bool small_sort = false, radix_sort = false, device_sort = false;
  bool filter = false;
  bool small_rows = false;         // select_rows_small: one launch, no workspace
  bool small_rows_sorted = false;  // select_rows_small_sorted: the same for larger k
  int filter_blocks = 0;
  size_t st = 0, hist = 0, arrived = 0, zero_bytes = 0, buf = 0, keys = 0, keys_out = 0,
         temp = 0, temp_bytes = 0, total = 0;
};

int key_bits_of(DType dt) { return dt == DType::F32 ? 32 : 16; }

// cub's temporary storage for a device-wide sort of `items` keys over `bits` bits, asked of
// cub once per (device, items, bits): a call sizes its workspace and then launches, and each
// size query runs cub's dispatch on the host (device attributes, occupancy), twice a call.
size_t device_sort_temp_bytes(int64_t items, int bits) {
  static std::mutex m;
  static std::map<std::tuple<int, int64_t, int>, size_t> cache;
  int dev = 0;
  RASFAST_CUDA_CHECK(cudaGetDevice(&dev));
  const auto key = std::make_tuple(dev, items, bits);
  {
    std::lock_guard<std::mutex> lock(m);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  size_t bytes = 0;
  RASFAST_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(
      nullptr, bytes, (const unsigned long long*)nullptr, (unsigned long long*)nullptr,
      items, 0, bits, (cudaStream_t)0));
  std::lock_guard<std::mutex> lock(m);
  if (cache.size() >= 256) cache.clear();  // a bound, not a policy: shapes repeat
  cache.emplace(key, bytes);
  return bytes;
}

Layout layout_for(DType dt, int64_t rows, int64_t n, int64_t k, bool sorted) {
  Layout L;
  L.K = key_bits_of(dt);
  L.ibits = bits_for(n);
  L.tb = L.K + L.ibits;
  // filtered: ~0 marks "no candidate", so a real composite must stay below it (tb <= 63)
  const auto filtered = [&]() {
    L.filter = true;
    L.filter_blocks = filter_blocks(dt, rows, n, k);
    L.keys = 0;
    L.total = std::max<size_t>(align_up(sizeof(unsigned long long) * (size_t)rows *
                                        (size_t)L.filter_blocks * (size_t)k), 256);
    return L;
  };
  if (k <= filter_k_limit() && L.tb <= 63) return filtered();
  if (n <= small_row_limit() && k <= kSmallSortK) {
    // one block a row reads a row of more than kSmallSortedMaxN entries five times: the
    // seventh GPU session timed 8 x 50k at k = 10 at 0.067-0.079 ms a call that way against
    // the filtered pass's 0.038-0.039 (all three dtypes, two calls). Unless
    // RASFAST_SELECT_FILTER_K names the filtered pass's limit itself.
    if (n > kSmallSortedMaxN && k <= kShortRowFilterK && L.tb <= 63 &&
        std::getenv("RASFAST_SELECT_FILTER_K") == nullptr)
      return filtered();
    L.small_rows = true;
    L.total = 256;
    return L;
  }
  if (sorted && n <= std::min<int64_t>(small_row_limit(), kSmallSortedMaxN) &&
      k <= radix_sort_k_limit(kSmallSortedStatic)) {
    L.small_rows_sorted = true;
    L.total = 256;
    return L;
  }
  L.cap = std::max<int64_t>(std::min<int64_t>(n, 4096), (n + 7) / 8);
  L.small_sort = sorted && k <= kSmallSortK;
  L.radix_sort = sorted && !L.small_sort && k <= radix_sort_k_limit(kRadixSortStatic);
  L.device_sort = sorted && !L.small_sort && !L.radix_sort;
  size_t off = 0;
  L.st = off;
  off = align_up(off + sizeof(SelState) * (size_t)rows);
  L.hist = off;
  off = align_up(off + sizeof(unsigned) * kBins * (size_t)rows);
  L.arrived = off;
  off = align_up(off + sizeof(unsigned) * (size_t)rows);
  L.zero_bytes = off;
  L.buf = off;  // ping-pong buffers 0 and 1, then the first-filter buffer
  off = align_up(off + sizeof(unsigned long long) * 3 * (size_t)rows * (size_t)L.cap);
  if (sorted) {
    L.keys = off;
    off = align_up(off + sizeof(unsigned long long) * (size_t)rows * (size_t)k);
  }
  if (L.device_sort) {
    // rows sorted together share one key: (row-in-group << tb) | composite, within 64 bits,
    // and at most 2^31 items per sort
    const int spare = 64 - L.tb;
    int64_t g = rows;
    if (spare < 62) g = std::min<int64_t>(g, int64_t(1) << spare);
    g = std::min<int64_t>(g, std::max<int64_t>(1, ((int64_t(1) << 31) - 1) / k));
    L.group = std::max<int64_t>(1, g);
    L.keys_out = off;
    off = align_up(off + sizeof(unsigned long long) * (size_t)(L.group * k));
    const size_t bytes = device_sort_temp_bytes(L.group * k, L.tb + bits_for(L.group));
    L.temp = off;
    L.temp_bytes = bytes;
    off = align_up(off + bytes);
  }
  L.total = std::max<size_t>(off, 256);
  return L;
}

template <DType D>
void select_k_launch(const void* xv, int64_t rows, int64_t n, int64_t k, bool largest, bool sorted,
                     int64_t* out, void* out_vals_v, void* ws, size_t ws_bytes, cudaStream_t stream) {
  using W = typename RawKey<D>::W;
  const W* x = static_cast<const W*>(xv);
  W* out_vals = static_cast<W*>(out_vals_v);
  static_assert(RawKey<D>::K == (D == DType::F32 ? 32 : 16), "key_bits_of must agree with RawKey");
  const Layout L = layout_for(D, rows, n, k, sorted);
  if (ws_bytes < L.total)
    throw std::invalid_argument("select_k: workspace of " + std::to_string(ws_bytes) +
                                " bytes, needs " + std::to_string(L.total));
  char* base = static_cast<char*>(ws);
  if (L.small_rows) {
    select_rows_small<D><<<(unsigned)std::min<int64_t>(rows, int64_t(1) << 20), kSmallRowThreads, 0, stream>>>(
        x, rows, n, (int)k, largest, L.ibits, L.tb, out, out_vals);
    RASFAST_CUDA_CHECK(cudaGetLastError());
    return;
  }
  if (L.small_rows_sorted) {
    launch_select_rows_small_sorted<D>(x, rows, n, (int)k, largest, L.ibits, L.tb, out, out_vals, stream);
    return;
  }
  if (L.filter) {
    unsigned long long* cand = reinterpret_cast<unsigned long long*>(base + L.keys);
    const dim3 fgrid(L.filter_blocks, (unsigned)std::min<int64_t>(rows, 65535));
    filter_topk<D><<<fgrid, kFilterThreads, 0, stream>>>(x, rows, n, (int)k, largest, L.ibits, cand);
    RASFAST_CUDA_CHECK(cudaGetLastError());
    const int64_t per_row = (int64_t)L.filter_blocks * k;
    int pow2 = 1;
    while (pow2 < per_row) pow2 <<= 1;
    sort_rows_small<D><<<(unsigned)std::min<int64_t>(rows, 65535), kSortThreads,
                         sizeof(unsigned long long) * pow2, stream>>>(cand, rows, per_row, k, pow2,
                                                                       L.ibits, largest, x, n, out, out_vals);
    RASFAST_CUDA_CHECK(cudaGetLastError());
    return;
  }
  SelState* st = reinterpret_cast<SelState*>(base + L.st);
  unsigned* hist = reinterpret_cast<unsigned*>(base + L.hist);
  unsigned* arrived = reinterpret_cast<unsigned*>(base + L.arrived);
  unsigned long long* buf = reinterpret_cast<unsigned long long*>(base + L.buf);
  unsigned long long* keys = sorted ? reinterpret_cast<unsigned long long*>(base + L.keys) : nullptr;
  RASFAST_CUDA_CHECK(cudaMemsetAsync(base, 0, L.zero_bytes, stream));

  // each kind of row pass gets a wave of its own resident blocks (the first pass, the
  // histogram alone, holds twice as many per SM as the filtering passes)
  const int nblk = blocks_per_row<D, kFirstFilter>(rows, n);
  const bool grouped = select_grouped();
  const int nblk_hist = blocks_per_row<D, kHistOnly>(rows, n);
  const dim3 grid(nblk, (unsigned)std::min<int64_t>(rows, 65535));
  const int mode = !sorted ? 0 : (L.small_sort || L.radix_sort ? 1 : 2);
  const Out<W> sink{mode, L.tb, k, L.group, out, out_vals, keys};
  unsigned long long* s1buf = buf + 2 * (size_t)rows * (size_t)L.cap;
  int remaining = L.tb;
  const int passes = (L.tb + kDigitBits - 1) / kDigitBits;  // >= 2: tb >= 16
  for (int p = 0; p < passes; ++p) {
    const int dbits = std::min(kDigitBits, remaining);
    remaining -= dbits;
    const bool first_filter = p == 1;
    const bool write_buf = p >= 2 && p + 1 < passes;
    // from the third pass on, the source is a buffer of at most N/8 entries (the row only
    // after an overflow: tied data). The third reads the first filter's buffer, the first
    // digit's range (~2% of a random row at k = 10,000 on 1M entries): the second pass's
    // grid (at an eighth of it, 64 blocks for 16 rows left most of an H100's 132 SMs idle:
    // 12% occupancy); later buffers hold a digit's range of that and most rows are done, so a
    // lighter grid
    const dim3 g = p >= (grouped ? 3 : 2) ? dim3((unsigned)std::max(1, nblk / 8), grid.y)
                                          : (p == 0 ? dim3((unsigned)nblk_hist, grid.y) : grid);
    if (first_filter && grouped) {
      radix_pass<D, kFirstFilter><<<g, kThreads, 0, stream>>>(x, rows, n, k, largest, L.ibits, remaining, dbits,
                                                              L.cap, st, hist, arrived, buf, s1buf, sink);
    } else if (first_filter) {
      radix_pass<D, kFirstFilterPerVector><<<g, kThreads, 0, stream>>>(x, rows, n, k, largest, L.ibits, remaining,
                                                                       dbits, L.cap, st, hist, arrived, buf, s1buf,
                                                                       sink);
    } else if (write_buf) {
      radix_pass<D, kWriteBuf><<<g, kThreads, 0, stream>>>(x, rows, n, k, largest, L.ibits, remaining, dbits,
                                                           L.cap, st, hist, arrived, buf, s1buf, sink);
    } else {
      radix_pass<D, kHistOnly><<<g, kThreads, 0, stream>>>(x, rows, n, k, largest, L.ibits, remaining, dbits,
                                                           L.cap, st, hist, arrived, buf, s1buf, sink);
    }
    RASFAST_CUDA_CHECK(cudaGetLastError());
  }
  write_selected<D><<<grid, kThreads, 0, stream>>>(x, rows, n, largest, L.ibits, st, L.cap, s1buf, sink);
  RASFAST_CUDA_CHECK(cudaGetLastError());
  if (L.radix_sort) {
    launch_sort_rows_radix<D>(keys, rows, k, L.tb, L.ibits, largest, x, n, out, out_vals, stream);
  } else if (mode == 1) {
    int pow2 = 1;
    while (pow2 < k) pow2 <<= 1;
    const int sort_grid = (int)std::min<int64_t>(rows, 65535);
    sort_rows_small<D><<<sort_grid, kSortThreads, sizeof(unsigned long long) * pow2, stream>>>(
        keys, rows, k, k, pow2, L.ibits, largest, x, n, out, out_vals);
    RASFAST_CUDA_CHECK(cudaGetLastError());
  } else if (mode == 2) {
    unsigned long long* keys_out = reinterpret_cast<unsigned long long*>(base + L.keys_out);
    void* temp = base + L.temp;
    for (int64_t r0 = 0; r0 < rows; r0 += L.group) {
      const int64_t g = std::min(L.group, rows - r0);
      size_t bytes = L.temp_bytes;
      RASFAST_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp, bytes, keys + r0 * k, keys_out, (int64_t)(g * k),
                                                        0, L.tb + bits_for(L.group), stream));
      const int64_t items = g * k;
      const int dgrid = (int)std::min<int64_t>((items + 255) / 256, 65535);
      decode_sorted<D><<<dgrid, 256, 0, stream>>>(keys_out, r0, items, k, L.ibits, largest, x, n, out,
                                                  out_vals);
      RASFAST_CUDA_CHECK(cudaGetLastError());
    }
  }
}

}  // namespace

size_t select_k_cuda_workspace(int dtype_code, int64_t rows, int64_t n, int64_t k, bool sorted) {
  if (rows == 0) return 0;
  return layout_for(static_cast<DType>(dtype_code), rows, n, k, sorted).total;
}

void select_k_cuda_launch(const void* x, int dtype_code, int64_t rows, int64_t n, int64_t k,
                          bool largest, bool sorted, int64_t* out, void* out_vals, void* workspace,
                          size_t workspace_bytes, cudaStream_t stream) {
  if (rows == 0) return;
  const DType dt = static_cast<DType>(dtype_code);
  RASFAST_DISPATCH_DTYPE(dt, D, {
    select_k_launch<D>(x, rows, n, k, largest, sorted, out, out_vals, workspace, workspace_bytes, stream);
  })
}

}  // namespace rasfast
