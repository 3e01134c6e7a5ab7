"""Structurizers: documents -> structures of the routed type.

- Model-free, from the knowledge graph's triples (no LLM call):
  :func:`graph_structure` (the triples of a question's documents as one
  :class:`rasfast.TripleGraph`: entities normalised and deduplicated, CSR adjacency that
  extraction follows), :func:`table_structure` (the same triples pivoted: one row per
  subject, one column per predicate, markdown with escaped cells) and
  :func:`chunk_structures` (each document as a chunk).
- :class:`LLMStructurizer`: the paper's per-document structurizer for all five types, every
  (question, document) request of a batch sent in one concurrent call.
- :class:`HybridStructurizer` (the default): with an LLM, the paper's structurizer for every
  graph/table/algorithm/catalogue document (per document, question-aware); the stored,
  question-independent triples are the model-free fallback used only without an LLM (or when
  ``use_triples=True`` asks for them), and a chunk when neither applies. It counts which path
  each document took.

A structurizer maps tasks ``(question, kind, documents)`` to :class:`StructureSet` results:
the structures plus the documents that failed (a failing document never shifts another's
structures and never stops its question).
"""
from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ...llm.isolated import ErrorRecord
from ...parse import clean_triples
from ...types import RetrievedPassage, Triple
from ._llm import check_llm, generate_isolated
from .parse import markdown_table, parse_structure
from .prompts import structurizer_messages
from .types import STRUCTURE_TYPES, Structure


@dataclass
class StructTask:
    question: str
    kind: str
    documents: List[RetrievedPassage]


@dataclass
class StructureSet:
    structures: List[Structure] = field(default_factory=list)
    doc_errors: List[ErrorRecord] = field(default_factory=list)


def _titles(docs: Sequence[RetrievedPassage], n: int = 4) -> str:
    t = [d.title for d in docs if d.title][:n]
    more = len([d for d in docs if d.title]) - len(t)
    return ", ".join(t) + (f" and {more} more" if more > 0 else "")


def graph_structure(triples_by_doc: Sequence[Tuple[int, Sequence[Triple]]], titles: str = "",
                    max_degree: Optional[int] = None) -> Optional[Structure]:
    """The documents' triples as one graph structure (None when there are none).

    Built as a :class:`rasfast.TripleGraph`: malformed triples are skipped, entities
    normalised, and triples that share an entity are neighbours in its CSR adjacency."""
    from ...graph import TripleGraph
    flat: List[Triple] = []
    pids: List[int] = []
    for pid, triples in triples_by_doc:
        for t in clean_triples(triples):
            flat.append(t)
            pids.append(int(pid))
    if not flat:
        return None
    seen: Dict[Triple, int] = {}
    for i, t in enumerate(flat):
        seen.setdefault(t, i)
    keep = sorted(seen.values())
    kept_pids = [pids[i] for i in keep]
    g = TripleGraph.from_triples([flat[i] for i in keep], kept_pids if min(kept_pids) >= 0 else None,
                                 max_degree=max_degree)
    items = list(g.triples)
    ents = list(dict.fromkeys(s for s, _, _ in items))[:5]
    desc = (f"knowledge graph of {len(items)} (head, relation, tail) triples"
            + (f" about {', '.join(ents)}" if ents else "") + (f" (from {titles})" if titles else ""))
    content = "\n".join(f"({s} | {p} | {o})" for s, p, o in items)
    return Structure("graph", desc, content, items, list(dict.fromkeys(int(p) for p, _ in triples_by_doc)),
                     graph=g)


def table_structure(triples_by_doc: Sequence[Tuple[int, Sequence[Triple]]], titles: str = "",
                    max_columns: int = 12) -> Optional[Structure]:
    """The documents' triples pivoted into a table (None when there are none).

    Rows: subjects in first-appearance order; columns: the ``max_columns`` most frequent
    predicates (ties by first appearance), shown in first-appearance order (rarer
    predicates go to an ``other`` column as ``predicate: object``); a cell holding several objects joins them with ``; ``."""
    flat = [t for _, tr in triples_by_doc for t in clean_triples(tr)]
    if not flat:
        return None
    freq = Counter(p for _, p, _ in flat)
    order = list(dict.fromkeys(p for _, p, _ in flat))
    top = set(sorted(order, key=lambda p: (-freq[p], order.index(p)))[:max_columns])
    cols = [p for p in order if p in top]          # shown in first-appearance order
    col_ix = {p: i for i, p in enumerate(cols)}
    has_other = len(order) > len(cols)
    rows: Dict[str, List[List[str]]] = {}
    for s, p, o in flat:
        row = rows.setdefault(s, [[] for _ in range(len(cols) + has_other)])
        cell = row[col_ix[p]] if p in col_ix else row[-1]
        val = o if p in col_ix else f"{p}: {o}"
        if val not in cell:
            cell.append(val)
    columns = ["entity", *cols] + (["other"] if has_other else [])
    header, body = markdown_table(columns, [[s, *("; ".join(c) for c in cells)] for s, cells in rows.items()])
    desc = (f"table of {len(rows)} entities x {len(columns) - 1} attributes ({', '.join(cols[:6])}"
            + (", ..." if len(cols) > 6 else "") + ")" + (f" from {titles}" if titles else ""))
    return Structure("table", desc, "\n".join(header + body), body,
                     list(dict.fromkeys(int(p) for p, _ in triples_by_doc)), header)


