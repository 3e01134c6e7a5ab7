"""``rasfast ask --index DIR --system NAME --llm KIND --html FILE "question"``: one question
through one system, written as an offline HTML page (steps, passages, the question graph,
the LLM calls, timings).

The page is the question's record exactly as ``eval qa`` writes it
(:func:`rasfast.qa_eval.run.single_record`): a knowledge index and, for the reader, an LLM.
Without ``--llm`` the systems that have a model-free baseline (ras and its variants,
gear-naive, kirag, structrag) run it, and the page says that the answer is the heuristic
baseline's, not a reader's; the others (the agent, SyncGE, the retrieval baselines) are
refused with a one-line error.
"""
from __future__ import annotations

import json
import pathlib
import sys

RETRIEVERS = ("dense", "bm25", "hybrid")   # the base retrievers single_record runs on


def check_args(args) -> None:
    """Every usage error, as one line (SystemExit), before anything is loaded."""
    if not getattr(args, "index", None) or not getattr(args, "system", None):
        raise SystemExit("ask --html needs --index DIR and --system NAME (the page shows that system's run "
                         "over that knowledge index)")
    if len(args.question) != 1:
        raise SystemExit(f"ask --html writes one question's page: got {len(args.question)} questions "
                         "(quote the question)")
    if args.retriever not in RETRIEVERS:
        raise SystemExit(f"ask --html: --retriever expected one of {', '.join(RETRIEVERS)}, got {args.retriever!r}")
    parent = pathlib.Path(args.html).resolve().parent
    if not parent.is_dir():
        raise SystemExit(f"ask --html: no such directory: {parent}")


def cmd_ask_html(args) -> int:
    check_args(args)
    from ..llm.adapters import local_options, make_llm
    from ..qa_eval.report_html import write_record_page
    from ..qa_eval.run import single_record
    from .index import _load
    ki, enc = _load(args)
    llm = None
    if getattr(args, "llm", None):
        try:
            llm = make_llm(args.llm, args.model, args.base_url, args.api_key_env or "OPENAI_API_KEY",
                           **local_options(args))
        except (ValueError, FileNotFoundError, ImportError) as e:
            raise SystemExit(f"--llm {args.llm}: {e}")
    try:
        rec = single_record(args.system, args.question[0], llm, ki, enc, k=args.k, max_iters=args.max_iters,
                            retriever=args.retriever, prompt_style=getattr(args, "prompt_style", None))
    except ValueError as e:
        raise SystemExit(f"--system {args.system}: {e}")
    page_rec = {k: v for k, v in rec.items() if k != "qid"}     # "ask": not a question id
    try:
        path = write_record_page(args.html, page_rec, system=args.system, passages={p.pid: p for p in ki.passages})
    except OSError as e:
        raise SystemExit(f"ask --html: cannot write {args.html}: {e}")
    print(f"\nQ: {rec['question']}\n  system: {args.system}   answer: {rec['answer']!r}"
          + (f"   error: {rec['error']}" if rec.get("error") else ""))
    print(f"  {len(rec.get('steps') or [])} step(s), {rec.get('llm_calls', 0)} LLM call(s), {rec['seconds']:.1f} s")
    print(f"HTML: {path} ({path.stat().st_size / 1024:.0f} KB)")
    if getattr(args, "json", False):
        from ._common import json_out
        print(json.dumps(rec, indent=1, default=str), file=json_out(args))
    return 0


__all__ = ["cmd_ask_html", "check_args"]
