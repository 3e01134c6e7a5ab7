"""The GEMM path of the theme ops on CUDA: distances and dense scores as matrix products on
tensor cores (cuBLAS through torch), the K-th-distance cut and the final top k by select_k.

Why (docs/gpu.md, "Theme ops"): the fused kernel's PPD scan is compute-bound on CUDA cores
(2*B*T FLOPs per corpus row: at B = 64 it reaches 28% of fp32 and no tensor core), and its
scoring gathers one corpus row per (query, scope row): B*K*D*s bytes, 24.6 GB at the issue's
shape (N = 5M, B = 64, K = 250k, D = 768, fp16) where one streaming pass over the corpus
embeddings reads 7.7 GB. Here:

1. theme values [B, N] float32 = one GEMM of the queries with the corpus PPD (L2 by the norm
   expansion |q|^2 + |c|^2 - 2 q.c). The float32 queries are split into parts of the corpus's
   16-bit dtype whose sum is the query to ~float32 precision (float16: hi + lo; bfloat16:
   hi + mid + lo), so the products are near-float32 while the corpus stays in its storage
   dtype and the GEMM runs on tensor cores with float32 accumulation. The corpus is processed
   in row chunks so the parts' products stay small (in L2) before they are summed.
2. scope = select_k(theme, K, unsorted): exactly min(K, N) rows, ties at the K-th value by
   lower id (select_k's contract), no host synchronisation.
3. w = 0 (the default): the scope as a [B, N] mask (one scatter of its ids); dense scores
   from the same split GEMM with the corpus embeddings, -inf outside the scope (in the
   GEMM's epilogue on a GPU); the top k of each [B, N] row by select_k(largest, sorted),
   whose positions are the corpus ids (its tie order by position is the contract's order
   by id). w > 0: the dense scores gathered at the scope ids sorted ascending, then
4. the top k of (1 - w) * dense + w * theme by select_k(largest, sorted).

Why the mask (docs/gpu.md, "Theme ops"): at the issue's shape (B = 64, K = 250k, N = 5M) the
sort of the [B, K] ids, the gathers and the select over them took ~3.2 of the call's 13.3 ms
on the H100; the mask costs a B*N-byte fill and scatter, one byte a score in the epilogue,
and a select_k over [B, N] at small k reads each row twice (its radix passes; measured 11.9 ms
for the whole call by mask against 13.0 by sort on the H100, sixth GPU session).

The distances differ from the direct (q - c)^2 sum of the reference by float32 rounding
only, which the ops' tolerance contract allows (rasfast.reference.theme_check). Whether a
call takes this path or the fused kernel is :func:`plan`: measured on the H100, checked by
the GPU roofline run.
"""
from __future__ import annotations

import weakref
from typing import List, Optional, Tuple

import torch

from .. import _env

_HALF = (torch.float16, torch.bfloat16)
# bytes of one part-product chunk [P * B, rows] float32 kept for the sum: about L2-sized
_CHUNK_BYTES = 32 << 20
_MIN_CHUNK_ROWS = 1 << 15
# the corpus's |c|^2 per row, kept for the last few corpus tensors (by identity and version)
_NORMS: "dict[int, tuple]" = {}
_NORMS_MAX = 4


PATHS = ("kernel", "gemm", "gemm+gather")


def forced_path() -> Optional[str]:
    """RASFAST_THEME_PATH=kernel|gemm|gemm+gather forces a path (tests, the roofline run)."""
    v = _env.get("RASFAST_THEME_PATH", "")
    return v if v in PATHS else None


