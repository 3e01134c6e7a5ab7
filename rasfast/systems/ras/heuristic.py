"""A model-free planner and answerer: the BASELINE that lets the loop run anywhere, offline.

They are not language models and do not understand questions. They follow relation paths
in the question graph:

1. start entities: graph entities named in the question (whole words, longest first);
2. relation words: the question's remaining content words, crudely stemmed (5-letter prefix,
   so "founder"/"founded" and "headquarters"/"headquartered" meet);
3. a path search (depth <= ``max_hops``) follows triples forward (and backward, at half
   weight) from a start entity; each hop must "consume" at least one relation word that its
   predicate shares; a path scores the words it consumed, plus a small bonus for predicates
   that are mostly consumed words and, when an encoder is given, their cosine to the question.

The answerer returns the end entity of the best path (fallback: the object of the triple most
similar to the question by the encoder). The planner asks for the best path's end entity as
the next sub-query (``with_relation_words=True`` appends the question's unresolved relation
words: +2-6 points of passage recall on MuSiQue/HotpotQA, but -8 points of demo accuracy with
the hashing encoder, so it is off by default) while that entity has no triples of its own yet (its passage was not retrieved) and relation words
remain; otherwise it says ``[SUFFICIENT]``. On the generated
demo world this answers most 2-hop and 3-hop questions; on real data expect far less.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from ...profile import span
from .qgraph import QuestionGraph, merge_steps
from ...types import LoopState

STOPWORDS = frozenset("""a an the of in on at to for by with from and or as is was were are be been
being did does do has have had what which who whom whose where when why how that this these those
it its there their than then into onto about over under after before during many much some any
all each other another same name named called same also not no yes one person thing people
""".split())
_TOKEN = re.compile(r"[a-z0-9]+")
_NAME = re.compile(r"\b[A-Z][\w'\-]+(?:\s+[A-Z][\w'\-]+)*")


def _stem(w: str) -> str:
    return w[:5]


@functools.lru_cache(maxsize=1 << 16)
def _stems(text: str) -> Tuple[str, ...]:
    return tuple(dict.fromkeys(_stem(w) for w in _TOKEN.findall(text.casefold()) if w not in STOPWORDS))


def stems(text: str) -> List[str]:
    """Content-word stems of ``text`` in order, duplicates removed."""
    return list(_stems(text))


@dataclass
class Path:
    start: int
    hops: List[Tuple[int, bool]] = field(default_factory=list)  # (triple id, reversed?)
    end: int = -1
    score: float = 0.0
    consumed: frozenset = frozenset()


class GraphPathReasoner:
    """The path search shared by :class:`HeuristicPlanner` and :class:`HeuristicAnswerer`."""

    def __init__(self, encoder=None, max_hops: int = 4, encoder_weight: float = 0.1,
                 reverse_weight: float = 0.5, word_gain: float = 1.5):
        from ...encode import CachedEncoder
        from ...profile import TimedEncoder
        self.encoder = None
        if isinstance(encoder, TimedEncoder):   # this class records its own "encode" spans
            encoder = encoder.encoder
        if encoder is not None:
            self.encoder = encoder if isinstance(encoder, CachedEncoder) else CachedEncoder(encoder)
        self.max_hops = max_hops
        self.encoder_weight = encoder_weight
        self.reverse_weight = reverse_weight
        self.word_gain = word_gain

    def prefetch(self, states: Sequence[LoopState]) -> None:
        """Encodes every question and predicate of a round in ONE encoder call (cached), so
        the per-question searches below make no model calls of their own."""
        if self.encoder is None:
            return
        texts = [s.question for s in states]
        for s in states:
            g = s.graph if isinstance(s.graph, QuestionGraph) else None
            if g is not None:
                texts.extend(p for _, p, _ in g.triples)
        texts = [t for t in dict.fromkeys(texts) if t not in self.encoder._cache]
        if texts:
            with span("encode", category="model", n=len(texts)):
                self.encoder.encode(texts)

    def _pred_sims(self, question: str, preds: Sequence[str]) -> Dict[str, float]:
        if self.encoder is None or not preds:
            return {}
        texts = [question, *preds]
        if all(t in self.encoder._cache for t in texts):
            m = self.encoder.encode(texts)            # cache lookups only
        else:
            with span("encode", category="model", n=len(preds) + 1):
                m = self.encoder.encode(texts)
        sims = m[1:] @ m[0]
        return {p: float(s) for p, s in zip(preds, sims)}

    def best_path(self, question: str, graph: QuestionGraph) -> Optional[Path]:
        """The highest-scoring relation path (ties: fewer hops), or None."""
        return self.search(question, graph)[0]

    def search(self, question: str, graph: QuestionGraph) -> Tuple[Optional[Path], List[Path]]:
        """(best path, frontier): the frontier holds paths (including the empty path at each
        start entity) that end at an entity with no outgoing triples yet, best bound first:
        bound = score + ``word_gain`` per relation word the path has not consumed."""
        starts = graph.mentioned_in(question)
        if not starts:
            return None, []
        ent_words: Set[str] = set()
        for e in starts:
            ent_words.update(stems(graph.entities[e]))
        rel = frozenset(s for s in stems(question) if s not in ent_words)
        preds = sorted({p for _, p, _ in graph.triples})
        sims = self._pred_sims(question, preds)
        pstems = {p: frozenset(_stems(p)) for p in preds}
        best: Optional[Path] = None
        frontier: List[Path] = []

        def better(a: Path, b: Optional[Path]) -> bool:
            if b is None:
                return True
            if abs(a.score - b.score) > 1e-9:
                return a.score > b.score
            return len(a.hops) < len(b.hops)

        def walk(path: Path, visited: Set[int]):
            nonlocal best
            if path.hops and better(path, best):
                best = path
            if not graph.out_triples(path.end) and rel - path.consumed:
                frontier.append(path)
            if len(path.hops) >= self.max_hops:
                return
            here = path.end
            cands = [(t, False) for t in graph.out_triples(here)] + \
                    [(t, True) for t in graph.in_triples(here)]
            for tid, rev in cands:
                s, p, o = graph.triples[tid]
                nxt = s if rev else o
                if nxt in visited:
                    continue
                new = (pstems[p] & rel) - path.consumed
                if not new:
                    continue
                gain = len(new) + 0.5 * len(new) / max(1, len(pstems[p])) \
                    + self.encoder_weight * sims.get(p, 0.0)
                if rev:
                    gain *= self.reverse_weight
                walk(Path(path.start, path.hops + [(tid, rev)], nxt, path.score + gain,
                          path.consumed | new), visited | {nxt})

        for e in starts:
            walk(Path(e, [], e, 0.0, frozenset()), {e})
        for p in ([best] if best is not None else []) + frontier:
            p.remaining = rel - p.consumed  # type: ignore[attr-defined]
        frontier.sort(key=lambda p: (-(p.score + self.word_gain * len(p.remaining)), len(p.hops)))
        return best, frontier

    def fallback_answer(self, question: str, graph: QuestionGraph) -> Optional[str]:
        """The object of the triple most similar to the question (encoder), else the first."""
        if graph.num_triples == 0:
            return None
        if self.encoder is None:
            rel = set(stems(question))
            scores = [len(rel & set(stems(" ".join(graph.triple(t))))) for t in range(graph.num_triples)]
        else:
            texts = [" ".join(graph.triple(t)) for t in range(graph.num_triples)]
            with span("encode", category="model", n=len(texts) + 1):
                m = self.encoder.encode([question, *texts])
            scores = list(m[1:] @ m[0])
        return graph.triple(int(np.argmax(scores)))[2]


def _graph(state: LoopState) -> QuestionGraph:
    return state.graph if isinstance(state.graph, QuestionGraph) else merge_steps(state.step_triples)


def _looks_literal(s: str) -> bool:
    return bool(re.fullmatch(r"[\d\s,.\-/]+", s))


class HeuristicPlanner:
    """Baseline planner (see module docstring); emits RAS's plan tags."""

    def __init__(self, encoder=None, reasoner: Optional[GraphPathReasoner] = None,
                 with_relation_words: bool = False, **kw):
        self.reasoner = reasoner or GraphPathReasoner(encoder, **kw)
        self.with_relation_words = with_relation_words

    def plan_one(self, st: LoopState) -> str:
        if not st.subqueries:
            return f"[SUBQ] {st.question}"
        g = _graph(st)
        asked = {q.casefold().strip() for q in st.subqueries}
        best, frontier = self.reasoner.search(st.question, g)
        if best is None and not frontier:
            # no question entity in the graph yet: ask for the question's names (capitalised
            # words after the first), else its content words
            q = " ".join(_NAME.findall(st.question.split(" ", 1)[-1])) or \
                " ".join(w for w in _TOKEN.findall(st.question.casefold()) if w not in STOPWORDS)
            return f"[SUBQ] {q}" if q and q.casefold() not in asked else "[SUFFICIENT]"
        best_score = best.score if best is not None else 0.0
        for p in frontier:
            # retrieving the path's end entity could still beat the best complete path
            if p.score + self.reasoner.word_gain * len(p.remaining) <= best_score + 1e-9:
                break
            end = g.entities[p.end]
            if _looks_literal(end):
                continue
            # the entity plus the question's still-unresolved relation words
            words = [w for w in dict.fromkeys(_TOKEN.findall(st.question.casefold()))
                     if w not in STOPWORDS and _stem(w) in p.remaining]
            q = " ".join([end, *words]) if self.with_relation_words else end
            if q.casefold().strip() not in asked:
                return f"[SUBQ] {q}"
        return "[SUFFICIENT]"

    def plan(self, states: Sequence[LoopState]) -> List[str]:
        self.reasoner.prefetch(states)
        return [self.plan_one(s) for s in states]


