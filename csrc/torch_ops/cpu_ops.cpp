// rasfast._torch_ops: C++ CPU kernels of the torch.library operators whose per-question calls
// are short (select_k, theme_scope, scoped_dense_search, theme_scoped_search,
// segment_topk_scores, segment_max_rank), so that a call of torch.ops.rasfast.<op> on CPU tensors reaches the
// compiled kernel without a Python frame: a Python kernel behind the dispatcher costs 3-5 us
// of torch's own plus its argument checks, 12-25 us a call, a quarter of a 50 us op
// (benchmarks/results/op_overhead.md).
//
// The schemas, the fake kernels and the CUDA kernels stay in Python (rasfast/ops/_library.py
// defines each op once). This library registers the CPU kernels only. Each one takes the fast
// path when the call is an ordinary one: backend "auto" or "cpu", CPU tensors of the
// supported dtypes and ranks, arguments and values that pass every check of the op's Python
// kernel (the same checks, written again here as plain conditions). Anything else -- another
// backend, an odd dtype, a value that fails a check, a kernel that reports bad data -- runs
// the op's Python kernel (the operator rasfast::<op>_python, same schema), so that results
// and errors (their type and their message, which names the argument) have one home.
//
// Kernels come from rasfast._C through a table of raw entry points (common/entry_points.h),
// handed over once by rasfast_torch_ops_attach; until then every call takes the Python path.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "common/entry_points.h"
#include "torch_ops/op_common.h"

namespace {

using rasfast_ops::dtype_code;
using rasfast_ops::Pair;
using rasfast_ops::python_kernel;
using rasfast_ops::Str;
using rasfast_ops::Tensor;

std::atomic<const RasfastCpuEntries*> g_entries{nullptr};

const RasfastCpuEntries* entries() { return g_entries.load(std::memory_order_acquire); }

// ------------------------------------------------------------------ the fast path's checks
// A dense CPU tensor of a float dtype the kernels take, of rank `dim`.
bool float_matrix(const Tensor& t, int64_t dim) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.dim() == dim &&
         dtype_code(t) >= 0;
}

bool int_vector(const Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.dim() == 1 &&
         (t.scalar_type() == at::kInt || t.scalar_type() == at::kLong);
}

bool host_backend(Str b) { return b == "auto" || b == "cpu"; }

bool one_of(Str v, std::initializer_list<const char*> choices) {
  for (const char* c : choices)
    if (v == c) return true;
  return false;
}

// t itself when it already has the dtype and is contiguous: Tensor::to goes through the
// dispatcher even when it has nothing to do (about 0.5 us a call, a tenth of a small op).
Tensor as_dtype(const Tensor& t, at::ScalarType dtype) {
  if (t.scalar_type() == dtype && t.is_contiguous()) return t;
  return t.to(dtype).contiguous();
}
Tensor as_float(const Tensor& t) { return as_dtype(t, at::kFloat); }
Tensor as_long(const Tensor& t) { return as_dtype(t, at::kLong); }

