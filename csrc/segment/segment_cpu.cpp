// CPU kernels of the segment family (rasfast/ops/segment.py):
//   segment_topk_scores: per query, inner products with its CSR candidates + top-n
//   segment_max_rank   : per query, max of item scores per group + top-k groups
// Queries run in parallel (OpenMP, dynamic schedule: segments are ragged). The inner
// products read each candidate row once, straight from the caller's buffer (a candidate
// matrix, or table rows gathered through cand_ids), converting float16/bfloat16 on the fly;
// there is no gathered copy and no second pass over the scores beyond the selection.
// Order (shared with every backend): (score desc, position asc) and (score desc, group asc).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/entry_points.h"

#include <omp.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RASFAST_SEGMENT_X86 1
#endif

#include "common/buffers.h"
#include "common/parallel.h"
#include "common/dtype.h"
#include "common/isa.h"
#include "common/registry.h"

namespace rasfast {
namespace segment {
namespace {

// ---------------------------------------------------------------------------- inner products
// dots4(qs[4], rows[4], D, out): out[r] = <qs[r], rows[r]> for four (query, row) pairs, rows in
// storage dtype S. The per-query path passes one query four times, the by-row path one row
// four times; both run this same instruction sequence, so a (query, row) score is
// bit-identical whichever path computed it. One routine per ISA, picked once at run time
// because the build uses no -march flag.
template <DType S>
using RowPtr = const typename Storage<S>::type*;

template <DType S>
void dots4_scalar(const float* const* qs, RowPtr<S> const* rows, int64_t D, float* out) {
  for (int r = 0; r < 4; ++r) {
    const float* q = qs[r];
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t d = 0;
    for (; d + 8 <= D; d += 8)
      for (int u = 0; u < 8; ++u) acc[u] += q[d + u] * Storage<S>::load(rows[r], d + u);
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; d < D; ++d) s += q[d] * Storage<S>::load(rows[r], d);
    out[r] = s;
  }
}

#ifdef RASFAST_SEGMENT_X86
#define RASFAST_AVX2 __attribute__((target("avx2,fma,f16c")))

template <DType S>
RASFAST_AVX2 inline __m256 load8(RowPtr<S> p) {
  if constexpr (S == DType::F32) {
    return _mm256_loadu_ps(p);
  } else if constexpr (S == DType::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {  // bfloat16: the high half of a float
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
}

RASFAST_AVX2 inline float hsum8(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Four pairs x two 8-wide chunks = 8 independent FMA chains.
template <DType S>
RASFAST_AVX2 void dots4_avx2(const float* const* qs, RowPtr<S> const* rows, int64_t D, float* out) {
  __m256 a[4][2];
  for (int r = 0; r < 4; ++r) a[r][0] = a[r][1] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) {
    for (int r = 0; r < 4; ++r) {
      a[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(qs[r] + d), load8<S>(rows[r] + d), a[r][0]);
      a[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(qs[r] + d + 8), load8<S>(rows[r] + d + 8), a[r][1]);
    }
  }
  for (; d + 8 <= D; d += 8) {
    for (int r = 0; r < 4; ++r)
      a[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(qs[r] + d), load8<S>(rows[r] + d), a[r][0]);
  }
  for (int r = 0; r < 4; ++r) {
    float s = hsum8(_mm256_add_ps(a[r][0], a[r][1]));
    for (int64_t t = d; t < D; ++t) s += qs[r][t] * Storage<S>::load(rows[r], t);
    out[r] = s;
  }
}

// The same arithmetic for four rows against one query (q chunks loaded once) and for 1-4
// queries against one row (row chunks loaded and converted once, below): identical FMA sequences per
// pair as dots4_avx2, so results stay bit-identical across paths; fewer loads per FMA.
template <DType S>
RASFAST_AVX2 void dots4_same_q_avx2(const float* const* qs, RowPtr<S> const* rows, int64_t D,
                                    float* out) {
  const float* q = qs[0];
  __m256 a[4][2];
  for (int r = 0; r < 4; ++r) a[r][0] = a[r][1] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) {
    __m256 q0 = _mm256_loadu_ps(q + d), q1 = _mm256_loadu_ps(q + d + 8);
    for (int r = 0; r < 4; ++r) {
      a[r][0] = _mm256_fmadd_ps(q0, load8<S>(rows[r] + d), a[r][0]);
      a[r][1] = _mm256_fmadd_ps(q1, load8<S>(rows[r] + d + 8), a[r][1]);
    }
  }
  for (; d + 8 <= D; d += 8) {
    __m256 q0 = _mm256_loadu_ps(q + d);
    for (int r = 0; r < 4; ++r) a[r][0] = _mm256_fmadd_ps(q0, load8<S>(rows[r] + d), a[r][0]);
  }
  for (int r = 0; r < 4; ++r) {
    float s = hsum8(_mm256_add_ps(a[r][0], a[r][1]));
    for (int64_t t = d; t < D; ++t) s += q[t] * Storage<S>::load(rows[r], t);
    out[r] = s;
  }
}

// NQ (1..4) queries against one row: the by-row path scores a row's last 1-3 references
// without padding them to four (rows are referenced ~5 times, so padding wasted ~35%).
template <DType S, int NQ>
RASFAST_AVX2 void dots_same_row_avx2(const float* const* qs, RowPtr<S> row, int64_t D,
                                     float* out) {
  __m256 a[NQ][2];
  for (int r = 0; r < NQ; ++r) a[r][0] = a[r][1] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) {
    __m256 e0 = load8<S>(row + d), e1 = load8<S>(row + d + 8);
    for (int r = 0; r < NQ; ++r) {
      a[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(qs[r] + d), e0, a[r][0]);
      a[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(qs[r] + d + 8), e1, a[r][1]);
    }
  }
  for (; d + 8 <= D; d += 8) {
    __m256 e0 = load8<S>(row + d);
    for (int r = 0; r < NQ; ++r)
      a[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(qs[r] + d), e0, a[r][0]);
  }
  for (int r = 0; r < NQ; ++r) {
    float s = hsum8(_mm256_add_ps(a[r][0], a[r][1]));
    for (int64_t t = d; t < D; ++t) s += qs[r][t] * Storage<S>::load(row, t);
    out[r] = s;
  }
}

// The same three routines with 16-wide vectors (AVX-512F): 4 pairs x 2 chunks of 16 floats
// = 8 independent FMA chains, one fixed reduction tree (_mm512_reduce_add_ps) per pair. Every
// routine of this variant runs the same per-pair sequence, so the variant's paths agree bit
// for bit (different variants agree within float tolerance).
#define RASFAST_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

template <DType S>
RASFAST_AVX512 inline __m512 load16(RowPtr<S> p) {
  if constexpr (S == DType::F32) {
    return _mm512_loadu_ps(p);
  } else if constexpr (S == DType::F16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {  // bfloat16: the high half of a float
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
}

// NQ query pointers against NQ row pointers; `same_q`/`same_row` only change which loads
// are shared, never the arithmetic of a pair.
template <DType S, int NQ>
RASFAST_AVX512 inline void dots_avx512(const float* const* qs, RowPtr<S> const* rows, int64_t D,
                                       float* out) {
  __m512 a[NQ][2];
  for (int r = 0; r < NQ; ++r) a[r][0] = a[r][1] = _mm512_setzero_ps();
  int64_t d = 0;
  for (; d + 32 <= D; d += 32) {
    for (int r = 0; r < NQ; ++r) {
      a[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(qs[r] + d), load16<S>(rows[r] + d), a[r][0]);
      a[r][1] = _mm512_fmadd_ps(_mm512_loadu_ps(qs[r] + d + 16), load16<S>(rows[r] + d + 16), a[r][1]);
    }
  }
  for (; d + 16 <= D; d += 16) {
    for (int r = 0; r < NQ; ++r)
      a[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(qs[r] + d), load16<S>(rows[r] + d), a[r][0]);
  }
  for (int r = 0; r < NQ; ++r) {
    float s = _mm512_reduce_add_ps(_mm512_add_ps(a[r][0], a[r][1]));
    for (int64_t t = d; t < D; ++t) s += qs[r][t] * Storage<S>::load(rows[r], t);
    out[r] = s;
  }
}

template <DType S>
RASFAST_AVX512 void dots4_avx512(const float* const* qs, RowPtr<S> const* rows, int64_t D, float* out) {
  dots_avx512<S, 4>(qs, rows, D, out);
}

template <DType S>
RASFAST_AVX512 void dots_row_avx512(const float* const* qs, RowPtr<S> row, int64_t D, float* out,
                                    int k) {
  RowPtr<S> rows[4] = {row, row, row, row};
  switch (k) {
    case 4: dots_avx512<S, 4>(qs, rows, D, out); break;
    case 3: dots_avx512<S, 3>(qs, rows, D, out); break;
    case 2: dots_avx512<S, 2>(qs, rows, D, out); break;
    default: dots_avx512<S, 1>(qs, rows, D, out); break;
  }
}
#endif

// The instruction set of the inner products: the best this CPU runs unless
// segment_set_simd forced another (tests).
struct SegmentIsa {};
inline Isa& isa_state() { return rasfast::isa_state<SegmentIsa>(); }

template <DType S>
using Dots4Fn = void (*)(const float* const*, RowPtr<S> const*, int64_t, float*);

// kind: 0 = four independent pairs, 1 = one query x four rows.
template <DType S>
Dots4Fn<S> pick_dots4(int kind = 0) {
#ifdef RASFAST_SEGMENT_X86
  if (isa_state() == Isa::Avx512) return dots4_avx512<S>;
  if (isa_state() == Isa::Avx2) return kind == 1 ? dots4_same_q_avx2<S> : dots4_avx2<S>;
#endif
  return dots4_scalar<S>;
}

// parallel_worth_it (common/parallel.h): serial below ~2 ms of work, since a barrier on a
// busy machine waits for a descheduled thread.

// ---------------------------------------------------------------------------- selection
// Writes the best n of (scores[i], base + i) by (score desc, position asc), padded.
// Long segments: the n-th largest score thr is found on a plain float copy (no index
// indirection), then one scan keeps every score > thr (fewer than n) and the
// lowest-position scores == thr; only those <= n are sorted.
void select_top(const float* scores, int64_t len, int64_t base, int64_t n,
                std::vector<int64_t>& order, std::vector<float>& tmp, int64_t* out_ids,
                float* out_scores) {
  auto better = [scores](int64_t a, int64_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  const int64_t m = std::min(n, len);
  order.clear();
  if (m < len) {
    tmp.assign(scores, scores + len);
    std::nth_element(tmp.begin(), tmp.begin() + (m - 1), tmp.end(), std::greater<float>());
    const float thr = tmp[m - 1];
    int64_t above = 0;
    for (int64_t i = 0; i < len; ++i) above += scores[i] > thr;
    int64_t ties = m - above;  // >= 1: thr itself is among the best m
    for (int64_t i = 0; i < len; ++i) {
      if (scores[i] > thr) order.push_back(i);
      else if (scores[i] == thr && ties > 0) { order.push_back(i); --ties; }
    }
  } else {
    for (int64_t i = 0; i < len; ++i) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), better);
  for (int64_t j = 0; j < m; ++j) {
    out_ids[j] = base + order[j];
    out_scores[j] = scores[order[j]];
  }
  for (int64_t j = m; j < n; ++j) {
    out_ids[j] = -1;
    out_scores[j] = -std::numeric_limits<float>::infinity();
  }
}

// ---------------------------------------------------------------------------- topk driver
// Scores of the candidates, two ways:
//  - per query (candidate matrix, or a table much larger than the candidate list): each
//    query streams its own candidate rows;
//  - by table row (cand_ids into a table of T <= 2M rows): candidates are bucketed by table
//    row (a counting sort), and each row is read once and scored against every query that
//    lists it while it sits in L1. Many queries share rows (KiRAG's questions retrieve
//    overlapping passages), so this reads the table once instead of once per reference.
template <DType S>
void scores_per_query(const float* q, int64_t B, int64_t D, RowPtr<S> emb, const int64_t* ids,
                      const int64_t* ptr, float* sc, Dots4Fn<S> dots4) {
#pragma omp parallel for schedule(dynamic, 1) if (parallel_worth_it(ptr[B] * D))
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = ptr[b], len = ptr[b + 1] - s;
    const float* qb = q + b * D;
    const float* qs[4] = {qb, qb, qb, qb};
    auto row = [&](int64_t j) -> RowPtr<S> { return emb + (ids ? ids[s + j] : s + j) * D; };
    for (int64_t j = 0; j < len; j += 4) {
      RowPtr<S> rows[4];
      float out[4];
      for (int r = 0; r < 4; ++r) rows[r] = row(std::min(j + r, len - 1));
      if (ids && j + 8 < len)  // gathered rows: fetch the next group's first cache lines
        for (int r = 4; r < 8; ++r) __builtin_prefetch(row(j + r));
      dots4(qs, rows, D, out);
      for (int r = 0; r < 4 && j + r < len; ++r) sc[s + j + r] = out[r];
    }
  }
}

// Scores k (1..4) queries against one row with the same per-pair arithmetic as dots4.
template <DType S>
using DotsRowFn = void (*)(const float* const*, RowPtr<S>, int64_t, float*, int);

template <DType S>
void dots_row_scalar(const float* const* qs, RowPtr<S> row, int64_t D, float* out, int k) {
  const float* q4[4] = {qs[0], qs[std::min(1, k - 1)], qs[std::min(2, k - 1)],
                        qs[std::min(3, k - 1)]};
  RowPtr<S> rows[4] = {row, row, row, row};
  float o[4];
  dots4_scalar<S>(q4, rows, D, o);
  for (int i = 0; i < k; ++i) out[i] = o[i];
}

#ifdef RASFAST_SEGMENT_X86
template <DType S>
RASFAST_AVX2 void dots_row_avx2(const float* const* qs, RowPtr<S> row, int64_t D, float* out,
                                int k) {
  switch (k) {
    case 4: dots_same_row_avx2<S, 4>(qs, row, D, out); break;
    case 3: dots_same_row_avx2<S, 3>(qs, row, D, out); break;
    case 2: dots_same_row_avx2<S, 2>(qs, row, D, out); break;
    default: dots_same_row_avx2<S, 1>(qs, row, D, out); break;
  }
}
#endif

template <DType S>
DotsRowFn<S> pick_dots_row() {
#ifdef RASFAST_SEGMENT_X86
  if (isa_state() == Isa::Avx512) return dots_row_avx512<S>;
  if (isa_state() == Isa::Avx2) return dots_row_avx2<S>;
#endif
  return dots_row_scalar<S>;
}

// One bucketed reference: candidate position j and its query b, packed together so the
// scoring loop reads the query without a second random lookup.
struct Ref {
  int64_t pos;
  int64_t query;
};

// The table's rows are split into contiguous chunks (a few per thread, dynamic: a thread
// descheduled on a busy machine only delays its own chunk). Each chunk buckets its own
// references by scanning cand_ids (a sequential read) -- a counting sort over the chunk's
// rows whose counters and buckets stay in cache -- then scores its rows in order.
template <DType S>
void scores_by_row(const float* q, int64_t B, int64_t D, RowPtr<S> emb, int64_t T,
                   const int64_t* ids, const int64_t* ptr, float* sc, DotsRowFn<S> dots) {
  const int64_t M = ptr[B];
  const bool par = parallel_worth_it(M * D);
  const int64_t chunks = par ? std::min<int64_t>(T, 4 * (int64_t)omp_get_max_threads()) : 1;
#pragma omp parallel if (par)
  {
    std::vector<int64_t> start, cursor;
    std::vector<Ref> refs;
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t lo = T * c / chunks, rows = T * (c + 1) / chunks - lo;
      start.assign(rows + 1, 0);
      for (int64_t j = 0; j < M; ++j) {
        const uint64_t r = (uint64_t)(ids[j] - lo);
        if (r < (uint64_t)rows) ++start[r + 1];
      }
      for (int64_t r = 0; r < rows; ++r) start[r + 1] += start[r];
      refs.resize(start[rows]);
      cursor.assign(start.begin(), start.end() - 1);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = ptr[b]; j < ptr[b + 1]; ++j) {
          const uint64_t r = (uint64_t)(ids[j] - lo);
          if (r < (uint64_t)rows) refs[cursor[r]++] = Ref{j, b};
        }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t a = start[r], e = start[r + 1];
        RowPtr<S> row = emb + (lo + r) * D;
        for (int64_t k = a; k < e; k += 4) {
          const int cnt = (int)std::min<int64_t>(4, e - k);
          const float* qs[4];
          float out[4];
          for (int i = 0; i < cnt; ++i) qs[i] = q + refs[k + i].query * D;
          dots(qs, row, D, out, cnt);
          for (int i = 0; i < cnt; ++i) sc[refs[k + i].pos] = out[i];
        }
      }
    }
  }
}

