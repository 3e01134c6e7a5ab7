"""Theme-PPD scoping and scoped dense retrieval (DESIGN.md section 3, kernel A).

RAS narrows the corpus before dense retrieval: the K corpus rows whose theme vector
("PPD") is nearest the query's form its scope, and the top-k documents by dense inner
product inside that scope are returned. Three ops:

- :func:`theme_scope`: the K nearest rows per query, sorted.
- :func:`scoped_dense_search`: top-k by inner product inside given scopes.
- :func:`theme_scoped_search`: the fused path; compiled backends never sort or
  materialise the scope (a per-query select finds the K-th distance -- on cpu, for large
  N, from a sample-bracketed candidate set collected during the distance pass -- then the
  corpus rows are streamed once in order and each in-scope row is scored for exactly the
  queries whose scope holds it).

Ordering and ties are the same in every backend: distance ascending (inner product
descending for ``metric="ip"``), then lower id; scores descending, then lower id. Storage
dtypes float32/float16/bfloat16 (corpus and queries independently); math in float32.
"""
from __future__ import annotations

import math
import numbers
from typing import Tuple

import torch

from .. import dispatch as _bk
from .._arrays import (device_guard, DTYPE_CODES, as_tensor, cpu_buffer, cpu_out, cuda_stream, device_ptr,
                       kind_of, to_kind)
from .._validate import (check_choice, check_dim, check_finite_together, check_float, check_int,
                         check_int_arg, check_rank, check_same_device)
from ..reference import theme as _ref
from .._threads import follows_width_rule
from ._library import define, native_call, traced
from . import theme_gemm

METRICS = ("l2", "ip")
# What a call checks of the data itself (shapes, dtypes and arguments are always checked):
VALIDATE = ("auto", "full", "queries", "none")


# ----------------------------------------------------------------------------- validation
def _matrix(x, name: str, layout: str) -> torch.Tensor:
    # Finiteness is checked by _check_data once the backend is known (all checks of a call
    # in one host read; the cpu kernels check the corpus during their own scan).
    t = as_tensor(x, name)
    check_float(t, name)
    check_rank(t, name, 2, layout)
    return t


def _corpus(x, name: str, layout: str) -> torch.Tensor:
    t = _matrix(x, name, layout)
    if t.shape[0] == 0:
        raise ValueError(f"{name}: the corpus must have at least one row, got shape {tuple(t.shape)}")
    if t.shape[1] == 0:
        raise ValueError(f"{name}: dim 1 must be >= 1, got shape {tuple(t.shape)}")
    return t


def _validate_mode(validate, backend: str, *corpora: torch.Tensor) -> str:
    """The data checks of a call (see the ``validate`` argument of the public ops): "auto"
    is "full" where the whole call stays on the host (backend "cpu", whose kernels check the
    corpus inside their own scan, or "torch" on CPU tensors) and "queries" elsewhere (a GPU
    backend or device tensors: no pass over the corpus per call)."""
    mode = check_choice(validate, "validate", VALIDATE)
    if mode != "auto":
        return mode
    host = backend == "cpu" or (backend == "torch" and all(c.device.type == "cpu" for c in corpora))
    return "full" if host else "queries"


def _check_data(backend: str, mode: str, queries: dict, corpora: dict, extra=()) -> list:
    """NaN/inf in the queries (modes "full" and "queries") or in a corpus matrix ("full") is
    a ValueError naming the array; every check of the call costs ONE host read together
    (check_finite_together), and none at all with mode "none". The cpu backend checks a
    corpus from inside its kernel whatever the mode (a non-finite row makes its distance or
    score non-finite, which the kernel checks for every row it reads), saving a full extra
    pass; rows of corpus_emb outside every scope are not read and so not checked there.
    Returns the values of ``extra`` (0-d tensors read with the flags)."""
    if mode == "none":
        return []
    tensors = dict(queries)
    if mode == "full" and backend != "cpu":
        tensors.update(corpora)  # one min/max reduction over each corpus matrix
    return check_finite_together(tensors, extra)


