"""Validation of the JSON manifests of a saved index against a schema (issue 31).

A manifest names its files and the counts, dims and dtypes a load relies on; a missing key
or a value of the wrong type used to surface as a bare ``KeyError`` (or worse, a wrong
result) deep inside the load. :func:`validate` checks a parsed manifest against a schema
written in JSON Schema (rasfast.index.manifest_schemas, rasfast.theme.config_schema) and
raises one ``ValueError`` naming the file, the key path and what was expected.

Only the keywords the schemas use are implemented (``type``, ``enum``, ``const``,
``required``, ``properties``, ``items``, ``minItems``, ``maxItems``, ``minimum``,
``minLength``), with JSON Schema's meaning (tests/test_index_header.py checks that the
``jsonschema`` package agrees on every case it tries): rasfast needs no runtime dependency
for it. Keys a schema does not list are allowed (a newer writer may add some).
"""
from __future__ import annotations

import pathlib
from typing import Any, Dict, List, Union

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    # JSON Schema: 2.0 is an integer; True is not a number
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _where(path: List[Union[str, int]]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "the top level"


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but true is not 1."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _type_name(value: Any) -> str:
    for name, test in _TYPES.items():
        if test(value):
            return name
    return type(value).__name__


def problems(value: Any, schema: Dict[str, Any], path=None) -> List[str]:
    """Every way ``value`` breaks ``schema``, as "key.path: what was expected" strings."""
    path = [] if path is None else path
    where = _where(path)
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        if not any(_TYPES[t](value) for t in types):
            return [f"{where}: expected {' or '.join(types)}, got {_type_name(value)} {value!r}"]
    if "const" in schema and not _same(value, schema["const"]):
        return [f"{where}: expected {schema['const']!r}, got {value!r}"]
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        return [f"{where}: expected one of {', '.join(map(repr, schema['enum']))}, got {value!r}"]
    out: List[str] = []
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and "minimum" in schema and value < schema["minimum"]:
        out.append(f"{where}: expected a number >= {schema['minimum']}, got {value!r}")
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        out.append(f"{where}: expected a non-empty string, got {value!r}")
    if isinstance(value, dict):
        for key in schema.get("required", ()):
            if key not in value:
                out.append(f"{_where(path + [key])}: missing (a required key)")
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                out.extend(problems(value[key], sub, path + [key]))
    if isinstance(value, list):
        lo, hi = schema.get("minItems"), schema.get("maxItems")
        if (lo is not None and len(value) < lo) or (hi is not None and len(value) > hi):
            want = f"{lo}" if lo == hi else f"{lo if lo is not None else 0} to {hi if hi is not None else 'any'}"
            out.append(f"{where}: expected {want} items, got {len(value)}")
        if "items" in schema:
            for i, item in enumerate(value):
                out.extend(problems(item, schema["items"], path + [i]))
    return out


def validate(value: Any, schema: Dict[str, Any], source: Union[str, pathlib.Path]) -> None:
    """Raises ``ValueError("<source>: <key path>: <expected> ...")`` when ``value`` breaks
    ``schema`` (the first three problems, and how many there are)."""
    found = problems(value, schema)
    if found:
        more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
        raise ValueError(f"{source}: malformed manifest: {'; '.join(found[:3])}{more}")


__all__ = ["problems", "validate"]
