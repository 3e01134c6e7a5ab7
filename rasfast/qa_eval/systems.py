"""The systems ``rasfast eval qa`` runs, in two phases: *prepare* (everything a system does
before its final answer: retrieval, its LLM roles, its structure) and *read* (the reader
contract, :mod:`rasfast.llm.reader`, over the input the system hands its reader).

Splitting the two lets one preparation serve several readers and reader inputs: RAS's loop
serves ``ras``, ``ras+passages`` and ``ras-passages``; one GEAR agent run serves the
contract reader and GEAR's one-shot prompt; one KiRAG run serves k = 3 and k = 5. A
:class:`Prepared` is plain JSON (passages by id), cached per question like the final records.

Each system is one :class:`~.spec.SystemSpec` registered below (name, label, prompt modules,
LLM roles, whether it reads triples, its cache-key fields, its prepare phase and its reader
input); ``SYSTEMS``, ``FAMILY``, ``PREP`` and ``LABELS`` are live views of the registered
specs. The systems expose their preparation themselves
(:func:`rasfast.systems.build_system` with ``read=False``); nothing here patches them.
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from .spec import _SPECS, READER_PROMPT_MODULES, PrepareContext, SystemSpec, register_spec

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
    answer: Optional[str] = None                                 # a system with its own answer (SystemSpec.own_answer)

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
                        timings=_timings(r.trace), answer=r.answer)
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


# -- reader inputs ------------------------------------------------------------------------------
def _passages(ids, passage_of: Callable[[int], Any]):
    from ..types import RetrievedPassage
    out = []
    for i in ids:
        p = passage_of(int(i))
        if p is not None:
            out.append(RetrievedPassage(int(p.pid), p.title, p.text, 0.0))
    return out


def top_passages_input(question: str, prep: Prepared, k: int, passage_of: Callable[[int], Any]):
    """The reader reads the system's top ``k`` ranked passages (the default reader input)."""
    from ..llm.reader import ReaderInput
    return ReaderInput(question, _passages([int(pid) for pid, _ in prep.ranked[:k]], passage_of))


def _closed_book_input(question, prep, k, passage_of):
    from ..llm.reader import ReaderInput
    return ReaderInput(question)


def _blocks(prep: Prepared):
    return [(q, [tuple(t) for t in ts]) for q, ts in prep.blocks]


def _ras_facts_input(question, prep, k, passage_of):
    """RAS: every sub-query's triples (the paper's answering step)."""
    from ..llm.reader import ReaderInput
    return ReaderInput(question, [], _blocks(prep))


def _ras_both_input(question, prep, k, passage_of):
    """RAS+passages: the triples and every passage its rounds retrieved."""
    from ..llm.reader import ReaderInput
    return ReaderInput(question, _passages(prep.retrieved, passage_of), _blocks(prep))


def _ras_passages_input(question, prep, k, passage_of):
    """RAS reading its rounds' passages instead of their triples."""
    from ..llm.reader import ReaderInput
    return ReaderInput(question, _passages(prep.retrieved, passage_of), [])


def _structrag_input(question, prep, k, passage_of):
    """StructRAG: what its utilizer extracted from its structured knowledge."""
    from ..llm.reader import ReaderInput
    return ReaderInput(question, knowledge=prep.knowledge)


# -- preparations ---------------------------------------------------------------------------------
def _prepare_none(ctx: PrepareContext):
    return lambda q: Prepared()


def _prepare_baseline(kind: str):
    def prepare(ctx: PrepareContext):
        from ..systems.registry import base_retriever
        return _prep_retrieval(base_retriever(ctx.ki, ctx.encoder, kind))
    return prepare


def _prepare_ras(ctx: PrepareContext):
    from ..systems import build_system
    # the loop without its answering step: the read phase answers
    return _prep_ras(build_system("ras", ctx.ki, encoder=ctx.encoder, llm=ctx.llm, k=ctx.k,
                                  max_iters=ctx.max_iters, retriever=ctx.retriever, read=False))