def _weight(w) -> float:
    if isinstance(w, bool) or not isinstance(w, numbers.Real):
        raise TypeError(f"theme_weight: expected a float, got {type(w).__name__}")
    w = float(w)
    if not math.isfinite(w) or w < 0.0 or w > 1.0:
        raise ValueError(f"theme_weight: must be a finite number in [0, 1], got {w}")
    return w


def _scope_ids(s, B: int) -> torch.Tensor:
    t = as_tensor(s, "scope_ids")
    check_int(t, "scope_ids")
    check_rank(t, "scope_ids", 2, "[B, K]")
    check_dim(t, "scope_ids", 0, B, "B (q_emb.shape[0])")
    return t.long().contiguous()


def _scope_stats(s: torch.Tensor) -> list:
    """0-d tensors (min id, max id, any duplicate, first row with one) of a non-empty
    scope_ids matrix, for _check_data to read with the query flags (no host read here)."""
    lo, hi = torch.aminmax(s)
    srt = torch.sort(s, dim=1)[0]
    rows = ((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)).any(dim=1)
    return [lo, hi, rows.any(), rows.to(torch.int32).argmax()]


def _check_scope_stats(stats: list, N: int) -> None:
    lo, hi, dup, row = stats
    if lo < -1 or hi >= N:
        raise ValueError(f"scope_ids: ids must be in [0, N) = [0, {N}) or -1 for padding, "
                         f"got values in [{lo}, {hi}]")
    if dup:
        raise ValueError(f"scope_ids: row {row} contains a duplicate id; each scope must list "
                         "a row at most once")


def _queries(q, name: str, B_layout: str, dim_name: str, dim: int) -> torch.Tensor:
    t = _matrix(q, name, B_layout)
    check_dim(t, name, 1, dim, dim_name)
    return t


# ----------------------------------------------------------------------------- public ops
@follows_width_rule
def theme_scope(q_ppd, corpus_ppd, K: int, metric: str = "l2", backend: str = "auto", *,
                validate: str = "auto"):
    """The K corpus rows nearest each query's theme vector.

    Args:
        q_ppd: [B, T] query theme vectors (float32/float16/bfloat16, numpy or torch).
        corpus_ppd: [N, T] corpus theme vectors, N >= 1 (any of the three dtypes).
        K: scope size, K >= 1; K >= N returns all N rows.
        metric: "l2" (squared Euclidean, nearest first) or "ip" (inner product, largest first).
        backend: "auto" | "cpu" | "cuda" | "triton" | "torch".
        validate: what is checked of the data itself (shapes, dtypes and arguments always
            are); NaN/inf found is a ValueError naming the array.
            "queries": the query matrices only, all in ONE host read -- the corpus is
            trusted, as faiss and torch trust theirs: a non-finite corpus value gives an
            unspecified result (which rows are in scope and how they rank), never an error
            or an out-of-bounds access. Validate a corpus once, where it is built or loaded
            (ThemeIndex does: at build/add, and once before its first search of a loaded
            index on a backend other than cpu).
            "full": the corpus matrices too -- on backend "cpu" inside the kernel's own
            scan (no extra pass, as under every mode there), elsewhere one reduction over
            each corpus matrix, read in the same one host read.
            "none": no data checks and no host synchronisation (the call can be captured in
            a CUDA graph); the caller vouches for the data.
            "auto" (default): "full" when the call stays on the host (backend "cpu", or
            "torch" on CPU tensors), else "queries" -- a GPU call never passes over the
            corpus to validate it.

    Returns:
        ids[B, min(K, N)] int64 sorted by (distance asc | ip desc, id asc), the kind of q_ppd.
    """
    kind = kind_of(q_ppd)
    c = _corpus(corpus_ppd, "corpus_ppd", "[N, T]")
    q = _queries(q_ppd, "q_ppd", "[B, T]", "T (corpus_ppd.shape[1])", c.shape[1])
    K = check_int_arg(K, "K", 1)
    metric = check_choice(metric, "metric", METRICS)
    check_same_device(q_ppd=q, corpus_ppd=c)
    validate = check_choice(validate, "validate", VALIDATE)
    if traced(q, c) or native_call("theme_scope", backend, q, c):
        return to_kind(_OPS["theme_scope"](q, c, K, metric, backend, validate), kind)
    return to_kind(_theme_scope(q, c, K, metric, backend, validate), kind)


