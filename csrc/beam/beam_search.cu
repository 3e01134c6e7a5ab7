// triple_beam_search, CUDA kernel: one block per query, everything on chip.
//
// Per beam expansion the block scores the last triple's neighbours in chunks (a warp per
// candidate: lanes stride over D, butterfly reduction), and keeps a running top-M of
// 64-bit keys (~float_key(v) << 32 | id: ascending = value desc, id asc) by bitonic-sorting
// [top-M | chunk] in shared memory, only as many keys as the row fills (the next power of
// two of M + the row's length, not the widest row's buffer). The top M get their rank decay
// (float64, like every backend) and join a pool; after every `group` beams (as many as fit:
// the binding's plan_grouped) one bitonic sort of (~double_key(d), id, beam) triples merges
// the pool into the query's running global top-b -- one merge per group, not per beam.
// When all the beams' rows fit `cap3` together, a step instead scores every candidate of
// every beam at once (warps over the concatenated rows), sorts them in one bitonic sort by
// (beam, value desc, id) -- each beam's range is then its own order, a candidate's rank its
// place there -- and merges the lot with one pool sort (the one-sort step). M = min(max_neighbors, T + b, max degree) is exact
// (see csrc/beam/beam_cpu.cpp for why). Running sums live in global scratch. Ties and
// arithmetic follow rasfast/reference/beam.py, so results equal the other backends.
#include <cstdint>
#include <stdexcept>

#include "beam/beam_cuda.h"
#include "common/cuda_check.h"
#include "common/device_info.h"
#include "common/dtype.h"

namespace rasfast {
namespace {

constexpr uint64_t kNone = ~0ull;

struct PoolEntry {  // ascending order = (d desc, id asc, beam asc)
  uint64_t dkey;
  uint32_t id;
  uint32_t parent;
};

__device__ __forceinline__ bool pool_less(const PoolEntry& a, const PoolEntry& b) {
  if (a.dkey != b.dkey) return a.dkey < b.dkey;
  if (a.id != b.id) return a.id < b.id;
  return a.parent < b.parent;
}

struct CombEntry {  // one candidate of the one-sort step: ascending = (beam, value desc, id)
  uint64_t key;
  uint32_t beam;
  uint32_t pad;
};

__device__ __forceinline__ bool comb_less(const CombEntry& a, const CombEntry& b) {
  if (a.beam != b.beam) return a.beam < b.beam;
  return a.key < b.key;
}

// Order-preserving double -> uint64 (-0.0 == +0.0), inverted so larger d sorts first.
__device__ __forceinline__ uint64_t desc_double_key(double d) {
  uint64_t u = (uint64_t)__double_as_longlong(d);
  if ((u << 1) == 0) u = 0;
  const uint64_t k = (u >> 63) ? ~u : (u | (1ull << 63));
  return ~k;
}

__device__ __forceinline__ double desc_double_value(uint64_t key) {
  const uint64_t k = ~key;
  const uint64_t u = (k >> 63) ? (k & ~(1ull << 63)) : ~k;
  return __longlong_as_double((long long)u);
}

__device__ __forceinline__ uint64_t value_key(float v, uint32_t id) {
  return ((uint64_t)(~float_to_key(v)) << 32) | id;
}

__device__ __forceinline__ float key_value(uint64_t key) {
  return key_to_float(~(uint32_t)(key >> 32));
}

__device__ void set_error(int* err, int code, int64_t where) {
  if (atomicCAS(err, 0, code) == 0) err[1] = (int)where;
}

// Ascending bitonic sort of n (a power of two) items in shared memory by the whole block.
template <class T, class Less>
__device__ void bitonic_sort(T* a, int n, Less less) {
  for (int k = 2; k <= n; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int ixj = i ^ j;
        if (ixj > i) {
          const bool up = (i & k) == 0;
          T x = a[i], y = a[ixj];
          if (up ? less(y, x) : less(x, y)) { a[i] = y; a[ixj] = x; }
        }
      }
      __syncthreads();
    }
  }
}

