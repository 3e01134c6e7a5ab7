"""Chunked (streaming) search over row ranges of a corpus that may not fit in memory.

Used by :class:`rasfast.index.ThemeIndex` when its arrays are memory-mapped (or a
``chunk_rows`` is given). Extra memory is bounded by the per-query running state
([B, K] keys + ids for the scope threshold, [B, k] for the top-k) plus one chunk.

The result equals the torch reference (rasfast.reference.theme.theme_scoped_search) bit
for bit: the scope is decided on the reference's exact float32 distances, and scores use
its elementwise formulas. Computing those distances for every row is slow (a broadcast
(q - x)^2 sum), so the scan uses fast BLAS distances ``|q|^2 + |x|^2 - 2 q.x`` with a proven
error bound E per query (|fast - exact| <= E) and computes exact distances only for the
rows whose fast distance lies within 2E of the threshold. Keys are the distance for
metric "l2" and the negated inner product for "ip", so "nearest" is always "smallest key";
ties go to the lower row id, as in the ops. Three passes over a range:

1. approximate threshold t~: the K-th smallest fast key per query (a running ``select_k``
   over ``[running K ; chunk]``), and the largest row norm (for E).
2. exact threshold: rows with fast key < t~ - 2E are certainly in scope (counted); rows
   within 2E of t~ get exact keys, whose running K smallest (key, id) pairs give the exact
   K-th row (thr, thr_id). Row r is in scope iff key < thr or (key == thr and r <= thr_id):
   exactly K rows.
3. scoring: the dense (optionally fused) score of in-scope rows, merged into a running
   top-k by (score desc, id asc).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from .ops.select import select_k

#: Target float32 elements of one chunk ([rows, width]) and of one batch of gathered pairs.
CHUNK_ELEMS = 1 << 24
_U = 2.0 ** -24  # float32 unit roundoff


def default_chunk_rows(B: int, width: int) -> int:
    """Rows per chunk: a [rows, width] float32 chunk near 64 MiB, [B, rows] keys <= 256 MiB."""
    return int(max(64, min(1 << 18, CHUNK_ELEMS // max(1, width), (4 * CHUNK_ELEMS) // max(1, B))))


def _pair_batches(n: int, width: int):
    """Slices of at most CHUNK_ELEMS // width pairs, so gathered [pairs, width] temporaries
    stay bounded whatever the scope size."""
    step = max(1, CHUNK_ELEMS // max(1, width))
    for a in range(0, n, step):
        yield slice(a, min(n, a + step))


def _checked_rows(x: torch.Tensor, start: int, stop: int, name: str) -> torch.Tensor:
    """Rows [start, stop) of x as float32 (read from disk when x is memory-mapped)."""
    rows = x[start:stop].float()
    if not torch.isfinite(rows).all():
        raise ValueError(f"{name}: rows [{start}, {stop}) contain NaN or infinite values")
    return rows


def _chunks(start: int, stop: int, chunk_rows: int):
    for a in range(start, stop, chunk_rows):
        yield a, min(stop, a + chunk_rows)


def _fast_keys(q: torch.Tensor, rows: torch.Tensor, metric: str) -> torch.Tensor:
    """[B, c] keys by BLAS: |q|^2 + |x|^2 - 2 q.x (l2) or -q.x (ip); within E of exact."""
    dot = q @ rows.T
    if metric == "ip":
        return -dot
    return (q * q).sum(1)[:, None] + (rows * rows).sum(1)[None, :] - 2.0 * dot


def _error_bound(q: torch.Tensor, max_row_norm2: float) -> torch.Tensor:
    """[B, 1] bound on |fast key - exact key|. A float32 sum of T terms errs by at most
    gamma_T = T u / (1 - T u) times the sum of magnitudes (any order, with or without FMA),
    which for both formulas is <= 2 (|q|^2 + |x|^2); the few extra additions add ~3u of
    that. 8 (T + 4) u (|q|^2 + max |x|^2) covers both errors with room to spare."""
    T = q.shape[1]
    return (8.0 * (T + 4) * _U * ((q * q).sum(1) + max_row_norm2))[:, None]


def _exact_pair_keys(q: torch.Tensor, rows: torch.Tensor, qb: torch.Tensor, rr: torch.Tensor,
                     metric: str) -> torch.Tensor:
    """Exact keys of (query qb[i], row rr[i]) pairs with the reference's elementwise
    formulas (rasfast.reference.theme.theme_distances), bit for bit."""
    out = torch.empty(qb.shape[0], dtype=torch.float32)
    for sl in _pair_batches(qb.shape[0], q.shape[1]):
        if metric == "ip":
            out[sl] = -(q[qb[sl]] * rows[rr[sl]]).sum(-1)
        else:
            out[sl] = ((q[qb[sl]] - rows[rr[sl]]) ** 2).sum(-1)
    return out


def _running_smallest(keys: torch.Tensor, ids: torch.Tensor, new_keys: torch.Tensor,
                      new_ids: torch.Tensor, K: int):
    """The K smallest (key, id) of [running ; new]; the running list is sorted and its ids
    are lower than the new ones, so select_k's lower-position tie rule is the id rule."""
    keys = torch.cat([keys, new_keys], dim=1)
    ids = torch.cat([ids, new_ids], dim=1)
    if keys.shape[1] > K:
        v, pos = select_k(keys, K, largest=False, sorted=True, backend="auto")
        keys, ids = v, torch.gather(ids, 1, pos)
    return keys, ids


