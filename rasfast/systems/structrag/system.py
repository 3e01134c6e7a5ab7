"""``StructRAG``: route -> structurize -> decompose -> extract -> infer, batched.

All questions of a ``run_batch`` call advance together and each stage is ONE call for the
batch (one concurrent LLM call per stage: every question's route, every (question, document)
structurizer request, ...). Every stage runs in a span of the trace (``retrieve``, ``route``,
``structurize``, ``decompose``, ``extract``, ``infer``).

Isolation (the RAS loop's mechanism, :func:`rasfast.llm.isolated.call_isolated`): a stage that
raises for the batch is retried item by item; a question whose item still fails -- or whose
LLM request failed for good -- gets an :class:`~rasfast.llm.isolated.ErrorRecord` in its own
result and stops; a document whose structurizer request failed is listed in that question's
``doc_errors`` and the question goes on with its other documents. Results never shift.

Routing: a reply naming no known type falls back to :data:`DEFAULT_TYPE` (``"chunk"``) and is
counted in ``stats["route_fallback"]`` and marked ``result.route_fallback``.
"""
from __future__ import annotations

import pathlib
from collections import Counter
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ..._validate import check_questions
from ...llm.isolated import ErrorRecord, call_isolated
from ...types import RetrievedPassage, Triple
from ...profile import Trace, span
from .parse import parse_route
from .router import HeuristicRouter, LLMRouter
from .structurize import HybridStructurizer, StructTask
from .types import DEFAULT_TYPE, STRUCTURE_TYPES, StructRAGResult, as_documents
from .utilize import Utilizer

STAGES = ("retrieve", "route", "structurize", "decompose", "extract", "infer")


