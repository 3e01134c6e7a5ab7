"""Retrievers for the loop: exact dense search, faiss, theme-scoped, BM25, the BM25 + dense
hybrid, and GEAR graph-expanded.

All are batched (``retrieve(queries, k)`` encodes every query of the round in one encoder call)
and record their stages on the active trace: ``encode`` (category "model"), ``scope``,
``dense``, ``bm25``, ``expand``. Every one also has ``search_text(queries, k, q_emb=None)``
-> (index rows [B, k] padded with -1, scores), which graph expansion and GEAR run on
whichever base retriever they are given.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from ...profile import TimedEncoder, span
from ...types import RetrievedPassage


def _timed(encoder):
    return encoder if isinstance(encoder, TimedEncoder) else TimedEncoder(encoder)


def _check_corpus(passages, embeddings) -> np.ndarray:
    emb = np.asarray(embeddings)
    if emb.ndim != 2:
        raise ValueError(f"embeddings: expected [N, D], got shape {emb.shape}")
    if emb.shape[0] != len(passages):
        raise ValueError(f"embeddings: {emb.shape[0]} rows for {len(passages)} passages")
    return np.ascontiguousarray(emb, dtype=np.float32)


def _top_k(scores: np.ndarray, k: int, small: int = 1 << 16):
    """Top-k per row, ordered (score desc, id asc). Small rows use numpy's argpartition
    (a single-threaded O(N) pass: no thread start-up for a 2,000-passage corpus); large rows
    go to rasfast.select_k (C++/OpenMP)."""
    k = min(k, scores.shape[1])
    if scores.shape[1] > small:
        try:
            from ...ops.select import select_k
            vals, idx = select_k(scores, k, largest=True)
            return np.asarray(vals), np.asarray(idx)
        except Exception:  # no compiled module: fall through to numpy
            pass
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k] if k < scores.shape[1] else \
        np.broadcast_to(np.arange(scores.shape[1]), scores.shape).copy()
    vals = np.take_along_axis(scores, part, 1)
    order = np.lexsort((part, -vals), axis=1)
    idx = np.take_along_axis(part, order, 1)
    return np.take_along_axis(vals, order, 1), idx


class DenseRetriever:
    """Exact inner-product search over L2-normalised passage embeddings (cosine)."""

    kind = "dense"

    def __init__(self, passages: Sequence, embeddings, encoder):
        self.passages = list(passages)
        self.embeddings = _check_corpus(self.passages, embeddings)
        if encoder.dim != self.embeddings.shape[1]:
            raise ValueError(f"encoder: dim {encoder.dim} != embeddings dim {self.embeddings.shape[1]}")
        self.encoder = _timed(encoder)

    @classmethod
    def from_passages(cls, passages: Sequence, encoder, cache: bool = True) -> "DenseRetriever":
        """Encodes the passages' ``content`` (cached on disk by default)."""
        from ...encode import encode_cached
        texts = [p.content for p in passages]
        emb = encode_cached(encoder, texts) if cache else encoder.encode(texts)
        return cls(passages, emb, encoder)

    def row_pids(self) -> List[int]:
        """Passage id of every row that :meth:`search` returns."""
        return [int(p.pid) for p in self.passages]

    def to_passages(self, ids: np.ndarray, scores: np.ndarray) -> List[List[RetrievedPassage]]:
        """Row ids/scores from :meth:`search` as passages (-1 padding dropped)."""
        out = []
        for row_i, row_s in zip(ids, scores):
            hits = []
            for i, s in zip(row_i.tolist(), row_s.tolist()):
                if i < 0:
                    continue
                p = self.passages[i]
                hits.append(RetrievedPassage(int(p.pid), p.title, p.text, float(s)))
            out.append(hits)
        return out

    def search(self, q_emb: np.ndarray, k: int):
        with span("dense", batch=len(q_emb), k=k):
            scores, ids = _top_k(q_emb @ self.embeddings.T, k)
        return ids, scores

    def search_text(self, queries: Sequence[str], k: int, q_emb=None):
        q = self.encoder.encode(list(queries)) if q_emb is None else q_emb
        return self.search(q, k)

    def retrieve(self, queries: Sequence[str], k: int) -> List[List[RetrievedPassage]]:
        if not queries:
            return []
        ids, scores = self.search_text(queries, k)
        return self.to_passages(ids, scores)