class _Scope:
    """Exact scope of each query over rows [start, stop): fast keys + exact band."""

    def __init__(self, q: torch.Tensor, ppd: torch.Tensor, start: int, stop: int, K: int,
                 metric: str, chunk_rows: int):
        self.q, self.ppd, self.metric, self.chunk_rows = q, ppd, metric, chunk_rows
        B = q.shape[0]
        empty_k = torch.empty((B, 0), dtype=torch.float32)
        empty_i = torch.empty((B, 0), dtype=torch.int64)
        # pass 1: approximate K-th key and the largest row norm
        keys, ids, max_norm2 = empty_k, empty_i, 0.0
        for a, b in _chunks(start, stop, chunk_rows):
            rows = _checked_rows(ppd, a, b, "corpus_ppd")
            max_norm2 = max(max_norm2, float((rows * rows).sum(1).max()))
            rid = torch.arange(a, b, dtype=torch.int64).expand(B, -1)
            keys, ids = _running_smallest(keys, ids, _fast_keys(q, rows, metric), rid, K)
        self.t_approx = keys[:, K - 1:K].contiguous()
        self.err = _error_bound(q, max_norm2)
        # pass 2: exact K-th key among rows near t~ (certainly-inside rows are only counted)
        inside = torch.zeros(B, dtype=torch.int64)
        keys, ids = empty_k, empty_i
        for a, b in _chunks(start, stop, chunk_rows):
            rows = self.ppd[a:b].float()
            fast = _fast_keys(q, rows, metric)
            sure = fast < self.t_approx - 2 * self.err
            inside += sure.sum(1)
            band = ~sure & (fast <= self.t_approx + 2 * self.err)
            qb, rr = band.nonzero(as_tuple=True)
            exact = torch.full((B, b - a), float("inf"))
            exact[qb, rr] = _exact_pair_keys(q, rows, qb, rr, metric)
            rid = torch.arange(a, b, dtype=torch.int64).expand(B, -1)
            keys, ids = _running_smallest(keys, ids, exact, rid, K)
        pos = (K - 1 - inside)[:, None]  # >= 0: fewer than K rows have fast key < t~
        self.thr = torch.gather(keys, 1, pos)
        self.thr_id = torch.gather(ids, 1, pos)
        if not torch.isfinite(self.thr).all():  # the band proof failed: never answer wrongly
            raise RuntimeError("theme scope: exact threshold not found in the error band")

    def pairs(self, rows: torch.Tensor, a: int, b: int, need_keys: bool):
        """In-scope (query, row-in-chunk) pairs of chunk [a, b) and, if asked, their exact
        keys (for the fused theme term)."""
        fast = _fast_keys(self.q, rows, self.metric)
        sure = fast < self.t_approx - 2 * self.err
        band = ~sure & (fast <= self.t_approx + 2 * self.err)
        bq, br = band.nonzero(as_tuple=True)
        kb = _exact_pair_keys(self.q, rows, bq, br, self.metric)
        rid = br + a
        keep = (kb < self.thr[bq, 0]) | ((kb == self.thr[bq, 0]) & (rid <= self.thr_id[bq, 0]))
        mask = sure
        mask[bq[keep], br[keep]] = True
        qb, rr = mask.nonzero(as_tuple=True)
        keys = _exact_pair_keys(self.q, rows, qb, rr, self.metric) if need_keys else None
        return qb, rr, keys


