"""The ``rasfast`` command line.

Subcommands: ``demo`` (what ``make demo`` runs: the full RAS loop over a generated offline
corpus), ``index build`` (rasfast.knowledge), ``ask`` (``--system`` runs a registered system
from a knowledge index), ``profile``, ``eval`` (``eval gear`` for GEAR's MuSiQue
evaluation when rasfast.gear is installed; ``eval qa`` for every system's answer quality
with one LLM, rasfast.qa_eval) and ``bench select``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from typing import List, Optional

DATASETS = ("demo", "musique", "hotpotqa", "2wikimultihopqa")


# -- helpers ---------------------------------------------------------------------------------
def _dataset(name: str, args):
    if name == "demo":
        from .data.demo import generate_world
        return generate_world(seed=args.seed, n_passages=args.passages,
                              n_questions=max(getattr(args, "n", 0) or 0, 300))
    from .data.qa import load_dataset
    return load_dataset(name, getattr(args, "data_root", None))


def _encoder(args):
    from .pipeline.system import make_encoder
    enc = make_encoder(args.encoder)
    if args.encoder == "minilm" and enc.name.startswith("hashing"):
        print("note: all-MiniLM-L6-v2 not installed; using the hashing encoder", file=sys.stderr)
    return enc


def _graph_encoder(args, encoder):
    kind = getattr(args, "graph_encoder", None)
    if not kind:
        return None
    from .pipeline import graph_encoding
    if kind == "gnn":
        try:
            return graph_encoding.GNNGraphEncoder(text_encoder=encoder)
        except ImportError as e:
            raise SystemExit(f"--graph-encoder gnn: rasfast.GraphEncoder is not available ({e})")
    return graph_encoding.MeanTextGraphEncoder(encoder)


def _llm_components(args):
    """(planner, answerer) from rasfast.llm when --llm is given, else (None, None)."""
    if not getattr(args, "llm", None):
        return None, None
    try:
        from .llm import adapters
    except ImportError as e:
        raise SystemExit(f"--llm {args.llm}: rasfast.llm is not available ({e})")
    try:
        return adapters.from_cli(args)
    except (ValueError, FileNotFoundError, ImportError) as e:   # e.g. a local model not installed
        raise SystemExit(f"--llm {args.llm}: {e}")


def _llm_extractor(args):
    """An LLM triple extractor (the paper's prompt) for --llm-extract, else None."""
    if not getattr(args, "llm_extract", False):
        return None
    if not getattr(args, "llm", None) or args.llm == "graph-tiny":
        raise SystemExit("--llm-extract needs --llm openai|hf|vllm|local")
    from .llm import adapters
    llm = adapters.make_llm(args.llm, args.model, args.base_url, args.api_key_env or "OPENAI_API_KEY",
                            **adapters.local_options(args))
    return adapters.LLMTripleExtractor(llm)


def _print_result(r, gold: Optional[str] = None, max_triples: int = 4) -> None:
    from .pipeline.parse import format_triples
    print(f"\nQ: {r.question}")
    for i, sq in enumerate(r.subqueries):
        tri = r.step_triples[i] if i < len(r.step_triples) else []
        more = f" (+{len(tri) - max_triples} more)" if len(tri) > max_triples else ""
        print(f"  step {i + 1}  sub-query: {sq}")
        print(f"          passages: {', '.join(p.title for p in r.step_passages[i][:5])}")
        print(f"          triples ({len(tri)}): {format_triples(tri[:max_triples])}{more}")
    decision = r.plan_steps[-1].decision if r.plan_steps else "-"
    print(f"  answer: {r.answer!r}" + (f"   gold: {gold!r}" if gold is not None else "")
          + f"   [{len(r.subqueries)} retrieval step(s), stopped: {decision}]")
    if r.error is not None:
        print(f"  error: {r.error.stage}: {r.error.error_type}: {r.error.message}")


def _progress(it, total, desc, enabled=True):
    if not enabled:
        return it
    from tqdm import tqdm
    return tqdm(it, total=total, desc=desc, unit="q", file=sys.stderr)


# -- commands --------------------------------------------------------------------------------
def _cmd_demo(args) -> int:
    """The demo world's knowledge index + RAS with theme scoping, GEAR expansion and the graph
    encoder (rasfast.knowledge.demo), or StructRAG with --system structrag."""
    if args.system == "structrag":
        from .structrag.cli import run_demo as run_structrag_demo
        return run_structrag_demo(args)
    from .knowledge.demo import run_demo
    if args.retriever == "faiss":
        raise SystemExit("demo: --retriever dense|gear (the demo searches its knowledge index)")
    world = _dataset("demo", args)
    print(f"demo world (seed {args.seed}): {len(world.passages)} passages, "
          f"{sum(len(t) for t in world.triples)} gold triples, {len(world.questions)} questions")
    enc = _encoder(args)
    planner, answerer = _llm_components(args)
    return run_demo(args, world, enc, None if planner is None else (planner, answerer))


def _ras_for(args):
    """(ras, dataset) from --index DIR or --dataset NAME."""
    from .pipeline.system import build_ras
    if getattr(args, "index", None):
        from .pipeline.corpus import load_index
        from .pipeline.retrievers import ThemeIndexRetriever
        index, ds = load_index(args.index)
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


def _cmd_ask(args) -> int:
    """With --json, stdout carries only the JSON (the human-readable trace goes to stderr),
    so `rasfast ask ... --json | jq` works."""
    if not args.json:
        return _ask(args)
    args.json_out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        return _ask(args)


def json_out(args):
    """Where a command's --json output goes (stdout, also while the rest is on stderr)."""
    return getattr(args, "json_out", None) or sys.stdout


def _ask(args) -> int:
    if args.system and args.index:   # a knowledge index through the system registry
        from .knowledge.cli import cmd_ask
        return cmd_ask(args)
    if args.system == "structrag":   # StructRAG over a dataset's corpus
        from .structrag.cli import run_ask
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


def _cmd_profile(args) -> int:
    from .profile import Trace
    ras, ds = _ras_for(args)
    qs = [q.question for q in ds.questions[: args.n]]
    if not qs:
        raise SystemExit("profile: the dataset has no questions")
    if args.warmup:
        ras.run_batch(qs[: min(4, len(qs))])
    trace = Trace(f"rasfast profile {ds.name}")
    t0 = time.perf_counter()
    for s in _progress(range(0, len(qs), args.batch), (len(qs) + args.batch - 1) // args.batch,
                       "profile", args.progress):
        ras.run_batch(qs[s:s + args.batch], trace=trace)
    wall = (time.perf_counter() - t0) * 1e3
    model = trace.model_time()
    print(trace.summary())
    print(f"\n{len(qs)} questions, batch {args.batch}: wall {wall:.1f} ms, encoder/model calls "
          f"{model:.1f} ms, rasfast overhead {wall - model:.1f} ms ({100 * (wall - model) / wall:.1f}%)")
    os.makedirs(args.out, exist_ok=True)
    tr = trace.to_chrome(os.path.join(args.out, f"profile_{ds.name}.json"))
    png = trace.plot(os.path.join(args.out, f"profile_{ds.name}.png"))
    print(f"trace: {tr}\nchart: {png}")
    return 0


def _cmd_eval(args) -> int:
    if args.what == "qa":   # every system with one LLM reader (rasfast.qa_eval)
        from .qa_eval import cmd_eval_qa
        return cmd_eval_qa(args)
    if args.dataset == "2wiki":
        args.dataset = "2wikimultihopqa"
    if args.what == "kirag":
        from .kirag.cli import cmd_eval
        return cmd_eval(args, _encoder(args))
    if args.index:
        from .knowledge.cli import cmd_eval
        return cmd_eval(args)
    if args.what == "gear":
        try:
            from .gear import evaluate_musique
        except ImportError as e:
            raise SystemExit(f"eval gear: rasfast.gear is not available ({e})")
        out = evaluate_musique(data_root=args.data_root, encoder=_encoder(args))
        ks = [c for c in out["rows"][0] if c.startswith("recall@")]
        print(f"GEAR on MuSiQue ({out['n_questions']} questions, {out['encoder']}): "
              f"dense vs dense + NaiveGE")
        print(f"{'method':<18}{'base':>6}" + "".join(f"{k:>11}" for k in ks))
        for r in out["rows"]:
            print(f"{r['method']:<18}{str(r['base_size'] or '-'):>6}"
                  + "".join(f"{r[k]:>11.3f}" for k in ks))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1, default=str)
        return 0
    from .pipeline.system import build_ras, evaluate
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