// f: float32 contiguous. NaN always fails; +-inf fails unless allowed.
bool finite(const Tensor& f, bool allow_inf = false) {
  const float* p = f.data_ptr<float>();
  const int64_t n = f.numel();
  bool ok = true;
  if (allow_inf) {
    for (int64_t i = 0; i < n; ++i) ok &= !std::isnan(p[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) ok &= std::isfinite(p[i]);
  }
  return ok;
}

// CSR offsets (int64 contiguous): 0 = p[0] <= ... <= p[last] = total.
bool csr_ok(const Tensor& p, int64_t total) {
  const int64_t* a = p.data_ptr<int64_t>();
  const int64_t n = p.numel();
  if (n < 1 || a[0] != 0 || a[n - 1] != total) return false;
  for (int64_t i = 1; i < n; ++i)
    if (a[i] < a[i - 1]) return false;
  return true;
}

// ids (int64 contiguous) in [lo, hi)
bool ids_ok(const Tensor& ids, int64_t lo, int64_t hi) {
  const int64_t* a = ids.data_ptr<int64_t>();
  bool ok = true;
  for (int64_t i = 0, n = ids.numel(); i < n; ++i) ok &= a[i] >= lo && a[i] < hi;
  return ok;
}

Tensor ids_out(int64_t B, int64_t k) { return at::empty({B, k}, at::TensorOptions().dtype(at::kLong)); }
Tensor scores_out(int64_t B, int64_t k) { return at::empty({B, k}, at::TensorOptions().dtype(at::kFloat)); }

// ------------------------------------------------------------------------------ select_k
using rasfast_ops::SelectSig;

Pair select_k(const Tensor& x, int64_t k, bool largest, bool sorted, Str backend) {
  Pair out;  // backend "cuda" under the emulator: the CUDA kernels on CPU tensors
  if (backend == "cuda" && rasfast_ops::select_k_device(x, k, largest, sorted, backend, &out))
    return out;
  const RasfastCpuEntries* e = entries();
  if (e && host_backend(backend) && float_matrix(x, 2) && x.size(1) >= 1 && k >= 1 &&
      k <= x.size(1)) {
    const int64_t B = x.size(0), N = x.size(1);
    Tensor xc = x.contiguous();
    Tensor idx = ids_out(B, k);
    Tensor vals = at::empty({B, k}, x.options());
    if (B == 0 || e->select_k(xc.data_ptr(), dtype_code(x), B, N, k, largest, sorted,
                              idx.data_ptr<int64_t>(), vals.data_ptr()) == 0)
      return {vals, idx};
  }
  static auto py = python_kernel<SelectSig>("rasfast::select_k_python");
  return py.call(x, k, largest, sorted, backend);
}

// -------------------------------------------------------------------------- theme ops
bool theme_args(Str metric, Str backend, Str validate, int64_t K) {
  return host_backend(backend) && K >= 1 && one_of(metric, {"l2", "ip"}) &&
         one_of(validate, {"auto", "full", "queries", "none"});
}

// corpus [N, T] with N, T >= 1, queries [B, T]
bool theme_corpus(const Tensor& q, const Tensor& c) {
  return float_matrix(c, 2) && float_matrix(q, 2) && c.size(0) >= 1 && c.size(1) >= 1 &&
         q.size(1) == c.size(1);
}

using ScopeSig = Tensor(const Tensor&, const Tensor&, int64_t, Str, Str, Str);

Tensor theme_scope(const Tensor& q_ppd, const Tensor& corpus_ppd, int64_t K, Str metric,
                   Str backend, Str validate) {
  const RasfastCpuEntries* e = entries();
  if (e && theme_args(metric, backend, validate, K) && theme_corpus(q_ppd, corpus_ppd)) {
    const int64_t B = q_ppd.size(0), N = corpus_ppd.size(0), T = corpus_ppd.size(1);
    const int64_t Kc = std::min(K, N);
    Tensor q = as_float(q_ppd);
    // every mode but "none" checks the queries; the kernel checks the corpus rows it scans
    if (validate == "none" || finite(q)) {
      Tensor out = ids_out(B, Kc);
      if (B == 0) return out;
      Tensor c = corpus_ppd.contiguous();
      if (e->theme_scope(q.data_ptr<float>(), B, T, c.data_ptr(), dtype_code(c), N, Kc,
                         metric == "ip", out.data_ptr<int64_t>()) == 0)
        return out;
    }
  }
  static auto py = python_kernel<ScopeSig>("rasfast::theme_scope_python");
  return py.call(q_ppd, corpus_ppd, K, metric, backend, validate);
}

using DenseSig = Pair(const Tensor&, const Tensor&, const Tensor&, int64_t, Str, Str);

// scope ids (int64 contiguous [B, Ks]) in [-1, N), no id twice in a row (-1 padding aside).
// A bitset of the N ids where it is small next to the scopes (cleared id by id after each
// row), else a sorted copy of each row.
bool scopes_ok(const Tensor& s, int64_t N) {
  const int64_t B = s.size(0), Ks = s.size(1);
  const int64_t* a = s.data_ptr<int64_t>();
  if (N <= 64 * Ks + 65536) {
    std::vector<uint64_t> seen((size_t)(N + 63) / 64);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t* r = a + b * Ks;
      bool ok = true;
      int64_t j = 0;
      for (; j < Ks && ok; ++j) {
        const int64_t v = r[j];
        if (v < -1 || v >= N) return false;
        if (v < 0) continue;
        const uint64_t bit = uint64_t(1) << (v & 63);
        ok = !(seen[v >> 6] & bit);
        seen[v >> 6] |= bit;
      }
      if (!ok) return false;
      for (int64_t t = 0; t < j; ++t)
        if (r[t] >= 0) seen[r[t] >> 6] = 0;
    }
    return true;
  }
  std::vector<int64_t> row((size_t)Ks);
  for (int64_t b = 0; b < B; ++b) {
    int64_t m = 0;
    for (int64_t j = 0; j < Ks; ++j) {
      const int64_t v = a[b * Ks + j];
      if (v < -1 || v >= N) return false;
      if (v >= 0) row[m++] = v;
    }
    std::sort(row.begin(), row.begin() + m);
    if (std::adjacent_find(row.begin(), row.begin() + m) != row.begin() + m) return false;
  }
  return true;
}

