"""On-disk layout of a :class:`rasfast.index.ThemeIndex` (DESIGN.md sections 7 and 9).

Format version 4 (written by this rasfast)::

    manifest.json          the committed generation: format, version, generation, row count,
                           dims, dtypes, file names, shard ranges, byte sizes, normalisation,
                           metric, encoder and theme-model names
    manifest.<g>.json      the manifest of generation g, kept (a KnowledgeIndex names the
                           generation it belongs to)
    emb.<g>.bin            [N, D] dense embeddings, row-major little-endian storage dtype
                           (bfloat16 as its uint16 bits) after a 64-byte header naming the
                           array, dtype and row shape (rasfast.index.array_header; the
                           manifest entry's "offset"); <g> = the generation that created it
    ppd.<g>.bin            [N, T] theme vectors (same header)
    pids.<g>.bin           [N] int64 passage ids (same header)
    passages.<g>.jsonl     one {"pid", "title", "text"} per row, records end at b"\n"
    passages.<g>.ends      int64 end offset of every record: titles and texts are decoded
                           lazily, on first access (rasfast.index.passages)
    theme_model.<g>/       the theme model, when it can be saved (rasfast.theme)
    .lock, append.claim    the writers' lock and the record of uncommitted in-place rows

The write protocol (rasfast.index.durable): a save holds the directory lock; a full save writes
every array to new files named after a new generation, an incremental save (the shards
``ThemeIndex.add`` appended) writes only the new rows *after* the committed bytes of the
current files; data is fsync'd, then ``manifest.<g>.json`` and ``manifest.json`` are
replaced atomically. Bytes a committed manifest covers are never rewritten and no file is
truncated, so a reader that mapped the index keeps searching it while writers commit, and a
crash at any instant leaves exactly the old or the new generation. Files of older
generations stay until :func:`rasfast.index.ThemeIndex.compact` removes them.

Every array is one contiguous buffer, so a loaded index hands the whole matrix (or any
shard's row range) to the compiled kernels without a copy. A load validates the manifest
against its version's schema (rasfast.index.manifest_schemas) and, in version 4, each array
file's header against its manifest entry, the theme model's dim and themes against the
manifest's: a disagreement is a ValueError naming the file and the field. Versions 1
(``*.npy``), 2 (``emb.bin`` ...; raw arrays without generations) and 3 (raw arrays without
a header) still load; an incremental save into a version 2 or 3 directory appends to its
headerless files (and keeps its manifest at version 3), any other save writes version 4.
"""
from __future__ import annotations

import json
import pathlib
import re
import shutil
import warnings
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from . import array_header as _header
from . import durable as _durable
from . import manifest_schemas as _schemas
from .passages import parse_record
from .._schema import validate

FORMAT = "rasfast.ThemeIndex"
VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
MANIFEST = "manifest.json"
PASSAGES = "passages.jsonl"
THEME_DIR = "theme_model"

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: numpy dtype each storage dtype is written as (bfloat16 has none: its bits as uint16)
FILE_DTYPES = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2"),
               "bfloat16": np.dtype("<u2"), "int64": np.dtype("<i8")}
_V1_FILES = ("emb.npy", "ppd.npy", "pids.npy")


def dtype_name(dtype) -> str:
    """'float32' | 'float16' | 'bfloat16' from a torch/numpy dtype or a name."""
    if isinstance(dtype, torch.dtype):
        dtype = str(dtype).replace("torch.", "")
    elif isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        dtype = np.dtype(dtype).name
    if dtype not in DTYPES:
        raise ValueError(f"dtype: expected one of {', '.join(DTYPES)}, got {dtype!r}")
    return dtype


