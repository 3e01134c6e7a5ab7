"""Theme scoping references: plain torch, float32 math, stable sorts for the id tie-break.

- ``theme_distances``: squared L2 by the direct (q - c)^2 sum (or the inner product),
  computed in row chunks so memory stays bounded.
- ``theme_scope``: stable sort of those distances, first K.
- ``scoped_dense_search``: inner products of the scope rows, stable sort, first k, padded.
- ``theme_scoped_search``: scope, then the fused score over the scope, first k.
"""
from __future__ import annotations

from typing import Tuple

import torch

_CHUNK_ELEMS = 1 << 24  # float32 elements of the [B, chunk, T] difference tensor


def theme_distances(q_ppd: torch.Tensor, corpus_ppd: torch.Tensor, metric: str) -> torch.Tensor:
    """[B, N] float32: squared L2 distance (metric 'l2') or inner product (metric 'ip')."""
    q = q_ppd.float()
    B, T = q.shape
    N = corpus_ppd.shape[0]
    out = torch.empty((B, N), dtype=torch.float32, device=q.device)
    step = max(1, _CHUNK_ELEMS // max(1, B * T))
    for s in range(0, N, step):
        c = corpus_ppd[s:s + step].float()
        if metric == "l2":
            out[:, s:s + step] = ((q[:, None, :] - c[None, :, :]) ** 2).sum(-1)
        else:
            out[:, s:s + step] = (q[:, None, :] * c[None, :, :]).sum(-1)
    return out


def _order(values: torch.Tensor, descending: bool) -> torch.Tensor:
    # Stable sort: ties keep the lower id first in both directions.
    return torch.sort(values, dim=1, descending=descending, stable=True)[1]


def theme_scope(q_ppd, corpus_ppd, K: int, metric: str) -> torch.Tensor:
    """ids[B, min(K, N)] int64 by (distance asc | ip desc, id asc)."""
    d = theme_distances(q_ppd, corpus_ppd, metric)
    return _order(d, descending=(metric == "ip"))[:, :min(K, d.shape[1])].contiguous()


def _top_k_padded(scores: torch.Tensor, ids: torch.Tensor, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Top k of each row by (score desc, id asc); entries with id -1 are absent; pads -1/-inf."""
    B = scores.shape[0]
    out_ids = torch.full((B, k), -1, dtype=torch.int64, device=scores.device)
    out_sc = torch.full((B, k), float("-inf"), dtype=torch.float32, device=scores.device)
    for b in range(B):
        valid = ids[b] >= 0
        s, i = scores[b][valid], ids[b][valid]
        by_id = torch.argsort(i)  # sort by id first so the stable score sort breaks ties by id
        s, i = s[by_id], i[by_id]
        o = torch.sort(s, descending=True, stable=True)[1][:k]
        out_ids[b, :o.numel()] = i[o]
        out_sc[b, :o.numel()] = s[o]
    return out_ids, out_sc


def scoped_dense_search(q_emb, corpus_emb, scope_ids, k: int):
    """(ids[B, k] int64, scores[B, k] float32): inner product over each query's scope."""
    ids = scope_ids.long()
    safe = ids.clamp(min=0)
    rows = corpus_emb[safe].float()  # [B, K, D]
    scores = (rows * q_emb.float()[:, None, :]).sum(-1)
    return _top_k_padded(scores, ids, k)


def theme_scoped_search(q_ppd, q_emb, corpus_ppd, corpus_emb, K: int, k: int,
                        theme_weight: float, metric: str):
    """Scope of exactly min(K, N) rows, then score = (1-w)*dense + w*theme, top k.

    theme = -squared L2 for metric 'l2', the inner product for metric 'ip'.
    """
    d = theme_distances(q_ppd, corpus_ppd, metric)
    scope = _order(d, descending=(metric == "ip"))[:, :min(K, d.shape[1])]
    dense = (corpus_emb[scope].float() * q_emb.float()[:, None, :]).sum(-1)
    theme = torch.gather(d, 1, scope)
    if metric == "l2":
        theme = -theme
    w = float(theme_weight)
    scores = dense if w == 0.0 else (1.0 - w) * dense + w * theme
    return _top_k_padded(scores, scope, k)
