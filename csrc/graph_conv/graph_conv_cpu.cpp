// Graph-transformer message passing, CPU backend (OpenMP over destination nodes or graphs).
//
// graph_conv_attend: for every destination node i and head h, over i's incoming edges
// (CSR by destination: indptr, src, eid = row of the edge's features), an online
// (flash-style) softmax of
//     logit = scale * (q[i,h] . k[src,h] + qe[i,h] . ed[eid,h])
// and the softmax-weighted sums  acc1[i,h] = sum p * val[src,h],  acc2[i,h] = sum p * ed[eid,h].
// Every operand is (buffer, column offset, head stride): the same code serves
//  - PyG's direct form: qe = q, ed = projected edge features per head (dim C); v + e = acc1 + acc2;
//  - the factored form: qe = W_e,h^T q (dim De), ed = raw edge_attr shared by heads (head
//    stride 0), so edge features are projected once per node after aggregation, not per edge;
//  - pooling: with graph_ptr the rows are graphs and node results are averaged into them.
// Nodes without incoming edges get zeros (PyG's sum over an empty set).
//
// graph_conv_epilogue: out = agg (concat or head mean) + skip (or the beta gate), then
// optional LayerNorm and ReLU, written in the output dtype.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <limits>
#include <vector>

#include "common/buffers.h"
#include "common/isa.h"
#include "common/parallel.h"
#include "common/registry.h"

namespace rasfast {
namespace {

// The hot loops are written once (always inlined) and compiled three times: for the baseline
// ISA and, on x86-64, for AVX2+FMA and AVX-512 (512-bit vectors), chosen at run time (the
// build uses no -march flag). graph_conv_set_simd forces one (the tests run each).
#if defined(__GNUC__)
#define GC_INLINE __attribute__((always_inline)) inline
#else
#define GC_INLINE inline
#endif
#if RASFAST_ISA_X86
#define GC_X86 1
#define GC_AVX2 __attribute__((target("avx2,fma")))
#define GC_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma,prefer-vector-width=512")))
#else
#define GC_X86 0
#endif

struct GraphConvIsa {};
inline Isa& isa_state() { return rasfast::isa_state<GraphConvIsa>(); }

// An operand: row r, head h, channel c lives at base[r * row + col + h * head + c].
struct Operand {
  const void* base = nullptr;
  int64_t row = 0, col = 0, head = 0, dim = 0;
};

template <DType D> struct View {
  using T = typename Storage<D>::type;
  const T* p;
  int64_t row, col, head;
  explicit View(const Operand& o)
      : p(static_cast<const T*>(o.base)), row(o.row), col(o.col), head(o.head) {}
  inline int64_t at(int64_t r, int64_t h) const { return r * row + col + h * head; }
};

// Two halves, each one vectorised reduction: the vector accumulators of the two chains are
// independent, so the FMA latency does not bound short dot products (C = 64 here), and
// there is one horizontal sum per half instead of one per 8 elements.
template <DType D>
GC_INLINE float dot(const typename Storage<D>::type* a, const typename Storage<D>::type* b, int64_t n) {
  const int64_t h = (n / 2) & ~int64_t(15);
  float s0 = 0.f, s1 = 0.f;
#pragma omp simd reduction(+ : s0)
  for (int64_t c = 0; c < h; ++c) s0 += Storage<D>::load(a, c) * Storage<D>::load(b, c);
#pragma omp simd reduction(+ : s1)
  for (int64_t c = h; c < n; ++c) s1 += Storage<D>::load(a, c) * Storage<D>::load(b, c);
  return s0 + s1;
}

template <DType D>
GC_INLINE void axpy(float p, const typename Storage<D>::type* x, float* acc, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) acc[c] += p * Storage<D>::load(x, c);
}

GC_INLINE void scale_vec(float* a, float s, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) a[c] *= s;
}

struct AttendArgs {
  const int64_t* indptr;
  const int64_t* src;
  const int64_t* eid;
  Operand q, k, val, qe, ed;
  int64_t H, C;
  float scale;
  bool has_edge;
  int64_t rows;  // output rows (nodes, or graphs when pooled); outputs are head-major
  float* out1;   // [H, rows, val.dim]
  float* out2;   // [H, rows, ed.dim] (only when has_edge)
};

