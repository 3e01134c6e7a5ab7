"""Tolerant readers of StructRAG's model output. None of them raises on model text.

- :func:`parse_route`: a router reply -> (structure type, known?). The first type named as a
  whole word wins ("Graph.", "**table**", "I would use a graph" all parse); a reply naming
  none falls back to :data:`~rasfast.systems.structrag.types.DEFAULT_TYPE` with ``known=False`` (the
  caller counts it).
- :func:`parse_structure`: a structurizer reply -> :class:`Structure`. The ``Description:``
  line is optional (else the first line, cut to 128 characters, as the paper's code does). A
  reply without the type's format (a table without '|' rows, a graph without triples, a
  catalogue without numbered entries, an empty reply) is kept whole as a ``"text"``
  structure, never dropped.
- :func:`parse_subquestions`: numbered / bulleted lines -> clean sub-questions.
- :func:`markdown_table` / :func:`escape_cell`: the table writer (cells escape '|').
"""
from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

from ...parse import parse_triples
from .types import DEFAULT_TYPE, STRUCTURE_TYPES, TEXT_KIND, Structure

_ROUTE = re.compile(r"\b(" + "|".join(STRUCTURE_TYPES) + r")s?\b", re.IGNORECASE)
_DESC = re.compile(r"^\s*(?:\*\*)?description(?:\*\*)?\s*:\s*(.*)$", re.IGNORECASE)
_BULLET = re.compile(r"^\s*(?:(?:\d+|[a-z])[.):]|[-*\u2022]|sub-?questions?\s*\d*\s*:|q\d+\s*[:.])\s*",
                     re.IGNORECASE)
_CATALOGUE = re.compile(r"^\s*(\d+(?:\.\d+)*)\.?\s+\S")
_SEP_CELL = re.compile(r"^:?-{2,}:?$")
_NOTHING = frozenset({"none", "n/a", "nothing", "sub-questions:", "sub-questions"})


def parse_route(text) -> Tuple[str, bool]:
    """(structure type, True) for a reply naming one, else (DEFAULT_TYPE, False)."""
    if not isinstance(text, str):
        return DEFAULT_TYPE, False
    m = _ROUTE.search(text)
    return (m.group(1).lower(), True) if m else (DEFAULT_TYPE, False)


def escape_cell(value) -> str:
    """A markdown table cell: '|' escaped, line breaks and runs of white space collapsed."""
    return re.sub(r"\s+", " ", str(value)).strip().replace("|", "\\|")


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence]) -> Tuple[List[str], List[str]]:
    """(header lines, row lines) of a markdown table; every cell escaped."""
    header = ["| " + " | ".join(escape_cell(c) for c in columns) + " |",
              "| " + " | ".join("---" for _ in columns) + " |"]
    body = ["| " + " | ".join(escape_cell(c) for c in r) + " |" for r in rows]
    return header, body


def split_row(line: str) -> List[str]:
    """The cells of one markdown row ('\\|' is a literal bar inside a cell)."""
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|") and not s.endswith("\\|"):
        s = s[:-1]
    cells = re.split(r"(?<!\\)\|", s)
    return [c.strip().replace("\\|", "|") for c in cells]


def _description(lines: List[str]) -> Tuple[str, List[str]]:
    for i, ln in enumerate(lines):
        if not ln.strip():
            continue
        m = _DESC.match(ln)
        if m:
            return m.group(1).strip()[:256], lines[i + 1:]
        return "", lines[i:]
    return "", []


def _first_line(text: str, n: int = 128) -> str:
    for ln in text.splitlines():
        if ln.strip():
            return ln.strip()[:n]
    return ""