def _merge_top_k(best_s: torch.Tensor, best_i: torch.Tensor, s: torch.Tensor, i: torch.Tensor,
                 k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Top k of [best ; chunk] by (score desc, id asc). Absent entries have score -inf; all
    ids in ``best`` are lower than those in the chunk and ``best`` is sorted, so select_k's
    tie rule (lower position first) is the id rule."""
    s = torch.cat([best_s, s], dim=1)
    i = torch.cat([best_i, i], dim=1)
    kk = min(k, s.shape[1])
    v, pos = select_k(s, kk, largest=True, sorted=True, backend="auto")
    ids = torch.gather(i, 1, pos)
    ids = torch.where(torch.isneginf(v), torch.full_like(ids, -1), ids)
    return v, ids


def _pad(s: torch.Tensor, i: torch.Tensor, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    if s.shape[1] == k:
        return s, i
    B = s.shape[0]
    return (torch.cat([s, torch.full((B, k - s.shape[1]), float("-inf"))], dim=1),
            torch.cat([i, torch.full((B, k - i.shape[1]), -1, dtype=torch.int64)], dim=1))


def scoped_search_range(q_ppd: Optional[torch.Tensor], q_emb: torch.Tensor,
                        ppd: Optional[torch.Tensor], emb: torch.Tensor, start: int, stop: int,
                        K: int, k: int, theme_weight: float, metric: str,
                        chunk_rows: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Exact theme-scoped top-k over rows [start, stop) (ids are global row numbers).

    Equals ``rasfast.reference.theme.theme_scoped_search`` on ``ppd[start:stop]``,
    ``emb[start:stop]`` (ids shifted by ``start``). ``q_ppd`` is float32.
    Returns (scores[B, k] float32, ids[B, k] int64), padded with -inf / -1.
    """
    B = q_emb.shape[0]
    w = float(theme_weight)
    scope = _Scope(q_ppd, ppd, start, stop, K, metric, chunk_rows) if K < stop - start else None
    best_s = torch.empty((B, 0), dtype=torch.float32)
    best_i = torch.empty((B, 0), dtype=torch.int64)
    qe = q_emb.float()
    for a, b in _chunks(start, stop, chunk_rows):
        rows = _checked_rows(emb, a, b, "corpus_emb")
        if scope is not None:
            p = ppd[a:b].float()  # checked for NaN/inf in the scope's first pass
            qb, rr, keys = scope.pairs(p, a, b, need_keys=w != 0.0)
        else:
            qb = torch.arange(B).repeat_interleave(b - a)
            rr = torch.arange(b - a).repeat(B)
            keys = None
            if w != 0.0:
                p = _checked_rows(ppd, a, b, "corpus_ppd")
                keys = _exact_pair_keys(q_ppd, p, qb, rr, metric)
        # Same elementwise formula as the reference: (row * q).sum over D in float32.
        dense = torch.empty(qb.shape[0], dtype=torch.float32)
        for sl in _pair_batches(qb.shape[0], qe.shape[1]):
            dense[sl] = (rows[rr[sl]] * qe[qb[sl]]).sum(-1)
        # theme term: -L2^2 (l2) or the inner product (ip) == -key in both cases
        score = dense if w == 0.0 else (1.0 - w) * dense + w * (-keys)
        chunk_s = torch.full((B, b - a), float("-inf"))
        chunk_s[qb, rr] = score
        chunk_i = torch.arange(a, b, dtype=torch.int64).expand(B, -1)
        best_s, best_i = _merge_top_k(best_s, best_i, chunk_s, chunk_i, k)
    return _pad(best_s, best_i, k)


def dense_search_range(q_emb: torch.Tensor, emb: torch.Tensor, start: int, stop: int, k: int,
                       chunk_rows: int, backend: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """Unscoped top-k by inner product over rows [start, stop): per chunk, the fused op
    with no scoping (K = rows, a 1-column zero PPD), then a merge. Every backend computes a
    (query, row) score independently of the row's position, so any chunking gives the same
    result. Returns (ids[B, k], scores[B, k]) padded with -1 / -inf."""
    from .ops.theme import theme_scoped_search
    B = q_emb.shape[0]
    zq = torch.zeros((B, 1), dtype=torch.float32, device=q_emb.device)
    parts = []
    for a, b in _chunks(start, stop, chunk_rows):
        rows = emb[a:b]
        zc = torch.zeros((b - a, 1), dtype=torch.float32, device=rows.device)
        ids, sc = theme_scoped_search(zq, q_emb, zc, rows, b - a, k, 0.0, "l2", backend)
        parts.append((sc.cpu(), torch.where(ids >= 0, ids + a, ids).cpu()))
    return merge_results(parts, k)


def merge_results(parts, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merges per-shard (scores[B, k_s], ids[B, k_s]) lists into one top-k per query by
    (score desc, id asc); padding (-inf / -1) sorts last. Returns (ids, scores)."""
    s = torch.cat([p[0].float() for p in parts], dim=1)
    i = torch.cat([p[1].long() for p in parts], dim=1)
    big = torch.iinfo(torch.int64).max
    key_ids = torch.where(i < 0, torch.full_like(i, big), i)
    by_id = torch.argsort(key_ids, dim=1, stable=True)
    s, i = torch.gather(s, 1, by_id), torch.gather(i, 1, by_id)
    order = torch.sort(s, dim=1, descending=True, stable=True)[1][:, :k]
    s, i = torch.gather(s, 1, order), torch.gather(i, 1, order)
    s, i = _pad(s, i, k)
    i = torch.where(torch.isneginf(s), torch.full_like(i, -1), i)
    return i, s