def _theme_scope(q, c, K, metric, backend, validate):
    """The kernel of ``torch.ops.rasfast.theme_scope`` (and of the eager public op): the
    backend for the device, the data checks of ``validate``, the backend's kernel."""
    dev = q.device
    be = _bk.resolve(backend, dev, "theme_scope")
    _check_data(be, _validate_mode(validate, be, c), dict(q_ppd=q), dict(corpus_ppd=c))
    Kc = min(K, c.shape[0])
    if q.shape[0] == 0:
        return torch.empty((0, Kc), dtype=torch.int64, device=dev)
    return _SCOPE[be](q.float().contiguous(), _rows(c, be), Kc, metric)


@follows_width_rule
def scoped_dense_search(q_emb, corpus_emb, scope_ids, k: int, backend: str = "auto", *,
                        validate: str = "auto") -> Tuple[object, object]:
    """Top-k rows by inner product inside each query's scope.

    Args:
        q_emb: [B, D] query embeddings.
        corpus_emb: [N, D] corpus embeddings, N >= 1.
        scope_ids: [B, K] int32/int64 row ids per query, each in [0, N) and listed at most
            once per row; -1 entries are padding (ignored).
        k: results per query, k >= 1.
        backend: "auto" | "cpu" | "cuda" | "triton" | "torch".
        validate: what is checked of the data itself (shapes, dtypes and arguments always
            are); NaN/inf found is a ValueError naming the array.
            "queries": the query matrices and scope_ids (id range, duplicates) only, all in ONE host read -- the corpus is
            trusted, as faiss and torch trust theirs: a non-finite corpus value gives an
            unspecified result (which rows are in scope and how they rank), never an error
            or an out-of-bounds access. Validate a corpus once, where it is built or loaded
            (ThemeIndex does: at build/add, and once before its first search of a loaded
            index on a backend other than cpu).
            "full": the corpus matrices too -- on backend "cpu" inside the kernel's own
            scan (no extra pass, as under every mode there), elsewhere one reduction over
            each corpus matrix, read in the same one host read.
            "none": no data checks and no host synchronisation (the call can be captured in
            a CUDA graph); the caller vouches for the data (an id in scope_ids outside
            [-1, N) is then an out-of-bounds read, as a bad index is for torch on a GPU).
            "auto" (default): "full" when the call stays on the host (backend "cpu", or
            "torch" on CPU tensors), else "queries" -- a GPU call never passes over the
            corpus to validate it.

    Returns:
        (ids[B, k] int64, scores[B, k] float32) sorted by (score desc, id asc); when a scope
        has fewer than k ids the tail is padded with id -1 and score -inf.
    """
    kind = kind_of(q_emb)
    e = _corpus(corpus_emb, "corpus_emb", "[N, D]")
    q = _queries(q_emb, "q_emb", "[B, D]", "D (corpus_emb.shape[1])", e.shape[1])
    s = _scope_ids(scope_ids, q.shape[0])
    k = check_int_arg(k, "k", 1)
    check_same_device(q_emb=q, corpus_emb=e, scope_ids=s)
    validate = check_choice(validate, "validate", VALIDATE)
    if traced(q, e, s) or native_call("scoped_dense_search", backend, q, e, s):
        ids, sc = _OPS["scoped_dense_search"](q, e, s, k, backend, validate)
    else:
        ids, sc = _scoped_dense_search(q, e, s, k, backend, validate)
    return to_kind(ids, kind), to_kind(sc, kind)


