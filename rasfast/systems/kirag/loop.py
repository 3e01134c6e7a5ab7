"""The KiRAG loop, batched over questions (KiRAG: knowledge-driven iterative retrieval).

Round i, for all still-active questions together:

1. ``retrieve``: ONE retriever call for the queries q_i = question (+ " knowledge triples: "
   + the chain so far), K0 passages each;
2. ``align``: the candidate triples are the retrieved passages' triples (minus the chain's
   own); ONE aligner encoder call embeds the queries (new triples are embedded once and
   cached), ONE :func:`rasfast.segment_topk_scores` call keeps the top N per question;
3. ``construct``: ONE constructor call picks each question's next triple or stops it.

A question stops when its constructor says so, when no candidates are left, or after L
rounds. ``rank``: ONE :func:`rasfast.segment_max_rank` call gives every passage that
contributed a candidate triple (in any round) the best aligner score of its candidates and
ranks the passages; lists shorter than ``top_k`` are filled with the first round's retrieved
passages in retrieval order. With a reader LLM, ONE ``answer`` call answers from the ranked
passages and the chain; without one, an answer the constructor gave ("the answer is ...") is
kept, else the answer is None.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..._validate import check_int_arg, check_questions
from ...ops.segment import segment_max_rank, segment_topk_scores
from ...profile import Trace, span
from ...types import RetrievedPassage, Triple
from .constructor import ConstructorInput, Decision, HeuristicConstructor, LLMConstructor
from .triples import TripleEmbeddings, TripleStore, chain_text

# KiRAG's stages in order, for the profiler: retrieve K0 passages, align (score their triples),
# construct (extend each chain), rank documents by their best triple, answer (the reader).
STAGES = ("retrieve", "align", "construct", "rank", "answer")

QUERY_JOIN = " knowledge triples: "


@dataclass
class KiRAGStep:
    """One round of one question: its query, retrieved passage ids, the aligner's top-N
    candidates (triples, their passages, scores; best first) and the constructor's decision."""
    round: int
    query: str
    retrieved: List[int]
    candidates: List[Triple]
    candidate_pids: List[int]
    scores: List[float]
    chosen: Optional[Triple]
    decision: Decision


@dataclass
class KiRAGResult:
    question: str
    answer: Optional[str]
    chain: List[Triple]
    steps: List[KiRAGStep]
    passages: List[RetrievedPassage]   # ranked documents (score = best candidate score)
    trace: Trace                       # shared by all questions of one run_batch call
    stopped: str = ""                  # "answer" | "constructor" | "no_candidates" | "max_steps"
    errors: Dict[str, str] = field(default_factory=dict)  # stage -> failure ("reader", ...)
    shown: Optional[object] = None     # what the reader was shown (rasfast.llm.reader.ReaderInput)
    reply: Optional[str] = None        # the reader's raw reply

    @property
    def pids(self) -> List[int]:
        return [p.pid for p in self.passages]


@dataclass
class _State:
    question: str
    chain: List[Triple] = field(default_factory=list)
    chain_ids: List[int] = field(default_factory=list)
    steps: List[KiRAGStep] = field(default_factory=list)
    first: List[RetrievedPassage] = field(default_factory=list)
    shown: Optional[object] = None
    reply: Optional[str] = None
    seen: Dict[int, RetrievedPassage] = field(default_factory=dict)
    answer: Optional[str] = None
    stopped: str = ""
    errors: Dict[str, str] = field(default_factory=dict)


