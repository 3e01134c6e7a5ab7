// _cuda.cuda_entry_points() (and _cuda_emu's): the address of the table of raw CUDA kernel
// entries (common/cuda_entry_points.h) that rasfast._torch_ops calls from its CUDA operator
// kernels. Each entry catches what the launcher throws: nothing crosses the table but a status.
#include <cuda_runtime.h>

#include <cstdint>
#include <exception>

#include "common/cuda_entry_points.h"
#include "common/registry.h"
#include "segment/segment_cuda.h"
#include "select/select_cuda.h"

namespace rasfast {
namespace {

bool select_args_ok(int dtype_code, int64_t rows, int64_t n, int64_t k) {
  return dtype_code >= 0 && dtype_code <= 2 && rows >= 0 && n >= 1 && n < (int64_t(1) << 32) &&
         k >= 1 && k <= n;
}

int select_k_workspace_entry(int dtype_code, int64_t rows, int64_t n, int64_t k, int sorted,
                             size_t* bytes) {
  if (!select_args_ok(dtype_code, rows, n, k) || bytes == nullptr) return -1;
  try {
    *bytes = select_k_cuda_workspace(dtype_code, rows, n, k, sorted != 0);
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

int select_k_entry_cuda(const void* x, int dtype_code, int64_t rows, int64_t n, int64_t k,
                        int largest, int sorted, int64_t* out, void* out_vals, void* workspace,
                        size_t workspace_bytes, void* stream) {
  if (!select_args_ok(dtype_code, rows, n, k)) return -1;
  if (rows > 0 && (x == nullptr || out == nullptr || out_vals == nullptr || workspace == nullptr))
    return -1;
  try {
    select_k_cuda_launch(x, dtype_code, rows, n, k, largest != 0, sorted != 0, out, out_vals,
                         workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

// The kernels' error flag into *flag_out (when not null): the call's one host read
// (validate "auto"/"full"), ordered on the call's stream after its kernels. flag_out is
// pageable (the caller's stack): a device-to-host copy there returns only once it has
// completed (CUDA's API synchronisation rules), so no stream synchronisation follows it.
int read_flag(const int64_t* err, int64_t* flag_out, void* stream) {
  if (flag_out == nullptr) return 0;
  return cudaMemcpyAsync(flag_out, err, sizeof(int64_t), cudaMemcpyDeviceToHost,
                         static_cast<cudaStream_t>(stream)) == cudaSuccess ? 0 : -1;
}

int segment_topk_scores_entry_cuda(const float* q, const void* emb, int dtype_code, int64_t D,
                                   int64_t T, const int64_t* ids, const int64_t* ptr, int64_t B,
                                   int64_t M, int64_t n, int vec, float* scratch, int64_t* out_ids,
                                   float* out_scores, int64_t* err, int64_t* flag_out,
                                   void* stream) {
  // the binding's requirements (segment/segment_cuda.cpp), as a status
  if (dtype_code < 0 || dtype_code > 2 || B < 0 || D < 1 || T < 0 || M < 0 ||
      M >= (int64_t(1) << 32) || n < 1 || n > segment_cuda::kMaxN || ptr == nullptr ||
      err == nullptr || (B > 0 && (q == nullptr || out_ids == nullptr || out_scores == nullptr)) ||
      (M > 0 && (emb == nullptr || scratch == nullptr)))
    return -1;
  auto u = [](const void* v) { return reinterpret_cast<uintptr_t>(v); };
  try {
    segment_cuda::reset_flag(u(err), u(stream));
    segment_cuda::topk_scores(u(q), u(emb), dtype_code, D, T, u(ids), u(ptr), B, M, n, vec != 0,
                              u(scratch), u(out_ids), u(out_scores), u(err), u(stream));
    return read_flag(err, flag_out, stream);
  } catch (const std::exception&) {
    return -1;
  }
}

int segment_max_rank_entry_cuda(const float* scores, const int64_t* groups, const int64_t* ptr,
                                int64_t B, int64_t M, int64_t k, int64_t* slot_keys,
                                uint32_t* slot_vals, int64_t* out_ids, float* out_scores,
                                int64_t* err, int64_t* flag_out, void* stream) {
  if (B < 0 || M < 0 || M >= (int64_t(1) << 32) || k < 1 || k > segment_cuda::kMaxN ||
      ptr == nullptr || err == nullptr || slot_keys == nullptr || slot_vals == nullptr ||
      (B > 0 && (out_ids == nullptr || out_scores == nullptr)) ||
      (M > 0 && (scores == nullptr || groups == nullptr)))
    return -1;
  auto u = [](const void* v) { return reinterpret_cast<uintptr_t>(v); };
  try {
    segment_cuda::reset_flag(u(err), u(stream));
    segment_cuda::max_rank(u(scores), u(groups), u(ptr), B, M, k, u(slot_keys), u(slot_vals),
                           u(out_ids), u(out_scores), u(err), u(stream));
    return read_flag(err, flag_out, stream);
  } catch (const std::exception&) {
    return -1;
  }
}

const RasfastCudaEntries kCudaEntries = {
    kRasfastCudaEntriesAbi,
    static_cast<int32_t>(sizeof(RasfastCudaEntries)),
#ifdef RASFAST_CUDA_EMU
    1,
#else
    0,
#endif
    &select_k_workspace_entry,
    &select_k_entry_cuda,
    &segment_topk_scores_entry_cuda,
    &segment_max_rank_entry_cuda,
};

void bind(pybind11::module_& m) {
  m.def("cuda_entry_points",
        []() { return reinterpret_cast<std::uintptr_t>(&kCudaEntries); },
        "Address of the RasfastCudaEntries table (common/cuda_entry_points.h), for "
        "rasfast._torch_ops; valid while this module is loaded (for the process).");
  m.attr("cuda_entry_points_abi") = kRasfastCudaEntriesAbi;
}

}  // namespace
RASFAST_REGISTER(cuda_entry_points, bind);
}  // namespace rasfast