class StructRAG:
    """StructRAG over rasfast's components.

    Args:
        llm: a :mod:`rasfast.llm` backend (OpenAIChat, HFCausalLM, VLLM), or None for the
            offline defaults (cue-word router, model-free structurizers, selection-only
            extraction and the relation-path reasoner).
        retriever: any pipeline retriever (``retrieve(queries, k)``); used when a question
            comes without documents.
        router: ``route([(question, documents)]) -> reply per question`` (default: the LLM
            prompt router, or :class:`HeuristicRouter` offline).
        structurizer: ``structurize([StructTask]) -> [StructureSet]`` (default:
            :class:`HybridStructurizer` over ``triples_by_pid`` and ``llm``).
        utilizer: decompose/extract/infer (default: :class:`Utilizer` over ``llm`` and
            ``encoder``).
        encoder: embeds sub-questions and structure items for extraction (default: the
            retriever's encoder, else the hashing encoder).
        triples_by_pid: passage id -> triples, for the model-free graph and table structures.
        k: documents retrieved per question.
        kg_hops: passed to the default structurizer (0: the paper's behaviour, structures hold
            only the documents' knowledge; n: graph/table structures also follow the corpus
            knowledge graph n hops from the documents' entities).
        extract_k: items the default utilizer selects per sub-question.
        reader: the default utilizer's reader-contract prompt (rasfast.llm.reader).
    """

    def __init__(self, llm=None, retriever=None, router=None, structurizer=None, utilizer=None,
                 encoder=None, triples_by_pid: Optional[Mapping[int, Sequence[Triple]]] = None,
                 k: int = 5, default_type: str = DEFAULT_TYPE, kg_hops: int = 0, extract_k: int = 8,
                 reader: str = "contract"):
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k: expected an int >= 1, got {k!r}")
        if default_type not in STRUCTURE_TYPES:
            raise ValueError(f"default_type: expected one of {STRUCTURE_TYPES}, got {default_type!r}")
        if retriever is not None and not callable(getattr(retriever, "retrieve", None)):
            raise TypeError(f"retriever: expected an object with .retrieve(queries, k), got {type(retriever).__name__}")
        if encoder is None and retriever is not None:
            encoder = getattr(retriever, "encoder", None)
        self.llm = llm
        self.retriever = retriever
        self.router = router if router is not None else (
            LLMRouter(llm) if llm is not None else
            HeuristicRouter("graph" if triples_by_pid else DEFAULT_TYPE))
        self.structurizer = structurizer if structurizer is not None else \
            HybridStructurizer(llm, triples_by_pid, kg_hops=kg_hops)
        self.utilizer = utilizer if utilizer is not None else Utilizer(llm, encoder, extract_k=extract_k,
                                                                       reader=reader)
        for name, obj, meth in (("router", self.router, "route"),
                                ("structurizer", self.structurizer, "structurize")):
            if not callable(getattr(obj, meth, None)):
                raise TypeError(f"{name}: expected an object with .{meth}(), got {type(obj).__name__}")
        for meth in ("decompose", "extract", "infer"):
            if not callable(getattr(self.utilizer, meth, None)):
                raise TypeError(f"utilizer: expected an object with .{meth}(), got {type(self.utilizer).__name__}")
        self.k = k
        self.default_type = default_type
        self.stats: Counter = Counter()

    # -- public --------------------------------------------------------------------------
    def run(self, question: str, documents: Optional[Sequence[Any]] = None,
            trace: Optional[Trace] = None) -> StructRAGResult:
        """Answers one question from ``documents`` (else from the retriever)."""
        return self.run_batch([question], None if documents is None else [documents], trace=trace)[0]

    def run_batch(self, questions: Sequence[str], documents: Optional[Sequence[Optional[Sequence[Any]]]] = None,
                  trace: Optional[Trace] = None) -> List[StructRAGResult]:
        """Answers many questions together; ``documents`` is None (retrieve all) or one
        document list (or None: retrieve) per question."""
        questions = check_questions(questions)
        n = len(questions)
        if documents is not None and (isinstance(documents, (str, bytes)) or len(documents) != n):
            raise ValueError(f"documents: expected one document list per question ({n}), got "
                             f"{len(documents) if not isinstance(documents, (str, bytes)) else 'a str'}")
        docs: List[Optional[List[RetrievedPassage]]] = [None] * n
        if documents is not None:
            for i, d in enumerate(documents):
                docs[i] = None if d is None else as_documents(d, f"documents[{i}]")
        if any(d is None for d in docs) and self.retriever is None:
            raise ValueError("documents: give documents for every question, or build StructRAG with a retriever")

        trace = trace if trace is not None else Trace("structrag", stages=STAGES)
        errors: List[Optional[ErrorRecord]] = [None] * n
        kinds: List[Optional[str]] = [None] * n
        raw_route: List[str] = [""] * n
        fallback = [False] * n
        structures: List[list] = [[] for _ in range(n)]
        doc_errors: List[list] = [[] for _ in range(n)]
        subqs: List[list] = [[] for _ in range(n)]
        sels: List[list] = [[] for _ in range(n)]
        answers: List[Optional[str]] = [None] * n

        with trace.activate(), trace.span("structrag", category="loop", batch=n):
            need = [i for i in range(n) if docs[i] is None]
            got = self._stage("retrieve", lambda qs: self.retriever.retrieve(list(qs), self.k), need,
                              [questions[i] for i in need], errors)
            for i, ps in got.items():
                try:
                    docs[i] = as_documents(list(ps), "retrieved passages")
                except Exception as e:
                    errors[i] = ErrorRecord("retrieve", type(e).__name__, f"malformed retriever result: {e}", 0)

            live = self._live(errors)
            got = self._stage("route", self.router.route, live, [(questions[i], docs[i]) for i in live], errors)
            for i, reply in got.items():
                raw_route[i] = reply if isinstance(reply, str) else str(reply)
                kind, known = parse_route(reply)
                if not known:
                    kind = self.default_type
                    fallback[i] = True
                    self.stats["route_fallback"] += 1
                kinds[i] = kind
                self.stats[f"route_{kind}"] += 1

            live = self._live(errors)
            got = self._stage("structurize", self.structurizer.structurize, live,
                              [StructTask(questions[i], kinds[i], docs[i]) for i in live], errors)
            for i, s in got.items():
                structures[i] = list(s.structures)
                doc_errors[i] = list(s.doc_errors)

            live = self._live(errors)
            got = self._stage("decompose", self.utilizer.decompose, live,
                              [(questions[i], structures[i]) for i in live], errors)
            for i, s in got.items():
                subqs[i] = list(s) or [questions[i]]

            live = self._live(errors)
            got = self._stage("extract", self.utilizer.extract, live, [(subqs[i], structures[i]) for i in live],
                              errors)
            for i, s in got.items():
                sels[i] = list(s)

            live = self._live(errors)
            got = self._stage("infer", self.utilizer.infer, live,
                              [(questions[i], subqs[i], sels[i], structures[i]) for i in live], errors)
            shown: List[Any] = [None] * n
            reply: List[Optional[str]] = [None] * n
            for i, a in got.items():
                if hasattr(a, "shown"):        # a reader-contract ReadResult
                    answers[i], shown[i], reply[i] = a.answer, a.shown, a.reply
                else:
                    answers[i] = None if a is None else str(a)

        return [StructRAGResult(questions[i], answers[i], kinds[i], raw_route[i], fallback[i],
                                docs[i] or [], structures[i], subqs[i], [s.text for s in sels[i]],
                                trace, errors[i], doc_errors[i], shown[i], reply[i]) for i in range(n)]

    # -- internals -----------------------------------------------------------------------
    @staticmethod
    def _live(errors) -> List[int]:
        return [i for i, e in enumerate(errors) if e is None]

    def _stage(self, stage: str, fn: Callable, ids: List[int], items: Sequence[Any],
               errors: List[Optional[ErrorRecord]]) -> Dict[int, Any]:
        """One batched call for the questions ``ids``; a failure -- raised, or an exception
        returned in a question's slot -- becomes that question's error record."""
        if not ids:
            return {}
        with span(stage, batch=len(ids)):
            out, errs = call_isolated(fn, items)
        res: Dict[int, Any] = {}
        for j, i in enumerate(ids):
            e = errs.get(j, out[j] if isinstance(out[j], BaseException) else None)
            if e is not None:
                errors[i] = ErrorRecord.of(stage, e, 0)
                self.stats[f"error_{stage}"] += 1
            else:
                res[i] = out[j]
        return res


