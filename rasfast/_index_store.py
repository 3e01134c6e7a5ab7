"""On-disk layout of a :class:`rasfast.index.ThemeIndex` (DESIGN.md section 7).

Format version 2 (written by this rasfast) is appendable::

    manifest.json    format, version, row count, dims, dtypes, shard ranges, byte sizes,
                     normalisation, metric, encoder and theme-model names
    ppd.bin          [N, T] theme vectors, row-major, little-endian storage dtype
    emb.bin          [N, D] dense embeddings     (bfloat16 is stored as its uint16 bits)
    pids.bin         [N] int64 passage ids
    passages.jsonl   one {"pid", "title", "text"} per row
    theme_model/     the theme model, when it can be saved (rasfast.theme)

The arrays are raw row-major files without a header, so new rows (a new shard from
``ThemeIndex.add``) are appended in place: an incremental save writes only the new rows and
passages, then replaces the manifest (write to a temporary file + rename, last). The manifest
records how many rows and passage bytes belong to the index; bytes past them (an append that
was interrupted before its manifest was written) are ignored on load and cut off by the next
save, so a crash never leaves a loadable-but-wrong index. Every file maps as one contiguous
buffer, so a loaded index hands the whole matrix (or any shard's row range) to the compiled
kernels without a copy.

Format version 1 (``ppd.npy``, ``emb.npy``, ``pids.npy``) still loads; saving such an index
writes version 2.
"""
from __future__ import annotations

import json
import os
import pathlib
import warnings
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

FORMAT = "rasfast.ThemeIndex"
VERSION = 2
READABLE_VERSIONS = (1, 2)
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


def _passage_line(pid: int, title: str, text: str) -> bytes:
    rec = {"pid": int(pid), "title": title, "text": text}
    return (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")


def _write_manifest(d: pathlib.Path, manifest: Dict[str, Any]) -> None:
    tmp = d / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2))
    os.replace(tmp, d / MANIFEST)


def _append_file(path: pathlib.Path, keep_bytes: int, chunks) -> int:
    """Cuts ``path`` to ``keep_bytes`` (drops an interrupted append), appends ``chunks``
    (bytes-like), fsyncs; returns the new size."""
    with open(path, "r+b" if path.exists() else "w+b") as f:
        f.truncate(keep_bytes)
        f.seek(keep_bytes)
        for c in chunks:
            f.write(c)
        f.flush()
        os.fsync(f.fileno())
        return f.tell()