// Per-thread scratch: running max, sum and the two accumulators of every head.
struct Scratch {
  std::vector<float> m, s, a1, a2;
  void resize(int64_t H, int64_t d1, int64_t d2) {
    m.resize(H); s.resize(H); a1.resize(H * d1); a2.resize(H * d2 > 0 ? H * d2 : 1);
  }
};

template <DType D>
GC_INLINE void attend_node_impl(const AttendArgs& A, int64_t i, Scratch& S, float w, bool accumulate, int64_t orow) {
  View<D> q(A.q), k(A.k), val(A.val), qe(A.qe), ed(A.ed);
  const int64_t H = A.H, C = A.C, d1 = A.val.dim, d2 = A.has_edge ? A.ed.dim : 0;
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t h = 0; h < H; ++h) { S.m[h] = ninf; S.s[h] = 0.f; }
  std::fill(S.a1.begin(), S.a1.begin() + H * d1, 0.f);
  if (d2) std::fill(S.a2.begin(), S.a2.begin() + H * d2, 0.f);
  const int64_t b = A.indptr[i], e = A.indptr[i + 1];
  // Edges outer, heads inner: a shared edge row (factored form) stays in L1 across heads.
  for (int64_t t = b; t < e; ++t) {
    const int64_t j = A.src[t], r = A.eid[t];
    for (int64_t h = 0; h < H; ++h) {
      float l = dot<D>(q.p + q.at(i, h), k.p + k.at(j, h), C);
      if (d2) l += dot<D>(qe.p + qe.at(i, h), ed.p + ed.at(r, h), d2);
      l *= A.scale;
      float* a1 = S.a1.data() + h * d1;
      float* a2 = S.a2.data() + h * d2;
      if (l > S.m[h]) {  // new running max: rescale what was accumulated so far
        const float f = std::exp(S.m[h] - l);  // exp(-inf) = 0 on the first edge
        if (S.s[h] > 0.f) {
          S.s[h] *= f;
          scale_vec(a1, f, d1);
          if (d2) scale_vec(a2, f, d2);
        }
        S.m[h] = l;
      }
      const float p = std::exp(l - S.m[h]);
      S.s[h] += p;
      axpy<D>(p, val.p + val.at(j, h), a1, d1);
      if (d2) axpy<D>(p, ed.p + ed.at(r, h), a2, d2);
    }
  }
  for (int64_t h = 0; h < H; ++h) {
    const float f = (e > b && S.s[h] > 0.f) ? w / S.s[h] : 0.f;
    if (e == b && accumulate) continue;
    float* o1 = A.out1 + (h * A.rows + orow) * d1;
    for (int64_t c = 0; c < d1; ++c) {
      const float v = S.a1[h * d1 + c] * f;
      o1[c] = accumulate ? o1[c] + v : v;
    }
    if (!d2) continue;
    float* o2 = A.out2 + (h * A.rows + orow) * d2;
    for (int64_t c = 0; c < d2; ++c) {
      const float v = S.a2[h * d2 + c] * f;
      o2[c] = accumulate ? o2[c] + v : v;
    }
  }
}


template <DType D>
void attend_node_base(const AttendArgs& A, int64_t i, Scratch& S, float w, bool acc, int64_t orow) {
  attend_node_impl<D>(A, i, S, w, acc, orow);
}
#if GC_X86
template <DType D>
GC_AVX2 void attend_node_avx2(const AttendArgs& A, int64_t i, Scratch& S, float w, bool acc,
                              int64_t orow) {
  attend_node_impl<D>(A, i, S, w, acc, orow);
}
template <DType D>
GC_AVX512 void attend_node_avx512(const AttendArgs& A, int64_t i, Scratch& S, float w, bool acc,
                                  int64_t orow) {
  attend_node_impl<D>(A, i, S, w, acc, orow);
}
#endif
template <DType D>
using AttendFn = void (*)(const AttendArgs&, int64_t, Scratch&, float, bool, int64_t);
template <DType D>
AttendFn<D> pick_attend() {
#if GC_X86
  if (isa_state() == Isa::Avx512) return attend_node_avx512<D>;
  if (isa_state() == Isa::Avx2) return attend_node_avx2<D>;
#endif
  return attend_node_base<D>;
}

