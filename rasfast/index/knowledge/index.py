"""KnowledgeIndex: one saved index every system runs from.

It is a :class:`rasfast.ThemeIndex` (passages, dense embeddings, theme vectors, theme model)
plus the knowledge side: the raw triples of every passage (with the corpus record's source
id), the :class:`rasfast.TripleGraph` CSR built over them, and the triple embeddings. On
disk it is the ThemeIndex directory plus (format 4; every part written by this code has
``"layout": 4`` in its manifest entry)::

    knowledge.json        format, counts, encoder, extraction record (model + prompt), graph
                          options, the ThemeIndex generation it belongs to and the list of its
                          parts; replaced atomically LAST: it is the commit of a save
    triples.<g>.jsonl     {"pid", "source_id", "triples": [[s, p, o], ...]} per passage, row
                          order: the passages part <g> added
    triples.<g>.ends.npy  int64 end offset of every record of triples.<g>.jsonl: a record is
                          decoded (and its pid checked) only when read
    graph.<g>/            the graph rows (triples) and entities part <g> added: head, tail,
                          passage_ids, source_index (.npy); input_ptr.npy (int64 [records + 1]:
                          where each record's raw triples start in the flattened input, the
                          graph's ``source``); entities.bin + entities_ends.npy (the normalised
                          entity strings, UTF-8 back to back, decoded on access);
                          entity_hash.npy + entity_hash_ids.npy (the part's entities' 64-bit
                          blake2b hashes, sorted, and their ids: ``add`` finds a new triple's
                          entities by binary search, without a dict of every entity); the
                          adjacency as a full CSR (indptr.npy, indices.npy) or as a delta block
                          (csr_rows.npy, csr_ptr.npy, csr_indices.npy: the rows that changed and
                          only the neighbours appended to them; csr_replace.npy: the rows stored
                          whole because the hub guard removed neighbours); entity degrees in
                          full (entity_degree.npy) or as updates (degree_ids.npy + entity_degree.npy)
    triple_emb.<g>.npy    float32 [triples part <g> added, D]
    journal.jsonl         the extraction journal (only for LLM-extracted indexes; journal.py)

<g> is the generation of the ThemeIndex commit the save made (rasfast.index.store): a save
commits the ThemeIndex first (``manifest.json`` and ``manifest.<g>.json``), writes the
knowledge files under new names, and commits ``knowledge.json`` last. A crash before that
leaves ``knowledge.json`` naming the previous generation and parts, which load exactly as
before (``ThemeIndex.load(dir, generation=...)``); files are never rewritten in place, so
readers keep working while a writer saves. A save into the directory the index was loaded
from (or last saved to) appends one part holding only what is new since then; any other
save writes one full part. :meth:`KnowledgeIndex.compact` merges the parts into one full
part (a new generation, same protocol) and then removes the unused files. Version 3 parts
(no ends files; ``entities.json``), version 2 directories (one part, named in ``files``) and
version 1 ones (``triples.jsonl``, ``graph/``, ``triple_emb.npy``, no generation) still load
(their triples and entities parsed at load, as before); a save into a version 2 or 3
directory appends a layout-4 part, the first save into a version 1 directory rewrites it in
full.

Opening parses nothing that grows with the triples: the arrays are read (mapped with
``mmap``), the triples records, raw triples and entity strings are lazy sequences
(rasfast.index.passages.TextColumn segments; ``PARSED_RECORDS`` counts the records
decoded), and ``graph.triples`` / ``graph.texts`` decode a triple when it is read. One full
part is used as read; several parts are joined on first use of each array
(``TripleGraph._lazy``: the CSR by csrc/graph/triple_graph_merge_cpu.cpp's block join, the
embeddings by concatenation), so the first query of a grown index pays the join once --
``compact`` removes it. The loaded graph and triple embeddings equal a fresh build bit for
bit (tests/test_knowledge_index.py, tests/test_knowledge_lazy.py).

:meth:`KnowledgeIndex.add` appends passages: a new theme-index shard (``ThemeIndex.add``; the
next ``save`` into the same directory writes only the new rows of the dense/theme arrays),
their triples (a segment appended to the lazy sequences), and the graph over all triples
(merged, not rebuilt: ``TripleGraph.merge`` keeps old triple and entity ids and equals a
fresh build); only the new triples are embedded, and their embeddings stay a separate block
until ``triple_emb`` is read (a save writes only that block). What still grows with the
index is the merge kernel's copy of the old CSR into the new arrays (memcpy speed) and
the vectorised pid clash check. Triples from a different extraction (another model or
prompt, or corpus triples into an LLM-extracted index) are refused.
"""
from __future__ import annotations

import itertools
import json
import os
import pathlib
import re
import shutil
from collections.abc import Mapping, Sequence
from typing import Any, Dict, List, Optional

import numpy as np

from ...data.qa import Passage

FORMAT = "rasfast.KnowledgeIndex"
VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
LAYOUT = 4       # a part written in the binary, mapped layout (format 4) says "layout": 4
MANIFEST = "knowledge.json"
TRIPLES = "triples.jsonl"
TRIPLE_EMB = "triple_emb.npy"
GRAPH_DIR = "graph"
GRAPH_ARRAYS = ("indptr", "indices", "head", "tail", "passage_ids", "source_index", "entity_degree")
ROW_ARRAYS = ("head", "tail", "passage_ids", "source_index")   # one entry per triple
_EMPTY = np.zeros(0, dtype=np.int64)


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


