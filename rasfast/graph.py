"""TripleGraph: a graph whose nodes are (subject, predicate, object) triples.

Two triples are neighbours when they share an entity: the subject or object of one is the
subject or object of the other (after normalisation). The adjacency is stored as CSR
(``indptr`` int64[n+1], ``indices`` int64[nnz]; each row sorted, unique, no self loop) and
built in C++ (csrc/graph/triple_graph_cpu.cpp): hash maps, counting sort, OpenMP.

Rules (the pure-Python oracle rasfast/reference/triple_graph.py implements them too):

- Well-formed triple: a list or tuple of exactly three ``str`` parts, each with a character
  that is not white space. Anything else (2 or 4+ parts, None, NaN, numbers, blank parts) is
  skipped and counted in ``n_skipped``; ``source_index`` maps kept triples to input positions.
- Entity normalisation (``normalize=True``): case-fold (str.casefold), trim, collapse white
  space runs to one space, strip surrounding punctuation (Unicode category P*, e.g. ``.,'"()``;
  symbols such as ``$+<>`` stay). A string made only of punctuation keeps it ("..." stays).
  ASCII strings are normalised in C++; each distinct non-ASCII string goes once through
  :func:`rasfast.reference.triple_graph.normalize_entity` (Python's Unicode tables).
  Predicates are never normalised. ``normalize=False`` compares strings exactly.
- Entity ids follow first appearance (subject, then object, of each kept triple in order).
- Growing: :meth:`TripleGraph.merge` adds triples to a copy of the graph without rebuilding
  it (csrc/graph/triple_graph_merge_cpu.cpp); the result equals ``from_triples`` on the old
  input followed by the new triples, bit for bit (old ids unchanged, new entities appended).
- Hub guard ``max_degree``: an entity's degree is the number of kept triples that mention it
  (as subject or object). An entity of degree > ``max_degree`` links no triples: two triples
  that share ONLY hub entities are not neighbours. Triples keep their entity ids either way.
  Without the guard an entity of degree d adds d*(d-1) entries to ``indices``; ``max_edges``
  (default 2**31) refuses, with a ValueError before allocating, a graph that could exceed it.
"""
from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from typing import Dict, List, Optional

import numpy as np

from . import dispatch as _bk
from ._validate import check_bool_arg, check_int_arg
from .ops.graph_build import DEFAULT_MAX_EDGES  # noqa: F401 (its home: the adjacency op)
from .reference.triple_graph import normalize_entity

_LAZY_LOCK = threading.RLock()
_EMPTY = np.zeros(0, dtype=np.int64)


def _normalize_many(strings: List[str]) -> List[str]:
    return [normalize_entity(s) for s in strings]


def _as_triple_list(triples) -> list:
    if isinstance(triples, (str, bytes)) or not hasattr(triples, "__iter__"):
        raise TypeError(f"triples: expected a sequence of (subject, predicate, object) triples, "
                        f"got {type(triples).__name__}")
    if isinstance(triples, np.ndarray):
        return triples.tolist()   # a [n, 3] string array becomes lists of str
    return list(triples)         # a private copy: the graph must not change with the caller's list


