"""Passage titles and texts of a saved index, decoded lazily (issue 23: a 5M-row index must
open without parsing 5M JSON records).

A version-3 index writes, beside ``passages.<g>.jsonl``, ``passages.<g>.ends``: the int64 end
offset of every record (row i is bytes [ends[i-1], ends[i]) of the JSON-lines file, one
``{"pid", "title", "text"}`` object ending in ``b"\\n"``). Loading maps both files;
:class:`TextColumn` then decodes a record only when its title or text is read. A column is
also what ``ThemeIndex.add`` extends: saved rows stay lazy, new rows are plain lists.
"""
from __future__ import annotations

import bisect
import json
import mmap
import pathlib
from collections.abc import Sequence
from typing import Any, Dict, Iterator, List

import numpy as np


def parse_record(raw: bytes, path: pathlib.Path, lineno: int) -> Dict[str, Any]:
    """One passages-file record -> {"pid", "title", "text"}; ValueError naming the file and
    line when it is not one (bad UTF-8, bad JSON, missing or non-string fields)."""
    try:
        rec = json.loads(raw.decode("utf-8"))
        title, text = rec["title"], rec["text"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: line {lineno} is not a passage record "
                         f"({type(e).__name__}: {e})") from None
    if not isinstance(title, str) or not isinstance(text, str):
        raise ValueError(f"{path}: line {lineno}: title and text must be strings")
    return rec


class SavedPassages:
    """Records [0, n) of a passages file, located by its ends file (both memory-mapped)."""

    def __init__(self, path: pathlib.Path, ends: np.ndarray, nbytes: int):
        self.path, self.ends, self.nbytes = pathlib.Path(path), ends, int(nbytes)
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if self.nbytes else b""

    def __len__(self) -> int:
        return len(self.ends)

    def record(self, i: int) -> Dict[str, Any]:
        start = int(self.ends[i - 1]) if i else 0
        return parse_record(self._map[start:int(self.ends[i])], self.path, i + 1)


class _Field(Sequence):
    """One field ("title" or "text") of the records of a :class:`SavedPassages`."""

    def __init__(self, store: SavedPassages, field: str):
        self.store, self.field = store, field

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.store.record(j)[self.field] for j in range(*i.indices(len(self)))]
        return self.store.record(i)[self.field]


class TextColumn(Sequence):
    """A read-only sequence of strings made of segments (lazily decoded saved rows, plain
    lists): indexing decodes one record, slicing a range, ``+`` appends segments without
    decoding anything, ``==`` compares with any sequence element by element."""

    def __init__(self, segments):
        self._segs: List[Any] = [s for s in segments if len(s)]
        self._starts: List[int] = []
        n = 0
        for s in self._segs:
            self._starts.append(n)
            n += len(s)
        self._n = n

    def __len__(self) -> int:
        return self._n

    def _locate(self, i: int):
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("text index out of range")
        k = bisect.bisect_right(self._starts, i) - 1
        return self._segs[k], i - self._starts[k]

    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(self._n)
            if step != 1:
                return [self[j] for j in range(start, stop, step)]
            out: List[str] = []
            for seg, s0 in zip(self._segs, self._starts):
                a, b = max(start - s0, 0), min(stop - s0, len(seg))
                if a < b:
                    out.extend(seg[a:b])
            return out
        seg, j = self._locate(int(i))
        return seg[j]

    def __iter__(self) -> Iterator[str]:
        for seg in self._segs:
            yield from seg

    def __add__(self, other) -> "TextColumn":
        more = other._segs if isinstance(other, TextColumn) else [list(other)]
        return TextColumn(self._segs + more)

    def __radd__(self, other) -> "TextColumn":
        return TextColumn([list(other)] + self._segs)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __repr__(self) -> str:
        return f"TextColumn({self._n} strings)"


def columns(path: pathlib.Path, ends_path: pathlib.Path, count: int, nbytes: int):
    """(titles, texts) columns over the first ``count`` records of a saved passages file."""
    if not ends_path.is_file():
        raise ValueError(f"{ends_path}: missing (listed in the manifest)")
    size = ends_path.stat().st_size
    if size < count * 8:
        raise ValueError(f"{ends_path}: truncated ({size} bytes, {count} records need {count * 8})")
    ends = np.memmap(ends_path, dtype="<i8", mode="r", shape=(count,)) if count else np.zeros(0, "<i8")
    if count and int(ends[-1]) != int(nbytes):
        raise ValueError(f"{ends_path}: the last record ends at byte {int(ends[-1])}, the "
                         f"manifest says the passages file holds {nbytes}")
    if not path.is_file():
        raise ValueError(f"{path}: missing (listed in the manifest)")
    if path.stat().st_size < nbytes:
        raise ValueError(f"{path}: truncated ({path.stat().st_size} bytes, the manifest says {nbytes})")
    store = SavedPassages(path, ends, nbytes)
    return TextColumn([_Field(store, "title")]), TextColumn([_Field(store, "text")])


__all__ = ["TextColumn", "SavedPassages", "columns", "parse_record"]