__device__ __forceinline__ int pow2_at_least(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

struct alignas(16) V16 {  // one 16-byte load: 4 float32 or 8 16-bit entries
  uint32_t w[4];
};

// entry i of a 16-byte word of storage type DT, as float
template <DType DT>
__device__ __forceinline__ float word_entry(const V16& v, int i) {
  if constexpr (DT == DType::F32) {
    return bits_to_float(v.w[i]);
  } else {
    const uint16_t h = (uint16_t)(v.w[i >> 1] >> ((i & 1) * 16));
    return Storage<DT>::load(&h, 0);
  }
}

// dot(q, u_j + e_t) and |u_j + e_t|^2 for up to 32 candidates at once, one per lane: a lane
// that wants a score names its triple t and the beam j whose running sum it adds (j < 0: no
// sum, as for the seeds) and gets its two sums back. `lanes` lanes (a power of two <= 32)
// score one candidate together, so a warp loads 32 / lanes rows at once. With a whole warp
// per candidate, a warp's candidates were scored one after another, each a dependent DRAM
// round trip (its id, then its row): the kernel is latency-bound, and the benchmark's slowest
// query (hub rows among its beams) waited on ~700 trips on its busiest warp
// (benchmarks/beam_kernel_model.py). `vec`: 16-byte loads (D a multiple of
// 16 / sizeof(T) and aligned bases; the caller checks). Every lane of the warp must call it.
template <DType DT>
__device__ __forceinline__ void warp_score_batch(const typename Storage<DT>::type* emb,
                                                 const float* u_base, const float* q, int64_t D,
                                                 int lanes, bool vec, bool want, int64_t t, int j,
                                                 float& dot, float& nn) {
  using T = typename Storage<DT>::type;
  constexpr int E = 16 / (int)sizeof(T);
  const unsigned full = 0xffffffffu;
  const int lane = threadIdx.x & 31, sub = lane & (lanes - 1), grp = lane / lanes;
  const int per_round = 32 / lanes;
  const unsigned mask = __ballot_sync(full, want);
  const int n = __popc(mask);
  const int my_rank = __popc(mask & ((1u << lane) - 1u));
  unsigned m = mask;  // set bits not yet taken, less the first grp: this group's next lane
  for (int i = 0; i < grp; ++i) m &= m - 1u;
  for (int r0 = 0; r0 < n; r0 += per_round) {
    const int src = m ? __ffs((int)m) - 1 : -1;
    for (int i = 0; i < per_round; ++i) m &= m - 1u;
    const long long tt = __shfl_sync(full, (long long)t, src < 0 ? 0 : src);
    const int jj = __shfl_sync(full, j, src < 0 ? 0 : src);
    float sd = 0.f, sn = 0.f;
    if (src >= 0) {
      const T* e = emb + (int64_t)tt * D;
      const float* u = jj >= 0 ? u_base + (int64_t)jj * D : nullptr;
      if (vec) {
        const int64_t nv = D / E;
#pragma unroll 2  // two 16-byte row loads in flight per lane: 64 registers (see the kernel)
        for (int64_t v = sub; v < nv; v += lanes) {
          const V16 x = *reinterpret_cast<const V16*>(e + v * E);
#pragma unroll
          for (int h = 0; h < E; h += 4) {
            const V16 qv = *reinterpret_cast<const V16*>(q + v * E + h);
            V16 uv = {};
            if (u) uv = *reinterpret_cast<const V16*>(u + v * E + h);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const float w = bits_to_float(uv.w[i]) + word_entry<DT>(x, h + i);
              sd += bits_to_float(qv.w[i]) * w;
              sn += w * w;
            }
          }
        }
      } else {
        for (int64_t k = sub; k < D; k += lanes) {
          const float x = Storage<DT>::load(e, k);
          const float w = u ? u[k] + x : x;
          sd += q[k] * w;
          sn += w * w;
        }
      }
    }
    for (int o = lanes >> 1; o > 0; o >>= 1) {
      sd += __shfl_xor_sync(full, sd, o);
      sn += __shfl_xor_sync(full, sn, o);
    }
    // the lane whose candidate this round scored takes its group's sums
    const int from = ((my_rank - r0) & (per_round - 1)) * lanes;
    const float gd = __shfl_sync(full, sd, from), gn = __shfl_sync(full, sn, from);
    if (want && my_rank >= r0 && my_rank < r0 + per_round) {
      dot = gd;
      nn = gn;
    }
  }
}

