"""Ragged (CSR) scoring and ranking ops: KiRAG's aligner step and its document ranking.

- :func:`segment_topk_scores`: B queries, each with its own ragged list of candidates (rows
  ``cand_ptr[b] .. cand_ptr[b+1]`` of a candidate matrix, or of an index into an embedding
  table); inner products and the top-n per query in one call.
- :func:`segment_max_rank`: per query, item scores reduced to groups by max (triple ->
  passage) and the top-k groups.

Every backend implements the order stated in rasfast/reference/segment.py, so all return
identical ids: (score desc, candidate position asc) and (group score desc, group id asc).
Padding is id -1 / score -inf. Embeddings may be float32, float16 or bfloat16; scores are
accumulated in float32.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch

from .. import dispatch as _bk
from .._arrays import (device_guard, DTYPE_CODES, as_tensor, cpu_buffer, cpu_out, cuda_stream, device_ptr,
                       kind_of, to_kind)
from .._validate import (check_choice, check_dim, check_finite, check_float, check_int, check_int_arg,
                         check_rank, check_same_device)
from ..reference import segment as _ref
from .._threads import follows_width_rule
from ._deferred import VALIDATE, Deferred, check_ids, check_ptr, is_host
from ._library import define, native_call, traced

# The CUDA selection keeps the running top-n of a query in shared memory.
CUDA_MAX_N = 2048
# validate= (VALIDATE, ops/_deferred.py): "none" skips the CUDA path's read of its kernels'
# error flag (no host sync)


# ----------------------------------------------------------------------------- validation
def _ptr_shape(x, name: str) -> torch.Tensor:
    p = as_tensor(x, name)
    check_int(p, name)
    check_rank(p, name, 1, "[B + 1]")
    if p.shape[0] == 0:  # not len(p): a traced size would be fixed to its example value
        raise ValueError(f"{name}: expected B + 1 >= 1 entries, got 0")
    return p


def _ptr(x, name: str, total: int, total_what: str) -> torch.Tensor:
    """Checked CSR offsets, int64 (read at once: the non-CUDA paths)."""
    p = _ptr_shape(x, name)
    deferred = Deferred()
    out = check_ptr(x if isinstance(x, np.ndarray) else p, name, total, total_what, p.device,
                    deferred)
    deferred.raise_now()
    return out.contiguous()


def _error(code: int, where: int) -> ValueError:
    return ValueError(_ERRORS[code].format(where=where))


# Messages for the error codes the compiled kernels report (csrc/segment/*: same codes).
_ERRORS = {
    1: "cand_emb: a candidate's score is not finite (its row contains NaN/inf, or the inner "
       "product overflows float32; candidate {where})",
}


# ----------------------------------------------------------------------------- public ops
@follows_width_rule
def segment_topk_scores(q_emb, cand_emb, cand_ptr, n: int, cand_ids=None,
                        backend: str = "auto", validate: str = "auto") -> Tuple[object, object]:
    """Per query, the top-n of its own ragged candidate list by inner product.

    Args:
        q_emb: [B, D] query embeddings (float32/float16/bfloat16; used in float32).
        cand_emb: [M, D] candidate embeddings, query b's candidates being rows
            ``cand_ptr[b] .. cand_ptr[b+1]``; or, with ``cand_ids``, an embedding table
            [T, D] that the candidates index. float32/float16/bfloat16.
        cand_ptr: int32/int64 [B + 1], non-decreasing from 0 to M (CSR offsets).
        n: results per query, n >= 1.
        cand_ids: optional int32/int64 [M] rows of the table ``cand_emb`` (each in [0, T));
            duplicates are scored as separate candidates.
        backend: "auto" | "cpu" | "cuda" | "triton" | "torch". cuda: n <= 2048.
        validate: "auto" (= "full"): every value is checked (on cuda inside the kernels,
            read with their error flag: one host synchronisation). "none": backend cuda
            does not read the flag, so the call has no host synchronisation and can be
            captured in a CUDA graph; bad input then gives an unspecified result, never an
            out-of-bounds access (the kernels clamp offsets and skip bad ids). Other
            backends check as under "auto" (their checks need no device read).

    Returns:
        (ids[B, n] int64, scores[B, n] float32), q_emb's kind. ``ids`` are candidate
        positions j in [0, M) (index into ``cand_ids`` / rows of ``cand_emb``), sorted by
        (score desc, j asc); a query with fewer than n candidates is padded with -1 / -inf.

    Raises:
        ValueError when a scored candidate's score is not finite (NaN/inf in its row).
    """
    kind = kind_of(q_emb)
    q, c, ids, ptr = _topk_args(q_emb, cand_emb, cand_ptr, n, cand_ids)
    n = check_int_arg(n, "n", 1)
    validate = check_choice(validate, "validate", VALIDATE)
    if traced(q, c, ptr, ids) or native_call("segment_topk_scores", backend, q, c, ptr, ids):
        out = _TOPK_OP(q, c, ptr, n, ids, backend, validate)
    else:  # numpy index arrays go on as they are: checked on the host (no device read)
        out = _segment_topk_scores(q, c, cand_ptr if isinstance(cand_ptr, np.ndarray) else ptr, n,
                                   None if cand_ids is None else
                                   cand_ids if isinstance(cand_ids, np.ndarray) else ids, backend,
                                   validate)
    return tuple(to_kind(t, kind) for t in out)


def _topk_args(q_emb, cand_emb, cand_ptr, n, cand_ids):
    """The shape, dtype and device checks of segment_topk_scores: tensors (q, c, ids, ptr)."""
    q = as_tensor(q_emb, "q_emb")
    check_float(q, "q_emb")
    check_rank(q, "q_emb", 2, "[B, D]")
    c = as_tensor(cand_emb, "cand_emb")
    check_float(c, "cand_emb")
    check_rank(c, "cand_emb", 2, "[M, D]" if cand_ids is None else "[T, D]")
    check_dim(c, "cand_emb", 1, q.shape[1], "D (q_emb.shape[1])")
    n = check_int_arg(n, "n", 1)
    dev = check_same_device(q_emb=q, cand_emb=c)
    if cand_ids is not None:
        ids = as_tensor(cand_ids, "cand_ids")
        check_int(ids, "cand_ids")
        check_rank(ids, "cand_ids", 1, "[M]")
        check_same_device(q_emb=q, cand_ids=ids)
        M = len(ids)
    else:
        M = c.shape[0]
    ptr = _ptr_shape(cand_ptr, "cand_ptr")
    check_dim(ptr, "cand_ptr", 0, q.shape[0] + 1, "B + 1 (q_emb.shape[0] + 1)")
    return q, c, (ids if cand_ids is not None else None), ptr


def _segment_topk_scores(q, c, cand_ptr, n, cand_ids, backend, validate="auto"):
    """The kernel of ``torch.ops.rasfast.segment_topk_scores`` (and of the eager op): the
    backend for the device, the value checks (on cuda, inside the kernels, read once with
    their error flag), the kernels. ``cand_ptr``/``cand_ids``: tensors, or numpy arrays
    (checked on the host)."""
    dev = q.device
    M = len(cand_ids) if cand_ids is not None else c.shape[0]
    ptr = as_tensor(cand_ptr, "cand_ptr")
    be = _bk.resolve(backend, dev, "segment_topk_scores")
    if be == "cuda" and n > CUDA_MAX_N:
        raise ValueError(f"n: backend 'cuda' supports n <= {CUDA_MAX_N}, got {n}; use "
                         "backend='triton' or 'torch'")
    if be == "cuda":  # the kernels check the values (module docstring of csrc/segment/*.cu)
        return _topk_cuda(q, c, cand_ptr if isinstance(cand_ptr, np.ndarray) else ptr, n, cand_ids, M,
                          read_flag=validate != "none")
    deferred = Deferred()
    check_finite(q, "q_emb")
    ids = None if cand_ids is None else _topk_ids(cand_ids, c.shape[0], dev, deferred)
    ptr = check_ptr(cand_ptr if isinstance(cand_ptr, np.ndarray) else ptr, "cand_ptr", M,
                    "M, the number of candidates", dev, deferred).contiguous()
    deferred.raise_now()
    return _TOPK[be](q.float().contiguous(), c.contiguous(), ptr, n, ids)


def _topk_ids(cand_ids, T, dev, deferred):
    return check_ids(cand_ids, "cand_ids", 0, T, dev, deferred,
                     lambda lo, hi: f"cand_ids: must be in [0, T = {T}) (rows of cand_emb), "
                                    f"got {lo} .. {hi}").contiguous()


def _topk_checks(q, T, cand_ptr, cand_ids, M):
    """Every value check of segment_topk_scores, in order, read at once (raises the first
    failing one): the CUDA path runs them only after its kernels flagged an input."""
    check_finite(q, "q_emb")
    deferred = Deferred()
    if cand_ids is not None:
        _topk_ids(cand_ids, T, q.device, deferred)
    check_ptr(cand_ptr, "cand_ptr", M, "M, the number of candidates", q.device, deferred)
    deferred.raise_now()


@follows_width_rule
def segment_max_rank(item_scores, item_to_group, ptr, k: int,
                     backend: str = "auto", validate: str = "auto") -> Tuple[object, object]:
    """Per query, reduce item scores to groups by max and return the top-k groups.

    KiRAG's document ranking (every passage scores the best of its triples) and GEAR's
    triples -> passages step.

    Args:
        item_scores: float [M] (float32/float16/bfloat16); NaN is rejected, -inf items are
            ignored (a group whose items are all -inf is not returned).
        item_to_group: int32/int64 [M] group id of each item, in [0, 2^31).
        ptr: int32/int64 [B + 1] CSR offsets of each query's items (0 .. M).
        k: groups per query, k >= 1.
        backend: "auto" | "cpu" | "cuda" | "triton" | "torch". cuda: k <= 2048.
        validate: "auto" | "full" | "none", as in :func:`segment_topk_scores`.

    Returns:
        (group_ids[B, k] int64, group_scores[B, k] float32) by (score desc, group id asc),
        padded with -1 / -inf; item_scores' kind.
    """
    kind = kind_of(item_scores)
    s, g, p = _rank_args(item_scores, item_to_group, ptr)
    k = check_int_arg(k, "k", 1)
    validate = check_choice(validate, "validate", VALIDATE)
    if traced(s, g, p) or native_call("segment_max_rank", backend, s, g, p):
        out = _RANK_OP(s, g, p, k, backend, validate)
    else:  # numpy index arrays go on as they are: checked on the host (no device read)
        out = _segment_max_rank(s, item_to_group if isinstance(item_to_group, np.ndarray) else g,
                                ptr if isinstance(ptr, np.ndarray) else p, k, backend, validate)
    return tuple(to_kind(t, kind) for t in out)


def _rank_args(item_scores, item_to_group, ptr):
    """The shape, dtype and device checks of segment_max_rank: tensors (s, g, p)."""
    s = as_tensor(item_scores, "item_scores")
    check_float(s, "item_scores")
    check_rank(s, "item_scores", 1, "[M]")
    g = as_tensor(item_to_group, "item_to_group")
    check_int(g, "item_to_group")
    check_rank(g, "item_to_group", 1, "[M]")
    check_dim(g, "item_to_group", 0, len(s), "M (len(item_scores))")
    check_same_device(item_scores=s, item_to_group=g)
    p = _ptr_shape(ptr, "ptr")
    return s, g, p


def _segment_max_rank(s, item_to_group, ptr, k, backend, validate="auto"):
    """The kernel of ``torch.ops.rasfast.segment_max_rank`` (and of the eager op), as
    :func:`_segment_topk_scores`."""
    dev = s.device
    p = as_tensor(ptr, "ptr")
    be = _bk.resolve(backend, dev, "segment_max_rank")
    if be == "cuda" and k > CUDA_MAX_N:
        raise ValueError(f"k: backend 'cuda' supports k <= {CUDA_MAX_N}, got {k}; use "
                         "backend='triton' or 'torch'")
    if be == "cuda":  # the kernel checks the values (as segment_topk_scores)
        return _rank_cuda(s, item_to_group, ptr if isinstance(ptr, np.ndarray) else p, k,
                          read_flag=validate != "none")
    deferred = Deferred()
    check_finite(s, "item_scores", allow_inf=True)
    g = _rank_groups(item_to_group, dev, deferred)
    p = check_ptr(ptr if isinstance(ptr, np.ndarray) else p, "ptr", len(s),
                  "M, the number of items", dev, deferred).contiguous()
    deferred.raise_now()
    return _RANK[be](s.float().contiguous(), g, p, k)


def _rank_groups(item_to_group, dev, deferred):
    return check_ids(item_to_group, "item_to_group", 0, 2 ** 31, dev, deferred,
                     lambda lo, hi: f"item_to_group: group ids must be in [0, 2^31), got "
                                    f"{lo} .. {hi}").contiguous()


def _rank_checks(s, item_to_group, ptr):
    """Every value check of segment_max_rank, in order (as :func:`_topk_checks`)."""
    check_finite(s, "item_scores", allow_inf=True)
    deferred = Deferred()
    _rank_groups(item_to_group, s.device, deferred)
    check_ptr(ptr, "ptr", len(s), "M, the number of items", s.device, deferred)
    deferred.raise_now()


# ----------------------------------------------------------------------------- torch
def _topk_torch(q, c, ptr, n, ids):
    scores = _ref.candidate_scores(q, c, ptr, ids)
    bad = ~torch.isfinite(scores)
    if bool(bad.any()):
        raise _error(1, int(bad.nonzero()[0, 0]))
    return _ref.segment_topk_from_scores(scores, ptr, n)


def _rank_torch(s, g, ptr, k):
    return _ref.segment_max_rank(s, g, ptr, k)


# ----------------------------------------------------------------------------- cpu
def _outputs(B, n, dev):
    return (torch.empty((B, n), dtype=torch.int64, device=dev),
            torch.empty((B, n), dtype=torch.float32, device=dev))


def _topk_cpu(q, c, ptr, n, ids):
    mod = _bk.cpu_module()
    buf, code = cpu_buffer(c)
    out_i, out_s = _outputs(q.shape[0], n, q.device)
    empty = torch.empty(0, dtype=torch.int64)
    err = mod.segment_topk_scores(q.numpy(), buf, code, (ids if ids is not None else empty).numpy(),
                                  ids is not None, ptr.numpy(), n, cpu_out(out_i), cpu_out(out_s))
    if err >= 0:
        raise _error(1, err)
    return out_i, out_s


def _rank_cpu(s, g, ptr, k):
    out_i, out_s = _outputs(len(ptr) - 1, k, s.device)
    _bk.cpu_module().segment_max_rank(s.numpy(), g.numpy(), ptr.numpy(), k, cpu_out(out_i),
                                      cpu_out(out_s))
    return out_i, out_s


# ----------------------------------------------------------------------------- cuda
# The kernels check every value themselves and lower one int64 flag (csrc/segment/
# segment_cuda.h): below _SCORE_ERROR, an input failed a check (the host then runs the
# checks to name it); _SCORE_ERROR + j, candidate j's score is not finite. Host arrays
# (numpy, or CPU tensors for a GPU op) are checked on the host before the launch.
_NO_ERROR, _SCORE_ERROR = 2 ** 62, 2 ** 40


def _check_cuda_segments(M: int, name: str, what: str):
    # the kernels keep a position inside a segment in 32 bits of a sort key
    if M >= 2 ** 32:
        raise ValueError(f"{name}: backend 'cuda' supports M < 2^32 {what}, got {M}")


def _index_on_device(x, dev, host_check):
    """An index array for the kernels: a host array checked now (``host_check``) and copied;
    a device array as it is (the kernel checks it), int64 and contiguous."""
    if is_host(x, dev):
        return host_check(x).contiguous()
    return torch.as_tensor(x).long().contiguous()


def _vec_ok(D: int, *ts) -> bool:
    """Rows read in 16-byte vectors: every base 16-byte aligned, every row a whole number."""
    return all(t.data_ptr() % 16 == 0 and (D * t.element_size()) % 16 == 0 for t in ts)


def _topk_cuda(q, c, cand_ptr, n, cand_ids, M, read_flag=True):
    mod = _bk.cuda_module()
    dev = q.device
    B, T = q.shape[0], c.shape[0]
    _check_cuda_segments(M, "cand_ptr", "candidates")
    nothing = Deferred()  # host arrays raise at once; nothing is deferred
    ids = None if cand_ids is None else _index_on_device(
        cand_ids, dev, lambda x: _topk_ids(x, T, dev, nothing))
    ptr = _index_on_device(cand_ptr, dev, lambda x: check_ptr(
        x, "cand_ptr", M, "M, the number of candidates", dev, nothing))
    qf, c = q.float().contiguous(), c.contiguous()
    out_i, out_s = _outputs(B, n, dev)
    scratch = torch.empty(max(M, 1), dtype=torch.float32, device=dev)
    err = torch.full((1,), _NO_ERROR, dtype=torch.int64, device=dev)
    with device_guard(dev):
        mod.segment_topk_scores(device_ptr(qf), device_ptr(c), DTYPE_CODES[c.dtype], c.shape[1], T,
                                device_ptr(ids) if ids is not None else 0, device_ptr(ptr), B, M, n,
                                _vec_ok(c.shape[1], qf, c), device_ptr(scratch), device_ptr(out_i),
                                device_ptr(out_s), device_ptr(err), cuda_stream(dev))
    if not read_flag:  # validate="none": no host sync
        return out_i, out_s
    flag = int(err.item())  # the one host sync
    if flag < _SCORE_ERROR:
        _topk_checks(q, T, cand_ptr, cand_ids, M)
        raise RuntimeError("segment_topk_scores: the CUDA kernel flagged an input that the "
                           "checks accept (a bug; please report it)")
    if flag < _NO_ERROR:
        raise _error(1, flag - _SCORE_ERROR)
    return out_i, out_s


def _rank_cuda(s, item_to_group, ptr, k, read_flag=True):
    mod = _bk.cuda_module()
    dev = s.device
    M = len(s)
    _check_cuda_segments(M, "ptr", "items")
    nothing = Deferred()
    g = _index_on_device(item_to_group, dev, lambda x: _rank_groups(x, dev, nothing))
    p = _index_on_device(ptr, dev, lambda x: check_ptr(x, "ptr", M, "M, the number of items", dev,
                                                       nothing))
    B = len(p) - 1
    sf = s.float().contiguous()
    out_i, out_s = _outputs(B, k, dev)
    slot_keys = torch.empty(max(2 * M, 1), dtype=torch.int64, device=dev)  # the kernel fills them
    slot_vals = torch.empty(max(2 * M, 1), dtype=torch.int32, device=dev)
    err = torch.full((1,), _NO_ERROR, dtype=torch.int64, device=dev)
    with device_guard(dev):
        mod.segment_max_rank(device_ptr(sf), device_ptr(g), device_ptr(p), B, M, k,
                             device_ptr(slot_keys), device_ptr(slot_vals), device_ptr(out_i),
                             device_ptr(out_s), device_ptr(err), cuda_stream(dev))
    if read_flag and int(err.item()) < _NO_ERROR:  # the one host sync (none: validate="none")
        _rank_checks(s, item_to_group, ptr)
        raise RuntimeError("segment_max_rank: the CUDA kernel flagged an input that the checks "
                           "accept (a bug; please report it)")
    return out_i, out_s


# ----------------------------------------------------------------------------- triton
def _topk_triton(q, c, ptr, n, ids):
    scores = _bk.triton_kernels().segment.candidate_scores(q, c, ptr, ids)
    bad = ~torch.isfinite(scores)
    if bool(bad.any()):
        raise _error(1, int(bad.nonzero()[0, 0]))
    return _bk.triton_kernels().segment.segment_topk_from_scores(scores, ptr, n)


def _rank_triton(s, g, ptr, k):
    return _bk.triton_kernels().segment.segment_max_rank(s, g, ptr, k)


_TOPK = {"torch": _topk_torch, "cpu": _topk_cpu, "cuda": _topk_cuda, "triton": _topk_triton}
_RANK = {"torch": _rank_torch, "cpu": _rank_cpu, "cuda": _rank_cuda, "triton": _rank_triton}


# ----------------------------------------------------------------------------- operators
# torch.ops.rasfast.<name> (rasfast/ops/_library.py): the registered kernels repeat the
# shape checks for direct callers, then run the kernels above.
def _topk_op(q_emb, cand_emb, cand_ptr, n, cand_ids, backend, validate="auto"):
    q, c, ids, ptr = _topk_args(q_emb, cand_emb, cand_ptr, n, cand_ids)
    return _segment_topk_scores(q, c, ptr, check_int_arg(n, "n", 1), ids, backend,
                                check_choice(validate, "validate", VALIDATE))


def _rank_op(item_scores, item_to_group, ptr, k, backend, validate="auto"):
    s, g, p = _rank_args(item_scores, item_to_group, ptr)
    return _segment_max_rank(s, g, p, check_int_arg(k, "k", 1), backend,
                             check_choice(validate, "validate", VALIDATE))


def _fake_outputs(B, n, like):
    return (like.new_empty((B, n), dtype=torch.int64), like.new_empty((B, n), dtype=torch.float32))


_TOPK_OP = define("segment_topk_scores(Tensor q_emb, Tensor cand_emb, Tensor cand_ptr, int n, "
                  "Tensor? cand_ids, str backend, str validate=\"auto\") -> (Tensor, Tensor)", _topk_op,
                  lambda q_emb, cand_emb, cand_ptr, n, cand_ids, backend, validate="auto":
                      _fake_outputs(q_emb.shape[0], n, q_emb))
_RANK_OP = define("segment_max_rank(Tensor item_scores, Tensor item_to_group, Tensor ptr, int k, "
                  "str backend, str validate=\"auto\") -> (Tensor, Tensor)", _rank_op,
                  lambda item_scores, item_to_group, ptr, k, backend, validate="auto":
                      _fake_outputs(ptr.shape[0] - 1, k, item_scores))
