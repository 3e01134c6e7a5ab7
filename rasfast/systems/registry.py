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
- ``gear``: GEAR: one retrieval round of dense (theme-scoped) search + graph expansion over
  the index's triple graph (diverse triple beam search, RRF), then the answerer reads the
  retrieved passages' triples.
- ``kirag`` / ``structrag``: imported lazily from ``rasfast.systems.kirag`` / ``rasfast.systems.structrag``,
  whose ``from_components(retriever, triples_by_pid, encoder, llm=None, **opts)`` build them.

Options shared by all: ``k`` (passages per retrieval, 5; passed to kirag as ``top_k``),
``scope_k`` (theme scope size K; None = unscoped dense), ``backend`` (theme kernels). ras and
gear also take ``graph_encoder`` (a loop graph encoder, e.g.
``rasfast.systems.ras.graph_encoding.GNNGraphEncoder``), ``base_k`` (base passages seeding the
expansion, 10) and ``expand_kwargs`` (for ``rasfast.gear.graph_expand``); ras takes
``max_iters`` (5) and ``expand=True`` (GEAR's expansion as its retriever).
"""
from __future__ import annotations

import importlib
import pathlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

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
@dataclass
class SystemResult:
    question: str
    answer: Optional[str]
    passages: List[Any]                 # ranked RetrievedPassage list
    trace: Any
    triples: List[tuple] = field(default_factory=list)
    error: Optional[Any] = None
    detail: Any = None                  # the system's own result (e.g. RASResult)


def _retriever(kindex, encoder, scope_k: Optional[int] = None, backend: str = "auto"):
    from .ras.retrievers import ThemeIndexRetriever
    if scope_k is not None:
        scope_k = min(int(scope_k), len(kindex))
    return ThemeIndexRetriever(kindex.theme, encoder, K=scope_k, backend=backend)


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
            out.append(SystemResult(r.question, r.answer, ranked, r.trace, r.triples, r.error, r))
        return out

    def run(self, question: str) -> SystemResult:
        return self.run_batch([question])[0]


def _loop(kindex, encoder, llm, retriever, k: int, max_iters: int, graph_encoder, name: str):
    from .ras.extractors import CachedTripleExtractor, SentenceTripleExtractor
    from .ras.heuristic import GraphPathReasoner, HeuristicAnswerer, HeuristicPlanner
    from .ras.loop import RAS
    # the index's triples; an index built without any falls back to sentence patterns
    fallback = SentenceTripleExtractor() if kindex.extraction.get("source") == "none" else None
    ext = CachedTripleExtractor(None if fallback else kindex.triples_by_pid, fallback)
    if llm is not None:
        from ..llm.adapters import LLMAnswerer, LLMPlanner
        planner, answerer = LLMPlanner(llm), LLMAnswerer(llm)
    else:
        reasoner = GraphPathReasoner(retriever.encoder)
        planner, answerer = HeuristicPlanner(reasoner=reasoner), HeuristicAnswerer(reasoner=reasoner)
    return LoopSystem(RAS(retriever, ext, planner, answerer, graph_encoder=graph_encoder,
                          max_iters=max_iters, k=k), name)


def _ras(kindex, *, encoder, llm=None, k: int = 5, max_iters: int = 5, scope_k=None,
         graph_encoder=None, backend: str = "auto", expand: bool = False, base_k: int = 10,
         expand_kwargs: Optional[Dict[str, Any]] = None):
    ret = _retriever(kindex, encoder, scope_k, backend)
    if expand:   # RAS with GEAR's expansion as its retriever (the demo's configuration)
        ret = _gear_retriever(kindex, ret, base_k, expand_kwargs)
    return _loop(kindex, encoder, llm, ret, k, max_iters, graph_encoder, "ras")


def _gear_retriever(kindex, base, base_k: int, expand_kwargs: Optional[Dict[str, Any]]):
    from .ras.retrievers import GraphExpandedRetriever
    if kindex.graph.num_triples == 0:
        raise ValueError("system gear: the index has no triples (build it from a corpus with "
                         "triples or with --extract-triples)")
    return GraphExpandedRetriever(base, kindex.graph, kindex.triple_emb, base_k=base_k,
                                  **(expand_kwargs or {}))


def _gear(kindex, *, encoder, llm=None, k: int = 5, scope_k=None, base_k: int = 10,
          graph_encoder=None, backend: str = "auto", expand_kwargs=None):
    ret = _gear_retriever(kindex, _retriever(kindex, encoder, scope_k, backend), base_k, expand_kwargs)
    return _loop(kindex, encoder, llm, ret, k, 1, graph_encoder, "gear")


def _components_factory(name: str, module: str) -> Factory:
    def factory(kindex, *, encoder, llm=None, scope_k=None, backend: str = "auto", k=None, **opts):
        if k is not None:
            opts.setdefault(_K_OPTION.get(name, "k"), k)
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
        return fc(_retriever(kindex, encoder, scope_k, backend), kindex.triples_by_pid, encoder,
                  llm=llm, **opts)
    return factory


register_system("ras", _ras)
register_system("gear", _gear)

__all__ = ["register_system", "build_system", "system_names", "SystemResult", "LoopSystem"]
