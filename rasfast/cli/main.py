"""The ``rasfast`` parser: every command group wired to its module."""
from __future__ import annotations

import argparse
import os
import tempfile
from typing import List, Optional

from ._common import _loop_args
from .ask import _cmd_ask
from .errors import OneLineParser, exit_message, int_at_least, positive_int, user_errors
from .demo import _cmd_demo
from .evaluate import add_parser as add_eval_parser
from .profile import _cmd_bench, _cmd_profile

_DESCRIPTION = "The rasfast command line."


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="rasfast", description=_DESCRIPTION)
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="the RAS loop on a generated offline multi-hop corpus")
    # hashing by default: no model load, so `make demo` takes seconds on a 2-core machine
    _loop_args(d, dataset=False, encoder="hashing")
    d.add_argument("--questions", type=positive_int, default=6, help="questions to answer (half 2-hop, half 3-hop)")
    d.add_argument("--system", default="ras", choices=["ras", "structrag"], help="which system the demo runs")
    d.add_argument("--trace", default=os.path.join(tempfile.gettempdir(), "rasfast_demo_trace.json"),
                   help="Chrome trace output path (default: in the temp directory)")
    d.add_argument("--scope-k", type=positive_int, default=None, help="theme scope size K (default: N/4)")
    d.add_argument("--index-dir", default=None, help="keep the demo's knowledge index here")
    # the library's own path by default: GEAR expansion as the retriever, the GNN graph encoder
    d.set_defaults(func=_cmd_demo, retriever="gear", graph_encoder="gnn")

    ix = sub.add_parser("index", help="index tools")
    ixs = ix.add_subparsers(dest="index_command", required=True)
    from .index import add_index_parsers   # index build (resumable) and index add
    add_index_parsers(ixs)

    a = sub.add_parser("ask", help="answer questions with the loop")
    a.add_argument("question", nargs="+")
    _loop_args(a)
    a.add_argument("--max-triples", type=int_at_least(0), default=6)
    a.add_argument("--trace", default=None, help="write a Chrome trace here")
    a.add_argument("--json", action="store_true", help="also print the results as JSON")
    a.add_argument("--html", default=None, metavar="FILE",
                   help="with --index, --system and --llm: write the question's run (steps, passages, question "
                        "graph, LLM calls, timings) as an offline HTML page")
    a.add_argument("--system", default=None, choices=["ras", "ras+passages", "ras-passages", "gear", "gear-sync",
                                                      "gear-naive", "kirag", "structrag", "structrag-chunk"],
                   help="with --index: the system that answers from the knowledge index (rasfast.systems); "
                        "without --index only structrag, over --dataset's corpus")
    a.set_defaults(func=_cmd_ask)

    pr = sub.add_parser("profile", help="per-stage latency of the loop over N questions")
    _loop_args(pr)
    pr.add_argument("--n", type=positive_int, default=100)
    pr.add_argument("--batch", type=positive_int, default=100)
    pr.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "rasfast_profile"),
                    help="directory for the trace JSON and chart PNG (default: in the temp directory)")
    pr.add_argument("--no-warmup", dest="warmup", action="store_false")
    pr.set_defaults(func=_cmd_profile)

    add_eval_parser(sub)   # eval loop|gear|kirag|qa, each with its own options (evaluate.py)
    from .kirag import add_parser as add_kirag_parser
    add_kirag_parser(sub)
    from .structrag_router import add_parser as add_structrag_parser
    add_structrag_parser(sub)
    from .graphllm import add_parser as add_graphllm_parser
    add_graphllm_parser(sub)

    bn = sub.add_parser("bench", help="quick timing tables")
    bn.add_argument("what", choices=["select"])
    bn.add_argument("--batch", type=positive_int, default=16)
    bn.add_argument("--n", type=positive_int, default=1_000_000)
    bn.set_defaults(func=_cmd_bench)
    return p


def _command(args) -> str:
    """The command's name for messages: "ask", "index build", "eval qa", ..."""
    sub = (getattr(args, "index_command", None) or getattr(args, "kirag_command", None)
           or getattr(args, "structrag_command", None) or getattr(args, "graphllm_command", None))
    if args.command == "eval" and getattr(args, "what", "loop") != "loop":
        sub = args.what
    return f"{args.command} {sub}" if sub else args.command


def main(argv: Optional[List[str]] = None) -> int:
    """Runs a command; a user error is one line on stderr and exit status 1
    (rasfast.cli.errors), a bug keeps its traceback."""
    args = build_parser().parse_args(argv)
    try:
        with user_errors(_command(args)):
            return args.func(args)
    except SystemExit as e:
        exit_message(e)
        raise