// OpenMP over destination nodes, or over graphs when pooling (a graph's nodes add into its row).
template <DType D>
void attend_all(const AttendArgs& A, int64_t N, int64_t G, const int64_t* gp, int64_t val_dim,
                int64_t ed_dim) {
  const int64_t H = A.H;
  const AttendFn<D> attend_node = pick_attend<D>();
#pragma omp parallel
  {
    Scratch S;
    S.resize(H, val_dim, A.has_edge ? ed_dim : 0);
    if (gp == nullptr) {
#pragma omp for schedule(dynamic, 16)
      for (int64_t i = 0; i < N; ++i) attend_node(A, i, S, 1.f, false, i);
    } else {
#pragma omp for schedule(dynamic, 1)
      for (int64_t g = 0; g < G; ++g) {
        for (int64_t h = 0; h < H; ++h) {
          std::fill_n(A.out1 + (h * G + g) * val_dim, val_dim, 0.f);
          if (A.has_edge) std::fill_n(A.out2 + (h * G + g) * ed_dim, ed_dim, 0.f);
        }
        const int64_t n = gp[g + 1] - gp[g];
        for (int64_t i = gp[g]; i < gp[g + 1]; ++i) attend_node(A, i, S, 1.f / (float)n, true, g);
      }
    }
  }
}

// A 2-d buffer whose row stride is its width; checks that `rows` rows x H heads x dim fit in it.
Operand operand(const py::array& a, int64_t col, int64_t head, int64_t dim, const char* name,
                py::ssize_t itemsize, int64_t rows, int64_t H) {
  check_buffer(a, name, 2, itemsize);
  require(col >= 0 && head >= 0 && dim >= 0, std::string(name) + ": negative offset");
  require(col + dim <= a.shape(1), std::string(name) + ": columns out of range");
  if (rows > 0)
    require((rows - 1) * a.shape(1) + col + (H - 1) * head + dim <= (int64_t)a.size(),
            std::string(name) + ": operand extends past the end of the buffer");
  Operand o;
  o.base = a.data();
  o.row = a.shape(1);
  o.col = col;
  o.head = head;
  o.dim = dim;
  return o;
}

// Rows that the CSR arrays may address; checks indices so the kernel never reads out of bounds.
void check_csr(const int64_t* indptr, int64_t N, const int64_t* src, const int64_t* eid, int64_t E,
               int64_t n_src, int64_t n_edge_rows) {
  require(indptr[0] == 0 && indptr[N] == E, "indptr: must start at 0 and end at E");
  for (int64_t i = 0; i < N; ++i) require(indptr[i] <= indptr[i + 1], "indptr: must be non-decreasing");
  for (int64_t t = 0; t < E; ++t) {
    require(src[t] >= 0 && src[t] < n_src, "src: node id out of range");
    require(eid[t] >= 0 && eid[t] < n_edge_rows, "eid: edge row out of range");
  }
}