def _check_unique_pids(pids: Sequence[int]) -> None:
    """Passage ids are the index's keys (triples_by_pid, gold passages): two passages with one
    id would make which one a lookup returns undefined."""
    first: Dict[int, int] = {}
    for i, pid in enumerate(pids):
        j = first.setdefault(int(pid), i)
        if j != i:
            raise ValueError(f"passages: pid {int(pid)} is used by passages {j} and {i}; passage "
                             f"ids must be unique")


class KnowledgeIndex:
    """A ThemeIndex plus triples, triple graph and triple embeddings (module docstring)."""

    def __init__(self, theme, triples: List[list], source_ids: List[Optional[str]], graph,
                 triple_emb: np.ndarray, extraction: Dict[str, Any],
                 unparsed: Sequence[int] = (), max_degree: Optional[int] = None):
        if len(triples) != len(theme) or len(source_ids) != len(theme):
            raise ValueError(f"triples: {len(triples)} lists / {len(source_ids)} source ids for "
                             f"{len(theme)} index rows")
        if triple_emb is not None and triple_emb.shape[0] != graph.num_triples:
            raise ValueError(f"triple_emb: {triple_emb.shape[0]} rows for {graph.num_triples} triples")
        self.theme = theme
        self.triples = triples
        self.source_ids = source_ids
        self.graph = graph
        if triple_emb is not None:     # None: the graph holds them already (row blocks, load)
            graph.embeddings = triple_emb
        self.extraction = dict(extraction)
        self.unparsed = sorted(int(p) for p in unparsed)
        self.max_degree = max_degree
        self.path: Optional[pathlib.Path] = None
        self._by_pid: Optional[Dict[int, List[tuple]]] = None
        self._bm25 = None                         # rasfast.index.bm25.BM25Index, made on first use
        self._bm25_saved: Optional[Dict[str, Any]] = None   # knowledge.json's "bm25" entry

    # ------------------------------------------------------------------ views
    @property
    def triple_emb(self) -> np.ndarray:
        """float32 [triples, D]: the graph's embeddings (several saved parts, or parts added
        since the load, are joined on first access)."""
        return self.graph.embeddings

    @triple_emb.setter
    def triple_emb(self, value) -> None:
        self.graph.embeddings = value

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
        """Passage id -> cleaned (s, p, o) triples (malformed raw entries dropped): a mapping
        that decodes and cleans a passage's record when it is looked up (made again after
        :meth:`add`)."""
        if self._by_pid is None:
            self._by_pid = _TriplesByPid(np.asarray(self.theme.pids), self.triples)
        return self._by_pid

    @property
    def bm25(self):
        """The BM25 index over the passages (title + text): the saved one when
        ``knowledge.json`` names one covering every passage, else built now (and saved with
        the next :meth:`save`)."""
        if self._bm25 is None:
            from ..bm25 import BM25Index
            saved = self._bm25_saved
            if saved and self.path is not None and int(saved.get("num_passages", -1)) == len(self):
                self._bm25 = BM25Index.load(pathlib.Path(self.path) / saved["dir"], mmap=True)
            else:
                self._bm25 = BM25Index.build([f"{t}\n{x}" for t, x in zip(self.theme.titles, self.theme.texts)],
                                             self.pids)
        return self._bm25

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
        _check_unique_pids([p.pid for p in passages])
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
        extraction; returns self. The new triples are merged into the graph
        (``TripleGraph.merge``: old triples keep their ids, new ones follow; equal to a fresh
        build); only new triples are embedded."""
        passages = list(passages)
        if len(triples) != len(passages):
            raise ValueError(f"triples: {len(triples)} lists for {len(passages)} passages")
        if _comparable(extraction) != _comparable(self.extraction):
            raise ValueError(f"extraction: these triples come from {extraction.get('model')!r}, the "
                             f"index holds triples from {self.extraction.get('model')!r} (prompt "
                             f"sha {str(self.extraction.get('prompt_sha256'))[:12]}); refusing to mix")
        if encoder.name != self.encoder_name:
            raise ValueError(f"encoder: index was built with {self.encoder_name!r}, got {encoder.name!r}")
        _check_unique_pids([p.pid for p in passages])
        new_pids = np.asarray([p.pid for p in passages], dtype=np.int64)
        clash = new_pids[np.isin(new_pids, np.asarray(self.theme.pids))].tolist()   # vectorised: no set of every pid
        if clash:
            raise ValueError(f"passages: ids already in the index: {clash[:5]}")
        if not passages:
            return self
        n_old = self.graph.num_triples
        rows = [list(t) for t in triples]
        flat = list(itertools.chain.from_iterable(rows))
        tp = np.repeat(new_pids, [len(t) for t in rows])
        g = self.graph.merge(flat, tp)    # before any change: a refused merge changes nothing
        new_emb = _encode(encoder, g.texts_from(n_old))
        self.theme = self.theme.add(passages=passages, encoder=encoder)   # a new shard
        # lazy sequences (a loaded index) append a segment: nothing old is copied or decoded
        self.triples = self.triples + rows
        self.source_ids = self.source_ids + (list(source_ids) if source_ids is not None
                                             else [None] * len(passages))
        # the new rows follow as one more block, joined on first use of triple_emb (a save
        # writes only the new block)
        g._set_embedding_segments(self.graph.embedding_segments() + [new_emb])
        self.graph = g
        self.unparsed = sorted(set(self.unparsed) | {int(p) for p in unparsed})
        self._by_pid = None
        self._bm25, self._bm25_saved = None, None   # idf and lengths change: built again on use
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
            g_ = self.graph
            # append a part when d holds this handle's previous state (format 2 or 3), else
            # write everything as one part (a version 1 directory is rewritten in full)
            parts: List[Dict[str, Any]] = []
            start = (0, 0, 0, 0)
            if expect is not None and disk.get("version") in (2, 3, 4):
                on_disk = (int(disk["num_passages"]), int(disk["num_triples"]),
                           int(disk["num_entities"]), int(disk["num_input_triples"]))
                if on_disk[0] <= len(self) and on_disk[1] <= g_.num_triples \
                        and on_disk[2] <= g_.num_entities and on_disk[3] <= len(g_._source):
                    parts, start = _parts(disk), on_disk
            part = _write_part(d, g, self, start)
            parts.append(part)
            bm = self._save_bm25(d, g, same_dir=expect is not None)
            _durable.atomic_write_json(d / MANIFEST, self._manifest(g, parts, bm))
        self.path = d
        self._bm25_saved = bm
        g_._delta_base = (g_.num_triples, g_.num_entities, _EMPTY, _EMPTY, _EMPTY)   # d holds it now
        return d

    def _save_bm25(self, d: pathlib.Path, g: int, same_dir: bool) -> Dict[str, Any]:
        """The BM25 entry of the manifest: the folder already committed in ``d`` when it
        covers every passage, else a new ``bm25.<g>/`` written (and fsync'd) now."""
        saved = self._bm25_saved
        if same_dir and saved and int(saved.get("num_passages", -1)) == len(self) \
                and (d / saved["dir"] / "ids.npy").is_file():
            return dict(saved)
        name = f"bm25.{g}"
        self.bm25.save(d / name)
        from .. import durable as _durable
        _durable.fsync_dir(d)
        return {"dir": name, "num_passages": len(self)}

    def _manifest(self, g: int, parts: List[Dict[str, Any]], bm25: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        g_ = self.graph
        files = {k: parts[-1][k] for k in ("triples", "graph", "triple_emb")}
        return {
            "format": FORMAT, "version": VERSION, "theme_generation": g, "files": files,
            "parts": parts,
            "num_passages": len(self), "num_triples": g_.num_triples,
            "num_entities": g_.num_entities, "nnz": g_.num_edges,
            "num_input_triples": len(g_._source), "dim": self.dim,
            "encoder": self.encoder_name, "extraction": self.extraction,
            "unparsed": self.unparsed,
            "graph": {"normalize": g_.normalize, "max_degree": self.max_degree,
                      "n_skipped": g_.n_skipped, "n_hubs": g_.n_hubs},
            **({"bm25": bm25} if bm25 else {}),
        }

    @staticmethod
    def compact(directory, merge: bool = True) -> List[str]:
        """Merges the parts appended by saves into one (``merge``), then removes what the
        committed generation does not use (older theme generations, older knowledge files,
        leftovers of interrupted saves); see ThemeIndex.compact for when the removal is safe.
        Returns the removed names.

        The merge is a save: under the directory lock it commits a new theme generation (no
        rows are rewritten), writes one full knowledge part named after it (new files,
        fsync'd) and replaces ``knowledge.json`` last; a crash before that commit leaves the
        parts as they were. The merged index equals the parted one bit for bit."""
        from .. import durable as _durable
        from .. import store as _store
        from ..theme_index import ThemeIndex
        d = pathlib.Path(directory)
        with _durable.DirLock(d):
            m = _read_manifest_or_none(d)
            if m is None:
                raise ValueError(f"{d / MANIFEST}: missing; {d} is not a knowledge index")
            if merge and len(_parts(m)) > 1:
                ki = KnowledgeIndex.load(d, mmap=True)
                gen = _theme_generation(d, m)
                tm = ki.theme._commit(d, publish=True, expect=gen)
                g = _store.generation_of(tm)
                part = _write_part(d, g, ki, (0, 0, 0, 0), full=True)
                _durable.atomic_write_json(d / MANIFEST, ki._manifest(g, [part], m.get("bm25")))
                del ki
                m = _read_manifest_or_none(d)
            keep = {p[k] for p in _parts(m) for k in ("triples", "graph", "triple_emb", "triples_ends")
                    if k in p}
            if isinstance(m.get("bm25"), dict):
                keep.add(m["bm25"]["dir"])
            g = m.get("theme_generation")
            if g is not None:
                keep |= set(_store.referenced_files(_store.read_manifest(d, g))) | {_store.manifest_name(g)}
            removed = ThemeIndex.compact(d, keep=sorted(keep))
            pattern = re.compile(r"^(?:triples(?:\.\d+)?\.(?:jsonl|ends\.npy)|graph(?:\.\d+)?"
                                 r"|triple_emb(?:\.\d+)?\.npy|bm25\.\d+)$")
            for p in sorted(d.iterdir()):
                if pattern.match(p.name) and p.name not in keep:
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
                    removed.append(p.name)
        return removed

    @classmethod
    def load(cls, directory, mmap: bool = False) -> "KnowledgeIndex":
        """Loads a saved knowledge index; ValueError naming the file when anything is missing,
        truncated or inconsistent with ``knowledge.json``, or ``knowledge.json`` itself lacks
        a key or holds a value of the wrong type (rasfast.index.manifest_schemas)."""
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
                or m.get("version") not in READABLE_VERSIONS or isinstance(m.get("version"), bool):
            got = (f"format {m.get('format', '(missing)')!r}, version "
                   f"{m.get('version', '(missing)')!r}") if isinstance(m, dict) \
                else f"a JSON {type(m).__name__}"
            raise ValueError(f"{mpath}: not a {FORMAT} manifest of version "
                             f"{' or '.join(map(str, READABLE_VERSIONS))} ({got})")
        from ..manifest_schemas import knowledge as _schema
        from ..._schema import validate
        validate(m, _schema(int(m["version"])), mpath)
        parts = _parts(m)
        theme = ThemeIndex.load(d, mmap=mmap, generation=m.get("theme_generation"))
        n = int(m["num_passages"])
        if len(theme) != n:
            raise ValueError(f"{d}: the theme index has {len(theme)} rows, {MANIFEST} says {n}")
        nt, ne, dim = int(m["num_triples"]), int(m["num_entities"]), int(m["dim"])
        if dim != theme.dim:   # passages and triples are embedded by one encoder
            raise ValueError(f"{mpath}: dim {dim}, its theme index (generation "
                             f"{m.get('theme_generation')}) holds embeddings of dim {theme.dim}")
        _check_parts(mpath, parts, n, nt, ne)
        tpids = np.asarray(theme.pids)
        triples, sids, source = [], [], []
        i8 = np.dtype("<i8")
        for part in parts:
            p0, p1 = part["passages"]
            tpath = d / part["triples"]
            if part.get("layout") == LAYOUT:     # mapped: records decoded on access
                gd = d / part["graph"]
                ends = _read_npy(d / part["triples_ends"], i8, (p1 - p0,), True)
                ptr = _read_npy(gd / "input_ptr.npy", i8, (p1 - p0 + 1,), True)
                i0, i1 = part["inputs"]
                if int(ptr[0]) != 0 or int(ptr[-1]) != i1 - i0:
                    raise ValueError(f"{gd / 'input_ptr.npy'}: covers {int(ptr[-1]) - int(ptr[0])} "
                                     f"input triples, {MANIFEST} says {i1 - i0}")
                recs = _Records(tpath, ends, tpids[p0:p1])
                triples.append(_RecordField(recs, "triples"))
                sids.append(_RecordField(recs, "source_id"))
                source.append(_InputTriples(recs, ptr))
                continue
            if not tpath.is_file():
                raise ValueError(f"{tpath}: missing (listed in {MANIFEST})")
            pt, ps, pp = [], [], []
            with open(tpath, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    try:
                        r = json.loads(line)
                        pp.append(int(r["pid"]))
                        ps.append(r.get("source_id"))
                        pt.append(list(r["triples"]))
                    except (ValueError, KeyError, TypeError) as e:
                        raise ValueError(f"{tpath}: line {lineno} is not a triples record ({e})") from None
            if len(pp) != p1 - p0 or pp != [int(p) for p in tpids[p0:p1]]:
                raise ValueError(f"{tpath}: {len(pp)} records whose passage ids do not "
                                 f"match the index's rows {p0}..{p1 - 1} (truncated or from another build)")
            triples.append(pt)
            sids.append(ps)
            source.append(list(itertools.chain.from_iterable(pt)))
        graph_kw = _load_graph_parts(d, parts, nt, ne, dim, int(m["nnz"]), mmap)
        triples, sids, source = _joined(triples), _joined(sids), _joined(source)
        if len(source) != int(m["num_input_triples"]):
            raise ValueError(f"{d / parts[-1]['triples']}: {len(source)} triples, {MANIFEST} says "
                             f"{m['num_input_triples']}")
        gm = m["graph"]
        g = graph_kw.pop("make")(source=source, n_skipped=gm["n_skipped"], n_hubs=gm["n_hubs"],
                                 normalize=gm["normalize"], max_degree=gm["max_degree"])
        ki = cls(theme, triples, sids, g, None, m["extraction"], m.get("unparsed", ()), gm["max_degree"])
        ki.path = d
        if isinstance(m.get("bm25"), dict):
            ki._bm25_saved = dict(m["bm25"])
        return ki


# ---------------------------------------------------------------- lazy, memory-mapped parts
# (layout 4: what load needs is binary and mapped; triple records and entity strings are
# decoded on access, so opening an index costs the same at 1k and at 5M triples)

PARSED_RECORDS = 0   # triples records decoded so far (tests: opening an index decodes none)


class _Records:
    """The JSON-lines records of one part's triples file, located by its ends array (both
    memory-mapped); record i is decoded on access (the last few are kept), and its passage
    id is checked against the index's row."""

    def __init__(self, path: pathlib.Path, ends: np.ndarray, pids: np.ndarray):
        import mmap as _mmap
        self.path, self.ends, self.pids = path, ends, pids
        nbytes = int(ends[-1]) if len(ends) else 0
        size = path.stat().st_size if path.is_file() else -1
        if size < nbytes:
            raise ValueError(f"{path}: {'missing' if size < 0 else f'truncated ({size} bytes)'}; "
                             f"its ends file says {nbytes} bytes")
        with open(path, "rb") as f:
            self._map = _mmap.mmap(f.fileno(), 0, access=_mmap.ACCESS_READ) if nbytes else b""
        self._cache: Dict[int, Dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self.ends)

    def __reduce__(self):   # pickles as its paths and offsets; the copy maps the file again
        return (_Records, (self.path, np.asarray(self.ends), np.asarray(self.pids)))

    def record(self, i: int) -> Dict[str, Any]:
        r = self._cache.get(i)
        if r is not None:
            return r
        global PARSED_RECORDS
        PARSED_RECORDS += 1
        start = int(self.ends[i - 1]) if i else 0
        try:
            r = json.loads(self._map[start:int(self.ends[i])].decode("utf-8"))
            if int(r["pid"]) != int(self.pids[i]) or not isinstance(r["triples"], list):
                raise ValueError(f"passage id {r['pid']}, the index row holds {int(self.pids[i])}")
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{self.path}: line {i + 1} is not the triples record of its row ({e})") from None
        if len(self._cache) >= 64:
            self._cache.clear()
        self._cache[i] = r
        return r


class _LazySeq(Sequence):
    """Items [0, len) made on access by ``_item(i)``; slices are lists."""

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._item(j) for j in range(*i.indices(len(self)))]
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("index out of range")
        return self._item(i)


class _RecordField(_LazySeq):
    """One field of a part's records: "triples" (the raw list) or "source_id"."""

    def __init__(self, recs: _Records, field: str):
        self.recs, self.field = recs, field

    def __len__(self) -> int:
        return len(self.recs)

    def _item(self, i: int):
        r = self.recs.record(i)
        return list(r["triples"]) if self.field == "triples" else r.get("source_id")


class _InputTriples(_LazySeq):
    """A part's raw input triples, flattened in record order (the graph's ``source``):
    triple j is entry j - ptr[k] of record k, ptr = the part's input_ptr array."""

    def __init__(self, recs: _Records, ptr: np.ndarray):
        self.recs, self.ptr = recs, ptr

    def __len__(self) -> int:
        return int(self.ptr[-1])

    def _item(self, j: int):
        k = int(np.searchsorted(self.ptr, j, side="right")) - 1
        got = self.recs.record(k)["triples"]
        if len(got) != int(self.ptr[k + 1] - self.ptr[k]):
            raise ValueError(f"{self.recs.path}: line {k + 1} holds {len(got)} triples, "
                             f"input_ptr says {int(self.ptr[k + 1] - self.ptr[k])}")
        return got[j - int(self.ptr[k])]


class _Strings(_LazySeq):
    """Strings stored back to back in UTF-8 (``entities.bin``), located by an ends array."""

    def __init__(self, path: pathlib.Path, ends: np.ndarray):
        import mmap as _mmap
        self.path, self.ends = path, ends
        nbytes = int(ends[-1]) if len(ends) else 0
        size = path.stat().st_size if path.is_file() else -1
        if size != nbytes:
            raise ValueError(f"{path}: {'missing' if size < 0 else f'{size} bytes'}; its ends "
                             f"file says {nbytes}")
        with open(path, "rb") as f:
            self._map = _mmap.mmap(f.fileno(), 0, access=_mmap.ACCESS_READ) if nbytes else b""

    def __len__(self) -> int:
        return len(self.ends)

    def __reduce__(self):
        return (_Strings, (self.path, np.asarray(self.ends)))

    def _item(self, i: int) -> str:
        start = int(self.ends[i - 1]) if i else 0
        return self._map[start:int(self.ends[i])].decode("utf-8")


def _hash_strings(strings) -> np.ndarray:
    """A stable 64-bit hash (blake2b) of each string (the entity lookup tables)."""
    import hashlib
    return np.fromiter((int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest(),
                                       "little") for s in strings), dtype=np.uint64, count=len(strings))


class _EntityTable:
    """Entity string -> id over saved parts without a dict of every entity: each layout-4
    part has its entities' hashes sorted (entity_hash.npy, their ids in entity_hash_ids.npy),
    so a lookup is a binary search and a string compare. Parts of older layouts
    (entities.json) fall back to a dict of their entities, built on the first lookup.
    Entities added by merges since the load go to a dict. TripleGraph.merge uses
    lookup_many, get, __setitem__ and __len__."""

    def __init__(self, entities, parts):
        self.entities, self.parts, self.n = entities, parts, len(entities)
        self.added: Dict[str, int] = {}

    def __len__(self) -> int:
        return self.n + len(self.added)

    def __setitem__(self, key: str, i: int) -> None:
        self.added[key] = int(i)

    def get(self, key: str, default=None):
        got = int(self.lookup_many([key])[0])
        return default if got < 0 else got

    def lookup_many(self, keys) -> np.ndarray:
        keys = list(keys)
        out = np.full(len(keys), -1, dtype=np.int64)
        h = None
        for part in self.parts:
            if isinstance(part, _DictPart):   # an old-layout part: its entities as a dict
                for k, key in enumerate(keys):
                    if out[k] < 0:
                        out[k] = part.get(key, -1)
                continue
            sh, ids = part
            if h is None:
                h = _hash_strings(keys)
            lo = np.searchsorted(sh, h, side="left")
            hi = np.searchsorted(sh, h, side="right")
            for k in np.nonzero((hi > lo) & (out < 0))[0].tolist():
                for j in range(int(lo[k]), int(hi[k])):
                    e = int(ids[j])
                    if self.entities[e] == keys[k]:
                        out[k] = e
                        break
        if self.added:
            for k, key in enumerate(keys):
                if out[k] < 0:
                    out[k] = self.added.get(key, -1)
        return out


class _TriplesByPid(Mapping):
    """pid -> clean_triples(raw triples of its row), decoded on lookup and kept."""

    def __init__(self, pids: np.ndarray, triples):
        self._pids, self._triples = pids, triples
        self._order = self._sorted = None
        self._done: Dict[int, List[tuple]] = {}

    def _row(self, pid) -> Optional[int]:
        if self._order is None:
            self._order = np.argsort(self._pids, kind="stable")
            self._sorted = self._pids[self._order]
        try:
            pid = int(pid)
        except (TypeError, ValueError):
            return None
        i = int(np.searchsorted(self._sorted, pid))
        return int(self._order[i]) if i < len(self._sorted) and int(self._sorted[i]) == pid else None

    def __getitem__(self, pid):
        got = self._done.get(pid)
        if got is None:
            from ...parse import clean_triples
            row = self._row(pid)
            if row is None:
                raise KeyError(pid)
            got = self._done[int(pid)] = clean_triples(self._triples[row])
        return got

    def __contains__(self, pid) -> bool:
        return self._row(pid) is not None

    def __iter__(self):
        return (int(p) for p in self._pids)

    def __len__(self) -> int:
        return len(self._pids)


def _cat(segments):
    """One lazy sequence over segments (TextColumn: slicing and ``+`` copy nothing)."""
    from ..passages import TextColumn
    return TextColumn(segments)



def _joined(segments):
    """Plain lists stay one list (an index of old-format parts loads as before); mapped
    segments become one lazy sequence."""
    if all(isinstance(x, list) for x in segments):
        return segments[0] if len(segments) == 1 else list(itertools.chain.from_iterable(segments))
    return _cat(segments)


def _files(m: Dict[str, Any]) -> Dict[str, str]:
    """The knowledge files a manifest names (version 1: the fixed names)."""
    return m.get("files") or {"triples": TRIPLES, "graph": GRAPH_DIR, "triple_emb": TRIPLE_EMB}


def _parts(m: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The parts a manifest lists, oldest first (versions 1 and 2: one full part)."""
    if m.get("version") in (3, 4):
        if not isinstance(m.get("parts"), list) or not m["parts"]:
            raise ValueError(f"{MANIFEST}: version {m.get('version')} without a list of parts")
        return [dict(p) for p in m["parts"]]
    f = _files(m)
    n, nt, ne = int(m["num_passages"]), int(m["num_triples"]), int(m["num_entities"])
    return [{"triples": f["triples"], "graph": f["graph"], "triple_emb": f["triple_emb"],
             "passages": [0, n], "rows": [0, nt], "entities": [0, ne],
             "csr": {"kind": "full", "rows": nt, "nnz": int(m["nnz"])},
             "degree": {"kind": "full", "count": ne}}]


def _check_parts(mpath: pathlib.Path, parts, n: int, nt: int, ne: int) -> None:
    """The parts' ranges tile the passages, triples and entities; the first part is full."""
    ends = [0, 0, 0]
    for k, p in enumerate(parts):
        try:
            for j, key in enumerate(("passages", "rows", "entities")):
                lo, hi = (int(x) for x in p[key])
                if lo != ends[j] or hi < lo:
                    raise ValueError(key)
                ends[j] = hi
            if p["csr"]["kind"] not in ("full", "delta") or p["degree"]["kind"] not in ("full", "delta") \
                    or (k == 0 and "delta" in (p["csr"]["kind"], p["degree"]["kind"])):
                raise ValueError("kind")
            if p.get("layout") == LAYOUT:
                lo, hi = (int(x) for x in p["inputs"])
                if hi < lo or not p["triples_ends"]:
                    raise ValueError("inputs")
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{mpath}: part {k} is malformed ({e})") from None
    if ends != [n, nt, ne]:
        raise ValueError(f"{mpath}: the parts cover {ends[0]} passages, {ends[1]} triples and "
                         f"{ends[2]} entities; the counts say {n}, {nt} and {ne}")


def _write_part(d: pathlib.Path, g: int, ki: "KnowledgeIndex", start, full: bool = False) -> Dict[str, Any]:
    """Writes the files of part ``g`` (layout 4): passages, triples, entities and input
    triples from ``start`` = (passages, triples, entities, input triples) already on disk;
    the adjacency as a delta block when the graph grew from that state by merges
    (TripleGraph._delta_base) and not ``full``, else in full. Returns its manifest entry."""
    from .. import durable as _durable
    p0, t0, e0, i0 = start
    gr = ki.graph
    nt, ne = gr.num_triples, gr.num_entities
    part = {"triples": f"triples.{g}.jsonl", "triples_ends": f"triples.{g}.ends.npy",
            "graph": f"graph.{g}", "triple_emb": f"triple_emb.{g}.npy", "layout": LAYOUT,
            "passages": [p0, len(ki)], "rows": [t0, nt], "entities": [e0, ne],
            "inputs": [i0, len(gr._source)]}
    pids = np.asarray(ki.theme.pids[p0:]).tolist()
    rows = ki.triples[p0:]
    lines = [(json.dumps({"pid": int(pid), "source_id": sid, "triples": t}, ensure_ascii=False) + "\n").encode("utf-8")
             for pid, sid, t in zip(pids, ki.source_ids[p0:], rows)]
    _durable.write_new_file(d / part["triples"], lines)
    _write_npy(d / part["triples_ends"], _ends(lines))
    del lines
    gd = d / part["graph"]
    gd.mkdir(exist_ok=True)
    counts = np.fromiter((len(t) for t in rows), dtype=np.int64, count=len(rows))
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    if int(ptr[-1]) != len(gr._source) - i0:
        raise ValueError(f"triples: {int(ptr[-1])} input triples in the new rows, the graph has "
                         f"{len(gr._source) - i0}")
    _write_npy(gd / "input_ptr.npy", _i8(ptr))
    for name in ROW_ARRAYS:
        _write_npy(gd / f"{name}.npy", _i8(getattr(gr, name)[t0:]))
    ents = [e.encode("utf-8") for e in gr.entities[e0:]]
    _durable.write_new_file(gd / "entities.bin", ents)
    _write_npy(gd / "entities_ends.npy", _ends(ents))
    h = _hash_strings(gr.entities[e0:])
    order = np.argsort(h, kind="stable")
    _write_npy(gd / "entity_hash.npy", np.ascontiguousarray(h[order], dtype="<u8"))
    _write_npy(gd / "entity_hash_ids.npy", _i8(order + e0))
    base = gr._delta_base
    if not full and t0 > 0 and base[0] == t0 and base[1] == e0:
        rows_, ptr_, entries = _delta_block(gr.indptr, gr.indices, base[2], base[4], t0, nt)
        _write_npy(gd / "csr_rows.npy", rows_)
        _write_npy(gd / "csr_ptr.npy", ptr_)
        _write_npy(gd / "csr_indices.npy", entries)
        _write_npy(gd / "csr_replace.npy", _i8(base[4]))
        part["csr"] = {"kind": "delta", "rows": int(rows_.shape[0]), "nnz": int(entries.shape[0]),
                       "replace": int(base[4].shape[0])}
        ids = np.union1d(base[3], np.arange(e0, ne, dtype=np.int64)).astype("<i8")
        _write_npy(gd / "degree_ids.npy", ids)
        _write_npy(gd / "entity_degree.npy", _i8(np.asarray(gr.entity_degree)[ids]))
        part["degree"] = {"kind": "delta", "count": int(ids.shape[0])}
    else:
        _write_npy(gd / "indptr.npy", _i8(gr.indptr))
        _write_npy(gd / "indices.npy", _i8(gr.indices))
        part["csr"] = {"kind": "full", "rows": nt, "nnz": gr.num_edges}
        _write_npy(gd / "entity_degree.npy", _i8(gr.entity_degree))
        part["degree"] = {"kind": "full", "count": ne}
    _durable.fsync_dir(gd)
    _write_npy(d / part["triple_emb"], np.ascontiguousarray(gr.embedding_rows(t0), dtype="<f4"))
    _durable.fsync_dir(d)
    return part


def _ends(chunks) -> np.ndarray:
    """int64 end offset of each chunk written back to back."""
    out = np.zeros(len(chunks), dtype="<i8")
    if chunks:
        np.cumsum(np.fromiter((len(c) for c in chunks), dtype=np.int64, count=len(chunks)), out=out)
    return out


def _delta_block(indptr, indices, changed, replaced, t0: int, nt: int):
    """(rows, ptr, entries): the changed old rows (< t0) with only their entries >= t0 (all a
    merge appended: rows stay sorted) -- the ``replaced`` ones (a subset: rows that may have
    lost entries) whole --, then every row from t0 on in full."""
    indptr = np.asarray(indptr)
    changed = np.asarray(changed, dtype=np.int64)
    lo, hi = indptr[changed].astype(np.int64), indptr[changed + 1].astype(np.int64)
    whole = np.isin(changed, replaced)
    a, b = lo.copy(), np.where(whole, lo, hi)   # binary search for the first entry >= t0, all rows at once
    while True:
        open_ = a < b
        if not open_.any():
            break
        mid = (a + b) // 2
        probe = np.where(open_, mid, 0)
        small = open_ & (np.asarray(indices[probe]) < t0)
        a = np.where(small, mid + 1, a)
        b = np.where(open_ & ~small, mid, b)
    lens = hi - a
    total = int(lens.sum())
    ptr_old = np.zeros(changed.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr_old[1:])
    gather = np.repeat(a - ptr_old[:-1], lens) + np.arange(total, dtype=np.int64)
    tail_lo, tail_hi = int(indptr[t0]), int(indptr[nt])
    entries = np.concatenate([np.asarray(indices[gather], dtype=np.int64) if total else _EMPTY,
                              np.asarray(indices[tail_lo:tail_hi], dtype=np.int64)])
    rows = np.concatenate([changed, np.arange(t0, nt, dtype=np.int64)])
    ptr = np.concatenate([ptr_old, total + (np.asarray(indptr[t0 + 1:nt + 1], dtype=np.int64) - tail_lo)])
    return _i8(rows), _i8(ptr), _i8(entries)


def _load_graph_parts(d: pathlib.Path, parts, nt: int, ne: int, dim: int, nnz: int, mmap: bool):
    """{"make": a function making the TripleGraph of the parts (see the module docstring)
    from the rest of its arguments}. Every file is opened and its header checked here; one
    full part gives its arrays as read (mapped with ``mmap``); several are joined on first
    access of an array (TripleGraph._lazy), so opening does not grow with the triples.
    Entity strings of layout-4 parts are decoded on access; entity lookups for merges use
    the parts' hash tables (_EntityTable)."""
    from ... import dispatch as _bk
    from ...graph import TripleGraph
    i8 = np.dtype("<i8")
    rows = {name: [] for name in ROW_ARRAYS}
    entities: List[Any] = []
    tables: List[Any] = []
    embs = []
    degrees = []
    blocks = []
    for part in parts:
        gd = d / part["graph"]
        t0, t1 = part["rows"]
        e0, e1 = part["entities"]
        for name in ROW_ARRAYS:
            rows[name].append(_read_npy(gd / f"{name}.npy", i8, (t1 - t0,), mmap))
        if part.get("layout") == LAYOUT:
            ends = _read_npy(gd / "entities_ends.npy", i8, (e1 - e0,), True)
            entities.append(_Strings(gd / "entities.bin", ends))
            tables.append((_read_npy(gd / "entity_hash.npy", np.dtype("<u8"), (e1 - e0,), True),
                           _read_npy(gd / "entity_hash_ids.npy", i8, (e1 - e0,), True)))
        else:
            epath = gd / "entities.json"
            try:
                ents = json.loads(epath.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise ValueError(f"{epath}: missing or unreadable ({e})") from None
            if not isinstance(ents, list) or len(ents) != e1 - e0:
                raise ValueError(f"{epath}: {len(ents) if isinstance(ents, list) else 'no'} entities, "
                                 f"{MANIFEST} says {e1 - e0}")
            entities.append(ents)
            tables.append(_DictPart(ents, e0))
        embs.append(_read_npy(d / part["triple_emb"], np.dtype("<f4"), (t1 - t0, dim), mmap))
        c = part["csr"]
        if c["kind"] == "full":
            blocks = [(None, _read_npy(gd / "indptr.npy", i8, (int(c["rows"]) + 1,), mmap),
                       _read_npy(gd / "indices.npy", i8, (int(c["nnz"]),), mmap))]
        else:
            k, nrep = int(c["rows"]), int(c.get("replace", 0))
            blocks.append((_read_npy(gd / "csr_rows.npy", i8, (k,), mmap),
                           _read_npy(gd / "csr_ptr.npy", i8, (k + 1,), mmap),
                           _read_npy(gd / "csr_indices.npy", i8, (int(c["nnz"]),), mmap),
                           _read_npy(gd / "csr_replace.npy", i8, (nrep,), mmap) if nrep else None))
            _check_delta(gd, blocks[-1], t1, int(c["nnz"]))
        dg = part["degree"]
        if dg["kind"] == "full":
            degrees = [(None, _read_npy(gd / "entity_degree.npy", i8, (int(dg["count"]),), mmap), e1)]
        else:
            degrees.append((_read_npy(gd / "degree_ids.npy", i8, (int(dg["count"]),), mmap),
                            _read_npy(gd / "entity_degree.npy", i8, (int(dg["count"]),), mmap), e1))
    last = d / parts[-1]["graph"]

    def degree():
        deg = degrees[0][1]
        for ids, vals, e1 in degrees[1:]:
            ids, vals = np.asarray(ids), np.asarray(vals)
            if ids.size and (ids.min() < 0 or ids.max() >= e1):
                raise ValueError(f"{last / 'degree_ids.npy'}: entity ids outside [0, {e1})")
            grown = np.zeros(e1, dtype=np.int64)
            grown[:deg.shape[0]] = deg
            grown[ids] = vals
            deg = grown
        if deg.shape[0] != ne:
            raise ValueError(f"{last}: {deg.shape[0]} entity degrees, {MANIFEST} says {ne}")
        return {"entity_degree": deg}

    def csr():
        if len(blocks) == 1 and blocks[0][1].shape[0] == nt + 1:
            indptr, indices = blocks[0][1], blocks[0][2]
        else:
            try:
                indptr, indices = _bk.cpu_module().csr_concat_blocks(
                    nt, [(None if b[0] is None else _i8(b[0]), _i8(b[1]), _i8(b[2]),
                          None if len(b) < 4 or b[3] is None else _i8(b[3])) for b in blocks])
            except ValueError as e:
                raise ValueError(f"{last}: the graph blocks do not fit together ({e})") from None
        if indices.shape[0] != nnz:
            raise ValueError(f"{last}: {indices.shape[0]} graph entries, {MANIFEST} says {nnz}")
        return {"indptr": indptr, "indices": indices}

    ents = _joined(entities)
    table = None if all(isinstance(t, _DictPart) for t in tables) else _EntityTable(ents, tables)
    if len(parts) == 1:       # as read (mapped): nothing to join
        arrays = {name: v[0] for name, v in rows.items()}
        arrays.update(degree())
        arrays.update(csr())

        def make(**kw):
            g = TripleGraph(**arrays, entities=ents, **kw)
            g.embeddings = embs[0]
            g._entity_ids = table
            return g
        return {"make": make}
    thunks: Dict[str, Any] = {name: (lambda name=name: {name: np.concatenate(rows[name])})
                              for name in ROW_ARRAYS}
    thunks["entity_degree"] = degree
    thunks["indptr"] = thunks["indices"] = csr

    def make_lazy(**kw):
        g = TripleGraph._lazy(num_triples=nt, num_edges=nnz, thunks=thunks, emb_segments=embs,
                              entities=ents, **kw)
        g._entity_ids = table
        return g
    return {"make": make_lazy}


def _check_delta(gd: pathlib.Path, block, nt: int, nnz: int) -> None:
    """What opening checks of a delta block (O(its rows), not O(all)): rows strictly
    increasing in [0, nt), ptr from 0 to nnz, non-decreasing. The entries themselves are
    checked when the blocks are joined (csr_concat_blocks), on first use of the adjacency."""
    rows, ptr = np.asarray(block[0]), np.asarray(block[1])
    if rows.size and (np.any(np.diff(rows) <= 0) or rows[0] < 0 or rows[-1] >= nt):
        raise ValueError(f"{gd / 'csr_rows.npy'}: rows not strictly increasing in [0, {nt})")
    if int(ptr[0]) != 0 or int(ptr[-1]) != nnz or np.any(np.diff(ptr) < 0):
        raise ValueError(f"{gd / 'csr_ptr.npy'}: not a pointer array from 0 to {nnz}")


class _DictPart:
    """An old-format part's entities for _EntityTable: a dict built on the first lookup."""

    def __init__(self, ents: List[str], e0: int):
        self.ents, self.e0, self._d = ents, e0, None

    def get(self, key: str, default=-1):
        if self._d is None:
            self._d = {k: self.e0 + i for i, k in enumerate(self.ents)}
        return self._d.get(key, default)


def _i8(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype="<i8")


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
