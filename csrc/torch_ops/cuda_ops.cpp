// rasfast._torch_ops, CUDA side: C++ kernels for the CUDA dispatch key of the registered
// operators whose GPU calls are short enough that the Python layer's host time shows
// (select_k: 50-150 us of Python around a 100-300 us call on an H100, gpu_roofline.md;
// segment_topk_scores: KiRAG's per-question aligner step, 48-420 us calls, 27 us of host
// path on the emulator's dry run before this kernel, host_time_emu.md; segment_max_rank, its
// document ranking, the same way).
//
// Built against torch's headers only, like cpu_ops.cpp: no CUDA toolkit, no libc10_cuda, so
// the same library serves a CPU wheel and a CUDA one. What a CUDA kernel needs from torch is
// reached through device-generic interfaces that torch's CUDA library implements at run time:
// at::empty on the input's device (the caching allocator, CUDA-graph pools included),
// c10::DeviceGuard, and the current stream's handle from c10's guard interface
// (c10::impl::VirtualGuardImpl). The launches come from rasfast._cuda through its table of raw
// entry points (common/cuda_entry_points.h), handed over by rasfast_torch_ops_attach_cuda.
//
// The same code serves the CUDA emulator (rasfast._cuda_emu's table): with RASFAST_CUDA_EMU
// set, backend "cuda" on CPU tensors runs here from the CPU kernel (cpu_ops.cpp), stream null,
// which is how `make test` exercises these kernels without a GPU.
//
// A call this path does not serve (another backend, a dtype or shape the kernel does not take,
// a launch that fails, no table attached) goes to the op's Python kernel, rasfast::<op>_python,
// which gives the same result or raises the error that names the argument.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "common/cuda_entry_points.h"
#include "torch_ops/op_common.h"