__device__ __forceinline__ float cosine(float dot, float nn, float qnorm) {
  const float den = qnorm * sqrtf(nn);
  return den > 0.f ? dot / den : 0.f;
}

// kThreads: 256 (four blocks per SM) or 1024 (one), 64 registers either way. 256 as before
// the batched scoring: without the bound its unrolled row loads took 128 registers, two blocks
// per SM -- no more bytes in flight per SM (half the warps, twice the loads each) and less to
// hide the sorts' barriers behind. 1024 when the batch leaves SMs idle (B <= the SM count,
// a per-question call): four times the warps on each query's candidates.
template <DType DT, class Idx, int kThreads>
__global__ void __launch_bounds__(kThreads, kThreads == 256 ? 4 : 1) beam_search_kernel(BeamCudaArgs a) {
  using T = typename Storage<DT>::type;
  constexpr int kWarps = kThreads / 32;
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t b = a.b, L = a.L, D = a.D;
  const int cap = (int)a.cap, cap2 = (int)a.cap2, chunk = (int)a.chunk;
  PoolEntry* pool = reinterpret_cast<PoolEntry*>(smem);                  // [cap2]
  uint64_t* buf = reinterpret_cast<uint64_t*>(pool + cap2);              // [cap]
  int64_t* seq_buf = reinterpret_cast<int64_t*>(buf + cap);              // [2, b, L]
  int64_t* off = seq_buf + 2 * b * L;                                    // [b + 1]
  int64_t* poff = off + b + 1;                                           // [b + 1]
  CombEntry* comb = reinterpret_cast<CombEntry*>(poff + b + 1);          // [cap3]
  float* s_buf = reinterpret_cast<float*>(comb + a.cap3);                // [2, b]
  __shared__ int sh_nb, sh_next, sh_dup, sh_fast;

  const int64_t qi = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float* q = a.q + qi * D;
  // |q|: given (a.qnorm), or computed here by warp 0 with a flag (code 5) when it is not
  // finite (NaN/inf in q, or an overflow) -- the host layer then needs no pass over q
  __shared__ float sh_qn;
  if (a.qnorm != nullptr) {
    if (threadIdx.x == 0) sh_qn = a.qnorm[qi];
  } else if (warp == 0) {
    float ss = 0.f;
    for (int64_t k = lane; k < D; k += 32) ss += q[k] * q[k];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) {
      sh_qn = sqrtf(ss);
      if (!isfinite(sh_qn)) set_error(a.err, 5, qi);
    }
  }
  __syncthreads();
  const float qn = sh_qn;
  const T* emb = static_cast<const T*>(a.emb);
  const Idx* indices = static_cast<const Idx*>(a.indices);
  float* u_base = a.scratch_u + qi * 2 * b * D;
  auto less_key = [](uint64_t x, uint64_t y) { return x < y; };
  const int lanes = (int)a.lanes;
  constexpr int kEntries16 = 16 / (int)sizeof(T);
  const bool vec = D % kEntries16 == 0 && (reinterpret_cast<uintptr_t>(a.emb) & 15) == 0 &&
                   (reinterpret_cast<uintptr_t>(a.q) & 15) == 0 &&
                   (reinterpret_cast<uintptr_t>(a.scratch_u) & 15) == 0;
  // a scored candidate's key (kNone and error 3 when its sums are not finite)
  auto scored_key = [&](float dot, float nn, float sv, int64_t t) -> uint64_t {
    if (isfinite(dot) && isfinite(nn)) return value_key(sv + cosine(dot, nn, qn), (uint32_t)t);
    set_error(a.err, 3, t);
    return kNone;
  };

  // ---- seeds: running top-b by (score desc, id asc)
  // The offsets are checked here, not by ~8 torch launches and a Python round of checks on
  // the host: 0 = ptr[0] <= ptr[1] <= ... <= ptr[B] = n_seed_ids, each block its own pair
  // (which covers every adjacent pair). A bad pair is flagged (code 6) and its query reads
  // no seeds, so nothing outside seed_ids is read even unchecked (validate="none").
  int64_t s0 = a.seed_ptr[qi], s1 = a.seed_ptr[qi + 1];
  if (s0 < 0 || s1 < s0 || s1 > a.n_seed_ids || (qi == 0 && s0 != 0) ||
      (qi == a.B - 1 && s1 != a.n_seed_ids)) {
    if (threadIdx.x == 0) set_error(a.err, 6, qi);
    s0 = s1 = 0;
  }
  const int64_t scount = s1 - s0;
  const int m_seed = (int)a.m_seed;
  for (int i = threadIdx.x; i < cap; i += blockDim.x) buf[i] = kNone;
  __syncthreads();
  for (int64_t base = 0; base < scount; base += chunk) {
    // sort only the running top-m and this round's candidates: everything past them is kNone
    const int P = pow2_at_least(m_seed + (int)(scount - base < chunk ? scount - base : chunk));
    for (int i = m_seed + threadIdx.x; i < P; i += blockDim.x) buf[i] = kNone;
    __syncthreads();
    const int64_t here = scount - base < chunk ? scount - base : chunk;
    for (int c0 = 0; c0 < here; c0 += kThreads) {  // chunk <= kBeamThreads: one round
      const int c = c0 + warp + lane * kWarps;      // candidates spread over the warps
      int64_t t = -1;
      bool want = false;
      if (c < here) {
        t = a.seed_ids[s0 + base + c];
        want = t >= 0 && t < a.n;
        if (!want) set_error(a.err, 4, t);
      }
      float dot = 0.f, nn = 0.f;
      warp_score_batch<DT>(emb, nullptr, q, D, lanes, vec, want, t, -1, dot, nn);
      if (c < here) buf[m_seed + c] = want ? scored_key(dot, nn, 0.f, t) : kNone;
    }
    __syncthreads();
    bitonic_sort(buf, P, less_key);
    // Seeds given on the device come as they are (the host layer does not sort them or drop
    // repeats: that took ~20 launches). A repeated seed has the same key, adjacent after the
    // sort (also across chunks: the running top-m is part of the sorted buffer); one thread
    // keeps the first of each run, in order, when there is any.
    if (threadIdx.x == 0) sh_dup = 0;
    __syncthreads();
    for (int i = 1 + threadIdx.x; i < P; i += blockDim.x)
      if (buf[i] != kNone && buf[i] == buf[i - 1]) sh_dup = 1;
    __syncthreads();
    if (sh_dup && threadIdx.x == 0) {
      int w = 1;
      for (int i = 1; i < P; ++i)
        if (buf[i] != buf[w - 1]) buf[w++] = buf[i];
      for (; w < P; ++w) buf[w] = kNone;
    }
    __syncthreads();
  }
  int cur = 0;
  if (threadIdx.x == 0) {
    int nb = 0;
    while (nb < m_seed && buf[nb] != kNone) ++nb;
    sh_nb = nb;
  }
  __syncthreads();
  int64_t nb = sh_nb, len = nb ? 1 : 0;
  {
    int64_t* seq = seq_buf;
    float* s = s_buf;
    float* u = u_base;
    for (int64_t j = threadIdx.x; j < nb; j += blockDim.x) {
      seq[j * L] = (int64_t)(uint32_t)(buf[j] & 0xffffffffu);
      s[j] = key_value(buf[j]);
    }
    for (int64_t i = threadIdx.x; i < nb * D; i += blockDim.x) {
      const int64_t t = (int64_t)(uint32_t)(buf[i / D] & 0xffffffffu);
      u[i] = Storage<DT>::load(emb + t * D, i % D);
    }
  }
  __syncthreads();

  // ---- expansion steps
  const int m_step = (int)a.m_step;
  for (int64_t step = 1; step < L && nb > 0; ++step) {
    int64_t* seq = seq_buf + cur * b * L;
    int64_t* seq_next = seq_buf + (1 - cur) * b * L;
    float* s = s_buf + cur * b;
    float* s_next = s_buf + (1 - cur) * b;
    const float* u = u_base + cur * b * D;
    float* u_next = u_base + (1 - cur) * b * D;
    for (int i = threadIdx.x; i < cap2; i += blockDim.x) pool[i] = PoolEntry{kNone, ~0u, ~0u};
    __syncthreads();
    // candidate edge e of row [rs, re) of triple `last`, by one lane: its triple in t; true
    // when it is to be scored (false when excluded: visited by a beam, or an error, flagged)
    auto candidate_ok = [&](int64_t e, int64_t rs, int64_t last, int64_t& t) -> bool {
      t = (int64_t)indices[e];
      if (t < 0 || t >= a.n) {
        set_error(a.err, 1, t);
        return false;
      }
      if (e > rs && (int64_t)indices[e - 1] >= t) {
        set_error(a.err, 2, last);
        return false;
      }
      for (int64_t j = 0; j < nb; ++j)
        for (int64_t k = 0; k < step; ++k)
          if (seq[j * L + k] == t) return false;
      return true;
    };
    // One sort for the step when every beam's row fits the combined buffer together (and
    // their kept candidates the pool): the rows' lengths and prefix offsets, by warp 0, a
    // lane per beam and a shuffle scan. (One thread walking the beams read their offsets one
    // round trip after another: nb trips on every query's path, each step.)
    if (warp == 0) {
      int64_t tot = 0, ptot = b;
      for (int64_t j0 = 0; j0 < nb; j0 += 32) {
        const int64_t j = j0 + lane;
        int64_t d = 0;
        if (j < nb) {
          const int64_t last = seq[j * L + step - 1];
          d = a.indptr[last + 1] - a.indptr[last];
        }
        const int64_t kept = d < m_step ? d : m_step;
        int64_t sd = d, sk = kept;  // inclusive scans over the lanes
        for (int o = 1; o < 32; o <<= 1) {
          const int64_t xd = __shfl_up_sync(0xffffffffu, sd, o), xk = __shfl_up_sync(0xffffffffu, sk, o);
          if (lane >= o) {
            sd += xd;
            sk += xk;
          }
        }
        if (j < nb) {
          off[j] = tot + sd - d;
          poff[j] = ptot + sk - kept;
        }
        tot += __shfl_sync(0xffffffffu, sd, 31);
        ptot += __shfl_sync(0xffffffffu, sk, 31);
      }
      if (lane == 0) {
        off[nb] = tot;
        poff[nb] = ptot;
        sh_fast = a.cap3 > 0 && tot <= a.cap3 && ptot <= cap2;
      }
    }
    __syncthreads();
    const bool fast = sh_fast != 0;
    if (fast) {
      // every candidate of every beam scored at once (warps over the concatenated rows), one
      // sort by (beam, value desc, id): beam j's candidates then sit at [off[j], off[j+1])
      // in its own order, so a candidate's rank is its place there -- as in the beam-by-beam
      // path, whose running top m_step of a row is the first m_step of that order
      const int64_t total = off[nb];
      for (int64_t f0 = 0; f0 < total; f0 += kThreads) {
        const int64_t f = f0 + warp + lane * kWarps;  // candidates spread over the warps
        int64_t t = -1, lo = 0;
        bool want = false;
        if (f < total) {
          int64_t hi = nb - 1;  // the beam of f: the last j with off[j] <= f
          while (lo < hi) {
            const int64_t mid = (lo + hi + 1) >> 1;
            if (off[mid] <= f) lo = mid; else hi = mid - 1;
          }
          const int64_t last = seq[lo * L + step - 1];
          const int64_t rs = a.indptr[last];
          want = candidate_ok(rs + (f - off[lo]), rs, last, t);
        }
        float dot = 0.f, nn = 0.f;
        warp_score_batch<DT>(emb, u, q, D, lanes, vec, want, t, (int)lo, dot, nn);
        if (f < total) comb[f] = CombEntry{want ? scored_key(dot, nn, s[lo], t) : kNone, (uint32_t)lo, 0u};
      }
      const int P3 = pow2_at_least(total > 2 ? (int)total : 2);
      for (int64_t f = total + threadIdx.x; f < P3; f += blockDim.x) comb[f] = CombEntry{kNone, ~0u, 0u};
      __syncthreads();
      bitonic_sort(comb, P3, [](const CombEntry& x, const CombEntry& y) { return comb_less(x, y); });
      for (int64_t f = threadIdx.x; f < total; f += blockDim.x) {
        const CombEntry ce = comb[f];
        const int64_t j = ce.beam, r = f - off[ce.beam];
        if (ce.key == kNone || r >= m_step) continue;
        const double d = (double)key_value(ce.key) * a.decay[r < a.tail ? r : a.tail];
        pool[poff[j] + r] = PoolEntry{desc_double_key(d), (uint32_t)(ce.key & 0xffffffffu), (uint32_t)j};
      }
      __syncthreads();
      bitonic_sort(pool, pow2_at_least((int)poff[nb]),
                   [](const PoolEntry& x, const PoolEntry& y) { return pool_less(x, y); });
    }
    int pooled = 0;  // beams whose candidates sit in the pool, not yet merged
    for (int64_t j = 0; j < nb && !fast; ++j) {
      const int64_t last = seq[j * L + step - 1];
      const int64_t rs = a.indptr[last], re = a.indptr[last + 1];
      const float sj = s[j];
      for (int i = threadIdx.x; i < m_step; i += blockDim.x) buf[i] = kNone;
      __syncthreads();
      for (int64_t base = rs; base < re; base += chunk) {
        // as for the seeds: sort the running top-m and this round's candidates only (a row
        // shorter than the widest row's chunk sorts a smaller power of two)
        const int P = pow2_at_least(m_step + (int)(re - base < chunk ? re - base : chunk));
        for (int i = m_step + threadIdx.x; i < P; i += blockDim.x) buf[i] = kNone;
        __syncthreads();
        const int64_t here = re - base < chunk ? re - base : chunk;
        for (int c0 = 0; c0 < here; c0 += kThreads) {  // chunk <= kBeamThreads: one round
          const int c = c0 + warp + lane * kWarps;
          int64_t t = -1;
          bool want = false;
          if (c < here) want = candidate_ok(base + c, rs, last, t);
          float dot = 0.f, nn = 0.f;
          warp_score_batch<DT>(emb, u, q, D, lanes, vec, want, t, (int)j, dot, nn);
          if (c < here) buf[m_step + c] = want ? scored_key(dot, nn, sj, t) : kNone;
        }
        __syncthreads();
        bitonic_sort(buf, P, less_key);
      }
      // buf[0, m_step): this beam's best candidates by (v desc, id asc); rank = position.
      // They join the pool after the running top b (pool[0, b)) and the beams pooled before.
      PoolEntry* slot = pool + b + (int64_t)pooled * m_step;
      for (int r = threadIdx.x; r < m_step; r += blockDim.x) {
        const uint64_t key = buf[r];
        if (key == kNone) continue;
        // the decay multiplies the cumulative value (negative values move toward 0)
        const double d = (double)key_value(key) * a.decay[r < a.tail ? r : a.tail];
        slot[r] = PoolEntry{desc_double_key(d), (uint32_t)(key & 0xffffffffu), (uint32_t)j};
      }
      __syncthreads();
      ++pooled;
      if (pooled == a.group || j + 1 == nb) {
        // one merge for the group: sort the filled prefix, keep the top b in front, and
        // clear the rest (the pool past the filled prefix is kNone already)
        const int P2 = pow2_at_least((int)(b + (int64_t)pooled * m_step));
        bitonic_sort(pool, P2, [](const PoolEntry& x, const PoolEntry& y) { return pool_less(x, y); });
        for (int i = b + threadIdx.x; i < P2; i += blockDim.x) pool[i] = PoolEntry{kNone, ~0u, ~0u};
        __syncthreads();
        pooled = 0;
      }
    }
    if (threadIdx.x == 0) {
      int k = 0;
      while (k < b && pool[k].dkey != kNone) ++k;
      sh_next = k;
    }
    __syncthreads();
    const int64_t nn_ = sh_next;
    if (nn_ == 0) break;  // no beam can extend: keep the current beams
    for (int64_t i = threadIdx.x; i < nn_ * L; i += blockDim.x) {
      const int64_t j = i / L, k = i % L;
      const PoolEntry& pe = pool[j];
      seq_next[i] = k < step ? seq[(int64_t)pe.parent * L + k] : (k == step ? (int64_t)pe.id : -1);
    }
    for (int64_t j = threadIdx.x; j < nn_; j += blockDim.x)
      s_next[j] = (float)desc_double_value(pool[j].dkey);
    for (int64_t i = threadIdx.x; i < nn_ * D; i += blockDim.x) {
      const PoolEntry& pe = pool[i / D];
      const int64_t k = i % D;
      u_next[i] = u[(int64_t)pe.parent * D + k] + Storage<DT>::load(emb + (int64_t)pe.id * D, k);
    }
    __syncthreads();
    cur = 1 - cur;
    nb = nn_;
    len = step + 1;
  }

  // ---- outputs
  const int64_t* seq = seq_buf + cur * b * L;
  const float* s = s_buf + cur * b;
  for (int64_t i = threadIdx.x; i < b * L; i += blockDim.x) {
    const int64_t j = i / L, k = i % L;
    a.out_seq[qi * b * L + i] = (j < nb && k < len) ? seq[i] : -1;
  }
  for (int64_t j = threadIdx.x; j < b; j += blockDim.x)
    a.out_score[qi * b + j] = j < nb ? s[j] : -INFINITY;
  if (threadIdx.x == 0) {
    a.out_len[qi] = len;
    a.out_count[qi] = nb;
  }
}

