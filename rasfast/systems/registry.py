"""The system registry: every graph-RAG system runs from one :class:`KnowledgeIndex`.

``build_system(name, kindex, *, encoder, llm=None, **opts)`` returns an object with
``run_batch(questions) -> list`` of results carrying at least ``.question``, ``.answer``
(str or None), ``.passages`` (ranked ``RetrievedPassage`` list) and ``.trace``
(``rasfast.profile.Trace``). Everything comes from the index: passages, embeddings, theme
model, triples, triple graph and triple embeddings; nothing is re-derived.

Registered here:

- ``ras``: the RAS loop (rasfast.systems.ras.RAS): plan -> theme-scoped retrieval -> triples of
  the retrieved passages from the index -> question graph -> answer. ``llm`` (an
  rasfast.llm backend) plans and answers; without one the model-free heuristic baseline.
- ``ras+passages`` / ``ras-passages``: rasfast's own variants of RAS's answering step (its
  reader also reads the passages of every round / reads those passages instead of triples).
- ``gear``: the GEAR agent (multi-step, gist memory, SyncGE with the LLM's read, passageLink;
  rasfast.systems.gear); ``gear-sync`` and ``gear-naive``: the paper's single-step
  retrievers (base + SyncGE, base + NaiveGE). Each reads its top ``k`` passages.
- ``kirag`` / ``structrag``: imported lazily from ``rasfast.systems.kirag`` / ``rasfast.systems.structrag``,
  whose ``from_components(retriever, triples_by_pid, encoder, llm=None, **opts)`` build them;
  ``structrag-chunk``: StructRAG with every question routed to "chunk" (its ablation's
  strongest single type; a rasfast variant).

Every system's final answer goes through the reader contract (rasfast.llm.reader).
``read=False`` builds a system's preparation alone, for a caller that reads itself
(``rasfast eval qa``'s read phase): RAS's loop without its answering step, KiRAG without its
reader, StructRAG's utilizer returning the reader input unread.

Options shared by all: ``k`` (passages per retrieval and passages the reader reads, 5; passed
to kirag as ``top_k`` and ``reader_docs``), ``retriever`` (the base retriever: ``"dense"``,
``"bm25"`` or ``"hybrid"``, their RRF), ``reader`` (``"contract"`` or ``"one-shot"``, GEAR's
App. J.3 prompt), ``scope_k`` (theme scope size K; None = unscoped dense), ``backend`` (theme
kernels). ras also takes ``graph_encoder`` (a loop graph encoder, e.g.
``rasfast.systems.ras.graph_encoding.GNNGraphEncoder``), ``max_iters`` (5), ``expand=True``
(GEAR's NaiveGE expansion as its retriever, with ``base_k`` and ``expand_kwargs``); the gear
systems take ``max_iters`` (agent rounds: 4, the paper's MuSiQue setting), ``base_k`` (chunks
per round, 10) and ``link_k`` (passages per gist triple in passageLink, 5).
"""
from __future__ import annotations

import importlib
import pathlib
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from .. import types as _types

Factory = Callable[..., Any]

_FACTORIES: Dict[str, Factory] = {}
# systems built elsewhere: name -> module exposing from_components(retriever, triples_by_pid, encoder, llm, **opts)
_LAZY_MODULES = {"kirag": "rasfast.systems.kirag", "structrag": "rasfast.systems.structrag"}
# the generic ``k`` (passages per retrieval) under each of those systems' own option name
_K_OPTION = {"kirag": "top_k", "structrag": "k"}


