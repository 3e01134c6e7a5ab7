// Raw-pointer entry points of the CPU kernels that the torch.library operators call from C++.
//
// rasfast._C (pybind11, built against no torch) implements them and hands out the address of
// one table (_C.cpu_entry_points()); rasfast._torch_ops (built against torch's headers,
// csrc/torch_ops/) receives it once and calls the kernels from its CPU operator kernels,
// with no Python in between. The two libraries share only this header: plain C types, no
// C++ type crosses, and nothing throws across it. Every entry returns a status; a non-zero
// status means "this call failed a data check": the operator then runs the op's Python
// path, which finds the same failure and raises the error that names the argument.
//
// Bump kRasfastCpuEntriesAbi whenever a signature or the table's layout changes: the
// operator library refuses a table of another version (and the Python path serves).
#pragma once
#include <cstdint>

extern "C" {

// Shapes are the C++ kernels' (csrc/<family>/*_cpu.cpp); dtype codes: 0 float32,
// 1 float16, 2 bfloat16 (common/dtype.h). Bools travel as int.
struct RasfastCpuEntries {
  int32_t abi;   // kRasfastCpuEntriesAbi
  int32_t size;  // sizeof(RasfastCpuEntries)
  // x[B, N] -> out[B, k] int64, values[B, k] in x's dtype. 0 ok, 1 x holds NaN, -1 failure.
  int (*select_k)(const void* x, int dtype_code, int64_t B, int64_t N, int64_t k, int largest,
                  int sorted, int64_t* out, void* values);
  // q[B, D] float32, emb[N, D], scope[B, Ks] int64 (ids in [-1, N), checked by the caller)
  // -> ids[B, k] int64, scores[B, k] float32. 0 ok, 1 non-finite scoped row or failure.
  int (*scoped_dense_search)(const float* q, int64_t B, int64_t D, const void* emb, int dtype_code,
                             int64_t N, const int64_t* scope, int64_t Ks, int64_t k,
                             int64_t* out_ids, float* out_scores);
  // q[B, T] float32, corpus[N, T] -> out[B, K] int64 (1 <= K <= N). 0 ok, 1 non-finite
  // corpus row or failure.
  int (*theme_scope)(const float* q, int64_t B, int64_t T, const void* corpus, int dtype_code,
                     int64_t N, int64_t K, int ip, int64_t* out);
  // q_ppd[B, T], q_emb[B, D] float32; corpus ppd[N, T], emb[N, D] -> ids[B, k] int64,
  // scores[B, k] float32 (1 <= K <= N). 0 ok, 1 non-finite corpus row or failure.
  int (*theme_scoped_search)(const float* q_ppd, const void* ppd, int ppd_code,
                             const float* q_emb, const void* emb, int emb_code, int64_t B,
                             int64_t N, int64_t T, int64_t D, int64_t K, int64_t k, double w,
                             int ip, int64_t* out_ids, float* out_scores);
  // q[B, D] float32, emb[T, D], ids[M] int64 or null (then M = T rows in order), ptr[B + 1]
  // int64 (checked by the caller) -> ids[B, n], scores[B, n]. -1 ok, j >= 0 candidate j's
  // score is not finite, -2 failure.
  int64_t (*segment_topk_scores)(const float* q, int64_t B, int64_t D, const void* emb,
                                 int dtype_code, int64_t T, const int64_t* ids,
                                 const int64_t* ptr, int64_t n, int64_t* out_ids,
                                 float* out_scores);
  // scores[M] float32, groups[M] int64, ptr[B + 1] int64 (checked by the caller)
  // -> ids[B, k], scores[B, k]. 0 ok, -1 failure.
  int (*segment_max_rank)(const float* scores, int64_t M, const int64_t* groups,
                          const int64_t* ptr, int64_t B, int64_t k, int64_t* out_ids,
                          float* out_scores);
};

}  // extern "C"

constexpr int32_t kRasfastCpuEntriesAbi = 2;

namespace rasfast {
// Defined next to each kernel (select_cpu.cpp, theme_cpu.cpp, segment_cpu.cpp); the table
// is assembled in bindings/entry_points_cpu.cpp.
int select_k_entry(const void*, int, int64_t, int64_t, int64_t, int, int, int64_t*, void*);
int scoped_dense_search_entry(const float*, int64_t, int64_t, const void*, int, int64_t,
                              const int64_t*, int64_t, int64_t, int64_t*, float*);
int theme_scope_entry(const float*, int64_t, int64_t, const void*, int, int64_t, int64_t, int,
                      int64_t*);
int theme_scoped_search_entry(const float*, const void*, int, const float*, const void*, int,
                              int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, double, int,
                              int64_t*, float*);
int64_t segment_topk_scores_entry(const float*, int64_t, int64_t, const void*, int, int64_t,
                                  const int64_t*, const int64_t*, int64_t, int64_t*, float*);
int segment_max_rank_entry(const float*, int64_t, const int64_t*, const int64_t*, int64_t,
                           int64_t, int64_t*, float*);
}  // namespace rasfast