def _cmd_bench(args) -> int:
    from .bench import format_table, select_table

    if args.what == "select":
        ks = tuple(k for k in (10, 10_000, 250_000) if k <= args.n) or (args.n,)
        print(format_table(select_table(B=args.batch, N=args.n, ks=ks)))
    return 0


# -- parser ----------------------------------------------------------------------------------
def _llm_kind(value: str) -> str:
    from .llm.adapters import check_llm_kind
    try:
        return check_llm_kind(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _local_llm_args(p: argparse.ArgumentParser) -> None:
    """Options of ``--llm local`` (rasfast.llm.local.LocalLLM)."""
    p.add_argument("--llm-threads", type=int, default=None, help="--llm local: CPU threads (default: all cores)")
    p.add_argument("--llm-ctx", type=int, default=None, help="--llm local: context length in tokens (4096)")


def _loop_args(p: argparse.ArgumentParser, dataset: bool = True, encoder: str = "minilm") -> None:
    p.add_argument("--encoder", default=encoder, choices=["minilm", "hashing"],
                   help=f"all-MiniLM-L6-v2 (offline package; hashing fallback) or the hashing "
                        f"encoder (default: {encoder})")
    p.add_argument("--retriever", default="dense", choices=["dense", "faiss", "gear"],
                   help="exact dense, faiss flat, or dense + GEAR graph expansion (needs triples)")
    p.add_argument("--k", type=int, default=5, help="passages per sub-query")
    p.add_argument("--max-iters", type=int, default=5, help="most retrieval rounds per question")
    p.add_argument("--seed", type=int, default=0, help="demo world seed")
    p.add_argument("--passages", type=int, default=2000, help="demo world size")
    p.add_argument("--data-root", default=None, help="../shared/data by default")
    p.add_argument("--graph-encoder", default=None, choices=["mean", "gnn"],
                   help="encode each step's subgraph: 'mean' of entity embeddings, or 'gnn' "
                        "(rasfast.GraphEncoder, randomly initialised: shows its cost in the trace)")
    p.add_argument("--llm", default=None, type=_llm_kind,
                   help="planner/answerer LLM backend from rasfast.llm: openai|hf|vllm|graph-tiny, or "
                        "local (the packaged Qwen2.5-Coder-1.5B GGUF) / local:PATH.gguf / local:smollm2")
    _local_llm_args(p)
    p.add_argument("--base-url", default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--api-key-env", default=None, help="env var holding the API key (OPENAI_API_KEY)")
    p.add_argument("--llm-extract", action="store_true",
                   help="convert passages without dataset triples with the LLM (paper's prompt)")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    if dataset:
        p.add_argument("--dataset", default="demo", choices=DATASETS)
        p.add_argument("--index", default=None, help="a directory from `rasfast index build`")
        p.add_argument("--scope-k", type=int, default=None,
                       help="with --index: theme-scoped retrieval inside the K theme-nearest passages")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rasfast", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="the RAS loop on a generated offline multi-hop corpus")
    # hashing by default: no model load, so `make demo` takes seconds on a 2-core machine
    _loop_args(d, dataset=False, encoder="hashing")
    d.add_argument("--questions", type=int, default=6, help="questions to answer (half 2-hop, half 3-hop)")
    d.add_argument("--system", default="ras", choices=["ras", "structrag"], help="which system the demo runs")
    d.add_argument("--trace", default=os.path.join(tempfile.gettempdir(), "rasfast_demo_trace.json"),
                   help="Chrome trace output path (default: in the temp directory)")
    d.add_argument("--scope-k", type=int, default=None, help="theme scope size K (default: N/4)")
    d.add_argument("--index-dir", default=None, help="keep the demo's knowledge index here")
    # the library's own path by default: GEAR expansion as the retriever, the GNN graph encoder
    d.set_defaults(func=_cmd_demo, retriever="gear", graph_encoder="gnn")

    ix = sub.add_parser("index", help="index tools")
    ixs = ix.add_subparsers(dest="index_command", required=True)
    from .knowledge import cli as kcli   # index build (resumable) and index add
    kcli.add_index_parsers(ixs)

    a = sub.add_parser("ask", help="answer questions with the loop")
    a.add_argument("question", nargs="+")
    _loop_args(a)
    a.add_argument("--max-triples", type=int, default=6)
    a.add_argument("--trace", default=None, help="write a Chrome trace here")
    a.add_argument("--json", action="store_true", help="also print the results as JSON")
    a.add_argument("--system", default=None, choices=["ras", "gear", "kirag", "structrag"],
                   help="with --index: the system that answers from the knowledge index (rasfast.systems); "
                        "without --index only structrag, over --dataset's corpus")
    a.set_defaults(func=_cmd_ask)

    pr = sub.add_parser("profile", help="per-stage latency of the loop over N questions")
    _loop_args(pr)
    pr.add_argument("--n", type=int, default=100)
    pr.add_argument("--batch", type=int, default=100)
    pr.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "rasfast_profile"),
                    help="directory for the trace JSON and chart PNG (default: in the temp directory)")
    pr.add_argument("--no-warmup", dest="warmup", action="store_false")
    pr.set_defaults(func=_cmd_profile)

    e = sub.add_parser("eval", help="recall@k and answer metrics (acc, f1, em)")
    e.add_argument("what", nargs="?", default="loop", choices=["loop", "gear", "kirag", "qa"])
    _loop_args(e, dataset=False)
    e.add_argument("--dataset", default="demo", choices=(*DATASETS, "2wiki", "all"))
    e.add_argument("--n", type=int, default=None, help="first N questions (default: all)")
    e.add_argument("--batch", type=int, default=32)
    e.add_argument("--json", default=None, help="write metrics as JSON here")
    e.add_argument("--index", default=None, help="a knowledge index of --dataset's corpus")
    e.add_argument("--system", default="ras", help="with --index: ras|gear|kirag|structrag")
    e.add_argument("--scope-k", type=int, default=None, help="with --index: theme scope size K")
    e.set_defaults(func=_cmd_eval)
    from .qa_eval import add_args as add_qa_args
    add_qa_args(e)
    from .kirag.cli import add_eval_args, add_parser as add_kirag_parser
    add_eval_args(e)
    add_kirag_parser(sub)

    bn = sub.add_parser("bench", help="quick timing tables")
    bn.add_argument("what", choices=["select"])
    bn.add_argument("--batch", type=int, default=16)
    bn.add_argument("--n", type=int, default=1_000_000)
    bn.set_defaults(func=_cmd_bench)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
