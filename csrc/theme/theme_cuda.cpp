// pybind11 bindings of the CUDA theme kernels (module rasfast._cuda). Arguments are raw
// device pointers and a stream handle; rasfast/ops/theme.py allocates the outputs.
#include <pybind11/pybind11.h>

#include <stdexcept>

#include "common/registry.h"
#include "theme/theme_cuda.h"

namespace rasfast {
namespace theme_cuda {
namespace {
namespace py = pybind11;

template <class F, class... A>
void run(F f, A... a) {
  py::gil_scoped_release nogil;  // launches are asynchronous; errors surface as exceptions
  f(a...);
}

void bind(py::module_& m) {
  m.def("theme_scope",
        [](uintptr_t q, uintptr_t c, int code, int64_t B, int64_t N, int64_t T, int64_t K, bool ip,
           uintptr_t out, uintptr_t stream) { run(theme_scope, q, c, code, B, N, T, K, ip, out, stream); },
        py::arg("q"), py::arg("corpus"), py::arg("dtype_code"), py::arg("B"), py::arg("N"),
        py::arg("T"), py::arg("K"), py::arg("ip"), py::arg("out"), py::arg("stream"),
        "Sorted ids [B,K] of the K nearest corpus rows (device pointers).");
  m.def("theme_scoped_dense",
        [](uintptr_t q, uintptr_t e, int code, int64_t B, int64_t N, int64_t D, uintptr_t scope,
           int64_t Ks, int64_t k, uintptr_t ids, uintptr_t scores, uintptr_t stream) {
          run(scoped_dense, q, e, code, B, N, D, scope, Ks, k, ids, scores, stream);
        },
        py::arg("q_emb"), py::arg("emb"), py::arg("dtype_code"), py::arg("B"), py::arg("N"),
        py::arg("D"), py::arg("scope"), py::arg("Ks"), py::arg("k"), py::arg("out_ids"),
        py::arg("out_scores"), py::arg("stream"), "Top-k inner products inside given scopes.");
  m.def("theme_scoped_search",
        [](uintptr_t qp, uintptr_t p, int pc, uintptr_t qe, uintptr_t e, int ec, int64_t B,
           int64_t N, int64_t T, int64_t D, int64_t K, int64_t k, double w, bool ip, uintptr_t ids,
           uintptr_t scores, uintptr_t stream) {
          run(scoped_search, qp, p, pc, qe, e, ec, B, N, T, D, K, k, w, ip, ids, scores, stream);
        },
        py::arg("q_ppd"), py::arg("ppd"), py::arg("ppd_code"), py::arg("q_emb"), py::arg("emb"),
        py::arg("emb_code"), py::arg("B"), py::arg("N"), py::arg("T"), py::arg("D"), py::arg("K"),
        py::arg("k"), py::arg("theme_weight"), py::arg("ip"), py::arg("out_ids"),
        py::arg("out_scores"), py::arg("stream"), "Fused theme scoping + dense top-k.");
  m.def("theme_scan_keys",
        [](uintptr_t q, uintptr_t c, int code, int64_t B, int64_t N, int64_t T, bool ip,
           uintptr_t out, uintptr_t stream) { run(scan_keys, q, c, code, B, N, T, ip, out, stream); },
        py::arg("q"), py::arg("corpus"), py::arg("dtype_code"), py::arg("B"), py::arg("N"),
        py::arg("T"), py::arg("ip"), py::arg("out"), py::arg("stream"),
        "Pass 1 only: uint32 keys [B,N] (for bandwidth measurements).");
  m.attr("theme_max_k") = kMaxK;
}

}  // namespace
}  // namespace theme_cuda
RASFAST_REGISTER(theme_cuda, theme_cuda::bind);
}  // namespace rasfast
