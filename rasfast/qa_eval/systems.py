"""The systems ``rasfast eval qa`` runs, in two phases: *prepare* (everything a system does
before its final answer: retrieval, its LLM roles, its structure) and *read* (the reader
contract, :mod:`rasfast.llm.reader`, over the input the system hands its reader).

Splitting the two lets one preparation serve several readers and reader inputs: RAS's loop
serves ``ras``, ``ras+passages`` and ``ras-passages``; one GEAR agent run serves the
contract reader and GEAR's one-shot prompt; one KiRAG run serves k = 3 and k = 5. A
:class:`Prepared` is plain JSON (passages by id), cached per question like the final records.
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional

# system -> the family whose prompts and settings its cache keys hash
FAMILY = {"none": "reader", "dense": "reader", "bm25": "reader", "hybrid": "reader",
          "ras": "ras", "ras+passages": "ras", "ras-passages": "ras",
          "gear": "gear", "gear-sync": "gear", "gear-naive": "gear",
          "kirag": "kirag", "structrag": "structrag", "structrag-chunk": "structrag"}
SYSTEMS = tuple(FAMILY)
# system -> the preparation it reads from (systems sharing one share its cache)
PREP = {"none": "none", "dense": "dense", "bm25": "bm25", "hybrid": "hybrid",
        "ras": "ras", "ras+passages": "ras", "ras-passages": "ras",
        "gear": "gear", "gear-sync": "gear-sync", "gear-naive": "gear-naive",
        "kirag": "kirag", "structrag": "structrag", "structrag-chunk": "structrag-chunk"}
# the retrieval baselines retrieve with their own retriever; the others with --retriever
BASELINE_RETRIEVER = {"dense": "dense", "bm25": "bm25", "hybrid": "hybrid"}
LABELS = {"none": "closed book", "dense": "dense RAG", "bm25": "BM25 RAG", "hybrid": "hybrid RAG",
          "ras": "RAS", "ras+passages": "RAS+passages (rasfast variant)",
          "ras-passages": "RAS reading its rounds' passages (rasfast variant)",
          "gear": "GEAR (agent)", "gear-sync": "+ SyncGE (single step)", "gear-naive": "+ NaiveGE (single step)",
          "kirag": "KiRAG", "structrag": "StructRAG",
          "structrag-chunk": "StructRAG chunk-only (rasfast variant)"}
RANKED = 50   # ranked passages a preparation keeps


@dataclass
class Prepared:
    """One question's preparation, JSON-ready: the ranked passages (ids, scores), what each
    step did, every passage id retrieved at any step, the system's trail, the raw material of
    its reader inputs, the error that stopped it (if any) and the LLM use it cost."""
    ranked: List[List[float]] = field(default_factory=list)      # [[pid, score], ...]
    steps: List[Dict[str, Any]] = field(default_factory=list)
    retrieved: List[int] = field(default_factory=list)
    trail: Dict[str, Any] = field(default_factory=dict)
    blocks: List[List[Any]] = field(default_factory=list)        # RAS: [[sub-query, [[s, p, o], ...]], ...]
    knowledge: str = ""                                          # StructRAG: what its utilizer extracted
    error: Optional[str] = None
    usage: Dict[str, Any] = field(default_factory=dict)          # llm_calls, tokens, seconds, calls, roles
    timings: Dict[str, float] = field(default_factory=dict)      # milliseconds per traced stage

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Prepared":
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in names})


def _pairs(passages, n: int = 20) -> List[list]:
    return [[int(p.pid), round(float(p.score), 5)] for p in list(passages)[:n]]


def _ids_pairs(ids, scores=None, n: int = 20) -> List[list]:
    ids = list(ids)[:n]
    sc = list(scores)[:n] if scores is not None else [None] * len(ids)
    return [[int(i), None if s is None else round(float(s), 5)] for i, s in zip(ids, sc)]


def _err(e) -> Optional[str]:
    if e is None:
        return None
    if isinstance(e, str):
        return e
    return (f"{getattr(e, 'stage', '')}: {getattr(e, 'error_type', type(e).__name__)}: "
            f"{getattr(e, 'message', str(e))}")[:300]


def _timings(trace) -> Dict[str, float]:
    try:
        return {r["stage"]: round(r["total_ms"], 3) for r in trace.summary_rows()}
    except Exception:  # noqa: BLE001 - timings are a nicety of the record
        return {}


def _ranked(passages) -> List[List[float]]:
    out = []
    for p in list(passages)[:RANKED]:
        s = float(p.score)
        out.append([int(p.pid), round(s, 6) if s == s and abs(s) != float("inf") else None])
    return out


# -- preparations ---------------------------------------------------------------------------------
def _prep_retrieval(retriever) -> Callable[[str], Prepared]:
    def prep(question: str) -> Prepared:
        from ..profile import Trace
        tr = Trace()
        with tr.activate():
            ps = retriever.retrieve([question], 20)[0]
        return Prepared(_ranked(ps), [{"query": question, "passages": _pairs(ps)}], [p.pid for p in ps],
                        timings=_timings(tr))
    return prep


def _prep_ras(system) -> Callable[[str], Prepared]:
    def prep(question: str) -> Prepared:
        r = system.run_batch([question])[0]
        d = r.detail
        steps = []
        for i, q in enumerate(d.subqueries):
            plan = [s for s in d.plan_steps if s.round == i]
            steps.append({"query": q, "passages": _pairs(d.step_passages[i]) if i < len(d.step_passages) else [],
                          "triples": [list(t) for t in d.step_triples[i]] if i < len(d.step_triples) else [],
                          "note": (f"plan: {plan[-1].decision}" + (f" ({plan[-1].raw.strip()[:200]})"
                                                                   if plan[-1].raw else "")) if plan else None})
        trail = {"subqueries": list(d.subqueries)}
        if d.plan_steps:
            trail["stopped"] = d.plan_steps[-1].decision
        blocks = [[q, [list(t) for t in (d.step_triples[i] if i < len(d.step_triples) else [])]]
                  for i, q in enumerate(d.subqueries)]
        return Prepared(_ranked(r.passages), steps, list(d.retrieved_pids), trail, blocks, "", _err(r.error),
                        timings=_timings(r.trace))
    return prep


def _prep_gear(gear, graph) -> Callable[[str], Prepared]:
    def triple(t):
        try:
            return list(graph.triples[int(t)])
        except Exception:  # noqa: BLE001 - a record never fails on a lookup
            return [str(t)]

    def prep(question: str) -> Prepared:
        d = gear.run_batch([question])[0]
        steps, seen = [], []
        for s in d.steps:
            steps.append({"query": s.query, "passages": _ids_pairs(s.passages, s.scores), "base": list(s.base[:20]),
                          "triples": [list(t) for t in s.proximal],
                          "chains": [[triple(t) for t in c] for c in s.chains[:10]],
                          "note": (f"answerable: {s.verdict}" + (f" ({s.reason[:200]})" if s.reason else ""))
                          if s.verdict else None, "tokens": dict(s.tokens)})
            seen += list(s.base) + list(s.passages)
        trail = {"stopped": d.stopped, "agent_answer": d.agent_answer, "memory": [list(t) for t in d.memory],
                 "iterations": [{"round": s.round, "passages": lst[:15], **s.tokens}
                                for s, lst in zip(d.steps, d.iteration_lists)]}
        seen += [p.pid for p in d.passages]
        return Prepared(_ranked(d.passages), steps, list(dict.fromkeys(int(x) for x in seen)), trail,
                        error=_err(d.error), timings=_timings(d.trace))
    return prep


def _prep_kirag(system) -> Callable[[str], Prepared]:
    def prep(question: str) -> Prepared:
        r = system.run_batch([question])[0]
        steps, seen = [], []
        for s in r.steps:
            steps.append({"query": s.query, "passages": _ids_pairs(s.retrieved),
                          "triples": [list(t) for t in s.candidates[:20]],
                          "chains": [[list(s.chosen)]] if s.chosen else [],
                          "note": "constructor: " + ("stop" if s.decision.stop else "continue")
                                  + (" (fallback)" if s.decision.fallback else "")})
            seen += list(s.retrieved)
        seen += [p.pid for p in r.passages]
        err = "; ".join(f"{k}: {v}" for k, v in (r.errors or {}).items()) or None
        trail = {"stopped": r.stopped, "chain": [list(t) for t in r.chain], "constructor_answer": r.answer}
        return Prepared(_ranked(r.passages), steps, list(dict.fromkeys(int(x) for x in seen)), trail,
                        [["", [list(t) for t in r.chain]]], "", err, timings=_timings(r.trace))
    return prep


def _prep_structrag(system) -> Callable[[str], Prepared]:
    def prep(question: str) -> Prepared:
        r = system.run_batch([question])[0]
        steps = [{"query": r.question, "passages": _pairs(r.passages),
                  "note": f"routed to {r.structure_type}" + (" (fallback)" if r.route_fallback else ""),
                  "subquestions": list(r.subquestions)}]
        trail = {"structure": r.structure_type, "route_fallback": bool(r.route_fallback)}
        knowledge = r.shown.knowledge if r.shown is not None else ""
        return Prepared(_ranked(r.passages), steps, [p.pid for p in r.passages], trail, [], knowledge, _err(r.error),
                        timings=_timings(r.trace))
    return prep


def make_preparer(prep: str, llm, ki, encoder, k: int, max_iters: int, *, retriever: str = "dense",
                  gear_iters: int = 4, kirag_aligner=None) -> Callable[[str], Prepared]:
    """The preparation ``prep`` (a value of :data:`PREP`) as a callable question -> Prepared."""
    from ..systems import build_system
    from ..systems.registry import base_retriever
    if prep == "none":
        return lambda q: Prepared()
    if prep in BASELINE_RETRIEVER:
        return _prep_retrieval(base_retriever(ki, encoder, BASELINE_RETRIEVER[prep]))
    if prep == "ras":
        system = build_system("ras", ki, encoder=encoder, llm=llm, k=k, max_iters=max_iters, retriever=retriever)
        system.ras.answerer = _Deferred()
        return _prep_ras(system)
    if prep in ("gear", "gear-sync", "gear-naive"):
        from ..systems.gear.agent import GEAR
        if ki.graph.num_triples == 0:
            raise ValueError(f"system {prep}: the index has no triples")
        mode = {"gear": "agent", "gear-sync": "sync", "gear-naive": "naive"}[prep]
        g = GEAR(base_retriever(ki, encoder, retriever), ki.graph, ki.triple_emb, llm=llm if mode != "naive" else None,
                 mode=mode, max_iters=gear_iters)
        return _prep_gear(g, ki.graph)
    if prep == "kirag":
        opts: Dict[str, Any] = {"top_k": 10, "retriever": retriever}
        if kirag_aligner is not None:
            opts["aligner"] = kirag_aligner
        system = build_system("kirag", ki, encoder=encoder, llm=llm, **opts)
        system.reader = None          # the reader runs in the read phase
        return _prep_kirag(system)
    if prep in ("structrag", "structrag-chunk"):
        system = build_system(prep, ki, encoder=encoder, llm=llm, k=k, retriever=retriever)
        system.utilizer.defer_reading = True
        return _prep_structrag(system)
    raise ValueError(f"systems: unknown preparation {prep!r}")


class _Deferred:
    """A RAS answerer that answers nothing: the read phase answers."""

    def answer(self, states):
        return [None for _ in states]


def reader_input(system: str, question: str, prep: Prepared, k: int, passage_of: Callable[[int], Any]):
    """What ``system``'s reader is shown for a prepared question (rasfast.llm.reader.ReaderInput)."""
    from ..llm.reader import ReaderInput
    from ..types import RetrievedPassage

    def ps(ids):
        out = []
        for i in ids:
            p = passage_of(int(i))
            if p is not None:
                out.append(RetrievedPassage(int(p.pid), p.title, p.text, 0.0))
        return out
    top = [int(pid) for pid, _ in prep.ranked[:k]]
    fam = FAMILY[system]
    if system == "none":
        return ReaderInput(question)
    if fam == "ras":
        blocks = [(q, [tuple(t) for t in ts]) for q, ts in prep.blocks]
        if system == "ras":
            return ReaderInput(question, [], blocks)
        allp = ps(prep.retrieved)
        return ReaderInput(question, allp, blocks if system == "ras+passages" else [])
    if fam == "structrag":
        return ReaderInput(question, knowledge=prep.knowledge)
    return ReaderInput(question, ps(top))


