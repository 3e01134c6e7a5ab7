"""``rasfast ask``: answer questions with the RAS loop over a dataset or an index, or with a
registered system over a knowledge index (``--system``)."""
from __future__ import annotations

import contextlib
import json
import sys

from ._common import (_dataset, _encoder, _graph_encoder, _llm_components, _llm_extractor,
                      _print_result, json_out)


def _ras_for(args):
    """(ras, dataset) from --index DIR or --dataset NAME."""
    from ..systems.ras.system import build_ras
    if getattr(args, "index", None):
        from ..systems.ras.corpus import load_index
        from ..systems.ras.retrievers import ThemeIndexRetriever
        try:
            index, ds = load_index(args.index)
        except ValueError as e:
            raise ValueError(f"--index: {e}") from None
        built = index.encoder_name or ""
        built_with = "hashing" if built.startswith("hashing") else "minilm"
        if built_with != args.encoder:   # checked before loading any model
            raise SystemExit(f"--index was built with encoder {built!r}: pass --encoder {built_with}")
        enc = _encoder(args)
        planner, answerer = _llm_components(args)
        ret = ThemeIndexRetriever(index, enc, K=args.scope_k)
        return build_ras(ds, encoder=enc, retriever=ret, k=args.k, max_iters=args.max_iters,
                         graph_encoder=_graph_encoder(args, enc), planner=planner,
                         answerer=answerer, extract_fallback=_llm_extractor(args)), ds
    enc = _encoder(args)
    planner, answerer = _llm_components(args)
    ds = _dataset(args.dataset, args)
    return build_ras(ds, encoder=enc, retriever=args.retriever, k=args.k, max_iters=args.max_iters,
                     graph_encoder=_graph_encoder(args, enc), planner=planner, answerer=answerer,
                     extract_fallback=_llm_extractor(args)), ds


def _check_questions(questions) -> None:
    """An empty question is refused before anything loads (the loop would answer it)."""
    for i, q in enumerate(questions, 1):
        if not q.strip():
            where = f"question {i} of {len(questions)}" if len(questions) > 1 else "the question"
            raise ValueError(f"{where} is empty; ask a question with some text")


def _cmd_ask(args) -> int:
    """With --json, stdout carries only the JSON (the human-readable trace goes to stderr),
    so `rasfast ask ... --json | jq` works."""
    _check_questions(args.question)
    if not args.json:
        return _ask(args)
    args.json_out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        return _ask(args)


def _ask(args) -> int:
    if getattr(args, "html", None):   # one question's page, as eval qa records it
        from .ask_html import cmd_ask_html
        return cmd_ask_html(args)
    if args.system and args.index:   # a knowledge index through the system registry
        from .index import cmd_ask
        return cmd_ask(args)
    if args.system == "structrag":   # StructRAG over a dataset's corpus
        from .structrag import run_ask
        return run_ask(args)
    ras, _ = _ras_for(args)
    results = ras.run_batch(args.question)
    for r in results:
        _print_result(r, max_triples=args.max_triples)
    if args.trace:
        print(f"\nChrome trace: {results[0].trace.to_chrome(args.trace)}")
    if args.json:
        print(json.dumps([{"question": r.question, "answer": r.answer, "subqueries": r.subqueries,
                           "triples": r.step_triples, "error": None if r.error is None else vars(r.error)}
                          for r in results], indent=1), file=json_out(args))
    return 0
