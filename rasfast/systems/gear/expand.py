"""GEAR graph expansion around a base retriever: NaiveGE, SyncGE, and Reciprocal Rank Fusion.

Given each query's ranked base passages, graph expansion seeds GEAR's diverse triple beam
search (:func:`rasfast.triple_beam_search`) with

- NaiveGE: all triples of the base passages (the top ``seed_passages`` of the list);
- SyncGE: the corpus triples nearest (cosine of embeddings) to "proximal" triples, e.g.
  triples an LLM wrote after reading the base passages;

flattens the returned beams breadth first into passages (first occurrences) and fuses them
with the base list by Reciprocal Rank Fusion. Defaults are GEAR's: beam width 10, length 2,
100 neighbours per expansion, gamma 20, RRF k = 60. All queries run in one batched search.

:func:`evaluate_musique` measures Recall@k on the 100 MuSiQue questions (dense retrieval
alone vs dense + NaiveGE); ``rasfast eval gear`` computes it,
benchmarks/eval_gear_musique.py writes the table.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..._validate import check_choice, check_int_arg
from ...metrics import mean_recall_at_k as recall_at_k  # noqa: F401 - GEAR's public name for it
from ...metrics import pad_ranking

RRF_K = 60


# ---------------------------------------------------------------------------- fusion

def _int_ranking(x, name: str) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected a 1-d sequence of int ids, got "
                        f"{'dtype ' + str(arr.dtype) if arr.ndim == 1 else f'shape {arr.shape}'}")
    return arr.astype(np.int64, copy=False)


def reciprocal_rank_fusion(rankings: Sequence, k: float = RRF_K,
                           top: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Fuses ranked id lists: score(id) = sum over lists of 1 / (k + rank), rank 1-based.

    An id repeated within one list counts at its first (best) rank only. Ties in the fused
    score are broken by first appearance in the lists taken in the given order (the whole
    first list, then the second, ...): with [base, expansion], base passages win ties. Equal
    sets of ranks give bit-identical scores (terms are summed in a fixed order).

    Args:
        rankings: a sequence of 1-d int id arrays/lists, best first (may be empty).
        k: the RRF constant (> 0 or 0), 60 by default as in GEAR and Cormack et al.
        top: keep only the best ``top`` ids (None keeps all).

    Returns:
        (ids int64, scores float64), best first.
    """
    if isinstance(rankings, (str, bytes)) or not hasattr(rankings, "__len__"):
        raise TypeError(f"rankings: expected a sequence of id lists, got {type(rankings).__name__}")
    if isinstance(k, bool) or not isinstance(k, numbers.Real) or not np.isfinite(k) or k < 0:
        raise ValueError(f"k: expected a finite number >= 0, got {k!r}")
    if top is not None:
        top = check_int_arg(top, "top", 0)
    ids_parts, term_parts = [], []
    for j, r in enumerate(rankings):
        arr = _int_ranking(r, f"rankings[{j}]")
        _, first = np.unique(arr, return_index=True)
        first.sort()
        ids_parts.append(arr[first])
        term_parts.append(1.0 / (float(k) + first.astype(np.float64) + 1.0))
    if not ids_parts or sum(len(p) for p in ids_parts) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    ids = np.concatenate(ids_parts)
    terms = np.concatenate(term_parts)
    uniq, first_pos, inverse = np.unique(ids, return_index=True, return_inverse=True)
    # sum each id's terms largest first, so equal rank sets give identical floats
    order = np.lexsort((-terms, inverse))
    starts = np.flatnonzero(np.r_[True, np.diff(inverse[order]) != 0])
    scores = np.add.reduceat(terms[order], starts)
    rank = np.lexsort((first_pos, -scores))
    if top is not None:
        rank = rank[:top]
    return uniq[rank], scores[rank]


# ---------------------------------------------------------------------------- expansion

@dataclass
class ExpansionResult:
    """Per query (lists of B arrays): fused ``passages`` (int64, best first) and their RRF
    ``scores`` (float64), the expansion's own passage list (breadth-first beam order), and
    the seed triples; ``beams`` is the raw :class:`rasfast.BeamResult`."""

    passages: List[np.ndarray]
    scores: List[np.ndarray]
    expansion: List[np.ndarray]
    seeds: List[np.ndarray]
    beams: object


