"""KnowledgeIndex: one saved index every system runs from.

It is a :class:`rasfast.ThemeIndex` (passages, dense embeddings, theme vectors, theme model)
plus the knowledge side: the raw triples of every passage (with the corpus record's source
id), the :class:`rasfast.TripleGraph` CSR built over them, and the triple embeddings. On
disk it is the ThemeIndex directory plus::

    knowledge.json        format, counts, encoder, extraction record (model + prompt), graph
                          options, the ThemeIndex generation it belongs to and its own file
                          names; replaced atomically LAST: it is the commit of a save
    triples.<g>.jsonl     {"pid", "source_id", "triples": [[s, p, o], ...]} per passage, row order
    graph.<g>/*.npy       indptr, indices, head, tail, passage_ids, source_index, entity_degree
    graph.<g>/entities.json  entity strings (index = entity id)
    triple_emb.<g>.npy    float32 [num_triples, D]
    journal.jsonl         the extraction journal (only for LLM-extracted indexes; journal.py)

<g> is the generation of the ThemeIndex commit the save made (rasfast._index_store): a save
commits the ThemeIndex first (``manifest.json`` and ``manifest.<g>.json``), writes the
knowledge files under new names, and commits ``knowledge.json`` last. A crash before that
leaves ``knowledge.json`` naming the previous generation, which loads exactly as before
(``ThemeIndex.load(dir, generation=...)``); files are never rewritten in place, so readers
keep working while a writer saves. Version 1 directories (``triples.jsonl``, ``graph/``,
``triple_emb.npy``, no generation) still load; the first save upgrades them.

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
import os
import pathlib
import re
import shutil
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ...data.qa import Passage

FORMAT = "rasfast.KnowledgeIndex"
VERSION = 2
READABLE_VERSIONS = (1, 2)
MANIFEST = "knowledge.json"
TRIPLES = "triples.jsonl"
TRIPLE_EMB = "triple_emb.npy"
GRAPH_DIR = "graph"
GRAPH_ARRAYS = ("indptr", "indices", "head", "tail", "passage_ids", "source_index", "entity_degree")


def _encode(encoder, texts: List[str]) -> np.ndarray:
    if not texts:
        return np.zeros((0, encoder.dim), dtype=np.float32)
    from ...encode import encode_cached
    return np.ascontiguousarray(encode_cached(encoder, texts), dtype=np.float32)


def build_graph(triples_per_row: Sequence[list], pids: Sequence[int], max_degree=None):
    """The TripleGraph over every row's raw triples, in row order (passage id per triple)."""
    from ...graph import TripleGraph
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
            from ...parse import clean_triples
            self._by_pid = {pid: clean_triples(t) for pid, t in zip(self.pids, self.triples)}
        return self._by_pid

    def dataset(self, name: str = "index"):
        """The passages and triples as a QADataset (no questions) for the loop's helpers."""
        from ...data.qa import QADataset
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
        from ..theme_index import ThemeIndex
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
        """Commits the index into ``directory`` (see the module docstring): the theme index
        first, then the knowledge files under new names, ``knowledge.json`` last. Raises
        :class:`rasfast.index.IndexConflictError` (writing nothing) when another handle
        committed to the directory after this one loaded it."""
        from .. import durable as _durable
        from .. import store as _store
        from ..theme_index import IndexConflictError
        d = pathlib.Path(directory)
        with self.theme._write_lock, _durable.DirLock(d):
            disk = _read_manifest_or_none(d)
            expect = None
            if disk is not None and self.path is not None and d.resolve() == pathlib.Path(self.path).resolve():
                disk_gen = _theme_generation(d, disk)
                mine = _store.generation_of(self.theme._home[2]) if self.theme._home else None
                if disk_gen != mine:
                    raise IndexConflictError(
                        f"{d / MANIFEST}: changed by another writer since this handle loaded it "
                        f"(theme generation {disk_gen} committed there, this handle holds "
                        f"{mine}); nothing was written. Load it again and repeat the change")
                if disk.get("theme_generation") is None:
                    _upgrade_v1(d, disk, disk_gen)
                expect = disk_gen
            tm = self.theme._commit(d, publish=True, expect=expect)
            g = _store.generation_of(tm)
            files = {"triples": f"triples.{g}.jsonl", "graph": f"graph.{g}",
                     "triple_emb": f"triple_emb.{g}.npy"}
            _durable.write_new_file(d / files["triples"], (
                (json.dumps({"pid": pid, "source_id": sid, "triples": t}, ensure_ascii=False)
                 + "\n").encode("utf-8")
                for pid, sid, t in zip(self.pids, self.source_ids, self.triples)))
            gd = d / files["graph"]
            gd.mkdir(exist_ok=True)
            g_ = self.graph
            for name in GRAPH_ARRAYS:
                _write_npy(gd / f"{name}.npy", np.ascontiguousarray(getattr(g_, name), dtype="<i8"))
            _durable.write_new_file(gd / "entities.json",
                                    [json.dumps(list(g_.entities), ensure_ascii=False).encode("utf-8")])
            _durable.fsync_dir(gd)
            _write_npy(d / files["triple_emb"], np.ascontiguousarray(self.triple_emb, dtype="<f4"))
            _durable.fsync_dir(d)
            manifest = {
                "format": FORMAT, "version": VERSION, "theme_generation": g, "files": files,
                "num_passages": len(self), "num_triples": g_.num_triples,
                "num_entities": g_.num_entities, "nnz": g_.num_edges,
                "num_input_triples": sum(len(t) for t in self.triples), "dim": self.dim,
                "encoder": self.encoder_name, "extraction": self.extraction,
                "unparsed": self.unparsed,
                "graph": {"normalize": g_.normalize, "max_degree": self.max_degree,
                          "n_skipped": g_.n_skipped, "n_hubs": g_.n_hubs},
            }
            _durable.atomic_write_json(d / MANIFEST, manifest)
        self.path = d
        return d

    @staticmethod
    def compact(directory) -> List[str]:
        """Removes what the committed generation does not use (older theme generations,
        older knowledge files, leftovers of interrupted saves); see ThemeIndex.compact for
        when it is safe. Returns the removed names."""
        from ..theme_index import ThemeIndex
        d = pathlib.Path(directory)
        m = _read_manifest_or_none(d)
        if m is None:
            raise ValueError(f"{d / MANIFEST}: missing; {d} is not a knowledge index")
        files = _files(m)
        keep = set(files.values())
        g = m.get("theme_generation")
        removed = []
        if g is not None:
            from .. import store as _store
            keep |= set(_store.referenced_files(_store.read_manifest(d, g))) | {_store.manifest_name(g)}
        removed = ThemeIndex.compact(d, keep=sorted(keep))
        pattern = re.compile(r"^(?:triples(?:\.\d+)?\.jsonl|graph(?:\.\d+)?|triple_emb(?:\.\d+)?\.npy)$")
        for p in sorted(d.iterdir()):
            if pattern.match(p.name) and p.name not in keep:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
                removed.append(p.name)
        return removed

    @classmethod
    def load(cls, directory, mmap: bool = False) -> "KnowledgeIndex":
        """Loads a saved knowledge index; ValueError naming the file when anything is missing,
        truncated or inconsistent with ``knowledge.json``."""
        from ...graph import TripleGraph
        from ..theme_index import ThemeIndex
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
        if not isinstance(m, dict) or m.get("format") != FORMAT \
                or m.get("version") not in READABLE_VERSIONS:
            raise ValueError(f"{mpath}: not a {FORMAT} manifest of version "
                             f"{' or '.join(map(str, READABLE_VERSIONS))}")
        files = _files(m)
        theme = ThemeIndex.load(d, mmap=mmap, generation=m.get("theme_generation"))
        n = int(m["num_passages"])
        if len(theme) != n:
            raise ValueError(f"{d}: the theme index has {len(theme)} rows, {MANIFEST} says {n}")
        triples, sids, pids = [], [], []
        tpath = d / files["triples"]
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
            arrays[name] = _read_npy(d / files["graph"] / f"{name}.npy", np.dtype("<i8"),
                                     shapes[name], mmap)
        epath = d / files["graph"] / "entities.json"
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
        emb = _read_npy(d / files["triple_emb"], np.dtype("<f4"), (nt, int(m["dim"])), mmap)
        ki = cls(theme, triples, sids, g, emb, m["extraction"], m.get("unparsed", ()), gm["max_degree"])
        ki.path = d
        return ki


