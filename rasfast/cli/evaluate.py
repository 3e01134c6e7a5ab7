"""``rasfast eval``: recall and answer metrics of the loop over a dataset (``eval loop``, the
default: ``rasfast eval --dataset ...`` is ``rasfast eval loop --dataset ...``), GEAR on
MuSiQue (``eval gear``), KiRAG (``eval kirag``), a registered system over a knowledge index
(``eval loop --index``), or ``eval qa``: every system's answer quality with one LLM reader
(rasfast.qa_eval).

Each subcommand has its own parser with only the options it reads (``eval qa --help`` lists
no KiRAG training flag); the flag names are the ones the single shared parser had."""
from __future__ import annotations

import argparse
import json
import sys
import time

from ._common import (DATASETS, _dataset, _encoder, _graph_encoder, _llm_components, _llm_extractor, _llm_kind,
                      _local_llm_args, _loop_args)
from .errors import OneLineParser, int_at_least, positive_int

SUBCOMMANDS = ("loop", "gear", "kirag", "qa")


class _EvalParser(OneLineParser):
    """``rasfast eval``'s parser: a command line that does not start with a subcommand (or
    ``-h``) is the loop's, as before the subcommands had parsers of their own."""

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        if not args or (args[0] not in SUBCOMMANDS and args[0] not in ("-h", "--help")):
            args.insert(0, "loop")
        return super().parse_known_args(args, namespace)


def _encoder_arg(p, default: str = "minilm") -> None:
    p.add_argument("--encoder", default=default, choices=["minilm", "hashing"],
                   help=f"all-MiniLM-L6-v2 (offline package; hashing fallback) or the hashing encoder "
                        f"(default: {default})")


def _io_args(p, progress: bool = True) -> None:
    p.add_argument("--data-root", default=None, help="../shared/data by default")
    p.add_argument("--json", default=None, help="write the metrics as JSON here")
    if progress:
        p.add_argument("--no-progress", dest="progress", action="store_false")


def _llm_args(p) -> None:
    """The LLM backend of ``eval qa`` (one backend serves every role of every system)."""
    p.add_argument("--llm", default=None, type=_llm_kind,
                   help="the LLM backend from rasfast.llm: openai|hf|vllm, or local (the packaged "
                        "Qwen2.5-Coder-1.5B GGUF) / local:PATH.gguf / local:smollm2")
    _local_llm_args(p)
    p.add_argument("--base-url", default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--api-key-env", default=None, help="env var holding the API key (OPENAI_API_KEY)")


def add_parser(subparsers) -> None:
    """Registers ``rasfast eval`` and its subcommands ``loop`` (default), ``gear``, ``kirag``, ``qa``."""
    e = subparsers.add_parser("eval", help="recall@k and answer metrics (acc, f1, em)",
                              description="Evaluation commands; `rasfast eval [loop] ...` is the RAS loop's.")
    e.__class__ = _EvalParser   # the top level's subparsers all share one class; only eval defaults its subcommand
    es = e.add_subparsers(dest="what", metavar="{loop,gear,kirag,qa}", parser_class=OneLineParser)

    lp = es.add_parser("loop", help="recall@k and answer metrics of the RAS loop, or of a registered "
                                    "system over --index (the default subcommand)")
    _loop_args(lp, dataset=False)
    lp.add_argument("--dataset", default="demo", choices=(*DATASETS, "2wiki", "all"))
    lp.add_argument("--n", type=positive_int, default=None, help="first N questions (default: all)")
    lp.add_argument("--batch", type=positive_int, default=32)
    lp.add_argument("--json", default=None, help="write metrics as JSON here")
    lp.add_argument("--index", default=None, help="a knowledge index of --dataset's corpus")
    lp.add_argument("--system", default="ras", help="with --index: ras|gear|gear-sync|gear-naive|kirag|structrag")
    lp.add_argument("--scope-k", type=positive_int, default=None, help="with --index: theme scope size K")
    lp.set_defaults(func=_cmd_eval)

    gp = es.add_parser("gear", help="GEAR's retrieval recall on MuSiQue: dense against dense + NaiveGE")
    gp.add_argument("--dataset", default="musique", choices=["musique"])
    _encoder_arg(gp)
    _io_args(gp, progress=False)
    gp.add_argument("--base-sizes", type=positive_int, nargs="+", default=[5, 10, 15, 20], metavar="M",
                    help="NaiveGE base sizes: the dense top-m passages seed the search (default: 5 10 15 20)")
    gp.add_argument("--fusion-depths", type=int_at_least(0), nargs="+", default=[0], metavar="D",
                    help="dense list length fused (RRF) with the expansion, one run each (the dense row "
                         "once); 0 = the base size m (default: 0)")
    gp.add_argument("--max-degree", type=positive_int, default=None, help="cap on each entity's triples")
    gp.add_argument("--backend", default="auto", help="beam search backend (default: auto)")
    gp.set_defaults(func=_cmd_eval)

    kp = es.add_parser("kirag", help="KiRAG's retrieval recall on MuSiQue: zero-shot and cross-validated "
                                     "trained aligner against dense")
    kp.add_argument("--dataset", default="musique", choices=["musique"])
    _encoder_arg(kp)
    _io_args(kp)
    from .kirag import add_eval_args
    add_eval_args(kp)
    kp.set_defaults(func=_cmd_eval)

    qp = es.add_parser("qa", help="every system's answer quality through one LLM reader (rasfast.qa_eval)")
    from ..qa_eval import add_args as add_qa_args
    from ..qa_eval.run import DATASETS as QA_DATASETS
    qp.add_argument("--dataset", required=True, type=_dataset_list(QA_DATASETS), metavar="NAME[,NAME...]",
                    help=f"one of {', '.join(QA_DATASETS)}; with --report several, comma-separated")
    _encoder_arg(qp)
    qp.add_argument("--retriever", default="dense", choices=["dense", "bm25", "hybrid"],
                    help="every system's base retriever: MiniLM dense, BM25, or GEAR's hybrid (RRF of both)")
    qp.add_argument("--k", type=positive_int, default=5, help="passages the reader is shown")
    qp.add_argument("--max-iters", type=positive_int, default=5, help="most retrieval rounds per question (RAS)")
    _llm_args(qp)
    _io_args(qp)
    qp.add_argument("--n", dest="limit", type=positive_int, default=None, help=argparse.SUPPRESS)  # old name of --limit
    add_qa_args(qp)
    qp.set_defaults(func=_cmd_eval)


def _dataset_list(known):
    def parse(text: str) -> str:
        names = [n.strip() for n in text.split(",") if n.strip()]
        bad = [n for n in names if n not in known]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(known)} (comma-separated), got {text!r}")
        return ",".join(names)
    return parse