template <DType S>
int64_t topk_impl(const float* q, int64_t B, int64_t D, RowPtr<S> emb, int64_t T,
                  const int64_t* ids, const int64_t* ptr, int64_t n, int64_t* out_ids,
                  float* out_scores) {
  const int64_t M = ptr[B];
  std::vector<float> sc(M);
  if (ids && T <= 2 * M)
    scores_by_row<S>(q, B, D, emb, T, ids, ptr, sc.data(), pick_dots_row<S>());
  else
    scores_per_query<S>(q, B, D, emb, ids, ptr, sc.data(), pick_dots4<S>(1));
  std::atomic<int64_t> bad{std::numeric_limits<int64_t>::max()};
#pragma omp parallel if (parallel_worth_it(M * 32))
  {
    std::vector<int64_t> order;
    std::vector<float> tmp;
#pragma omp for schedule(dynamic, 4)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t s = ptr[b], len = ptr[b + 1] - s;
      bool finite = true;
      for (int64_t j = 0; j < len && finite; ++j) {
        if (!std::isfinite(sc[s + j])) {  // reported to Python; never fed to the comparator
          finite = false;
          int64_t cur = bad.load();
          while (s + j < cur && !bad.compare_exchange_weak(cur, s + j)) {}
        }
      }
      if (finite)
        select_top(sc.data() + s, len, s, n, order, tmp, out_ids + b * n, out_scores + b * n);
    }
  }
  int64_t where = bad.load();
  return where == std::numeric_limits<int64_t>::max() ? -1 : where;
}

