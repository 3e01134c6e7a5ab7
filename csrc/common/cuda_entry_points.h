// Raw entry points of the CUDA kernels that the torch.library operators call from C++.
//
// The CUDA twin of common/entry_points.h. rasfast._cuda (and rasfast._cuda_emu, the same
// sources on the CPU emulator) hands out the address of one table (cuda_entry_points());
// rasfast._torch_ops receives it and launches the kernels from its CUDA operator kernels
// with no Python frame in between: a GPU call's host time is then the dispatcher's and the
// launches', not the Python layer's 50-150 us (benchmarks/results/gpu_roofline.md).
//
// _torch_ops is built against torch's headers only (no CUDA toolkit, no libc10_cuda): it
// allocates through at::empty, finds the current stream through c10's device-generic guard
// interface and passes it here as a void*. Plain C types only; nothing throws across. Every
// entry returns 0 on success; any other value makes the operator run the op's Python kernel,
// which repeats the call and raises the error that names its cause.
//
// Bump kRasfastCudaEntriesAbi whenever a signature or the table's layout changes.
#pragma once
#include <cstddef>
#include <cstdint>

extern "C" {

struct RasfastCudaEntries {
  int32_t abi;       // kRasfastCudaEntriesAbi
  int32_t size;      // sizeof(RasfastCudaEntries)
  int32_t emulated;  // 1: the CPU emulator's module (host pointers, stream ignored)
  // Bytes of workspace select_k needs (into *bytes). dtype codes: 0 float32, 1 float16,
  // 2 bfloat16. 0 ok, -1 bad arguments.
  int (*select_k_workspace)(int dtype_code, int64_t rows, int64_t n, int64_t k, int sorted,
                            size_t* bytes);
  // x[rows, n] contiguous -> out[rows, k] int64, out_vals[rows, k] in x's dtype, enqueued on
  // `stream` (a cudaStream_t) with no host synchronisation. 0 ok, -1 failure.
  int (*select_k)(const void* x, int dtype_code, int64_t rows, int64_t n, int64_t k,
                  int largest, int sorted, int64_t* out, void* out_vals, void* workspace,
                  size_t workspace_bytes, void* stream);
  // segment_topk_scores (segment/segment_cuda.h): q float32 [B, D]; emb [T, D] in
  // `dtype_code`; ids int64 [M] or null (then T = M); ptr int64 [B + 1]; scratch float32
  // [max(M, 1)]; out [B, n]; err int64 [1] of device scratch, which the entry resets and the
  // kernels lower. flag_out: null (no host read: the call has no synchronisation), or a host
  // pageable int64 that receives the flag (one blocking device-to-host copy on `stream`; the
  // kernels' no-error value is 2^62). `vec`: 16-byte loads allowed. 0 ok, -1 bad arguments
  // or failure.
  int (*segment_topk_scores)(const float* q, const void* emb, int dtype_code, int64_t D,
                             int64_t T, const int64_t* ids, const int64_t* ptr, int64_t B,
                             int64_t M, int64_t n, int vec, float* scratch, int64_t* out_ids,
                             float* out_scores, int64_t* err, int64_t* flag_out, void* stream);
  // segment_max_rank (segment/segment_cuda.h, max_rank): scores float32 [M]; groups int64
  // [M]; ptr int64 [B + 1]; slot_keys int64 [2 max(M, 1)] and slot_vals uint32 [2 max(M, 1)]
  // of scratch; out [B, k]; err / flag_out as for segment_topk_scores.
  int (*segment_max_rank)(const float* scores, const int64_t* groups, const int64_t* ptr,
                          int64_t B, int64_t M, int64_t k, int64_t* slot_keys,
                          uint32_t* slot_vals, int64_t* out_ids, float* out_scores, int64_t* err,
                          int64_t* flag_out, void* stream);
};

}  // extern "C"

constexpr int32_t kRasfastCudaEntriesAbi = 3;