namespace rasfast_ops {
namespace {

std::atomic<const RasfastCudaEntries*> g_cuda{nullptr};

// RASFAST_CUDA_EMU set (not empty, not "0"), as rasfast.dispatch.cuda_emulated() reads it:
// read at every call, like the Python layer, so a test can turn the emulator off.
bool emulator_on() {
  const char* v = std::getenv("RASFAST_CUDA_EMU");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

// The table that serves a call on `t` with `backend`, or null: the GPU module's for a CUDA
// tensor (backend "auto" or "cuda"), the emulator's for a CPU tensor with backend "cuda".
const RasfastCudaEntries* serving(const Tensor& t, Str backend) {
  const RasfastCudaEntries* e = g_cuda.load(std::memory_order_acquire);
  if (e == nullptr) return nullptr;
  if (t.device().is_cuda()) return !e->emulated && (backend == "auto" || backend == "cuda") ? e : nullptr;
  if (t.device().is_cpu()) return e->emulated && backend == "cuda" && emulator_on() ? e : nullptr;
  return nullptr;
}

// The current stream of `t`'s device as a cudaStream_t (null for the emulator's CPU tensors).
void* stream_of(const Tensor& t) {
  if (!t.device().is_cuda()) return nullptr;
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  return impl.getStream(t.device()).native_handle();
}

}  // namespace

bool select_k_device(const Tensor& x, int64_t k, bool largest, bool sorted, Str backend,
                     Pair* out) {
  const RasfastCudaEntries* e = serving(x, backend);
  if (e == nullptr || x.layout() != at::kStrided || x.dim() != 2 || dtype_code(x) < 0) return false;
  const int64_t B = x.size(0), N = x.size(1);
  if (N < 1 || N >= (int64_t(1) << 32) || k < 1 || k > N) return false;
  const int code = dtype_code(x);
  Tensor idx = at::empty({B, k}, x.options().dtype(at::kLong));
  Tensor vals = at::empty({B, k}, x.options());
  if (B == 0) {
    *out = {vals, idx};
    return true;
  }
  size_t nbytes = 0;
  if (e->select_k_workspace(code, B, N, k, sorted, &nbytes) != 0) return false;
  c10::OptionalDeviceGuard guard;
  if (x.device().is_cuda()) guard.reset_device(x.device());
  Tensor xc = x.contiguous();
  Tensor ws = at::empty({static_cast<int64_t>(nbytes)}, x.options().dtype(at::kByte));
  if (e->select_k(xc.data_ptr(), code, B, N, k, largest, sorted, idx.data_ptr<int64_t>(),
                  vals.data_ptr(), ws.data_ptr(), nbytes, stream_of(x)) != 0)
    return false;
  *out = {vals, idx};
  return true;
}

namespace {

// segment/segment_cuda.h: n at most kMaxN; the no-error value of the kernels' flag
constexpr int64_t kSegmentMaxN = 2048;
constexpr int64_t kSegmentNoError = int64_t(1) << 62;

bool index_vector(const Tensor& t, const Tensor& like) {
  return t.defined() && t.device() == like.device() && t.layout() == at::kStrided && t.dim() == 1 &&
         (t.scalar_type() == at::kInt || t.scalar_type() == at::kLong);
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

}  // namespace

bool segment_topk_scores_device(const Tensor& q_emb, const Tensor& cand_emb,
                                const Tensor& cand_ptr, int64_t n,
                                const std::optional<Tensor>& cand_ids, Str backend, Str validate,
                                Pair* out) {
  const RasfastCudaEntries* e = serving(q_emb, backend);
  if (e == nullptr || e->segment_topk_scores == nullptr) return false;
  if (validate != "auto" && validate != "full" && validate != "none") return false;
  const bool with_ids = cand_ids.has_value() && cand_ids->defined();
  // device tensors only: host index arrays of a GPU call are checked on the host (Python)
  if (q_emb.layout() != at::kStrided || q_emb.dim() != 2 || dtype_code(q_emb) < 0 ||
      !cand_emb.defined() || cand_emb.device() != q_emb.device() ||
      cand_emb.layout() != at::kStrided || cand_emb.dim() != 2 || dtype_code(cand_emb) < 0 ||
      !index_vector(cand_ptr, q_emb) || (with_ids && !index_vector(*cand_ids, q_emb)))
    return false;
  const int64_t B = q_emb.size(0), D = q_emb.size(1), T = cand_emb.size(0);
  const int64_t M = with_ids ? cand_ids->size(0) : T;
  if (D < 1 || cand_emb.size(1) != D || cand_ptr.size(0) != B + 1 || n < 1 || n > kSegmentMaxN ||
      M >= (int64_t(1) << 32))
    return false;
  c10::OptionalDeviceGuard guard;
  if (q_emb.device().is_cuda()) guard.reset_device(q_emb.device());
  const Tensor q = q_emb.to(at::kFloat).contiguous(), c = cand_emb.contiguous();
  const Tensor p = cand_ptr.to(at::kLong).contiguous();
  const Tensor ids = with_ids ? cand_ids->to(at::kLong).contiguous() : Tensor();
  const auto opts = q.options();
  Tensor out_i = at::empty({B, n}, opts.dtype(at::kLong)), out_s = at::empty({B, n}, opts);
  Tensor scratch = at::empty({std::max<int64_t>(M, 1)}, opts);
  Tensor err = at::empty({1}, opts.dtype(at::kLong));  // reset by the entry, on the stream
  int64_t flag = kSegmentNoError;
  // 16-byte row loads: both bases aligned, a row a whole number of vectors (as the Python kernel)
  const bool vec = aligned16(q) && aligned16(c) && (D * 4) % 16 == 0 && (D * c.element_size()) % 16 == 0;
  if (e->segment_topk_scores(q.data_ptr<float>(), c.data_ptr(), dtype_code(c), D, T,
                             with_ids ? ids.data_ptr<int64_t>() : nullptr, p.data_ptr<int64_t>(), B,
                             M, n, vec, scratch.data_ptr<float>(), out_i.data_ptr<int64_t>(),
                             out_s.data_ptr<float>(), err.data_ptr<int64_t>(),
                             validate == "none" ? nullptr : &flag, stream_of(q_emb)) != 0)
    return false;
  // a checked call read the flag (its one host sync); a lowered one goes to the Python
  // kernel, which repeats the call and names the argument
  if (validate != "none" && flag != kSegmentNoError) return false;
  *out = {out_i, out_s};
  return true;
}

bool segment_max_rank_device(const Tensor& item_scores, const Tensor& item_to_group,
                             const Tensor& ptr, int64_t k, Str backend, Str validate, Pair* out) {
  const RasfastCudaEntries* e = serving(item_scores, backend);
  if (e == nullptr || e->segment_max_rank == nullptr) return false;
  if (validate != "auto" && validate != "full" && validate != "none") return false;
  if (item_scores.layout() != at::kStrided || item_scores.dim() != 1 || dtype_code(item_scores) < 0 ||
      !index_vector(item_to_group, item_scores) || !index_vector(ptr, item_scores))
    return false;
  const int64_t M = item_scores.size(0), B = ptr.size(0) - 1;
  if (item_to_group.size(0) != M || B < 0 || k < 1 || k > kSegmentMaxN || M >= (int64_t(1) << 32))
    return false;
  c10::OptionalDeviceGuard guard;
  if (item_scores.device().is_cuda()) guard.reset_device(item_scores.device());
  const Tensor s = item_scores.to(at::kFloat).contiguous();
  const Tensor g = item_to_group.to(at::kLong).contiguous(), p = ptr.to(at::kLong).contiguous();
  const auto opts = s.options();
  Tensor out_i = at::empty({B, k}, opts.dtype(at::kLong)), out_s = at::empty({B, k}, opts);
  // the kernel fills its own hash tables (2 slots an item)
  Tensor slot_keys = at::empty({2 * std::max<int64_t>(M, 1)}, opts.dtype(at::kLong));
  Tensor slot_vals = at::empty({2 * std::max<int64_t>(M, 1)}, opts.dtype(at::kInt));
  Tensor err = at::empty({1}, opts.dtype(at::kLong));  // reset by the entry, on the stream
  int64_t flag = kSegmentNoError;
  if (e->segment_max_rank(s.data_ptr<float>(), g.data_ptr<int64_t>(), p.data_ptr<int64_t>(), B, M, k,
                          slot_keys.data_ptr<int64_t>(),
                          reinterpret_cast<uint32_t*>(slot_vals.data_ptr<int32_t>()),
                          out_i.data_ptr<int64_t>(), out_s.data_ptr<float>(), err.data_ptr<int64_t>(),
                          validate == "none" ? nullptr : &flag, stream_of(item_scores)) != 0)
    return false;
  if (validate != "none" && flag != kSegmentNoError) return false;  // named by the Python kernel
  *out = {out_i, out_s};
  return true;
}

namespace {

Pair segment_max_rank_cuda(const Tensor& item_scores, const Tensor& item_to_group, const Tensor& ptr,
                           int64_t k, Str backend, Str validate) {
  Pair out;
  if (segment_max_rank_device(item_scores, item_to_group, ptr, k, backend, validate, &out)) return out;
  static auto py = python_kernel<RankSig>("rasfast::segment_max_rank_python");
  return py.call(item_scores, item_to_group, ptr, k, backend, validate);
}

Pair segment_topk_scores_cuda(const Tensor& q_emb, const Tensor& cand_emb, const Tensor& cand_ptr,
                              int64_t n, const std::optional<Tensor>& cand_ids, Str backend,
                              Str validate) {
  Pair out;
  if (segment_topk_scores_device(q_emb, cand_emb, cand_ptr, n, cand_ids, backend, validate, &out))
    return out;
  static auto py = python_kernel<TopkSig>("rasfast::segment_topk_scores_python");
  return py.call(q_emb, cand_emb, cand_ptr, n, cand_ids, backend, validate);
}

Pair select_k_cuda(const Tensor& x, int64_t k, bool largest, bool sorted, Str backend) {
  Pair out;
  if (select_k_device(x, k, largest, sorted, backend, &out)) return out;
  static auto py = python_kernel<SelectSig>("rasfast::select_k_python");
  return py.call(x, k, largest, sorted, backend);
}

}  // namespace
}  // namespace rasfast_ops

// The ops whose CUDA kernel this library registers (rasfast/ops/_library.py reads the list and
// registers their Python kernel under <op>_python only).
#define RASFAST_NATIVE_CUDA_OPS "select_k,segment_topk_scores,segment_max_rank"

TORCH_LIBRARY_IMPL(rasfast, CUDA, m) {
  m.impl("select_k", &rasfast_ops::select_k_cuda);
  m.impl("segment_topk_scores", &rasfast_ops::segment_topk_scores_cuda);
  m.impl("segment_max_rank", &rasfast_ops::segment_max_rank_cuda);
}

extern "C" {

__attribute__((visibility("default"))) const char* rasfast_torch_ops_cuda_names() {
  return RASFAST_NATIVE_CUDA_OPS;
}

// Hands over rasfast._cuda's (or _cuda_emu's) kernel table; 0 on success, 1 for a table of
// another version.
__attribute__((visibility("default"))) int rasfast_torch_ops_attach_cuda(const RasfastCudaEntries* e) {
  if (e == nullptr || e->abi != kRasfastCudaEntriesAbi ||
      e->size != static_cast<int32_t>(sizeof(RasfastCudaEntries)))
    return 1;
  rasfast_ops::g_cuda.store(e, std::memory_order_release);
  return 0;
}

}  // extern "C"
