"""GEAR's retrievers over a knowledge index: the single-step NaiveGE and SyncGE (§4) and the
multi-step agent with its gist memory (§5), batched over questions.

Per round, for all still-active questions together: ONE base-retriever call (up to
``base_k`` = 10 chunks each), ONE LLM call reading them (Eq. 1 / Eq. 4: proximal triples;
from round 2 on with the gist memory), ONE tripleLink + diverse triple beam search for every
question's proximal triples (Eq. 2, Alg. 1; the step's list is the RRF of the expansion and
the base list, Eq. 3), then ONE reasoning call (Eq. 6: answerable?) and ONE re-writing call
for the questions that go on (Eq. 7). After the last round, passageLink (Eq. 8, 10) links
every gist triple to passages and the final ranking is the RRF of those lists and every
round's list (Eq. 9).

How rasfast reads the paper where it leaves room (docs/gear.md lists every choice):

- one read per round: the chunks the base retriever returns for the round's query are read
  with the memory, and the proximal triples both seed that round's SyncGE and join the memory
  (the paper's "maximum of 10 retrieved chunks before knowledge synchronisation"; Eq. 1 and
  Eq. 4 coincide in round 1);
- the read and the termination reasoning see the original question ``q`` (Eq. 4 and 6); the
  re-written query ``q^(n)`` drives retrieval and scores the beams;
- a read reply with no parsable triple leaves that round's list as the base list (no seeds);
  an unreadable verdict counts as "not answerable"; an unreadable re-write ends the question
  (there is no new query to search);
- passageLink's base retriever over triples is the same kind as over passages: dense (the
  triple embeddings), BM25 (over the triple texts) or their RRF.

One question's failed LLM call ends only that question (its error is recorded); the others
go on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..._validate import check_int_arg, check_questions
from ...llm.isolated import ErrorRecord, generate_isolated
from ...profile import Trace, span
from ...types import RetrievedPassage, Triple
from . import prompts as P
from .expand import RRF_K, graph_expand, reciprocal_rank_fusion

# the paper's settings (§6.2, App. B.2): beam length 2, width 10, 100 neighbours per beam,
# gamma = twice the width; 10 chunks per round; iterations: 4 on MuSiQue, 2 on HotpotQA/2Wiki
BEAM = {"beam_width": 10, "max_len": 2, "max_neighbors": 100, "gamma": 20.0}
MAX_ITERS = {"musique": 4, "hotpotqa": 2, "2wikimultihopqa": 2, "2wiki": 2}
READ_TOKENS, REASON_TOKENS, REWRITE_TOKENS = 256, 96, 64


@dataclass
class GEARStep:
    """One round of one question."""
    round: int
    query: str
    base: List[int]                   # the base retriever's passage ids
    proximal: List[Triple]            # the read's triples (also added to the memory)
    seeds: List[int]                  # corpus triples tripleLink chose
    chains: List[List[int]]           # the beams (corpus triple ids), best first
    passages: List[int]               # the round's list: RRF(expansion, base)
    scores: List[float]
    verdict: Optional[str] = None     # "yes" / "no" / "unparsed" (agent only)
    reason: str = ""
    tokens: Dict[str, int] = field(default_factory=dict)   # prompt/completion tokens this round


@dataclass
class GEARResult:
    question: str
    passages: List[RetrievedPassage]          # the final ranking, best first
    steps: List[GEARStep]
    memory: List[Triple]
    trace: Trace
    agent_answer: Optional[str] = None        # the reasoning step's "Answer: ..." if any
    stopped: str = ""                         # "answerable" | "max_iters" | "rewrite" | "single-step"
    iteration_lists: List[List[int]] = field(default_factory=list)   # final ranking as of round i
    error: Optional[ErrorRecord] = None


def _stats(llm) -> Dict[str, int]:
    s = getattr(llm, "stats", None) or {}
    return {"prompt_tokens": int(s.get("prompt_tokens", 0)), "completion_tokens": int(s.get("completion_tokens", 0))}


def _delta(a: Dict[str, int], b: Dict[str, int]) -> Dict[str, int]:
    return {k: a[k] - b.get(k, 0) for k in a}


class GEAR:
    """GEAR over a knowledge index.

    Args:
        base: the base retriever (``search_text``, ``to_passages``, ``row_pids``, ``encoder``):
            a ThemeIndexRetriever (dense), BM25Retriever or HybridRetriever.
        graph, triple_emb: the index's TripleGraph and its triple embeddings.
        llm: the LLM of read / reason / rewrite (None: only ``mode="naive"`` runs).
        mode: ``"agent"`` (§5), ``"sync"`` (single-step SyncGE, §4) or ``"naive"`` (NaiveGE).
        max_iters: agent rounds (the paper: 4 on MuSiQue, 2 on HotpotQA and 2Wiki).
        base_k: chunks per round (10); link_k: passages per gist triple in passageLink (5).
        triple_bm25: a BM25Index over the triple texts (ids = triple ids), for passageLink
            with a BM25 or hybrid base; built on first use when None.
    """

    def __init__(self, base, graph, triple_emb, llm=None, mode: str = "agent", max_iters: int = 4,
                 base_k: int = 10, link_k: int = 5, beam: Optional[Dict[str, Any]] = None,
                 triple_bm25=None, backend: str = "auto"):
        if mode not in ("agent", "sync", "naive"):
            raise ValueError(f"mode: expected 'agent', 'sync' or 'naive', got {mode!r}")
        if mode != "naive" and llm is None:
            raise ValueError(f"mode {mode!r}: GEAR's read step needs an LLM (llm=...)")
        self.base, self.graph, self.llm, self.mode = base, graph, llm, mode
        self.triple_emb = np.ascontiguousarray(triple_emb, dtype=np.float32)
        if self.triple_emb.shape[0] != graph.num_triples:
            raise ValueError(f"triple_emb: {self.triple_emb.shape[0]} rows for {graph.num_triples} triples")
        self._tnorm = self.triple_emb / np.maximum(np.linalg.norm(self.triple_emb, axis=1, keepdims=True), 1e-12)
        self.max_iters = check_int_arg(max_iters, "max_iters", 1)
        self.base_k = check_int_arg(base_k, "base_k", 1)
        self.link_k = check_int_arg(link_k, "link_k", 1)
        self.beam = dict(BEAM, **(beam or {}))
        self.backend = backend
        self.encoder = base.encoder
        self._row_pid = np.asarray(base.row_pids(), dtype=np.int64)
        self._pid_row = {int(p): r for r, p in enumerate(self._row_pid)}
        self._triple_pid = np.asarray(graph.passage_ids, dtype=np.int64)
        self._triple_bm25 = triple_bm25
        self._link_cache: Dict[str, np.ndarray] = {}

    # -- public -------------------------------------------------------------------------------
    def run(self, question: str, trace: Optional[Trace] = None) -> GEARResult:
        return self.run_batch([question], trace)[0]

    def run_batch(self, questions: Sequence[str], trace: Optional[Trace] = None) -> List[GEARResult]:
        questions = check_questions(questions)
        trace = trace if trace is not None else Trace()
        n = len(questions)
        queries = list(questions)
        memory: List[List[Triple]] = [[] for _ in range(n)]
        steps: List[List[GEARStep]] = [[] for _ in range(n)]
        errors: List[Optional[ErrorRecord]] = [None] * n
        stopped = [""] * n
        agent_answer: List[Optional[str]] = [None] * n
        iters = 1 if self.mode != "agent" else self.max_iters
        active = list(range(n))
        with trace.activate(), trace.span("gear", category="loop", batch=n, mode=self.mode):
            for rnd in range(1, iters + 1):
                if not active:
                    break
                t0 = _stats(self.llm)
                with span("retrieve", batch=len(active), round=rnd):
                    q_emb = np.asarray(self.encoder.encode([queries[i] for i in active]), dtype=np.float32)
                    rows, _ = self.base.search_text([queries[i] for i in active], self.base_k, q_emb=q_emb)
                base = [self._row_pid[r[r >= 0]] for r in np.asarray(rows)]
                prox: List[List[Triple]] = [[] for _ in active]
                if self.mode != "naive":
                    prox = self._read(active, questions, base, memory, errors, rnd)
                res = self._expand(q_emb, base, prox)
                for j, i in enumerate(active):
                    if errors[i] is not None:
                        continue
                    new = [t for t in prox[j] if t not in memory[i]]
                    memory[i].extend(new)
                    steps[i].append(GEARStep(rnd, queries[i], base[j].tolist(), list(prox[j]),
                                             res.seeds[j].tolist(), self._chains(res.beams, j),
                                             np.asarray(res.passages[j]).tolist(),
                                             np.asarray(res.scores[j]).tolist()))
                active = [i for i in active if errors[i] is None]
                if self.mode != "agent":
                    for i in active:
                        stopped[i] = "single-step"
                        steps[i][-1].tokens = _delta(_stats(self.llm), t0) if self.llm is not None else {}
                    break
                verdicts = self._reason(active, questions, memory, errors, rnd)
                go = []
                for i in active:
                    if errors[i] is not None:
                        continue
                    v = verdicts[i]
                    st = steps[i][-1]
                    st.verdict = ("yes" if v.answerable else "no") if v.parsed else "unparsed"
                    st.reason = v.why
                    if v.answerable:
                        stopped[i], agent_answer[i] = "answerable", v.answer
                    elif rnd >= iters:
                        stopped[i] = "max_iters"
                    else:
                        go.append(i)
                if go:
                    new_q = self._rewrite(go, questions, memory, {i: steps[i][-1].reason for i in go}, errors, rnd)
                    nxt = []
                    for i in go:
                        if errors[i] is not None:
                            continue
                        if new_q.get(i) is None:
                            stopped[i] = "rewrite"
                        else:
                            queries[i] = new_q[i]
                            nxt.append(i)
                    go = nxt
                d = _delta(_stats(self.llm), t0)
                for i in active:   # a round's tokens, shared out evenly over its questions
                    steps[i][-1].tokens = {k: v // max(1, len(active)) for k, v in d.items()}
                active = go
            out = []
            with span("link", batch=n):
                for i in range(n):
                    final, lists = self._final(steps[i], memory[i])
                    out.append(GEARResult(questions[i], final, steps[i], memory[i], trace, agent_answer[i],
                                          stopped[i] or ("error" if errors[i] else ""), lists, errors[i]))
        return out

    # -- stages ---------------------------------------------------------------------------------
    def _read(self, active, questions, base, memory, errors, rnd) -> List[List[Triple]]:
        prompts = []
        for j, i in enumerate(active):
            rows = np.asarray([self._pid_row[int(p)] for p in base[j]], dtype=np.int64)[None, :]
            ps = self.base.to_passages(rows, np.zeros(rows.shape, np.float32))[0] if rows.size else []
            prompts.append(P.read_prompt(questions[i], ps, memory[i] if self.mode == "agent" else ()))
        with span("read", batch=len(prompts), round=rnd):
            replies, errs = generate_isolated(self.llm, prompts, READ_TOKENS)
        out = []
        for j, i in enumerate(active):
            if j in errs:
                errors[i] = ErrorRecord.of("read", errs[j], rnd)
                out.append([])
            else:
                out.append(P.parse_facts(replies[j]))
        return out

    def _reason(self, active, questions, memory, errors, rnd) -> Dict[int, P.Reasoning]:
        prompts = [P.reason_prompt(questions[i], memory[i]) for i in active]
        with span("reason", batch=len(prompts), round=rnd):
            replies, errs = generate_isolated(self.llm, prompts, REASON_TOKENS)
        out = {}
        for j, i in enumerate(active):
            if j in errs:
                errors[i] = ErrorRecord.of("reason", errs[j], rnd)
            else:
                out[i] = P.parse_reason(replies[j])
        return out

    def _rewrite(self, go, questions, memory, reasons, errors, rnd) -> Dict[int, Optional[str]]:
        prompts = [P.rewrite_prompt(questions[i], memory[i], reasons[i]) for i in go]
        with span("rewrite", batch=len(prompts), round=rnd):
            replies, errs = generate_isolated(self.llm, prompts, REWRITE_TOKENS)
        out = {}
        for j, i in enumerate(go):
            if j in errs:
                errors[i] = ErrorRecord.of("rewrite", errs[j], rnd)
            else:
                out[i] = P.parse_rewrite(replies[j])
        return out

    def _expand(self, q_emb, base, prox):
        """SyncGE (seeds: tripleLink of the proximal triples), or NaiveGE (seeds: every
        triple of the base passages) in mode "naive"; a query without seeds keeps its base list."""
        with span("expand", batch=len(base)):
            if self.mode == "naive":
                return graph_expand(self.graph, self.triple_emb, q_emb, base, mode="naive",
                                    backend=self.backend, **self.beam)
            emb = [self._encode_triples(p) for p in prox]
            return graph_expand(self.graph, self.triple_emb, q_emb, base, mode="sync", proximal=emb,
                                backend=self.backend, **self.beam)

    def _encode_triples(self, triples: Sequence[Triple]) -> np.ndarray:
        if not triples:
            return np.zeros((0, self.triple_emb.shape[1]), np.float32)
        return np.asarray(self.encoder.encode([" ".join(t) for t in triples]), dtype=np.float32)

    @staticmethod
    def _chains(beams, j: int) -> List[List[int]]:
        seqs = getattr(beams, "sequences", None)
        if seqs is None:
            return []
        s = np.asarray(seqs[j].detach().cpu() if hasattr(seqs[j], "detach") else seqs[j])
        nb = int(np.asarray(beams.num_beams)[j]) if getattr(beams, "num_beams", None) is not None else len(s)
        return [[int(t) for t in row if int(t) >= 0] for row in s[:nb]]

    # -- passageLink and the final list ----------------------------------------------------------
    def _link(self, t: Triple) -> np.ndarray:
        """passageLink (Eq. 8, 10): RRF of the passages retrieved with the triple as the query
        and of the passages of the triples retrieved with it."""
        key = " ".join(t)
        if key in self._link_cache:
            return self._link_cache[key]
        k = self.link_k
        q = np.asarray(self.encoder.encode([key]), dtype=np.float32)
        rows, _ = self.base.search_text([key], k, q_emb=q)
        r = np.asarray(rows)[0]
        by_passage = self._row_pid[r[r >= 0]]
        by_triple = self._triple_pids(key, q[0], k)
        ids, _ = reciprocal_rank_fusion([by_passage, by_triple], k=RRF_K)
        self._link_cache[key] = ids
        return ids

    def _triple_pids(self, text: str, q: np.ndarray, k: int) -> np.ndarray:
        """Passages of the top-k corpus triples for ``text`` (dense, BM25 or hybrid, like the
        base retriever), first occurrences in rank order."""
        kind = getattr(self.base, "kind", "dense")
        lists = []
        if kind != "bm25" and self.graph.num_triples:
            qn = q / max(float(np.linalg.norm(q)), 1e-12)
            s = self._tnorm @ qn
            kk = min(k, s.size)
            top = np.argpartition(-s, kk - 1)[:kk]
            lists.append(top[np.lexsort((top, -s[top]))])
        if kind in ("bm25", "hybrid") and self.graph.num_triples:
            if self._triple_bm25 is None:
                from ...index.bm25 import BM25Index
                self._triple_bm25 = BM25Index.build(list(self.graph.texts))
            lists.append(self._triple_bm25.search([text], k)[0][0])
        if not lists:
            return np.zeros(0, np.int64)
        tids = reciprocal_rank_fusion(lists, k=RRF_K, top=k)[0] if len(lists) > 1 else np.asarray(lists[0])
        pids = self._triple_pid[tids]
        pids = pids[pids >= 0]
        _, first = np.unique(pids, return_index=True)
        return pids[np.sort(first)]

    def _final(self, steps: Sequence[GEARStep], memory: Sequence[Triple]):
        """(final passages, the final ranking as of each round). Single-step modes: the round's
        list. The agent: Eq. 9, RRF(linked passages of every gist triple, every round's list)."""
        if not steps:
            return [], []
        if self.mode != "agent":
            lists = [steps[0].passages]
            ids, scores = np.asarray(steps[0].passages, np.int64), np.asarray(steps[0].scores)
        else:
            lists, mem_so_far = [], []
            for s in steps:
                mem_so_far = mem_so_far + [t for t in s.proximal if t not in mem_so_far]
                fused, _ = self._fuse(steps[:s.round], mem_so_far)
                lists.append(fused[:50].tolist())
            ids, scores = self._fuse(steps, memory)
        rows = np.asarray([self._pid_row[int(p)] for p in ids if int(p) in self._pid_row], dtype=np.int64)
        sc = np.asarray([s for p, s in zip(ids, scores) if int(p) in self._pid_row], dtype=np.float32)
        final = self.base.to_passages(rows[None, :], sc[None, :])[0] if rows.size else []
        return final, [list(map(int, x)) for x in lists]

    def _fuse(self, steps, memory):
        linked = [self._link(t) for t in memory]
        rounds = [np.asarray(s.passages, np.int64) for s in steps]
        return reciprocal_rank_fusion(linked + rounds, k=RRF_K)


__all__ = ["GEAR", "GEARResult", "GEARStep", "BEAM", "MAX_ITERS"]
