"""KnowledgeIndex: one saved index every system runs from.

It is a :class:`rasfast.ThemeIndex` (passages, dense embeddings, theme vectors, theme model)
plus the knowledge side: the raw triples of every passage (with the corpus record's source
id), the :class:`rasfast.TripleGraph` CSR built over them, and the triple embeddings. On
disk it is the ThemeIndex directory plus::

    knowledge.json      format, counts, encoder, extraction record (model + prompt), graph
                        options; written LAST, so a directory without it never loads
    triples.jsonl       {"pid", "source_id", "triples": [[s, p, o], ...]} per passage, row order
    graph/*.npy         indptr, indices, head, tail, passage_ids, source_index, entity_degree
    graph/entities.json entity strings (index = entity id)
    triple_emb.npy      float32 [num_triples, D]
    journal.jsonl       the extraction journal (only for LLM-extracted indexes; see journal.py)

Loading reads these arrays back as they were written (nothing is re-derived): the loaded
graph and triple embeddings equal a fresh build bit for bit (tests/test_knowledge_index.py).

:meth:`KnowledgeIndex.add` appends passages: a new theme-index shard (``ThemeIndex.add``; the
next ``save`` into the same directory writes only the new rows of the dense/theme arrays),
their triples, and the graph over all triples (rebuilt by the C++ builder: old triples keep
their ids, so it equals a fresh build); only the new triples are embedded. Triples from a different
extraction (another model or prompt, or corpus triples into an LLM-extracted index) are
refused.
"""
from __future__ import annotations

import itertools
import json
import pathlib
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..data.qa import Passage

FORMAT = "rasfast.KnowledgeIndex"
VERSION = 1
MANIFEST = "knowledge.json"
TRIPLES = "triples.jsonl"
TRIPLE_EMB = "triple_emb.npy"
GRAPH_DIR = "graph"
GRAPH_ARRAYS = ("indptr", "indices", "head", "tail", "passage_ids", "source_index", "entity_degree")


def _encode(encoder, texts: List[str]) -> np.ndarray:
    if not texts:
        return np.zeros((0, encoder.dim), dtype=np.float32)
    from ..encode import encode_cached
    return np.ascontiguousarray(encode_cached(encoder, texts), dtype=np.float32)


def build_graph(triples_per_row: Sequence[list], pids: Sequence[int], max_degree=None):
    """The TripleGraph over every row's raw triples, in row order (passage id per triple)."""
    from ..graph import TripleGraph
    counts = [len(t) for t in triples_per_row]
    flat = list(itertools.chain.from_iterable(triples_per_row))
    tp = np.repeat(np.asarray(pids, dtype=np.int64), counts)
    return TripleGraph.from_triples(flat, tp, max_degree=max_degree)


