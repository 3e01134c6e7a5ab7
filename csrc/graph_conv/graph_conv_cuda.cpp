// Python bindings of the graph-transformer CUDA kernels (raw device pointers + stream).
// Sizes are checked here; the Python layer (rasfast/ops/graph_conv_cuda.py) has already
// validated the tensors and the edge ids, and allocated every output.
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "common/cuda_check.h"
#include "common/registry.h"
#include "graph_conv/graph_conv_cuda.h"

namespace rasfast {
namespace {

namespace py = pybind11;

void check(bool ok, const std::string& msg) {
  if (!ok) throw py::value_error(msg);
}

void attend(uintptr_t indptr, uintptr_t src, uintptr_t eid, int dtype_code, uintptr_t nodes,
            int64_t node_width, uintptr_t e, int64_t e_stride, int64_t N, int64_t H, int64_t C,
            double scale, uintptr_t agg, uintptr_t stream) {
  check(dtype_code >= 0 && dtype_code <= 2, "dtype_code must be 0, 1 or 2");
  check(N >= 0 && H >= 1 && C >= 1 && C <= 1024, "graph_conv_attend: need H >= 1, 1 <= C <= 1024");
  check(node_width >= 3 * H * C, "nodes: width must hold q, k and v (3*H*C columns)");
  check(N == 0 || (indptr && nodes && agg), "graph_conv_attend: null pointer");
  check(!e || e_stride >= H * C, "e: rows must be at least H*C elements apart (e_stride)");
  py::gil_scoped_release nogil;
  graph_conv_attend_cuda_launch(as_dptr<const int64_t>(indptr), as_dptr<const int64_t>(src),
                                as_dptr<const int64_t>(eid), dtype_code,
                                as_dptr<const void>(nodes), node_width, as_dptr<const void>(e),
                                e_stride, N, H, C, (float)scale, as_dptr<float>(agg),
                                as_stream(stream));
}

void epilogue(uintptr_t agg, int64_t N, int64_t H, int64_t C, bool concat, int dtype_code,
              uintptr_t nodes, int64_t node_width, int64_t skip_col, bool has_skip,
              uintptr_t w_beta, uintptr_t ln_w, uintptr_t ln_b, double eps, bool relu,
              uintptr_t out, uintptr_t stream) {
  check(dtype_code >= 0 && dtype_code <= 2, "dtype_code must be 0, 1 or 2");
  const int64_t F = concat ? H * C : C;
  check(N >= 0 && H >= 1 && C >= 1 && F <= 16384, "graph_conv_epilogue: need F = out width <= 16384");
  check(!has_skip || skip_col + F <= node_width, "nodes: skip columns out of range");
  check(w_beta == 0 || has_skip, "w_beta: the beta gate needs the skip term");
  check((ln_w == 0) == (ln_b == 0), "ln_w and ln_b: give both or neither");
  py::gil_scoped_release nogil;
  graph_conv_epilogue_cuda_launch(as_dptr<const float>(agg), N, H, C, concat, dtype_code,
                                  as_dptr<const void>(nodes), node_width, skip_col, has_skip,
                                  as_dptr<const float>(w_beta), as_dptr<const float>(ln_w),
                                  as_dptr<const float>(ln_b), (float)eps, relu,
                                  as_dptr<void>(out), as_stream(stream));
}

void layer(uintptr_t indptr, uintptr_t src, uintptr_t eid, int dtype_code, uintptr_t nodes,
           int64_t node_width, uintptr_t e, int64_t e_stride, int64_t N, int64_t H, int64_t C,
           double scale, bool concat, int64_t skip_col, bool has_skip, uintptr_t w_beta,
           uintptr_t ln_w, uintptr_t ln_b, double eps, bool relu, uintptr_t out, uintptr_t stream) {
  check(dtype_code >= 0 && dtype_code <= 2, "dtype_code must be 0, 1 or 2");
  check(N >= 0 && graph_conv_layer_fusable(H, C, concat),
        "graph_conv_layer: needs 4 <= H <= 8, 1 <= C <= 1024 and H*C + out width floats in 48 KB");
  const int64_t F = concat ? H * C : C;
  check(node_width >= 3 * H * C, "nodes: width must hold q, k and v (3*H*C columns)");
  check(N == 0 || (indptr && nodes && out), "graph_conv_layer: null pointer");
  check(!e || e_stride >= H * C, "e: rows must be at least H*C elements apart (e_stride)");
  check(!has_skip || skip_col + F <= node_width, "nodes: skip columns out of range");
  check(w_beta == 0 || has_skip, "w_beta: the beta gate needs the skip term");
  check((ln_w == 0) == (ln_b == 0), "ln_w and ln_b: give both or neither");
  py::gil_scoped_release nogil;
  graph_conv_layer_cuda_launch(as_dptr<const int64_t>(indptr), as_dptr<const int64_t>(src),
                               as_dptr<const int64_t>(eid), dtype_code, as_dptr<const void>(nodes),
                               node_width, as_dptr<const void>(e), e_stride, N, H, C, (float)scale,
                               concat, skip_col, has_skip, as_dptr<const float>(w_beta),
                               as_dptr<const float>(ln_w), as_dptr<const float>(ln_b), (float)eps,
                               relu, as_dptr<void>(out), as_stream(stream));
}

void attend_backward(uintptr_t indptr, uintptr_t src, uintptr_t roe, uintptr_t rptr, uintptr_t rpos,
                     uintptr_t dst, uintptr_t nodes, int64_t node_width, uintptr_t e, uintptr_t dagg,
                     int64_t N, int64_t H, int64_t C, double scale, uintptr_t d_nodes,
                     int64_t d_width, uintptr_t de, uintptr_t dl, uintptr_t alpha, uintptr_t stream) {
  check(N >= 0 && H >= 1 && C >= 1 && C <= 1024, "graph_conv_attend_backward: need H >= 1, 1 <= C <= 1024");
  check(node_width >= 3 * H * C && d_width >= 3 * H * C,
        "nodes, d_nodes: widths must hold q, k and v (3*H*C columns)");
  // src, rpos, dst (and roe) are empty, so null, for a graph without edges
  check(N == 0 || (indptr && rptr && nodes && dagg && d_nodes),
        "graph_conv_attend_backward: null pointer");
  check((e == 0) == (de == 0) && (e == 0 || roe != 0), "e, roe and de: give all or none");
  py::gil_scoped_release nogil;
  graph_conv_attend_backward_cuda_launch(
      as_dptr<const int64_t>(indptr), as_dptr<const int64_t>(src), as_dptr<const int64_t>(roe),
      as_dptr<const int64_t>(rptr), as_dptr<const int64_t>(rpos), as_dptr<const int64_t>(dst),
      as_dptr<const float>(nodes), node_width, as_dptr<const float>(e), as_dptr<const float>(dagg),
      N, H, C, (float)scale, as_dptr<float>(d_nodes), d_width, as_dptr<float>(de),
      as_dptr<float>(dl), as_dptr<float>(alpha), as_stream(stream));
}

void pool(uintptr_t h, int dtype_code, uintptr_t graph_ptr, int64_t G, int64_t F, uintptr_t out,
          uintptr_t stream) {
  check(dtype_code >= 0 && dtype_code <= 2, "dtype_code must be 0, 1 or 2");
  check(G >= 0 && F >= 0, "graph_conv_pool: negative size");
  py::gil_scoped_release nogil;
  graph_conv_pool_cuda_launch(as_dptr<const void>(h), dtype_code, as_dptr<const int64_t>(graph_ptr),
                              G, F, as_dptr<float>(out), as_stream(stream));
}

void bind(py::module_& m) {
  m.def("graph_conv_attend", &attend, "Warp per (node, head) online-softmax attention -> agg[N,H,C] f32.");
  m.def("graph_conv_layer", &layer,
        "attend and epilogue in one launch (a block per node): the layer's output, inference.");
  m.def("graph_conv_layer_fusable", &graph_conv_layer_fusable,
        "Whether graph_conv_layer takes these heads, channels and concat.");
  m.def("graph_conv_epilogue", &epilogue, "Block per node: concat/mean, skip or beta gate, LayerNorm, ReLU.");
  m.def("graph_conv_pool", &pool, "Block per graph: node mean -> out[G,F] f32.");
  m.def("graph_conv_attend_backward", &attend_backward,
        "Backward of graph_conv_attend (float32): dq, dk, dv into columns 0, HC, 2HC of d_nodes "
        "and, with edge rows, de [E, HC] in CSR order; dl / alpha [E, H] scratch.");
}

}  // namespace
RASFAST_REGISTER(graph_conv_cuda, bind);
}  // namespace rasfast
