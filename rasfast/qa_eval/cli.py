"""``rasfast eval qa``: its options and its command.

``--report`` reads the per-question records and runs no model. Its layouts:

- ``table`` (default): one row per system; ``--systems gear@hybrid,...`` puts several
  settings (a base retriever per system) in one table, ``--dataset a,b`` reports several
  datasets one after the other;
- ``qa-local``: the tables of ``benchmarks/results/qa_local.md`` (:mod:`.report_md`; default
  systems and retrievers: :data:`.report_md.MAIN`), ``--update MD`` rewrites them in place
  between their markers, ``--before DIR`` adds a previous round's records;
- ``gear-agent``: ``benchmarks/results/gear_agent.md`` (:mod:`.gear_report`).

``--kirag-aligner`` names the KiRAG aligner by its directory or its content id (enough for a
report, and for a run whose KiRAG preparations are all cached: a rerun of the read phase), and ``DATASET=...`` gives it to one dataset only; ``--reader-prompts round3``
reports records read by the committed round-3 reader."""
from __future__ import annotations

import json
import pathlib
import re
import sys

from .run import DATASETS, evaluate_qa, llm_label, report_qa
from .systems import SYSTEMS

RETRIEVERS = ("dense", "bm25", "hybrid")
LAYOUTS = ("table", "qa-local", "gear-agent")
DEFAULT_SYSTEMS = "none,dense,ras"
_ALIGNER_ID = re.compile(r"^[0-9a-f]{16}$")


def add_args(e) -> None:
    """The options of ``rasfast eval qa`` that are its own (its parser, rasfast/cli/evaluate.py,
    adds the dataset, encoder, retriever, LLM and output options)."""
    from .._validate import positive_int
    e.add_argument("--systems", default=None, metavar="NAME[@RETRIEVER],...",
                   help=f"comma-separated systems from {','.join(SYSTEMS)} (default: {DEFAULT_SYSTEMS}); "
                        f"NAME@RETRIEVER runs or reports that system on another base retriever than --retriever, "
                        f"so several settings share one table")
    e.add_argument("--limit", type=positive_int, default=None, help="the first N questions")
    e.add_argument("--questions", default=None, metavar="A-B",
                   help="questions A to B (1-based, inclusive), e.g. 51-100 for a held-out half")
    e.add_argument("--cache-dir", default=None, help="per-question result cache (resumable)")
    e.add_argument("--report", action="store_true",
                   help="print (and --json) what the cache holds for these settings; loads no model, runs nothing")
    e.add_argument("--layout", default="table", choices=LAYOUTS,
                   help="with --report: one table (default), the tables of benchmarks/results/qa_local.md "
                        "(qa-local: held-out table, answer depth, KiRAG at k 3 and 5, failure stages, parse "
                        "failures; questions 51-100 by default), or gear_agent.md (gear-agent: GEAR's retrievers "
                        "and agent against the paper's tables; encodes the corpora, no LLM)")
    e.add_argument("--md", default=None, metavar="FILE",
                   help="with --layout qa-local|gear-agent: also write the markdown here (gear-agent appends "
                        "FILE's <name>_analysis.md when there is one)")
    e.add_argument("--update", default=None, metavar="MD",
                   help="with --layout qa-local: rewrite the tables inside MD (between its "
                        "<!-- qa_local_report: NAME --> markers), keeping the prose around them")
    e.add_argument("--before", default=None, metavar="DIR",
                   help="with --layout qa-local: a previous round's records, reported as 'before this round'")
    e.add_argument("--reader", default="contract", choices=["contract", "one-shot"],
                   help="the reader prompt every system answers through: the zero-shot contract, or "
                        "GEAR's App. J.3 one-shot prompt (passages only)")
    e.add_argument("--gear-iters", type=positive_int, default=None,
                   help="GEAR agent rounds (default: the paper's, 4 on MuSiQue, 2 on HotpotQA/2Wiki)")
    e.add_argument("--kirag-aligner", default=None, metavar="[DATASET=]DIR",
                   help="KiRAG's trained aligner (rasfast kirag train --out DIR; default: zero-shot MiniLM); with "
                        "--report, or a run whose KiRAG preparations are cached, its content id (16 hex digits); "
                        "DATASET=... for one dataset only, "
                        "several comma-separated")
    e.add_argument("--graphllm", default=None, metavar="DIR",
                   help="the trained GraphLLM (rasfast graphllm train --out DIR) that system ras-graphllm plans "
                        "and answers with: the paper's setting, its own answer instead of the reader's")
    e.add_argument("--model-free-triples", default=None, metavar="NAME",
                   help="for a dataset that ships no triples (HotpotQA), the model-free extractor that "
                        "makes them: sentence-patterns (default) or sentence-patterns-2 (keeps whole dates, "
                        "full names and every list item); keyed apart in the cache")
    e.add_argument("--reader-prompts", default=None, metavar="ID",
                   help="with --report: the reader prompt signature the records were read with (default: the "
                        "current reader's; round3 = d1a975aed2077a05, the committed records' reader before the "
                        "yes/no answer-shape rule)")
    e.add_argument("--html", default=None, metavar="FILE",
                   help="also write an offline HTML report here (table, failure stages, every question's pages)")