Pair scoped_dense_search(const Tensor& q_emb, const Tensor& corpus_emb, const Tensor& scope_ids,
                         int64_t k, Str backend, Str validate) {
  const RasfastCpuEntries* e = entries();
  if (e && host_backend(backend) && k >= 1 &&
      one_of(validate, {"auto", "full", "queries", "none"}) && theme_corpus(q_emb, corpus_emb) &&
      scope_ids.defined() && scope_ids.device().is_cpu() && scope_ids.layout() == at::kStrided &&
      scope_ids.dim() == 2 && (scope_ids.scalar_type() == at::kLong || scope_ids.scalar_type() == at::kInt) &&
      scope_ids.size(0) == q_emb.size(0)) {
    const int64_t B = q_emb.size(0), N = corpus_emb.size(0), D = corpus_emb.size(1);
    Tensor q = as_float(q_emb), s = as_long(scope_ids);
    // every mode but "none" checks the queries and the scopes (as the Python kernel); the
    // kernel checks the corpus rows it reads
    if (validate == "none" || (finite(q) && scopes_ok(s, N))) {
      Tensor ids = ids_out(B, k), scores = scores_out(B, k);
      if (B == 0) return {ids, scores};
      Tensor em = corpus_emb.contiguous();
      if (e->scoped_dense_search(q.data_ptr<float>(), B, D, em.data_ptr(), dtype_code(em), N,
                                 s.data_ptr<int64_t>(), s.size(1), k, ids.data_ptr<int64_t>(),
                                 scores.data_ptr<float>()) == 0)
        return {ids, scores};
    }
  }
  static auto py = python_kernel<DenseSig>("rasfast::scoped_dense_search_python");
  return py.call(q_emb, corpus_emb, scope_ids, k, backend, validate);
}

using FusedSig = Pair(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t,
                      double, Str, Str, Str);

Pair theme_scoped_search(const Tensor& q_ppd, const Tensor& q_emb, const Tensor& corpus_ppd,
                         const Tensor& corpus_emb, int64_t K, int64_t k, double w, Str metric,
                         Str backend, Str validate) {
  const RasfastCpuEntries* e = entries();
  if (e && theme_args(metric, backend, validate, K) && k >= 1 && std::isfinite(w) && w >= 0.0 &&
      w <= 1.0 && theme_corpus(q_ppd, corpus_ppd) && theme_corpus(q_emb, corpus_emb) &&
      corpus_emb.size(0) == corpus_ppd.size(0) && q_emb.size(0) == q_ppd.size(0)) {
    const int64_t B = q_ppd.size(0), N = corpus_ppd.size(0);
    const int64_t T = corpus_ppd.size(1), D = corpus_emb.size(1);
    Tensor q = as_float(q_ppd), qe = as_float(q_emb);
    if (validate == "none" || (finite(q) && finite(qe))) {
      Tensor ids = ids_out(B, k), scores = scores_out(B, k);
      if (B == 0) return {ids, scores};
      Tensor c = corpus_ppd.contiguous(), em = corpus_emb.contiguous();
      if (e->theme_scoped_search(q.data_ptr<float>(), c.data_ptr(), dtype_code(c),
                                 qe.data_ptr<float>(), em.data_ptr(), dtype_code(em), B, N, T, D,
                                 std::min(K, N), k, w, metric == "ip", ids.data_ptr<int64_t>(),
                                 scores.data_ptr<float>()) == 0)
        return {ids, scores};
    }
  }
  static auto py = python_kernel<FusedSig>("rasfast::theme_scoped_search_python");
  return py.call(q_ppd, q_emb, corpus_ppd, corpus_emb, K, k, w, metric, backend, validate);
}

// ------------------------------------------------------------------------ segment ops
using rasfast_ops::TopkSig;

