// triple_beam_search, CPU backend: GEAR's Algorithm 1 over a CSR triple graph, OpenMP over
// queries. Semantics and the total order are those of rasfast/reference/beam.py:
//   within a beam: (v desc, id asc); globally: (float64 d desc, id asc, beam asc).
//
// Per beam only the best M = min(count, max_neighbors, T + b) candidates (by v) can
// reach the global top b: ranks >= T share the constant factor exp(-1), and a float64
// product with a constant is strictly monotone in float32 v, so within that tail the
// order by d equals the order by v and only its first b can survive. Hence a
// partial_sort instead of a full sort; the result is identical to the full algorithm.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/buffers.h"
#include "common/parallel.h"
#include "common/registry.h"

namespace rasfast {
namespace {

struct Cand {     // one candidate of one beam
  float v;        // s + score(q, T + t)
  int32_t parent; // beam index
  int64_t id;     // triple id
};

struct Pooled {   // a candidate after decay
  double d;
  float v;
  int32_t parent;
  int64_t id;
};

inline bool by_value(const Cand& a, const Cand& b) {
  return a.v > b.v || (a.v == b.v && a.id < b.id);
}

inline bool by_decayed(const Pooled& a, const Pooled& b) {
  if (a.d != b.d) return a.d > b.d;
  if (a.id != b.id) return a.id < b.id;
  return a.parent < b.parent;
}

// First error seen by any thread; reported after the parallel region.
struct ErrorSlot {
  int code = 0;  // 0 ok, 1 id out of range, 2 row not increasing, 3 non-finite embedding
  int64_t where = 0;
  void set(int c, int64_t w) {
#pragma omp critical(rasfast_beam_error)
    if (code == 0) { code = c; where = w; }
  }
};

// dot(q, u + e) and |u + e|^2 in float32 (u == nullptr: u = 0). `row` is scratch [D].
// Portable version: the compiler vectorises the omp simd reductions for the baseline ISA.
template <DType DT>
inline void score_parts_generic(const typename Storage<DT>::type* e, const float* u,
                                const float* q, int64_t D, float* row, float& dot, float& nn) {
  const float* x;
  if constexpr (DT == DType::F32) {
    x = e;
  } else {
    for (int64_t k = 0; k < D; ++k) row[k] = Storage<DT>::load(e, k);
    x = row;
  }
  float sd = 0.f, sn = 0.f;
  if (u) {
#pragma omp simd reduction(+ : sd, sn)
    for (int64_t k = 0; k < D; ++k) {
      const float w = u[k] + x[k];
      sd += q[k] * w;
      sn += w * w;
    }
  } else {
#pragma omp simd reduction(+ : sd, sn)
    for (int64_t k = 0; k < D; ++k) {
      sd += q[k] * x[k];
      sn += x[k] * x[k];
    }
  }
  dot = sd;
  nn = sn;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// AVX2/FMA/F16C versions, chosen at run time (the build targets baseline x86-64, and the
// scoring loop is most of the work). FMA rounding differs from the portable path only in
// the last bits; exact inputs (the tests' k/4 embeddings) stay exact.
#define RASFAST_BEAM_X86 1

__attribute__((target("avx2,fma,f16c"))) void row_to_float_x86(const uint16_t* e, int64_t D,
                                                                bool bf16, float* row) {
  int64_t k = 0;
  for (; k + 8 <= D; k += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(e + k));
    const __m256 f = bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                          : _mm256_cvtph_ps(h);
    _mm256_storeu_ps(row + k, f);
  }
  for (; k < D; ++k) row[k] = bf16 ? bf16_bits_to_float(e[k]) : half_bits_to_float(e[k]);
}

__attribute__((target("avx2,fma"))) inline float hsum_x86(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

__attribute__((target("avx2,fma"))) void dot_norm_x86(const float* x, const float* u,
                                                      const float* q, int64_t D, float& dot,
                                                      float& nn) {
  __m256 d0 = _mm256_setzero_ps(), d1 = _mm256_setzero_ps();
  __m256 n0 = _mm256_setzero_ps(), n1 = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= D; k += 16) {
    __m256 w0 = _mm256_loadu_ps(x + k), w1 = _mm256_loadu_ps(x + k + 8);
    if (u) {
      w0 = _mm256_add_ps(_mm256_loadu_ps(u + k), w0);
      w1 = _mm256_add_ps(_mm256_loadu_ps(u + k + 8), w1);
    }
    d0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + k), w0, d0);
    d1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + k + 8), w1, d1);
    n0 = _mm256_fmadd_ps(w0, w0, n0);
    n1 = _mm256_fmadd_ps(w1, w1, n1);
  }
  float sd = hsum_x86(_mm256_add_ps(d0, d1)), sn = hsum_x86(_mm256_add_ps(n0, n1));
  for (; k < D; ++k) {
    const float w = u ? u[k] + x[k] : x[k];
    sd += q[k] * w;
    sn += w * w;
  }
  dot = sd;
  nn = sn;
}

