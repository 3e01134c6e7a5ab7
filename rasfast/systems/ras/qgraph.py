"""The question graph: every retrieval step's triples merged, entities deduplicated.

Entities are keyed by a normal form (case-fold, trimmed, white space collapsed, surrounding
punctuation stripped), so "Paris", " paris." and "PARIS" are one node across steps; the node
keeps the first spelling seen. Each triple is stored once (subject id, predicate, object id);
``steps[i]`` lists the triple ids that step ``i`` contributed (its subgraph, in RAS's terms,
including triples already seen in earlier steps), so a graph encoder can encode one
subgraph per sub-query and cache it.
"""
from __future__ import annotations

import functools
import re
import string
from typing import Dict, Iterable, List, Sequence, Tuple

import numpy as np

from ...types import Triple

_WS = re.compile(r"\s+")
_PUNCT = string.punctuation + " \t\r\n\u2018\u2019\u201c\u201d"


@functools.lru_cache(maxsize=1 << 16)
def normalize_entity(s: str) -> str:
    """Case-folded, trimmed, white space collapsed, surrounding punctuation stripped."""
    return _WS.sub(" ", s.casefold()).strip(_PUNCT)


_NONWORD = re.compile(r"[^\w\s]")


@functools.lru_cache(maxsize=1 << 16)
def _word_form(s: str) -> str:
    """" w1 w2 " from text: case-folded words only, padded, for whole-word containment."""
    return " " + _WS.sub(" ", _NONWORD.sub(" ", s.casefold())).strip() + " "


@functools.lru_cache(maxsize=1 << 14)
def _norm_pred(p: str) -> str:
    return _WS.sub(" ", p.strip())


class QuestionGraph:
    def __init__(self):
        self.entities: List[str] = []            # display form, by entity id
        self._ent_id: Dict[str, int] = {}
        self.triples: List[Tuple[int, str, int]] = []
        self._triple_id: Dict[Tuple[int, str, int], int] = {}
        self.steps: List[List[int]] = []
        self._words: List[str] = []              # word form of each entity (for mentioned_in)
        self._out: Dict[int, List[int]] = {}     # entity id -> ids of triples with it as subject
        self._in: Dict[int, List[int]] = {}

    # -- building ------------------------------------------------------------------------
    def entity_id(self, name: str, create: bool = True) -> int:
        key = normalize_entity(name)
        eid = self._ent_id.get(key)
        if eid is None and create:
            eid = len(self.entities)
            self._ent_id[key] = eid
            self.entities.append(name.strip())
            self._words.append(_word_form(key))
        return -1 if eid is None else eid

    def add_step(self, triples: Iterable[Triple]) -> int:
        """Adds one step's triples; returns the step index. Empty fields are skipped."""
        ids: List[int] = []
        seen = set()
        for s, p, o in triples:
            if not (normalize_entity(s) and normalize_entity(o) and p.strip()):
                continue
            key = (self.entity_id(s), _norm_pred(p), self.entity_id(o))
            tid = self._triple_id.get(key)
            if tid is None:
                tid = len(self.triples)
                self._triple_id[key] = tid
                self.triples.append(key)
                self._out.setdefault(key[0], []).append(tid)
                self._in.setdefault(key[2], []).append(tid)
            if tid not in seen:
                seen.add(tid)
                ids.append(tid)
        self.steps.append(ids)
        return len(self.steps) - 1

    # -- reading -------------------------------------------------------------------------
    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_triples(self) -> int:
        return len(self.triples)

    def triple(self, tid: int) -> Triple:
        s, p, o = self.triples[tid]
        return (self.entities[s], p, self.entities[o])

    def all_triples(self) -> List[Triple]:
        return [self.triple(t) for t in range(len(self.triples))]

    def step_triples(self, step: int) -> List[Triple]:
        return [self.triple(t) for t in self.steps[step]]

    def out_triples(self, eid: int) -> List[int]:
        return self._out.get(eid, [])

    def in_triples(self, eid: int) -> List[int]:
        return self._in.get(eid, [])

    def find(self, name: str) -> int:
        """Entity id of ``name`` (normalised), or -1."""
        return self._ent_id.get(normalize_entity(name), -1)

    def mentioned_in(self, text: str) -> List[int]:
        """Entities whose normal form occurs in ``text`` as whole words, longest first."""
        norm = _word_form(text)
        hits = []
        for eid, k in enumerate(self._words):
            if len(k) >= 4 and k in norm:
                hits.append((len(k), eid))
        hits.sort(key=lambda x: (-x[0], x[1]))
        return [eid for _, eid in hits]

    def edge_index(self, step: int = -1) -> Tuple[np.ndarray, List[str]]:
        """Directed edges ([2, E] int64 over entity ids) and predicates, for one step's
        subgraph (``step >= 0``) or the whole graph (``step = -1``)."""
        tids = range(len(self.triples)) if step < 0 else self.steps[step]
        src = [self.triples[t][0] for t in tids]
        dst = [self.triples[t][2] for t in tids]
        preds = [self.triples[t][1] for t in tids]
        return np.asarray([src, dst], dtype=np.int64).reshape(2, -1), preds

    def triple_csr(self) -> Tuple[np.ndarray, np.ndarray]:
        """GEAR's triple adjacency (triples sharing an entity), CSR ``(indptr, indices)``:
        neighbours sorted, unique, no self loops."""
        rows: List[List[int]] = []
        for t, (s, _, o) in enumerate(self.triples):
            nb = set(self._out.get(s, ())) | set(self._in.get(s, ())) | \
                set(self._out.get(o, ())) | set(self._in.get(o, ()))
            nb.discard(t)
            rows.append(sorted(nb))
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        indptr[1:] = np.cumsum([len(r) for r in rows])
        indices = np.fromiter((x for r in rows for x in r), dtype=np.int64, count=int(indptr[-1]))
        return indptr, indices

    def to_dict(self) -> Dict[str, object]:
        return {"entities": list(self.entities),
                "triples": [list(self.triple(t)) for t in range(len(self.triples))],
                "steps": [list(s) for s in self.steps]}

    def __repr__(self) -> str:
        return (f"QuestionGraph(entities={self.num_entities}, triples={self.num_triples}, "
                f"steps={len(self.steps)})")


def merge_steps(step_triples: Sequence[Sequence[Triple]]) -> QuestionGraph:
    """A question graph from per-step triple lists."""
    g = QuestionGraph()
    for st in step_triples:
        g.add_step(st)
    return g


__all__ = ["QuestionGraph", "normalize_entity", "merge_steps"]
