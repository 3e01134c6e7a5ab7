"""The KG corpus KiRAG retrieves from: triples per passage id, flattened once.

Triples are cleaned (``clean_triples``: 3 non-empty strings, duplicates within a passage
dropped) and numbered globally; ``passage_triples(pid)`` gives a passage's triple ids and
``pid_of[t]`` a triple's passage. The aligner's triple embeddings are kept in a growing
table (:class:`TripleEmbeddings`): a triple is encoded the first time a round needs it,
never again, so a corpus far larger than what the questions touch costs nothing up front.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from ...parse import clean_triples
from ..ras.qgraph import normalize_entity
from ...types import Triple


def triple_text(t: Triple) -> str:
    """How the aligner reads a triple (as GEAR's graph texts: "s p o")."""
    return f"{t[0]} {t[1]} {t[2]}"


def chain_text(chain: Sequence[Triple]) -> str:
    """A reasoning chain in the query: "<s; p; o>, <s; p; o>" (KiRAG's triple format)."""
    return ", ".join(f"<{s}; {p}; {o}>" for s, p, o in chain)


def entities(t: Triple) -> tuple:
    return normalize_entity(t[0]), normalize_entity(t[2])


class TripleStore:
    """Triples of a passage corpus, numbered 0..n-1 in (pid, position) order."""

    def __init__(self, triples_by_pid: Mapping[int, Sequence[Sequence[str]]]):
        if not isinstance(triples_by_pid, Mapping):
            raise TypeError("triples_by_pid: expected a mapping passage id -> list of (s, p, o), "
                            f"got {type(triples_by_pid).__name__}")
        self.triples: List[Triple] = []
        pids: List[int] = []
        self._by_pid: Dict[int, np.ndarray] = {}
        for pid in sorted(triples_by_pid):
            clean = clean_triples(triples_by_pid[pid])
            start = len(self.triples)
            self.triples.extend(clean)
            pids.extend([int(pid)] * len(clean))
            self._by_pid[int(pid)] = np.arange(start, start + len(clean), dtype=np.int64)
        self.pid_of = np.asarray(pids, dtype=np.int64)
        self._texts: Optional[List[str]] = None

    @classmethod
    def from_dataset(cls, ds) -> "TripleStore":
        if ds.triples is None:
            raise ValueError(f"dataset {ds.name!r} has no triples per passage")
        return cls({i: t for i, t in enumerate(ds.triples)})

    def __len__(self) -> int:
        return len(self.triples)

    @property
    def texts(self) -> List[str]:
        if self._texts is None:
            self._texts = [triple_text(t) for t in self.triples]
        return self._texts

    def passage_triples(self, pid: int) -> np.ndarray:
        return self._by_pid.get(int(pid), np.zeros(0, dtype=np.int64))


class TripleEmbeddings:
    """A float32 table of aligner embeddings of triples, filled on demand (row = triple id
    order of first use); ``rows(ids)`` encodes the missing ones in one encoder call.

    :meth:`reuse` takes an existing table instead (the knowledge index's triple embeddings,
    made by the same encoder): then nothing is encoded at all."""

    def __init__(self, store: TripleStore, encoder, dim: Optional[int] = None):
        self.store, self.encoder = store, encoder
        self._row = np.full(len(store), -1, dtype=np.int64)
        self._table = np.zeros((0, dim or 0), dtype=np.float32)
        self._used = 0
        self.reused = False

    def reuse(self, table: np.ndarray, passage_ids: Sequence[int], texts: Sequence[str]) -> bool:
        """Uses ``table`` (row j = the embedding of ``texts[j]``, a triple of passage
        ``passage_ids[j]``, as :func:`triple_text` writes it) when it holds every triple of
        the store; returns whether it did. The table is used in place (it may be mapped)."""
        if table.ndim != 2 or len(passage_ids) != table.shape[0] or len(texts) != table.shape[0]:
            return False
        where = {(int(p), t): j for j, (p, t) in enumerate(zip(passage_ids, texts))}
        rows = np.empty(len(self.store), dtype=np.int64)
        for i, (pid, text) in enumerate(zip(self.store.pid_of.tolist(), self.store.texts)):
            j = where.get((pid, text))
            if j is None:   # a triple the table lacks: keep encoding on demand
                return False
            rows[i] = j
        self._row, self._table, self._used = rows, table, table.shape[0]
        self.reused = True
        return True

    @property
    def table(self) -> np.ndarray:
        return self._table[:self._used]

    def rows(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        missing = np.unique(ids[self._row[ids] < 0])
        if len(missing):
            texts = [self.store.texts[int(t)] for t in missing]
            emb = np.asarray(self.encoder.encode(texts), dtype=np.float32)
            need = self._used + len(missing)
            if need > len(self._table) or self._table.shape[1] != emb.shape[1]:
                grown = np.zeros((max(need, 2 * len(self._table), 1024), emb.shape[1]), np.float32)
                if self._used:
                    grown[:self._used] = self._table[:self._used]
                self._table = grown
            self._table[self._used:need] = emb
            self._row[missing] = np.arange(self._used, need)
            self._used = need
        return self._row[ids]
