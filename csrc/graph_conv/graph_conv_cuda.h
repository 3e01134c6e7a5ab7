// Launchers of the graph-transformer CUDA kernels (defined in graph_conv.cu, bound in
// graph_conv_cuda.cpp). All pointers are device pointers; every launch goes on `stream`.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace rasfast {

// agg[N, H, C] (float32) = per destination node and head, the softmax over incoming edges of
// scale * q.(k + e) applied to (v + e). q/k/v: columns 0, HC, 2HC of nodes[N, node_width]
// (dtype code); e[E, HC] (same dtype; rows e_stride >= HC elements apart, so one product of
// every layer's edge projection can serve each layer's columns) or null; CSR by destination
// (indptr[N+1], src, eid).
void graph_conv_attend_cuda_launch(const int64_t* indptr, const int64_t* src, const int64_t* eid,
                                   int dtype_code, const void* nodes, int64_t node_width,
                                   const void* e, int64_t e_stride, int64_t N, int64_t H,
                                   int64_t C, float scale, float* agg, cudaStream_t stream);

// attend and epilogue (below) in one launch, a block per node, for inference: the arguments
// of both, out [N, F] as the epilogue's. Only where graph_conv_layer_fusable(H, C, concat):
// 4 to 8 heads, C <= 1024, the attention output and the row in 48 KB of shared memory.
bool graph_conv_layer_fusable(int64_t H, int64_t C, bool concat);
void graph_conv_layer_cuda_launch(const int64_t* indptr, const int64_t* src, const int64_t* eid,
                                  int dtype_code, const void* nodes, int64_t node_width,
                                  const void* e, int64_t e_stride, int64_t N, int64_t H, int64_t C,
                                  float scale, bool concat, int64_t skip_col, bool has_skip,
                                  const float* w_beta, const float* ln_w, const float* ln_b,
                                  float eps, bool relu, void* out, cudaStream_t stream);

// The backward of attend (float32), the CPU kernel's twin (graph_conv_cpu.cpp): from nodes
// [N, node_width] (q/k/v at columns 0, HC, 2HC), e [rows, HC] (row roe[p] for CSR position p;
// null without edge features) and dagg [N, HC], writes dq/dk/dv into columns 0, HC, 2HC of
// d_nodes [N, d_width] (every row) and, with e, de [E, HC] in CSR order. rptr [N + 1] / rpos
// [E]: CSR positions grouped by source node; dst [E]: each position's destination. dl and
// alpha: [E, H] float32 scratch (the softmax weights and logit gradients on return).
void graph_conv_attend_backward_cuda_launch(const int64_t* indptr, const int64_t* src,
                                            const int64_t* roe, const int64_t* rptr,
                                            const int64_t* rpos, const int64_t* dst,
                                            const float* nodes, int64_t node_width, const float* e,
                                            const float* dagg, int64_t N, int64_t H, int64_t C,
                                            float scale, float* d_nodes, int64_t d_width, float* de,
                                            float* dl, float* alpha, cudaStream_t stream);

// out[N, F] (dtype) = agg (concat, or mean over heads) + skip (nodes column skip_col) or the
// beta gate (w_beta[3F] float32, may be null), then LayerNorm (ln_w/ln_b float32, may be
// null) and ReLU.
void graph_conv_epilogue_cuda_launch(const float* agg, int64_t N, int64_t H, int64_t C,
                                     bool concat, int dtype_code, const void* nodes,
                                     int64_t node_width, int64_t skip_col, bool has_skip,
                                     const float* w_beta, const float* ln_w, const float* ln_b,
                                     float eps, bool relu, void* out, cudaStream_t stream);

// out[G, F] float32 = mean of the rows of h[N, F] (dtype) in each graph (0 for empty graphs).
void graph_conv_pool_cuda_launch(const void* h, int dtype_code, const int64_t* graph_ptr,
                                 int64_t G, int64_t F, float* out, cudaStream_t stream);

}  // namespace rasfast