def parse_settings(text, retriever: str = "dense"):
    """``--systems`` -> [(system, base retriever)]: ``NAME`` on ``retriever``, ``NAME@RETRIEVER``
    on its own; a system named twice is refused (its rows would collide)."""
    out = []
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        name, _, ret = part.partition("@")
        ret = ret or retriever
        if ret not in RETRIEVERS:
            raise ValueError(f"systems: {part!r}: the retriever after @ is one of {', '.join(RETRIEVERS)}")
        out.append((name, ret))
    names = [s for s, _ in out]
    bad = [s for s in names if s not in SYSTEMS]
    if bad or not out:
        raise ValueError(f"systems: expected names from {', '.join(SYSTEMS)}, got {names!r}")
    twice = sorted({s for s in names if names.count(s) > 1})
    if twice:
        raise ValueError(f"systems: {', '.join(twice)} named twice (one base retriever per system and table)")
    return out


def _fail(message: str) -> int:
    print(message, file=sys.stderr)
    return 1


def cmd_eval_qa(args) -> int:
    if not getattr(args, "llm", None):
        return _fail("eval qa needs --llm (e.g. --llm local)")
    datasets = [d for d in str(args.dataset or "").split(",") if d]
    bad = [d for d in datasets if d not in DATASETS]
    if bad or not datasets:
        return _fail(f"eval qa: --dataset expected one of {', '.join(DATASETS)}, got {args.dataset!r}")
    report = getattr(args, "report", False)
    layout = getattr(args, "layout", "table") or "table"
    if not report and (layout != "table" or len(datasets) > 1):
        what = f"--layout {layout}" if layout != "table" else "several datasets"
        return _fail(f"eval qa: {what} needs --report (it reads the records; run the datasets one at a time)")
    for opt in ("md", "update", "before"):
        if getattr(args, opt, None) and (layout == "table" or layout == "gear-agent" and opt != "md"):
            return _fail(f"eval qa: --{opt} goes with --report --layout qa-local" + ("|gear-agent" if opt == "md" else ""))
    if getattr(args, "html", None) and (layout != "table" or len(datasets) > 1):
        return _fail("eval qa: --html writes one dataset's table (--layout table, one --dataset)")
    systems = args.systems or (None if layout != "table" else DEFAULT_SYSTEMS)
    try:
        settings = parse_settings(systems, args.retriever) if systems else None
        from .report_md import aligners_by_dataset
        aligners = aligners_by_dataset([v for v in (args.kirag_aligner or "").split(",") if v], datasets)
    except ValueError as e:
        return _fail(f"eval qa: {e}" if str(e).startswith("--") else str(e))
    cache = pathlib.Path(args.cache_dir) if args.cache_dir else None
    if cache is not None and cache.exists() and not cache.is_dir():
        return _fail(f"eval qa: --cache-dir {args.cache_dir}: not a directory")
    for al in dict.fromkeys(a for a in aligners.values() if a):
        if not pathlib.Path(al).is_dir() and not _ALIGNER_ID.match(al):
            return _fail(f"eval qa: --kirag-aligner {al}: not a directory (expected a saved aligner: rasfast "
                         f"kirag train --out DIR, or its 16-hex-digit id)")
    if getattr(args, "graphllm", None) and not pathlib.Path(args.graphllm).is_dir():
        return _fail(f"eval qa: --graphllm {args.graphllm}: not a directory (expected a run of rasfast graphllm "
                     "train --out DIR)")
    if getattr(args, "before", None) and not pathlib.Path(args.before).is_dir():
        return _fail(f"eval qa: --before {args.before}: not a directory")
    if getattr(args, "update", None) and not pathlib.Path(args.update).is_file():
        return _fail(f"eval qa: --update {args.update}: no such file")
    # an output that cannot be written is refused before an evaluation that may take hours
    for path in (args.json, getattr(args, "html", None), getattr(args, "md", None)):
        problem = _output_problem(path)
        if problem:
            return _fail(f"eval qa: cannot write {path}: {problem}")
    try:
        if layout == "qa-local":
            return _qa_local(args, datasets, settings, aligners, cache)
        if layout == "gear-agent":
            return _gear_agent(args, datasets, cache)
        outs = [_table(args, name, settings, aligners[name], report) for name in datasets]
    except (ValueError, FileNotFoundError, ImportError, OSError) as e:
        return _fail(f"eval qa failed: {e}")
    from .tables import format_rows
    records = None
    for out in outs:
        print(f"{out['dataset']}: questions {out['questions']} ({out['n']}), reader/LLM {out['llm']} "
              f"({out['reader']} reader, {out['prompt_style']} prompts), encoder {out['encoder']}, k={out['k']}, "
              f"retriever {out['retriever']}, triples: {out['triples']}"
              + (" (from the cache; nothing ran)" if report else ""))
        print(format_rows(out))
        records = out.pop("records", None)
    try:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(outs[0] if len(outs) == 1 else {"datasets": {o["dataset"]: o for o in outs}}, f, indent=1)
        html = getattr(args, "html", None)
        if html:
            from .report_html import write_report
            write_report(html, outs[0], records, data_root=args.data_root)
    except OSError as e:
        return _fail(f"eval qa: cannot write {e.filename or 'the output'}: {e.strerror or e}")
    return 0


