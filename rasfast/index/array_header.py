"""The header of a ThemeIndex array file (format 4, issue 31): what the file holds, so a
load can check the file against its manifest entry.

The raw ``emb/ppd/pids.<g>.bin`` files of formats 2 and 3 were bytes only, and a file may
hold bytes past its committed rows, so a manifest that said float16 (or dim 32) for a
float32 file of dim 64 loaded without error and failed at search as "contains NaN" or
"expected embeddings of dim 64", naming neither file nor manifest. Format 4 starts every
array file with 64 bytes (all little-endian)::

    offset size
     0      8   magic b"RFARRAY\\0"
     8      2   header layout version (1)
    10      2   header size in bytes (64): row 0 starts there
    12      8   array name, ASCII, NUL-padded: "emb", "ppd" or "pids"
    20     12   storage dtype, ASCII, NUL-padded: "float32", "float16", "bfloat16", "int64"
    32      4   number of dimensions (2 for a matrix, 1 for pids)
    36      8   elements per row (the matrix's width; 1 for pids)
    44      4   CRC-32 of bytes 0..43
    48     16   zero

The row count is deliberately not in it: rows are appended after the committed ones
without rewriting the header (committed bytes are never rewritten, rasfast.index.durable),
and the manifest's ``num_rows`` is what commits them. 64 bytes keep row 0 at a 64-byte
boundary of the page-aligned mapping.
"""
from __future__ import annotations

import pathlib
import struct
import zlib
from typing import Any, Dict

MAGIC = b"RFARRAY\0"
LAYOUT = 1
SIZE = 64
_FIELDS = struct.Struct("<8sHH8s12sIQ")   # 44 bytes, then the CRC
_CRC = struct.Struct("<I")


def _text(raw: bytes) -> str:
    return raw.rstrip(b"\0").decode("ascii", "replace")


def pack(name: str, dtype: str, shape) -> bytes:
    """The header of array ``name`` of storage dtype ``dtype`` and shape ``shape`` (rows
    first; only the row shape is recorded)."""
    shape = [int(s) for s in shape]
    width = 1
    for s in shape[1:]:
        width *= s
    fields = _FIELDS.pack(MAGIC, LAYOUT, SIZE, name.encode("ascii"), dtype.encode("ascii"),
                          len(shape), width)
    head = fields + _CRC.pack(zlib.crc32(fields))
    return head + b"\0" * (SIZE - len(head))


def read(path: pathlib.Path) -> Dict[str, Any]:
    """{"name", "dtype", "ndim", "width", "size"} from the header of ``path``; ValueError
    naming the file when it has none (too short, another magic) or a corrupt one (CRC)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(SIZE)
    except FileNotFoundError:
        raise ValueError(f"{path}: missing (listed in the manifest)") from None
    if len(raw) < _FIELDS.size + _CRC.size or raw[:8] != MAGIC:
        raise ValueError(f"{path}: no rasfast array header (the manifest says format 4, whose "
                         f"array files start with {MAGIC!r}); the file is not the one the "
                         f"manifest describes")
    fields = raw[:_FIELDS.size]
    (crc,) = _CRC.unpack_from(raw, _FIELDS.size)
    if zlib.crc32(fields) != crc:
        raise ValueError(f"{path}: its header is corrupt (CRC-32 mismatch)")
    _, layout, size, name, dtype, ndim, width = _FIELDS.unpack(fields)
    if layout != LAYOUT:
        raise ValueError(f"{path}: header layout {layout}, this rasfast reads {LAYOUT}")
    return {"name": _text(name), "dtype": _text(dtype), "ndim": ndim, "width": width, "size": size}


_WIDTH = {"emb": "shape (dim)", "ppd": "shape (num_themes)"}


def check(path: pathlib.Path, name: str, entry: Dict[str, Any], manifest: pathlib.Path) -> None:
    """Compares the header of array file ``path`` with its manifest entry (array ``name``,
    ``entry`` = {"file", "dtype", "shape", "offset"}); ValueError naming the file, the
    field, both values and the manifest on any disagreement."""
    head = read(path)
    shape = [int(s) for s in entry["shape"]]
    width = 1
    for s in shape[1:]:
        width *= s
    for field, got, want in (("array", head["name"], name),
                             ("dtype", head["dtype"], entry["dtype"]),
                             ("shape (number of dimensions)", head["ndim"], len(shape)),
                             (_WIDTH.get(name, "shape (row width)"), head["width"], width),
                             ("offset (header size)", head["size"], int(entry["offset"]))):
        if got != want:
            raise ValueError(f"{path}: the file holds {field} {got!r} (its header), {manifest} "
                             f"says {want!r}; the manifest does not describe this file")


__all__ = ["MAGIC", "SIZE", "pack", "read", "check"]
