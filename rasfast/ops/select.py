"""select_k: the k smallest (or largest) entries per row, for k up to N.

Large k matters: theme scoping keeps K = 50,000 to 300,000 rows per query, and faiss's
GPU indexes stop at k = 2048. Every backend breaks ties by lower index, so all backends
return identical indices.
"""
from __future__ import annotations

from typing import Tuple

import torch

from .. import dispatch as _bk
from .._arrays import device_guard, as_tensor, cpu_buffer, cpu_out, cuda_stream, device_ptr, kind_of, to_kind
from .._validate import check_bool_arg, check_finite, check_float, check_int_arg, check_rank
from ..reference import select as _ref
from .._threads import follows_width_rule
from ._library import compiling, define, native_call, traced


@follows_width_rule
def select_k(x, k: int, largest: bool = False, sorted: bool = True,
             backend: str = "auto") -> Tuple[object, object]:
    """The k smallest (``largest=False``) or largest entries of each row of ``x[B, N]``.

    Args:
        x: float32/float16/bfloat16 numpy array or torch tensor of shape [B, N].
           +-inf are ordinary values. NaN: the cpu, triton and torch backends reject it
           (ValueError); the cuda backend does not look for it, since a check would cost a
           pass over x and a host synchronisation per call, and ranks NaN above +inf, as
           torch.sort and torch.topk do.
        k: 1 <= k <= N.
        largest: select the largest instead of the smallest.
        sorted: if True, results are ordered (ascending, or descending when ``largest``),
            ties by lower index; if False, the same set in unspecified order.
        backend: "auto" | "cpu" | "cuda" | "triton" | "torch" (torch.topk plus a tie pass:
            runs on any device; "auto" does not pick it).

    Returns:
        (values[B, k] in x's dtype, indices[B, k] int64), the same kind (numpy/torch) as x.

    Raises:
        TypeError: x not an array, unsupported dtype; k not an int; largest/sorted not bool.
        ValueError: x not 2-d or N == 0; k outside [1, N]; NaN in x; unknown backend.
        rasfast.dispatch.BackendUnavailable: the requested backend cannot run here.
    """
    if type(x) is torch.Tensor and x.is_cuda and type(k) is int and type(largest) is bool \
            and type(sorted) is bool and not compiling() and native_call("select_k", backend, x):
        # a plain GPU call goes straight to the C++ CUDA kernel (csrc/torch_ops/cuda_ops.cpp),
        # which checks what _check_args checks and hands any other call to _select_k_op
        # (the same checks, the same errors): the Python layer's host time is the GPU call's
        return _OP(x, k, largest, sorted, backend)
    kind = kind_of(x)
    xt = as_tensor(x, "x")
    k, largest, sorted = _check_args(xt, k, largest, sorted)
    if traced(xt) or native_call("select_k", backend, xt):  # a C++ kernel: no Python frame
        vals, idx = _OP(xt, k, largest, sorted, backend)
    else:
        vals, idx = _select_k(xt, k, largest, sorted, backend)
    return to_kind(vals, kind), to_kind(idx, kind)


def _check_args(xt: torch.Tensor, k, largest, sorted):
    """The public op's argument checks (the registered kernel's too): (k, largest, sorted)."""
    check_float(xt, "x")
    check_rank(xt, "x", 2, "[B, N]")
    n = xt.shape[1]
    if n == 0:
        raise ValueError("x: N (x.shape[1]) must be >= 1 to select from")
    k = check_int_arg(k, "k", 1, n, "N (x.shape[1])")
    return k, check_bool_arg(largest, "largest"), check_bool_arg(sorted, "sorted")


