// triple_beam_search, CUDA backend: launcher interface shared by the kernel (beam_search.cu)
// and its pybind11 binding (beam_cuda.cpp). Plain pointers only; see beam_search.cu.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace rasfast {

struct BeamCudaArgs {
  // problem
  int64_t n, D, B, b, L;
  int64_t max_nb;  // 0 = no cap
  int64_t tail;    // decay has tail + 1 factors; ranks >= tail use decay[tail]
  int dtype;       // DType code of emb
  bool idx64;      // graph.indices is int64 (else int32)
  // on-chip sizes (computed by the binding)
  int64_t m_seed;  // running top-M size while scanning seeds (= b)
  int64_t m_step;  // running top-M size per beam expansion
  int64_t chunk;   // candidates scored per round
  int64_t cap;     // power of two >= max(m_seed, m_step) + chunk  (kv buffer)
  int64_t group;   // beams whose candidates are pooled before one merge into the top b
  int64_t cap2;    // power of two >= b + group * m_step           (global pool)
  int64_t cap3;    // all beams' rows scored and sorted together when their lengths sum to
                   // at most cap3 (a power of two; 0: every step beam by beam)
  int64_t lanes;   // lanes of a warp that score one candidate together (4, 8, 16 or 32)
  int64_t threads; // threads per block, 256 or 1024 (0: 1024 when B <= the SM count)
  // device pointers
  const int64_t* indptr;
  const void* indices;
  const void* emb;
  const float* q;
  const float* qnorm;     // null: each block computes |q| and flags a non-finite one (code 5)
  const int64_t* seed_ptr;  // [B + 1], checked by the kernel (code 6) against n_seed_ids
  const int64_t* seed_ids;
  int64_t n_seed_ids;
  const double* decay;
  int64_t* out_seq;
  float* out_score;
  int64_t* out_len;
  int64_t* out_count;
  float* scratch_u;  // [B, 2, b, D] running sums (double buffered)
  int* err;          // [2]: code (0 ok, 1 id out of range, 2 row not increasing, 3 non-finite,
                     // 4 seed id out of range, 5 |q| not finite, 6 seed offsets), where
};

constexpr int kBeamThreads = 256;  // the default block (and the largest chunk of candidates)

// Bytes of dynamic shared memory the kernel needs for these sizes.
size_t beam_search_smem_bytes(const BeamCudaArgs& a);

// Launches one block per query on `stream` (asynchronous).
void beam_search_launch(const BeamCudaArgs& a, cudaStream_t stream);

}  // namespace rasfast