def _table(args, dataset, settings, aligner, report):
    """One dataset's run or report; several base retrievers (``NAME@RETRIEVER``) are one
    report or run per retriever, merged into one table (paired against dense over all)."""
    # the prompt style and the context size default in EvalConfig.make (one rule for both paths)
    common = dict(questions=args.questions, prompt_style=getattr(args, "prompt_style", None), reader=args.reader,
                  gear_iters=args.gear_iters, kirag_aligner=aligner, model_free=getattr(args, "model_free_triples", None),
                  graphllm=getattr(args, "graphllm", None))
    groups = {}
    for system, ret in settings:
        groups.setdefault(ret, []).append(system)
    parts = []
    if report:
        for ret, systems in groups.items():
            parts.append(report_qa(dataset, systems, llm_label(args.llm, args.model), limit=args.limit, k=args.k,
                                   max_iters=args.max_iters, cache_dir=args.cache_dir, data_root=args.data_root,
                                   encoder=args.encoder, n_ctx=args.llm_ctx, reader_prompts=_reader_prompts(args),
                                   retriever=ret, **common))
    else:
        from ..llm.adapters import local_options, make_llm
        llm = make_llm(args.llm, args.model, args.base_url, args.api_key_env or "OPENAI_API_KEY",
                       **local_options(args))
        label = llm_label(args.llm, args.model) if args.llm.startswith("local") else \
            str(getattr(llm, "name", None) or args.model or args.llm)
        for ret, systems in groups.items():
            parts.append(evaluate_qa(dataset, systems, llm, label, limit=args.limit, k=args.k,
                                     max_iters=args.max_iters, encoder=args.encoder, cache_dir=args.cache_dir,
                                     data_root=args.data_root, progress=args.progress,
                                     log=lambda m: print(m, file=sys.stderr), retriever=ret, **common))
    return parts[0] if len(parts) == 1 else _merge(parts, settings)