// RASFAST_BEAM_PORTABLE=1 in the environment forces the portable path (tests cover both).
const bool kHasAvx2 = std::getenv("RASFAST_BEAM_PORTABLE") == nullptr &&
                      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c");
#endif

template <DType DT>
inline void score_parts(const typename Storage<DT>::type* e, const float* u, const float* q,
                        int64_t D, float* row, float& dot, float& nn) {
#ifdef RASFAST_BEAM_X86
  if (kHasAvx2) {
    const float* x;
    if constexpr (DT == DType::F32) {
      x = e;
    } else {
      row_to_float_x86(e, D, DT == DType::BF16, row);
      x = row;
    }
    dot_norm_x86(x, u, q, D, dot, nn);
    return;
  }
#endif
  score_parts_generic<DT>(e, u, q, D, row, dot, nn);
}

// Rows are random accesses: start fetching the row scored kPrefetch candidates later.
constexpr int64_t kPrefetch = 4;
inline void prefetch_row(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off);
}

inline float cosine(float dot, float nn, float qnorm) {
  const float den = qnorm * std::sqrt(nn);
  return den > 0.f ? dot / den : 0.f;
}

struct Params {
  int64_t n, D, b, L, max_nb, tail;  // tail = T: ranks >= T use decay[T]
  const int64_t* indptr;
  const float* q;
  const float* qnorm;
  const int64_t* seed_ptr;
  const int64_t* seed_ids;
  const double* decay;
  int64_t* out_seq;
  float* out_score;
  int64_t* out_len;
  int64_t* out_count;
};

// Per-thread scratch, reused across queries.
struct Work {
  std::vector<int64_t> seq, seq_next;  // [b, L]
  std::vector<float> s, s_next;        // [b]
  std::vector<float> u, u_next;        // [b, D] running sums
  std::vector<float> row;              // [D] dtype conversion scratch
  std::vector<int64_t> visited;        // sorted ids in the current beams
  std::vector<Cand> cands;
  std::vector<Pooled> pool;
  void init(const Params& p) {
    seq.resize(p.b * p.L); seq_next.resize(p.b * p.L);
    s.resize(p.b); s_next.resize(p.b);
    u.resize(p.b * p.D); u_next.resize(p.b * p.D);
    row.resize(p.D);
  }
};