def _passage_table(graph) -> np.ndarray:
    pids = getattr(graph, "passage_ids", None)
    if pids is None:
        raise TypeError("graph: expected a TripleGraph (or an object with indptr, indices and "
                        f"passage_ids), got {type(graph).__name__}")
    return np.asarray(pids, dtype=np.int64)


def _triples_of(graph, pids_table: np.ndarray, passages: np.ndarray) -> np.ndarray:
    lookup = getattr(graph, "triples_of_passages", None)
    if lookup is not None:
        return lookup(passages)
    return np.flatnonzero(np.isin(pids_table, passages)).astype(np.int64)


def _ragged(x, name: str, B: Optional[int] = None) -> List[np.ndarray]:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray) and x.ndim == 2:
        x = list(x)
    if isinstance(x, (str, bytes)) or not isinstance(x, (list, tuple, np.ndarray)):
        raise TypeError(f"{name}: expected one ranked id list per query (a list of int arrays "
                        f"or a 2-D int array), got {type(x).__name__}")
    if B is not None and len(x) != B:
        raise ValueError(f"{name}: expected one list per query (B = {B}), got {len(x)}")
    return [_int_ranking(r, f"{name}[{i}]") for i, r in enumerate(x)]


def _host(x) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _normalised(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def link_triples(proximal_emb: np.ndarray, triple_emb: np.ndarray, k: int = 1) -> np.ndarray:
    """SyncGE's linking: ids of the ``k`` corpus triples nearest (cosine) to each proximal
    triple, unique, in order of first appearance (ties by lower id)."""
    k = check_int_arg(k, "link_k", 1)
    p = np.asarray(proximal_emb, dtype=np.float32)
    if p.ndim != 2 or p.shape[1] != triple_emb.shape[1]:
        raise ValueError(f"proximal: expected [m, D = {triple_emb.shape[1]}] embeddings, "
                         f"got shape {p.shape}")
    if p.shape[0] == 0 or triple_emb.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    sims = _normalised(p) @ _normalised(triple_emb).T
    k = min(k, sims.shape[1])
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k].reshape(-1)
    _, first = np.unique(order, return_index=True)
    return order[np.sort(first)].astype(np.int64)


def _is_text_triple(t) -> bool:
    return isinstance(t, str) or (isinstance(t, (list, tuple)) and len(t) > 0
                                  and all(isinstance(x, str) for x in t))


def _proximal_embeddings(proximal, B: int, dim: int, encoder) -> List[np.ndarray]:
    """Per query: float [m, D] embeddings of the proximal triples (text is encoded)."""
    if not isinstance(proximal, (list, tuple)) or len(proximal) != B:
        got = len(proximal) if isinstance(proximal, (list, tuple)) else type(proximal).__name__
        raise ValueError(f"proximal: expected a list with one entry per query (B = {B}), got {got}")
    out = []
    for i, p in enumerate(proximal):
        if isinstance(p, (list, tuple)) and len(p) and all(_is_text_triple(t) for t in p):
            if encoder is None:
                raise TypeError(f"proximal[{i}]: triples given as text need encoder=...")
            out.append(np.asarray(encoder.encode([t if isinstance(t, str) else " ".join(t)
                                                  for t in p]), dtype=np.float32))
            continue
        arr = p.detach().cpu().numpy() if hasattr(p, "detach") else np.asarray(p)
        if arr.size == 0:
            arr = np.zeros((0, dim), dtype=np.float32)
        if arr.ndim != 2 or arr.dtype.kind != "f":
            raise TypeError(f"proximal[{i}]: expected float [m, D] embeddings or a list of "
                            f"triples as text, got {arr.dtype} array of shape {arr.shape}")
        out.append(arr.astype(np.float32, copy=False))
    return out