class KnowledgeIndex:
    """A ThemeIndex plus triples, triple graph and triple embeddings (module docstring)."""

    def __init__(self, theme, triples: List[list], source_ids: List[Optional[str]], graph,
                 triple_emb: np.ndarray, extraction: Dict[str, Any],
                 unparsed: Sequence[int] = (), max_degree: Optional[int] = None):
        if len(triples) != len(theme) or len(source_ids) != len(theme):
            raise ValueError(f"triples: {len(triples)} lists / {len(source_ids)} source ids for "
                             f"{len(theme)} index rows")
        if triple_emb.shape[0] != graph.num_triples:
            raise ValueError(f"triple_emb: {triple_emb.shape[0]} rows for {graph.num_triples} triples")
        self.theme = theme
        self.triples = triples
        self.source_ids = source_ids
        self.graph = graph
        self.triple_emb = triple_emb
        graph.embeddings = triple_emb
        self.extraction = dict(extraction)
        self.unparsed = sorted(int(p) for p in unparsed)
        self.max_degree = max_degree
        self.path: Optional[pathlib.Path] = None
        self._by_pid: Optional[Dict[int, List[tuple]]] = None

    # ------------------------------------------------------------------ views
    def __len__(self) -> int:
        return len(self.theme)

    @property
    def encoder_name(self) -> Optional[str]:
        return self.theme.encoder_name

    @property
    def dim(self) -> int:
        return self.theme.dim

    @property
    def pids(self) -> List[int]:
        return [int(p) for p in np.asarray(self.theme.pids)]

    @property
    def passages(self) -> List[Passage]:
        return [Passage(pid, t, x) for pid, t, x in zip(self.pids, self.theme.titles, self.theme.texts)]

    @property
    def triples_by_pid(self) -> Dict[int, List[tuple]]:
        """Passage id -> cleaned (s, p, o) triples (malformed raw entries dropped); computed
        once (and again after :meth:`add`)."""
        if self._by_pid is None:
            from ..pipeline.parse import clean_triples
            self._by_pid = {pid: clean_triples(t) for pid, t in zip(self.pids, self.triples)}
        return self._by_pid

    def dataset(self, name: str = "index"):
        """The passages and triples as a QADataset (no questions) for the loop's helpers."""
        from ..data.qa import QADataset
        return QADataset(name, self.passages, [], [list(t) for t in self.triples])

    def __repr__(self) -> str:
        return (f"KnowledgeIndex(passages={len(self)}, triples={self.graph.num_triples}, "
                f"entities={self.graph.num_entities}, D={self.dim}, "
                f"extraction={self.extraction.get('model')!r})")

    # ------------------------------------------------------------------ build / add
    @classmethod
    def build(cls, passages: Sequence[Passage], triples: Sequence[list], encoder,
              extraction: Dict[str, Any], source_ids: Optional[Sequence[Optional[str]]] = None,
              num_themes: int = 64, unparsed: Sequence[int] = (),
              max_degree: Optional[int] = None) -> "KnowledgeIndex":
        """Embeds the passages (k-means theme model), builds the graph over ``triples`` (one
        raw list per passage) and embeds the triple texts with ``encoder``."""
        from ..index import ThemeIndex
        passages = list(passages)
        if not passages:
            raise ValueError("passages: no passages to index")
        if len(triples) != len(passages):
            raise ValueError(f"triples: {len(triples)} lists for {len(passages)} passages")
        theme = ThemeIndex.build(passages=passages, encoder=encoder,
                                 num_themes=max(1, min(num_themes, len(passages))))
        rows = [list(t) for t in triples]
        g = build_graph(rows, [p.pid for p in passages], max_degree)
        sids = list(source_ids) if source_ids is not None else [None] * len(passages)
        return cls(theme, rows, sids, g, _encode(encoder, g.texts), extraction, unparsed, max_degree)

    def add(self, passages: Sequence[Passage], triples: Sequence[list], encoder,
            extraction: Dict[str, Any], source_ids: Optional[Sequence[Optional[str]]] = None,
            unparsed: Sequence[int] = ()) -> "KnowledgeIndex":
        """Appends passages (their ``pid`` must be new) with their triples from the SAME
        extraction; returns self. The graph is rebuilt over all triples by the C++ builder
        (old triples keep their ids, new ones follow); only new triples are embedded."""
        passages = list(passages)
        if len(triples) != len(passages):
            raise ValueError(f"triples: {len(triples)} lists for {len(passages)} passages")
        if _comparable(extraction) != _comparable(self.extraction):
            raise ValueError(f"extraction: these triples come from {extraction.get('model')!r}, the "
                             f"index holds triples from {self.extraction.get('model')!r} (prompt "
                             f"sha {str(self.extraction.get('prompt_sha256'))[:12]}); refusing to mix")
        if encoder.name != self.encoder_name:
            raise ValueError(f"encoder: index was built with {self.encoder_name!r}, got {encoder.name!r}")
        have = set(self.pids)
        clash = [p.pid for p in passages if p.pid in have]
        if clash:
            raise ValueError(f"passages: ids already in the index: {clash[:5]}")
        if not passages:
            return self
        n_old = self.graph.num_triples
        self.theme = self.theme.add(passages=passages, encoder=encoder)   # a new shard
        self.triples = self.triples + [list(t) for t in triples]
        self.source_ids = self.source_ids + (list(source_ids) if source_ids is not None
                                             else [None] * len(passages))
        g = build_graph(self.triples, self.pids, self.max_degree)
        new_emb = _encode(encoder, g.texts[n_old:])
        self.triple_emb = np.concatenate([np.asarray(self.triple_emb, dtype=np.float32), new_emb])
        self.graph = g
        g.embeddings = self.triple_emb
        self.unparsed = sorted(set(self.unparsed) | {int(p) for p in unparsed})
        self._by_pid = None
        return self

    # ------------------------------------------------------------------ save / load
    def save(self, directory) -> pathlib.Path:
        """Writes the directory; ``knowledge.json`` last, so a partial save never loads."""
        d = pathlib.Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / MANIFEST).unlink(missing_ok=True)
        self.theme.save(d)
        with open(d / TRIPLES, "w", encoding="utf-8") as f:
            for pid, sid, t in zip(self.pids, self.source_ids, self.triples):
                f.write(json.dumps({"pid": pid, "source_id": sid, "triples": t}, ensure_ascii=False))
                f.write("\n")
        gd = d / GRAPH_DIR
        gd.mkdir(exist_ok=True)
        g = self.graph
        for name in GRAPH_ARRAYS:
            np.save(gd / f"{name}.npy", np.ascontiguousarray(getattr(g, name), dtype="<i8"))
        (gd / "entities.json").write_text(json.dumps(list(g.entities), ensure_ascii=False))
        np.save(d / TRIPLE_EMB, np.ascontiguousarray(self.triple_emb, dtype="<f4"))
        manifest = {
            "format": FORMAT, "version": VERSION, "num_passages": len(self),
            "num_triples": g.num_triples, "num_entities": g.num_entities, "nnz": g.num_edges,
            "num_input_triples": sum(len(t) for t in self.triples), "dim": self.dim,
            "encoder": self.encoder_name, "extraction": self.extraction,
            "unparsed": self.unparsed,
            "graph": {"normalize": g.normalize, "max_degree": self.max_degree,
                      "n_skipped": g.n_skipped, "n_hubs": g.n_hubs},
        }
        (d / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False))
        self.path = d
        return d

    @classmethod
    def load(cls, directory, mmap: bool = False) -> "KnowledgeIndex":
        """Loads a saved knowledge index; ValueError naming the file when anything is missing,
        truncated or inconsistent with ``knowledge.json``."""
        from ..graph import TripleGraph
        from ..index import ThemeIndex
        d = pathlib.Path(directory)
        mpath = d / MANIFEST
        if not mpath.is_file():
            hint = (" (an extraction journal is there: the build did not finish; run "
                    "`rasfast index build` again to resume)") if (d / "journal.jsonl").exists() else ""
            raise ValueError(f"{mpath}: missing; {d} is not a finished knowledge index{hint}")
        try:
            m = json.loads(mpath.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{mpath}: not valid JSON ({e})") from None
        if not isinstance(m, dict) or m.get("format") != FORMAT or m.get("version") != VERSION:
            raise ValueError(f"{mpath}: not a {FORMAT} v{VERSION} manifest")
        theme = ThemeIndex.load(d, mmap=mmap)
        n = int(m["num_passages"])
        if len(theme) != n:
            raise ValueError(f"{d}: the theme index has {len(theme)} rows, {MANIFEST} says {n}")
        triples, sids, pids = [], [], []
        tpath = d / TRIPLES
        if not tpath.is_file():
            raise ValueError(f"{tpath}: missing (listed in {MANIFEST})")
        with open(tpath, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                try:
                    r = json.loads(line)
                    pids.append(int(r["pid"]))
                    sids.append(r.get("source_id"))
                    triples.append(list(r["triples"]))
                except (ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"{tpath}: line {lineno} is not a triples record ({e})") from None
        if pids != [int(p) for p in np.asarray(theme.pids)]:
            raise ValueError(f"{tpath}: {len(pids)} records whose passage ids do not match the "
                             f"index's {n} rows (truncated or from another build)")
        nt = int(m["num_triples"])
        shapes = {"indptr": (nt + 1,), "head": (nt,), "tail": (nt,), "passage_ids": (nt,),
                  "source_index": (nt,), "indices": (int(m["nnz"]),),
                  "entity_degree": (int(m["num_entities"]),)}
        arrays = {}
        for name in GRAPH_ARRAYS:
            arrays[name] = _read_npy(d / GRAPH_DIR / f"{name}.npy", np.dtype("<i8"), shapes[name], mmap)
        epath = d / GRAPH_DIR / "entities.json"
        try:
            entities = json.loads(epath.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"{epath}: missing or unreadable ({e})") from None
        if len(entities) != int(m["num_entities"]):
            raise ValueError(f"{epath}: {len(entities)} entities, {MANIFEST} says {m['num_entities']}")
        source = list(itertools.chain.from_iterable(triples))
        if len(source) != int(m["num_input_triples"]):
            raise ValueError(f"{tpath}: {len(source)} triples, {MANIFEST} says {m['num_input_triples']}")
        gm = m["graph"]
        g = TripleGraph(**arrays, entities=entities, source=source, n_skipped=gm["n_skipped"],
                        n_hubs=gm["n_hubs"], normalize=gm["normalize"], max_degree=gm["max_degree"])
        emb = _read_npy(d / TRIPLE_EMB, np.dtype("<f4"), (nt, int(m["dim"])), mmap)
        ki = cls(theme, triples, sids, g, emb, m["extraction"], m.get("unparsed", ()), gm["max_degree"])
        ki.path = d
        return ki


def _read_npy(path: pathlib.Path, dtype, shape, mmap: bool) -> np.ndarray:
    if not path.is_file():
        raise ValueError(f"{path}: missing (listed in {MANIFEST})")
    try:
        arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except Exception as e:
        raise ValueError(f"{path}: unreadable or truncated ({e})") from None
    if arr.dtype != dtype or tuple(arr.shape) != tuple(shape):
        raise ValueError(f"{path}: holds {arr.dtype} {list(arr.shape)}, expected {dtype} {list(shape)}")
    return arr


def _comparable(ex: Dict[str, Any]) -> tuple:
    if ex.get("source") != "llm":      # corpus-provided (or no) triples: no model to compare
        return (ex.get("source"),)
    return (ex.get("source"), ex.get("model"), ex.get("prompt_sha256"))


def is_knowledge_index(directory) -> bool:
    return (pathlib.Path(directory) / MANIFEST).is_file()


__all__ = ["KnowledgeIndex", "build_graph", "is_knowledge_index"]
