// select_k, CPU backend: k smallest (or largest) per row of a [B, N] matrix, ties by lower
// index. OpenMP over rows when B >= threads, otherwise over each long row's histogram.
#include <omp.h>

#include "common/buffers.h"
#include "common/registry.h"
#include "select/radix_select.h"

namespace rasfast {
namespace {

template <DType D>
void select_k_typed(const void* data, int64_t B, int64_t N, int64_t k, bool largest, bool sorted,
                    int64_t* out) {
  using T = typename Storage<D>::type;
  const T* x = static_cast<const T*>(data);
  const int threads = omp_get_max_threads();
  auto run_row = [&](int64_t r, int inner) {
    const T* row = x + r * N;
    auto key_at = [row, largest](int64_t i) { return select_key(Storage<D>::load(row, i), largest); };
    select_row(N, k, key_at, sorted, out + r * k, inner);
  };
  if (B >= threads || N < (1 << 16)) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t r = 0; r < B; ++r) run_row(r, 1);
  } else {
    for (int64_t r = 0; r < B; ++r) run_row(r, threads);
  }
}

void select_k_cpu(py::array x, int dtype_code, int64_t k, bool largest, bool sorted, py::array out) {
  const DType dt = dtype_from_code(dtype_code);
  check_buffer(x, "x", 2, dtype_itemsize(dt));
  const int64_t B = x.shape(0), N = x.shape(1);
  require(k >= 1 && k <= N, "k must be in [1, N]");
  check_buffer(out, "out", 2, 8, {B, k});
  const void* data = x.data();
  int64_t* o = mutable_ptr<int64_t>(out);
  py::gil_scoped_release nogil;
  RASFAST_DISPATCH_DTYPE(dt, D, { select_k_typed<D>(data, B, N, k, largest, sorted, o); })
}

void bind(py::module_& m) {
  m.def("select_k", &select_k_cpu, py::arg("x"), py::arg("dtype_code"), py::arg("k"),
        py::arg("largest"), py::arg("sorted"), py::arg("out"),
        "Indices of the k smallest/largest entries per row (ties by lower index) into out[B,k].");
}

}  // namespace
RASFAST_REGISTER(select, bind);
}  // namespace rasfast