def chunk_structures(documents: Sequence[RetrievedPassage]) -> List[Structure]:
    """Each document as one chunk structure (the paper's chunk: the text itself)."""
    out = []
    for d in documents:
        text = f"{d.title}: {d.text}" if d.title else d.text
        first = d.text.strip().split(". ")[0][:120]
        out.append(Structure("chunk", f"{d.title}: {first}" if d.title else first, text, [text], [d.pid]))
    return out


class LLMStructurizer:
    """The paper's structurizer: one LLM request per (question, document), all requests of a
    batch in ONE concurrent ``generate`` call; replies parsed by
    :func:`~rasfast.systems.structrag.parse.parse_structure` (malformed -> kept as text)."""

    def __init__(self, llm, max_new_tokens: int = 512, temperature: float = 0.0, max_doc_chars: int = 12000):
        check_llm(llm)
        self.llm, self.max_new_tokens, self.temperature = llm, max_new_tokens, temperature
        self.max_doc_chars = max_doc_chars
        self.requests = 0
        self.stats = {"docs_cut": 0}   # documents longer than max_doc_chars (cut, warned)

    def structurize(self, tasks: Sequence[StructTask]) -> List[StructureSet]:
        jobs = [(t, d) for t in tasks for d in t.documents]
        return self._run(tasks, jobs)

    def _run(self, tasks: Sequence[StructTask], jobs) -> List[StructureSet]:
        out = {id(t): StructureSet() for t in tasks}
        long = [d for _, d in jobs if len(d.text) > self.max_doc_chars]
        if long:
            from .utilize import KnowledgeCutWarning
            self.stats["docs_cut"] += len(long)
            warnings.warn(f"{len(long)} document(s) longer than max_doc_chars="
                          f"{self.max_doc_chars} cut before structurizing (first: passage "
                          f"{long[0].pid}, {len(long[0].text)} characters)", KnowledgeCutWarning,
                          stacklevel=3)
        prompts = [structurizer_messages(t.kind, t.question, d.title, d.text[: self.max_doc_chars])
                   for t, d in jobs]
        replies, errs = generate_isolated(self.llm, prompts, self.max_new_tokens, self.temperature)
        self.requests += len(prompts)
        for j, ((t, d), text) in enumerate(zip(jobs, replies)):
            if j in errs:
                out[id(t)].doc_errors.append(ErrorRecord("structurize", type(errs[j]).__name__,
                                                         f"document {d.pid}: {errs[j]}", 0))
            else:
                out[id(t)].structures.append(parse_structure(t.kind, text, [d.pid], d.title))
        return [out[id(t)] for t in tasks]