def load_aligner_dir(path) -> Any:
    """The trained KiRAG aligner saved in ``path`` (rasfast kirag train), or ValueError."""
    from ..systems.kirag.aligner import load_aligner
    p = pathlib.Path(path)
    if not p.is_dir():
        raise ValueError(f"--kirag-aligner: {p} is not a directory")
    try:
        return load_aligner(p)
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"--kirag-aligner: {p} does not hold a trained aligner ({e})") from None


# the model-free extractors a corpus that ships no triples can get: name -> (module, class,
# the model its extraction record names). The module's code keys the triples it makes.
MODEL_FREE = {"sentence-patterns": ("rasfast.systems.ras.extractors", "SentenceTripleExtractor",
                                    "rasfast.SentenceTripleExtractor"),
              "sentence-patterns-2": ("rasfast.systems.ras.pattern_triples", "PatternTripleExtractor",
                                      "rasfast.PatternTripleExtractor")}
DEFAULT_MODEL_FREE = "sentence-patterns"


def _model_free(extractor: Optional[str]):
    name = extractor or DEFAULT_MODEL_FREE
    if name not in MODEL_FREE:
        raise ValueError(f"model-free triples: expected one of {', '.join(MODEL_FREE)}, got {name!r}")
    return name, MODEL_FREE[name]