class FaissRetriever(DenseRetriever):
    """The same search through a faiss ``IndexFlatIP`` (faiss-cpu or faiss-gpu)."""

    def __init__(self, passages: Sequence, embeddings, encoder):
        super().__init__(passages, embeddings, encoder)
        try:
            import faiss
        except ImportError as e:
            raise ImportError("FaissRetriever needs faiss (pip install 'rasfast[faiss]')") from e
        self.index = faiss.IndexFlatIP(self.embeddings.shape[1])
        self.index.add(self.embeddings)

    def search(self, q_emb: np.ndarray, k: int):
        with span("dense", batch=len(q_emb), k=k, impl="faiss"):
            scores, ids = self.index.search(np.ascontiguousarray(q_emb, dtype=np.float32),
                                            min(k, len(self.passages)))
        return ids, scores


class ThemeIndexRetriever(DenseRetriever):
    """Dense flat or theme-scoped search over a :class:`rasfast.ThemeIndex`.

    With ``K=None`` the search is flat over the whole index (``index.dense_search``); with
    ``K`` set, the index's theme model maps the query embeddings to theme vectors (``scope``
    span) and ``index.search`` keeps the K theme-nearest rows (per shard or globally) and
    returns the top-k by dense score inside them.
    """

    def __init__(self, index, encoder, K: Optional[int] = None, scope: str = "per_shard",
                 theme_weight: float = 0.0, backend: str = "auto"):
        if encoder.dim != index.dim:
            raise ValueError(f"encoder: dim {encoder.dim} != index dim {index.dim}")
        if K is not None and (index.ppd is None or index.theme_model is None):
            raise ValueError("K: theme scoping needs an index built with theme vectors and a theme model")
        self.index = index
        self.encoder = _timed(encoder)
        self.K, self.scope, self.theme_weight, self.backend = K, scope, theme_weight, backend

    def search(self, q_emb: np.ndarray, k: int):
        if self.K is None:
            with span("dense", batch=len(q_emb), k=k):
                ids, scores = self.index.dense_search(q_emb, k, backend=self.backend)
        else:
            with span("scope", batch=len(q_emb), K=self.K):
                q_ppd = self.index.query_ppd(q_emb)
            with span("dense", batch=len(q_emb), k=k, K=self.K):
                ids, scores = self.index.search(q_ppd, q_emb, self.K, k, scope=self.scope,
                                                theme_weight=self.theme_weight, backend=self.backend)
        return np.asarray(ids), np.asarray(scores)

    def row_pids(self) -> List[int]:
        return [int(p) for p in np.asarray(self.index.pids)]

    def to_passages(self, ids, scores) -> List[List[RetrievedPassage]]:
        return self.index.passages(ids, np.asarray(scores, dtype=np.float32))


def _rows(lists, k: int, dtype=np.float32):
    """Ragged (rows, scores) per query -> [B, k] arrays padded with -1 / 0."""
    ids = np.full((len(lists), k), -1, dtype=np.int64)
    sc = np.zeros((len(lists), k), dtype=dtype)
    for b, (r, s) in enumerate(lists):
        n = min(k, len(r))
        ids[b, :n], sc[b, :n] = np.asarray(r)[:n], np.asarray(s)[:n]
    return ids, sc


class BM25Retriever:
    """BM25 (:class:`rasfast.index.bm25.BM25Index`) over the passages of a dense retriever's
    index (``base``: a ThemeIndexRetriever / DenseRetriever giving rows, passages and the
    query encoder that graph expansion scores with). Passages with score 0 share no word
    with the query and are not returned."""

    kind = "bm25"

    def __init__(self, bm25, base):
        self.bm25, self.base = bm25, base
        self.encoder = base.encoder
        self._pid_row = {int(p): r for r, p in enumerate(base.row_pids())}

    def row_pids(self) -> List[int]:
        return self.base.row_pids()

    def to_passages(self, ids, scores) -> List[List[RetrievedPassage]]:
        return self.base.to_passages(ids, scores)

    def search_text(self, queries: Sequence[str], k: int, q_emb=None):
        with span("bm25", batch=len(queries), k=k):
            got = self.bm25.search(list(queries), k)
        return _rows([([self._pid_row[int(p)] for p in pids], s) for pids, s in got], k)

    def retrieve(self, queries: Sequence[str], k: int) -> List[List[RetrievedPassage]]:
        if not queries:
            return []
        return self.to_passages(*self.search_text(queries, k))