def plan(B: int, N: int, K: int, w: float = 0.0, op: str = "theme_scoped_search") -> str:
    """The path of a cuda theme call:

    - "kernel": the fused CUDA kernel (csrc/theme): scan, cut and gathered scoring;
    - "gemm": the scope from the GEMM path, dense scores as one streaming GEMM over the
      corpus embeddings, gathered at the scope;
    - "gemm+gather": the scope from the GEMM path, dense scores of the scope rows only, by
      the CUDA gather kernel (it cannot add the theme term: w = 0 only).

    Measured on the H100 at N = 5M, T = 298, D = 768, K = 250k, fp16 (benchmarks/results/
    gpu_run5, calls 1 and 2): the GEMM scope beat the kernel's scan at every B tried (2.5
    against 12.3 ms at B = 1, 18.8 against 24.8 at B = 64), so the scope always comes from
    the GEMM. Dense scores (whole op, ms, gemm / gemm+gather): B = 1 5.38 / 4.86, B = 4
    5.84 / 5.06, B = 16 7.59 / 8.75, B = 64 22.9 / 30.2; so gather while B*K < N / 2 (the
    crossing lies between B*K/N = 0.2 and 0.8). Those "gemm" times sorted the scope; with
    w = 0 it now masks instead (:func:`_search_masked`), which can only move the crossing
    down: benchmarks/gpu_theme.py times every path at B = 64, 16, 4 and 1 again.
    """
    forced = forced_path()
    if forced is not None:
        return forced
    if op == "theme_scope":
        return "gemm"
    return "gemm+gather" if (w == 0.0 and 2 * B * min(K, N) < N) else "gemm"


def _parts(q: torch.Tensor, dtype: torch.dtype) -> List[torch.Tensor]:
    """float32 q as parts in ``dtype`` whose sum is q to ~float32 precision (float16 keeps 11
    significant bits a part, bfloat16 8); float32: q itself."""
    if dtype not in _HALF:
        return [q]
    parts, rest = [], q
    for _ in range(2 if dtype == torch.float16 else 3):
        p = rest.to(dtype)
        parts.append(p)
        rest = rest - p.float()
    return parts


# How 16-bit products reach float32 on CUDA: "out_dtype" (torch.mm(..., out_dtype=float32),
# one tensor-core GEMM with a float32 result) where this torch has it, else "upcast" (the
# operands converted to float32 first: correct, slower). Set by the first call.
MM_MODE: Optional[str] = None


