// pybind11 bindings of the CUDA segment kernels (module rasfast._cuda). Raw device pointers
// and a stream handle; rasfast/ops/segment.py validates the input and allocates outputs.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "common/buffers.h"
#include "common/registry.h"
#include "segment/segment_cuda.h"

namespace rasfast {
namespace segment_cuda {
namespace {
namespace py = pybind11;

void topk(uintptr_t q, uintptr_t emb, int code, int64_t D, int64_t T, uintptr_t ids, uintptr_t ptr,
          int64_t B, int64_t M, int64_t n, bool vec, uintptr_t scratch, uintptr_t out_ids,
          uintptr_t out_scores, uintptr_t err, uintptr_t stream) {
  dtype_from_code(code);
  require(B >= 0 && D >= 1, "q_emb: expected B >= 0 and D >= 1");
  require(M >= 0 && M < (int64_t(1) << 32), "cand_ptr: backend 'cuda' supports M < 2^32 candidates");
  require(T >= 0, "cand_emb: expected T >= 0 rows");
  require(n >= 1 && n <= kMaxN, "n: backend 'cuda' supports 1 <= n <= 2048");
  py::gil_scoped_release nogil;
  topk_scores(q, emb, code, D, T, ids, ptr, B, M, n, vec, scratch, out_ids, out_scores, err, stream);
}

void rank(uintptr_t scores, uintptr_t groups, uintptr_t ptr, int64_t B, int64_t M, int64_t k,
          uintptr_t slot_keys, uintptr_t slot_vals, uintptr_t out_ids, uintptr_t out_scores,
          uintptr_t err, uintptr_t stream) {
  require(B >= 0, "ptr: expected B >= 0");
  require(M >= 0 && M < (int64_t(1) << 32), "ptr: backend 'cuda' supports M < 2^32 items");
  require(k >= 1 && k <= kMaxN, "k: backend 'cuda' supports 1 <= k <= 2048");
  py::gil_scoped_release nogil;
  max_rank(scores, groups, ptr, B, M, k, slot_keys, slot_vals, out_ids, out_scores, err, stream);
}

void bind(py::module_& m) {
  m.def("segment_topk_scores", &topk, py::arg("q"), py::arg("emb"), py::arg("dtype_code"),
        py::arg("D"), py::arg("T"), py::arg("ids"), py::arg("ptr"), py::arg("B"), py::arg("M"),
        py::arg("n"), py::arg("vec"), py::arg("scratch"), py::arg("out_ids"),
        py::arg("out_scores"), py::arg("err"), py::arg("stream"),
        "Per-query top-n inner products over CSR candidates (checks flagged in err).");
  m.def("segment_max_rank", &rank, py::arg("scores"), py::arg("groups"), py::arg("ptr"),
        py::arg("B"), py::arg("M"), py::arg("k"), py::arg("slot_keys"), py::arg("slot_vals"),
        py::arg("out_ids"), py::arg("out_scores"), py::arg("err"), py::arg("stream"),
        "Per-query top-k groups by max item score (checks flagged in err).");
  m.attr("segment_no_error") = kNoError;
  m.attr("segment_score_error") = kScoreError;
  m.attr("segment_max_n") = kMaxN;
}

}  // namespace
}  // namespace segment_cuda
RASFAST_REGISTER(segment_cuda, segment_cuda::bind);
}  // namespace rasfast
