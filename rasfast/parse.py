"""Tolerant parsers for model output: plan decisions and RAS triple lists. They never raise.

Plans: ``[NO_RETRIEVAL]``, ``[SUBQ] text`` or ``[SUFFICIENT]``; tags are matched in any case,
with or without brackets, spaces or underscores; the first tag in the text wins; text with no
tag at all is read as a sub-query (a model that forgot the tag still asked something), and
empty text as ``Sufficient``.

Triples: RAS's format ``(S> subject| P> predicate| O> object), (S> ...)``. The parser splits
on the ``S>`` markers, so missing commas, stray text around or between triples, and missing
or extra parentheses do not matter; a fragment without all three non-empty fields is dropped
and counted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Sequence, Union

from .types import Triple


@dataclass(frozen=True)
class NoRetrieval:
    """Answer from the model's own knowledge, without retrieval."""


@dataclass(frozen=True)
class Sufficient:
    """The question graph holds enough to answer."""


@dataclass(frozen=True)
class SubQuery:
    text: str


PlanAction = Union[NoRetrieval, Sufficient, SubQuery]

_TAG = re.compile(r"\[?\s*(no[\s_-]*retrieval|sufficient|sub[\s_-]*q(?:uery)?)\s*\]?\s*:?",
                  re.IGNORECASE)
_WS = re.compile(r"\s+")


def parse_plan(text) -> PlanAction:
    """Parses one planner output into ``NoRetrieval``, ``Sufficient`` or ``SubQuery(text)``."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    m = _TAG.search(text)
    if m is None:
        q = _clean_query(text)
        return SubQuery(q) if q else Sufficient()
    tag = re.sub(r"[\s_-]", "", m.group(1).lower())
    if tag == "noretrieval":
        return NoRetrieval()
    if tag == "sufficient":
        return Sufficient()
    rest = text[m.end():]
    nxt = _TAG.search(rest)          # a sub-query ends at the next tag, if any
    if nxt is not None:
        rest = rest[:nxt.start()]
    rest = rest.strip().split("\n", 1)[0] if rest.strip() else ""
    q = _clean_query(rest)
    return SubQuery(q) if q else Sufficient()


def _clean_query(s: str) -> str:
    s = _WS.sub(" ", s).strip()
    return s.strip("\"'`").strip()


@dataclass
class TripleParse:
    triples: List[Triple]
    dropped: int = 0   # fragments that looked like triples but lacked a field


_S = re.compile(r"S\s*>", re.IGNORECASE)
_P = re.compile(r"\|?\s*P\s*>", re.IGNORECASE)
_O = re.compile(r"\|?\s*O\s*>", re.IGNORECASE)
_GROUP = re.compile(r"\(([^()]*)\)")
_STRIP = " \t\r\n|,;[]{}\"'"


def _field(s: str) -> str:
    """A field without the list's punctuation around it. Parentheses are stripped only when
    unbalanced, so names such as "The Prestige (film)" keep theirs."""
    s = _WS.sub(" ", s).strip(_STRIP)
    while True:
        if s.endswith(")") and s.count(")") > s.count("("):
            s = s[:-1].strip(_STRIP)
        elif s.startswith("(") and s.count("(") > s.count(")"):
            s = s[1:].strip(_STRIP)
        else:
            return s.strip()


def _close(s: str) -> int:
    """Where the triple's closing parenthesis is: the first ")" that closes no "(" opened
    inside the object (so "Boston (Lincolnshire)" stays whole); -1 when there is none."""
    depth = 0
    for i, ch in enumerate(s):
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                return i
            depth -= 1
    return -1


def parse_triples(text) -> TripleParse:
    """Parses a RAS triple list. Duplicates are kept once, in first-seen order."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    parts = _S.split(text)
    out: List[Triple] = []
    seen = set()
    dropped = 0
    for frag in parts[1:]:
        mp = _P.search(frag)
        mo = _O.search(frag, mp.end()) if mp else None
        if mp is None or mo is None:
            dropped += 1
            continue
        s = _field(frag[:mp.start()])
        p = _field(frag[mp.end():mo.start()])
        o_raw = frag[mo.end():]
        cut = _close(o_raw)            # the object ends at the triple's closing parenthesis ...
        if cut < 0:
            cut = o_raw.find("(")      # ... or, if that is missing, where the next one opens
        o = _field(o_raw if cut < 0 else o_raw[:cut])
        if not (s and p and o):
            dropped += 1
            continue
        t = (s, p, o)
        if t not in seen:
            seen.add(t)
            out.append(t)
    # tuple-like parenthesised groups without an S> marker were triples the model mangled
    for g in _GROUP.findall(text):
        if not _S.search(g) and ("," in g or "|" in g):
            dropped += 1
    return TripleParse(out, dropped)


def format_triples(triples: Sequence[Triple], sep: str = ", ") -> str:
    """RAS's text form, separators included (the reference code joined without them)."""
    return sep.join(f"(S> {s}| P> {p}| O> {o})" for s, p, o in triples)


def clean_triples(raw) -> List[Triple]:
    """Cleans a dataset's raw triples (lists of 3 strings, possibly malformed/NaN)."""
    out: List[Triple] = []
    seen = set()
    for t in raw or []:
        if not isinstance(t, (list, tuple)) or len(t) != 3:
            continue
        if not all(isinstance(x, str) for x in t):
            continue
        tt = tuple(_WS.sub(" ", x).strip() for x in t)
        if all(tt) and tt not in seen:
            seen.add(tt)
            out.append(tt)  # type: ignore[arg-type]
    return out


__all__ = ["NoRetrieval", "Sufficient", "SubQuery", "PlanAction", "parse_plan",
           "TripleParse", "parse_triples", "format_triples", "clean_triples"]
