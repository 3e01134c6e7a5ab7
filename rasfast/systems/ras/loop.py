"""The RAS loop, batched: plan -> retrieve -> extract triples -> grow the question graph ->
(encode the new subgraph) -> plan again ... -> answer.

``RAS.run_batch(questions)`` advances all questions together. Each round makes ONE call per
stage for all still-active questions (one planner call, one retriever call, one extractor
call over the round's distinct passages, one graph-encoder call), so batched components
(GPU retrieval, batched LLM generation) see full batches.

Differences from the reference RAS code, on purpose:
- a component that raises for a batch is retried item by item, so only the failing
  question gets an error record (``RASResult.error``) in its own slot; results never shift;
- the first sub-query is the question itself; a sub-query already asked for that question is
  not retrieved again (the question stops and is answered: its graph cannot change);
- the retriever gets the bare sub-query text (the ``[SUBQ]`` tag is parsed off);
- triple strings are joined with separators (``parse.format_triples``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...llm.isolated import BatchCallError, ErrorRecord, call_isolated  # noqa: F401 (re-exported)
from ..._validate import check_questions
from ...profile import STAGES, Trace, span  # STAGES: this loop's stage order
from ...parse import NoRetrieval, PlanAction, SubQuery, Sufficient, parse_plan
from .qgraph import QuestionGraph
from ...types import (Answerer, LoopState, Planner, RetrievedPassage, Retriever, Triple,
                    TripleExtractor)


@dataclass
class PlanStep:
    """One planner decision: the raw text, what it was parsed into, what the loop did."""
    round: int
    raw: str
    action: PlanAction
    decision: str   # "retrieve", "no_retrieval", "sufficient", "repeat", "max_iters"


@dataclass
class RASResult:
    question: str
    answer: Optional[str]
    plan_steps: List[PlanStep]
    subqueries: List[str]
    step_triples: List[List[Triple]]
    step_passages: List[List[RetrievedPassage]]
    graph: QuestionGraph
    graph_embeddings: List[Any]
    trace: Trace                    # shared by all questions of one run_batch call
    error: Optional[ErrorRecord] = None
    shown: Optional[Any] = None     # what the final reader was shown (rasfast.llm.reader.ReaderInput)
    reply: Optional[str] = None     # the reader's raw reply

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def retrieved_pids(self) -> List[int]:
        """Distinct passage ids retrieved over all steps, in retrieval order."""
        return list(dict.fromkeys(p.pid for step in self.step_passages for p in step))

    @property
    def triples(self) -> List[Triple]:
        return list(dict.fromkeys(t for st in self.step_triples for t in st))


def _norm_query(q: str) -> str:
    return re.sub(r"\s+", " ", q.casefold()).strip(" ?.!")


def _as_triple(t) -> Triple:
    if isinstance(t, str) or len(t) != 3:
        raise ValueError(f"expected a (subject, predicate, object) triple, got {t!r}")
    return (str(t[0]), str(t[1]), str(t[2]))


class RAS:
    """The RAS loop over four batched components (see ``rasfast.types``).

    Args:
        retriever: ``retrieve(queries, k) -> passages per query``.
        extractor: ``extract(passages) -> triples per passage``.
        planner: ``plan(states) -> raw text per state`` (parsed tolerantly).
        answerer: ``answer(states) -> answer text per state``.
        graph_encoder: optional; ``encode_subgraphs(list of triple lists) -> [n, d]`` (or a
            callable doing that). Each step's subgraph is encoded once, when it is added.
        max_iters: most retrieval rounds per question.
        k: passages retrieved per sub-query.
    """

    def __init__(self, retriever: Retriever, extractor: TripleExtractor, planner: Planner,
                 answerer: Answerer, graph_encoder: Any = None, max_iters: int = 5, k: int = 5):
        if not isinstance(max_iters, int) or isinstance(max_iters, bool) or max_iters < 1:
            raise ValueError(f"max_iters: expected an int >= 1, got {max_iters!r}")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k: expected an int >= 1, got {k!r}")
        for name, obj, meth in (("retriever", retriever, "retrieve"), ("extractor", extractor, "extract"),
                                ("planner", planner, "plan"), ("answerer", answerer, "answer")):
            if not callable(getattr(obj, meth, None)):
                raise TypeError(f"{name}: expected an object with a .{meth}() method, got {type(obj).__name__}")
        if graph_encoder is not None and not (callable(getattr(graph_encoder, "encode_subgraphs", None))
                                              or callable(graph_encoder)):
            raise TypeError("graph_encoder: expected an object with .encode_subgraphs() or a callable")
        self.retriever = retriever
        self.extractor = extractor
        self.planner = planner
        self.answerer = answerer
        self.graph_encoder = graph_encoder
        self.max_iters = max_iters
        self.k = k

    # -- public API ----------------------------------------------------------------------
    def run(self, question: str, trace: Optional[Trace] = None) -> RASResult:
        """Answers one question (a batch of one)."""
        return self.run_batch([question], trace=trace)[0]

    def run_batch(self, questions: Sequence[str], trace: Optional[Trace] = None) -> List[RASResult]:
        """Answers many questions; they advance together, each stage batched per round."""
        questions = check_questions(questions)
        trace = trace if trace is not None else Trace()
        n = len(questions)
        states = [LoopState(q, graph=QuestionGraph()) for q in questions]
        plans: List[List[PlanStep]] = [[] for _ in range(n)]
        errors: List[Optional[ErrorRecord]] = [None] * n
        asked: List[set] = [set() for _ in range(n)]

        with trace.activate(), trace.span("loop", category="loop", batch=n):
            # round 0: does the question need retrieval at all?
            pending: Dict[int, str] = {}
            raw = self._stage("plan", lambda s: self.planner.plan(s), list(range(n)), states, errors, 0)
            for i, text in raw.items():
                act = parse_plan(text)
                if isinstance(act, NoRetrieval):
                    plans[i].append(PlanStep(0, text, act, "no_retrieval"))
                else:   # the first sub-query is always the question itself
                    plans[i].append(PlanStep(0, text, act, "retrieve"))
                    pending[i] = questions[i]
            rnd = 0
            while pending:
                rnd += 1
                ids = sorted(pending)
                for i in ids:
                    states[i].subqueries.append(pending[i])
                    asked[i].add(_norm_query(pending[i]))
                got = self._stage("retrieve", lambda qs: self.retriever.retrieve(qs, self.k), ids,
                                  [pending[i] for i in ids], errors, rnd)
                ids = [i for i in ids if i in got]
                self._extract_round(ids, got, states, errors, rnd)
                ids = [i for i in ids if errors[i] is None]
                if self.graph_encoder is not None and ids:
                    self._encode_round(ids, states, errors, rnd)
                    ids = [i for i in ids if errors[i] is None]
                pending = {}
                if rnd >= self.max_iters:
                    for i in ids:
                        plans[i].append(PlanStep(rnd, "", Sufficient(), "max_iters"))
                    break
                raw = self._stage("plan", lambda s: self.planner.plan(s), ids, [states[i] for i in ids],
                                  errors, rnd)
                for i, text in raw.items():
                    act = parse_plan(text)
                    if isinstance(act, SubQuery):
                        if _norm_query(act.text) in asked[i]:
                            plans[i].append(PlanStep(rnd, text, act, "repeat"))
                        else:
                            plans[i].append(PlanStep(rnd, text, act, "retrieve"))
                            pending[i] = act.text
                    else:
                        plans[i].append(PlanStep(rnd, text, act, "sufficient"))
            live = [i for i in range(n) if errors[i] is None]
            answers = self._stage("answer", lambda s: self.answerer.answer(s), live,
                                  [states[i] for i in live], errors, rnd)

        return [RASResult(questions[i], (None if answers.get(i) is None else str(answers[i])),
                          plans[i], list(states[i].subqueries), states[i].step_triples,
                          states[i].step_passages, states[i].graph, states[i].graph_embeddings,
                          trace, errors[i], states[i].reader_input, states[i].reader_reply)
                for i in range(n)]

    # -- stages --------------------------------------------------------------------------
    def _stage(self, stage: str, fn, ids: List[int], items: Sequence[Any],
               errors: List[Optional[ErrorRecord]], rnd: int) -> Dict[int, Any]:
        """One batched call for the questions ``ids`` (``items`` aligned with them); failures
        become error records of their own question."""
        if not ids:
            return {}
        with span(stage, batch=len(ids), round=rnd):
            out, errs = call_isolated(fn, items)
        res = {}
        for j, i in enumerate(ids):
            if j in errs:
                errors[i] = ErrorRecord.of(stage, errs[j], rnd)
            else:
                res[i] = out[j]
        return res

    def _extract_round(self, ids: List[int], got: Dict[int, Any], states: List[LoopState],
                       errors: List[Optional[ErrorRecord]], rnd: int) -> None:
        # a retriever's per-query result must be a list of passages; anything else is that
        # question's error, not a crash of the batch
        ok: List[int] = []
        for i in ids:
            try:
                passages = list(got[i])
                for p in passages:
                    if not isinstance(p.pid, (int, np.integer)):
                        raise TypeError(f"passage pid must be an int, got {type(p.pid).__name__}")
                got[i] = passages
                ok.append(i)
            except Exception as e:
                errors[i] = ErrorRecord("retrieve", type(e).__name__,
                                        f"malformed retriever result: {e}", rnd)
        ids[:] = ok
        # one extractor call over the round's distinct passages (by pid)
        uniq: Dict[int, RetrievedPassage] = {}
        for i in ids:
            for p in got[i]:
                uniq.setdefault(p.pid, p)
        plist = list(uniq.values())
        with span("extract", batch=len(plist), round=rnd):
            out, errs = call_isolated(lambda ps: self.extractor.extract(ps), plist)
        by_pid = {p.pid: (None if j in errs else out[j]) for j, p in enumerate(plist)}
        err_pid = {p.pid: errs[j] for j, p in enumerate(plist) if j in errs}
        with span("graph_build", batch=len(ids), round=rnd):
            for i in ids:
                passages = list(got[i])
                bad = [p.pid for p in passages if p.pid in err_pid]
                if bad:
                    errors[i] = ErrorRecord.of("extract", err_pid[bad[0]], rnd)
                    continue
                try:
                    triples = list(dict.fromkeys(_as_triple(t) for p in passages
                                                 for t in (by_pid[p.pid] or [])))
                except Exception as e:
                    errors[i] = ErrorRecord("extract", type(e).__name__,
                                            f"malformed extractor result: {e}", rnd)
                    continue
                st = states[i]
                st.step_passages.append(passages)
                st.step_triples.append(triples)
                st.graph.add_step(triples)

    def _encode_round(self, ids: List[int], states: List[LoopState],
                      errors: List[Optional[ErrorRecord]], rnd: int) -> None:
        enc = getattr(self.graph_encoder, "encode_subgraphs", None) or self.graph_encoder
        got = self._stage("graph_encode", lambda sub: list(enc(sub)), ids,
                          [states[i].step_triples[-1] for i in ids], errors, rnd)
        for i, v in got.items():
            states[i].graph_embeddings.append(np.asarray(v))


__all__ = ["RAS", "RASResult", "PlanStep", "ErrorRecord", "call_isolated"]