def from_components(retriever, triples_by_pid: Optional[Mapping[int, Sequence[Triple]]], encoder,
                    llm=None, **opts) -> StructRAG:
    """The factory the system registry calls (``rasfast ask --system structrag``):
    ``retriever`` follows the pipeline Retriever protocol, ``triples_by_pid`` maps passage id
    -> (s, p, o) triples (model-free graph/table structures), ``encoder`` embeds sub-questions
    and structure items for extraction. ``opts`` go to :class:`StructRAG` (k, router,
    structurizer, utilizer, default_type, kg_hops, extract_k); ``router`` may also be the
    directory of a saved :class:`~.router.EmbeddingRouter` (loaded with ``encoder``);
    ``read=False``: the preparation alone (route, structurize, decompose, extract; the
    utilizer returns the reader input unread, for the caller's reader)."""
    read = opts.pop("read", True)
    if isinstance(opts.get("router"), (str, pathlib.Path)):
        from .router import load_router
        opts["router"] = load_router(opts["router"], encoder)
    system = StructRAG(llm, retriever, encoder=encoder, triples_by_pid=triples_by_pid, **opts)
    if not read:
        system.utilizer.defer_reading = True
    return system


__all__ = ["StructRAG", "from_components", "STAGES", "triples_by_pid"]


def triples_by_pid(dataset) -> Dict[int, list]:
    """passage id -> cleaned triples of a QADataset (empty when it has none)."""
    from ...parse import clean_triples
    if getattr(dataset, "triples", None) is None:
        return {}
    return {p.pid: clean_triples(t) for p, t in zip(dataset.passages, dataset.triples)}