void graph_conv_attend_cpu(py::array indptr, py::array src, py::array eid, int dtype_code,
                           py::array nodes, int64_t q_col, int64_t k_col, py::array val_buf, int64_t val_col,
                           int64_t val_head, int64_t val_dim, py::array qe_buf, int64_t qe_col,
                           int64_t qe_head, py::array edges, int64_t ed_col, int64_t ed_head,
                           int64_t ed_dim, int64_t H, int64_t C, double scale, py::array graph_ptr,
                           py::array out1, py::array out2) {
  const DType dt = dtype_from_code(dtype_code);
  const py::ssize_t isz = dtype_itemsize(dt);
  check_buffer(indptr, "indptr", 1, 8);
  const int64_t N = indptr.shape(0) - 1;
  require(N >= 0, "indptr: needs N+1 >= 1 entries");
  check_buffer(src, "src", 1, 8);
  const int64_t E = src.shape(0);
  check_buffer(eid, "eid", 1, 8, {E});
  ThreadScope threads_scope((E + N) * H * C * 2);  // serial below the grain (common/parallel.h)
  require(H >= 1 && C >= 1, "H and C must be >= 1");
  AttendArgs A;
  A.indptr = const_ptr<int64_t>(indptr);
  A.src = const_ptr<int64_t>(src);
  A.eid = const_ptr<int64_t>(eid);
  A.q = operand(nodes, q_col, C, C, "nodes(q)", isz, N, H);
  A.k = operand(nodes, k_col, C, C, "nodes(k)", isz, N, H);
  A.val = operand(val_buf, val_col, val_head, val_dim, "val", isz, N, H);
  A.has_edge = ed_dim > 0;
  int64_t edge_rows = E;
  if (A.has_edge) {
    A.qe = operand(qe_buf, qe_col, qe_head, ed_dim, "qe", isz, N, H);
    A.ed = operand(edges, ed_col, ed_head, ed_dim, "edges", isz, edges.ndim() == 2 ? edges.shape(0) : 0, H);
    edge_rows = edges.shape(0);
  }
  A.H = H;
  A.C = C;
  A.scale = (float)scale;
  const bool pooled = graph_ptr.size() > 0;
  int64_t G = N;
  const int64_t* gp = nullptr;
  if (pooled) {
    check_buffer(graph_ptr, "graph_ptr", 1, 8);
    G = graph_ptr.shape(0) - 1;
    gp = const_ptr<int64_t>(graph_ptr);
    require(G >= 0 && gp[0] == 0 && gp[G] == N, "graph_ptr: must run from 0 to N");
    for (int64_t g = 0; g < G; ++g) require(gp[g] <= gp[g + 1], "graph_ptr: must be non-decreasing");
  }
  check_buffer(out1, "out1", 3, 4, {H, G, val_dim});
  A.rows = G;
  A.out1 = mutable_ptr<float>(out1);
  A.out2 = nullptr;
  if (A.has_edge) {
    check_buffer(out2, "out2", 3, 4, {H, G, ed_dim});
    A.out2 = mutable_ptr<float>(out2);
  }
  py::gil_scoped_release nogil;
  check_csr(A.indptr, N, A.src, A.eid, E, N, edge_rows);
  RASFAST_DISPATCH_DTYPE(dt, D, { attend_all<D>(A, N, G, gp, val_dim, ed_dim); })
}

template <DType D>
void store(typename Storage<D>::type* p, int64_t i, float v);
template <> void store<DType::F32>(float* p, int64_t i, float v) { p[i] = v; }
template <> void store<DType::F16>(uint16_t* p, int64_t i, float v) {
  // round-to-nearest-even float -> half (handles overflow to inf, subnormals, nan)
  uint32_t u = float_to_bits(v);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  uint16_t h;
  if (a > 0x7f800000u) h = (uint16_t)(sign | 0x7e00u);
  else if (a >= 0x477ff000u) h = (uint16_t)(sign | 0x7c00u);
  else if (a < 0x38800000u) {  // subnormal half or zero
    float f = bits_to_float(a) * 16777216.f;  // * 2^24: value in units of the smallest subnormal
    h = (uint16_t)(sign | (uint32_t)std::nearbyint(f));
  } else {
    uint32_t m = a + 0xc8000fffu + ((a >> 13) & 1u);  // rebias exponent and round to even
    h = (uint16_t)(sign | (m >> 13));
  }
  p[i] = h;
}
template <> void store<DType::BF16>(uint16_t* p, int64_t i, float v) {
  uint32_t u = float_to_bits(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) { p[i] = (uint16_t)((u >> 16) | 0x40u); return; }
  u += 0x7fffu + ((u >> 16) & 1u);
  p[i] = (uint16_t)(u >> 16);
}

struct EpilogueArgs {
  const float* a;  // [H, N, C]
  int64_t N, H, C;
  bool concat, has_skip;
  Operand sk;
  const float* wb;  // beta gate weights [3F] or null
  const float* lw;  // LayerNorm weight/bias [F] or null
  const float* lb;
  double eps;
  bool relu;
  void* out;
};

