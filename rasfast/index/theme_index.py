"""ThemeIndex: a corpus ready for theme-scoped dense retrieval, in memory or on disk.

An index holds, per passage (row): a theme vector ("PPD", rows L2-normalised by default as
RAS does), a dense embedding, the passage id, title and text; optionally the rows are split
into shards (contiguous row ranges). On disk it is a directory (DESIGN.md sections 7 and 9;
the layout, format version 4, and the write protocol are in rasfast.index.store): a
manifest, raw row-major ``emb.<g>.bin`` / ``ppd.<g>.bin`` / ``pids.<g>.bin``,
``passages.<g>.jsonl`` and the theme model. The index grows by appended shards:
``index.add(...)`` appends rows as a new shard and ``save`` into the index's own directory
writes only those rows; every save commits atomically and never rewrites committed bytes.
Searches are thread-safe; add/save are serialised (docs/index.md "Thread safety").

``ThemeIndex.load(dir, mmap=True)`` memory-maps the arrays, and the compiled kernels search
the mapped files in place (a mapped file is a buffer): same code, same results as in memory.
A corpus larger than memory is searched with ``max_memory=`` (streamed from the files in
blocks, bounded memory; rasfast.index.stream), and one spread over several processes or
hosts with rasfast.distributed.DistributedThemeIndex -- all bit-identical to one in-memory
search.

Search (row ids, not passage ids, are returned; ``passages(ids)`` maps them)::

    ids, scores = index.search(q_ppd, q_emb, K=50_000, k=10)          # per-shard scoping
    ids, scores = index.search(q_ppd, q_emb, K, k, scope="global")    # exact over all shards
    ids, scores = index.dense_search(q_emb, k=10)                     # unscoped ("dense flat")
"""
from __future__ import annotations

import contextlib
import copy
import numbers
import pathlib
import threading
import uuid
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

from . import durable as _durable
from . import store as _store
from . import stream as _stream
from .passages import TextColumn
from .._arrays import as_tensor, kind_of, to_kind
from .._validate import (check_choice, check_dim, check_finite, check_finite_together, check_float,
                        check_int_arg, check_rank)
from .._threads import follows_width_rule

SCOPES = ("per_shard", "global")
METRICS = ("l2", "ip")


class IndexConflictError(ValueError):
    """A save into a directory that another handle or process committed to after this
    handle loaded (or last saved) it; nothing was written."""


_DTYPES = _store.DTYPES
_dtype_name = _store.dtype_name


def _float_matrix(x, name: str) -> torch.Tensor:
    t = as_tensor(x, name)
    check_float(t, name)
    check_rank(t, name, 2)
    return t


def _normalise_rows(t: torch.Tensor) -> torch.Tensor:
    t = t.float()
    return t / t.norm(dim=1, keepdim=True).clamp_min(1e-12)


def _shard_ranges(shards, n: int) -> List[Tuple[int, int]]:
    """Contiguous row ranges covering [0, n) from None, a shard count, a list of sizes or a
    list of (start, stop) ranges."""
    if shards is None:
        return [(0, n)]
    if isinstance(shards, numbers.Integral) and not isinstance(shards, bool):
        count = check_int_arg(shards, "shards", 1, max(n, 1), "the number of rows")
        bounds = [n * i // count for i in range(count + 1)]
        return [(bounds[i], bounds[i + 1]) for i in range(count)]
    if not isinstance(shards, (list, tuple)) or not shards:
        raise TypeError("shards: expected None, a shard count, a list of sizes or a list of "
                        f"(start, stop) ranges, got {shards!r}")
    if all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in shards):
        ranges, a = [], 0
        for s in shards:
            if s < 1:
                raise ValueError(f"shards: sizes must be >= 1, got {list(shards)}")
            ranges.append((a, a + int(s)))
            a += int(s)
    else:
        try:
            ranges = [(int(a), int(b)) for a, b in shards]
        except (TypeError, ValueError) as e:
            raise TypeError(f"shards: expected sizes or (start, stop) pairs, got {shards!r}") from e
    pos = 0
    for a, b in ranges:
        if a != pos or b <= a:
            raise ValueError(f"shards: ranges must be non-empty, contiguous and start at 0, "
                             f"got {ranges}")
        pos = b
    if pos != n:
        raise ValueError(f"shards: ranges cover {pos} rows, the index has {n}")
    return ranges


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(value, name: str) -> int:
    """A byte count from an int or a string such as "1GB", "512MiB", "2e9"."""
    if isinstance(value, str):
        import re
        m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([a-zA-Z]*)\s*", value)
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS:
            raise ValueError(f"{name}: expected bytes as an int or a string like '1GB', got {value!r}")
        try:
            value = int(float(m.group(1)) * _UNITS[unit])
        except ValueError:
            raise ValueError(f"{name}: expected bytes as an int or a string like '1GB', "
                             f"got {value!r}") from None
    return check_int_arg(value, name, 1)


def _passage_fields(p) -> Tuple[int, str, str]:
    """(pid, title, text) from a rasfast.data Passage, a dict, a tuple or a plain string."""
    if isinstance(p, str):
        return -1, "", p
    if isinstance(p, dict):
        return int(p.get("pid", -1)), str(p.get("title", "")), str(p.get("text", ""))
    if isinstance(p, (tuple, list)) and len(p) == 3:
        return int(p[0]), str(p[1]), str(p[2])
    if all(hasattr(p, a) for a in ("pid", "title", "text")):
        return int(p.pid), str(p.title), str(p.text)
    raise TypeError(f"passages: expected Passage objects, dicts, (pid, title, text) tuples or "
                    f"strings, got {type(p).__name__}")