def _select_k(xt: torch.Tensor, k: int, largest: bool, sorted: bool, backend: str):
    """The kernel of ``torch.ops.rasfast.select_k`` (and of the eager public op): the
    backend resolved for x's device, its data checks, the backend's implementation.
    (values[B, k], indices[B, k])."""
    be = _bk.resolve(backend, xt.device, "select_k")
    if be not in ("cpu", "cuda"):  # cpu detects NaN in its own passes; cuda ranks it last
        check_finite(xt, "x", allow_inf=True)
    xt = xt.contiguous()
    if xt.shape[0] == 0:
        idx = torch.empty((0, k), dtype=torch.int64, device=xt.device)
        vals = None
    else:
        idx, vals = _IMPLS[be](xt, k, largest, sorted)
    if vals is None:
        vals = torch.gather(xt, 1, idx)
    return vals, idx


def _select_k_op(x: torch.Tensor, k: int, largest: bool, sorted: bool, backend: str):
    """The registered kernel: the argument checks of the public op (a direct call of
    ``torch.ops.rasfast.select_k`` gets them too), then :func:`_select_k`."""
    _check_args(x, k, largest, sorted)
    return _select_k(x, k, largest, sorted, backend)


def _select_k_fake(x, k, largest, sorted, backend):
    b = x.shape[0]
    return x.new_empty((b, k)), x.new_empty((b, k), dtype=torch.int64)


# Implementations: (x[B, N] contiguous, B >= 1, k, largest, sorted) -> (indices, values or None).


def _torch(x, k, largest, sorted):
    """torch.topk with the contract's tie order (torch.topk leaves ties unspecified).

    torch.topk finds the k-th value t of each row; every entry strictly better than t is
    kept, and of the entries equal to t the lowest-indexed ones fill the remaining places
    (a running count of the equal entries along the row). Not the reference (a stable full
    sort): several passes over x instead of a sort, which is why it is a backend of its own.
    Comparisons are in x's dtype, where -0.0 == +0.0 tie as in the reference.
    """
    b = x.shape[0]
    t = torch.topk(x, k, dim=1, largest=largest, sorted=True).values[:, k - 1:]
    better = x > t if largest else x < t
    need = k - better.sum(1, keepdim=True, dtype=torch.int32)  # >= 1: t itself is in the top k
    equal = x == t
    take = better | (equal & (torch.cumsum(equal, 1, dtype=torch.int32) <= need))
    idx = take.nonzero()[:, 1].view(b, k)  # row-major: the chosen indices, ascending per row
    if sorted:  # a stable sort of the chosen values keeps ties in ascending index order
        order = torch.sort(torch.gather(x, 1, idx), dim=1, descending=largest, stable=True).indices
        idx = torch.gather(idx, 1, order)
    return idx, None


def _cpu(x, k, largest, sorted):
    buf, code = cpu_buffer(x)
    out = torch.empty((x.shape[0], k), dtype=torch.int64)
    vals = torch.empty((x.shape[0], k), dtype=x.dtype)
    if _bk.cpu_module().select_k(buf, code, k, largest, sorted, cpu_out(out), cpu_out(vals)):
        raise ValueError("x: contains NaN")
    return out, vals


def _cuda(x, k, largest, sorted):
    """No host synchronisation: the kernel's scratch is one workspace tensor from torch's
    caching allocator, sized by the module, and values come out of the kernel."""
    mod = _bk.cuda_module()
    from .._arrays import DTYPE_CODES
    code, (b, n) = DTYPE_CODES[x.dtype], x.shape
    out = torch.empty((b, k), dtype=torch.int64, device=x.device)
    vals = torch.empty((b, k), dtype=x.dtype, device=x.device)
    nbytes = mod.select_k_workspace_bytes(code, b, n, k, sorted)
    ws = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
    with device_guard(x.device):
        mod.select_k(device_ptr(x), code, b, n, k, largest, sorted, device_ptr(out),
                     device_ptr(vals), device_ptr(ws), nbytes, cuda_stream(x.device))
    return out, vals


def _triton(x, k, largest, sorted):
    return _bk.triton_kernels().select.select_k(x, k, largest, sorted), None


_IMPLS = {"torch": _torch, "cpu": _cpu, "cuda": _cuda, "triton": _triton}


_OP = define("select_k(Tensor x, int k, bool largest, bool sorted, str backend) -> (Tensor, Tensor)",
             _select_k_op, _select_k_fake)
