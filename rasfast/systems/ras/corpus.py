"""Reading user corpora (JSONL/JSON) into a :class:`rasfast.ThemeIndex` directory for
``rasfast index build`` / ``rasfast ask --index``.

Corpus records: ``{"title": ..., "text": ...}`` (``"contents"``/``"passage"``/``"paragraph_text"``
are read as text; ``"id"`` is kept as ``source_id``; optional ``"triples"``: lists of
[s, p, o]). A JSON file may hold a list of records, or a mapping title -> text (or list of
sentences, HotpotQA style). Passage ids are positions in the file.

The index directory is ThemeIndex's (manifest, memory-mappable .npy arrays, passages, theme
model; loading refuses a mismatched or truncated index) plus ``loop_triples.jsonl`` when the
corpus carried triples.
"""
from __future__ import annotations

import json
import os
import pathlib
from typing import Dict, List, Tuple

import numpy as np

from ...data.qa import Passage, QADataset

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


TRIPLES_FILE = "loop_triples.jsonl"   # the loop's addition to a ThemeIndex directory


def build_index(dataset: QADataset, encoder, directory: os.PathLike, num_themes: int = 64):
    """A :class:`rasfast.ThemeIndex` over the dataset's passages (embeddings + k-means theme
    model), saved to ``directory``; the dataset's triples, if any, go beside it in
    ``loop_triples.jsonl`` for the loop's extractor. Returns the index."""
    from ...index.theme_index import ThemeIndex
    n = len(dataset.passages)
    if n == 0:
        raise ValueError("corpus: no passages to index")
    index = ThemeIndex.build(passages=dataset.passages, encoder=encoder,
                             num_themes=max(1, min(num_themes, n)))
    d = index.save(directory)
    tf = pathlib.Path(d) / TRIPLES_FILE
    if dataset.triples is not None:
        with open(tf, "w", encoding="utf-8") as f:
            for p, t in zip(dataset.passages, dataset.triples):
                f.write(json.dumps({"pid": p.pid, "triples": [list(x) for x in t]}, ensure_ascii=False) + "\n")
    elif tf.exists():
        tf.unlink()
    return index


def load_index(directory: os.PathLike, mmap: bool = False) -> Tuple[object, QADataset]:
    """(ThemeIndex, dataset of its passages with the saved triples or None). A knowledge
    index (rasfast.index.knowledge) is loaded through KnowledgeIndex, so the passages and triples
    come from the same committed generation."""
    from ...index.theme_index import ThemeIndex
    from ...index.knowledge.index import KnowledgeIndex, is_knowledge_index
    triples = None
    if is_knowledge_index(directory):
        ki = KnowledgeIndex.load(directory, mmap=mmap)
        index = ki.theme
        if ki.extraction.get("source") != "none":
            triples = [[list(t) for t in row] for row in ki.triples]
    else:
        index = ThemeIndex.load(directory, mmap=mmap)
    passages = [Passage(int(pid), t, x) for pid, t, x in zip(np.asarray(index.pids).tolist(),
                                                             index.titles, index.texts)]
    tf = pathlib.Path(directory) / TRIPLES_FILE
    if triples is None and tf.is_file():
        by_pid: Dict[int, list] = {}
        for line in tf.read_text(encoding="utf-8").split("\n"):  # not splitlines: U+2028
            if line.strip():
                r = json.loads(line)
                by_pid[int(r["pid"])] = r["triples"]
        triples = [by_pid.get(p.pid, []) for p in passages]
    return index, QADataset(pathlib.Path(directory).name, passages, [], triples)


__all__ = ["read_corpus", "build_index", "load_index", "TRIPLES_FILE"]