Pair segment_topk_scores(const Tensor& q_emb, const Tensor& cand_emb, const Tensor& cand_ptr,
                         int64_t n, const std::optional<Tensor>& cand_ids, Str backend,
                         Str validate) {
  Pair out;  // backend "cuda" under the emulator: the CUDA kernels on CPU tensors
  if (backend == "cuda" && rasfast_ops::segment_topk_scores_device(q_emb, cand_emb, cand_ptr, n, cand_ids,
                                                                   backend, validate, &out))
    return out;
  const RasfastCpuEntries* e = entries();
  const bool with_ids = cand_ids.has_value() && cand_ids->defined();
  if (e && host_backend(backend) && one_of(validate, {"auto", "full", "none"}) && n >= 1 &&
      float_matrix(q_emb, 2) && float_matrix(cand_emb, 2) && cand_emb.size(1) == q_emb.size(1) &&
      (!with_ids || int_vector(*cand_ids)) && int_vector(cand_ptr) &&
      cand_ptr.size(0) == q_emb.size(0) + 1) {
    const int64_t B = q_emb.size(0), D = q_emb.size(1), T = cand_emb.size(0);
    Tensor q = as_float(q_emb), p = as_long(cand_ptr);
    Tensor ids = with_ids ? as_long(*cand_ids) : Tensor();
    const int64_t M = with_ids ? ids.size(0) : T;
    // the CPU path checks every value whatever `validate` says (as the Python kernel)
    if (finite(q) && (!with_ids || ids_ok(ids, 0, T)) && csr_ok(p, M)) {
      Tensor c = cand_emb.contiguous();
      Tensor out_i = ids_out(B, n), out_s = scores_out(B, n);
      if (e->segment_topk_scores(q.data_ptr<float>(), B, D, c.data_ptr(), dtype_code(c), T,
                                 with_ids ? ids.data_ptr<int64_t>() : nullptr,
                                 p.data_ptr<int64_t>(), n, out_i.data_ptr<int64_t>(),
                                 out_s.data_ptr<float>()) == -1)
        return {out_i, out_s};
    }
  }
  static auto py = python_kernel<TopkSig>("rasfast::segment_topk_scores_python");
  return py.call(q_emb, cand_emb, cand_ptr, n, cand_ids, backend, validate);
}

using rasfast_ops::RankSig;

Pair segment_max_rank(const Tensor& item_scores, const Tensor& item_to_group, const Tensor& ptr,
                      int64_t k, Str backend, Str validate) {
  Pair out;  // backend "cuda" under the emulator: the CUDA kernels on CPU tensors
  if (backend == "cuda" &&
      rasfast_ops::segment_max_rank_device(item_scores, item_to_group, ptr, k, backend, validate, &out))
    return out;
  const RasfastCpuEntries* e = entries();
  if (e && host_backend(backend) && one_of(validate, {"auto", "full", "none"}) && k >= 1 &&
      float_matrix(item_scores, 1) && int_vector(item_to_group) &&
      item_to_group.size(0) == item_scores.size(0) && int_vector(ptr) && ptr.size(0) >= 1) {
    const int64_t M = item_scores.size(0), B = ptr.size(0) - 1;
    Tensor s = as_float(item_scores), g = as_long(item_to_group), p = as_long(ptr);
    if (finite(s, /*allow_inf=*/true) && ids_ok(g, 0, int64_t(1) << 31) && csr_ok(p, M)) {
      Tensor out_i = ids_out(B, k), out_s = scores_out(B, k);
      if (e->segment_max_rank(s.data_ptr<float>(), M, g.data_ptr<int64_t>(),
                              p.data_ptr<int64_t>(), B, k, out_i.data_ptr<int64_t>(),
                              out_s.data_ptr<float>()) == 0)
        return {out_i, out_s};
    }
  }
  static auto py = python_kernel<RankSig>("rasfast::segment_max_rank_python");
  return py.call(item_scores, item_to_group, ptr, k, backend, validate);
}

}  // namespace

// The ops whose CPU kernel this library registers (rasfast/ops/_library.py reads the list:
// it registers their Python kernel under <op>_python instead of the CPU key).
#define RASFAST_NATIVE_OPS \
  "select_k,theme_scope,scoped_dense_search,theme_scoped_search,segment_topk_scores,segment_max_rank"

TORCH_LIBRARY_IMPL(rasfast, CPU, m) {
  m.impl("select_k", &select_k);
  m.impl("theme_scope", &theme_scope);
  m.impl("scoped_dense_search", &scoped_dense_search);
  m.impl("theme_scoped_search", &theme_scoped_search);
  m.impl("segment_topk_scores", &segment_topk_scores);
  m.impl("segment_max_rank", &segment_max_rank);
}

extern "C" {

__attribute__((visibility("default"))) const char* rasfast_torch_ops_names() {
  return RASFAST_NATIVE_OPS;
}

// Hands over rasfast._C's kernel table; 0 on success, 1 for a table of another version.
__attribute__((visibility("default"))) int rasfast_torch_ops_attach(const RasfastCpuEntries* e) {
  if (e == nullptr || e->abi != kRasfastCpuEntriesAbi ||
      e->size != static_cast<int32_t>(sizeof(RasfastCpuEntries)))
    return 1;
  g_entries.store(e, std::memory_order_release);
  return 0;
}

}  // extern "C"