int64_t segment_topk_scores(py::array_t<float> q, py::array emb, int code, py::array ids,
                            bool use_ids, py::array ptr, int64_t n, py::array out_ids,
                            py::array out_scores) {
  require(n >= 1, "n: must be >= 1");
  check_buffer(q, "q_emb", 2, 4);
  const int64_t B = q.shape(0), D = q.shape(1);
  DType dt = dtype_from_code(code);
  check_buffer(emb, "cand_emb", 2, dtype_itemsize(dt), {-1, D});
  check_buffer(ptr, "cand_ptr", 1, 8, {B + 1});
  check_buffer(out_ids, "out_ids", 2, 8, {B, n});
  check_buffer(out_scores, "out_scores", 2, 4, {B, n});
  const int64_t* p = const_ptr<int64_t>(ptr);
  const int64_t* id = nullptr;
  const int64_t rows = emb.shape(0);
  int64_t M = p[B];
  ThreadScope threads_scope(M * D);  // serial below the grain (common/parallel.h)
  if (use_ids) {
    check_buffer(ids, "cand_ids", 1, 8);
    require(ids.shape(0) == M, "cand_ids: length must equal cand_ptr[-1]");
    id = const_ptr<int64_t>(ids);
    for (int64_t j = 0; j < M; ++j)
      require(id[j] >= 0 && id[j] < rows, "cand_ids: index out of range");
  } else {
    require(rows == M, "cand_emb: rows must equal cand_ptr[-1]");
  }
  require(p[0] == 0, "cand_ptr: must start at 0");
  for (int64_t b = 0; b < B; ++b) require(p[b + 1] >= p[b], "cand_ptr: must be non-decreasing");
  int64_t* oi = mutable_ptr<int64_t>(out_ids);
  float* os = mutable_ptr<float>(out_scores);
  int64_t err = -1;
  {
    py::gil_scoped_release nogil;
    RASFAST_DISPATCH_DTYPE(dt, S, {
      err = topk_impl<S>(q.data(), B, D, static_cast<RowPtr<S>>(emb.data()), rows, id, p, n,
                         oi, os);
    })
  }
  return err;
}

