"""Triton kernels for theme scoping (rasfast.ops.theme's ``triton`` backend).

- ``_keys_kernel``: one program per (query, block of corpus rows) computes the squared L2
  distance (direct (q-c)^2 sum) or inner product over T in float32 from any storage dtype
  and writes an ordered int64 key (smaller = nearer).
- ``_cut_kernel``: one program per query finds the K-th smallest key by a 3-pass radix
  select (11/11/10-bit digits, tl.histogram over the rows matching the prefix) and the id
  of the last threshold-equal row that is still in scope (ties by lower id). No sort.
- ``_score_kernel``: one program per (query, block of rows) scores only the in-scope rows
  (dense inner product, optionally fused with the theme term), -inf elsewhere.
- ``_gather_score_kernel``: inner products of given scope ids (scoped_dense_search).

The per-query top-k of the few best scores is finished in torch (topk + a tie-complete
candidate set ordered by (score desc, id asc)).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK_N = 64
_BLOCK_T = 32
_SEL_BLOCK = 256


@triton.jit
def _to_key(v):
    # order-preserving float32 -> non-negative int64 (-0.0 == +0.0)
    v = tl.where(v == 0.0, 0.0, v)
    u = v.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    return tl.where(u >= 0x80000000, 0xFFFFFFFF - u, u + 0x80000000)


@triton.jit
def _keys_kernel(q_ptr, c_ptr, keys_ptr, N, T, IP: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr):
    # queries on axis 1, row blocks on axis 0 (whose limit is 2^31-1); int64 offsets
    b = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for t0 in range(0, T, BLOCK_T):
        ts = t0 + tl.arange(0, BLOCK_T)
        tmask = ts < T
        q = tl.load(q_ptr + b * T + ts, mask=tmask, other=0.0).to(tl.float32)
        c = tl.load(c_ptr + rows[:, None].to(tl.int64) * T + ts[None, :],
                    mask=rmask[:, None] & tmask[None, :], other=0.0).to(tl.float32)
        if IP:
            acc += tl.sum(c * q[None, :], axis=1)
        else:
            d = c - q[None, :]
            acc += tl.sum(d * d, axis=1)
    if IP:
        acc = -acc
    tl.store(keys_ptr + b * N + rows, _to_key(acc), mask=rmask)


@triton.jit
def _cut_kernel(keys_ptr, N, K, cut_key_ptr, last_eq_ptr, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    base = keys_ptr + b.to(tl.int64) * N
    prefix = tl.zeros([], dtype=tl.int64)
    pmask = tl.zeros([], dtype=tl.int64)
    want = tl.zeros([], dtype=tl.int64) + K  # (K may arrive as a specialised constant)
    bins = tl.arange(0, 2048)
    for p in tl.static_range(3):
        shift: tl.constexpr = 21 - 11 * p if p < 2 else 0
        nbits: tl.constexpr = 11 if p < 2 else 10
        hist = tl.zeros([2048], dtype=tl.int32)
        for s in range(0, N, BLOCK):
            offs = s + tl.arange(0, BLOCK)
            m = offs < N
            k = tl.load(base + offs, mask=m, other=0)
            match = m & ((k & pmask) == prefix)
            digit = ((k >> shift) & ((1 << nbits) - 1)).to(tl.int32)
            hist += tl.histogram(digit, 2048, mask=match)
        cum = tl.cumsum(hist, 0).to(tl.int64)
        sel = tl.sum((cum < want).to(tl.int32), 0)  # first bin whose cumulative count reaches want
        below = tl.sum(tl.where(bins < sel, hist, 0).to(tl.int64), 0)
        want -= below
        prefix = prefix | (sel.to(tl.int64) << shift)
        pmask = pmask | (((1 << nbits) - 1) << shift)
    # `want` = how many rows with the threshold key are in scope, lowest ids first.
    seen = tl.zeros([], dtype=tl.int64)
    last = tl.zeros([], dtype=tl.int64) - 1
    for s in range(0, N, BLOCK):
        offs = s + tl.arange(0, BLOCK)
        m = offs < N
        k = tl.load(base + offs, mask=m, other=-1)
        eq = (k == prefix).to(tl.int64)
        run = tl.cumsum(eq, 0) + seen
        hit = (eq > 0) & (run == want)
        last = tl.maximum(last, tl.max(tl.where(hit, offs.to(tl.int64), -1), 0))
        seen += tl.sum(eq, 0)
    tl.store(cut_key_ptr + b, prefix)
    tl.store(last_eq_ptr + b, last)


@triton.jit
def _score_kernel(qe_ptr, e_ptr, keys_ptr, cut_key_ptr, last_eq_ptr, out_ptr, N, D, w,
                  IP: tl.constexpr, ALL: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_D: tl.constexpr):
    # queries on axis 1, row blocks on axis 0 (whose limit is 2^31-1); int64 offsets
    b = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N
    key = tl.load(keys_ptr + b * N + rows, mask=rmask, other=0)
    if ALL:
        inside = rmask
    else:
        ck = tl.load(cut_key_ptr + b)
        le = tl.load(last_eq_ptr + b)
        inside = rmask & ((key < ck) | ((key == ck) & (rows.to(tl.int64) <= le)))
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        ds = d0 + tl.arange(0, BLOCK_D)
        dm = ds < D
        q = tl.load(qe_ptr + b * D + ds, mask=dm, other=0.0).to(tl.float32)
        e = tl.load(e_ptr + rows[:, None].to(tl.int64) * D + ds[None, :],
                    mask=inside[:, None] & dm[None, :], other=0.0).to(tl.float32)
        acc += tl.sum(e * q[None, :], axis=1)
    if w != 0.0:
        # invert _to_key to recover the theme value (distance, or -ip)
        u = tl.where(key >= 0x80000000, key - 0x80000000, 0xFFFFFFFF - key)
        v = u.to(tl.int32).to(tl.float32, bitcast=True)
        acc = (1.0 - w) * acc + w * (-v)
    tl.store(out_ptr + b * N + rows, tl.where(inside, acc, float("-inf")), mask=rmask)


@triton.jit
def _gather_score_kernel(qe_ptr, e_ptr, ids_ptr, out_ptr, Ks, D,
                         BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(1).to(tl.int64)
    j = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    jm = j < Ks
    ids = tl.load(ids_ptr + b * Ks + j, mask=jm, other=-1)
    valid = jm & (ids >= 0)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        ds = d0 + tl.arange(0, BLOCK_D)
        dm = ds < D
        q = tl.load(qe_ptr + b * D + ds, mask=dm, other=0.0).to(tl.float32)
        e = tl.load(e_ptr + ids[:, None] * D + ds[None, :], mask=valid[:, None] & dm[None, :],
                    other=0.0).to(tl.float32)
        acc += tl.sum(e * q[None, :], axis=1)
    tl.store(out_ptr + b * Ks + j, tl.where(valid, acc, float("-inf")), mask=jm)


# ----------------------------------------------------------------------------- host side
def _keys(q, c, metric):
    B, T = q.shape
    N = c.shape[0]
    keys = torch.empty((B, N), dtype=torch.int64, device=q.device)
    _keys_kernel[(triton.cdiv(N, _BLOCK_N), B)](q, c, keys, N, T, IP=(metric == "ip"),
                                               BLOCK_N=_BLOCK_N, BLOCK_T=_BLOCK_T)
    return keys


def _cuts(keys, K):
    B, N = keys.shape
    cut = torch.empty(B, dtype=torch.int64, device=keys.device)
    last = torch.empty(B, dtype=torch.int64, device=keys.device)
    _cut_kernel[(B,)](keys, N, K, cut, last, BLOCK=_SEL_BLOCK)
    return cut, last


def _in_scope(keys, K):
    B, N = keys.shape
    if K >= N:
        return torch.ones_like(keys, dtype=torch.bool)
    cut, last = _cuts(keys, K)
    ids = torch.arange(N, device=keys.device)
    return (keys < cut[:, None]) | ((keys == cut[:, None]) & (ids[None, :] <= last[:, None]))


def _top_k(scores, n_valid, k, col_ids=None):
    """(ids, scores)[B, k] by (score desc, id asc) from a [B, M] score matrix whose invalid
    entries are -inf. Column j is row id j, or col_ids[b, j] when given."""
    B, M = scores.shape
    out_i = torch.full((B, k), -1, dtype=torch.int64, device=scores.device)
    out_s = torch.full((B, k), float("-inf"), dtype=torch.float32, device=scores.device)
    for b in range(B):
        m = int(min(k, int(n_valid[b])))
        if m == 0:
            continue
        kth = torch.topk(scores[b], m).values[-1]
        cand = ((scores[b] >= kth) & (scores[b] > float("-inf"))).nonzero().flatten()
        ids = cand if col_ids is None else col_ids[b][cand]
        by_id = torch.argsort(ids)  # then a stable sort by score keeps ties in id order
        ids, vals = ids[by_id], scores[b][cand][by_id]
        order = torch.sort(vals, descending=True, stable=True).indices[:m]
        out_i[b, :m] = ids[order]
        out_s[b, :m] = vals[order]
    return out_i, out_s


def theme_scope(q, c, K, metric):
    keys = _keys(q, c, metric)
    inside = _in_scope(keys, K)
    B = q.shape[0]
    ids = inside.nonzero()[:, 1].view(B, K)  # ascending id within each query
    order = torch.sort(torch.gather(keys, 1, ids), dim=1, stable=True).indices
    return torch.gather(ids, 1, order).contiguous()


def theme_scoped_search(q, qe, c, e, K, k, w, metric):
    keys = _keys(q, c, metric)
    B, N = keys.shape
    D = e.shape[1]
    scores = torch.empty((B, N), dtype=torch.float32, device=q.device)
    if K >= N:
        cut = last = keys  # unused when ALL
    else:
        cut, last = _cuts(keys, K)
    _score_kernel[(triton.cdiv(N, _BLOCK_N), B)](qe, e, keys, cut, last, scores, N, D, float(w),
                                                IP=(metric == "ip"), ALL=(K >= N),
                                                BLOCK_N=_BLOCK_N, BLOCK_D=32)
    return _top_k(scores, torch.full((B,), K), k)


def scoped_dense_search(qe, e, scope, k):
    B, Ks = scope.shape
    scores = torch.empty((B, Ks), dtype=torch.float32, device=qe.device)
    _gather_score_kernel[(triton.cdiv(Ks, _BLOCK_N), B)](qe, e, scope, scores, Ks, e.shape[1],
                                                        BLOCK_N=_BLOCK_N, BLOCK_D=32)
    return _top_k(scores, (scope >= 0).sum(1), k, col_ids=scope)