def _scoped_dense_search(q, e, s, k, backend, validate):
    """The kernel of ``torch.ops.rasfast.scoped_dense_search`` (and of the eager op)."""
    dev = q.device
    be = _bk.resolve(backend, dev, "scoped_dense_search", cuda_limit=_cuda_top_k_limit(k))
    mode = _validate_mode(validate, be, e)
    stats = _scope_stats(s) if mode != "none" and s.numel() else []
    stats = _check_data(be, mode, dict(q_emb=q), dict(corpus_emb=e), stats)
    if stats:
        _check_scope_stats(stats, e.shape[0])
    if q.shape[0] == 0:
        ids, sc = _empty_result(k, dev)
    else:
        ids, sc = _DENSE[be](q.float().contiguous(), _rows(e, be), s, k)
    return ids, sc


@follows_width_rule
def theme_scoped_search(q_ppd, q_emb, corpus_ppd, corpus_emb, K: int, k: int,
                        theme_weight: float = 0.0, metric: str = "l2",
                        backend: str = "auto", *, validate: str = "auto") -> Tuple[object, object]:
    """Fused theme scoping + dense retrieval: top-k by score among each query's K nearest rows.

    The scope is exactly min(K, N) rows (ties at the K-th distance go to lower ids). The
    score is ``(1 - w) * dense + w * theme`` with ``dense = q_emb . corpus_emb`` and
    ``theme = -||q_ppd - corpus_ppd||^2`` (``metric="l2"``) or ``q_ppd . corpus_ppd``
    (``metric="ip"``); w = 0 gives the plain dense score. Compiled backends find the K-th
    distance per query by selection (radix, or on cpu a sample-bracketed candidate set)
    and never sort or materialise the scope.

    Args:
        q_ppd: [B, T] query theme vectors; corpus_ppd: [N, T] (N >= 1).
        q_emb: [B, D] query embeddings; corpus_emb: [N, D].
        K: scope size >= 1 (K >= N: no scoping). k: results per query >= 1.
        theme_weight: w in [0, 1].
        metric: "l2" or "ip".
        backend: "auto" | "cpu" | "cuda" | "triton" | "torch".
        validate: what is checked of the data itself (shapes, dtypes and arguments always
            are); NaN/inf found is a ValueError naming the array.
            "queries": the query matrices only, all in ONE host read -- the corpus is
            trusted, as faiss and torch trust theirs: a non-finite corpus value gives an
            unspecified result (which rows are in scope and how they rank), never an error
            or an out-of-bounds access. Validate a corpus once, where it is built or loaded
            (ThemeIndex does: at build/add, and once before its first search of a loaded
            index on a backend other than cpu).
            "full": the corpus matrices too -- on backend "cpu" inside the kernel's own
            scan (no extra pass, as under every mode there), elsewhere one reduction over
            each corpus matrix, read in the same one host read.
            "none": no data checks and no host synchronisation (the call can be captured in
            a CUDA graph); the caller vouches for the data.
            "auto" (default): "full" when the call stays on the host (backend "cpu", or
            "torch" on CPU tensors), else "queries" -- a GPU call never passes over the
            corpus to validate it.

    Returns:
        (ids[B, k] int64, scores[B, k] float32) sorted by (score desc, id asc), padded with
        -1 / -inf when fewer than k rows are in scope. Same kind as q_ppd.
    """
    kind = kind_of(q_ppd)
    c = _corpus(corpus_ppd, "corpus_ppd", "[N, T]")
    e = _corpus(corpus_emb, "corpus_emb", "[N, D]")
    check_dim(e, "corpus_emb", 0, c.shape[0], "N (corpus_ppd.shape[0])")
    q = _queries(q_ppd, "q_ppd", "[B, T]", "T (corpus_ppd.shape[1])", c.shape[1])
    qe = _queries(q_emb, "q_emb", "[B, D]", "D (corpus_emb.shape[1])", e.shape[1])
    check_dim(qe, "q_emb", 0, q.shape[0], "B (q_ppd.shape[0])")
    K = check_int_arg(K, "K", 1)
    k = check_int_arg(k, "k", 1)
    w = _weight(theme_weight)
    metric = check_choice(metric, "metric", METRICS)
    check_same_device(q_ppd=q, q_emb=qe, corpus_ppd=c, corpus_emb=e)
    validate = check_choice(validate, "validate", VALIDATE)
    if traced(q, qe, c, e) or native_call("theme_scoped_search", backend, q, qe, c, e):
        ids, sc = _OPS["theme_scoped_search"](q, qe, c, e, K, k, w, metric, backend, validate)
    else:
        ids, sc = _theme_scoped_search(q, qe, c, e, K, k, w, metric, backend, validate)
    return to_kind(ids, kind), to_kind(sc, kind)


