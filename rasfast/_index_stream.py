"""Chunked (streaming) search over row ranges of a corpus that may not fit in memory.

Used by :class:`rasfast.index.ThemeIndex` when its arrays are memory-mapped (or a
``chunk_rows`` is given). Extra memory is bounded by the per-query running state
([B, K] distances + ids for the scope threshold, [B, k] for the top-k) plus one chunk.

Exact scoping in two passes over the rows of a range:

1. threshold: a running list of each query's K nearest (distance, id) pairs, updated per
   chunk by ``select_k`` over ``[running ; chunk]``. Chunks arrive in id order and
   ``select_k`` breaks ties by lower position, so ties go to the lower id, as in the ops.
   The K-th pair is the threshold: row r is in scope iff
   ``d < thr or (d == thr and r <= thr_id)`` (``>`` for metric "ip"): exactly K rows.
2. scoring: per chunk, the dense (optionally fused) score of the in-scope rows, merged into
   a running top-k by (score desc, id asc).

Distances and scores use the exact float32 formulas of the torch reference
(rasfast.reference.theme), so the streamed result equals the in-memory result of the
"torch" backend bit for bit, and the compiled backends' results within their documented
float tolerance at the scope threshold.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from .ops.select import select_k
from .reference.theme import theme_distances

#: Target float32 elements of one chunk's temporaries ([B, rows, T] in the distance formula).
CHUNK_ELEMS = 1 << 24


def default_chunk_rows(B: int, width: int) -> int:
    """Rows per chunk so that a [B, rows, width] float32 temporary stays near 64 MiB."""
    return int(max(64, min(1 << 16, CHUNK_ELEMS // max(1, B * width))))


def _checked_rows(x: torch.Tensor, start: int, stop: int, name: str) -> torch.Tensor:
    """Rows [start, stop) of x as float32 (read from disk when x is memory-mapped)."""
    rows = x[start:stop].float()
    if not torch.isfinite(rows).all():
        raise ValueError(f"{name}: rows [{start}, {stop}) contain NaN or infinite values")
    return rows


def _chunks(start: int, stop: int, chunk_rows: int):
    for a in range(start, stop, chunk_rows):
        yield a, min(stop, a + chunk_rows)


def scope_threshold(q_ppd: torch.Tensor, ppd: torch.Tensor, start: int, stop: int, K: int,
                    metric: str, chunk_rows: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Pass 1: (thr[B] float32, thr_id[B] int64), the K-th nearest row of [start, stop).

    Requires 1 <= K < stop - start (K >= rows means no scoping; callers skip this pass).
    """
    largest = metric == "ip"
    B = q_ppd.shape[0]
    vals = torch.empty((B, 0), dtype=torch.float32)
    ids = torch.empty((B, 0), dtype=torch.int64)
    for a, b in _chunks(start, stop, chunk_rows):
        d = theme_distances(q_ppd, _checked_rows(ppd, a, b, "corpus_ppd"), metric)
        vals = torch.cat([vals, d], dim=1)
        ids = torch.cat([ids, torch.arange(a, b, dtype=torch.int64).expand(B, -1)], dim=1)
        if vals.shape[1] > K:
            # sorted=True keeps the running list in (distance, id) order, so a later tie
            # between a running entry and a chunk entry goes to the running (lower) id.
            v, pos = select_k(vals, K, largest=largest, sorted=True, backend="auto")
            vals, ids = v, torch.gather(ids, 1, pos)
    return vals[:, K - 1].contiguous(), ids[:, K - 1].contiguous()


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
    ``emb[start:stop]`` (ids shifted by ``start``). ``q_ppd``/``ppd`` may be None only when
    no scoping happens (K >= rows) and theme_weight == 0.
    Returns (scores[B, k] float32, ids[B, k] int64), padded with -inf / -1.
    """
    B = q_emb.shape[0]
    n = stop - start
    w = float(theme_weight)
    scoped = K < n
    need_theme = scoped or w != 0.0
    if scoped:
        thr, thr_id = scope_threshold(q_ppd, ppd, start, stop, K, metric, chunk_rows)
    best_s = torch.empty((B, 0), dtype=torch.float32)
    best_i = torch.empty((B, 0), dtype=torch.int64)
    qe = q_emb.float()
    for a, b in _chunks(start, stop, chunk_rows):
        rows = _checked_rows(emb, a, b, "corpus_emb")
        if need_theme:
            d = theme_distances(q_ppd, _checked_rows(ppd, a, b, "corpus_ppd"), metric)
        if scoped:
            rid = torch.arange(a, b, dtype=torch.int64)
            t = thr[:, None]
            inside = (d > t) if metric == "ip" else (d < t)
            mask = inside | ((d == t) & (rid[None, :] <= thr_id[:, None]))
            qb, rr = mask.nonzero(as_tuple=True)
        else:
            qb = torch.arange(B).repeat_interleave(b - a)
            rr = torch.arange(b - a).repeat(B)
        # Same elementwise formula as the reference: (row * q).sum over D in float32.
        dense = (rows[rr] * qe[qb]).sum(-1)
        if w != 0.0:
            theme = d[qb, rr]
            if metric == "l2":
                theme = -theme
            score = (1.0 - w) * dense + w * theme
        else:
            score = dense
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