def graph_expand(graph, triple_emb, q_emb, base_pids, mode: str = "naive", proximal=None,
                 link_k: int = 1, seed_passages: Optional[int] = None, beam_width: int = 10,
                 max_len: int = 2, gamma: Optional[float] = 20.0, max_neighbors: Optional[int] = 100,
                 scoring: str = "sum", encoder=None, rrf_k: float = RRF_K,
                 top: Optional[int] = None, backend: str = "auto") -> ExpansionResult:
    """GEAR graph expansion (NaiveGE or SyncGE) fused with the base list, batched over queries.

    Args:
        graph: a :class:`rasfast.TripleGraph` (or an object with indptr, indices,
            passage_ids) over the corpus triples.
        triple_emb: float [n, D] triple embeddings (row i = triple i of the graph); may be
            None with scoring="text" and mode="naive".
        q_emb: float [B, D] query embeddings.
        base_pids: the base retriever's ranked passage ids per query (list of B int arrays,
            or a 2-D int array [B, m]); fused with the expansion.
        mode: "naive" (seeds = all triples of the top ``seed_passages`` base passages) or
            "sync" (seeds = the ``link_k`` corpus triples nearest to each proximal triple).
        proximal: for "sync": per query, proximal triples as float [m, D] embeddings, or as
            strings / (s, p, o) tuples encoded with ``encoder``.
        seed_passages: NaiveGE uses the first this many base passages (None: all of them).
        beam_width, max_len, gamma, max_neighbors, scoring, backend: passed to
            :func:`rasfast.triple_beam_search` (GEAR: 10, 2, 20, 100, "sum" here).
        encoder: for scoring="text" and for proximal triples given as text.
        rrf_k: the RRF constant. top: keep the best ``top`` fused passages (None: all).

    Returns:
        :class:`ExpansionResult`; ``passages[i]`` = RRF([base_pids[i], expansion[i]]), ties
        broken in favour of the base list (see :func:`reciprocal_rank_fusion`).
    """
    from ...ops.beam import triple_beam_search

    mode = check_choice(mode, "mode", ("naive", "sync"))
    pid_table = _passage_table(graph)
    q = q_emb.detach().cpu().numpy() if hasattr(q_emb, "detach") else np.asarray(q_emb)
    if q.ndim != 2:
        raise ValueError(f"q_emb: expected a 2-d array [B, D], got shape {q.shape}")
    B = q.shape[0]
    base = _ragged(base_pids, "base_pids", B)
    if seed_passages is not None:
        seed_passages = check_int_arg(seed_passages, "seed_passages", 1)
    if triple_emb is None:
        if scoring != "text" or mode != "naive":
            raise ValueError("triple_emb: needed unless scoring='text' with mode='naive'")
        emb = None
    else:
        emb = triple_emb.detach().cpu().numpy() if hasattr(triple_emb, "detach") else np.asarray(triple_emb)
        if emb.ndim != 2 or emb.shape[0] != len(pid_table):
            raise ValueError(f"triple_emb: expected [n = {len(pid_table)} triples, D], "
                             f"got shape {emb.shape}")

    if mode == "naive":
        if proximal is not None:
            raise ValueError("proximal: only used with mode='sync'")
        seeds = [_triples_of(graph, pid_table, b[:seed_passages]) for b in base]
    else:
        if proximal is None:
            raise ValueError("proximal: mode='sync' needs the proximal triples of each query")
        prox = _proximal_embeddings(proximal, B, emb.shape[1], encoder)
        seeds = [link_triples(p, emb, link_k) for p in prox]

    # q_emb / triple_emb go through as given (torch on a GPU selects the cuda backend)
    beams = triple_beam_search(graph, triple_emb, q_emb, seeds, beam_width=beam_width,
                               max_len=max_len, gamma=gamma, max_neighbors=max_neighbors,
                               scoring=scoring, encoder=encoder, backend=backend)
    expansion = [_host(e) for e in beams.flatten_passages_batch(pid_table)]
    expansion = [e[e >= 0] for e in expansion]  # -1: triple without a passage
    fused = [reciprocal_rank_fusion([b, e], k=rrf_k, top=top) for b, e in zip(base, expansion)]
    return ExpansionResult([f[0] for f in fused], [f[1] for f in fused], expansion,
                           [np.asarray(s, dtype=np.int64) for s in seeds], beams)