template <DType DT, class Idx>
void search_query(const Params& p, const typename Storage<DT>::type* emb, const Idx* indices,
                  int64_t qi, Work& w, ErrorSlot& err) {
  using T = typename Storage<DT>::type;
  const int64_t D = p.D, b = p.b, L = p.L;
  const float* q = p.q + qi * D;
  const float qn = p.qnorm[qi];
  auto erow = [&](int64_t t) -> const T* { return emb + t * D; };

  // step 0: the seeds (unique, ascending) -> top b by (score desc, id asc)
  w.cands.clear();
  for (int64_t k = p.seed_ptr[qi]; k < p.seed_ptr[qi + 1]; ++k) {
    const int64_t t = p.seed_ids[k];
    float dot, nn;
    score_parts<DT>(erow(t), nullptr, q, D, w.row.data(), dot, nn);
    if (!std::isfinite(dot) || !std::isfinite(nn)) { err.set(3, t); return; }
    w.cands.push_back({cosine(dot, nn, qn), 0, t});
  }
  int64_t nb = std::min<int64_t>(b, (int64_t)w.cands.size());
  std::partial_sort(w.cands.begin(), w.cands.begin() + nb, w.cands.end(), by_value);
  for (int64_t j = 0; j < nb; ++j) {
    const Cand& c = w.cands[j];
    w.seq[j * L] = c.id;
    w.s[j] = c.v;
    for (int64_t k = 0; k < D; ++k) w.u[j * D + k] = Storage<DT>::load(erow(c.id), k);
  }
  int64_t len = nb ? 1 : 0;

  for (int64_t step = 1; step < L && nb > 0; ++step) {
    w.visited.assign(nb * step, 0);
    for (int64_t j = 0; j < nb; ++j)
      for (int64_t k = 0; k < step; ++k) w.visited[j * step + k] = w.seq[j * L + k];
    std::sort(w.visited.begin(), w.visited.end());
    w.pool.clear();
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t last = w.seq[j * L + step - 1];
      const float* uj = w.u.data() + j * D;
      w.cands.clear();
      int64_t prev = -1;
      for (int64_t e = p.indptr[last]; e < p.indptr[last + 1]; ++e) {
        const int64_t t = (int64_t)indices[e];
        if (t < 0 || t >= p.n) { err.set(1, t); return; }
        if (t <= prev) { err.set(2, last); return; }
        prev = t;
        if (e + kPrefetch < p.indptr[last + 1]) {
          const int64_t t1 = (int64_t)indices[e + kPrefetch];
          if (t1 >= 0 && t1 < p.n) prefetch_row(erow(t1), D * (int64_t)sizeof(T));
        }
        if (std::binary_search(w.visited.begin(), w.visited.end(), t)) continue;
        float dot, nn;
        score_parts<DT>(erow(t), uj, q, D, w.row.data(), dot, nn);
        if (!std::isfinite(dot) || !std::isfinite(nn)) { err.set(3, t); return; }
        w.cands.push_back({w.s[j] + cosine(dot, nn, qn), (int32_t)j, t});
      }
      int64_t m = std::min<int64_t>((int64_t)w.cands.size(), p.tail + b);
      if (p.max_nb > 0) m = std::min(m, p.max_nb);
      std::partial_sort(w.cands.begin(), w.cands.begin() + m, w.cands.end(), by_value);
      for (int64_t r = 0; r < m; ++r) {
        const Cand& c = w.cands[r];
        // the decay multiplies the cumulative value (negative values move toward 0)
        const double d = (double)c.v * p.decay[std::min(r, p.tail)];
        w.pool.push_back({d, c.v, c.parent, c.id});
      }
    }
    if (w.pool.empty()) break;  // no beam can extend: keep the current beams
    const int64_t nn_ = std::min<int64_t>(b, (int64_t)w.pool.size());
    std::partial_sort(w.pool.begin(), w.pool.begin() + nn_, w.pool.end(), by_decayed);
    for (int64_t j = 0; j < nn_; ++j) {
      const Pooled& c = w.pool[j];
      for (int64_t k = 0; k < step; ++k) w.seq_next[j * L + k] = w.seq[c.parent * L + k];
      w.seq_next[j * L + step] = c.id;
      w.s_next[j] = (float)c.d;
      const float* up = w.u.data() + (int64_t)c.parent * D;
      float* un = w.u_next.data() + j * D;
      for (int64_t k = 0; k < D; ++k) un[k] = up[k] + Storage<DT>::load(erow(c.id), k);
    }
    std::swap(w.seq, w.seq_next);
    std::swap(w.s, w.s_next);
    std::swap(w.u, w.u_next);
    nb = nn_;
    len = step + 1;
  }

  int64_t* oseq = p.out_seq + qi * b * L;
  float* osc = p.out_score + qi * b;
  for (int64_t j = 0; j < b; ++j) {
    for (int64_t k = 0; k < L; ++k) oseq[j * L + k] = (j < nb && k < len) ? w.seq[j * L + k] : -1;
    osc[j] = j < nb ? w.s[j] : -std::numeric_limits<float>::infinity();
  }
  p.out_len[qi] = len;
  p.out_count[qi] = nb;
}

template <DType DT, class Idx>
void search_all(const Params& p, const void* emb, const Idx* indices, int64_t B, ErrorSlot& err) {
  using T = typename Storage<DT>::type;
#pragma omp parallel
  {
    Work w;
    w.init(p);
#pragma omp for schedule(dynamic, 4)
    for (int64_t qi = 0; qi < B; ++qi) {
      if (err.code) continue;
      search_query<DT, Idx>(p, static_cast<const T*>(emb), indices, qi, w, err);
    }
  }
}