class KiRAG:
    """KiRAG over a retriever and a triple corpus; see the module docstring.

    Args:
        retriever: ``retrieve(queries, k) -> List[List[RetrievedPassage]]``.
        store: a :class:`TripleStore` (triples per passage id).
        aligner: the Reasoning Chain Aligner, an encoder with ``encode(texts)`` returning
            L2-normalised rows (e.g. MiniLM, or a model from :func:`train_aligner`).
        constructor: ``construct(inputs) -> decisions`` (default :class:`HeuristicConstructor`).
        reader: optional rasfast.llm backend answering from the ranked passages.
        K0, N, L: passages per round, candidates kept per round, most rounds (paper: 10, 20, 5).
        top_k: ranked passages returned per question.
        reader_docs: ranked documents the reader sees (the paper's QA uses the top 3).
        reader_chain: also show the reader the reasoning chain (the paper's reader reads
            only the documents; off by default).
        reader_prompt: the reader contract's prompt (rasfast.llm.reader: "contract" or
            "one-shot").
        backend: backend of the segment ops.
    """

    def __init__(self, retriever, store: TripleStore, aligner, constructor=None, reader=None,
                 K0: int = 10, N: int = 20, L: int = 5, top_k: int = 10, backend: str = "auto",
                 reader_docs: int = 3, reader_chain: bool = False, reader_prompt: str = "contract"):
        if not callable(getattr(retriever, "retrieve", None)):
            raise TypeError("retriever: expected an object with retrieve(queries, k)")
        if not isinstance(store, TripleStore):
            raise TypeError(f"store: expected a TripleStore, got {type(store).__name__}")
        if not callable(getattr(aligner, "encode", None)):
            raise TypeError("aligner: expected an encoder with encode(texts)")
        self.retriever, self.store, self.aligner = retriever, store, aligner
        self.constructor = constructor or HeuristicConstructor()
        self.reader = reader
        self.K0 = check_int_arg(K0, "K0", 1)
        self.N = check_int_arg(N, "N", 1)
        self.L = check_int_arg(L, "L", 1)
        self.top_k = check_int_arg(top_k, "top_k", 1)
        self.reader_docs = check_int_arg(reader_docs, "reader_docs", 1)
        if not isinstance(reader_chain, bool):
            raise TypeError(f"reader_chain: expected a bool, got {type(reader_chain).__name__}")
        self.reader_chain = reader_chain
        self.reader_name = reader_prompt
        self.backend = backend
        self.triple_emb = TripleEmbeddings(store, aligner)

    def run(self, question: str, trace: Optional[Trace] = None) -> KiRAGResult:
        return self.run_batch([question], trace=trace)[0]

    def run_batch(self, questions: Sequence[str], trace: Optional[Trace] = None) -> List[KiRAGResult]:
        questions = check_questions(questions)
        trace = trace if trace is not None else Trace("kirag", stages=STAGES)
        states = [_State(q) for q in questions]
        with trace.activate(), trace.span("kirag", category="loop", batch=len(states)):
            for rnd in range(self.L):
                active = [s for s in states if not s.stopped]
                if not active:
                    break
                self._round(rnd, active)
            for s in states:
                s.stopped = s.stopped or "max_steps"
            ranked = self._rank(states)
            answers = self._answer(states, ranked)
        assert len(ranked) == len(answers) == len(states)  # never drop a question
        return [KiRAGResult(s.question, a, s.chain, s.steps, r, trace, s.stopped, s.errors, s.shown, s.reply)
                for s, r, a in zip(states, ranked, answers)]

    # -- one round ---------------------------------------------------------------------------
    def _round(self, rnd: int, active: List[_State]) -> None:
        queries = [s.question + QUERY_JOIN + chain_text(s.chain) if s.chain else s.question
                   for s in active]
        with span("retrieve", batch=len(active)):
            lists = self.retriever.retrieve(queries, self.K0)
        cands = []
        for s, lst in zip(active, lists):
            if rnd == 0:
                s.first = list(lst)
            for p in lst:
                s.seen.setdefault(p.pid, p)
            ids = [self.store.passage_triples(p.pid) for p in lst]
            ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
            _, first = np.unique(ids, return_index=True)
            ids = ids[np.sort(first)]
            cands.append(ids[~np.isin(ids, s.chain_ids)])
        with span("align", batch=len(active)):
            q_emb = np.asarray(self.aligner.encode(queries), dtype=np.float32)
            flat = np.concatenate(cands) if cands else np.zeros(0, np.int64)
            rows = self.triple_emb.rows(flat)
            ptr = np.zeros(len(active) + 1, np.int64)
            ptr[1:] = np.cumsum([len(c) for c in cands])
            table = self.triple_emb.table
            if table.shape[0] == 0:  # nothing to score anywhere this round
                table = np.zeros((1, q_emb.shape[1]), np.float32)
            top, scores = segment_topk_scores(q_emb, table, ptr, self.N, cand_ids=rows,
                                              backend=self.backend)
        inputs, who = [], []
        for b, (s, lst) in enumerate(zip(active, lists)):
            keep = top[b] >= 0
            tids = flat[top[b][keep]]
            if len(tids) == 0:
                s.stopped = "no_candidates"
                continue
            inputs.append(ConstructorInput(s.question, list(s.chain),
                                           [self.store.triples[t] for t in tids],
                                           scores[b][keep].tolist()))
            who.append((s, queries[b], [p.pid for p in lst], tids))
        if not inputs:
            return
        with span("construct", batch=len(inputs)):
            decisions = self.constructor.construct(inputs)
        if len(decisions) != len(inputs):  # a custom constructor must answer every question
            raise ValueError(f"constructor: returned {len(decisions)} decisions for "
                             f"{len(inputs)} questions")
        for inp, (s, query, retrieved, tids), d in zip(inputs, who, decisions):
            if getattr(d, "error", None):
                s.errors[f"constructor[{rnd}]"] = d.error
            chosen = None
            if d.choice is not None and 0 <= d.choice < len(tids):
                chosen = inp.candidates[d.choice]
                s.chain.append(chosen)
                s.chain_ids.append(int(tids[d.choice]))
            s.steps.append(KiRAGStep(rnd, query, retrieved, inp.candidates,
                                     self.store.pid_of[tids].tolist(), inp.scores, chosen, d))
            if d.answer:
                s.answer = d.answer
            if d.stop or chosen is None:
                s.stopped = "answer" if d.answer else "constructor"

    # -- document ranking -------------------------------------------------------------------
    def _rank(self, states: List[_State]) -> List[List[RetrievedPassage]]:
        with span("rank", batch=len(states)):
            scores = [np.asarray([x for st in s.steps for x in st.scores], np.float32) for s in states]
            groups = [np.asarray([x for st in s.steps for x in st.candidate_pids], np.int64)
                      for s in states]
            ptr = np.zeros(len(states) + 1, np.int64)
            ptr[1:] = np.cumsum([len(x) for x in scores])
            ids, vals = segment_max_rank(np.concatenate(scores) if scores else np.zeros(0, np.float32),
                                         np.concatenate(groups) if groups else np.zeros(0, np.int64),
                                         ptr, self.top_k, backend=self.backend)
            out = []
            for b, s in enumerate(states):
                ranked = [dataclasses.replace(s.seen[int(p)], score=float(v))
                          for p, v in zip(ids[b], vals[b]) if p >= 0]
                have = {p.pid for p in ranked}
                for p in s.first:  # fill from the first round's retrieval order
                    if len(ranked) >= self.top_k:
                        break
                    if p.pid not in have:
                        ranked.append(dataclasses.replace(p, score=float("-inf")))
                        have.add(p.pid)
                out.append(ranked)
        return out

    def _answer(self, states: List[_State], ranked) -> List[Optional[str]]:
        """The reader contract (rasfast.llm.reader) over each question's top ``reader_docs``
        documents (and the chain, with ``reader_chain``), as the paper reads the same top-k
        as its baselines; the reader's prompt follows the paper's Figure 8."""
        from ...llm.reader import ReaderInput, read
        if self.reader is None:
            return [s.answer for s in states]
        inputs = [ReaderInput(s.question, list(r[:self.reader_docs]),
                              [("", list(s.chain))] if (self.reader_chain and s.chain) else [])
                  for s, r in zip(states, ranked)]
        with span("answer", batch=len(inputs)):
            # one reply per question, always: a failed prompt keeps that question's
            # constructor answer and records the error on its result
            got = read(self.reader, inputs, self.reader_name)
        out = []
        for r, s in zip(got, states):
            s.shown, s.reply = r.shown, r.reply
            if r.error:
                s.errors["reader"] = r.error
            out.append(r.answer or s.answer if r.answer is not None else s.answer)
        return out