// ---------------------------------------------------------------------------- max rank
// Per query: items reduced to groups by max, the top k groups (score desc, group asc).
void max_rank_impl(const float* s, int64_t M, const int64_t* g, const int64_t* p, int64_t B,
                   int64_t k, int64_t* oi, float* os) {
#pragma omp parallel if (parallel_worth_it(M * 32))
  {
    std::vector<std::pair<int64_t, float>> items;
#pragma omp for schedule(dynamic, 4)
    for (int64_t b = 0; b < B; ++b) {
      items.clear();
      for (int64_t j = p[b]; j < p[b + 1]; ++j)
        if (s[j] != -std::numeric_limits<float>::infinity()) items.emplace_back(g[j], s[j]);
      // by group, best score first: the first item of each group run is its max
      std::sort(items.begin(), items.end(), [](const auto& a, const auto& c) {
        return a.first < c.first || (a.first == c.first && a.second > c.second);
      });
      size_t u = 0;
      for (size_t j = 0; j < items.size(); ++j)
        if (j == 0 || items[j].first != items[j - 1].first) items[u++] = items[j];
      items.resize(u);
      auto better = [](const auto& a, const auto& c) {
        return a.second > c.second || (a.second == c.second && a.first < c.first);
      };
      int64_t m = std::min<int64_t>(k, (int64_t)u);
      std::partial_sort(items.begin(), items.begin() + m, items.end(), better);
      for (int64_t j = 0; j < k; ++j) {
        oi[b * k + j] = j < m ? items[j].first : -1;
        os[b * k + j] = j < m ? items[j].second : -std::numeric_limits<float>::infinity();
      }
    }
  }
}