def _merge(parts, settings):
    """Several retrievers' outputs of one dataset as one: rows in ``settings`` order, paired
    against dense over the merged records, the retriever named per system."""
    from .tables import paired_against
    out = dict(parts[0])
    order = [s for s, _ in settings]
    out["rows"] = sorted((r for p in parts for r in p["rows"]), key=lambda r: order.index(r["system"]))
    out["records"] = {s: r for p in parts for s, r in p["records"].items()}
    for key in ("missing", "duplicates", "skipped"):
        if key in out:
            out[key] = {s: v for p in parts for s, v in (p.get(key) or {}).items()}
    out["paired"] = paired_against(out["records"])
    from .report_md import settings_text
    out["retriever"] = settings_text(settings)
    out["retrievers"] = dict(settings)
    return out


def _qa_local(args, datasets, settings, aligners, cache) -> int:
    """``--layout qa-local``: qa_local.md's tables per dataset (printed, --md, --update, --json)."""
    from .report_md import BLOCK, BLOCK_END, MAIN, blocks_for, update_file
    label = llm_label(args.llm, args.model)
    questions = args.questions or "51-100"
    out = {"llm": label, "questions": questions, "datasets": {}}
    md, blocks = [], []
    for name in datasets:
        bl, d = blocks_for(name, questions, cache or _default_cache(), label, aligners[name],
                           getattr(args, "reader_prompts", None), settings=settings or MAIN,
                           before_dir=getattr(args, "before", None), data_root=args.data_root, n_ctx=args.llm_ctx,
                           encoder=args.encoder)
        for bname, heading, lines in bl:
            md += [heading, "", BLOCK.format(bname), *lines, BLOCK_END, ""]
        blocks += bl
        out["datasets"][name] = d
    text = "\n".join(md)
    print(text)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    if getattr(args, "md", None):
        pathlib.Path(args.md).write_text(text + "\n")
    if getattr(args, "update", None):
        left = update_file(args.update, blocks)
        if left:
            print(f"{args.update}: no marker for {', '.join(left)}", file=sys.stderr)
    return 0


def _gear_agent(args, datasets, cache) -> int:
    """``--layout gear-agent``: gear_agent.md (printed, --md with its _analysis.md, --json)."""
    from .gear_report import gear_agent_report
    md_path = getattr(args, "md", None)
    notes = pathlib.Path(md_path).with_name(pathlib.Path(md_path).stem + "_analysis.md") if md_path else None
    md, report = gear_agent_report(datasets, cache or _default_cache(), llm_label(args.llm, args.model),
                                   encoder=args.encoder, data_root=args.data_root,
                                   reader_prompts=getattr(args, "reader_prompts", None), n_ctx=args.llm_ctx,
                                   notes=notes)
    print("\n".join(md))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1))
    if md_path:
        pathlib.Path(md_path).write_text("\n".join(md) + "\n")
    return 0


def _default_cache():
    from ..llm.local import cache_dir
    return cache_dir() / "eval_qa"


def _reader_prompts(args):
    from .report_md import reader_prompts_id
    return reader_prompts_id(getattr(args, "reader_prompts", None))


def _output_problem(path) -> str:
    """Why an output file cannot be written there ('' when it can, as far as can be told)."""
    if not path:
        return ""
    import os
    p = pathlib.Path(path)
    if p.is_dir():
        return "Is a directory"
    parent = p.parent if str(p.parent) else pathlib.Path(".")
    if not parent.is_dir():
        return f"No such directory {parent}"
    if not os.access(parent, os.W_OK):
        return "Permission denied"
    return ""


__all__ = ["add_args", "cmd_eval_qa", "parse_settings", "LAYOUTS"]