def register_system(name: str, factory: Factory) -> None:
    """Registers ``factory(kindex, *, encoder, llm=None, **opts) -> system`` under ``name``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"name: expected a non-empty str, got {name!r}")
    if not callable(factory):
        raise TypeError(f"factory: expected a callable, got {type(factory).__name__}")
    _FACTORIES[name] = factory


def system_names() -> List[str]:
    return sorted(set(_FACTORIES) | set(_LAZY_MODULES))


def build_system(name: str, kindex, *, encoder, llm=None, **opts):
    """The system ``name`` over ``kindex`` (see the module docstring)."""
    if name not in _FACTORIES and name in _LAZY_MODULES:
        _FACTORIES[name] = _components_factory(name, _LAZY_MODULES[name])
    if name not in _FACTORIES:
        raise ValueError(f"system: expected one of {', '.join(system_names())}, got {name!r}")
    if encoder is None or getattr(encoder, "dim", None) != kindex.dim:
        raise ValueError(f"encoder: the index was built with {kindex.encoder_name!r} "
                         f"(dim {kindex.dim}); got {getattr(encoder, 'name', encoder)!r}")
    return _FACTORIES[name](kindex, encoder=encoder, llm=llm, **opts)


# -- results ---------------------------------------------------------------------------------
SystemResult = _types.SystemResult   # defined in rasfast.types (the gear systems return it too)


RETRIEVERS = ("dense", "bm25", "hybrid")


def base_retriever(kindex, encoder, kind: str = "dense", scope_k: Optional[int] = None,
                   backend: str = "auto"):
    """The base retriever ``kind`` over ``kindex``: dense (theme-scoped with ``scope_k``),
    BM25 over the passages (the index's saved BM25), or GEAR's hybrid (RRF of the two)."""
    from .ras.retrievers import BM25Retriever, HybridRetriever, ThemeIndexRetriever
    if kind not in RETRIEVERS:
        raise ValueError(f"retriever: expected one of {', '.join(RETRIEVERS)}, got {kind!r}")
    if scope_k is not None:
        scope_k = min(int(scope_k), len(kindex))
    dense = ThemeIndexRetriever(kindex.theme, encoder, K=scope_k, backend=backend)
    if kind == "dense":
        return dense
    sparse = BM25Retriever(kindex.bm25, dense)
    return sparse if kind == "bm25" else HybridRetriever(dense, sparse)


_retriever = base_retriever


class LoopSystem:
    """A RAS loop over the index whose results are :class:`SystemResult` (``detail`` holds
    the loop's RASResult with plan steps, sub-queries and per-step triples)."""

    def __init__(self, ras, name: str):
        self.ras, self.name = ras, name

    def run_batch(self, questions: Sequence[str], trace=None) -> List[SystemResult]:
        out = []
        for r in self.ras.run_batch(list(questions), trace=trace):
            seen, ranked = set(), []
            for step in r.step_passages:
                for p in step:
                    if p.pid not in seen:
                        seen.add(p.pid)
                        ranked.append(p)
            out.append(SystemResult(r.question, r.answer, ranked, r.trace, r.triples, r.error, r,
                                    r.shown, r.reply))
        return out

    def run(self, question: str) -> SystemResult:
        return self.run_batch([question])[0]


class DeferredAnswerer:
    """The answerer of a RAS loop built with ``read=False``: it answers nothing, so the loop
    is its preparation alone (plan, retrieve, triples) and the caller's reader answers."""

    def answer(self, states):
        return [None for _ in states]


def loop_extractor(kindex):
    """The RAS loop's triples over a knowledge index: the index's own; an index built without
    any falls back to sentence patterns."""
    from .ras.extractors import CachedTripleExtractor, SentenceTripleExtractor
    fallback = SentenceTripleExtractor() if kindex.extraction.get("source") == "none" else None
    return CachedTripleExtractor(None if fallback else kindex.triples_by_pid, fallback)


def _loop(kindex, encoder, llm, retriever, k: int, max_iters: int, graph_encoder, name: str,
          context: str = "facts", reader: str = "contract", read: bool = True):
    from .ras.heuristic import GraphPathReasoner, HeuristicAnswerer, HeuristicPlanner
    from .ras.loop import RAS
    ext = loop_extractor(kindex)
    if llm is not None:
        from ..llm.adapters import LLMAnswerer, LLMPlanner
        planner, answerer = LLMPlanner(llm), LLMAnswerer(llm, context=context, reader=reader)
    else:
        reasoner = GraphPathReasoner(retriever.encoder)
        planner, answerer = HeuristicPlanner(reasoner=reasoner), HeuristicAnswerer(reasoner=reasoner)
    if not read:
        answerer = DeferredAnswerer()
    return LoopSystem(RAS(retriever, ext, planner, answerer, graph_encoder=graph_encoder,
                          max_iters=max_iters, k=k), name)


def _ras_factory(name: str, context: str):
    def factory(kindex, *, encoder, llm=None, k: int = 5, max_iters: int = 5, scope_k=None,
                graph_encoder=None, backend: str = "auto", expand: bool = False, base_k: int = 10,
                expand_kwargs: Optional[Dict[str, Any]] = None, retriever: str = "dense",
                reader: str = "contract", read: bool = True):
        ret = base_retriever(kindex, encoder, retriever, scope_k, backend)
        if expand:   # RAS with GEAR's expansion as its retriever (the demo's configuration)
            ret = _gear_retriever(kindex, ret, base_k, expand_kwargs)
        return _loop(kindex, encoder, llm, ret, k, max_iters, graph_encoder, name, context, reader, read)
    return factory


def _gear_retriever(kindex, base, base_k: int, expand_kwargs: Optional[Dict[str, Any]]):
    from .ras.retrievers import GraphExpandedRetriever
    if kindex.graph.num_triples == 0:
        raise ValueError("system gear: the index has no triples (build it from a corpus with "
                         "triples or with --extract-triples)")
    return GraphExpandedRetriever(base, kindex.graph, kindex.triple_emb, base_k=base_k,
                                  **(expand_kwargs or {}))


def _gear_factory(name: str, mode: str):
    def factory(kindex, *, encoder, llm=None, k: int = 5, scope_k=None, base_k: int = 10,
                link_k: int = 5, max_iters: int = 4, backend: str = "auto", retriever: str = "dense",
                reader: str = "contract", beam: Optional[Dict[str, Any]] = None):
        from .gear.system import build
        if llm is None and mode != "naive":
            raise ValueError(f"system {name}: GEAR's read step needs an LLM (--llm); without one, "
                             "gear-naive (NaiveGE) runs model-free")
        base = base_retriever(kindex, encoder, retriever, scope_k, backend)
        offline = None
        if llm is None:   # model-free: the heuristic answerer over the top passages' triples
            from .ras.heuristic import GraphPathReasoner, HeuristicAnswerer
            offline = HeuristicAnswerer(reasoner=GraphPathReasoner(base.encoder))
        return build(kindex, base, llm=llm, mode=mode, k=k, reader=reader, max_iters=max_iters,
                     base_k=base_k, link_k=link_k, backend=backend, beam=beam, name=name,
                     offline_answerer=offline)
    return factory


def _components_factory(name: str, module: str) -> Factory:
    def factory(kindex, *, encoder, llm=None, scope_k=None, backend: str = "auto", k=None,
                retriever: str = "dense", reader: str = "contract", **opts):
        if k is not None:
            opts.setdefault(_K_OPTION.get(name, "k"), k)
            if name == "kirag":
                opts.setdefault("reader_docs", k)   # the reader reads the same k as dense RAG
        if name == "kirag":
            opts.setdefault("reader_prompt", reader)
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            raise ValueError(f"system {name}: module {module} is not available in this install "
                             f"({e}); it ships with the {name} branch of rasfast") from None
        fc = getattr(mod, "from_components", None)
        if not callable(fc):
            raise ValueError(f"system {name}: {module} has no from_components(retriever, "
                             f"triples_by_pid, encoder, llm=None, **opts)")
        if name == "kirag" and getattr(encoder, "name", None) == kindex.encoder_name \
                and kindex.graph.num_triples:
            # the index's triple embeddings are the zero-shot aligner's (same encoder):
            # KiRAG reuses them instead of encoding every triple it meets again
            g = kindex.graph
            opts.setdefault("triple_table", (np.asarray(kindex.triple_emb, dtype=np.float32),
                                             np.asarray(g.passage_ids), g.texts))
        if name == "structrag" and "router" not in opts and kindex.path is not None:
            # a trained router saved beside the index (rasfast.systems.structrag.ROUTER_DIR) is the
            # paper's router: used when present, over the prompt and cue-word routers
            from .structrag.router import ROUTER_DIR, load_router
            saved = pathlib.Path(kindex.path) / ROUTER_DIR
            if (saved / "router.json").is_file():
                opts["router"] = load_router(saved, encoder)
        if name == "structrag":
            opts.setdefault("reader", reader)
        return fc(base_retriever(kindex, encoder, retriever, scope_k, backend), kindex.triples_by_pid, encoder,
                  llm=llm, **opts)
    return factory


def _structrag_chunk(kindex, *, encoder, llm=None, **opts):
    """StructRAG with every question routed to "chunk" (rasfast's variant)."""
    from .structrag.router import FixedRouter
    opts["router"] = FixedRouter("chunk")
    return build_system("structrag", kindex, encoder=encoder, llm=llm, **opts)


register_system("ras", _ras_factory("ras", "facts"))
register_system("ras+passages", _ras_factory("ras+passages", "facts+passages"))
register_system("ras-passages", _ras_factory("ras-passages", "passages"))
register_system("gear", _gear_factory("gear", "agent"))
register_system("gear-sync", _gear_factory("gear-sync", "sync"))
register_system("gear-naive", _gear_factory("gear-naive", "naive"))
register_system("structrag-chunk", _structrag_chunk)

__all__ = ["register_system", "build_system", "system_names", "base_retriever", "loop_extractor", "RETRIEVERS",
           "SystemResult", "LoopSystem"]