def _prepare_ras_graphllm(ctx: PrepareContext):
    """The RAS loop with a trained GraphLLM as its planner and answerer (the graph soft token
    over each step's triples): the paper's setting, where the answer is the GraphLLM's own."""
    from ..systems.registry import LoopSystem, base_retriever, loop_extractor
    from ..systems.ras.loop import RAS
    if ctx.graphllm is None:
        raise ValueError("system ras-graphllm: needs a trained GraphLLM (eval qa --graphllm DIR, a run of "
                         "`rasfast graphllm train`)")
    planner, answerer = ctx.graphllm
    loop = RAS(base_retriever(ctx.ki, ctx.encoder, ctx.retriever), loop_extractor(ctx.ki), planner, answerer,
               max_iters=ctx.max_iters, k=ctx.k)
    return _prep_ras(LoopSystem(loop, "ras-graphllm"))


def _prepare_gear(mode: str, name: str):
    def prepare(ctx: PrepareContext):
        # the GEAR agent (or its single-step retriever) is GEAR's preparation itself; its
        # system (rasfast.systems.gear.system) adds only the reader
        from ..systems.gear.agent import GEAR
        from ..systems.registry import base_retriever
        if ctx.ki.graph.num_triples == 0:
            raise ValueError(f"system {name}: the index has no triples")
        g = GEAR(base_retriever(ctx.ki, ctx.encoder, ctx.retriever), ctx.ki.graph, ctx.ki.triple_emb,
                 llm=ctx.llm if mode != "naive" else None, mode=mode, max_iters=ctx.gear_iters)
        return _prep_gear(g, ctx.ki.graph)
    return prepare


def _prepare_kirag(ctx: PrepareContext):
    from ..systems import build_system
    opts: Dict[str, Any] = {"top_k": 10, "retriever": ctx.retriever, "read": False}
    if ctx.kirag_aligner is not None:
        opts["aligner"] = ctx.kirag_aligner
    return _prep_kirag(build_system("kirag", ctx.ki, encoder=ctx.encoder, llm=ctx.llm, **opts))


def _prepare_structrag(name: str):
    def prepare(ctx: PrepareContext):
        from ..systems import build_system
        return _prep_structrag(build_system(name, ctx.ki, encoder=ctx.encoder, llm=ctx.llm, k=ctx.k,
                                            retriever=ctx.retriever, read=False))
    return prepare


# -- cache-key fields and LLM roles of each family ---------------------------------------------
def _ras_key(c, spec) -> Dict[str, Any]:
    return {"k": c.k, "max_iters": c.max_iters, "prompt_style": c.prompt_style}


def _gear_key(c, spec) -> Dict[str, Any]:
    from ..systems.gear.agent import BEAM
    return {"beam": BEAM, **({"gear_iters": c.gear_iters} if spec.prep == "gear" else {})}


def _kirag_key(c, spec) -> Dict[str, Any]:
    from .signatures import aligner_id
    return {"aligner": aligner_id(c.kirag_aligner)}


def _ras_graphllm_key(c, spec) -> Dict[str, Any]:
    from .signatures import graphllm_id
    return {"k": c.k, "max_iters": c.max_iters, "graphllm": graphllm_id(c.graphllm)}


def _structrag_key(c, spec) -> Dict[str, Any]:
    return {"k": c.k, "router": c.router}


def _nonempty(t) -> bool:
    from ..llm.reader import finalize_answer
    return bool(finalize_answer(t))


def _ras_roles():
    from ..llm import compact_prompts as cp
    from ..llm import prompts as rp
    from ..parse import _TAG, parse_triples
    return [(cp.PLAN_TASK, "ras.planner", lambda t: cp.parse_plan_reply(t)[1]),
            (rp.PLANNER_INSTRUCTION, "ras.planner(paper)", lambda t: _TAG.search(t or "") is not None),
            (rp.TRIPLES_INSTRUCTION, "triples", lambda t: bool(parse_triples(t).triples))]


def _gear_roles():
    from ..systems.gear import prompts as gp
    return [(gp.READ_TASK, "gear.read", lambda t: bool(gp.parse_facts(t))),
            (gp.REASON_TASK, "gear.reason", lambda t: gp.parse_reason(t).parsed),
            (gp.REWRITE_TASK, "gear.rewrite", lambda t: gp.parse_rewrite(t) is not None)]