class HybridRetriever:
    """GEAR's hybrid base retriever: Reciprocal Rank Fusion (k = 60) of the dense and the BM25
    rankings, each taken ``depth`` deep (default max(2k, 30)); scores are the RRF scores."""

    kind = "hybrid"

    def __init__(self, dense, bm25: BM25Retriever, depth: Optional[int] = None, rrf_k: float = 60.0):
        self.dense, self.sparse, self.depth, self.rrf_k = dense, bm25, depth, rrf_k
        self.encoder = dense.encoder

    def row_pids(self) -> List[int]:
        return self.dense.row_pids()

    def to_passages(self, ids, scores) -> List[List[RetrievedPassage]]:
        return self.dense.to_passages(ids, scores)

    def search_text(self, queries: Sequence[str], k: int, q_emb=None):
        from ..gear.expand import reciprocal_rank_fusion
        depth = self.depth or max(2 * k, 30)
        q = self.encoder.encode(list(queries)) if q_emb is None else q_emb
        d_ids, _ = self.dense.search_text(queries, depth, q_emb=q)
        s_ids, _ = self.sparse.search_text(queries, depth)
        out = []
        for a, b in zip(np.asarray(d_ids), np.asarray(s_ids)):
            ids, sc = reciprocal_rank_fusion([a[a >= 0], b[b >= 0]], k=self.rrf_k, top=k)
            out.append((ids, sc))
        return _rows(out, k)

    def retrieve(self, queries: Sequence[str], k: int) -> List[List[RetrievedPassage]]:
        if not queries:
            return []
        return self.to_passages(*self.search_text(queries, k))


class GraphExpandedRetriever:
    """GEAR graph expansion over a base retriever (``rasfast.systems.gear.graph_expand``): the base
    top ``base_k`` passages' triples (NaiveGE) seed a diverse triple beam search through the
    corpus triple graph; the beams' passages are fused with the base list by Reciprocal Rank
    Fusion and the top k returned. One batched search per round.

    Args:
        base: a DenseRetriever / FaissRetriever / ThemeIndexRetriever (its ``search`` and
            ``to_passages`` are used; its encoder encodes the queries unless ``encoder``).
        triple_graph: a :class:`rasfast.TripleGraph` whose passage ids are the base's pids.
        triple_emb: [n_triples, D] embeddings of the graph's triple texts.
        base_k: base passages that seed the expansion (default: k).
        expand_kwargs: passed to ``graph_expand`` (beam_width, max_len, gamma, ...).
    """

    def __init__(self, base, triple_graph, triple_emb, encoder=None, base_k: Optional[int] = None,
                 **expand_kwargs):
        self.base = base
        self.graph = triple_graph
        self.triple_emb = np.ascontiguousarray(triple_emb, dtype=np.float32)
        if self.triple_emb.shape[0] != triple_graph.num_triples:
            raise ValueError(f"triple_emb: {self.triple_emb.shape[0]} rows for "
                             f"{triple_graph.num_triples} triples")
        self.encoder = _timed(encoder) if encoder is not None else base.encoder
        self.base_k = base_k
        self.expand_kwargs = expand_kwargs
        pids = base.row_pids()
        self._row_pid = np.asarray(pids, dtype=np.int64)
        self._pid_row = {int(p): r for r, p in enumerate(pids)}

    @classmethod
    def from_dataset(cls, base, dataset, encoder=None, **kw) -> "GraphExpandedRetriever":
        """The graph of ``dataset.triples`` (MuSiQue OpenIE, demo gold triples), its triple
        texts encoded with the base retriever's encoder (cached on disk)."""
        from ...encode import encode_cached
        from ...graph import TripleGraph
        g = TripleGraph.from_dataset(dataset)
        enc = encoder or base.encoder
        return cls(base, g, encode_cached(getattr(enc, "encoder", enc), g.texts), encoder, **kw)

    def retrieve(self, queries: Sequence[str], k: int) -> List[List[RetrievedPassage]]:
        from ..gear import graph_expand
        if not queries:
            return []
        q = self.encoder.encode(list(queries))
        ids, _ = self.base.search_text(queries, self.base_k or k, q_emb=q)
        base_pids = [self._row_pid[row[row >= 0]] for row in np.asarray(ids)]
        with span("expand", batch=len(queries)):
            res = graph_expand(self.graph, self.triple_emb, q, base_pids, top=k, **self.expand_kwargs)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        for b, fused in enumerate(res.passages):
            got = [self._pid_row[int(p)] for p in np.asarray(fused)[:k] if int(p) in self._pid_row]
            rows[b, :len(got)] = got
        # fused rank r scores 1/(1+r): a rank, not a similarity
        return self.base.to_passages(rows, np.broadcast_to(
            (1.0 / (1 + np.arange(k))).astype(np.float32), rows.shape))   # float32: ThemeIndex.passages checks


__all__ = ["DenseRetriever", "FaissRetriever", "ThemeIndexRetriever", "BM25Retriever", "HybridRetriever",
           "GraphExpandedRetriever"]