// One output row: heads (concat or mean) + skip or beta gate, LayerNorm, ReLU, stored.
// The LayerNorm sums are vectorised reductions in double (several partial sums, so they
// are not one long dependency chain per row).
template <DType D>
GC_INLINE void epilogue_row_impl(const EpilogueArgs& E, int64_t i, float* row) {
  using T = typename Storage<D>::type;
  const int64_t H = E.H, C = E.C, N = E.N;
  const int64_t F = E.concat ? H * C : C;
  const float* a = E.a;
  if (E.concat) {
    for (int64_t h = 0; h < H; ++h) {
      const float* ah = a + (h * N + i) * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) row[h * C + c] = ah[c];
    }
  } else {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) row[c] = 0.f;
    for (int64_t h = 0; h < H; ++h) {
      const float* ah = a + (h * N + i) * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) row[c] += ah[c];
    }
    const float inv_h = 1.f / (float)H;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) row[c] *= inv_h;
  }
  if (E.has_skip) {
    View<D> skv(E.sk);
    const T* s = skv.p + skv.at(i, 0);
    if (E.wb) {
      const float* wb = E.wb;
      float z = 0.f;
#pragma omp simd reduction(+ : z)
      for (int64_t c = 0; c < F; ++c) {
        const float x = row[c], r = Storage<D>::load(s, c);
        z += wb[c] * x + wb[F + c] * r + wb[2 * F + c] * (x - r);
      }
      const float g = 1.f / (1.f + std::exp(-z));
#pragma omp simd
      for (int64_t c = 0; c < F; ++c) row[c] = g * Storage<D>::load(s, c) + (1.f - g) * row[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < F; ++c) row[c] += Storage<D>::load(s, c);
    }
  }
  if (E.lw) {
    double mu = 0.0, var = 0.0;
#pragma omp simd reduction(+ : mu)
    for (int64_t c = 0; c < F; ++c) mu += row[c];
    mu /= (double)F;
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < F; ++c) var += (row[c] - mu) * (row[c] - mu);
    var /= (double)F;
    const float inv = (float)(1.0 / std::sqrt(var + E.eps));
    const float muf = (float)mu;
    const float *lw = E.lw, *lb = E.lb;
#pragma omp simd
    for (int64_t c = 0; c < F; ++c) row[c] = (row[c] - muf) * inv * lw[c] + lb[c];
  }
  if (E.relu) {
#pragma omp simd
    for (int64_t c = 0; c < F; ++c) row[c] = row[c] > 0.f ? row[c] : 0.f;
  }
  T* op = static_cast<T*>(E.out);
  if constexpr (D == DType::F32) {
    std::memcpy(op + i * F, row, sizeof(float) * (size_t)F);
  } else {
    for (int64_t c = 0; c < F; ++c) store<D>(op, i * F + c, row[c]);
  }
}

template <DType D>
void epilogue_row_base(const EpilogueArgs& E, int64_t i, float* row) { epilogue_row_impl<D>(E, i, row); }
#if GC_X86
template <DType D>
GC_AVX2 void epilogue_row_avx2(const EpilogueArgs& E, int64_t i, float* row) { epilogue_row_impl<D>(E, i, row); }
template <DType D>
GC_AVX512 void epilogue_row_avx512(const EpilogueArgs& E, int64_t i, float* row) { epilogue_row_impl<D>(E, i, row); }
#endif

template <DType D>
void epilogue_all(const EpilogueArgs& E) {
  void (*row_fn)(const EpilogueArgs&, int64_t, float*) = epilogue_row_base<D>;
#if GC_X86
  if (isa_state() == Isa::Avx512) row_fn = epilogue_row_avx512<D>;
  else if (isa_state() == Isa::Avx2) row_fn = epilogue_row_avx2<D>;
#endif
  const int64_t F = E.concat ? E.H * E.C : E.C;
#pragma omp parallel
  {
    std::vector<float> row(F);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < E.N; ++i) row_fn(E, i, row.data());
  }
}