void segment_max_rank(py::array_t<float> scores, py::array groups, py::array ptr, int64_t k,
                      py::array out_ids, py::array out_scores) {
  require(k >= 1, "k: must be >= 1");
  check_buffer(scores, "item_scores", 1, 4);
  const int64_t M = scores.shape(0);
  check_buffer(groups, "item_to_group", 1, 8, {M});
  require(ptr.ndim() == 1 && ptr.shape(0) >= 1, "ptr: expected B + 1 >= 1 entries");
  check_buffer(ptr, "ptr", 1, 8);
  const int64_t B = ptr.shape(0) - 1;
  check_buffer(out_ids, "out_ids", 2, 8, {B, k});
  check_buffer(out_scores, "out_scores", 2, 4, {B, k});
  const int64_t* p = const_ptr<int64_t>(ptr);
  require(p[0] == 0 && p[B] == M, "ptr: must run from 0 to len(item_scores)");
  for (int64_t b = 0; b < B; ++b) require(p[b + 1] >= p[b], "ptr: must be non-decreasing");
  ThreadScope threads_scope(M * 32);  // serial below the grain (common/parallel.h)
  const float* s = scores.data();
  const int64_t* g = const_ptr<int64_t>(groups);
  int64_t* oi = mutable_ptr<int64_t>(out_ids);
  float* os = mutable_ptr<float>(out_scores);
  py::gil_scoped_release nogil;
  max_rank_impl(s, M, g, p, B, k, oi, os);
}

