"""The structured-knowledge utilizer: decompose -> extract -> infer, batched over questions.

- **decompose**: an LLM splits each question into simple sub-questions given the structures'
  one-line descriptions (offline: the question is its own single sub-question).
- **extract**: with an LLM, as in the paper, the model reads the WHOLE structured knowledge
  of the question when it fits ``max_chars``; only a longer input falls back to
  rasfast's retrieval first (a :class:`KnowledgeCutWarning` says so) -- every sub-question
  and every selectable item
  (table rows, graph triples, chunks; lines of text kept from malformed output) is embedded,
  and the top ``extract_k`` items per sub-question by inner product are chosen with
  :func:`rasfast.select_k` (one call per question over all its sub-questions); for graphs,
  the chosen triples' neighbours in the :class:`rasfast.TripleGraph` CSR that score next
  best are added (``graph_hops``), so a chain's next link comes along. Algorithms and
  catalogues are ordered documents and are passed whole (cut at ``max_chars``). With an LLM,
  the model then reads only that selection and keeps the precise knowledge (one concurrent
  call for all sub-questions of the batch); offline, the selection is the knowledge.
- **infer**: the reader contract (:mod:`rasfast.llm.reader`: one instruction family, answer
  shape, token budget and post-processing for every system) answers from the sub-questions
  and their knowledge. Offline:
  rasfast's model-free relation-path reasoner over the extracted triples (graph triples, and
  table cells read back as (row, column, value)); for chunks, the best-scoring chunk's first
  sentence. A baseline, not a reader.

Every stage takes one item per question and returns one result per question, in order; a
question whose LLM request failed for good gets the exception in its slot (the other
questions' results stand, and no request is sent twice).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...profile import span
from ._llm import check_llm, generate_isolated
from .parse import parse_subquestions, split_row
from .prompts import decompose_messages, extract_messages
from .types import Structure

_SELECTABLE = ("table", "graph", "chunk", "text")


@dataclass
class Selection:
    """What extraction chose for one sub-question: (structure index, item index) pairs in
    score order, and the rendered knowledge text."""
    picks: List[Tuple[int, int]]
    text: str


class KnowledgeCutWarning(UserWarning):
    """The utilizer (or structurizer) cut its input to fit a limit: the model did not see
    everything. Counted in ``Utilizer.stats`` / ``LLMStructurizer.stats`` too."""


def _render(structures: Sequence[Structure], picks: Sequence[Tuple[int, int]], whole: Sequence[int],
            max_chars: float, stats: Optional[Dict[str, int]] = None) -> str:
    """The chosen items grouped by structure (a table keeps its header), then the whole
    algorithm/catalogue structures, cut at ``max_chars``."""
    by_s: Dict[int, List[int]] = {}
    for si, ii in picks:
        by_s.setdefault(si, []).append(ii)
    parts = []
    for si, items in by_s.items():
        s = structures[si]
        lines = list(s.header) + [s.item_text(s.items[i]) for i in items]
        parts.append("\n".join(lines))
    for si in whole:
        parts.append(structures[si].content)
    text = "\n\n".join(p for p in parts if p)
    if len(text) <= max_chars:
        return text
    if stats is not None:
        stats["cut"] += 1
    warnings.warn(f"structured knowledge cut from {len(text)} to max_chars={max_chars} "
                  f"characters before the model reads it", KnowledgeCutWarning, stacklevel=3)
    return text[:max_chars] + " ..."


class Utilizer:
    """decompose / extract / infer over a question's structures (see the module docstring).

    Args:
        llm: a rasfast.llm backend, or None for the offline utilizer.
        encoder: embeds sub-questions and items for extraction (default: hashing encoder).
        extract_k: items selected per sub-question before the LLM reads them.
        graph_hops: rounds of adding the best-scoring CSR neighbours of selected triples.
        max_subquestions: cap on decomposition.
        max_chars: the knowledge text per sub-question. With an LLM, the whole structured
            knowledge is read when it fits; beyond it the top ``extract_k`` items (and
            graph neighbours) are pre-selected, and a text still longer is cut (both warn
            with :class:`KnowledgeCutWarning` and count in ``stats``).
    """

    def __init__(self, llm=None, encoder=None, extract_k: int = 8, graph_hops: int = 1,
                 max_subquestions: int = 4, max_chars: int = 6000, max_new_tokens: int = 256,
                 answer_tokens: Optional[int] = None, temperature: float = 0.0, reader: str = "contract"):
        if llm is not None:
            check_llm(llm)
        if not isinstance(extract_k, int) or isinstance(extract_k, bool) or extract_k < 1:
            raise ValueError(f"extract_k: expected an int >= 1, got {extract_k!r}")
        if not isinstance(graph_hops, int) or graph_hops < 0:
            raise ValueError(f"graph_hops: expected an int >= 0, got {graph_hops!r}")
        from ...encode import CachedEncoder, HashingEncoder
        from ...profile import TimedEncoder
        enc = encoder if encoder is not None else HashingEncoder()
        if isinstance(enc, TimedEncoder):
            enc = enc.encoder
        self.encoder = enc if isinstance(enc, CachedEncoder) else CachedEncoder(enc)
        self.llm = llm
        self.extract_k, self.graph_hops = extract_k, graph_hops
        self.max_subquestions, self.max_chars = max_subquestions, max_chars
        self.max_new_tokens, self.answer_tokens, self.temperature = max_new_tokens, answer_tokens, temperature
        self.reader = reader
        self.defer_reading = False     # infer returns the reader inputs unread
        self._reasoner = None
        self.stats = {"whole": 0, "preselected": 0, "cut": 0}

    # -- decompose -----------------------------------------------------------------------
    def decompose(self, items: Sequence[Tuple[str, List[Structure]]]) -> List[List[str]]:
        """Sub-questions per (question, structures)."""
        if self.llm is None:
            return [[q] for q, _ in items]
        prompts = [decompose_messages(q, [s.description for s in ss]) for q, ss in items]
        replies, errs = generate_isolated(self.llm, prompts, self.max_new_tokens, self.temperature)
        return [errs[i] if i in errs else parse_subquestions(r, q, self.max_subquestions)
                for i, ((q, _), r) in enumerate(zip(items, replies))]

    # -- extract -------------------------------------------------------------------------
    def select(self, subquestions: Sequence[str], structures: Sequence[Structure]) -> List[Selection]:
        """Model-free selection for one question: top items per sub-question by inner
        product (rasfast.select_k), plus graph neighbours."""
        from ...ops.select import select_k
        refs = [(si, ii) for si, s in enumerate(structures) if s.kind in _SELECTABLE
                for ii in range(len(s.items))]
        whole = [si for si, s in enumerate(structures) if s.kind not in _SELECTABLE]
        if self.llm is not None and refs:
            everything = _render(structures, refs, whole, float("inf"))
            if len(everything) <= self.max_chars:   # the paper: the model reads it all
                self.stats["whole"] += len(subquestions)
                return [Selection(list(refs), everything) for _ in subquestions]
            self.stats["preselected"] += len(subquestions)
            warnings.warn(f"structured knowledge of {len(everything)} characters exceeds "
                          f"max_chars={self.max_chars}: the model reads the top "
                          f"{self.extract_k} items per sub-question instead",
                          KnowledgeCutWarning, stacklevel=2)
        if not refs:
            return [Selection([], _render(structures, [], whole, self.max_chars, self.stats))
                    for _ in subquestions]
        texts = [structures[si].item_text(structures[si].items[ii]) for si, ii in refs]
        with span("encode", category="model", n=len(texts) + len(subquestions)):
            emb = self.encoder.encode(texts)
            q = self.encoder.encode(list(subquestions))
        scores = np.ascontiguousarray(q @ emb.T, dtype=np.float32)   # [n_subq, n_items]
        k = min(self.extract_k, len(refs))
        _, top = select_k(scores, k, largest=True)
        top = np.asarray(top)
        ref_ix = {r: j for j, r in enumerate(refs)}
        out = []
        for row, ids in enumerate(top.tolist()):
            picks = [refs[j] for j in ids]
            chosen = set(ids)
            for _ in range(self.graph_hops):
                extra = self._neighbours(structures, picks, ref_ix, chosen)
                extra = sorted(extra, key=lambda j: (-scores[row, j], j))[:k]
                chosen.update(extra)
                picks += [refs[j] for j in extra]
            out.append(Selection(picks, _render(structures, picks, whole, self.max_chars, self.stats)))
        return out

    @staticmethod
    def _neighbours(structures, picks, ref_ix, chosen) -> List[int]:
        extra = set()
        for si, ii in picks:
            g = structures[si].graph
            if g is None:
                continue
            for nb in g.neighbors(ii).tolist():
                j = ref_ix.get((si, nb))
                if j is not None and j not in chosen:
                    extra.add(j)
        return list(extra)

    def extract(self, items: Sequence[Tuple[List[str], List[Structure]]]) -> List[List[Selection]]:
        """Knowledge per sub-question for each (sub-questions, structures)."""
        sels = [self.select(subqs, ss) for subqs, ss in items]
        if self.llm is None:
            return sels
        jobs = [(qi, j) for qi, (subqs, _) in enumerate(items) for j in range(len(subqs))]
        prompts = []
        for qi, j in jobs:
            subqs, ss = items[qi]
            kind = _main_kind(ss)
            prompts.append(extract_messages(kind, subqs[j], sels[qi][j].text or "(nothing)"))
        replies, errs = generate_isolated(self.llm, prompts, self.max_new_tokens, self.temperature)
        out: List[Any] = list(sels)
        for n, ((qi, j), r) in enumerate(zip(jobs, replies)):
            if n in errs:
                out[qi] = errs[n]          # the question fails; the others keep their results
            elif not isinstance(out[qi], BaseException):
                r = r.strip()
                sels[qi][j] = Selection(sels[qi][j].picks, "" if r.casefold().strip(". ") == "none" else r)
        return out

    # -- infer ---------------------------------------------------------------------------
    def infer(self, items: Sequence[Tuple[str, List[str], List[Selection], List[Structure]]]) -> List[Any]:
        """An answer per (question, sub-questions, selections, structures). With an LLM, the
        reader contract (rasfast.llm.reader) reads the sub-questions and the knowledge
        extracted for each (one :class:`~rasfast.llm.reader.ReadResult` per question, or the
        exception of a failed call); offline, an answer string."""
        if self.llm is not None:
            from ...llm.reader import MAX_NEW_TOKENS, ReaderInput, ReadResult, read
            inputs = [ReaderInput(q, knowledge=knowledge_text(subqs, [s.text for s in sels]))
                      for q, subqs, sels, _ in items]
            if self.defer_reading:     # the caller reads (rasfast eval qa's read phase)
                return [ReadResult(None, None, i) for i in inputs]
            got = read(self.llm, inputs, self.reader, self.answer_tokens or MAX_NEW_TOKENS)
            return [(r.exception or RuntimeError(r.error)) if r.error else r for r in got]
        return [self._infer_offline(q, sels, ss) for q, _, sels, ss in items]

    def _infer_offline(self, question: str, sels: Sequence[Selection], structures: Sequence[Structure]) -> str:
        from ..ras.heuristic import GraphPathReasoner
        from ..ras.qgraph import merge_steps
        triples: List[tuple] = []
        best_chunk = None
        for sel in sels:
            for si, ii in sel.picks:
                s = structures[si]
                if s.kind == "graph":
                    triples.append(s.items[ii])
                elif s.kind == "table" and s.header:
                    cols = split_row(s.header[0])
                    cells = split_row(s.items[ii])
                    for c, v in zip(cols[1:], cells[1:]):
                        for part in (x.strip() for x in v.split(";")):
                            if part:
                                triples.append((cells[0], c, part))
                elif best_chunk is None:
                    best_chunk = s.item_text(s.items[ii])
        if triples:
            if self._reasoner is None:
                self._reasoner = GraphPathReasoner(self.encoder)
            g = merge_steps([list(dict.fromkeys(triples))])
            path = self._reasoner.best_path(question, g)
            if path is not None:
                return g.entities[path.end]
            fb = self._reasoner.fallback_answer(question, g)
            if fb:
                return fb
        if best_chunk:
            body = best_chunk.split(": ", 1)[-1]
            return body.split(". ")[0].strip()
        return "unknown"


def _main_kind(structures: Sequence[Structure]) -> str:
    kinds = [s.kind for s in structures]
    return max(dict.fromkeys(kinds), key=kinds.count) if kinds else "text"


def knowledge_text(subquestions: Sequence[str], knowledge: Sequence[str]) -> str:
    """The utilizer's input to the reader: each sub-question and what extraction kept for it."""
    return "\n".join(f"[{i + 1}] Sub-question: {q}\nKnowledge: {k or 'none'}"
                     for i, (q, k) in enumerate(zip(subquestions, knowledge)))


__all__ = ["Utilizer", "Selection", "KnowledgeCutWarning"]