def _theme_scoped_search(q, qe, c, e, K, k, w, metric, backend, validate):
    """The kernel of ``torch.ops.rasfast.theme_scoped_search`` (and of the eager op)."""
    dev = q.device
    be = _bk.resolve(backend, dev, "theme_scoped_search", cuda_limit=_cuda_top_k_limit(k))
    _check_data(be, _validate_mode(validate, be, c, e), dict(q_ppd=q, q_emb=qe),
                dict(corpus_ppd=c, corpus_emb=e))
    if q.shape[0] == 0:
        ids, sc = _empty_result(k, dev)
    else:
        ids, sc = _FUSED[be](q.float().contiguous(), qe.float().contiguous(), _rows(c, be),
                             _rows(e, be), min(K, c.shape[0]), k, w, metric)
    return ids, sc


def _rows(t: torch.Tensor, backend: str) -> torch.Tensor:
    """A corpus matrix for ``backend``: cuda and triton take row-padded views (unit column
    stride, the layout of rasfast.ops.theme_gemm.pad_rows, which ThemeIndex.to keeps on a
    GPU) as they are: cuda's GEMM path and the Triton kernels read rows by their stride (the
    CUDA kernels that need contiguous rows make them where they run); the Triton backend
    copied such a corpus to contiguous rows every call before the eighteenth session. Others
    get contiguous rows."""
    if backend in ("cuda", "triton") and t.stride(1) == 1 and t.stride(0) >= t.shape[1]:
        return t
    return t.contiguous()


def _empty_result(k, dev):
    return (torch.empty((0, k), dtype=torch.int64, device=dev),
            torch.empty((0, k), dtype=torch.float32, device=dev))


def _outputs(B, k, dev):
    return (torch.empty((B, k), dtype=torch.int64, device=dev),
            torch.empty((B, k), dtype=torch.float32, device=dev))


# ----------------------------------------------------------------------------- torch
def _scope_torch(q, c, K, metric):
    return _ref.theme_scope(q, c, K, metric)


def _dense_torch(q, e, s, k):
    return _ref.scoped_dense_search(q, e, s, k)


def _fused_torch(q, qe, c, e, K, k, w, metric):
    return _ref.theme_scoped_search(q, qe, c, e, K, k, w, metric)


# ----------------------------------------------------------------------------- cpu
def _scope_cpu(q, c, K, metric):
    cb, code = cpu_buffer(c)
    out = torch.empty((q.shape[0], K), dtype=torch.int64)
    _bk.cpu_module().theme_scope(q.numpy(), cb, code, K, metric == "ip", cpu_out(out))
    return out


def _dense_cpu(q, e, s, k):
    eb, code = cpu_buffer(e)
    ids, sc = _outputs(q.shape[0], k, q.device)
    _bk.cpu_module().theme_scoped_dense(q.numpy(), eb, code, s.numpy(), k, cpu_out(ids), cpu_out(sc))
    return ids, sc


def _fused_cpu(q, qe, c, e, K, k, w, metric):
    cb, ccode = cpu_buffer(c)
    eb, ecode = cpu_buffer(e)
    ids, sc = _outputs(q.shape[0], k, q.device)
    _bk.cpu_module().theme_scoped_search(q.numpy(), cb, ccode, qe.numpy(), eb, ecode, K, k, w,
                                         metric == "ip", cpu_out(ids), cpu_out(sc))
    return ids, sc


# ----------------------------------------------------------------------------- cuda
def _cuda_top_k_limit(k):
    """The CUDA top-k keeps per-warp lists in shared memory, so k is bounded there: the
    limit this call exceeds (auto then falls back to triton), or None."""
    kmax = _bk.cuda_attr("theme_max_k")
    if kmax is not None and k > kmax:
        return f"k: backend 'cuda' supports k <= {kmax}, got {k}"
    return None