void graph_conv_epilogue_cpu(py::array agg, int64_t H, int64_t C, bool concat, int dtype_code,
                             py::array nodes, int64_t skip_col, bool has_skip, py::array w_beta,
                             py::array ln_w, py::array ln_b, bool has_ln, double eps, bool relu,
                             py::array out) {
  const DType dt = dtype_from_code(dtype_code);
  check_buffer(agg, "agg", 3, 4);
  const int64_t N = agg.shape(1);
  require(agg.shape(0) == H && agg.shape(2) == C, "agg: expected shape [H, N, C]");
  const int64_t F = concat ? H * C : C;
  ThreadScope threads_scope(N * F * 4);  // serial below the grain (common/parallel.h)
  check_buffer(out, "out", 2, dtype_itemsize(dt), {N, F});
  Operand sk;
  if (has_skip) sk = operand(nodes, skip_col, 0, F, "nodes(skip)", dtype_itemsize(dt), N, 1);
  const bool beta = w_beta.size() > 0;
  if (beta) {
    check_buffer(w_beta, "w_beta", 1, 4, {3 * F});
    require(has_skip, "w_beta: the beta gate needs the skip term");
  }
  if (has_ln) {
    check_buffer(ln_w, "ln_w", 1, 4, {F});
    check_buffer(ln_b, "ln_b", 1, 4, {F});
  }
  EpilogueArgs E;
  E.a = const_ptr<float>(agg);
  E.N = N;
  E.H = H;
  E.C = C;
  E.concat = concat;
  E.has_skip = has_skip;
  E.sk = sk;
  E.wb = beta ? const_ptr<float>(w_beta) : nullptr;
  E.lw = has_ln ? const_ptr<float>(ln_w) : nullptr;
  E.lb = has_ln ? const_ptr<float>(ln_b) : nullptr;
  E.eps = eps;
  E.relu = relu;
  E.out = out.mutable_data();
  py::gil_scoped_release nogil;
  RASFAST_DISPATCH_DTYPE(dt, D, { epilogue_all<D>(E); })
}

// ------------------------------------------------------------------------ attention backward
// The backward of graph_conv_attend in PyG's direct form (float32), for training: given the
// forward's packed projections nodes [N, W] (q at column 0, k at HC, v at 2HC), the projected
// edge rows e [U, HC] (row roe[p] for CSR position p; none without edge features) and
// d_agg [N, HC] (the gradient of the softmax-weighted sums), it writes
//     dq, dk, dv into columns 0, HC, 2HC of d_nodes [N, Wd]     (every row: zeros where no edge)
//     de [E, HC] in CSR order, the gradient of each edge's projected row (when e is given).
// Pass 1, OpenMP over destination nodes i (each owns its row): per head, the softmax weights
// a_p are recomputed from scale * q_i . (k_src + e_p), then with d_alpha_p = d_agg_i . (v_src + e_p)
// and s = sum a_p d_alpha_p: dl_p = a_p (d_alpha_p - s) scale, dq_i = sum dl_p (k_src + e_p),
// de_p = dl_p q_i + a_p d_agg_i. Pass 2, OpenMP over source nodes j (reverse CSR: rptr, rpos):
// dk_j = sum dl_p q_dst(p), dv_j = sum a_p d_agg_dst(p), in ascending p. No [E, H, C]
// intermediate is materialised: the composed torch backward gathers and scatters about ten
// of them, each as large as de, which on a 2-core VM moving ~7 GB/s was a third of a step.
struct AttendBackArgs {
  const int64_t *indptr, *src, *roe, *rptr, *rpos, *dst;
  const float *nodes, *e, *dagg;
  int64_t N, E, W, H, C, Wd;
  float scale;
  float *d_nodes, *de;
  float *dl, *alpha;  // [E, H] scratch
};

struct BackScratch {
  std::vector<float> logit, da;
  void resize(int64_t n) {
    if ((int64_t)logit.size() < n) { logit.resize(n); da.resize(n); }
  }
};