def _kirag_roles():
    from ..systems.kirag import prompts as kp
    return [(kp.CONSTRUCTOR_INSTRUCTION, "kirag.constructor",
             lambda t: bool(kp.parse_constructor(t, []).written) or kp.parse_constructor(t, []).answer is not None)]


def _structrag_roles():
    from ..systems.structrag import prompts as sp
    from ..systems.structrag.parse import parse_route
    rows = [(sp.ROUTER_INSTRUCTION, "structrag.router", lambda t: parse_route(t)[1]),
            (sp.DECOMPOSE_INSTRUCTION, "structrag.decompose", _nonempty)]
    for text in getattr(sp, "EXTRACT_INSTRUCTIONS", {}).values():
        rows.append((text, "structrag.utilizer.extract", _nonempty))
    for name in dir(sp):
        v = getattr(sp, name)
        if name.startswith("STRUCTURIZE") and isinstance(v, dict):
            for text in v.values():
                rows.append((text if isinstance(text, str) else str(text), "structrag.structurizer", _nonempty))
    return rows


# -- the built-in systems -----------------------------------------------------------------------
_RAS = dict(family="ras", prep="ras", prompt_modules=("rasfast.llm.compact_prompts", "rasfast.llm.prompts"),
            roles=_ras_roles, key=_ras_key, reads_triples=True, prompt_style=True, model_free=True)
_GEAR = dict(family="gear", prompt_modules=("rasfast.systems.gear.prompts",), roles=_gear_roles, key=_gear_key,
             reads_triples=True)
_STRUCTRAG = dict(family="structrag", prompt_modules=("rasfast.systems.structrag.prompts",),
                  roles=_structrag_roles, key=_structrag_key, model_free=True)

for _spec in (
        SystemSpec("none", "closed book", _prepare_none, _closed_book_input, family="reader", retrieves=False),
        SystemSpec("dense", "dense RAG", _prepare_baseline("dense"), top_passages_input, family="reader",
                   own_retriever="dense"),
        SystemSpec("bm25", "BM25 RAG", _prepare_baseline("bm25"), top_passages_input, family="reader",
                   own_retriever="bm25"),
        SystemSpec("hybrid", "hybrid RAG", _prepare_baseline("hybrid"), top_passages_input, family="reader",
                   own_retriever="hybrid"),
        SystemSpec("ras", "RAS", _prepare_ras, _ras_facts_input, **_RAS),
        SystemSpec("ras+passages", "RAS+passages (rasfast variant)", _prepare_ras, _ras_both_input, **_RAS),
        SystemSpec("ras-passages", "RAS reading its rounds' passages (rasfast variant)", _prepare_ras,
                   _ras_passages_input, **_RAS),
        SystemSpec("ras-graphllm", "RAS, its trained GraphLLM answering (paper's setting)", _prepare_ras_graphllm,
                   _ras_facts_input, family="ras-graphllm", key=_ras_graphllm_key, reads_triples=True,
                   own_answer=True),
        SystemSpec("gear", "GEAR (agent)", _prepare_gear("agent", "gear"), top_passages_input, **_GEAR),
        SystemSpec("gear-sync", "+ SyncGE (single step)", _prepare_gear("sync", "gear-sync"), top_passages_input,
                   **_GEAR),
        SystemSpec("gear-naive", "+ NaiveGE (single step)", _prepare_gear("naive", "gear-naive"),
                   top_passages_input, model_free=True, **_GEAR),
        SystemSpec("kirag", "KiRAG", _prepare_kirag, top_passages_input, family="kirag",
                   prompt_modules=("rasfast.systems.kirag.prompts",), roles=_kirag_roles, key=_kirag_key,
                   reads_triples=True, model_free=True),
        SystemSpec("structrag", "StructRAG", _prepare_structrag("structrag"), _structrag_input, **_STRUCTRAG),
        SystemSpec("structrag-chunk", "StructRAG chunk-only (rasfast variant)", _prepare_structrag("structrag-chunk"),
                   _structrag_input, **_STRUCTRAG)):
    register_spec(_spec)

