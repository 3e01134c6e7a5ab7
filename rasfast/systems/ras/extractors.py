"""Triple extractors: a per-passage cache (precomputed or filled by another extractor) and a
model-free sentence-pattern extractor for corpora that come without triples.

``CachedTripleExtractor`` is what the loop should hold: passages it has seen are never
converted again, across steps and questions; unseen passages of one call go to the wrapped
extractor (an LLM extractor, say) in ONE batched call.
"""
from __future__ import annotations

import re
from typing import Dict, List, Mapping, Optional, Sequence

from ...parse import clean_triples
from ...types import RetrievedPassage, Triple, TripleExtractor


class CachedTripleExtractor:
    """Triples per passage id, from ``precomputed`` and/or a ``fallback`` extractor.

    Args:
        precomputed: pid -> triples (e.g. a dataset's gold or OpenIE triples); raw lists
            are cleaned (malformed/NaN entries dropped).
        fallback: extractor for pids not in the cache; its results are cached. Without one,
            unknown passages give no triples (counted in ``misses``).
    """

    def __init__(self, precomputed: Optional[Mapping[int, Sequence]] = None,
                 fallback: Optional[TripleExtractor] = None):
        # a plain dict is cleaned up front; any other mapping (a saved knowledge index's
        # triples_by_pid, which decodes a passage's record on lookup) is read per passage, on
        # first use, so building a system does not decode every passage of a big index
        self._lazy = precomputed if precomputed is not None and not isinstance(precomputed, dict) else None
        self.cache: Dict[int, List[Triple]] = {} if self._lazy is not None else {
            int(k): clean_triples(v) for k, v in (precomputed or {}).items()}
        self.fallback = fallback
        self.converted = 0   # passages sent to the fallback
        self.misses = 0      # passages with no triples and no fallback
        self.hits = 0

    @classmethod
    def from_dataset(cls, dataset, fallback: Optional[TripleExtractor] = None) -> "CachedTripleExtractor":
        """Uses ``dataset.triples`` (demo gold triples, MuSiQue OpenIE) when present."""
        pre = None
        if getattr(dataset, "triples", None) is not None:
            pre = {p.pid: t for p, t in zip(dataset.passages, dataset.triples)}
        return cls(pre, fallback)

    def extract(self, passages: Sequence[RetrievedPassage]) -> List[List[Triple]]:
        todo: Dict[int, RetrievedPassage] = {}
        for p in passages:
            if p.pid not in self.cache and self._lazy is not None and p.pid in self._lazy:
                self.cache[p.pid] = clean_triples(self._lazy[p.pid])
            if p.pid not in self.cache and p.pid not in todo:
                todo[p.pid] = p
        self.hits += len(passages) - len(todo)
        if todo:
            if self.fallback is None:
                self.misses += len(todo)
                for pid in todo:
                    self.cache[pid] = []
            else:
                plist = list(todo.values())
                got = self.fallback.extract(plist)
                if len(got) != len(plist):
                    raise ValueError(f"fallback extractor returned {len(got)} results for {len(plist)} passages")
                self.converted += len(plist)
                for p, t in zip(plist, got):
                    self.cache[p.pid] = [tuple(x) for x in t]
        return [list(self.cache[p.pid]) for p in passages]


_SENT = re.compile(r"(?<=[.!?])\s+")
# a capitalised multi-word name, or a number (years, counts)
_MENTION = re.compile(r"(?:[A-Z][\w'\-]*(?:\s+(?:of|the|de|la|von|and)?\s*[A-Z][\w'\-]*)*|\b\d[\d,.]*\b)")
_WORD = re.compile(r"[A-Za-z']+")


class SentenceTripleExtractor:
    """A model-free OpenIE-lite baseline: for each sentence, the passage title is the subject,
    each capitalised name or number in the sentence an object, and the (up to 4) words between
    it and the previous name the predicate. Crude, but it gives corpora without triples a question graph."""

    name = "sentence-patterns"

    def __init__(self, max_per_passage: int = 24):
        self.max_per_passage = max_per_passage

    def _one(self, p: RetrievedPassage) -> List[Triple]:
        out: List[Triple] = []
        title = p.title.strip()
        tnorm = title.casefold()
        for sent in _SENT.split(p.text):
            last = 0                     # predicates never reach back past the previous mention
            for m in _MENTION.finditer(sent):
                obj = m.group(0).strip(" ,.")
                words = _WORD.findall(sent[last:m.start()])[-4:]
                last = m.end()
                if not obj or obj.casefold() in tnorm or m.start() == 0 or not words:
                    continue
                out.append((title, " ".join(words).lower(), obj))
                if len(out) >= self.max_per_passage:
                    return list(dict.fromkeys(out))
        return list(dict.fromkeys(out))

    def extract(self, passages: Sequence[RetrievedPassage]) -> List[List[Triple]]:
        return [self._one(p) for p in passages]


__all__ = ["CachedTripleExtractor", "SentenceTripleExtractor"]
