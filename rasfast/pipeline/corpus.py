"""Reading user corpora (JSONL/JSON) and a small flat passage index for ``rasfast index`` /
``rasfast ask`` when :class:`rasfast.ThemeIndex` is not available.

Corpus records: ``{"title": ..., "text": ...}`` (``"contents"``/``"passage"``/``"paragraph_text"``
are read as text; ``"id"`` is kept as ``source_id``; optional ``"triples"``: lists of
[s, p, o]). A JSON file may hold a list of records, or a mapping title -> text (or list of
sentences, HotpotQA style). Passage ids are positions in the file.

Flat index directory: ``manifest.json`` (format, version, counts, dim, encoder name),
``embeddings.npy`` (float32, memory-mapped on load), ``passages.jsonl``. Loading checks the
manifest against the files and refuses a mismatched or truncated index.
"""
from __future__ import annotations

import json
import os
import pathlib
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..data.qa import Passage, QADataset

FORMAT = "rasfast-flat-index"
VERSION = 1


def _record_text(r: Dict) -> str:
    for key in ("text", "contents", "passage", "paragraph_text", "content"):
        v = r.get(key)
        if isinstance(v, str):
            return v
        if isinstance(v, list):
            return "".join(str(x) for x in v)
    raise ValueError(f"corpus record has no text field (text/contents/passage): keys {sorted(r)}")


def read_corpus(path: os.PathLike) -> QADataset:
    """A corpus file as a QADataset without questions (``triples`` when records carry them)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus: no such file {path}")
    raw = path.read_text()
    if path.suffix == ".jsonl":
        records = [json.loads(line) for line in raw.splitlines() if line.strip()]
    else:
        data = json.loads(raw)
        if isinstance(data, dict):
            records = [{"title": t, "text": v} for t, v in data.items()]
        elif isinstance(data, list):
            records = data
        else:
            raise ValueError(f"corpus: expected a JSON list or object in {path}")
    passages: List[Passage] = []
    triples: List[list] = []
    has_triples = False
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise ValueError(f"corpus: record {i} is not an object")
        passages.append(Passage(i, str(r.get("title", "")), _record_text(r)))
        t = r.get("triples")
        has_triples |= t is not None
        triples.append(list(t or []))
    return QADataset(path.stem, passages, [], triples if has_triples else None)


def save_flat_index(directory: os.PathLike, passages: Sequence[Passage], embeddings: np.ndarray,
                    encoder_name: str, triples: Optional[Sequence] = None) -> pathlib.Path:
    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    emb = np.ascontiguousarray(embeddings, dtype=np.float32)
    if emb.ndim != 2 or emb.shape[0] != len(passages):
        raise ValueError(f"embeddings: expected [{len(passages)}, D], got {emb.shape}")
    np.save(d / "embeddings.npy", emb)
    with open(d / "passages.jsonl", "w") as f:
        for j, p in enumerate(passages):
            rec = {"pid": p.pid, "title": p.title, "text": p.text}
            if triples is not None:
                rec["triples"] = [list(t) for t in triples[j]]
            f.write(json.dumps(rec) + "\n")
    manifest = {"format": FORMAT, "version": VERSION, "passages": len(passages),
                "dim": int(emb.shape[1]), "dtype": "float32", "encoder": encoder_name,
                "triples": triples is not None}
    (d / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return d


def load_flat_index(directory: os.PathLike) -> Tuple[QADataset, np.ndarray, Dict]:
    """(dataset of the passages, memory-mapped embeddings, manifest)."""
    d = pathlib.Path(directory)
    mf = d / "manifest.json"
    if not mf.is_file():
        raise FileNotFoundError(f"index: {d} has no manifest.json (build one with `rasfast index build`)")
    manifest = json.loads(mf.read_text())
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise ValueError(f"index: {d} is not a {FORMAT} v{VERSION} index: {manifest.get('format')!r}")
    emb = np.load(d / "embeddings.npy", mmap_mode="r")
    if emb.shape != (manifest["passages"], manifest["dim"]):
        raise ValueError(f"index: embeddings.npy has shape {emb.shape}, manifest says "
                         f"({manifest['passages']}, {manifest['dim']}): mismatched or truncated")
    passages, triples = [], []
    for line in (d / "passages.jsonl").read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            passages.append(Passage(int(r["pid"]), r["title"], r["text"]))
            triples.append(r.get("triples", []))
    if len(passages) != manifest["passages"]:
        raise ValueError(f"index: passages.jsonl has {len(passages)} passages, manifest says "
                         f"{manifest['passages']}: truncated")
    return QADataset(d.name, passages, [], triples if manifest.get("triples") else None), emb, manifest


__all__ = ["read_corpus", "save_flat_index", "load_flat_index"]