# -- lookups over the registered specs ----------------------------------------------------------
def get_spec(name: str) -> SystemSpec:
    if name not in _SPECS:
        raise ValueError(f"system: expected one of {', '.join(_SPECS)}, got {name!r}")
    return _SPECS[name]


def specs() -> List[SystemSpec]:
    """Every registered spec, in registration order (the built-in ones first)."""
    return list(_SPECS.values())


def system_names() -> Tuple[str, ...]:
    return tuple(s.name for s in specs())


def prompt_modules() -> Dict[str, Tuple[str, ...]]:
    """family -> the modules holding its prompts; "reader" is the reader contract's."""
    out: Dict[str, Tuple[str, ...]] = {"reader": READER_PROMPT_MODULES}
    for s in specs():
        if s.prompt_modules:
            out.setdefault(s.family, s.prompt_modules)
    return out


def triple_families() -> Tuple[str, ...]:
    """The families whose preparations read the corpus's triples."""
    return tuple(dict.fromkeys(s.family for s in specs() if s.reads_triples))


def role_rows() -> List[tuple]:
    """Every spec's role-table rows, in registration order, each (marker, role) once."""
    out, seen = [], set()
    for s in specs():
        for row in s.roles():
            if (row[0], row[1]) not in seen:
                seen.add((row[0], row[1]))
                out.append(row)
    return out


class SpecTable(Mapping):
    """A live read-only mapping system -> one attribute of its spec (``FAMILY``, ``PREP``,
    ``LABELS``): a spec registered later appears in it."""

    def __init__(self, attr: str):
        self.attr = attr

    def __getitem__(self, name: str):
        if name not in _SPECS:
            raise KeyError(name)
        return getattr(_SPECS[name], self.attr)

    def __iter__(self) -> Iterator[str]:
        return iter(system_names())

    def __len__(self) -> int:
        return len(system_names())

    def __repr__(self) -> str:
        return repr(dict(self))


class SpecNames(Sequence):
    """The registered systems' names as a live sequence (``SYSTEMS``)."""

    def __getitem__(self, i):
        return system_names()[i]

    def __len__(self) -> int:
        return len(system_names())

    def __contains__(self, name) -> bool:
        return name in system_names()

    def __eq__(self, other) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, (tuple, list, SpecNames)) else NotImplemented

    def __repr__(self) -> str:
        return repr(system_names())


# live views of the registered specs (a spec registered later appears in them)
SYSTEMS = SpecNames()
FAMILY = SpecTable("family")       # system -> the family whose prompts and settings its cache keys hash
PREP = SpecTable("prep")           # system -> the preparation it reads from (systems sharing one share its cache)
LABELS = SpecTable("label")


def make_preparer(system: str, llm, ki, encoder, k: int, max_iters: int, *, retriever: str = "dense",
                  gear_iters: int = 4, kirag_aligner=None, graphllm=None) -> Callable[[str], Prepared]:
    """``system``'s preparation (its spec's ``prepare``) as a callable question -> Prepared;
    ``system`` may also name a preparation that a system shares (``PREP``'s values)."""
    ctx = PrepareContext(llm, ki, encoder, k, max_iters, retriever, gear_iters, kirag_aligner, graphllm)
    return get_spec(system).prepare(ctx)


def reader_input(system: str, question: str, prep: Prepared, k: int, passage_of: Callable[[int], Any]):
    """What ``system``'s reader is shown for a prepared question (rasfast.llm.reader.ReaderInput)."""
    return get_spec(system).reader_input(question, prep, k, passage_of)

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
    from .signatures import code_signature
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


__all__ = ["get_spec", "specs", "system_names", "prompt_modules", "triple_families", "role_rows",
           "make_preparer", "reader_input", "top_passages_input", "Prepared", "knowledge_index", "SYSTEMS", "FAMILY", "PREP",
           "LABELS", "load_aligner_dir", "model_free_triples", "extraction_record", "knowledge_id",
           "MODEL_FREE", "DEFAULT_MODEL_FREE"]