void beam_search_cpu(py::array indptr, py::array indices, py::array emb, int dtype_code,
                     py::array q, py::array qnorm, py::array seed_ptr, py::array seed_ids,
                     int64_t beam_width, int64_t max_len, int64_t max_neighbors, py::array decay,
                     py::array out_seq, py::array out_score, py::array out_len,
                     py::array out_count) {
  const DType dt = dtype_from_code(dtype_code);
  check_buffer(emb, "triple_emb", 2, dtype_itemsize(dt));
  const int64_t n = emb.shape(0), D = emb.shape(1);
  check_buffer(q, "q_emb", 2, 4, {-1, D});
  const int64_t B = q.shape(0);
  require(beam_width >= 1 && max_len >= 1 && max_neighbors >= 0,
          "beam_width and max_len must be >= 1, max_neighbors >= 0 (0 = no cap)");
  require(beam_width < (int64_t)1 << 31, "beam_width must be < 2^31");
  check_buffer(qnorm, "qnorm", 1, 4, {B});
  check_buffer(indptr, "graph.indptr", 1, 8, {n + 1});
  require(indices.ndim() == 1 && (indices.itemsize() == 4 || indices.itemsize() == 8),
          "graph.indices: expected a 1-d int32 or int64 array");
  check_buffer(indices, "graph.indices", 1, indices.itemsize());
  check_buffer(seed_ptr, "seeds.ptr", 1, 8, {B + 1});
  check_buffer(seed_ids, "seeds.ids", 1, 8);
  check_buffer(decay, "decay", 1, 8);
  require(decay.shape(0) >= 1, "decay: expected at least one factor");
  const int64_t b = beam_width, L = max_len;
  // work ~ queries x beams x steps x neighbours per triple x dim; serial below the grain
  const int64_t avg_degree = n > 0 ? (int64_t)indices.shape(0) / n : 0;
  ThreadScope threads_scope(B * b * L * D * (1 + avg_degree));
  check_buffer(out_seq, "out_seq", 3, 8, {B, b, L});
  check_buffer(out_score, "out_score", 2, 4, {B, b});
  check_buffer(out_len, "out_len", 1, 8, {B});
  check_buffer(out_count, "out_count", 1, 8, {B});

  // Second line of defence: the graph and seed layout must be consistent before any read.
  const int64_t nnz = indices.shape(0);
  const int64_t* ip = const_ptr<int64_t>(indptr);
  require(ip[0] == 0 && ip[n] == nnz, "graph.indptr: must start at 0 and end at len(indices)");
  for (int64_t i = 0; i < n; ++i) require(ip[i] <= ip[i + 1], "graph.indptr: must be non-decreasing");
  const int64_t* sp = const_ptr<int64_t>(seed_ptr);
  const int64_t* si = const_ptr<int64_t>(seed_ids);
  require(sp[0] == 0 && sp[B] == seed_ids.shape(0), "seeds.ptr: must run from 0 to len(ids)");
  for (int64_t i = 0; i < B; ++i) require(sp[i] <= sp[i + 1], "seeds.ptr: must be non-decreasing");
  for (int64_t k = 0; k < seed_ids.shape(0); ++k)
    require(si[k] >= 0 && si[k] < n, "seeds: triple id out of range [0, n)");

  Params p{n, D, b, L, max_neighbors, (int64_t)decay.shape(0) - 1, ip,
           const_ptr<float>(q), const_ptr<float>(qnorm), sp, si, const_ptr<double>(decay),
           mutable_ptr<int64_t>(out_seq), mutable_ptr<float>(out_score),
           mutable_ptr<int64_t>(out_len), mutable_ptr<int64_t>(out_count)};
  const void* e = emb.data();
  const bool idx64 = indices.itemsize() == 8;
  const void* ix = indices.data();
  ErrorSlot err;
  {
    py::gil_scoped_release nogil;
    RASFAST_DISPATCH_DTYPE(dt, DT, {
      if (idx64) search_all<DT, int64_t>(p, e, static_cast<const int64_t*>(ix), B, err);
      else search_all<DT, int32_t>(p, e, static_cast<const int32_t*>(ix), B, err);
    })
  }
  if (err.code == 1)
    throw py::value_error("graph.indices: a neighbour id is out of range [0, " + std::to_string(n) +
                          ") (got " + std::to_string(err.where) + ")");
  if (err.code == 2)
    throw py::value_error("graph.indices: a neighbour list is not strictly increasing (rows must "
                          "be sorted, without duplicates; row " + std::to_string(err.where) + ")");
  if (err.code == 3)
    throw py::value_error("triple_emb: a row read by the search contains NaN/inf values (or its "
                          "squared norm overflows float32; row " + std::to_string(err.where) + ")");
}

void bind(py::module_& m) {
  m.def("beam_search", &beam_search_cpu, py::arg("indptr"), py::arg("indices"), py::arg("emb"),
        py::arg("dtype_code"), py::arg("q"), py::arg("qnorm"), py::arg("seed_ptr"),
        py::arg("seed_ids"), py::arg("beam_width"), py::arg("max_len"), py::arg("max_neighbors"),
        py::arg("decay"), py::arg("out_seq"), py::arg("out_score"), py::arg("out_len"),
        py::arg("out_count"),
        "GEAR triple beam search (Algorithm 1) for B queries; writes the out_* arrays.");
}

}  // namespace
RASFAST_REGISTER(beam, bind);
}  // namespace rasfast
