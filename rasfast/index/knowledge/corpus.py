"""Reading a corpus for a knowledge index, strictly: every problem names its line/record.

Accepted files:

- JSONL (``.jsonl``): one record per line, ``{"title", "text"}`` (text may also be under
  ``contents``/``passage``/``paragraph_text``/``content``; ``id`` is kept as the source id).
- JSON: a list of such records, a mapping title -> text (or list of sentences), or the
  MuSiQue/HippoRAG OpenIE format ``{"docs": [{"title", "passage"|"text",
  "extracted_triples"}, ...]}``.

Triples come from a record's ``triples`` or ``extracted_triples`` field (lists of
[subject, predicate, object]; malformed entries are kept as given and skipped by the triple
graph, as for MuSiQue's raw OpenIE output). A corpus has triples when any record has the
field; records without it then have none.

Errors (ValueError): a line that is not JSON (line number), a record that is not an object,
a passage with no text (empty or missing), a triples field that is not a list, two records
with the same id (``pid``, ``id`` or ``idx``: both places named; which of the two a search
for that id returned would be undefined), a corpus without passages.
"""
from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ...data.qa import Passage

TEXT_KEYS = ("text", "contents", "passage", "paragraph_text", "content")
TRIPLE_KEYS = ("triples", "extracted_triples")
ID_KEYS = ("pid", "id", "idx")     # a record's own identifier (kept as its source id)


@dataclass
class Corpus:
    name: str
    passages: List[Passage]
    triples: Optional[List[list]]        # per passage, raw, or None when the corpus has none
    source_ids: List[Optional[str]]      # the records' own "id" (None when absent)


def _text(rec: Dict[str, Any], where: str) -> str:
    for key in TEXT_KEYS:
        v = rec.get(key)
        if isinstance(v, list):
            v = "".join(str(x) for x in v)
        if isinstance(v, str):
            if key == "passage" and "title" in rec and v.startswith(f"{rec['title']}\n"):
                v = v[len(rec["title"]) + 1:]      # HippoRAG's "passage" repeats the title
            if not v.strip():
                raise ValueError(f"{where}: passage has no text (field {key!r} is empty)")
            return v
    raise ValueError(f"{where}: passage has no text (expected one of {', '.join(TEXT_KEYS)}; "
                     f"keys {sorted(rec)})")


def _records(path: pathlib.Path):
    """(where, record) pairs; ``where`` names the line or record for error messages."""
    if path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: line {lineno} is not JSON ({e.msg})") from None
                yield f"{path}: line {lineno}", rec
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON (line {e.lineno}: {e.msg}); use .jsonl for one "
                         f"record per line") from None
    if isinstance(data, dict) and isinstance(data.get("docs"), list):
        data = data["docs"]                       # MuSiQue / HippoRAG OpenIE output
    if isinstance(data, dict):
        for i, (title, text) in enumerate(data.items()):
            yield f"{path}: record {i}", {"title": title, "text": text}
    elif isinstance(data, list):
        for i, rec in enumerate(data):
            yield f"{path}: record {i}", rec
    else:
        raise ValueError(f"{path}: expected a JSON list, an object or an OpenIE 'docs' file")


def _check_unique_ids(rec: Dict[str, Any], where: str, path: pathlib.Path,
                      first_seen: Dict[tuple, str]) -> None:
    place = where[len(f"{path}: "):]     # "line 7" / "record 3"
    for key in ID_KEYS:
        value = rec.get(key)
        if value is None:
            continue
        seen = first_seen.setdefault((key, json.dumps(value, sort_keys=True)), place)
        if seen != place:
            raise ValueError(f"{where}: {key} {value!r} repeats {seen}'s; every passage's {key} "
                             f"must be unique (which of the two a search returned would be "
                             f"undefined)")


def read_corpus(path) -> Corpus:
    """Reads ``path`` (see the module docstring). Passage ids are positions in the file."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise ValueError(f"corpus: {path} is a directory; expected a JSONL or JSON corpus file")
    if not path.is_file():
        raise FileNotFoundError(f"corpus: no such file {path}")
    passages: List[Passage] = []
    triples: List[list] = []
    source_ids: List[Optional[str]] = []
    has_triples = False
    first_seen: Dict[tuple, str] = {}    # (id key, value) -> where it was first
    for where, rec in _records(path):
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        text = _text(rec, where)
        _check_unique_ids(rec, where, path, first_seen)
        t = None
        for key in TRIPLE_KEYS:
            if key in rec:
                t = rec[key]
                if t is not None and not isinstance(t, list):
                    raise ValueError(f"{where}: {key!r} must be a list of [s, p, o] triples, "
                                     f"got {type(t).__name__}")
                has_triples = True
                break
        passages.append(Passage(len(passages), str(rec.get("title", "")), text))
        triples.append(list(t or []))
        sid = rec.get("id", rec.get("idx"))
        source_ids.append(None if sid is None else str(sid))
    if not passages:
        raise ValueError(f"{path}: no passages")
    return Corpus(path.stem, passages, triples if has_triples else None, source_ids)


__all__ = ["Corpus", "read_corpus"]
