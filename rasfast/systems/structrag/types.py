"""The data StructRAG's stages pass along: structure types, documents, structures, results.

A *structure* is what the structurizer made of one document (or, for the model-free graph
and table structurizers, of all documents of a question at once): its kind, a one-line
description (what the decomposer reads), the rendered text (what an LLM reads) and the
selectable *items* the utilizer's extraction ranks by embedding (table rows, triples,
chunks, lines of pseudo-code or catalogue entries).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

from ...llm.isolated import ErrorRecord
from ...types import RetrievedPassage, Triple
from ...profile import Trace

# the five structure types of the paper, in the order its router prompt names them
STRUCTURE_TYPES: Tuple[str, ...] = ("table", "graph", "algorithm", "catalogue", "chunk")
# what a router reply naming no known type falls back to: plain chunks assume nothing about
# the task, so a wrong fallback costs the least (the paper's single-hop default)
DEFAULT_TYPE = "chunk"
# kind of a structure whose structurizer output could not be parsed: the raw text is kept
TEXT_KIND = "text"


@dataclass
class Structure:
    """One structured piece of knowledge.

    kind: one of STRUCTURE_TYPES, or ``"text"`` when the structurizer's output was malformed
        and is kept as plain text.
    description: one line saying what the structure holds.
    content: the rendered structure (markdown table, triple lines, chunk text, pseudo-code,
        numbered catalogue).
    items: the units extraction selects from (str lines, or (s, p, o) triples for graphs).
    pids: the passages it was built from.
    header: lines repeated above any selection of items (a table's header and rule).
    graph: for graph structures built from triples, the :class:`rasfast.TripleGraph` over
        ``items`` (its CSR adjacency lets extraction follow a selected triple's neighbours).
    """
    kind: str
    description: str
    content: str
    items: List[Any] = field(default_factory=list)
    pids: List[int] = field(default_factory=list)
    header: List[str] = field(default_factory=list)
    graph: Any = None

    def item_text(self, item) -> str:
        """An item as the text that is embedded and shown to a reader."""
        if isinstance(item, tuple) and len(item) == 3:
            return f"({item[0]}, {item[1]}, {item[2]})"
        return str(item)


@dataclass
class StructRAGResult:
    """One question's trip through route -> structurize -> decompose -> extract -> infer."""
    question: str
    answer: Optional[str]
    structure_type: Optional[str]          # the routed type (after any fallback)
    route_raw: str                         # the router's reply as given
    route_fallback: bool                   # True when the reply named no known type
    passages: List[RetrievedPassage]       # the documents read, in rank order
    structures: List[Structure]
    subquestions: List[str]
    knowledge: List[str]                   # what extraction found, one entry per sub-question
    trace: Trace                           # shared by all questions of one run_batch call
    error: Optional[ErrorRecord] = None    # why the question stopped early, if it did
    doc_errors: List[ErrorRecord] = field(default_factory=list)  # documents not structurized
    shown: Optional[object] = None         # what the reader was shown (rasfast.llm.reader.ReaderInput)
    reply: Optional[str] = None            # the reader's raw reply

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def triples(self) -> List[Triple]:
        """Every triple of the question's graph structures."""
        return [t for s in self.structures if s.kind == "graph" for t in s.items]


def as_documents(documents: Sequence[Any], name: str = "documents") -> List[RetrievedPassage]:
    """Caller documents as passages: a str (text), a (title, text) pair, a mapping with
    title/text, or any object with ``title`` and ``text`` (rasfast passages). Documents
    without an int ``pid`` are numbered by position."""
    if isinstance(documents, (str, bytes)) or not isinstance(documents, Sequence):
        raise TypeError(f"{name}: expected a list of documents, got {type(documents).__name__}")
    out: List[RetrievedPassage] = []
    for i, d in enumerate(documents):
        if isinstance(d, RetrievedPassage):
            out.append(d)
        elif isinstance(d, str):
            out.append(RetrievedPassage(i, "", d))
        elif isinstance(d, (tuple, list)) and len(d) == 2 and all(isinstance(x, str) for x in d):
            out.append(RetrievedPassage(i, d[0], d[1]))
        elif isinstance(d, dict) and isinstance(d.get("text"), str):
            pid = d.get("pid", d.get("id", i))
            out.append(RetrievedPassage(pid if isinstance(pid, int) else i, str(d.get("title", "")), d["text"]))
        elif isinstance(getattr(d, "text", None), str) and isinstance(getattr(d, "title", None), str):
            pid = getattr(d, "pid", i)
            out.append(RetrievedPassage(pid if isinstance(pid, int) else i, d.title, d.text))
        else:
            raise TypeError(f"{name}[{i}]: expected a str, (title, text), a dict with 'text' or a "
                            f"passage, got {type(d).__name__}")
    return out


__all__ = ["STRUCTURE_TYPES", "DEFAULT_TYPE", "TEXT_KIND", "Structure", "StructRAGResult", "as_documents"]
