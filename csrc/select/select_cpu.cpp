// select_k, CPU backend: k smallest (or largest) per row of a [B, N] matrix, ties by lower
// index, optionally with the selected values. OpenMP over rows when there are at least as
// many rows as threads (or rows are short), otherwise over chunks within each long row.
// The algorithms are in select/row_select.h; NaN is detected in the same passes and
// reported to the caller (which raises), so the input is read only by the selection.
#include <omp.h>

#include "common/buffers.h"
#include "common/entry_points.h"
#include "common/parallel.h"
#include "common/registry.h"
#include "select/radix_select.h"
#include "select/row_select.h"

namespace rasfast {
namespace {

using select_detail::KeyTraits;
using select_detail::RowScratch;

// Rows of 2^32 or more elements do not fit the 32-bit index of the composites: they use
// the general (slower) radix_select.h path, with the same results.
template <DType D>
void select_huge_row(const typename KeyTraits<D>::Raw* row, int64_t n, int64_t k, bool largest,
                     bool sorted, int threads, int64_t* out, typename KeyTraits<D>::Raw* vals,
                     bool* nan) {
  using Raw = typename KeyTraits<D>::Raw;
  auto key_at = [row, largest](int64_t i) {
    return select_key(Storage<D>::load(reinterpret_cast<const typename Storage<D>::type*>(row), i), largest);
  };
  for (int64_t i = 0; i < n; ++i) *nan |= select_detail::is_nan_key<D>(KeyTraits<D>::key(row[i]));
  select_row(n, k, key_at, sorted, out, threads);
  if (vals)
    for (int64_t i = 0; i < k; ++i) vals[i] = static_cast<Raw>(row[out[i]]);
}

template <DType D>
bool select_k_typed(const void* data, int64_t B, int64_t N, int64_t k, bool largest, bool sorted,
                    int64_t* out, void* vals_v) {
  using Raw = typename KeyTraits<D>::Raw;
  const Raw* x = static_cast<const Raw*>(data);
  Raw* vals = static_cast<Raw*>(vals_v);
  const int threads = omp_get_max_threads();
  const bool huge = N >= (int64_t(1) << 32);
  bool nan = false;
  auto run_row = [&](int64_t r, int inner, RowScratch& s) {
    const Raw* row = x + r * N;
    int64_t* o = out + r * k;
    Raw* v = vals ? vals + r * k : nullptr;
    bool row_nan = false;
    if (huge) select_huge_row<D>(row, N, k, largest, sorted, inner, o, v, &row_nan);
    else row_nan = select_detail::select_one_row<D>(row, N, k, largest, sorted, inner, o, v, s);
    return row_nan;
  };
  // Small calls run on the calling thread: waking an OpenMP team costs more than it saves
  // there (and much more on a loaded machine, where a woken thread may wait a time slice).
  const bool small = B * N < (int64_t(1) << 20);
  if (small || B >= threads || N < (1 << 16)) {
#pragma omp parallel reduction(|| : nan) if (!small)
    {
      RowScratch s;  // reused across this thread's rows
#pragma omp for schedule(dynamic, 1)
      for (int64_t r = 0; r < B; ++r) nan = run_row(r, 1, s) || nan;
    }
  } else {
    RowScratch s;
    for (int64_t r = 0; r < B; ++r) nan = run_row(r, threads, s) || nan;
  }
  return nan;
}

// Returns True when x contains NaN (the results are then meaningless; Python raises).
bool select_k_cpu(py::array x, int dtype_code, int64_t k, bool largest, bool sorted, py::array out,
                  py::object values) {
  const DType dt = dtype_from_code(dtype_code);
  check_buffer(x, "x", 2, dtype_itemsize(dt));
  const int64_t B = x.shape(0), N = x.shape(1);
  ThreadScope threads_scope(B * N * 4);  // ~4 passes per element; serial below the grain
  require(k >= 1 && k <= N, "k must be in [1, N]");
  check_buffer(out, "out", 2, 8, {B, k});
  void* v = nullptr;
  if (!values.is_none()) {
    py::array va = values.cast<py::array>();
    check_buffer(va, "values", 2, dtype_itemsize(dt), {B, k});
    v = va.mutable_data();
  }
  const void* data = x.data();
  int64_t* o = mutable_ptr<int64_t>(out);
  py::gil_scoped_release nogil;
  bool nan = false;
  RASFAST_DISPATCH_DTYPE(dt, D, { nan = select_k_typed<D>(data, B, N, k, largest, sorted, o, v); })
  return nan;
}

void bind(py::module_& m) {
  m.def("select_k", &select_k_cpu, py::arg("x"), py::arg("dtype_code"), py::arg("k"),
        py::arg("largest"), py::arg("sorted"), py::arg("out"), py::arg("values") = py::none(),
        "Indices of the k smallest/largest entries per row (ties by lower index) into out[B,k], "
        "and their values into values[B,k] (x's storage dtype) when given. Returns True if x "
        "contains NaN (the outputs are then meaningless).");
}

}  // namespace
RASFAST_REGISTER(select, bind);

// The torch operator's entry (common/entry_points.h): the same kernel, raw pointers, no throw.
int select_k_entry(const void* x, int code, int64_t B, int64_t N, int64_t k, int largest,
                   int sorted, int64_t* out, void* values) {
  try {
    const DType dt = dtype_from_code(code);
    ThreadScope threads_scope(B * N * 4);  // as select_k_cpu
    bool nan = false;
    RASFAST_DISPATCH_DTYPE(dt, D, { nan = select_k_typed<D>(x, B, N, k, largest, sorted, out, values); })
    return nan ? 1 : 0;
  } catch (...) {
    return -1;
  }
}
}  // namespace rasfast