def _passage_array(passage_ids, n_in: int) -> np.ndarray:
    if passage_ids is None:
        return np.full(n_in, -1, dtype=np.int64)
    if hasattr(passage_ids, "detach"):
        passage_ids = passage_ids.detach().cpu().numpy()
    arr = np.asarray(passage_ids)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise TypeError(f"passage_ids: expected a 1-d sequence of ints, got "
                        f"{'dtype ' + str(arr.dtype) if arr.ndim == 1 else f'shape {arr.shape}'}")
    if arr.shape[0] != n_in:
        raise ValueError(f"passage_ids: expected one id per input triple ({n_in}), got {arr.shape[0]}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"passage_ids: must be >= 0, got {int(arr.min())}")
    return arr.astype(np.int64, copy=False)


class TripleGraph:
    """Triples, their entities and passages, and the triple adjacency (CSR).

    Attributes (numpy int64 unless said):
        indptr [n+1], indices [nnz]: the triple adjacency, rows sorted, no self loops.
        head, tail [n]: entity ids of each triple's subject and object.
        passage_ids [n]: source passage of each triple (-1 when not given).
        source_index [n]: position of each kept triple in the input.
        entity_degree [num_entities]: kept triples mentioning each entity.
        entities: list of normalised entity strings (index = entity id).
        triples: list of the kept (subject, predicate, object) as given (tuples made on
            first access from the input rows; mutate no input row before that).
        n_skipped: number of malformed input triples.
        embeddings: float32 [n, D] once :meth:`embed` ran (else None).
    """

    def __init__(self, *, indptr, indices, head, tail, entities, entity_degree, passage_ids,
                 source_index, source, n_skipped, n_hubs=0, normalize=True, max_degree=None):
        self.indptr = indptr
        self.indices = indices
        self.head = head
        self.tail = tail
        self.entities = entities
        self.entity_degree = entity_degree
        self.passage_ids = passage_ids
        self.source_index = source_index
        self._source = source          # the input list (a private copy); kept rows = source_index
        self._triples: Optional[List[tuple]] = None
        self.n_skipped = int(n_skipped)
        self.n_hubs = int(n_hubs)
        self.normalize = normalize
        self.max_degree = max_degree
        self.embeddings: Optional[np.ndarray] = None
        self._texts: Optional[List[str]] = None
        self._passage_csr = None
        self._entity_ids: Optional[Dict[str, int]] = None   # built on the first merge
        # what changed since a base state of this graph (a save of a knowledge index):
        # (base triples, base entities, changed rows < base, changed entities < base, rows
        # < base that may have lost entries (hub guard) and must be rewritten whole)
        self._delta_base = (self.num_triples, len(entities), _EMPTY, _EMPTY, _EMPTY)

    # ---- lazily joined arrays (a saved index of several parts, rasfast.index.knowledge) ----
    @classmethod
    def _lazy(cls, *, num_triples: int, num_edges: int, thunks: Dict[str, "callable"],
              emb_segments=None, **kw) -> "TripleGraph":
        """A graph whose arrays named in ``thunks`` are computed on first access (a thunk
        returns {name: array} for one or more names, e.g. the CSR of several saved parts
        joined); ``emb_segments``: the triple embeddings as row blocks, joined on first
        access of ``embeddings`` (``embedding_rows`` reads rows without joining)."""
        ph = {name: _EMPTY for name in thunks}
        g = cls(**{**kw, **ph})
        for name in thunks:
            del g.__dict__[name]
        g._thunks = dict(thunks)
        g._counts = (int(num_triples), int(num_edges))
        g._delta_base = (int(num_triples), len(kw["entities"]), _EMPTY, _EMPTY, _EMPTY)
        if emb_segments is not None:
            g._set_embedding_segments(emb_segments)
        return g

    def __getattr__(self, name):
        # called only when ``name`` is not found: a lazily joined array (see _lazy)
        thunks = self.__dict__.get("_thunks")
        if thunks and name in thunks:
            with _LAZY_LOCK:            # one thread joins; the others then find the result
                if name in self.__dict__:
                    return self.__dict__[name]
                got = thunks[name]()
                for key, value in got.items():
                    self.__dict__[key] = value
                    thunks.pop(key, None)
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getstate__(self):
        for name in list(self.__dict__.get("_thunks") or ()):   # join everything lazy
            getattr(self, name)
        state = dict(self.__dict__)
        state.pop("_thunks", None)
        state.pop("_counts", None)
        state["_emb_segments"] = None
        return state

    def _set_embedding_segments(self, segments) -> None:
        """Embeddings given as row blocks (oldest first): joined on first access."""
        segs = [s for s in segments if s is not None]
        self._emb_segments = segs
        if len(segs) == 1:
            self.__dict__["embeddings"] = segs[0]
            return
        self.__dict__.pop("embeddings", None)
        self.__dict__.setdefault("_thunks", {})["embeddings"] = lambda: {
            "embeddings": np.concatenate([np.asarray(s, dtype=np.float32) for s in segs])}

    def embedding_segments(self) -> list:
        """The embeddings as row blocks, without joining them (one block once joined)."""
        if "embeddings" in self.__dict__:      # joined, given, or set since
            emb = self.__dict__["embeddings"]
            return [] if emb is None else [emb]
        return list(self.__dict__.get("_emb_segments") or [])

    def embedding_rows(self, start: int) -> np.ndarray:
        """``embeddings[start:]`` (float32) without joining row blocks before ``start``."""
        out, s0 = [], 0
        for seg in self.embedding_segments():
            n = seg.shape[0]
            if s0 + n > start:
                out.append(np.asarray(seg[max(start - s0, 0):], dtype=np.float32))
            s0 += n
        if not out:
            segs = self.embedding_segments()
            dim = segs[0].shape[1] if segs else 0
            return np.zeros((0, dim), dtype=np.float32)
        return out[0] if len(out) == 1 else np.concatenate(out)

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_triples(cls, triples: Sequence, passage_ids=None, normalize: bool = True,
                     max_degree: Optional[int] = None,
                     max_edges: int = DEFAULT_MAX_EDGES) -> "TripleGraph":
        """Builds the graph from (subject, predicate, object) string triples.

        Args:
            triples: a sequence (or iterable, or [n, 3] string array) of triples. Malformed
                entries are skipped and counted (``n_skipped``), never raised.
            passage_ids: optional int per INPUT triple (>= 0): its source passage.
            normalize: normalise entity strings (see the module docstring) before matching.
            max_degree: optional hub guard (int >= 0): entities mentioned by more triples
                than this create no adjacency.
            max_edges: refuse (ValueError, before allocating) when the adjacency could exceed
                this many entries (bound: sum of d*(d-1) over linking entities of degree d);
                the default, 2**31 entries, is 16 GiB of int64 indices.
        """
        items = _as_triple_list(triples)
        pids = _passage_array(passage_ids, len(items))
        normalize = check_bool_arg(normalize, "normalize")
        md = -1 if max_degree is None else check_int_arg(max_degree, "max_degree", 0)
        max_edges = check_int_arg(max_edges, "max_edges", 0, 2 ** 62)
        r = _bk.cpu_module().triple_graph_build(items, normalize, md, max_edges, _normalize_many)
        kept = r["kept"]
        return cls(indptr=r["indptr"], indices=r["indices"], head=r["head"], tail=r["tail"],
                   entities=r["entities"], entity_degree=r["entity_degree"],
                   passage_ids=pids[kept], source_index=kept, source=items,
                   n_skipped=r["n_skipped"], n_hubs=r["n_hubs"], normalize=normalize,
                   max_degree=max_degree)

    @classmethod
    def from_dataset(cls, dataset, normalize: bool = True, max_degree: Optional[int] = None,
                     max_edges: int = DEFAULT_MAX_EDGES) -> "TripleGraph":
        """The graph of a QADataset's OpenIE triples (MuSiQue); passage id = corpus index."""
        per_passage = getattr(dataset, "triples", None)
        if per_passage is None:
            raise ValueError(f"dataset: {getattr(dataset, 'name', type(dataset).__name__)!r} "
                             f"has no OpenIE triples (only MuSiQue ships them)")
        counts = [len(t) for t in per_passage]
        flat = list(itertools.chain.from_iterable(per_passage))
        pids = np.repeat(np.arange(len(per_passage), dtype=np.int64), counts)
        return cls.from_triples(flat, pids, normalize=normalize, max_degree=max_degree,
                                max_edges=max_edges)

    def merge(self, triples: Sequence, passage_ids=None,
              max_edges: int = DEFAULT_MAX_EDGES) -> "TripleGraph":
        """A NEW graph: this one plus ``triples`` (this graph is left unchanged).

        Equals ``TripleGraph.from_triples(old_input + triples, ...)`` with this graph's
        ``normalize`` and ``max_degree``, bit for bit: old triples and entities keep their ids,
        new triples follow in order, new entities follow in first-appearance order. Costs the
        copy of the old arrays plus work proportional to the new triples' entity degrees, not
        a rebuild (csrc/graph/triple_graph_merge_cpu.cpp says why).

        Args:
            triples: the new triples (same rules as ``from_triples``; malformed ones skipped).
            passage_ids: optional int per new input triple (>= 0); -1 when omitted.
            max_edges: as in ``from_triples``, checked on the merged graph.
        """
        items = _as_triple_list(triples)
        pids = _passage_array(passage_ids, len(items))
        max_edges = check_int_arg(max_edges, "max_edges", 0, 2 ** 62)
        cpu = _bk.cpu_module()
        r = cpu.triple_graph_entities(items, bool(self.normalize), _normalize_many)
        ids = self._entity_index()
        self._entity_ids = None   # taken: a concurrent merge of this graph builds its own
        try:
            return self._merge(cpu, r, ids, items, pids, max_edges)
        except BaseException:
            self._entity_ids = ids          # unchanged: the table is only extended on success
            raise

    def _merge(self, cpu, r, ids: Dict[str, int], items: list, pids: np.ndarray,
               max_edges: int) -> "TripleGraph":
        e_old = self.num_entities
        local = r["entities"]
        new_entities: List[str] = []
        lut = np.empty(len(local), dtype=np.int64)
        known = ids.lookup_many(local) if hasattr(ids, "lookup_many") else None   # a saved table
        for k, key in enumerate(local):       # local entities are distinct and in first-appearance order
            i = ids.get(key) if known is None else (None if known[k] < 0 else int(known[k]))
            if i is None:
                i = e_old + len(new_entities)
                new_entities.append(key)
            lut[k] = i
        nh, nt = lut[r["head"]], lut[r["tail"]]
        md = -1 if self.max_degree is None else int(self.max_degree)
        m = cpu.triple_graph_merge(_i64(self.indptr), _i64(self.indices), _i64(self.head),
                                   _i64(self.tail), _i64(self.entity_degree), nh, nt,
                                   e_old + len(new_entities), md, max_edges)
        kept = r["kept"]
        g = TripleGraph(indptr=m["indptr"], indices=m["indices"],
                        head=np.concatenate([np.asarray(self.head, dtype=np.int64), nh]),
                        tail=np.concatenate([np.asarray(self.tail, dtype=np.int64), nt]),
                        entities=_extend(self.entities, new_entities),
                        entity_degree=m["entity_degree"],
                        passage_ids=np.concatenate([np.asarray(self.passage_ids, dtype=np.int64), pids[kept]]),
                        source_index=np.concatenate([np.asarray(self.source_index, dtype=np.int64),
                                                     kept + len(self._source)]),
                        source=_extend(self._source, items), n_skipped=self.n_skipped + r["n_skipped"],
                        n_hubs=m["n_hubs"], normalize=self.normalize, max_degree=self.max_degree)
        if self._triples is not None:   # keep what was already built for the old triples
            g._triples = self._triples + g.triples_from(self.num_triples)
        if self._texts is not None:
            g._texts = self._texts + g.texts_from(self.num_triples)
        # the entity table moves to the new graph (this one rebuilds it if it merges again)
        for key in new_entities:
            ids[key] = len(ids)
        g._entity_ids = ids
        n0, e0, rows0, ents0, rep0 = self._delta_base
        rows, rep = m["changed"], m["replaced"]     # sorted, unique
        rows, rep = rows[:np.searchsorted(rows, n0)], rep[:np.searchsorted(rep, n0)]
        ents = np.unique(np.concatenate([nh, nt]))
        ents = ents[:np.searchsorted(ents, e0)]
        union = lambda a, b: np.union1d(a, b) if a.size else b   # noqa: E731
        g._delta_base = (n0, e0, union(rows0, rows), union(ents0, ents), union(rep0, rep))
        return g

    def _entity_index(self) -> Dict[str, int]:
        """Entity string -> id (built once per graph, O(entities))."""
        if self._entity_ids is None:
            self._entity_ids = {key: i for i, key in enumerate(self.entities)}
            if len(self._entity_ids) != len(self.entities):
                raise ValueError("entities: the graph's entity strings are not distinct")
        return self._entity_ids

    # ---- accessors ----------------------------------------------------------------------
    @property
    def num_triples(self) -> int:
        c = self.__dict__.get("_counts")
        return c[0] if c is not None else int(self.indptr.shape[0] - 1)

    def __len__(self) -> int:
        return self.num_triples

    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_edges(self) -> int:
        """Directed adjacency entries (each undirected edge counts twice)."""
        c = self.__dict__.get("_counts")
        return c[1] if c is not None else int(self.indices.shape[0])

    @property
    def triples(self) -> List[tuple]:
        """The kept (subject, predicate, object) triples, original strings (built on first use)."""
        if self._triples is None:
            src = self._source
            if not isinstance(src, list):   # saved triples decoded on access (a loaded index)
                return _RowView(self.num_triples, lambda i: tuple(src[int(self.source_index[i])]))
            self._triples = [tuple(src[i]) for i in self.source_index.tolist()]
        return self._triples

    def triples_from(self, start: int) -> List[tuple]:
        """``triples[start:]`` without building the tuples of triples before ``start``."""
        if self._triples is not None:
            return self._triples[start:]
        src = self._source
        return [tuple(src[i]) for i in self.source_index[start:].tolist()]

    @property
    def texts(self) -> List[str]:
        """"subject predicate object" of each triple, from the original strings."""
        if self._texts is None:
            if not isinstance(self._source, list):   # decoded on access (a loaded index)
                tri = self.triples
                return _RowView(self.num_triples, lambda i: "{} {} {}".format(*tri[i]))
            self._texts = [f"{s} {p} {o}" for s, p, o in self.triples]
        return self._texts

    def texts_from(self, start: int) -> List[str]:
        """``texts[start:]`` without building the texts of triples before ``start``."""
        if self._texts is not None:
            return self._texts[start:]
        src = self._source
        return [f"{s} {p} {o}" for s, p, o in (src[i] for i in self.source_index[start:].tolist())]

    def neighbors(self, i: int) -> np.ndarray:
        """Sorted neighbour triple ids of triple ``i``."""
        i = check_int_arg(i, "i", 0, self.num_triples - 1, "num_triples - 1")
        return self.indices[self.indptr[i]:self.indptr[i + 1]]

    def degrees(self) -> np.ndarray:
        """Number of neighbours of each triple."""
        return np.diff(self.indptr)

    def degree_stats(self) -> Dict[str, float]:
        """Triple and entity degree summary (for reports and sanity checks)."""
        d = self.degrees()
        e = self.entity_degree
        return {"triples": self.num_triples, "entities": self.num_entities,
                "edges": self.num_edges, "skipped": self.n_skipped,
                "isolated": int((d == 0).sum()) if d.size else 0,
                "degree_mean": float(d.mean()) if d.size else 0.0,
                "degree_median": float(np.median(d)) if d.size else 0.0,
                "degree_max": int(d.max()) if d.size else 0,
                "entity_degree_max": int(e.max()) if e.size else 0,
                "hub_entities": self.n_hubs}

    # ---- passages -----------------------------------------------------------------------
    def _passages(self):
        if self._passage_csr is None:
            pids = self.passage_ids
            known = pids >= 0
            n_p = int(pids.max()) + 1 if known.any() else 0
            order = np.argsort(pids, kind="stable")
            order = order[pids[order] >= 0]
            ptr = np.zeros(n_p + 1, dtype=np.int64)
            np.cumsum(np.bincount(pids[known], minlength=n_p), out=ptr[1:])
            self._passage_csr = (ptr, order.astype(np.int64))
        return self._passage_csr

    def triples_of_passages(self, pids) -> np.ndarray:
        """Triple ids of the given passages, passage by passage, ascending within one."""
        ptr, order = self._passages()
        arr = np.asarray(pids, dtype=np.int64).reshape(-1)
        arr = arr[(arr >= 0) & (arr < ptr.shape[0] - 1)]
        if arr.size == 0:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([order[ptr[p]:ptr[p + 1]] for p in arr.tolist()])

    # ---- embeddings ---------------------------------------------------------------------
    def embed(self, encoder, cache: bool = True) -> np.ndarray:
        """Encodes the triple texts (float32 [n, D]), stores them in ``embeddings``."""
        from .encode import encode_cached
        texts = self.texts
        self.embeddings = encode_cached(encoder, texts) if cache else encoder.encode(texts)
        return self.embeddings

    def __repr__(self) -> str:
        return (f"TripleGraph(triples={self.num_triples}, entities={self.num_entities}, "
                f"edges={self.num_edges}, skipped={self.n_skipped})")


class _RowView(Sequence):
    """A read-only sequence of ``n`` items made by ``fn(i)`` on access (nothing stored)."""

    def __init__(self, n: int, fn):
        self._n, self._fn = int(n), fn

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._fn(j) for j in range(*i.indices(self._n))]
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("index out of range")
        return self._fn(i)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))