def _cmd_eval(args) -> int:
    if args.what == "qa":   # every system with one LLM reader (rasfast.qa_eval)
        from ..qa_eval import cmd_eval_qa
        return cmd_eval_qa(args)
    if args.what == "kirag":
        from .kirag import cmd_eval
        return cmd_eval(args, _encoder(args))
    if args.dataset == "2wiki":
        args.dataset = "2wikimultihopqa"
    if args.what == "loop" and args.index:
        from .index import cmd_eval
        return cmd_eval(args)
    if args.what == "gear":
        try:
            from ..systems.gear import evaluate_musique
        except ImportError as e:
            raise SystemExit(f"eval gear: rasfast.systems.gear is not available ({e})")
        enc, out = _encoder(args), None
        for depth in args.fusion_depths:
            r = evaluate_musique(data_root=args.data_root, encoder=enc, base_sizes=args.base_sizes,
                                 max_degree=args.max_degree, fusion_depth=depth or None, backend=args.backend)
            if out is None:
                out = r
            else:
                out["rows"] += r["rows"][1:]   # the dense row once
        ks = [c for c in out["rows"][0] if c.startswith("recall@")]
        print(f"GEAR on MuSiQue ({out['n_questions']} questions, {out['encoder']}): "
              f"dense vs dense + NaiveGE")
        print(f"{'method':<18}{'base':>6}{'depth':>7}" + "".join(f"{k:>11}" for k in ks))
        for r in out["rows"]:
            print(f"{r['method']:<18}{str(r['base_size'] or '-'):>6}{str(r.get('fusion_depth', '-')):>7}"
                  + "".join(f"{r[k]:>11.3f}" for k in ks))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1, default=str)
        return 0
    from ..systems.ras.system import build_ras, evaluate
    names = DATASETS[:3] if args.dataset == "all" else (args.dataset,)
    enc = _encoder(args)
    planner, answerer = _llm_components(args)
    for name in names:
        try:
            ds = _dataset(name, args)
        except FileNotFoundError as e:
            if len(names) == 1:
                raise SystemExit(f"eval {name}: {e}")
            print(f"\n{name}: skipped ({e})")
            continue
        try:
            ras = build_ras(ds, encoder=enc, retriever=args.retriever, k=args.k, max_iters=args.max_iters,
                            graph_encoder=_graph_encoder(args, enc), planner=planner,
                            answerer=answerer, extract_fallback=_llm_extractor(args))
        except ValueError as e:   # e.g. --retriever gear on a corpus without triples
            if len(names) == 1:
                raise SystemExit(f"eval {name}: {e}")
            print(f"\n{name}: skipped ({e})")
            continue
        t0 = time.perf_counter()
        rep = evaluate(ras, ds, n=args.n, batch_size=args.batch, progress=args.progress)
        dt = time.perf_counter() - t0
        print(f"\n{name}: {rep.n} questions, {enc.name}, k={args.k}, max_iters={args.max_iters}, "
              f"{dt:.1f} s")
        print(rep.table())
        if args.json:
            with open(args.json if len(names) == 1 else f"{args.json}.{name}.json", "w") as f:
                json.dump({"dataset": name, "n": rep.n, "encoder": enc.name, "k": args.k,
                           "metrics": rep.metrics, "by_type": rep.by_type, "seconds": dt}, f, indent=1)
    return 0