class HeuristicAnswerer:
    """Baseline answerer: the end entity of the best relation path (see module docstring)."""

    def __init__(self, encoder=None, reasoner: Optional[GraphPathReasoner] = None, **kw):
        self.reasoner = reasoner or GraphPathReasoner(encoder, **kw)

    def answer_one(self, st: LoopState) -> str:
        g = _graph(st)
        path = self.reasoner.best_path(st.question, g)
        if path is not None:
            return g.entities[path.end]
        return self.reasoner.fallback_answer(st.question, g) or "unknown"

    def answer(self, states: Sequence[LoopState]) -> List[str]:
        self.reasoner.prefetch(states)
        return [self.answer_one(s) for s in states]


class BeamAnswerer:
    """Baseline answerer through GEAR's diverse triple beam search (``rasfast.triple_beam_search``)
    over each question graph's triple adjacency: seeds are the triples about entities named in
    the question, beams are scored by cosine between the question and the sum of their triple
    embeddings, and the answer is the end of the best beam's last triple (the entity not shared
    with the triple before it). All questions of a round go through ONE search call (their
    graphs are laid side by side as one disjoint graph). Falls back to
    :class:`HeuristicAnswerer` for a question without seeds. Much weaker than the path search
    (measured on 30 demo questions, hashing encoder: 20% vs 100%): beams are ranked by
    similarity, not by relation words, and run to ``max_len``. It shows the beam-search kernel
    inside the loop ("expand" spans), not a recommended answerer."""

    def __init__(self, encoder, beam_width: int = 4, max_len: int = 3, fallback=None):
        from ...encode import CachedEncoder
        self.encoder = encoder if isinstance(encoder, CachedEncoder) else CachedEncoder(encoder)
        self.beam_width, self.max_len = beam_width, max_len
        self.fallback = fallback or HeuristicAnswerer(reasoner=GraphPathReasoner(self.encoder))

    @staticmethod
    def _text(t) -> str:
        return " ".join(t)

    def answer(self, states: Sequence[LoopState]) -> List[str]:
        from ...ops.beam import triple_beam_search
        graphs = [_graph(s) for s in states]
        texts = [self._text(g.triple(t)) for g in graphs for t in range(g.num_triples)]
        with span("encode", category="model", n=len(texts) + len(states)):
            q = self.encoder.encode([s.question for s in states])
            temb = self.encoder.encode(texts) if texts else np.zeros((0, self.encoder.dim), np.float32)
        ptrs, idxs, seeds, offs = [np.zeros(1, np.int64)], [], [], []
        off = 0
        for s, g in zip(states, graphs):
            indptr, indices = g.triple_csr()
            ptrs.append(indptr[1:] + ptrs[-1][-1])
            idxs.append(indices + off)
            named = set(g.mentioned_in(s.question))
            seeds.append([off + t for t, (a, _, b) in enumerate(g.triples) if a in named or b in named])
            offs.append(off)
            off += g.num_triples
        out = [None] * len(states)
        if off and any(seeds):
            with span("expand", batch=len(states)):
                res = triple_beam_search((np.concatenate(ptrs), np.concatenate(idxs) if idxs else
                                          np.zeros(0, np.int64)), temb, q, seeds,
                                         beam_width=self.beam_width, max_len=self.max_len)
            seqs, lengths = np.asarray(res.sequences), np.asarray(res.lengths)
            for i, (g, o) in enumerate(zip(graphs, offs)):
                L = int(lengths[i])
                if L == 0:
                    continue
                path = [int(t) - o for t in seqs[i, 0, :L]]
                s_, _, o_ = g.triples[path[-1]]
                prev = set(g.triples[path[-2]][::2]) if L > 1 else set(g.mentioned_in(states[i].question))
                out[i] = g.entities[s_ if o_ in prev and s_ not in prev else o_]
        missing = [i for i, a in enumerate(out) if a is None]
        if missing:
            for i, a in zip(missing, self.fallback.answer([states[i] for i in missing])):
                out[i] = a
        return out


__all__ = ["HeuristicPlanner", "HeuristicAnswerer", "BeamAnswerer", "GraphPathReasoner", "stems", "STOPWORDS"]