# ---------------------------------------------------------------------------- evaluation

def dense_rankings(q_emb: np.ndarray, passage_emb: np.ndarray, depth: int) -> np.ndarray:
    """Top-``depth`` passages per query by inner product (ties by lower id): int64 [B, depth]."""
    sims = np.asarray(q_emb, np.float32) @ np.asarray(passage_emb, np.float32).T
    depth = min(depth, sims.shape[1])
    return np.argsort(-sims, axis=1, kind="stable")[:, :depth].astype(np.int64)


def evaluate_musique(data_root=None, ks: Sequence[int] = (5, 10, 15),
                     base_sizes: Sequence[int] = (5, 10, 15, 20), encoder=None,
                     beam_width: int = 10, max_len: int = 2, gamma: float = 20.0,
                     max_neighbors: int = 100, max_degree: Optional[int] = None,
                     fusion_depth: Optional[int] = None,
                     backend: str = "auto") -> Dict[str, object]:
    """Recall@k on the 100 MuSiQue questions: dense retrieval vs dense + NaiveGE.

    Passages ("title\\ntext"), triples ("s p o") and questions are encoded with ``encoder``
    (default all-MiniLM-L6-v2; corpus embeddings cached on disk). For each base size m, the
    dense top-m passages seed NaiveGE and are fused (RRF) with its passages; a fused list
    shorter than k is filled with the next dense passages, so every list has k entries.
    ``fusion_depth``: fuse with the dense top-``fusion_depth`` list instead of the top m
    (the seeds stay the top m).

    Returns:
        {"rows": [{"method", "base_size", "recall@k"...}], "graph": degree stats,
         "n_questions", "encoder", "settings"}.
    """
    from ... import data as _data
    from ...encode import SentenceTransformerEncoder, encode_cached
    from ...graph import TripleGraph

    ks = [check_int_arg(k, "ks", 1) for k in ks]
    base_sizes = [check_int_arg(m, "base_sizes", 1) for m in base_sizes]
    ds = _data.load_dataset("musique", data_root)
    graph = TripleGraph.from_dataset(ds, max_degree=max_degree)
    enc = encoder or SentenceTransformerEncoder()
    p_emb = encode_cached(enc, [p.content for p in ds.passages])
    t_emb = encode_cached(enc, graph.texts)
    q_emb = encode_cached(enc, [q.question for q in ds.questions])
    gold = [q.gold_pids for q in ds.questions]
    if fusion_depth is not None:
        fusion_depth = check_int_arg(fusion_depth, "fusion_depth", 1)
    depth = max(max(ks), max(base_sizes), fusion_depth or 0) + max(ks)
    dense = dense_rankings(q_emb, p_emb, depth)

    rows = [{"method": "dense", "base_size": None,
             **{f"recall@{k}": recall_at_k(dense, gold, k) for k in ks}}]
    for m in base_sizes:
        res = graph_expand(graph, t_emb, q_emb, dense[:, :fusion_depth or m], mode="naive",
                           seed_passages=m, beam_width=beam_width, max_len=max_len, gamma=gamma,
                           max_neighbors=max_neighbors, backend=backend)
        ranked = [pad_ranking(f, d, max(ks)) for f, d in zip(res.passages, dense)]
        rows.append({"method": "dense + NaiveGE", "base_size": m, "fusion_depth": fusion_depth or m,
                     "mean_expansion_passages": float(np.mean([len(e) for e in res.expansion])),
                     **{f"recall@{k}": recall_at_k(ranked, gold, k) for k in ks}})
    return {"rows": rows, "graph": graph.degree_stats(), "n_questions": len(ds.questions),
            "encoder": enc.name,
            "settings": {"beam_width": beam_width, "max_len": max_len, "gamma": gamma,
                         "max_neighbors": max_neighbors, "max_degree": max_degree,
                         "fusion_depth": fusion_depth,
                         "rrf_k": RRF_K, "scoring": "sum"}}


__all__ = ["reciprocal_rank_fusion", "graph_expand", "ExpansionResult", "link_triples",
           "recall_at_k", "dense_rankings", "evaluate_musique", "RRF_K"]
