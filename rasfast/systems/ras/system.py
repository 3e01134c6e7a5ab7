"""Ready-made loops and their evaluation: ``build_ras(dataset)`` wires the default components
(dense retriever, cached extractor, heuristic planner/answerer) over a QADataset, and
``evaluate(ras, dataset)`` runs its questions in batches and scores them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from ...encode import make_encoder  # noqa: F401 (re-exported: its old home)
from ...profile import Trace
from .extractors import CachedTripleExtractor, SentenceTripleExtractor
from .heuristic import GraphPathReasoner, HeuristicAnswerer, HeuristicPlanner
from .loop import RAS, RASResult
from ...metrics import answer_scores, recall_at_k
from .retrievers import DenseRetriever, FaissRetriever


RETRIEVERS = ("dense", "faiss", "gear")


def make_retriever(kind: str, passages: Sequence, encoder, embeddings=None, dataset=None):
    """"dense" (exact), "faiss", or "gear" (dense + GEAR NaiveGE over ``dataset.triples``)
    over the passages' embeddings (encoded and cached on disk unless given)."""
    from ...encode import encode_cached
    if kind not in RETRIEVERS:
        raise ValueError(f"retriever: expected one of {', '.join(RETRIEVERS)}, got {kind!r}")
    emb = embeddings if embeddings is not None else encode_cached(encoder, [p.content for p in passages])
    if kind == "faiss":
        return FaissRetriever(passages, emb, encoder)
    dense = DenseRetriever(passages, emb, encoder)
    if kind == "gear":
        if dataset is None or getattr(dataset, "triples", None) is None:
            raise ValueError("retriever: 'gear' needs a dataset with triples (demo, MuSiQue)")
        from .retrievers import GraphExpandedRetriever
        return GraphExpandedRetriever.from_dataset(dense, dataset, base_k=10)
    return dense


def build_ras(dataset, encoder: Union[str, Any] = "minilm", retriever: str = "dense",
              k: int = 5, max_iters: int = 5, graph_encoder=None, planner=None, answerer=None,
              embeddings=None, extract_fallback=None) -> RAS:
    """The default loop over a QADataset: dense retrieval over its passages, triples from the
    dataset (gold/OpenIE; sentence patterns for passages without), heuristic planner and
    answerer sharing one encoder-backed reasoner (unless planner/answerer are given).
    ``retriever`` is a kind for :func:`make_retriever` or a ready retriever object;
    ``extract_fallback`` converts passages the dataset has no triples for (e.g. an
    ``rasfast.llm.adapters.LLMTripleExtractor``; default: sentence patterns)."""
    enc = make_encoder(encoder)
    ret = retriever if not isinstance(retriever, str) else \
        make_retriever(retriever, dataset.passages, enc, embeddings, dataset=dataset)
    if extract_fallback is None and getattr(dataset, "triples", None) is None:
        extract_fallback = SentenceTripleExtractor()
    ext = CachedTripleExtractor.from_dataset(dataset, fallback=extract_fallback)
    reasoner = GraphPathReasoner(ret.encoder)
    return RAS(ret, ext, planner or HeuristicPlanner(reasoner=reasoner),
               answerer or HeuristicAnswerer(reasoner=reasoner), graph_encoder=graph_encoder,
               max_iters=max_iters, k=k)


@dataclass
class EvalReport:
    dataset: str
    n: int
    metrics: Dict[str, float]
    by_type: Dict[str, Dict[str, float]] = field(default_factory=dict)
    trace: Optional[Trace] = None
    results: List[RASResult] = field(default_factory=list)

    def table(self) -> str:
        keys = list(self.metrics)
        lines = [f"{'subset':<34}{'n':>5}" + "".join(f"{k:>11}" for k in keys)]
        lines.append(f"{self.dataset + ' (all)':<34}{self.n:>5}" + "".join(f"{self.metrics[k]:>11.3f}" for k in keys))
        for t, m in sorted(self.by_type.items()):
            lines.append(f"{'  ' + t:<34}{int(m['n']):>5}" + "".join(f"{m[k]:>11.3f}" for k in keys))
        return "\n".join(lines)


def evaluate(ras: RAS, dataset, n: Optional[int] = None, batch_size: int = 32,
             recall_ks: Sequence[int] = (2, 5), progress: bool = False) -> EvalReport:
    """Runs the loop over the first ``n`` questions and averages: answer acc (golden match),
    f1, em; recall of the gold passages among the loop's retrieved passages: ``R@k`` pools the
    top-k of every step's sub-query (the loop's own evidence at k per step), ``R@all`` all
    retrieved passages; retrieval rounds and errors per question."""
    qs = dataset.questions[: n or len(dataset.questions)]
    trace = Trace(f"eval-{dataset.name}")
    results: List[RASResult] = []
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(qs), desc=f"eval {dataset.name}", unit="q")
    for s in range(0, len(qs), batch_size):
        chunk = qs[s:s + batch_size]
        results.extend(ras.run_batch([q.question for q in chunk], trace=trace))
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    rows = []
    for q, r in zip(qs, results):
        m = answer_scores(r.answer or "", q.answers)
        for k in recall_ks:
            pooled = {p.pid for step in r.step_passages for p in step[:k]}
            m[f"R@{k}"] = recall_at_k(list(pooled), q.gold_pids, len(pooled))
        m["R@all"] = recall_at_k(r.retrieved_pids, q.gold_pids, len(r.retrieved_pids))
        m["rounds"] = float(len(r.subqueries))
        m["errors"] = float(r.error is not None)
        rows.append((q.type or "all", m))
    keys = list(rows[0][1]) if rows else []
    metrics = {k: float(np.mean([m[k] for _, m in rows])) for k in keys}
    by_type: Dict[str, Dict[str, float]] = {}
    for t in sorted({t for t, _ in rows}):
        sub = [m for tt, m in rows if tt == t]
        by_type[t] = {"n": float(len(sub)), **{k: float(np.mean([m[k] for m in sub])) for k in keys}}
    for h in sorted({t.split(":", 1)[0] for t in by_type if ":" in t}):  # e.g. 2hop / 3hop
        sub = [m for tt, m in rows if tt.split(":", 1)[0] == h]
        by_type[h] = {"n": float(len(sub)), **{k: float(np.mean([m[k] for m in sub])) for k in keys}}
    if len(by_type) == 1:
        by_type = {}
    return EvalReport(dataset.name, len(qs), metrics, by_type, trace, results)


__all__ = ["build_ras", "evaluate", "EvalReport", "make_encoder", "make_retriever"]
