"""Validity checks for theme-scoping results under float rounding (DESIGN.md section 3).

Backends compute distances by different formulas (direct (x-y)^2 sums vs
||x||^2+||y||^2-2x.y, different summation orders), so two correct backends may disagree
about rows whose distance is within rounding of the K-th distance. These checks accept a
result iff it is correct for SOME rounding within ``tol``: rows clearly inside the scope
must be in it, rows clearly outside must not be, orders hold up to ``tol``, and scores
match a float64 recomputation. Used by the tests and the benchmark report.
"""
from __future__ import annotations

from typing import Optional

import torch


def _theme_values(q_ppd, corpus_ppd, metric: str) -> torch.Tensor:
    """[B, N] float64 'smaller is nearer' values: squared L2, or -ip."""
    q, c = q_ppd.double(), corpus_ppd.double()
    if metric == "l2":
        return torch.cdist(q, c, compute_mode="donot_use_mm_for_euclid_dist") ** 2
    return -(q @ c.T)


def _kth(v: torch.Tensor, K: int) -> torch.Tensor:
    K = min(K, v.shape[1])
    return torch.kthvalue(v, K, dim=1).values  # [B]


def check_theme_scope(ids, q_ppd, corpus_ppd, K: int, metric: str = "l2", tol: float = 1e-4,
                      values: Optional[torch.Tensor] = None) -> None:
    """Raises AssertionError unless ids[B, min(K,N)] is a correct sorted scope up to tol."""
    ids = torch.as_tensor(ids).long().cpu()
    v = _theme_values(q_ppd, corpus_ppd, metric) if values is None else values.double()
    B, N = v.shape
    Kc = min(K, N)
    assert tuple(ids.shape) == (B, Kc), f"shape {tuple(ids.shape)} != {(B, Kc)}"
    kth = _kth(v, K)
    for b in range(B):
        row = ids[b]
        assert int(row.min()) >= 0 and int(row.max()) < N, f"query {b}: id out of range"
        assert row.unique().numel() == Kc, f"query {b}: duplicate ids"
        got = v[b][row]
        assert bool((got <= kth[b] + tol).all()), f"query {b}: a row beyond the K-th distance"
        sure_in = (v[b] < kth[b] - tol).nonzero().flatten()
        missing = set(sure_in.tolist()) - set(row.tolist())
        assert not missing, f"query {b}: rows clearly inside the scope are missing: {sorted(missing)[:5]}"
        assert bool((got[1:] >= got[:-1] - tol).all()), f"query {b}: not sorted by distance"


def check_scoped_search(ids, scores, q_ppd, q_emb, corpus_ppd, corpus_emb, K: int, k: int,
                        theme_weight: float = 0.0, metric: str = "l2", tol: float = 1e-4,
                        score_tol: float = 1e-3, scope_ids=None,
                        values: Optional[torch.Tensor] = None,
                        dense: Optional[torch.Tensor] = None) -> None:
    """Raises AssertionError unless (ids, scores) is a correct fused result up to tolerances.

    With ``scope_ids`` given (scoped_dense_search), the scope is that list (-1 = padding),
    the score is the plain inner product and q_ppd/corpus_ppd are ignored. ``values``
    ([B, N] squared L2, or -ip) and ``dense`` ([B, N] inner products) may be passed
    precomputed (e.g. in float32 for large benchmarks).
    """
    ids = torch.as_tensor(ids).long().cpu()
    scores = torch.as_tensor(scores).float().cpu().double()
    dense = (q_emb.double() @ corpus_emb.double().T) if dense is None else dense.double()
    B, N = dense.shape
    assert tuple(ids.shape) == (B, k) and tuple(scores.shape) == (B, k), "result shape"
    if scope_ids is None:
        v = _theme_values(q_ppd, corpus_ppd, metric) if values is None else values.double()
        kth = _kth(v, K)[:, None]
        sure_in = v < kth - tol
        maybe_in = v <= kth + tol
        w = float(theme_weight)
        full = dense if w == 0.0 else (1.0 - w) * dense + w * (-v)
        n_scope = torch.full((B,), min(K, N))
    else:
        s = torch.as_tensor(scope_ids).long().cpu()
        sure_in = torch.zeros((B, N), dtype=torch.bool)
        for b in range(B):
            sure_in[b, s[b][s[b] >= 0]] = True
        maybe_in = sure_in
        full = dense
        n_scope = sure_in.sum(1)
    for b in range(B):
        m = int(min(k, int(n_scope[b])))
        got, sc = ids[b], scores[b]
        assert bool((got[m:] == -1).all()) and bool(torch.isneginf(sc[m:]).all()), \
            f"query {b}: expected {m} results then -1/-inf padding, got {got.tolist()}"
        g, s_ = got[:m], sc[:m]
        assert bool((g >= 0).all()) and g.unique().numel() == m, f"query {b}: bad/duplicate ids {g.tolist()}"
        assert bool(maybe_in[b][g].all()), f"query {b}: a returned id is outside the scope"
        assert bool(((s_ - full[b][g]).abs() <= score_tol).all()), \
            f"query {b}: scores {s_.tolist()} != recomputed {full[b][g].tolist()}"
        assert bool((s_[1:] <= s_[:-1]).all()), f"query {b}: scores not sorted descending"
        left = sure_in[b].clone()  # clearly-in-scope rows that were not returned
        left[g] = False
        if bool(left.any()):
            assert m == k, f"query {b}: fewer than k results but in-scope rows are missing"
            best_left = float(full[b][left].max())
            assert best_left <= float(s_[-1]) + score_tol, \
                f"query {b}: an in-scope row scoring {best_left} beats kept {float(s_[-1])}"
