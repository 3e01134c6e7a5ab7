// What the C++ operator kernels of rasfast._torch_ops share (cpu_ops.cpp, cuda_ops.cpp).
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <tuple>

namespace rasfast_ops {

using at::Tensor;
using Pair = std::tuple<Tensor, Tensor>;
using Str = c10::string_view;

// The kernels' dtype codes (common/dtype.h): 0 float32, 1 float16, 2 bfloat16; -1 other.
inline int dtype_code(const Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return 0;
    case at::kHalf: return 1;
    case at::kBFloat16: return 2;
    default: return -1;
  }
}

// The op's Python kernel: rasfast::<name>_python (rasfast/ops/_library.py defines it with the
// op's schema). Looked up on the first hand-over; the Python module defines it on import.
template <class Sig>
c10::TypedOperatorHandle<Sig> python_kernel(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").template typed<Sig>();
}

using SelectSig = Pair(const Tensor&, int64_t, bool, bool, Str);

// The CUDA select_k fast path (cuda_ops.cpp): {values, indices} into `out`, true when it
// served the call (backend "auto"/"cuda" on a CUDA tensor, or "cuda" on a CPU tensor under
// the emulator), false to hand the call to the Python kernel.
bool select_k_device(const Tensor& x, int64_t k, bool largest, bool sorted, Str backend,
                     Pair* out);

using TopkSig = Pair(const Tensor&, const Tensor&, const Tensor&, int64_t,
                     const std::optional<Tensor>&, Str, Str);

// The CUDA segment_topk_scores fast path (cuda_ops.cpp): {ids, scores} into `out`, true when
// it served the call (as select_k_device; every index tensor on q_emb's device, and with
// validate "auto"/"full" the kernels' error flag read once and clear), false to hand the call
// to the Python kernel, which repeats it and raises the error that names the argument.
bool segment_topk_scores_device(const Tensor& q_emb, const Tensor& cand_emb,
                                const Tensor& cand_ptr, int64_t n,
                                const std::optional<Tensor>& cand_ids, Str backend, Str validate,
                                Pair* out);

using RankSig = Pair(const Tensor&, const Tensor&, const Tensor&, int64_t, Str, Str);

// The CUDA segment_max_rank fast path (cuda_ops.cpp), as segment_topk_scores_device.
bool segment_max_rank_device(const Tensor& item_scores, const Tensor& item_to_group,
                             const Tensor& ptr, int64_t k, Str backend, Str validate, Pair* out);

}  // namespace rasfast_ops