def extraction_record(ds, extractor: Optional[str] = None) -> Dict[str, Any]:
    """What made the dataset's triples: the dataset itself, or one of rasfast's model-free
    extractors, named with a signature of its module's current code (a changed extractor
    makes other triples, so it must not reuse an index or records built from the old ones)."""
    from ..index.knowledge.extract import corpus_record
    if ds.triples is not None:
        return corpus_record(ds.name)
    from .run import code_signature
    _, (module, _cls, model) = _model_free(extractor)
    return {"source": "model-free", "model": model, "prompt": None,
            "prompt_sha256": None, "extractor_sha256": code_signature(module)[:16]}


def knowledge_id(ds, extractor: Optional[str] = None) -> Optional[str]:
    """The cache-key field for triples rasfast extracted itself (a hash of their extraction
    record); None for a dataset's own triples, which its name already keys."""
    if ds.triples is not None:
        return None
    rec = json.dumps(extraction_record(ds, extractor), sort_keys=True)
    return hashlib.sha256(rec.encode()).hexdigest()[:16]


def knowledge_index(ds, encoder, cache: pathlib.Path, extractor: Optional[str] = None):
    """The dataset's corpus as a knowledge index (its own triples), cached on disk. A corpus
    without triples (HotpotQA) gets model-free sentence-pattern triples (``extractor``, a
    name in :data:`MODEL_FREE`), and its extraction record says so. A cached index is reused
    only if it covers every passage and its extraction record is the one the triples would
    be made with now."""
    from ..index.knowledge.index import KnowledgeIndex, is_knowledge_index
    name, _ = _model_free(extractor)
    other = ds.triples is None and name != DEFAULT_MODEL_FREE
    d = cache / "index" / f"{ds.name}-{encoder.name.replace('/', '_')}{'-' + name if other else ''}"
    rec = extraction_record(ds, name)
    if is_knowledge_index(d):
        ki = KnowledgeIndex.load(d)
        if len(ki) == len(ds.passages) and ki.extraction == rec:
            return ki
        print(f"knowledge index {d}: built from other triples ({ki.extraction.get('model')}, "
              f"{len(ki)} passages); building it again", file=sys.stderr)
    triples = ds.triples if ds.triples is not None else model_free_triples(ds, name)
    ki = KnowledgeIndex.build(ds.passages, triples, encoder, rec)
    ki.save(d)
    return ki


def model_free_triples(ds, extractor: Optional[str] = None) -> List[list]:
    """Model-free triples of every passage (``extractor``: a name in :data:`MODEL_FREE`), for
    a corpus that ships none."""
    import importlib
    from ..types import RetrievedPassage
    _, (module, cls, _model) = _model_free(extractor)
    ext = getattr(importlib.import_module(module), cls)()
    got = ext.extract([RetrievedPassage(p.pid, p.title, p.text) for p in ds.passages])
    return [[list(t) for t in ts] for ts in got]


__all__ = ["make_preparer", "reader_input", "Prepared", "knowledge_index", "SYSTEMS", "FAMILY", "PREP",
           "LABELS", "load_aligner_dir", "model_free_triples", "extraction_record", "knowledge_id",
           "MODEL_FREE", "DEFAULT_MODEL_FREE"]
