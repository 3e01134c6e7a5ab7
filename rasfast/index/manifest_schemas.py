"""The JSON Schemas of every manifest a saved index holds (issue 31), per format version:
``manifest.json`` / ``manifest.<g>.json`` of a ThemeIndex (versions 1-4), ``knowledge.json``
of a KnowledgeIndex (versions 1-4) and ``theme_model.json`` of a theme model. Checked at
load by rasfast._schema.validate.

"Required" is what a load reads without a default, in every version that has it (taken
from each version's writer); keys with a default (``normalize_ppd``, ``metric``, ...) are
type-checked when present.
"""
from __future__ import annotations

from typing import Any, Dict

FILE = {"type": "string", "minLength": 1}
COUNT = {"type": "integer", "minimum": 0}
RANGE = {"type": "array", "items": COUNT, "minItems": 2, "maxItems": 2}
NAME = {"type": ["string", "null"]}
FLOAT_DTYPES = ["float32", "float16", "bfloat16"]


def _array(dtypes, ndim: int, header: bool) -> Dict[str, Any]:
    """A ThemeIndex array entry: file, dtype, shape (and, format 4, the header's size)."""
    props = {"file": FILE, "dtype": {"enum": dtypes},
             "shape": {"type": "array", "items": COUNT, "minItems": ndim, "maxItems": ndim}}
    required = ["file", "dtype", "shape"]
    if header:
        props["offset"] = COUNT
        required.append("offset")
    return {"type": "object", "required": required, "properties": props}


def theme_index(version: int) -> Dict[str, Any]:
    """The schema of a ThemeIndex manifest of format ``version`` (1-4)."""
    header = version >= 4
    matrix = _array(FLOAT_DTYPES, 2, header)
    pids = _array(["int64"], 1, header)
    arrays = {"type": "object", "required": ["emb"] + (["pids"] if version >= 2 else []),
              "properties": {"emb": matrix, "ppd": matrix, "pids": pids}}
    passages = {"type": "object", "required": ["file", "count", "bytes"] if version >= 2 else [],
                "properties": {"file": FILE, "count": COUNT, "bytes": COUNT, "ends": FILE}}
    required = ["format", "version", "num_rows", "dim", "arrays", "shards"]
    required += ["pids"] if version == 1 else ["passages"]
    required += ["generation"] if version >= 3 else []
    return {
        "type": "object", "required": required,
        "properties": {
            "format": {"const": "rasfast.ThemeIndex"},
            "version": {"const": version},
            "generation": COUNT,
            "num_rows": COUNT,
            "dim": {"type": "integer", "minimum": 1},
            "num_themes": {"type": ["integer", "null"], "minimum": 1},
            "arrays": arrays,
            "pids": pids,
            "passages": passages,
            "shards": {"type": "array", "items": RANGE},
            "normalize_ppd": {"type": "boolean"},
            "metric": {"enum": ["l2", "ip"]},
            "encoder": NAME,
            "theme_model": {"type": "object", "properties": {"name": NAME, "dir": NAME}},
        },
    }


_PART = {
    "type": "object",
    "required": ["triples", "graph", "triple_emb", "passages", "rows", "entities", "csr", "degree"],
    "properties": {
        "triples": FILE, "graph": FILE, "triple_emb": FILE, "triples_ends": FILE,
        "layout": {"type": "integer"}, "passages": RANGE, "rows": RANGE, "entities": RANGE,
        "inputs": RANGE,
        "csr": {"type": "object", "required": ["kind", "rows", "nnz"],
                "properties": {"kind": {"enum": ["full", "delta"]}, "rows": COUNT, "nnz": COUNT,
                               "replace": COUNT}},
        "degree": {"type": "object", "required": ["kind", "count"],
                   "properties": {"kind": {"enum": ["full", "delta"]}, "count": COUNT}},
    },
}


def knowledge(version: int) -> Dict[str, Any]:
    """The schema of a ``knowledge.json`` of format ``version`` (1-4)."""
    required = ["format", "version", "num_passages", "num_triples", "num_entities", "nnz",
                "num_input_triples", "dim", "extraction", "graph"]
    required += ["theme_generation", "files"] if version >= 2 else []
    required += ["parts"] if version >= 3 else []
    return {
        "type": "object", "required": required,
        "properties": {
            "format": {"const": "rasfast.KnowledgeIndex"},
            "version": {"const": version},
            "theme_generation": COUNT,
            "files": {"type": "object", "required": ["triples", "graph", "triple_emb"],
                      "properties": {"triples": FILE, "graph": FILE, "triple_emb": FILE}},
            "parts": {"type": "array", "minItems": 1, "items": _PART},
            "num_passages": COUNT, "num_triples": COUNT, "num_entities": COUNT, "nnz": COUNT,
            "num_input_triples": COUNT,
            "dim": {"type": "integer", "minimum": 1},
            "encoder": NAME,
            "extraction": {"type": "object", "properties": {"source": NAME, "model": NAME}},
            "unparsed": {"type": "array", "items": {"type": "integer"}},
            "graph": {"type": "object", "required": ["normalize", "max_degree", "n_skipped", "n_hubs"],
                      "properties": {"normalize": {"type": "boolean"},
                                     "max_degree": {"type": ["integer", "null"], "minimum": 1},
                                     "n_skipped": COUNT, "n_hubs": COUNT}},
            "bm25": {"type": "object", "required": ["dir", "num_passages"],
                     "properties": {"dir": FILE, "num_passages": COUNT}},
        },
    }


__all__ = ["theme_index", "knowledge"]