class _FiniteRows:
    """How many leading rows of an index's matrices are known to be finite (checked at
    build/add, by ``to``, or once before the first search of a loaded index on a backend
    that does not check rows itself). Shared by a handle and its search snapshots."""

    def __init__(self, rows: int = 0):
        self.rows = rows
        self.lock = threading.Lock()


def _check_theme_model(model, where: pathlib.Path, m: dict, mpath: pathlib.Path) -> None:
    """The saved theme model maps the index's embeddings to its theme vectors: its input dim
    and its number of themes must be the manifest's (else queries fail, or worse, later)."""
    for field, got, want in (("dim", getattr(model, "dim", None), m["dim"]),
                             ("num_themes", getattr(model, "num_themes", None), m.get("num_themes"))):
        if got is not None and want is not None and int(got) != int(want):
            raise ValueError(f"{where}: the theme model has {field} {int(got)}, {mpath} says "
                             f"{field} {int(want)}; the manifest does not describe this model")


class ThemeIndex:
    """Corpus PPD + dense matrices with passage metadata, shards, save/load and search.

    Construct with :meth:`build` (or :meth:`load`); the constructor takes prepared arrays.
    """

    def __init__(self, ppd: Optional[torch.Tensor], emb: torch.Tensor, pids: np.ndarray,
                 titles: Sequence[str], texts: Sequence[str], shards: List[Tuple[int, int]],
                 normalize_ppd: bool = True, metric: str = "l2", encoder_name: Optional[str] = None,
                 theme_model: Any = None, theme_model_name: Optional[str] = None,
                 mmapped: bool = False):
        self.ppd = ppd
        self.emb = emb
        self.pids = pids
        # TextColumn: saved rows decoded on access (rasfast.index.passages); anything else a list
        self.titles = titles if isinstance(titles, TextColumn) else list(titles)
        self.texts = texts if isinstance(texts, TextColumn) else list(texts)
        self.shards = shards
        self.normalize_ppd = normalize_ppd
        self.metric = metric
        self.encoder_name = encoder_name
        self.theme_model = theme_model
        self.theme_model_name = theme_model_name or getattr(theme_model, "name", None)
        self.mmapped = mmapped
        # (resolved directory, rows saved there, its manifest): where save() appends
        self._home: Optional[Tuple[pathlib.Path, int, dict]] = None
        # FileRows arguments of the arrays when they are exactly the saved files (streaming)
        self._files: Optional[dict] = None
        self._readers: dict = {}  # open FileRows of _files, shared by every streamed search
        self._matrix_rows_on_disk = 0
        # Thread safety (docs/index.md "Thread safety"): add/save/compact hold _write_lock; add
        # publishes its new arrays, lists and shards together under _state_lock, and every
        # search works on a _view() copied under that lock, so it sees before or after.
        self._write_lock = threading.RLock()
        self._state_lock = threading.Lock()
        # rows known finite (DESIGN.md s.11: the corpus is validated once, never per search)
        self._finite = _FiniteRows()
        self._token = uuid.uuid4().hex  # names this handle's uncommitted in-place rows
        self._replay = None  # enable_cuda_graphs()

    def _view(self) -> "ThemeIndex":
        """A consistent snapshot of the index (shares the arrays; a later add is not seen)."""
        with self._state_lock:
            return copy.copy(self)

    # ------------------------------------------------------------------ properties
    def __len__(self) -> int:
        return int(self.emb.shape[0])

    @property
    def num_rows(self) -> int:
        return len(self)

    @property
    def dim(self) -> int:
        return int(self.emb.shape[1])

    @property
    def num_themes(self) -> Optional[int]:
        return None if self.ppd is None else int(self.ppd.shape[1])

    def __repr__(self) -> str:
        return (f"ThemeIndex(rows={len(self)}, T={self.num_themes}, D={self.dim}, "
                f"shards={len(self.shards)}, emb={_dtype_name(self.emb.dtype)}, "
                f"ppd={None if self.ppd is None else _dtype_name(self.ppd.dtype)}, "
                f"mmapped={self.mmapped})")

    # ------------------------------------------------------------------ build
    @classmethod
    def build(cls, emb=None, ppd=None, *, passages: Optional[Sequence[Any]] = None,
              encoder: Any = None, theme_model: Any = None, pids=None,
              titles: Optional[Sequence[str]] = None, texts: Optional[Sequence[str]] = None,
              shards=None, normalize_ppd: bool = True, dtype="float32", ppd_dtype=None,
              metric: str = "l2", num_themes: int = 64, cache: bool = True) -> "ThemeIndex":
        """Builds an in-memory index.

        From arrays: ``emb`` [N, D] (and ``ppd`` [N, T]; when omitted it is computed by
        ``theme_model.ppd(emb)``; with no theme model either, a
        :class:`rasfast.theme.KMeansThemeModel` with ``num_themes`` centroids is fitted on
        ``emb``). ``emb``/``ppd`` may also be lists of per-shard arrays (concatenated, one
        shard each). From text: ``passages`` (rasfast.data Passages, dicts, (pid, title, text)
        tuples or strings) and an ``encoder`` (rasfast.encode protocol) embed ``title\\ntext``
        (cached on disk with ``cache=True``). ``theme_model=False`` builds a dense-only index.

        Args:
            shards: None (one shard), a shard count, a list of shard sizes or of
                (start, stop) row ranges.
            normalize_ppd: L2-normalise PPD rows (queries are normalised at search time).
            dtype: storage dtype of the embeddings (and of PPD unless ``ppd_dtype``):
                "float32", "float16" or "bfloat16" (torch dtypes accepted).
            metric: theme distance, "l2" (squared Euclidean) or "ip".
        """
        if not isinstance(normalize_ppd, bool):
            raise TypeError(f"normalize_ppd: expected a bool, got {type(normalize_ppd).__name__}")
        metric = check_choice(metric, "metric", METRICS)
        emb_dtype = _DTYPES[_dtype_name(dtype)]
        ppd_dt = _DTYPES[_dtype_name(ppd_dtype if ppd_dtype is not None else dtype)]

        shard_sizes = None
        if isinstance(emb, (list, tuple)):
            parts = [_float_matrix(e, "emb") for e in emb]
            if not parts:
                raise ValueError("emb: empty list of shards")
            shard_sizes = [p.shape[0] for p in parts]
            emb = torch.cat([p.float() for p in parts])
        if isinstance(ppd, (list, tuple)):
            parts = [_float_matrix(p, "ppd") for p in ppd]
            if shard_sizes is not None and [p.shape[0] for p in parts] != shard_sizes:
                raise ValueError(f"ppd: per-shard row counts {[p.shape[0] for p in parts]} "
                                 f"differ from emb's {shard_sizes}")
            shard_sizes = [p.shape[0] for p in parts]
            ppd = torch.cat([p.float() for p in parts])
        if shard_sizes is not None:
            if shards is not None:
                raise ValueError("shards: give either per-shard array lists or shards, not both")
            shards = shard_sizes

        encoder_name = getattr(encoder, "name", None)
        fields = None
        if passages is not None:
            fields = [_passage_fields(p) for p in passages]
            if emb is None:
                if encoder is None:
                    raise ValueError("encoder: needed to embed passages when emb is not given")
                contents = [f"{t}\n{x}" if t else x for _, t, x in fields]
                if cache:
                    from ..encode import encode_cached
                    emb = encode_cached(encoder, contents)
                else:
                    emb = encoder.encode(contents)
        if emb is None:
            raise ValueError("emb: give an embedding matrix [N, D], or passages and an encoder")
        e = _float_matrix(emb, "emb")
        n = e.shape[0]
        if n == 0 or e.shape[1] == 0:
            raise ValueError(f"emb: expected a non-empty [N, D] matrix, got shape {tuple(e.shape)}")
        check_finite(e, "emb")

        if ppd is None and theme_model is None:
            from ..theme import KMeansThemeModel
            theme_model = KMeansThemeModel(num_themes=min(num_themes, n)).fit(e.float())
        if ppd is None and theme_model is not False:
            ppd = theme_model.ppd(e.float())
        if theme_model is False:
            theme_model = None
        p = None
        if ppd is not None:
            p = _float_matrix(ppd, "ppd")
            check_dim(p, "ppd", 0, n, "N (emb.shape[0])")
            if p.shape[1] == 0:
                raise ValueError(f"ppd: expected T >= 1 columns, got shape {tuple(p.shape)}")
            check_finite(p, "ppd")
            p = (_normalise_rows(p) if normalize_ppd else p).to(ppd_dt).contiguous()

        if fields is not None:
            if len(fields) != n:
                raise ValueError(f"passages: {len(fields)} given for {n} embedding rows")
            pid_list = [f[0] if f[0] >= 0 else i for i, f in enumerate(fields)]
            titles = titles if titles is not None else [f[1] for f in fields]
            texts = texts if texts is not None else [f[2] for f in fields]
        else:
            pid_list = None
        if pids is not None:
            pid_arr = np.asarray(pids.cpu().numpy() if isinstance(pids, torch.Tensor) else pids)
            if pid_arr.dtype.kind not in "iu" or pid_arr.shape != (n,):
                raise ValueError(f"pids: expected {n} integer ids, got {pid_arr.dtype} {pid_arr.shape}")
            pid_arr = pid_arr.astype(np.int64)
        elif pid_list is not None:
            pid_arr = np.asarray(pid_list, dtype=np.int64)
        else:
            pid_arr = np.arange(n, dtype=np.int64)
        titles = list(titles) if titles is not None else [""] * n
        texts = list(texts) if texts is not None else [""] * n
        for name, seq in (("titles", titles), ("texts", texts)):
            if len(seq) != n:
                raise ValueError(f"{name}: expected {n} entries (one per row), got {len(seq)}")
            for i, v in enumerate(seq):
                if not isinstance(v, str):
                    raise TypeError(f"{name}[{i}]: expected a str, got {type(v).__name__}")
                _store.check_text(v, f"{name}[{i}] (passage {int(pid_arr[i])})")

        index = cls(p, e.to(emb_dtype).contiguous(), pid_arr, titles, texts,
                    _shard_ranges(shards, n), normalize_ppd=normalize_ppd, metric=metric,
                    encoder_name=encoder_name, theme_model=theme_model)
        index._finite.rows = n  # emb and ppd were checked above
        return index

    def to(self, device) -> "ThemeIndex":
        """An in-memory copy of the matrices on ``device`` (e.g. "cuda") for GPU search. Rows
        not yet known finite (those of a loaded index) are checked for NaN/inf here, once,
        in one host read (searches do not re-check the corpus; the cpu kernels check the
        rows they read)."""
        view = self._view()
        ppd = None if view.ppd is None else view.ppd.to(device)
        if ppd is not None and ppd.is_cuda:
            from ..ops.theme_gemm import pad_rows  # rows the GPU streams in 16-byte loads
            ppd = pad_rows(ppd)
        out = ThemeIndex(ppd, view.emb.to(device), view.pids, view.titles, view.texts, view.shards,
                         view.normalize_ppd, view.metric, view.encoder_name, view.theme_model,
                         view.theme_model_name)
        out._finite.rows = view._finite.rows
        if torch.device(device).type != "cpu":
            out._check_corpus_once()
        return out

    def _check_corpus_once(self, backend: Optional[str] = None) -> None:
        """NaN/inf in the matrices is a ValueError naming the array -- checked once per row
        (at build/add, or here for the rows of a loaded index before the first search on a
        backend other than "cpu", whose kernels check every row they read): one reduction
        per matrix over the rows not yet checked and one host read, never per search."""
        st, n = self._finite, len(self)
        if backend == "cpu" or st.rows >= n:
            return
        with st.lock:
            a = st.rows
            if a >= n:
                return
            try:
                check_finite_together({"emb": self.emb[a:n],
                                       "ppd": None if self.ppd is None else self.ppd[a:n]})
            except ValueError as e:
                raise ValueError(f"{e} (index rows [{a}, {n}), checked once before their first "
                                 "search on a backend other than cpu)") from None
            st.rows = n

    # ------------------------------------------------------------------ save / load
    def save(self, directory) -> pathlib.Path:
        """Writes the index into ``directory`` and commits it atomically (format version 4;
        the protocol is in rasfast.index.store and docs/index.md "Durability").

        Into the directory this handle was loaded from or last saved to, only what is new
        since then (the shards appended by :meth:`add`) is written, after the committed
        bytes. If another handle or process committed to that directory in between, the save
        raises :class:`IndexConflictError` and changes nothing: load the directory again
        and repeat the change. Any other directory gets a full write into files of a new
        generation; the index it held (if any) stays intact until the new manifest commits.
        Readers of the directory keep working throughout, and a crash at any point leaves
        the old or the new index.
        """
        d = pathlib.Path(directory)
        with self._write_lock, _durable.DirLock(d):
            self._commit(d, publish=True)
        return d

    def _commit(self, d: pathlib.Path, publish: bool = True,
                expect: Optional[int] = None) -> dict:
        """The save, with the handle's and the directory's write locks held.

        ``expect``: the generation the caller knows to be the directory's real state (a
        KnowledgeIndex: the one its knowledge.json names). A newer theme generation there is
        then the orphan of a save that died before its knowledge.json commit: this save
        supersedes it with a full write (never appending after bytes it may have used)."""
        try:
            current = _store.read_manifest(d) if (d / _store.MANIFEST).exists() else None
        except ValueError:
            current = None  # nothing loadable there: a full write loses nothing
        mine = self._home is not None and d.resolve() == self._home[0]
        orphan = (mine and current is not None and current != self._home[2]
                  and expect is not None and _store.generation_of(self._home[2]) == expect)
        if mine and current is not None and current != self._home[2] and not orphan:
            raise IndexConflictError(
                f"{d}: changed by another writer since this handle loaded or saved it "
                f"(generation {_store.generation_of(current)} committed there, this handle "
                f"holds generation {_store.generation_of(self._home[2])}); nothing was "
                f"written. Load {d} again and repeat the change, or save elsewhere")
        claim = _durable.AppendClaim(d)
        previous, start, on_disk = None, 0, 0
        if mine and current is not None and current == self._home[2] \
                and current.get("version") in (2, 3, 4) \
                and self._home[1] <= len(self) \
                and [list(r) for r in self.shards[:len(current["shards"])]] == current["shards"] \
                and not claim.blocks(self._token, _store.generation_of(current)):
            previous, start = current, self._home[1]
            on_disk = self._matrix_rows_on_disk if self._claimed(d) else start
        generation = _store.next_generation(d)
        manifest = _store.write(d, self, generation, previous, start, on_disk, publish)
        claim.release(self._token)
        files = None
        if self._files is not None:  # a mapped index now streams from (and grows) this copy
            files = {name: _store.file_rows_args(d, manifest, manifest["arrays"][name])
                     for name in self._files}
        with self._state_lock:
            self._home = (d.resolve(), len(self), manifest)
            self._matrix_rows_on_disk = len(self)
            if files is not None:
                self._files, self._readers = files, {}
        return manifest

    def _claimed(self, d: pathlib.Path) -> bool:
        rec = _durable.AppendClaim(d).read()
        return rec is not None and rec.get("token") == self._token

    @staticmethod
    def compact(directory, keep: Sequence[str] = ()) -> List[str]:
        """Removes the files of ``directory`` that its committed generation does not use
        (older generations, leftovers of interrupted saves, version 1/2 files replaced by a
        full save) and returns their names. Run it only when no reader still uses an older
        generation: a process that loaded the index before the last commit may read those
        files later (streamed search opens them on first use). ``keep`` names more entries
        to keep (a KnowledgeIndex keeps its own files this way)."""
        d = pathlib.Path(directory)
        with _durable.DirLock(d):
            m = _store.read_manifest(d)
            keep = set(keep) | set(_store.referenced_files(m)) | {
                _store.MANIFEST, _store.manifest_name(_store.generation_of(m)),
                _durable.LOCK_FILE, _durable.CLAIM_FILE}
            removed = []
            for p in sorted(d.iterdir()):
                if p.name in keep or not _store.is_store_file(p.name):
                    continue
                if p.is_dir():
                    import shutil
                    shutil.rmtree(p)
                else:
                    p.unlink()
                removed.append(p.name)
            if removed:
                _durable.fsync_dir(d)
        return removed

    @classmethod
    def load(cls, directory, mmap: bool = True, load_theme_model: bool = True,
             generation: Optional[int] = None) -> "ThemeIndex":
        """Loads a saved index (format versions 1-4); ``mmap=True`` memory-maps the arrays,
        which the compiled kernels then search in place (at in-memory speed once the files
        are in the page cache).

        ``generation`` loads an older committed generation (``manifest.<g>.json``) instead
        of the current one; a KnowledgeIndex loads the generation it was committed with.

        Raises ValueError naming the file when the manifest is malformed (schema), or a
        file is missing, truncated or does not match the manifest (format 4 array files carry
        a header that is compared with their manifest entry: array, dtype, shape; the theme
        model's dim and number of themes are compared with the manifest's).
        """
        d = pathlib.Path(directory)
        m = _store.read_manifest(d, generation)
        mpath = d / (_store.MANIFEST if generation is None else _store.manifest_name(generation))
        try:
            n = int(m["num_rows"])
            shards = _shard_ranges([tuple(r) for r in m["shards"]], n)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{mpath}: malformed manifest ({e})") from e

        def matrix(name):
            entry = _store.array_entry(d, m, name)
            if entry is None:
                return None
            return _store.as_torch(_store.read_rows(d, m, entry, 0, n, mmap), entry["dtype"])

        emb = matrix("emb")
        ppd = matrix("ppd")
        pids = np.array(_store.read_rows(d, m, _store.array_entry(d, m, "pids"), 0, n, mmap))
        titles, texts = _store.passage_columns(d, m)
        theme_model = None
        tm = m.get("theme_model") or {}
        if load_theme_model and tm.get("dir"):
            from ..theme import load_theme_model as _load_tm
            theme_model = _load_tm(d / tm["dir"])
            _check_theme_model(theme_model, d / tm["dir"], m, mpath)
        index = cls(ppd, emb, pids, titles, texts, shards, bool(m.get("normalize_ppd", True)),
                    m.get("metric", "l2"), m.get("encoder"), theme_model, tm.get("name"),
                    mmapped=mmap)
        index._home = (d.resolve(), n, m)
        index._matrix_rows_on_disk = n
        index._files = {name: _store.file_rows_args(d, m, _store.array_entry(d, m, name))
                         for name, t in (("emb", emb), ("ppd", ppd)) if t is not None}
        return index

    # ------------------------------------------------------------------ growing
    def add(self, emb=None, ppd=None, *, passages: Optional[Sequence[Any]] = None,
            encoder: Any = None, pids=None, titles: Optional[Sequence[str]] = None,
            texts: Optional[Sequence[str]] = None, cache: bool = True) -> "ThemeIndex":
        """Appends rows as a NEW shard (rows [N, N + n)) and returns this index.

        Takes the same row inputs as :meth:`build`: ``emb`` [n, D] (or ``passages`` and an
        ``encoder``, which must be the one the index was built with when it recorded one),
        and ``ppd`` [n, T]; when ``ppd`` is omitted it is computed by the index's theme
        model. Rows are stored in the index's dtypes and normalised like the existing rows.
        Default pids continue the row numbering (as :meth:`build` numbers rows).
        :meth:`save` into the index's directory then writes only the new shard.

        On a memory-mapped index the matrices are copied into memory by the append (the
        saved rows included); save and load again to map them.
        """
        if passages is not None and emb is None:
            if encoder is None:
                raise ValueError("encoder: needed to embed passages when emb is not given")
            name = getattr(encoder, "name", None)
            if self.encoder_name and name and name != self.encoder_name:
                raise ValueError(f"encoder: the index was built with {self.encoder_name!r}, "
                                 f"got {name!r}")
        if emb is not None:
            e = _float_matrix(emb, "emb")
            check_dim(e, "emb", 1, self.dim, "D (the index's embedding dim)")
        if ppd is not None:
            if self.ppd is None:
                raise ValueError("ppd: this index is dense-only (built without theme vectors)")
            p = _float_matrix(ppd, "ppd")
            check_dim(p, "ppd", 1, self.num_themes, "T (the index's number of themes)")
        elif self.ppd is not None and self.theme_model is None:
            raise ValueError("ppd: not given and the index has no theme model to compute it")
        part = ThemeIndex.build(
            emb, ppd, passages=passages, encoder=encoder, theme_model=self.theme_model
            if self.ppd is not None else False, pids=pids, titles=titles, texts=texts,
            normalize_ppd=self.normalize_ppd, dtype=self.emb.dtype,
            ppd_dtype=None if self.ppd is None else self.ppd.dtype, metric=self.metric,
            cache=cache)
        if part.dim != self.dim:
            raise ValueError(f"emb: dim 1 must equal D (the index's embedding dim) ({self.dim}), "
                             f"got {part.dim}")
        with self._write_lock:  # two adds from two threads get consecutive row ranges
            n0, n = len(self), len(part)
            new_pids = part.pids
            if pids is None and (passages is None
                                 or all(_passage_fields(p)[0] < 0 for p in passages)):
                new_pids = np.arange(n0, n0 + n, dtype=np.int64)
            elif passages is not None and pids is None:  # rows without a pid: their row number
                new_pids = np.asarray([f[0] if f[0] >= 0 else n0 + i for i, f in
                                       enumerate(map(_passage_fields, passages))], dtype=np.int64)
            self._publish_add(part, new_pids)
            with self._finite.lock:  # the part's rows were checked by build
                if self._finite.rows == n0:
                    self._finite.rows = n0 + n
        return self

    def _publish_add(self, part: "ThemeIndex", new_pids: np.ndarray) -> None:
        n0, n = len(self), len(part)
        emb, ppd, mmapped, files = None, None, self.mmapped, self._files
        on_disk = self._matrix_rows_on_disk
        if self._appends_in_place():
            # A mapped index: write the new rows after the committed ones (uncommitted until
            # save() writes the manifest; loads in between ignore them) and map the longer
            # files, so nothing is copied into memory. Only under the directory lock, only
            # while the directory is still at this handle's generation, and only where no
            # live other handle has uncommitted rows there (its append.claim): otherwise the
            # rows go to memory (the fallback below) and save() sorts it out.
            home = self._home[0]
            with _durable.DirLock(home):
                try:
                    current = _store.read_manifest(home)
                except ValueError:
                    current = None
                claim = _durable.AppendClaim(home)
                gen = _store.generation_of(current)
                if current == self._home[2] and not claim.blocks(self._token, gen):
                    claim.take(self._token, gen)
                    mapped = {}
                    for name, old, new in (("emb", self.emb, part.emb), ("ppd", self.ppd, part.ppd)):
                        if old is None:
                            continue
                        entry = current["arrays"][name]
                        path, offset = home / entry["file"], _store.row_offset(entry)
                        _store.append_rows(path, new, n0, offset)
                        mapped[name] = _store.map_rows(path, _dtype_name(old.dtype), n0 + n,
                                                       old.shape[1], offset)
                    emb, ppd, on_disk = mapped["emb"], mapped.get("ppd"), n0 + n
        if emb is None:
            emb = torch.cat([self.emb.to(part.emb.device), part.emb])
            ppd = None if self.ppd is None else torch.cat([self.ppd, part.ppd])
            mmapped, files = False, None  # the new rows are in memory only until saved and loaded
        pids = np.concatenate([np.asarray(self.pids, dtype=np.int64), new_pids])
        titles, texts = self.titles + part.titles, self.texts + part.texts  # new lists: views
        shards = self.shards + [(n0, n0 + n)]                            # keep the old ones
        with self._state_lock:
            self.emb, self.ppd, self.mmapped = emb, ppd, mmapped
            if files is None:
                self._files, self._readers = None, {}
            self._matrix_rows_on_disk = on_disk
            self.pids, self.titles, self.texts, self.shards = pids, titles, texts, shards

    def _appends_in_place(self) -> bool:
        if not (self.mmapped and self._files is not None and self._home is not None):
            return False
        return self._home[2].get("version") in (2, 3, 4) and self._matrix_rows_on_disk == len(self)

    # ------------------------------------------------------------------ search
    def _queries(self, q_emb, q_ppd):
        qe = as_tensor(q_emb, "q_emb")
        check_float(qe, "q_emb")
        check_rank(qe, "q_emb", 2, "[B, D]")
        check_dim(qe, "q_emb", 1, self.dim, "D (the index's embedding dim)")
        qp = None
        if q_ppd is not None:
            qp = as_tensor(q_ppd, "q_ppd")
            check_float(qp, "q_ppd")
            check_rank(qp, "q_ppd", 2, "[B, T]")
            if self.num_themes is None:
                raise ValueError("q_ppd: this index has no theme vectors (built dense-only)")
            check_dim(qp, "q_ppd", 1, self.num_themes, "T (the index's number of themes)")
            check_dim(qp, "q_ppd", 0, qe.shape[0], "B (q_emb.shape[0])")
        check_finite_together({"q_emb": qe, "q_ppd": qp})  # the search's one host read
        if qp is not None:
            qp = _normalise_rows(qp) if self.normalize_ppd else qp.float()
        return qe, qp

    def query_ppd(self, q_emb):
        """Query theme vectors from the index's theme model (``theme_model.query_ppd``)."""
        if self.theme_model is None:
            raise ValueError("q_ppd: not given and the index has no theme model to compute it")
        return self.theme_model.query_ppd(q_emb)

    def _search_args(self, q_ppd, q_emb, K, k, scope, theme_weight):
        """The one validation of a search (DESIGN.md section 8): everything below trusts it."""
        if self.num_themes is None:
            raise ValueError("search: this index has no theme vectors (built dense-only); "
                             "use dense_search")
        if q_ppd is None:
            q_ppd = self.query_ppd(q_emb)
        qe, qp = self._queries(q_emb, q_ppd)
        K = check_int_arg(K, "K", 1)
        k = check_int_arg(k, "k", 1)
        scope = check_choice(scope, "scope", SCOPES)
        if isinstance(theme_weight, bool) or not isinstance(theme_weight, numbers.Real) \
                or not 0.0 <= float(theme_weight) <= 1.0:
            raise ValueError(f"theme_weight: expected a number in [0, 1], got {theme_weight!r}")
        return qe, qp, K, k, scope, float(theme_weight)

    @follows_width_rule
    def search(self, q_ppd, q_emb, K: int, k: int, scope: str = "per_shard",
               theme_weight: float = 0.0, backend: str = "auto", chunk_rows: Optional[int] = None,
               max_memory=None):
        """Theme-scoped dense retrieval; safe from any number of threads (it searches a
        snapshot: a concurrent :meth:`add` is seen entirely or not at all).

        Args:
            q_ppd: [B, T] query theme vectors (None: ``self.query_ppd(q_emb)``); normalised
                like the corpus rows when the index normalises PPDs.
            q_emb: [B, D] query embeddings.
            K: scope size, per shard (``scope="per_shard"``, the paper's behaviour: each shard
                keeps its K nearest rows and the shards' top-k lists are merged) or over the
                whole corpus (``scope="global"``: exactly K rows, ties by lower row id).
                K >= rows means no scoping.
            k: results per query.
            theme_weight: w in [0, 1]; score = (1-w)*dense + w*theme (theme = -L2^2 or ip).
            backend: op backend ("auto" | "cpu" | "cuda" | "triton" | "torch"). A
                memory-mapped index is searched in place by the same kernels as one in
                memory (a mapped file is a buffer), with the same results.
            chunk_rows: search the corpus in blocks of this many rows (cpu kernels; same
                result as in one piece, see rasfast.index.stream).
            max_memory: a memory budget (bytes, or a string such as "1GB" / "512MiB") for a
                corpus larger than memory: the theme and dense rows are streamed from the
                index's files in blocks with large sequential reads and read-ahead (only the
                in-scope dense rows, or whole blocks when most are), so the extra memory of
                the search stays within the budget (plus interpreter overhead). The theme
                matrix is read once per call when the [B, rows] uint32 keys fit in half the
                budget, three times otherwise. Same results as in memory.

        Returns:
            (ids[B, k] int64 row ids, scores[B, k] float32) sorted by (score desc, id asc),
            padded with -1 / -inf; numpy or torch like ``q_emb``.
        """
        return self._view()._search(q_ppd, q_emb, K, k, scope, theme_weight, backend,
                                    chunk_rows, max_memory)

    def _search(self, q_ppd, q_emb, K, k, scope, theme_weight, backend, chunk_rows, max_memory):
        kind = kind_of(q_emb)
        qe, qp, K, k, scope, w = self._search_args(q_ppd, q_emb, K, k, scope, theme_weight)
        ranges = self.shards if scope == "per_shard" else [(0, len(self))]
        streamed = chunk_rows is not None or max_memory is not None
        if streamed:
            chunk_rows = None if chunk_rows is None else check_int_arg(chunk_rows, "chunk_rows", 1)
            max_memory = None if max_memory is None else parse_bytes(max_memory, "max_memory")
            if qe.device.type != "cpu" or backend not in ("auto", "cpu"):
                raise ValueError("chunk_rows/max_memory: blocked search runs the cpu kernels on "
                                 "CPU arrays (backend 'auto' or 'cpu')")
        B = qe.shape[0]
        if B == 0:
            ids = torch.empty((0, k), dtype=torch.int64)
            return to_kind(ids, kind), to_kind(torch.empty((0, k)), kind)
        dev = qe.device  # where the results go
        if streamed:
            parts = [self._search_blocks(qp, qe, a, b, K, k, w, chunk_rows, max_memory)
                     for a, b in ranges]
            ids, sc = parts[0][::-1] if len(parts) == 1 else _stream.merge_results(parts, k)
        else:
            # the search runs where the index is: host queries (the RAS retriever's numpy
            # arrays) go to a GPU index's device, non-blocking, and the results come back
            from .. import dispatch
            from ..ops._deferred import to_device
            idev = self.emb.device
            be = dispatch.resolve(backend, idev, "theme_scoped_search")
            self._check_corpus_once(be)
            if self._replay is not None and self._replay.serves(idev, qe.device, be):
                ids, sc = self._replay.search(self, qp, qe, ranges, K, k, w, be)
            else:
                qe, qp = to_device(qe, idev), to_device(qp, idev)
                ids, sc = self._search_ranges(qp, qe, ranges, K, k, w, be)
        if ids.device != dev:
            ids, sc = ids.to(dev), sc.to(dev)
        return to_kind(ids, kind), to_kind(sc, kind)

    def _search_ranges(self, qp, qe, ranges, K, k, w, be):
        """(ids, scores) of validated queries on the compiled kernels, one call per range
        (shard) and a merge, all on the index's device: no host read (a CUDA graph captures
        it as it is, rasfast.index.theme_replay)."""
        from ..ops.theme import fused_search_validated
        parts = []
        for a, b in ranges:
            ids, sc = fused_search_validated(qp, qe, self.ppd[a:b], self.emb[a:b],
                                             K, k, w, self.metric, be)
            if a:
                ids = torch.where(ids >= 0, ids + a, ids)
            parts.append((sc, ids))  # merged where they are: no copy to the host
        if len(parts) == 1:
            return parts[0][1], parts[0][0]
        return _stream.merge_results(parts, k)

    def enable_cuda_graphs(self, enabled: bool = True, max_graphs: int = 8, graphs=None) -> "ThemeIndex":
        """Searches of host queries on a CUDA index replayed from CUDA graphs, one per
        (queries, K, k, scope, theme_weight, backend) and state of the matrices
        (:mod:`rasfast.index.theme_replay`): a per-question call then costs the host its
        checks, two query copies and one graph launch instead of every kernel's launch.
        Streamed searches, device queries and the torch backend keep the eager path.
        ``graphs``: the capture implementation (:class:`rasfast.ops.replay.EagerGraphs` runs
        the same path without a GPU). Returns self."""
        from .theme_replay import SearchReplay
        self._replay = SearchReplay(max_graphs, graphs) if enabled else None
        return self

    def _block_rows(self, B: int, n: int, chunk_rows: Optional[int], max_memory: Optional[int],
                    dense_only: bool = False):
        """(rows per block, keep keys) for a blocked search of n rows within the budget."""
        keys = _stream.keys_bytes(B, n)
        hist = 0 if dense_only else 17 * B * _stream.DIGITS  # two [B, 65536] int64 histograms
        keep = max_memory is None or dense_only or keys <= (max_memory - hist) // 2
        if chunk_rows is not None:
            return chunk_rows, keep
        if max_memory is None:
            return n, keep
        # two read buffers of each matrix (one filled while the other is searched), keys
        row = 2 * self.emb.element_size() * self.dim + 3 * B
        if not dense_only:
            row += 2 * self.ppd.element_size() * self.num_themes + (0 if keep else 4 * B)
        fixed = hist + (keys if keep and not dense_only else 0)
        rows = (max_memory - fixed) // row
        if rows < 64:
            raise ValueError(f"max_memory: {max_memory} bytes is too small for B={B} queries "
                             f"(needs at least {fixed + 64 * row})")
        return int(min(rows, n)), keep

    @contextlib.contextmanager
    def _blocks(self, a: int, b: int, rows: int, from_files: bool, dense_only: bool = False):
        """The blocks of rows [a, b) for one search: views of the (mapped) tensors, or reads
        of the saved files through read sessions of their own (closed when the search ends)."""
        if not (from_files and self._files is not None):
            yield _stream.tensor_blocks(None if dense_only else self.ppd, self.emb, a, b, rows)
            return
        sessions = {}
        try:
            for name in ("emb",) if dense_only else ("emb", "ppd"):
                sessions[name] = self._reader(name).session()
            yield _stream.file_blocks(sessions.get("ppd"), sessions["emb"], a, b, rows)
        finally:
            for sess in sessions.values():
                sess.close()

    def _reader(self, name: str) -> "_stream.FileRows":
        """The open FileRows of array ``name``, kept for the next streamed search (shared by
        this handle's snapshots; opened once under the state lock)."""
        readers = self._readers
        r = readers.get(name)
        if r is None:
            with self._state_lock:
                r = readers.get(name)
                if r is None:
                    r = readers[name] = _stream.FileRows(*self._files[name])
        return r

    def _search_blocks(self, qp, qe, a, b, K, k, w, chunk_rows, max_memory):
        rows, keep = self._block_rows(qe.shape[0], b - a, chunk_rows, max_memory)
        with self._blocks(a, b, rows, max_memory is not None) as blocks:
            ids, sc = _stream.search_blocks(qp, qe, blocks, b - a, len(blocks), K, k, w,
                                            self.metric == "ip", keep_keys=keep)
        return sc, ids

    @follows_width_rule
    def dense_search(self, q_emb, k: int, backend: str = "auto", chunk_rows: Optional[int] = None,
                     max_memory=None):
        """Unscoped top-k by inner product over the whole corpus ("dense flat" retrieval),
        ties by lower row id. On CPU arrays the fused cpu kernel's scoring pass runs over
        the (in-memory or mapped) matrix with everything in scope -- in blocks with
        ``chunk_rows``, streamed from the index's files within ``max_memory`` (see
        :meth:`search`); other backends run the fused op with no scoping.
        Returns (ids[B, k], scores[B, k]) like :meth:`search`. Thread-safe like :meth:`search`.
        """
        return self._view()._dense_search(q_emb, k, backend, chunk_rows, max_memory)

    def _dense_search(self, q_emb, k, backend, chunk_rows, max_memory):
        kind = kind_of(q_emb)
        qe, _ = self._queries(q_emb, None)
        k = check_int_arg(k, "k", 1)
        chunk_rows = None if chunk_rows is None else check_int_arg(chunk_rows, "chunk_rows", 1)
        max_memory = None if max_memory is None else parse_bytes(max_memory, "max_memory")
        B = qe.shape[0]
        if B == 0:
            return (to_kind(torch.empty((0, k), dtype=torch.int64), kind),
                    to_kind(torch.empty((0, k)), kind))
        from .. import dispatch
        from ..ops._deferred import to_device
        qdev = qe.device  # where the results go; the search runs where the index is (as search)
        be = dispatch.resolve(backend, self.emb.device, "theme_scoped_search")
        replayed = (chunk_rows is None and max_memory is None and self._replay is not None
                    and self._replay.serves(self.emb.device, qdev, be))
        if replayed:
            self._check_corpus_once(be)
            ids, sc = self._replay.dense(self, qe, k, be)
        elif be == "cpu":
            qe = to_device(qe, self.emb.device)
            rows, _ = self._block_rows(B, len(self), chunk_rows, max_memory, dense_only=True)
            with self._blocks(0, len(self), rows, max_memory is not None,
                              dense_only=True) as blocks:
                ids, sc = _stream.search_blocks(None, qe, blocks, len(self), len(blocks),
                                                len(self), k, 0.0, False)
        else:
            if chunk_rows is not None or max_memory is not None:
                raise ValueError("chunk_rows/max_memory: blocked search runs the cpu kernels")
            self._check_corpus_once(be)
            ids, sc = self._dense_device(to_device(qe, self.emb.device), k, be)
        return to_kind(ids.to(qdev), kind), to_kind(sc.to(qdev), kind)

    def _dense_device(self, qe, k, be):
        """The flat search of validated queries on the compiled kernels: the fused op with
        everything in scope (no host read; a CUDA graph captures it, theme_replay)."""
        from ..ops.theme import fused_search_validated
        n = len(self)
        zq = torch.zeros((qe.shape[0], 1), dtype=torch.float32, device=qe.device)
        zc = torch.zeros((n, 1), dtype=torch.float32, device=self.emb.device)
        return fused_search_validated(zq, qe, zc, self.emb, n, k, 0.0, "l2", be)

    # ------------------------------------------------------------------ results -> passages
    def passages(self, ids, scores=None) -> List[List[Any]]:
        """Maps search results to lists of rasfast.types.RetrievedPassage (pid, title,
        text, score) per query, dropping -1 padding."""
        from ..types import RetrievedPassage
        if isinstance(self, ThemeIndex):
            self = self._view()  # noqa: PLW0642 - one consistent snapshot of the lists
        ids = np.asarray(to_kind(as_tensor(ids, "ids").cpu(), "numpy"))
        sc = None if scores is None else np.asarray(to_kind(as_tensor(scores, "scores").cpu(), "numpy"))
        if ids.ndim != 2:
            raise ValueError(f"ids: expected a 2-d array [B, k], got shape {ids.shape}")
        if ids.size and (ids.max() >= len(self) or ids.min() < -1):
            raise ValueError(f"ids: row ids must be in [0, {len(self)}) or -1")
        out = []
        for b, row in enumerate(ids.tolist()):
            out.append([RetrievedPassage(int(self.pids[r]), self.titles[r], self.texts[r],
                                         0.0 if sc is None else float(sc[b, j]))
                        for j, r in enumerate(row) if r >= 0])
        return out


__all__ = ["ThemeIndex", "IndexConflictError"]