def raw_rows(t: torch.Tensor) -> np.ndarray:
    """numpy view (no copy for contiguous CPU tensors) of a matrix in its file dtype."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def as_torch(arr: np.ndarray, dt: str) -> torch.Tensor:
    """Zero-copy torch view of a (possibly memory-mapped, read-only) array in file dtype."""
    with warnings.catch_warnings():  # read-only memmaps wrap zero-copy with a warning
        warnings.simplefilter("ignore", UserWarning)
        if dt == "bfloat16":
            return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(arr)


def check_text(value: str, what: str) -> str:
    """Passage text must survive the round trip through UTF-8: every string does except one
    holding a lone surrogate (U+D800-U+DFFF, e.g. from a badly decoded file), which UTF-8
    cannot encode; it is refused here, when the passage enters the index, not at save."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what}: contains {value[e.start:e.end]!r} (a lone surrogate) at "
                         f"character {e.start}, which cannot be stored as UTF-8; decode the "
                         f"source text correctly or replace it") from None
    return value


def _passage_line(pid: int, title: str, text: str) -> bytes:
    # ensure_ascii=False keeps U+2028/U+2029/U+0085 raw: they are not b"\n", and the reader
    # splits on b"\n" only (never str.splitlines, which would break such a record in two)
    rec = {"pid": int(pid), "title": title, "text": text}
    return (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")


def generation_of(m: Optional[Dict[str, Any]]) -> int:
    """The generation a manifest commits (0: none, or a version 1/2 index)."""
    return 0 if m is None else int(m.get("generation", 0))


def manifest_name(generation: int) -> str:
    return f"manifest.{generation}.json"


def next_generation(d: pathlib.Path) -> int:
    """A generation number never committed in ``d``: above the current manifest's and every
    numbered manifest's (a KnowledgeIndex may reference a numbered one that is not current)."""
    g = 0
    try:
        g = generation_of(read_manifest(d))
    except ValueError:
        pass
    for p in d.glob("manifest.*.json"):
        parts = p.name.split(".")
        if len(parts) == 3 and parts[1].isdigit():
            g = max(g, int(parts[1]))
    return g + 1


def _matrix_chunks(t: torch.Tensor):
    return [memoryview(raw_rows(t).reshape(-1)).cast("B")] if t.numel() else []


def row_offset(entry: Dict[str, Any]) -> int:
    """Byte offset of row 0 in an array's file: its header's size (format 4), else 0."""
    return int(entry.get("offset", 0))


def map_rows(path: pathlib.Path, dt: str, rows: int, width: int, offset: int = 0) -> torch.Tensor:
    """Rows [0, rows) of a matrix file whose row 0 is at byte ``offset``, memory-mapped, as
    a tensor of storage dtype ``dt``."""
    arr = np.memmap(path, dtype=FILE_DTYPES[dt], mode="r", offset=offset, shape=(rows, width))
    return as_torch(arr, dt)


def append_rows(path: pathlib.Path, rows: torch.Tensor, after: int, offset: int = 0) -> None:
    """Writes ``rows`` after the first ``after`` rows of a matrix file whose row 0 is at
    byte ``offset`` (never truncating)."""
    row_bytes = int(rows.shape[1]) * FILE_DTYPES[dtype_name(rows.dtype)].itemsize
    _durable.pwrite_at(path, offset + after * row_bytes, _matrix_chunks(rows))


def write(d: pathlib.Path, index, generation: int, previous: Optional[Dict[str, Any]] = None,
          start_row: int = 0, matrix_rows_on_disk: int = 0, publish: bool = True) -> Dict[str, Any]:
    """Writes ``index`` into ``d`` as generation ``generation`` and commits it; the caller
    holds ``d``'s DirLock (see rasfast.index.durable for the protocol).

    ``previous`` is the committed manifest of ``d`` when rows [0, start_row) are already
    there: only rows [start_row, N) are written, after the committed bytes of the same files
    (``matrix_rows_on_disk`` >= start_row matrix rows were appended there by an in-place
    ``ThemeIndex.add`` of this handle and are kept). Without ``previous`` every array goes to
    a new file named after the generation, so nothing another reader or index may have
    mapped is touched. The commit writes ``manifest.<generation>.json`` (kept, so a
    KnowledgeIndex can name the generation it belongs to) and then, with ``publish``,
    replaces ``manifest.json``. Returns the new manifest.
    """
    d.mkdir(parents=True, exist_ok=True)
    n, g = len(index), int(generation)
    arrays = {"emb": index.emb}
    if index.ppd is not None:
        arrays["ppd"] = index.ppd
    entries = {}
    for name, t in arrays.items():
        dt = dtype_name(t.dtype)
        shape = [n, int(t.shape[1])]
        if previous is not None:   # the same file: its header (or none, format 2/3) stays
            entry = dict(previous["arrays"][name], shape=shape)
            first = max(start_row, matrix_rows_on_disk)
            append_rows(d / entry["file"], t[first:n], first, row_offset(entry))
        else:
            entry = {"file": f"{name}.{g}.bin", "dtype": dt, "shape": shape, "offset": _header.SIZE}
            _durable.write_new_file(d / entry["file"],
                                    [_header.pack(name, dt, shape)] + _matrix_chunks(t[:n]))
        entries[name] = entry
    pids = np.ascontiguousarray(np.asarray(index.pids[start_row:n], dtype="<i8"))
    ends: List[int] = []  # end offset of every record written (the lazy loader's index)

    def lines(base: int):
        pos = base
        for p, t, x in zip(index.pids[start_row:n].tolist(), index.titles[start_row:n],
                           index.texts[start_row:n]):
            line = _passage_line(p, t, x)
            pos += len(line)
            ends.append(pos)
            yield line

    if previous is not None:
        pids_entry = dict(previous["arrays"]["pids"] if "pids" in previous["arrays"]
                          else previous["pids"], shape=[n])
        _durable.pwrite_at(d / pids_entry["file"], row_offset(pids_entry) + start_row * 8,
                           [pids.tobytes()])
        pfile, keep = previous["passages"]["file"], int(previous["passages"]["bytes"])
        pbytes = _durable.pwrite_at(d / pfile, keep, lines(keep))
        ends_file = previous["passages"].get("ends")
        new_ends = np.asarray(ends, dtype="<i8")
        if ends_file is not None:
            _durable.pwrite_at(d / ends_file, start_row * 8, [new_ends.tobytes()])
        else:  # a directory written before the ends file existed: index its records once
            ends_file = f"passages.{g}.ends"
            old = _scan_ends(d / pfile, keep)
            _durable.write_new_file(d / ends_file, [old.tobytes(), new_ends.tobytes()])
        theme_dir = previous["theme_model"].get("dir")
    else:
        pids_entry = {"file": f"pids.{g}.bin", "dtype": "int64", "shape": [n], "offset": _header.SIZE}
        pfile, ends_file = f"passages.{g}.jsonl", f"passages.{g}.ends"
        _durable.write_new_file(d / pids_entry["file"],
                                [_header.pack("pids", "int64", [n]), pids.tobytes()])
        pbytes = _durable.write_new_file(d / pfile, lines(0))
        _durable.write_new_file(d / ends_file, [np.asarray(ends, dtype="<i8").tobytes()])
        theme_dir = None
    entries["pids"] = pids_entry
    if theme_dir is None and index.theme_model is not None and hasattr(index.theme_model, "save"):
        theme_dir = f"{THEME_DIR}.{g}"
        if (d / theme_dir).exists():  # the leftover of an interrupted save of this generation
            shutil.rmtree(d / theme_dir)
        index.theme_model.save(d / theme_dir)
    _durable.fsync_dir(d)
    # version 4 says every array file has a header; appends to a format 2/3 directory's
    # headerless files keep it at version 3
    version = VERSION if all("offset" in e for e in entries.values()) else 3
    manifest = {
        "format": FORMAT, "version": version, "generation": g, "num_rows": n, "dim": index.dim,
        "num_themes": index.num_themes, "arrays": entries,
        "passages": {"file": pfile, "count": n, "bytes": pbytes, "ends": ends_file},
        "shards": [list(r) for r in index.shards], "normalize_ppd": index.normalize_ppd,
        "metric": index.metric, "encoder": index.encoder_name,
        "theme_model": {"name": index.theme_model_name, "dir": theme_dir},
    }
    _durable.atomic_write_json(d / manifest_name(g), manifest, indent=2)
    if publish:
        _durable.atomic_write_json(d / MANIFEST, manifest, indent=2)
    return manifest


_STORE_FILE = re.compile(r"^(?:(?:emb|ppd|pids)(?:\.\d+)?\.(?:bin|npy)|passages(?:\.\d+)?\.(?:jsonl|ends)"
                         r"|theme_model(?:\.\d+)?|manifest\.\d+\.json|\..+\.tmp)$")


def is_store_file(name: str) -> bool:
    """Whether ``name`` is a ThemeIndex file or folder (of any generation or version)."""
    return bool(_STORE_FILE.match(name))


def _scan_ends(path: pathlib.Path, nbytes: int) -> np.ndarray:
    """End offsets of the records in the first ``nbytes`` of a passages file."""
    if nbytes == 0:
        return np.zeros(0, "<i8")
    data = np.memmap(path, dtype=np.uint8, mode="r", shape=(nbytes,))
    return (np.flatnonzero(data == 10) + 1).astype("<i8")


def passage_columns(d: pathlib.Path, m: Dict[str, Any]):
    """(titles, texts) of an index: lazily decoded columns when the manifest lists an ends
    file (format 3), else every record parsed now (older directories)."""
    p = m.get("passages") or {}
    if p.get("ends"):
        from .passages import columns
        return columns(d / p["file"], d / p["ends"], int(m["num_rows"]), int(p["bytes"]))
    return read_passages(d, m)


def referenced_files(m: Dict[str, Any]) -> List[str]:
    """Names (relative to the directory) of the files and folders manifest ``m`` uses."""
    out = [e["file"] for e in m.get("arrays", {}).values()]
    if m.get("version") == 1 and m.get("pids"):
        out.append(m["pids"]["file"])
    out.append((m.get("passages") or {}).get("file", PASSAGES))
    if (m.get("passages") or {}).get("ends"):
        out.append(m["passages"]["ends"])
    tdir = (m.get("theme_model") or {}).get("dir")
    if tdir:
        out.append(tdir)
    return out


# ----------------------------------------------------------------------------- reading
def read_manifest(d: pathlib.Path, generation: Optional[int] = None) -> Dict[str, Any]:
    """The committed manifest of ``d`` (``manifest.json``), or the one of an older
    ``generation`` (``manifest.<generation>.json``, kept for a KnowledgeIndex)."""
    mpath = d / (MANIFEST if generation is None else manifest_name(generation))
    if not mpath.is_file():
        raise ValueError(f"{mpath}: missing; {d} is not a saved ThemeIndex")
    try:
        m = json.loads(mpath.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{mpath}: not valid JSON ({e})") from e
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        got = ("no 'format' key" if "format" not in m else f"format {m['format']!r}") \
            if isinstance(m, dict) else f"a JSON {type(m).__name__}"
        raise ValueError(f"{mpath}: not a {FORMAT} manifest ({got})")
    if m.get("version") not in READABLE_VERSIONS or isinstance(m.get("version"), bool):
        raise ValueError(f"{mpath}: format version {m.get('version')!r}, this rasfast reads "
                         f"versions {', '.join(map(str, READABLE_VERSIONS))}")
    validate(m, _schemas.theme_index(int(m["version"])), mpath)
    return m


def array_entry(d: pathlib.Path, m: Dict[str, Any], name: str) -> Optional[Dict[str, Any]]:
    """The manifest entry of array ``name`` ('emb', 'ppd', 'pids'), shape-checked against
    the counts, with ``"array": name`` added (a copy), or None when the index has no such
    array ('ppd' of a dense-only index)."""
    mpath = d / MANIFEST
    if name == "pids":
        entry = m.get("pids") if m["version"] == 1 else m["arrays"].get("pids")
    else:
        entry = m["arrays"].get(name)
    if entry is None:
        if name == "ppd":
            return None
        raise ValueError(f"{mpath}: no {name!r} array listed")
    n = int(m["num_rows"])
    want = {"emb": [n, int(m["dim"])], "ppd": [n, m.get("num_themes")], "pids": [n]}[name]
    what = {"emb": "num_rows x dim", "ppd": "num_rows x num_themes", "pids": "num_rows"}[name]
    dt = entry.get("dtype")
    if dt not in FILE_DTYPES or (name == "pids") != (dt == "int64"):
        raise ValueError(f"{mpath}: unknown dtype {dt!r} for {entry.get('file')}")
    if int(m["version"]) >= 4 and row_offset(entry) != _header.SIZE:
        raise ValueError(f"{mpath}: {entry.get('file')} offset {entry.get('offset')!r}, format 4 "
                         f"array files start their rows at byte {_header.SIZE}")
    if list(entry.get("shape", [])) != want:
        raise ValueError(f"{mpath}: {entry.get('file')} shape {entry.get('shape')} does not match "
                         f"{what} {want}")
    return dict(entry, array=name)


def read_rows(d: pathlib.Path, m: Dict[str, Any], entry: Dict[str, Any], start: int, stop: int,
              mmap: bool) -> np.ndarray:
    """Rows [start, stop) of an array (memory-mapped or read), in its file dtype. Only those
    rows' bytes are mapped/read, so a rank of a distributed index maps only its shards."""
    path = d / entry["file"]
    dt = entry["dtype"]
    fdt = FILE_DTYPES[dt]
    shape = list(entry["shape"])
    if not path.is_file():
        raise ValueError(f"{path}: missing (listed in {MANIFEST})")
    if m["version"] == 1:  # .npy: map/read the whole file and slice (checks its header)
        try:
            arr = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except Exception as e:  # truncated header/data, not an .npy file
            raise ValueError(f"{path}: unreadable or truncated ({e})") from e
        if arr.dtype != fdt or list(arr.shape) != shape:
            raise ValueError(f"{path}: holds {arr.dtype} {list(arr.shape)}, the manifest says "
                             f"{dt} (stored as {fdt}) {shape}")
        return arr[start:stop]
    offset = row_offset(entry)
    if int(m["version"]) >= 4:   # the file says what it holds
        _header.check(path, entry["array"], entry, d / MANIFEST)
    width = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    row_bytes = width * fdt.itemsize
    size = path.stat().st_size
    if size < offset + shape[0] * row_bytes:
        raise ValueError(f"{path}: truncated ({size} bytes, the manifest's {shape} {dt} needs "
                         f"{offset + shape[0] * row_bytes})")
    rows = stop - start
    out_shape = (rows,) + tuple(shape[1:])
    if rows == 0:
        return np.empty(out_shape, fdt)
    if mmap:
        return np.memmap(path, dtype=fdt, mode="r", offset=offset + start * row_bytes,
                         shape=out_shape)
    with open(path, "rb") as f:
        f.seek(offset + start * row_bytes)
        return np.fromfile(f, dtype=fdt, count=rows * width).reshape(out_shape)


def read_passages(d: pathlib.Path, m: Dict[str, Any]) -> Tuple[List[str], List[str]]:
    p = m.get("passages") or {}
    ppath = d / p.get("file", PASSAGES)
    if not ppath.is_file():
        raise ValueError(f"{ppath}: missing (listed in {MANIFEST})")
    with open(ppath, "rb") as f:
        data = f.read(int(p["bytes"])) if "bytes" in p else f.read()
    titles, texts = [], []
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for lineno, line in enumerate(lines, 1):  # records end at b"\n" only (see _passage_line)
        rec = parse_record(line, ppath, lineno)
        titles.append(rec["title"])
        texts.append(rec["text"])
    n = int(m["num_rows"])
    if len(titles) != n:
        raise ValueError(f"{ppath}: {len(titles)} passages, the manifest says {n}")
    return titles, texts


def file_rows_args(d: pathlib.Path, m: Dict[str, Any], entry: Dict[str, Any]):
    """(path, byte offset of row 0, row width, file dtype, kernel dtype code) of a matrix,
    for reading its rows with plain sequential reads (rasfast.index.stream.FileRows)."""
    from .._arrays import DTYPE_CODES
    path = d / entry["file"]
    offset = row_offset(entry)
    if m["version"] == 1:
        offset = int(np.load(path, mmap_mode="r", allow_pickle=False).offset)
    dt = entry["dtype"]
    return str(path), offset, int(entry["shape"][1]), FILE_DTYPES[dt], DTYPE_CODES[DTYPES[dt]]