def from_components(retriever, triples_by_pid, encoder, llm=None, **opts) -> KiRAG:
    """A :class:`KiRAG` from the system registry's components.

    Args:
        retriever: the pipeline Retriever (``retrieve(queries, k)``).
        triples_by_pid: passage id -> list of (s, p, o) triples.
        encoder: the text encoder; also the zero-shot aligner unless ``aligner=`` is given.
        llm: optional rasfast.llm backend: the paper's constructor prompt and the reader.
            Without it the model-free :class:`HeuristicConstructor` runs and answers stay None
            (or the constructor's).
        **opts: ``aligner`` (an encoder, e.g. :func:`load_aligner`), ``K0``, ``N``, ``L``,
            ``top_k``, ``backend``; ``read=False``: the preparation alone (the LLM constructs
            the chain, nobody reads: the caller's reader answers, as ``rasfast eval qa`` does); ``triple_table`` = (embeddings [n, D], passage ids [n],
            triple texts [n]) of the corpus triples by ``encoder`` (a knowledge index's
            ``triple_emb`` and graph), reused instead of re-encoding every triple when the
            aligner is ``encoder`` itself (the zero-shot aligner).
    """
    given_aligner = opts.pop("aligner", None)
    read = opts.pop("read", True)
    aligner = given_aligner or encoder
    table = opts.pop("triple_table", None)
    store = triples_by_pid if isinstance(triples_by_pid, TripleStore) else TripleStore(triples_by_pid)
    constructor = LLMConstructor(llm) if llm is not None else HeuristicConstructor()
    system = KiRAG(retriever, store, aligner, constructor=constructor,
                   reader=llm if read else None, **opts)
    if table is not None and given_aligner is None:
        system.triple_emb.reuse(*table)
    return system