def _extend(seq, more: list):
    """``seq`` followed by ``more``: a list for a list, else the lazy sequence's own ``+``
    (rasfast.index.passages.TextColumn: appends a segment, copies nothing)."""
    return seq + more


def _i64(a) -> np.ndarray:
    """A C-contiguous int64 array (no copy for the graph's own arrays, mapped ones included)."""
    return np.ascontiguousarray(a, dtype=np.int64)


def synthetic_triples(n: int, n_entities: int, zipf: float = 1.0, offset: int = 100,
                      seed: int = 0) -> List[tuple]:
    """``n`` random ASCII triples whose entities follow a Zipf law (for benchmarks and tests).

    Entity r (0-based rank) is drawn with weight 1 / (r + offset) ** zipf, so a few entities
    are hubs; e.g. n=1e6, n_entities=6e5, zipf=1.0, offset=100 gives a top degree near 2,300.
    """
    rng = np.random.default_rng(seed)
    w = 1.0 / (np.arange(n_entities) + offset) ** zipf
    ids = rng.choice(n_entities, size=2 * n, p=w / w.sum()).reshape(n, 2)
    names = [f"Entity {i}" for i in rng.permutation(n_entities).tolist()]
    preds = ["relates to", "is part of", "born in", "located in"]
    return [(names[a], preds[(a + b) & 3], names[b]) for a, b in ids.tolist()]


__all__ = ["TripleGraph", "synthetic_triples"]
