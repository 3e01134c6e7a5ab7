"""``rasfast eval qa``: its options and its command."""
from __future__ import annotations

import json
import sys

from .run import DATASETS, evaluate_qa, llm_label, report_qa
from .systems import SYSTEMS


def add_args(e) -> None:
    """The options of ``rasfast eval qa`` that are its own (its parser, rasfast/cli/evaluate.py,
    adds the dataset, encoder, retriever, LLM and output options)."""
    from .._validate import positive_int
    e.add_argument("--systems", default="none,dense,ras",
                   help=f"comma-separated systems from {','.join(SYSTEMS)}")
    e.add_argument("--limit", type=positive_int, default=None, help="the first N questions")
    e.add_argument("--questions", default=None, metavar="A-B",
                   help="questions A to B (1-based, inclusive), e.g. 51-100 for a held-out half")
    e.add_argument("--cache-dir", default=None, help="per-question result cache (resumable)")
    e.add_argument("--report", action="store_true",
                   help="print (and --json) what the cache holds for these settings; loads no model, runs nothing")
    e.add_argument("--reader", default="contract", choices=["contract", "one-shot"],
                   help="the reader prompt every system answers through: the zero-shot contract, or "
                        "GEAR's App. J.3 one-shot prompt (passages only)")
    e.add_argument("--gear-iters", type=positive_int, default=None,
                   help="GEAR agent rounds (default: the paper's, 4 on MuSiQue, 2 on HotpotQA/2Wiki)")
    e.add_argument("--kirag-aligner", default=None, metavar="DIR",
                   help="KiRAG's trained aligner (rasfast kirag train --out DIR; default: zero-shot MiniLM)")
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


def cmd_eval_qa(args) -> int:
    from ..llm.adapters import local_options, make_llm
    systems = [s.strip() for s in (args.systems or "").split(",") if s.strip()]
    if not getattr(args, "llm", None):
        print("eval qa needs --llm (e.g. --llm local)", file=sys.stderr)
        return 1
    if args.dataset not in DATASETS:
        print(f"eval qa: --dataset expected one of {', '.join(DATASETS)}, got {args.dataset!r}", file=sys.stderr)
        return 1
    retriever = args.retriever
    limit = args.limit
    import pathlib
    if args.cache_dir and pathlib.Path(args.cache_dir).exists() and not pathlib.Path(args.cache_dir).is_dir():
        print(f"eval qa: --cache-dir {args.cache_dir}: not a directory", file=sys.stderr)
        return 1
    if args.kirag_aligner and not pathlib.Path(args.kirag_aligner).is_dir():
        print(f"eval qa: --kirag-aligner {args.kirag_aligner}: not a directory (expected a saved aligner: "
              f"rasfast kirag train --out DIR)", file=sys.stderr)
        return 1
    # an output that cannot be written is refused before an evaluation that may take hours
    for opt, path in (("--json", args.json), ("--html", getattr(args, "html", None))):
        problem = _output_problem(path)
        if problem:
            print(f"eval qa: cannot write {path}: {problem}", file=sys.stderr)
            return 1
    # the prompt style and the context size default in EvalConfig.make (one rule for both paths)
    common = dict(questions=args.questions, prompt_style=getattr(args, "prompt_style", None), reader=args.reader, retriever=retriever,
                  gear_iters=args.gear_iters, kirag_aligner=args.kirag_aligner,
                  model_free=getattr(args, "model_free_triples", None))
    try:
        if getattr(args, "report", False):
            out = report_qa(args.dataset, systems, llm_label(args.llm, args.model), limit=limit, k=args.k,
                            max_iters=args.max_iters, cache_dir=args.cache_dir, data_root=args.data_root,
                            encoder=args.encoder, n_ctx=args.llm_ctx, reader_prompts=_reader_prompts(args),
                            **common)
        else:
            llm = make_llm(args.llm, args.model, args.base_url, args.api_key_env or "OPENAI_API_KEY",
                           **local_options(args))
            label = llm_label(args.llm, args.model) if args.llm.startswith("local") else \
                str(getattr(llm, "name", None) or args.model or args.llm)
            out = evaluate_qa(args.dataset, systems, llm, label, limit=limit, k=args.k,
                              max_iters=args.max_iters, encoder=args.encoder, cache_dir=args.cache_dir,
                              data_root=args.data_root, progress=args.progress,
                              log=lambda m: print(m, file=sys.stderr), **common)
    except (ValueError, FileNotFoundError, ImportError, OSError) as e:
        print(f"eval qa failed: {e}", file=sys.stderr)
        return 1
    from .tables import format_rows
    print(f"{out['dataset']}: questions {out['questions']} ({out['n']}), reader/LLM {out['llm']} "
          f"({out['reader']} reader, {out['prompt_style']} prompts), encoder {out['encoder']}, k={out['k']}, "
          f"retriever {out['retriever']}, triples: {out['triples']}"
          + (" (from the cache; nothing ran)" if getattr(args, "report", False) else ""))
    print(format_rows(out))
    records = out.pop("records", None)
    try:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
        html = getattr(args, "html", None)
        if html:
            from .report_html import write_report
            write_report(html, out, records, data_root=args.data_root)
    except OSError as e:
        print(f"eval qa: cannot write {e.filename or 'the output'}: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


def _reader_prompts(args):
    from .config import READER_PROMPTS_ROUND3
    v = getattr(args, "reader_prompts", None)
    return READER_PROMPTS_ROUND3 if v == "round3" else v


def _output_problem(path) -> str:
    """Why an output file cannot be written there ('' when it can, as far as can be told)."""
    if not path:
        return ""
    import os
    import pathlib
    p = pathlib.Path(path)
    if p.is_dir():
        return "Is a directory"
    parent = p.parent if str(p.parent) else pathlib.Path(".")
    if not parent.is_dir():
        return f"No such directory {parent}"
    if not os.access(parent, os.W_OK):
        return "Permission denied"
    return ""


__all__ = ["add_args", "cmd_eval_qa"]