GC_INLINE void attend_back_row_impl(const AttendBackArgs& A, int64_t i, BackScratch& S) {
  const int64_t H = A.H, C = A.C, HC = H * C, p0 = A.indptr[i], deg = A.indptr[i + 1] - p0;
  float* dq = A.d_nodes + i * A.Wd;
  std::fill(dq, dq + HC, 0.f);
  if (deg == 0) return;
  S.resize(deg);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t h = 0; h < H; ++h) {
    const float* qh = A.nodes + i * A.W + h * C;
    const float* gh = A.dagg + i * HC + h * C;
    float m = ninf;
    for (int64_t t = 0; t < deg; ++t) {
      const int64_t p = p0 + t, j = A.src[p];
      const float* kj = A.nodes + j * A.W + HC + h * C;
      const float* vj = A.nodes + j * A.W + 2 * HC + h * C;
      float l = dot<DType::F32>(qh, kj, C), d = dot<DType::F32>(gh, vj, C);
      if (A.e) {
        const float* eh = A.e + A.roe[p] * HC + h * C;
        l += dot<DType::F32>(qh, eh, C);
        d += dot<DType::F32>(gh, eh, C);
      }
      S.logit[t] = l * A.scale;
      S.da[t] = d;
      m = std::max(m, S.logit[t]);
    }
    float sum = 0.f;
    for (int64_t t = 0; t < deg; ++t) sum += (S.logit[t] = std::exp(S.logit[t] - m));
    float s = 0.f;
    for (int64_t t = 0; t < deg; ++t) s += (S.logit[t] /= sum) * S.da[t];  // logit now holds a_p
    float* dqh = dq + h * C;
    for (int64_t t = 0; t < deg; ++t) {
      const int64_t p = p0 + t, j = A.src[p];
      const float a = S.logit[t], dl = a * (S.da[t] - s) * A.scale;
      A.dl[p * H + h] = dl;
      A.alpha[p * H + h] = a;
      axpy<DType::F32>(dl, A.nodes + j * A.W + HC + h * C, dqh, C);
      if (A.e) {
        const float* eh = A.e + A.roe[p] * HC + h * C;
        axpy<DType::F32>(dl, eh, dqh, C);
        float* d = A.de + p * HC + h * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) d[c] = dl * qh[c] + a * gh[c];
      }
    }
  }
}

GC_INLINE void attend_back_src_impl(const AttendBackArgs& A, int64_t j) {
  const int64_t H = A.H, C = A.C, HC = H * C;
  float* dk = A.d_nodes + j * A.Wd + HC;
  float* dv = dk + HC;
  std::fill(dk, dk + 2 * HC, 0.f);
  for (int64_t r = A.rptr[j]; r < A.rptr[j + 1]; ++r) {
    const int64_t p = A.rpos[r], i = A.dst[p];
    for (int64_t h = 0; h < H; ++h) {
      axpy<DType::F32>(A.dl[p * H + h], A.nodes + i * A.W + h * C, dk + h * C, C);
      axpy<DType::F32>(A.alpha[p * H + h], A.dagg + i * HC + h * C, dv + h * C, C);
    }
  }
}

void attend_back_base(const AttendBackArgs& A, int64_t lo, int64_t hi, bool by_src, BackScratch& S) {
  for (int64_t i = lo; i < hi; ++i) by_src ? attend_back_src_impl(A, i) : attend_back_row_impl(A, i, S);
}
#if GC_X86
GC_AVX2 void attend_back_avx2(const AttendBackArgs& A, int64_t lo, int64_t hi, bool by_src,
                              BackScratch& S) {
  for (int64_t i = lo; i < hi; ++i) by_src ? attend_back_src_impl(A, i) : attend_back_row_impl(A, i, S);
}
GC_AVX512 void attend_back_avx512(const AttendBackArgs& A, int64_t lo, int64_t hi, bool by_src,
                                  BackScratch& S) {
  for (int64_t i = lo; i < hi; ++i) by_src ? attend_back_src_impl(A, i) : attend_back_row_impl(A, i, S);
}
#endif
using AttendBackFn = void (*)(const AttendBackArgs&, int64_t, int64_t, bool, BackScratch&);
AttendBackFn pick_attend_back() {
#if GC_X86
  if (isa_state() == Isa::Avx512) return attend_back_avx512;
  if (isa_state() == Isa::Avx2) return attend_back_avx2;
#endif
  return attend_back_base;
}