def _scope_cuda(q, c, K, metric):
    if theme_gemm.plan(q.shape[0], c.shape[0], K, op="theme_scope") != "kernel":
        return theme_gemm.scope(q, c, K, metric, sorted=True)[0]
    c = c.contiguous()
    out = torch.empty((q.shape[0], K), dtype=torch.int64, device=q.device)
    with device_guard(q.device):
        _bk.cuda_module().theme_scope(device_ptr(q), device_ptr(c), DTYPE_CODES[c.dtype],
                                      q.shape[0], c.shape[0], c.shape[1], K, metric == "ip",
                                      device_ptr(out), cuda_stream(q.device))
    return out


def _dense_cuda(q, e, s, k):
    if theme_gemm.plan(q.shape[0], e.shape[0], s.shape[1], op="scoped_dense_search") == "gemm":
        return theme_gemm.scoped_dense_search(q, e, s, k)
    return _dense_cuda_kernel(q, e, s, k)


def _dense_cuda_kernel(q, e, s, k):
    e = e.contiguous()
    ids, sc = _outputs(q.shape[0], k, q.device)
    with device_guard(q.device):
        _bk.cuda_module().theme_scoped_dense(device_ptr(q), device_ptr(e), DTYPE_CODES[e.dtype],
                                             q.shape[0], e.shape[0], e.shape[1], device_ptr(s),
                                             s.shape[1], k, device_ptr(ids), device_ptr(sc),
                                             cuda_stream(q.device))
    return ids, sc


def _fused_cuda(q, qe, c, e, K, k, w, metric):
    path = theme_gemm.plan(q.shape[0], e.shape[0], K, w)
    if path == "gemm" or (path == "gemm+gather" and w != 0.0):
        return theme_gemm.theme_scoped_search(q, qe, c, e, K, k, w, metric)
    if path == "gemm+gather":  # the GEMM's scope, the gather kernel's dense scores
        return _dense_cuda_kernel(qe, e, theme_gemm.scope(q, c, K, metric, sorted=False)[0], k)
    c, e = c.contiguous(), e.contiguous()
    ids, sc = _outputs(q.shape[0], k, q.device)
    with device_guard(q.device):
        _bk.cuda_module().theme_scoped_search(
            device_ptr(q), device_ptr(c), DTYPE_CODES[c.dtype], device_ptr(qe), device_ptr(e),
            DTYPE_CODES[e.dtype], q.shape[0], c.shape[0], c.shape[1], e.shape[1], K, k, w,
            metric == "ip", device_ptr(ids), device_ptr(sc), cuda_stream(q.device))
    return ids, sc


# ----------------------------------------------------------------------------- triton
def _scope_triton(q, c, K, metric):
    return _bk.triton_kernels().theme.theme_scope(q, c, K, metric)


def _dense_triton(q, e, s, k):
    return _bk.triton_kernels().theme.scoped_dense_search(q, e, s, k)


def _fused_triton(q, qe, c, e, K, k, w, metric):
    return _bk.triton_kernels().theme.theme_scoped_search(q, qe, c, e, K, k, w, metric)


_SCOPE = {"torch": _scope_torch, "cpu": _scope_cpu, "cuda": _scope_cuda, "triton": _scope_triton}
_DENSE = {"torch": _dense_torch, "cpu": _dense_cpu, "cuda": _dense_cuda, "triton": _dense_triton}
_FUSED = {"torch": _fused_torch, "cpu": _fused_cpu, "cuda": _fused_cuda, "triton": _fused_triton}


# ----------------------------------------------------------------------------- validated callers
def fused_search_validated(q_ppd: torch.Tensor, q_emb: torch.Tensor, corpus_ppd: torch.Tensor,
                           corpus_emb: torch.Tensor, K: int, k: int, theme_weight: float,
                           metric: str, backend: str):
    """:func:`theme_scoped_search` with ``validate="none"`` and no argument checks either, for
    a caller that validated everything once at its own public entry point
    (``ThemeIndex.search``: queries checked there in one host read, corpus rows checked when
    the index was built, added to or first searched after a load, and by the cpu kernel as
    it reads them): no checks and no host syncs here. Tensors in, (ids, scores) tensors out; B >= 1."""
    be = _bk.resolve(backend, q_emb.device, "theme_scoped_search")
    return _FUSED[be](q_ppd.float().contiguous(), q_emb.float().contiguous(),
                      _rows(corpus_ppd, be), _rows(corpus_emb, be),
                      min(K, corpus_ppd.shape[0]), k, theme_weight, metric)