def _mm_f32(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """a @ c.T in float32: a 16-bit GEMM with float32 output on CUDA (tensor cores), else in
    float32 (a float32 corpus, or the CUDA emulator's CPU tensors)."""
    global MM_MODE
    if c.is_cuda and c.dtype in _HALF and MM_MODE != "upcast":
        try:
            out = torch.mm(a, c.t(), out_dtype=torch.float32)
            MM_MODE = "out_dtype"
            return out
        except (RuntimeError, TypeError, NotImplementedError):
            MM_MODE = "upcast"
    return torch.mm(a.float(), c.t().float())


def _triton_split_dot():
    """rasfast.kernels.theme.split_dot (one tensor-core kernel: the parts' products summed
    and the L2 terms added in registers, [B, N] written once) where Triton runs on the
    device, else None (the torch composition below). RASFAST_THEME_GEMM=torch|triton forces."""
    want = _env.get("RASFAST_THEME_GEMM", "")
    if want == "torch":
        return None
    try:
        from .. import dispatch
        return dispatch.triton_kernels().theme.split_dot
    except Exception:
        if want == "triton":
            raise
        return None


_ALIGN = 16  # elements of a row stride: Triton's divisibility specialisation sees 16
_PADDED: "dict[int, tuple]" = {}
# storages pad_rows made (their padding columns zeros while the version is the one kept)
_ZERO_TAIL: "dict[int, tuple]" = {}


def pad_rows(c: torch.Tensor) -> torch.Tensor:
    """c [N, X] as a view of storage whose rows are padded with zeros to a multiple of 16
    elements: the layout the GEMM path's kernel streams in whole 16-byte copies (Triton
    proves the alignment from a stride divisible by 16). Store a GPU corpus this way once
    (ThemeIndex.to does) and pass the view to the ops; an unpadded 16-bit corpus with an odd
    row length (T = 298) gets a padded copy cached beside it instead."""
    X = c.shape[1]
    width = -(-X // _ALIGN) * _ALIGN
    out = torch.zeros((c.shape[0], width), dtype=c.dtype, device=c.device)
    out[:, :X] = c
    if width != X:
        _ZERO_TAIL[id(out)] = (weakref.ref(out, lambda _, k=id(out): _ZERO_TAIL.pop(k, None)),
                               out._version)
    return out[:, :X]


def zero_tail(c: torch.Tensor) -> bool:
    """Whether the padding columns of c's rows are pad_rows' zeros (its storage, unwritten
    since): the kernel then reads them as they are instead of zeroing them in registers."""
    base = c._base if c._base is not None else c
    hit = _ZERO_TAIL.get(id(base))
    return hit is not None and hit[0]() is base and hit[1] == c._version


def _aligned(c: torch.Tensor) -> torch.Tensor:
    """c itself when its row stride is a multiple of 16, else its padded copy, kept (like the
    norms) while the corpus is unmodified: measured on the H100, the T = 298 theme corpus
    streamed at ~0.3 TB/s unpadded."""
    if c.stride(1) == 1 and c.stride(0) % _ALIGN == 0:
        return c
    return _cached(_PADDED, c, pad_rows)


def _fused_split(q: torch.Tensor, c: torch.Tensor, cn=None, drop=None, shift=None):
    """The Triton kernel's result for a 16-bit corpus on a GPU, or None. With ``cn`` the L2
    distance (less ``shift``), else the products. Two launches, shift aside: the queries'
    parts and norms (split_queries), then the product."""
    if not (c.is_cuda and c.dtype in _HALF):
        return None
    split_dot = _triton_split_dot()
    if split_dot is None:
        return None
    c = _aligned(c)
    from .. import dispatch
    kt = dispatch.triton_kernels().theme
    parts, qn = kt.split_queries(q.float().contiguous(), c.dtype, kt.loop_width(c, q.shape[1]))
    if cn is None:
        qn = None
    elif shift is not None:
        qn = qn - shift
    return split_dot(parts, c, cn, qn, drop, zero_tail=zero_tail(c))


def split_products(q: torch.Tensor, c: torch.Tensor,
                   drop: Optional[torch.Tensor] = None) -> torch.Tensor:
    """[B, N] float32 q . c for float32 q[B, X] and a corpus c[N, X] in its storage dtype;
    -inf where ``drop`` (bool [B, N], contiguous) is True."""
    fused = _fused_split(q, c, drop=drop)
    if fused is not None:
        return fused
    parts = _parts(q, c.dtype)
    B, N, P = q.shape[0], c.shape[0], len(parts)
    if P == 1:
        out = _mm_f32(q, c)
    else:
        a = torch.cat(parts)  # [P * B, X]
        out = torch.empty((B, N), dtype=torch.float32, device=q.device)
        step = max(_MIN_CHUNK_ROWS, _CHUNK_BYTES // (P * B * 4))
        for s in range(0, N, step):
            prod = _mm_f32(a, c[s:s + step]).view(P, B, -1)
            torch.sum(prod, dim=0, out=out[:, s:s + step])
    return out if drop is None else out.masked_fill_(drop, float("-inf"))


def _cached(cache: dict, c: torch.Tensor, make):
    """make(c), kept per corpus matrix while it is unmodified. A view is named by its base
    tensor (a search may slice a new view of the same rows each call), offset, shape and
    strides; the base's version counter, shared by all its views, invalidates it."""
    base = c._base if c._base is not None else c
    key = (id(base), c.storage_offset(), tuple(c.shape), tuple(c.stride()), c.dtype)
    hit = cache.get(key)
    if hit is not None and hit[0]() is base and hit[1] == c._version:
        return hit[2]
    value = make(c)
    if len(cache) >= _NORMS_MAX:
        cache.pop(next(iter(cache)))
    # the entry goes with the corpus (a padded copy must not outlive it)
    cache[key] = (weakref.ref(base, lambda _, k=key: cache.pop(k, None)), c._version, value)
    return value


def cached_tensors() -> tuple:
    """The tensors kept per corpus matrix (|c|^2 norms, padded copies). A CUDA graph captured
    over a search reads them by address, and the caches evict by count: a replay entry holds
    these references (rasfast.index.theme_replay) so an eviction cannot free its memory."""
    return tuple(v[2] for cache in (_NORMS, _PADDED) for v in list(cache.values()))


def _norms(c: torch.Tensor) -> torch.Tensor:
    n = torch.empty(c.shape[0], dtype=torch.float32, device=c.device)
    step = max(_MIN_CHUNK_ROWS, _CHUNK_BYTES // (4 * max(1, c.shape[1])))
    for s in range(0, c.shape[0], step):
        n[s:s + step] = c[s:s + step].float().square().sum(1)
    return n


def corpus_norms(c: torch.Tensor) -> torch.Tensor:
    """|c_i|^2 in float32, kept while the corpus is unmodified (:func:`_cached`)."""
    return _cached(_NORMS, c, _norms)


def theme_values(q: torch.Tensor, c: torch.Tensor, metric: str,
                 shift: Optional[torch.Tensor] = None) -> torch.Tensor:
    """[B, N] float32: squared L2 distance (smaller = nearer) or inner product (larger), less
    ``shift[b]`` per query when given (free in the L2 kernel's epilogue)."""
    if metric == "l2":
        fused = _fused_split(q, c, corpus_norms(c), shift=shift)  # |q|^2 in its first launch
        if fused is not None:
            return fused
    dots = split_products(q, c)
    if metric == "ip":
        return dots if shift is None else dots.sub_(shift[:, None])
    qn = q.square().sum(1)
    if shift is not None:
        qn = qn - shift
    return dots.mul_(-2.0).add_(corpus_norms(c)[None, :]).add_(qn[:, None])


_SAMPLE = 8192  # corpus rows sampled for the shift's quantile estimate


def shift_enabled() -> bool:
    """RASFAST_THEME_SHIFT=0 turns the quantile shift off (the roofline run compares both)."""
    return _env.get("RASFAST_THEME_SHIFT", "1") != "0"


def quantile_shift(q: torch.Tensor, c: torch.Tensor, K: int, metric: str) -> torch.Tensor:
    """[B] float32: each query's theme value at the K/N quantile of an even sample of corpus
    rows. Why: select_k's first radix digit is the value's sign, exponent and two mantissa
    bits, and theme distances of unit vectors fill a binade or two, so the bin that holds the
    K-th value holds a large part of each row and every later pass re-reads it. Subtracting
    a value near the K-th spreads the values around the cut over many exponents (and the
    subtraction is exact there: Sterbenz), so the later passes read few candidates. With the
    cut within a factor 2 of the shift the selected set is exactly the unshifted one; a far
    worse sample can only swap values within an ulp of the cut (the tolerance contract)."""
    N = c.shape[0]
    S = min(N, _SAMPLE)
    rows = torch.arange(S, device=c.device) * (N // S)
    cs = c[rows].float()
    dots = q @ cs.T
    j = max(1, min(S, round(K / N * S)))
    if metric == "ip":
        return -torch.kthvalue(-dots, j, dim=1).values
    d = q.square().sum(1, keepdim=True) + cs.square().sum(1)[None, :] - 2.0 * dots
    return torch.kthvalue(d, j, dim=1).values


def _select(x: torch.Tensor, k: int, largest: bool, sorted: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    from .select import _IMPLS  # the cuda select_k: no sync, ties by lower index
    idx, vals = _IMPLS["cuda"](x.contiguous(), k, largest, sorted)
    if vals is None:
        vals = torch.gather(x, 1, idx)
    return idx, vals


def scope(q, c, K: int, metric: str, sorted: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    """(ids[B, K], theme values[B, K]) of each query's K nearest rows, queries in groups
    that keep the [B, N] matrices bounded (:func:`_query_groups`); see :func:`_scope`."""
    return _by_query_groups(lambda q_: _scope(q_, c, K, metric, sorted), q.shape[0], c.shape[0], q)


# The fewest [B, N] values for which the quantile shift pays. Model, from the H100 at B = 64,
# N = 5M (benchmarks/results/gpu_run5): the shift took the scope's select from 6.79 to
# 2.81 ms, about 12 ps saved per value; what it costs at small sizes is its ~10 torch
# launches, some 30-50 us of host time. They break even near 4M values, so below that (a
# per-question call: B = 1, N = 20k) the select runs on the values as they are. Not yet
# timed at the crossing.
_SHIFT_MIN_VALUES = 1 << 22


def _scope(q, c, K: int, metric: str, sorted: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    """(ids[B, K], theme values[B, K]) of each query's K nearest rows. The unsorted scope
    (a set) is selected on values shifted by :func:`quantile_shift` when there are enough of
    them to pay for it (``_SHIFT_MIN_VALUES``); the sorted one is not (a shifted value far
    from the cut may round onto its neighbour and change the order)."""
    if (sorted or K >= c.shape[0] or not shift_enabled()
            or q.shape[0] * c.shape[0] < _SHIFT_MIN_VALUES):
        return _select(theme_values(q, c, metric), K, metric == "ip", sorted)
    m = quantile_shift(q, c, K, metric)
    idx, vals = _select(theme_values(q, c, metric, shift=m), K, metric == "ip", False)
    return idx, vals.add_(m[:, None])


def dense_select() -> str:
    """How the GEMM path picks the top k inside the scope when w = 0 (:func:`_search`):
    "mask" (default) or "sort" (the scope ids sorted, the scores gathered; what w > 0 uses).
    RASFAST_THEME_DENSE_SELECT=sort forces the latter (the roofline run times both)."""
    return "sort" if _env.get("RASFAST_THEME_DENSE_SELECT", "") == "sort" else "mask"


def _top_k_of(scores: torch.Tensor, ids: torch.Tensor, k: int):
    """Top k of each row of scores[B, M] by (score desc, position asc), mapped through
    ids[B, M]; padded with -1 / -inf past M. Positions ascend with id, so ties go by id."""
    m = min(k, scores.shape[1])
    pos, vals = _select(scores, m, True, True)
    return _padded(torch.gather(ids, 1, pos), vals, k)


def _padded(ids: torch.Tensor, vals: torch.Tensor, k: int):
    """ids/vals [B, m] padded with -1 / -inf to [B, k]."""
    B, m = ids.shape
    if m == k:
        return ids, vals
    pad_i = torch.full((B, k - m), -1, dtype=torch.int64, device=ids.device)
    pad_s = torch.full((B, k - m), float("-inf"), dtype=torch.float32, device=ids.device)
    return torch.cat([ids, pad_i], 1), torch.cat([vals, pad_s], 1)


# float32 [B, N] matrices a call keeps at once (theme values, dense scores, a select's
# buffers): queries go in groups so that they stay under this many bytes
_MATRIX_BYTES = 4 << 30


def _query_groups(B: int, N: int):
    """Row ranges of the queries, each group's [b, N] float32 matrices within _MATRIX_BYTES
    (3 of them live at once): a 50M-row corpus with 64 queries would need 38 GB unsplit."""
    step = max(1, _MATRIX_BYTES // (3 * 4 * max(1, N)))
    return [(s, min(B, s + step)) for s in range(0, B, step)]


def _by_query_groups(fn, B: int, N: int, *per_query):
    groups = _query_groups(B, N)
    if len(groups) == 1:
        return fn(*per_query)
    parts = [fn(*(t[a:b] for t in per_query)) for a, b in groups]
    return tuple(torch.cat(x) for x in zip(*parts))


def theme_scoped_search(q, qe, c, e, K: int, k: int, w: float, metric: str):
    """The fused op on the GEMM path (module docstring). q, qe float32; K <= N."""
    return _by_query_groups(lambda q_, qe_: _search(q_, qe_, c, e, K, k, w, metric),
                            q.shape[0], c.shape[0], q, qe)


def _search(q, qe, c, e, K: int, k: int, w: float, metric: str):
    if w == 0.0 and dense_select() == "mask":
        return _search_masked(q, qe, c, e, K, k, metric)
    ids, theme = _scope(q, c, K, metric, sorted=False)
    ids, order = torch.sort(ids, dim=1)  # by id: select_k's positional ties become id ties
    dense = torch.gather(split_products(qe, e), 1, ids)
    if w != 0.0:
        th = torch.gather(theme, 1, order)
        th = th if metric == "ip" else th.neg()
        dense = dense.mul_(1.0 - w).add_(th, alpha=w)
    return _top_k_of(dense, ids, k)


def _search_masked(q, qe, c, e, K: int, k: int, metric: str):
    """w = 0 without sorting the scope: dense scores over all N rows, -inf outside the
    scope, the top min(k, K) of each row by select_k (positions are ids: ties by id).
    Every in-scope score above -inf ranks above every out-of-scope row, so the result is
    the sorted path's; a scope row whose score is itself -inf (an inner product beyond
    float32's range) ties with the rows outside and is reported as padding (-1, -inf)."""
    B, N = q.shape[0], c.shape[0]
    drop = None
    if K < N:
        ids = _scope(q, c, K, metric, sorted=False)[0]
        drop = torch.ones((B, N), dtype=torch.bool, device=q.device).scatter_(1, ids, False)
    pos, vals = _select(split_products(qe, e, drop), min(k, K, N), True, True)
    if drop is not None:
        pos = pos.masked_fill_(torch.gather(drop, 1, pos), -1)
    return _padded(pos, vals, k)


def scoped_dense_search(qe, e, s, k: int):
    """Top k by inner product inside given scopes (-1 = padding) on the GEMM path."""
    return _by_query_groups(lambda qe_, s_: _dense(qe_, e, s_, k), qe.shape[0], e.shape[0], qe, s)


def _dense(qe, e, s, k: int):
    B, N = qe.shape[0], e.shape[0]
    if dense_select() == "mask" and N > 0:
        return _dense_masked(qe, e, s, k)
    ids = torch.sort(s, dim=1).values
    valid = ids >= 0
    dense = torch.gather(split_products(qe, e), 1, ids.clamp(min=0))
    dense = dense.masked_fill_(~valid, float("-inf"))
    out_ids, out_sc = _top_k_of(dense, ids, k)
    return out_ids.masked_fill_(out_sc == float("-inf"), -1), out_sc


def _dense_masked(qe, e, s, k: int):
    """:func:`_dense` without sorting the scopes (as :func:`_search_masked`): the scope ids
    scattered into a [B, N] mask, dense scores -inf outside it, the top min(k, N) by
    select_k, positions being ids. A padding entry (-1) is scattered as id 0, so column 0
    is set again from whether 0 is really in the row's scope. Results as the sorted path's:
    ids -1 wherever the score is -inf (padding, and a scope row whose score is -inf)."""
    B, N = qe.shape[0], e.shape[0]
    s = s.long()
    drop = torch.ones((B, N), dtype=torch.bool, device=qe.device)
    drop.scatter_(1, s.clamp(min=0), False)
    drop[:, 0] = ~(s == 0).any(1)
    pos, vals = _select(split_products(qe, e, drop), min(k, N), True, True)
    return _padded(pos.masked_fill_(vals == float("-inf"), -1), vals, k)