void bind(py::module_& m) {
  m.def("segment_topk_scores", &segment_topk_scores, py::arg("q"), py::arg("emb"),
        py::arg("dtype_code"), py::arg("ids"), py::arg("use_ids"), py::arg("ptr"), py::arg("n"),
        py::arg("out_ids"), py::arg("out_scores"),
        "Per-query top-n inner products over CSR candidates; returns the position of a "
        "non-finite score, or -1.");
  m.def("segment_max_rank", &segment_max_rank, py::arg("scores"), py::arg("groups"),
        py::arg("ptr"), py::arg("k"), py::arg("out_ids"), py::arg("out_scores"),
        "Per-query top-k groups by max item score.");
  bind_isa(m, "segment", isa_state());
}

}  // namespace
}  // namespace segment
RASFAST_REGISTER(segment, segment::bind);

// The torch operators' entries (common/entry_points.h): the kernels above, raw pointers; the
// caller has checked ids, ptr and the queries as the Python path does.
int64_t segment_topk_scores_entry(const float* q, int64_t B, int64_t D, const void* emb,
                                  int code, int64_t T, const int64_t* ids, const int64_t* ptr,
                                  int64_t n, int64_t* out_ids, float* out_scores) {
  try {
    const DType dt = dtype_from_code(code);
    ThreadScope threads_scope(ptr[B] * D);  // as segment::segment_topk_scores
    int64_t err = -1;
    RASFAST_DISPATCH_DTYPE(dt, S, {
      err = segment::topk_impl<S>(q, B, D, static_cast<segment::RowPtr<S>>(emb), T, ids, ptr, n,
                                  out_ids, out_scores);
    })
    return err;
  } catch (...) {
    return -2;
  }
}

int segment_max_rank_entry(const float* scores, int64_t M, const int64_t* groups,
                           const int64_t* ptr, int64_t B, int64_t k, int64_t* out_ids,
                           float* out_scores) {
  try {
    ThreadScope threads_scope(M * 32);  // as segment::segment_max_rank
    segment::max_rank_impl(scores, M, groups, ptr, B, k, out_ids, out_scores);
    return 0;
  } catch (...) {
    return -1;
  }
}
}  // namespace rasfast