template <DType DT, class Idx, int kThreads>
void launch_typed(const BeamCudaArgs& a, size_t smem, cudaStream_t stream) {
  auto kernel = beam_search_kernel<DT, Idx, kThreads>;
  RASFAST_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  kernel<<<(unsigned)a.B, kThreads, smem, stream>>>(a);
  RASFAST_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

size_t beam_search_smem_bytes(const BeamCudaArgs& a) {
  // the kernel's layout: 16-byte entries first and after the 8-byte arrays (an even count
  // of int64s: 2bL + 2(b + 1)), floats last
  return (size_t)a.cap2 * sizeof(PoolEntry) + (size_t)a.cap * sizeof(uint64_t) +
         (size_t)2 * a.b * a.L * sizeof(int64_t) + (size_t)2 * (a.b + 1) * sizeof(int64_t) +
         (size_t)a.cap3 * sizeof(CombEntry) + (size_t)2 * a.b * sizeof(float);
}

void beam_search_launch(const BeamCudaArgs& a, cudaStream_t stream) {
  if (a.B == 0) return;
  const size_t smem = beam_search_smem_bytes(a);
  const DType dt = static_cast<DType>(a.dtype);
  // threads per block (the plan's setting, 0: by the batch): a batch that leaves SMs idle
  // gets 1024-thread blocks, each query four times the warps
  const int threads = a.threads ? (int)a.threads : (a.B <= sm_count() ? 1024 : kBeamThreads);
  RASFAST_DISPATCH_DTYPE(dt, DT, {
    if (threads == 1024) {
      if (a.idx64) launch_typed<DT, int64_t, 1024>(a, smem, stream);
      else launch_typed<DT, int32_t, 1024>(a, smem, stream);
    } else {
      if (a.idx64) launch_typed<DT, int64_t, kBeamThreads>(a, smem, stream);
      else launch_typed<DT, int32_t, kBeamThreads>(a, smem, stream);
    }
  })
}

}  // namespace rasfast