# ----------------------------------------------------------------------------- operators
# torch.ops.rasfast.<name> (rasfast/ops/_library.py). The registered kernels repeat the
# public ops' shape and argument checks (cheap, no data read) for direct callers of the
# operators, then run the kernels above.
def _scope_op(q_ppd, corpus_ppd, K, metric, backend, validate):
    c = _corpus(corpus_ppd, "corpus_ppd", "[N, T]")
    q = _queries(q_ppd, "q_ppd", "[B, T]", "T (corpus_ppd.shape[1])", c.shape[1])
    check_int_arg(K, "K", 1)
    check_choice(metric, "metric", METRICS)
    return _theme_scope(q, c, K, metric, backend, validate)


def _scope_fake(q_ppd, corpus_ppd, K, metric, backend, validate):
    return q_ppd.new_empty((q_ppd.shape[0], torch.sym_min(K, corpus_ppd.shape[0])), dtype=torch.int64)


def _dense_op(q_emb, corpus_emb, scope_ids, k, backend, validate):
    e = _corpus(corpus_emb, "corpus_emb", "[N, D]")
    q = _queries(q_emb, "q_emb", "[B, D]", "D (corpus_emb.shape[1])", e.shape[1])
    s = _scope_ids(scope_ids, q.shape[0])
    check_int_arg(k, "k", 1)
    return _scoped_dense_search(q, e, s, k, backend, validate)


def _fused_op(q_ppd, q_emb, corpus_ppd, corpus_emb, K, k, theme_weight, metric, backend, validate):
    c = _corpus(corpus_ppd, "corpus_ppd", "[N, T]")
    e = _corpus(corpus_emb, "corpus_emb", "[N, D]")
    check_dim(e, "corpus_emb", 0, c.shape[0], "N (corpus_ppd.shape[0])")
    q = _queries(q_ppd, "q_ppd", "[B, T]", "T (corpus_ppd.shape[1])", c.shape[1])
    qe = _queries(q_emb, "q_emb", "[B, D]", "D (corpus_emb.shape[1])", e.shape[1])
    check_dim(qe, "q_emb", 0, q.shape[0], "B (q_ppd.shape[0])")
    check_int_arg(K, "K", 1)
    check_int_arg(k, "k", 1)
    check_choice(metric, "metric", METRICS)
    return _theme_scoped_search(q, qe, c, e, K, k, _weight(theme_weight), metric, backend, validate)


def _topk_fake(q, k):
    b = q.shape[0]
    return q.new_empty((b, k), dtype=torch.int64), q.new_empty((b, k), dtype=torch.float32)


_OPS = {
    "theme_scope": define(
        "theme_scope(Tensor q_ppd, Tensor corpus_ppd, int K, str metric, str backend, "
        "str validate) -> Tensor", _scope_op, _scope_fake),
    "scoped_dense_search": define(
        "scoped_dense_search(Tensor q_emb, Tensor corpus_emb, Tensor scope_ids, int k, "
        "str backend, str validate) -> (Tensor, Tensor)", _dense_op,
        lambda q_emb, corpus_emb, scope_ids, k, backend, validate: _topk_fake(q_emb, k)),
    "theme_scoped_search": define(
        "theme_scoped_search(Tensor q_ppd, Tensor q_emb, Tensor corpus_ppd, Tensor corpus_emb, "
        "int K, int k, float theme_weight, str metric, str backend, str validate) "
        "-> (Tensor, Tensor)", _fused_op,
        lambda q_ppd, q_emb, corpus_ppd, corpus_emb, K, k, theme_weight, metric, backend, validate:
            _topk_fake(q_ppd, k)),
}