def _files(m: Dict[str, Any]) -> Dict[str, str]:
    """The knowledge files a manifest names (version 1: the fixed names)."""
    return m.get("files") or {"triples": TRIPLES, "graph": GRAPH_DIR, "triple_emb": TRIPLE_EMB}


def _read_manifest_or_none(d: pathlib.Path) -> Optional[Dict[str, Any]]:
    try:
        m = json.loads((d / MANIFEST).read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and m.get("format") == FORMAT else None


def _theme_generation(d: pathlib.Path, m: Dict[str, Any]) -> int:
    """The ThemeIndex generation knowledge manifest ``m`` belongs to (version 1: the
    current one, which is the only one a version 1 directory has)."""
    from .. import store as _store
    g = m.get("theme_generation")
    return int(g) if g is not None else _store.generation_of(_store.read_manifest(d))


def _upgrade_v1(d: pathlib.Path, m: Dict[str, Any], g: int) -> None:
    """Before the first save into a version 1 directory: keep its theme manifest under its
    generation's name and record that generation in knowledge.json (same content), so a
    crash during the save still loads the old index."""
    from .. import durable as _durable
    from .. import store as _store
    numbered = d / _store.manifest_name(g)
    if not numbered.exists():
        _durable.atomic_write((numbered), (d / _store.MANIFEST).read_bytes())
    _durable.atomic_write_json(d / MANIFEST, dict(m, theme_generation=g, files=_files(m)))


def _write_npy(path: pathlib.Path, arr: np.ndarray) -> None:
    """np.save into a new file, fsync'd (the file is not referenced by any commit yet)."""
    with open(path, "wb") as f:
        np.save(f, arr, allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())


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