void graph_conv_attend_backward_cpu(py::array indptr, py::array src, py::array roe, py::array rptr,
                                    py::array rpos, py::array dst, py::array nodes, py::array e,
                                    py::array dagg, int64_t H, int64_t C, double scale,
                                    py::array d_nodes, py::array de) {
  require(H >= 1 && C >= 1, "H and C must be >= 1");
  const int64_t HC = H * C;
  check_buffer(indptr, "indptr", 1, 8);
  const int64_t N = indptr.shape(0) - 1;
  require(N >= 0, "indptr: needs N+1 >= 1 entries");
  check_buffer(src, "src", 1, 8);
  const int64_t E = src.shape(0);
  check_buffer(rptr, "rptr", 1, 8, {N + 1});
  check_buffer(rpos, "rpos", 1, 8, {E});
  check_buffer(dst, "dst", 1, 8, {E});
  check_buffer(nodes, "nodes", 2, 4, {N, -1});
  require(nodes.shape(1) >= 3 * HC, "nodes: needs at least 3 H C columns (q, k, v)");
  check_buffer(dagg, "d_agg", 2, 4, {N, HC});
  check_buffer(d_nodes, "d_nodes", 2, 4, {N, -1});
  require(d_nodes.shape(1) >= 3 * HC, "d_nodes: needs at least 3 H C columns");
  const bool has_e = e.size() > 0;
  int64_t rows = 0;
  if (has_e) {
    check_buffer(e, "e_rows", 2, 4, {-1, HC});
    rows = e.shape(0);
    check_buffer(roe, "row_of_edge", 1, 8, {E});
    check_buffer(de, "de", 2, 4, {E, HC});
  }
  AttendBackArgs A;
  A.indptr = const_ptr<int64_t>(indptr);
  A.src = const_ptr<int64_t>(src);
  A.roe = has_e ? const_ptr<int64_t>(roe) : nullptr;
  A.rptr = const_ptr<int64_t>(rptr);
  A.rpos = const_ptr<int64_t>(rpos);
  A.dst = const_ptr<int64_t>(dst);
  A.nodes = const_ptr<float>(nodes);
  A.e = has_e ? const_ptr<float>(e) : nullptr;
  A.dagg = const_ptr<float>(dagg);
  A.N = N; A.E = E; A.W = nodes.shape(1); A.H = H; A.C = C; A.Wd = d_nodes.shape(1);
  A.scale = (float)scale;
  A.d_nodes = mutable_ptr<float>(d_nodes);
  A.de = has_e ? mutable_ptr<float>(de) : nullptr;
  ThreadScope threads_scope(E * HC * 8);  // serial below the grain (common/parallel.h)
  py::gil_scoped_release nogil;
  // every index the passes follow is checked first: they never read out of bounds
  check_csr(A.indptr, N, A.src, has_e ? A.roe : A.src, E, N, has_e ? rows : N);
  require(A.rptr[0] == 0 && A.rptr[N] == E, "rptr: must start at 0 and end at E");
  for (int64_t j = 0; j < N; ++j) require(A.rptr[j] <= A.rptr[j + 1], "rptr: must be non-decreasing");
  for (int64_t r = 0; r < E; ++r) require(A.rpos[r] >= 0 && A.rpos[r] < E, "rpos: position out of range");
  for (int64_t p = 0; p < E; ++p) require(A.dst[p] >= 0 && A.dst[p] < N, "dst: node id out of range");
  std::vector<float> dl((size_t)std::max<int64_t>(E * H, 1)), alpha((size_t)std::max<int64_t>(E * H, 1));
  A.dl = dl.data();
  A.alpha = alpha.data();
  const AttendBackFn fn = pick_attend_back();
  const bool par = parallel_worth_it(E * HC * 8);
  for (int pass = 0; pass < 2; ++pass) {
#pragma omp parallel if (par)
    {
      BackScratch S;
#pragma omp for schedule(dynamic, 16)
      for (int64_t i = 0; i < N; ++i) fn(A, i, i + 1, pass == 1, S);
    }
  }
}

void bind(py::module_& m) {
  m.def("graph_conv_attend_backward", &graph_conv_attend_backward_cpu,
        "Backward of graph_conv_attend in the direct form (float32): dq, dk, dv into columns "
        "0, HC, 2HC of d_nodes and, with edge rows, de [E, HC] in CSR order.");
  m.def("graph_conv_attend", &graph_conv_attend_cpu,
        "Per destination node and head: online softmax over incoming edges of "
        "scale*(q.k + qe.ed), weighted sums of val and ed into out1/out2 (pooled per graph "
        "when graph_ptr is non-empty).");
  m.def("graph_conv_epilogue", &graph_conv_epilogue_cpu,
        "out = agg (concat/head-mean) + skip or beta gate, then optional LayerNorm and ReLU.");
  bind_isa(m, "graph_conv", isa_state());
}

}  // namespace
RASFAST_REGISTER(graph_conv, bind);
}  // namespace rasfast