class HybridStructurizer:
    """Model-free where the data allows, the LLM otherwise (see the module docstring).

    Args:
        llm: optional backend for the LLM structurizer (algorithm, catalogue, and graph/table
            documents without triples). Without one those documents become chunks.
        triples_by_pid: passage id -> list of (s, p, o) triples (the knowledge graph's).
        use_triples: build graph/table from the stored triples where a document has them.
            Default (None): only without an LLM -- with one, the LLM structurizer reads
            each document with the question, as the paper does. True: stored triples even
            with an LLM (cheaper, question-independent); False: never.
        llm_chunks: also send ``chunk`` tasks to the LLM (default: the text is the chunk).
        table_max_columns: predicates kept as table columns.
        kg_hops: for graph/table tasks, also follow the corpus knowledge graph this many hops
            from the documents' entities (triples whose subject is an entity reached so far).
            0 (default) is the paper's behaviour: only the documents' own knowledge. Useful
            when retrieval runs once and a chain's later links live in other passages.
        kg_max_triples: cap on the triples a structure collects while following the KG.
    ``stats`` counts documents per path: ``triples``, ``llm``, ``chunk`` (as given) and
    ``chunk_fallback`` (wanted another type, had neither triples nor an LLM)."""

    def __init__(self, llm=None, triples_by_pid: Optional[Mapping[int, Sequence[Triple]]] = None,
                 use_triples: Optional[bool] = None, llm_chunks: bool = False,
                 table_max_columns: int = 12,
                 max_new_tokens: int = 512, kg_hops: int = 0, kg_max_triples: int = 2000):
        if not isinstance(kg_hops, int) or isinstance(kg_hops, bool) or kg_hops < 0:
            raise ValueError(f"kg_hops: expected an int >= 0, got {kg_hops!r}")
        self.llm = LLMStructurizer(llm, max_new_tokens) if llm is not None else None
        if triples_by_pid is not None and not isinstance(triples_by_pid, Mapping):
            raise TypeError(f"triples_by_pid: expected a mapping passage id -> triples, got "
                            f"{type(triples_by_pid).__name__}")
        self.triples_by_pid = triples_by_pid or {}
        self.use_triples = (llm is None) if use_triples is None else bool(use_triples)
        self.llm_chunks = llm_chunks
        self.table_max_columns = table_max_columns
        self.kg_hops, self.kg_max_triples = kg_hops, kg_max_triples
        self._by_subject: Optional[Dict[str, List[Tuple[int, Triple]]]] = None
        self.stats: Counter = Counter()

    def _follow_kg(self, from_kg: List[Tuple[int, Sequence[Triple]]]) -> List[Tuple[int, Sequence[Triple]]]:
        """``from_kg`` plus the corpus triples reached in ``kg_hops`` hops (grouped by passage)."""
        from ...reference.triple_graph import normalize_entity
        if self._by_subject is None:
            idx: Dict[str, List[Tuple[int, Triple]]] = {}
            for pid, triples in self.triples_by_pid.items():
                for t in clean_triples(triples):
                    idx.setdefault(normalize_entity(t[0]), []).append((int(pid), t))
            self._by_subject = idx
        seen_pids = {pid for pid, _ in from_kg}
        n = sum(len(t) for _, t in from_kg)
        visited = set()
        frontier = {normalize_entity(x) for _, tr in from_kg for t in clean_triples(tr) for x in (t[0], t[2])}
        extra: Dict[int, List[Triple]] = {}
        for _ in range(self.kg_hops):
            nxt = set()
            for e in sorted(frontier - visited):
                visited.add(e)
                for pid, t in self._by_subject.get(e, ()):
                    if pid in seen_pids or n >= self.kg_max_triples:
                        continue
                    extra.setdefault(pid, []).append(t)
                    n += 1
                    nxt.add(normalize_entity(t[2]))
            seen_pids.update(extra)
            frontier = nxt
        self.stats["kg_triples"] += sum(len(v) for v in extra.values())
        return list(from_kg) + list(extra.items())

    def _triples(self, d: RetrievedPassage) -> Optional[Sequence[Triple]]:
        if not self.use_triples:
            return None
        t = self.triples_by_pid.get(d.pid)
        return t if t else None

    def structurize(self, tasks: Sequence[StructTask]) -> List[StructureSet]:
        for t in tasks:
            if t.kind not in STRUCTURE_TYPES:
                raise ValueError(f"kind: expected one of {STRUCTURE_TYPES}, got {t.kind!r}")
        sets = [StructureSet() for _ in tasks]
        llm_jobs: List[Tuple[StructTask, RetrievedPassage]] = []
        llm_owner: Dict[int, int] = {}
        for i, t in enumerate(tasks):
            from_kg: List[Tuple[int, Sequence[Triple]]] = []
            chunks: List[RetrievedPassage] = []
            for d in t.documents:
                tr = self._triples(d) if t.kind in ("graph", "table") else None
                if tr is not None:
                    from_kg.append((d.pid, tr))
                    self.stats["triples"] += 1
                elif self.llm is not None and (t.kind != "chunk" or self.llm_chunks):
                    llm_jobs.append((t, d))
                    llm_owner[id(t)] = i
                    self.stats["llm"] += 1
                else:
                    chunks.append(d)
                    self.stats["chunk" if t.kind == "chunk" else "chunk_fallback"] += 1
            titles = _titles([d for d in t.documents if any(p == d.pid for p, _ in from_kg)])
            if from_kg and self.kg_hops:
                from_kg = self._follow_kg(from_kg)
            if from_kg:
                s = graph_structure(from_kg, titles) if t.kind == "graph" else \
                    table_structure(from_kg, titles, self.table_max_columns)
                if s is not None:
                    sets[i].structures.append(s)
            sets[i].structures.extend(chunk_structures(chunks))
        if llm_jobs:
            got = self.llm._run([t for t in tasks if id(t) in llm_owner], llm_jobs)
            for t, s in zip([t for t in tasks if id(t) in llm_owner], got):
                i = llm_owner[id(t)]
                sets[i].structures.extend(s.structures)
                sets[i].doc_errors.extend(s.doc_errors)
        return sets


__all__ = ["StructTask", "StructureSet", "graph_structure", "table_structure", "chunk_structures",
           "LLMStructurizer", "HybridStructurizer"]
