"""A BM25 index over passage texts (``bm25s``, Lucene's BM25), saved beside a knowledge index.

GEAR's base retrievers are BM25, SBERT (dense) and their RRF hybrid (its §6.1, Table 2).
:class:`BM25Index` is the sparse one: ``bm25s`` (a maintained library: sparse CSC scores,
k1 = 1.5, b = 0.75, Lucene's idf) over lower-cased word tokens with English stop words
removed. :mod:`rasfast.reference.bm25` holds a plain-numpy oracle the tests compare it with.

Growing: BM25's idf and average length change with every new passage, so an index is built
again over every text when a knowledge index grows (``KnowledgeIndex.add`` drops the old
one; the next search or save rebuilds it: O(all passages), about a second per 10^5 short
passages here). Saved in ``bm25.<g>/`` (the library's own files plus ``ids.npy``), named in
``knowledge.json``, committed with the knowledge index.
"""
from __future__ import annotations

import os
import pathlib
from typing import List, Optional, Sequence, Tuple

import numpy as np

STOPWORDS = "en"


def _bm25s():
    try:
        import bm25s
    except ImportError as e:   # pragma: no cover - a dependency of rasfast
        raise ImportError(f"BM25 needs the bm25s package (pip install bm25s) ({e})") from None
    return bm25s


def tokenize(texts: Sequence[str]) -> List[List[str]]:
    """The index's tokens of each text (bm25s's splitter, lower case, English stop words out)."""
    bm25s = _bm25s()
    tok = bm25s.tokenize(list(texts), stopwords=STOPWORDS, return_ids=False, show_progress=False)
    return [list(t) for t in tok]


class BM25Index:
    """BM25 over ``texts`` with external ``ids`` (row i has id ``ids[i]``)."""

    def __init__(self, model, ids: np.ndarray):
        self.model = model
        self.ids = np.asarray(ids, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def build(cls, texts: Sequence[str], ids: Optional[Sequence[int]] = None) -> "BM25Index":
        bm25s = _bm25s()
        texts = [str(t) for t in texts]
        ids = np.arange(len(texts), dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
        if len(ids) != len(texts):
            raise ValueError(f"ids: {len(ids)} ids for {len(texts)} texts")
        model = bm25s.BM25()
        if texts:
            model.index(tokenize(texts), show_progress=False)
        return cls(model, ids)

    def scores(self, query: str) -> np.ndarray:
        """float32 [len(self)]: the BM25 score of every text for ``query``."""
        if not len(self):
            return np.zeros(0, np.float32)
        toks = tokenize([query])[0]
        return np.asarray(self.model.get_scores(toks), dtype=np.float32)

    def search(self, queries: Sequence[str], k: int) -> List[Tuple[np.ndarray, np.ndarray]]:
        """Per query: (ids int64, scores float32) of the ``k`` best texts with a score > 0,
        best first; ties by lower row."""
        out = []
        for q in queries:
            s = self.scores(q)
            if s.size == 0:
                out.append((np.zeros(0, np.int64), np.zeros(0, np.float32)))
                continue
            kk = min(int(k), s.size)
            top = np.argpartition(-s, kk - 1)[:kk] if kk < s.size else np.arange(s.size)
            top = top[np.lexsort((top, -s[top]))]
            top = top[s[top] > 0]
            out.append((self.ids[top], s[top]))
        return out

    # -- files ---------------------------------------------------------------------------------
    def save(self, directory) -> pathlib.Path:
        d = pathlib.Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        if len(self):
            self.model.save(str(d), show_progress=False)
        np.save(d / "ids.npy", self.ids)
        for p in d.iterdir():                        # the files are read back after a crash
            with open(p, "rb") as f:
                os.fsync(f.fileno())
        return d

    @classmethod
    def load(cls, directory, mmap: bool = False) -> "BM25Index":
        bm25s = _bm25s()
        d = pathlib.Path(directory)
        ids_path = d / "ids.npy"
        if not ids_path.is_file():
            raise ValueError(f"{ids_path}: missing; {d} is not a saved BM25 index")
        ids = np.load(ids_path)
        if not len(ids):
            return cls(bm25s.BM25(), ids)
        try:
            model = bm25s.BM25.load(str(d), mmap=mmap, show_progress=False)
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"{d}: the BM25 files could not be read ({e})") from None
        n = int(model.scores["num_docs"]) if isinstance(getattr(model, "scores", None), dict) else len(ids)
        if n != len(ids):
            raise ValueError(f"{ids_path}: {len(ids)} ids for a BM25 index of {n} documents")
        return cls(model, ids)


__all__ = ["BM25Index", "tokenize"]
