"""Helpers every command of the ``rasfast`` CLI shares: datasets, encoders, LLM
components from the command line, result printing, the loop's common arguments."""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from .errors import int_at_least, positive_int


DATASETS = ("demo", "musique", "hotpotqa", "2wikimultihopqa")


def _dataset(name: str, args):
    if name == "demo":
        from ..data.demo import generate_world
        return generate_world(seed=args.seed, n_passages=args.passages,
                              n_questions=max(getattr(args, "n", 0) or 0, 300))
    from ..data.qa import load_dataset
    return load_dataset(name, getattr(args, "data_root", None))


def _encoder(args):
    from ..encode import make_encoder
    enc = make_encoder(args.encoder)
    if args.encoder == "minilm" and enc.name.startswith("hashing"):
        print("note: all-MiniLM-L6-v2 not installed; using the hashing encoder", file=sys.stderr)
    return enc


def _graph_encoder(args, encoder):
    kind = getattr(args, "graph_encoder", None)
    if not kind:
        return None
    from ..systems.ras import graph_encoding
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
        from ..llm import adapters
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
    from ..llm import adapters
    llm = adapters.make_llm(args.llm, args.model, args.base_url, args.api_key_env or "OPENAI_API_KEY",
                            **adapters.local_options(args))
    return adapters.LLMTripleExtractor(llm)


def _print_result(r, gold: Optional[str] = None, max_triples: int = 4) -> None:
    from ..parse import format_triples
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


def json_out(args):
    """Where a command's --json output goes (stdout, also while the rest is on stderr)."""
    return getattr(args, "json_out", None) or sys.stdout


def _llm_kind(value: str) -> str:
    from ..llm.adapters import check_llm_kind
    try:
        return check_llm_kind(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _local_llm_args(p: argparse.ArgumentParser) -> None:
    """Options of ``--llm local`` (rasfast.llm.local.LocalLLM)."""
    p.add_argument("--llm-threads", type=positive_int, default=None, help="--llm local: CPU threads (default: all cores)")
    p.add_argument("--llm-ctx", type=positive_int, default=None, help="--llm local: context length in tokens (4096)")
    p.add_argument("--prompt-style", default=None, choices=["paper", "compact"],
                   help="prompt set of the LLM roles that have two (RAS's planner): the papers' prompts "
                        "or compact ones for small models (default: compact for --llm local, else paper)")


def _loop_args(p: argparse.ArgumentParser, dataset: bool = True, encoder: str = "minilm") -> None:
    p.add_argument("--encoder", default=encoder, choices=["minilm", "hashing"],
                   help=f"all-MiniLM-L6-v2 (offline package; hashing fallback) or the hashing "
                        f"encoder (default: {encoder})")
    p.add_argument("--retriever", default="dense", choices=["dense", "faiss", "gear", "bm25", "hybrid"],
                   help="base retriever: exact dense, faiss flat, dense + GEAR graph expansion (needs "
                        "triples), BM25, or GEAR's hybrid (RRF of BM25 and dense)")
    p.add_argument("--k", type=positive_int, default=5, help="passages per sub-query")
    p.add_argument("--max-iters", type=positive_int, default=5, help="most retrieval rounds per question")
    p.add_argument("--seed", type=int, default=0, help="demo world seed")
    p.add_argument("--passages", type=int_at_least(100), default=2000, help="demo world size")
    p.add_argument("--data-root", default=None, help="../shared/data by default")
    p.add_argument("--graph-encoder", default=None, choices=["mean", "gnn"],
                   help="encode each step's subgraph: 'mean' of entity embeddings, or 'gnn' "
                        "(rasfast.GraphEncoder, randomly initialised: shows its cost in the trace)")
    p.add_argument("--llm", default=None, type=_llm_kind,
                   help="planner/answerer LLM backend from rasfast.llm: openai|hf|vllm|graph-tiny, or "
                        "local (the packaged Qwen2.5-Coder-1.5B GGUF) / local:PATH.gguf / local:smollm2, "
                        "or graphllm:DIR (a GraphLLM trained by `rasfast graphllm train`; "
                        "graphllm-nograph:DIR: the same with its graph token left out at inference)")
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
        p.add_argument("--scope-k", type=positive_int, default=None,
                       help="with --index: theme-scoped retrieval inside the K theme-nearest passages")