def write(d: pathlib.Path, index, start_row: int, previous: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """Writes rows [start_row, N) of ``index`` into ``d`` and then its manifest.

    ``previous`` is the manifest already in ``d`` describing rows [0, start_row) (None for a
    full write, start_row == 0). Returns the new manifest.
    """
    d.mkdir(parents=True, exist_ok=True)
    n = len(index)
    if previous is None:
        (d / MANIFEST).unlink(missing_ok=True)  # no loadable index while files are rewritten
        for name in _V1_FILES:
            (d / name).unlink(missing_ok=True)
    arrays = {"emb": index.emb}
    if index.ppd is not None:
        arrays["ppd"] = index.ppd
    entries = {}
    for name, t in arrays.items():
        dt = dtype_name(t.dtype)
        width = int(t.shape[1])
        row_bytes = width * FILE_DTYPES[dt].itemsize
        new = raw_rows(t[start_row:n]) if n > start_row else np.empty((0, width), FILE_DTYPES[dt])
        _append_file(d / f"{name}.bin", start_row * row_bytes, [memoryview(new).cast("B")])
        entries[name] = {"file": f"{name}.bin", "dtype": dt, "shape": [n, width]}
    pids = np.ascontiguousarray(np.asarray(index.pids[start_row:n], dtype="<i8"))
    _append_file(d / "pids.bin", start_row * 8, [memoryview(pids).cast("B")])
    entries["pids"] = {"file": "pids.bin", "dtype": "int64", "shape": [n]}
    keep = int(previous["passages"]["bytes"]) if previous is not None else 0
    lines = (_passage_line(p, t, x) for p, t, x in zip(index.pids[start_row:n].tolist(),
                                                       index.titles[start_row:n],
                                                       index.texts[start_row:n]))
    pbytes = _append_file(d / PASSAGES, keep, lines)
    theme_dir = previous["theme_model"].get("dir") if previous is not None else None
    if theme_dir is None and index.theme_model is not None and hasattr(index.theme_model, "save"):
        index.theme_model.save(d / THEME_DIR)
        theme_dir = THEME_DIR
    manifest = {
        "format": FORMAT, "version": VERSION, "num_rows": n, "dim": index.dim,
        "num_themes": index.num_themes, "arrays": entries,
        "passages": {"file": PASSAGES, "count": n, "bytes": pbytes},
        "shards": [list(r) for r in index.shards], "normalize_ppd": index.normalize_ppd,
        "metric": index.metric, "encoder": index.encoder_name,
        "theme_model": {"name": index.theme_model_name, "dir": theme_dir},
    }
    _write_manifest(d, manifest)
    return manifest


# ----------------------------------------------------------------------------- reading
def read_manifest(d: pathlib.Path) -> Dict[str, Any]:
    mpath = d / MANIFEST
    if not mpath.is_file():
        raise ValueError(f"{mpath}: missing; {d} is not a saved ThemeIndex")
    try:
        m = json.loads(mpath.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{mpath}: not valid JSON ({e})") from e
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise ValueError(f"{mpath}: not a {FORMAT} manifest")
    if m.get("version") not in READABLE_VERSIONS:
        raise ValueError(f"{mpath}: format version {m.get('version')!r}, this rasfast reads "
                         f"versions {', '.join(map(str, READABLE_VERSIONS))}")
    for key in ("num_rows", "dim", "arrays", "shards"):
        if key not in m:
            raise ValueError(f"{mpath}: malformed manifest (no {key!r})")
    return m


def array_entry(d: pathlib.Path, m: Dict[str, Any], name: str) -> Optional[Dict[str, Any]]:
    """The manifest entry of array ``name`` ('emb', 'ppd', 'pids'), shape-checked against
    the counts, or None when the index has no such array ('ppd' of a dense-only index)."""
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
    if list(entry.get("shape", [])) != want:
        raise ValueError(f"{mpath}: {entry.get('file')} shape {entry.get('shape')} does not match "
                         f"{what} {want}")
    return entry


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
    width = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    row_bytes = width * fdt.itemsize
    size = path.stat().st_size
    if size < shape[0] * row_bytes:
        raise ValueError(f"{path}: truncated ({size} bytes, the manifest's {shape} {dt} needs "
                         f"{shape[0] * row_bytes})")
    rows = stop - start
    out_shape = (rows,) + tuple(shape[1:])
    if rows == 0:
        return np.empty(out_shape, fdt)
    if mmap:
        return np.memmap(path, dtype=fdt, mode="r", offset=start * row_bytes, shape=out_shape)
    with open(path, "rb") as f:
        f.seek(start * row_bytes)
        return np.fromfile(f, dtype=fdt, count=rows * width).reshape(out_shape)


def read_passages(d: pathlib.Path, m: Dict[str, Any]) -> Tuple[List[str], List[str]]:
    p = m.get("passages") or {}
    ppath = d / p.get("file", PASSAGES)
    if not ppath.is_file():
        raise ValueError(f"{ppath}: missing (listed in {MANIFEST})")
    with open(ppath, "rb") as f:
        data = f.read(int(p["bytes"])) if "bytes" in p else f.read()
    titles, texts = [], []
    for lineno, line in enumerate(data.decode("utf-8").splitlines(), 1):
        try:
            rec = json.loads(line)
            titles.append(rec["title"])
            texts.append(rec["text"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{ppath}: line {lineno} is not a passage record ({e})") from e
    n = int(m["num_rows"])
    if len(titles) != n:
        raise ValueError(f"{ppath}: {len(titles)} passages, the manifest says {n}")
    return titles, texts


def file_rows_args(d: pathlib.Path, m: Dict[str, Any], entry: Dict[str, Any]):
    """(path, byte offset of row 0, row width, file dtype, kernel dtype code) of a matrix,
    for reading its rows with plain sequential reads (rasfast._index_stream.FileRows)."""
    from ._arrays import DTYPE_CODES
    path = d / entry["file"]
    offset = 0
    if m["version"] == 1:
        offset = int(np.load(path, mmap_mode="r", allow_pickle=False).offset)
    dt = entry["dtype"]
    return str(path), offset, int(entry["shape"][1]), FILE_DTYPES[dt], DTYPE_CODES[DTYPES[dt]]