def parse_structure(kind: str, text, pids: Sequence[int] = (), title: str = "") -> Structure:
    """One structurizer reply as a Structure of ``kind`` (or ``"text"`` when malformed)."""
    text = text if isinstance(text, str) else ("" if text is None else str(text))
    desc, body_lines = _description(text.splitlines())
    body = "\n".join(body_lines).strip()
    if not desc:
        desc = _first_line(body)
    if title and title.casefold() not in desc.casefold():
        desc = f"{title}: {desc}" if desc else title
    items: Optional[list] = None
    header: List[str] = []
    if kind == "table":
        rows = [ln.strip() for ln in body_lines if ln.strip().startswith("|")]
        if len(rows) >= 2 and all(_SEP_CELL.match(c) for c in split_row(rows[1]) if c):
            header, items = rows[:2], rows[2:]
        elif rows:
            items = rows
        if items is not None and not items:
            items = None      # a header without rows holds no knowledge
    elif kind == "graph":
        items = _graph_items(body) or None
    elif kind == "catalogue":
        entries: List[str] = []
        for ln in body_lines:
            if _CATALOGUE.match(ln):
                entries.append(ln.strip())
            elif ln.strip() and entries:
                entries[-1] += " " + ln.strip()    # a wrapped summary continues its entry
        items = entries or None
    elif kind == "algorithm":
        items = [ln.rstrip() for ln in body_lines if ln.strip()] or None
    elif kind == "chunk":
        items = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", body) if p.strip()] or None
    else:
        raise ValueError(f"kind: expected one of {STRUCTURE_TYPES}, got {kind!r}")
    if items is None:
        # malformed: keep what the model wrote as plain text, one line per item
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return Structure(TEXT_KIND, desc or title, text.strip(), lines, list(pids))
    content = "\n".join(header + items) if kind == "table" else (
        "\n".join(f"({s} | {p} | {o})" for s, p, o in items) if kind == "graph" else body)
    return Structure(kind, desc, content, items, list(pids), header)


_LINE_BULLET = re.compile(r"^\s*(?:[-*]|\d+[.)])\s*")
_SEMI_TRIPLE = re.compile(r"^\s*[-*\d.)\s]*\(\s*([^;()]+?)\s*[;,]\s*([^;()]+?)\s*[;,]\s*([^;()]+?)\s*\)\s*[,;.]?\s*$")


def _graph_items(body: str) -> List[tuple]:
    """Triples from ``(head | relation | tail)`` lines, ``(h; r; t)`` / ``(h, r, t)`` lines, or
    RAS's ``(S> h| P> r| O> t)`` form; duplicates kept once."""
    out = list(parse_triples(body).triples)
    for ln in body.splitlines():
        if ">" in ln:
            continue
        t = _pipe_triple(ln)
        if t is None:
            m = _SEMI_TRIPLE.match(ln)
            t = tuple(x.strip().strip("\"'") for x in m.groups()) if m else None
        if t and all(t):
            out.append(t)
    return list(dict.fromkeys(out))


def _pipe_triple(line: str):
    """``(head | relation | tail)`` with heads and tails of any length (the paper's graph
    structurizer allows sentences), parentheses inside them kept: "Boston (Lincolnshire)"."""
    s = _LINE_BULLET.sub("", line.strip()).rstrip(",;.").strip()
    if s.startswith("(") and s.endswith(")"):
        s = s[1:-1]
    parts = s.split("|")
    if len(parts) != 3:
        return None
    return tuple(x.strip().strip("\"'").strip() for x in parts)


def parse_subquestions(text, question: str, max_n: int = 6) -> List[str]:
    """Sub-questions, one per line (numbering, bullets and blank lines dropped); the question
    itself when the reply holds none."""
    if not isinstance(text, str):
        text = ""
    out: List[str] = []
    for ln in text.splitlines():
        s = _BULLET.sub("", ln).strip().strip("\"'`").strip()
        if s.casefold().strip(".") in _NOTHING:
            continue
        if len(s) >= 3 and s.casefold() not in {x.casefold() for x in out}:
            out.append(s)
        if len(out) >= max_n:
            break
    return out or [question]


__all__ = ["parse_route", "parse_structure", "parse_subquestions", "markdown_table",
           "escape_cell", "split_row"]
