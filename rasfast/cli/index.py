"""CLI of the knowledge index: ``rasfast index build``, ``rasfast index add``, ``rasfast ask
--index --system`` and ``rasfast eval --index`` (rasfast/cli.py registers these parsers and calls the handlers)."""
from __future__ import annotations

import json
import pathlib
import sys
import time

from .errors import positive_float, positive_int


def add_index_parsers(ixs) -> None:
    """``index build`` and ``index add`` under the ``index`` subcommand's subparsers."""
    b = ixs.add_parser("build", help="build a knowledge index (passages, embeddings, themes, "
                                     "triples, triple graph, triple embeddings) from a corpus; resumable")
    b.add_argument("--corpus", required=True, help="JSONL/JSON corpus (records with title/text, "
                   "optional triples), or a MuSiQue/HippoRAG OpenIE docs file")
    b.add_argument("--out", required=True, help="the index directory")
    b.add_argument("--encoder", default="minilm", choices=["minilm", "hashing"])
    b.add_argument("--num-themes", type=positive_int, default=64, help="k-means themes for theme scoping")
    b.add_argument("--extract-triples", action="store_true",
                   help="extract triples with --llm (the paper's prompt) even if the corpus has some")
    b.add_argument("--max-degree", type=positive_int, default=None, help="triple graph hub guard")
    _llm_args(b)
    b.set_defaults(func=cmd_build)
    a = ixs.add_parser("add", help="append a corpus's passages to a knowledge index (triples from "
                                   "the corpus or the index's own extraction model; resumable)")
    a.add_argument("--index", required=True, help="the index directory")
    a.add_argument("--corpus", required=True)
    a.add_argument("--encoder", default="minilm", choices=["minilm", "hashing"])
    _llm_args(a)
    a.set_defaults(func=cmd_add)


def _llm_args(b) -> None:
    from ._common import _llm_kind, _local_llm_args
    b.add_argument("--llm", default=None, type=_llm_kind,
                   help="LLM backend for triple extraction: openai|hf|vllm|local|local:PATH.gguf")
    _local_llm_args(b)
    b.add_argument("--base-url", default=None)
    b.add_argument("--model", default=None)
    b.add_argument("--api-key-env", default=None, help="env var holding the API key (OPENAI_API_KEY)")
    b.add_argument("--concurrency", type=positive_int, default=32, help="extraction requests in flight")
    b.add_argument("--max-new-tokens", type=positive_int, default=256)
    b.add_argument("--timeout", type=positive_float, default=60.0, help="seconds per LLM request")
    b.add_argument("--allow-unparsed", action="store_true",
                   help="index passages whose reply held no triple (recorded in the manifest)")
    b.add_argument("--retry-unparsed", action="store_true",
                   help="ask again for passages whose earlier reply held no triple")
    b.add_argument("--no-progress", dest="progress", action="store_false")


def _make_llm(args):
    if not args.llm:
        return None
    from ..llm.adapters import local_options, make_llm
    try:
        return make_llm(args.llm, args.model, args.base_url, args.api_key_env or "OPENAI_API_KEY",
                        timeout=args.timeout, concurrency=1, **local_options(args))
    except ValueError as e:
        raise SystemExit(f"index: {e}")


def _errors():
    from ..index.knowledge.build import UnparsedError
    from ..index.knowledge.extract import ExtractionError
    from ..index.knowledge.journal import JournalError
    return (ValueError, FileNotFoundError, JournalError, ExtractionError, UnparsedError)


def _report(verb: str, rep) -> None:
    ki, ex = rep.index, rep.extraction
    how = (f"LLM {ki.extraction['model']}: {ex.requested} requests this run, {ex.resumed} resumed "
           f"from the journal, {ex.tokens} tokens, {ex.seconds:.1f} s"
           + (f", {len(ki.unparsed)} unparsed" if ki.unparsed else "")) if ex else ki.extraction["source"]
    print(f"{verb} {len(ki)} passages ({ki.encoder_name}, dim {ki.dim}, {ki.theme.num_themes} themes)"
          f"{', with triples' if ki.graph.num_triples else ''}: {ki.graph.num_triples} triples "
          f"({how}), {ki.graph.num_entities} entities, {ki.graph.num_edges} graph edges in "
          f"{rep.seconds:.1f} s -> {rep.path}")


def _encoder_kind(name) -> str:
    """The --encoder choice that makes an encoder named ``name``."""
    return "hashing" if (name or "").startswith("hashing") else "minilm"


def _check_index_encoder(index_dir, encoder: str) -> None:
    """--encoder against the index's, before a model is loaded for nothing (an unreadable
    knowledge.json is left to the load, which names the problem)."""
    from ..index.knowledge.index import MANIFEST
    try:
        built = json.loads((pathlib.Path(index_dir) / MANIFEST).read_text(encoding="utf-8"))["encoder"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if _encoder_kind(built) != encoder:
        raise SystemExit(f"--index was built with encoder {built!r}: pass --encoder {_encoder_kind(built)}")


def cmd_add(args) -> int:
    from ..encode import make_encoder
    from ..index.knowledge.build import add_to_knowledge_index
    _check_index_encoder(args.index, args.encoder)
    llm = _make_llm(args)
    try:
        rep = add_to_knowledge_index(args.index, args.corpus, make_encoder(args.encoder), llm=llm,
                                     concurrency=args.concurrency, allow_unparsed=args.allow_unparsed,
                                     retry_unparsed=args.retry_unparsed, progress=args.progress)
    except _errors() as e:
        print(f"index add failed: {e}", file=sys.stderr)
        return 1   # one line, exit 1, like every user error (rasfast/cli/errors.py)
    _report("index now holds", rep)
    return 0


def cmd_build(args) -> int:
    from ..encode import make_encoder
    from ..index.knowledge.build import build_knowledge_index
    if args.extract_triples and not args.llm:
        raise SystemExit("--extract-triples needs --llm openai|hf|vllm (and --model) or --llm local")
    llm = _make_llm(args)
    try:
        rep = build_knowledge_index(args.corpus, args.out, make_encoder(args.encoder), llm=llm,
                                    model=args.model, extract=args.extract_triples,
                                    concurrency=args.concurrency, num_themes=args.num_themes,
                                    allow_unparsed=args.allow_unparsed,
                                    retry_unparsed=args.retry_unparsed,
                                    max_new_tokens=args.max_new_tokens, max_degree=args.max_degree,
                                    progress=args.progress)
    except _errors() as e:
        print(f"index build failed: {e}", file=sys.stderr)
        return 1   # one line, exit 1, like every user error (rasfast/cli/errors.py)
    _report("indexed", rep)
    return 0


def _load(args):
    from ..encode import make_encoder
    from ..index.knowledge.index import KnowledgeIndex
    try:
        ki = KnowledgeIndex.load(args.index)
    except ValueError as e:
        raise ValueError(f"--index: {e}") from None
    built = ki.encoder_name or ""
    want = _encoder_kind(built)
    if want != args.encoder:
        raise SystemExit(f"--index was built with encoder {built!r}: pass --encoder {want}")
    return ki, make_encoder(args.encoder)


def _system(args, ki, enc):
    from ..systems.registry import build_system
    llm = None
    if getattr(args, "llm", None):
        from ..llm.adapters import local_options, make_llm
        llm = make_llm(args.llm, args.model, args.base_url, args.api_key_env or "OPENAI_API_KEY",
                       **local_options(args))
    opts = {"k": args.k, "scope_k": args.scope_k}
    if getattr(args, "retriever", None) in ("bm25", "hybrid"):
        opts["retriever"] = args.retriever
    ras = args.system in ("ras", "ras+passages", "ras-passages")
    if ras:
        opts["max_iters"] = args.max_iters
    graph_encoder = None
    if getattr(args, "graph_encoder", None) and ras:
        from ._common import _graph_encoder
        graph_encoder = _graph_encoder(args, enc)
        opts["graph_encoder"] = graph_encoder
    try:
        return build_system(args.system, ki, encoder=enc, llm=llm, **opts)
    except ValueError as e:
        raise SystemExit(f"--system {args.system}: {e}")


def cmd_ask(args) -> int:
    ki, enc = _load(args)
    system = _system(args, ki, enc)
    results = system.run_batch(args.question)
    for r in results:
        print(f"\nQ: {r.question}\n  system: {args.system}   answer: {r.answer!r}")
        for p in r.passages[: args.k]:
            tri = ki.triples_by_pid.get(p.pid, [])
            print(f"  [{p.pid}] {p.title} ({p.score:.3f}) {len(tri)} triples")
        if getattr(r, "error", None) is not None:
            print(f"  error: {r.error}")
    if getattr(args, "trace", None):
        print(f"\nChrome trace: {results[0].trace.to_chrome(args.trace)}")
    if getattr(args, "json", False):
        from ._common import json_out
        print(json.dumps([{"question": r.question, "answer": r.answer,
                           "passages": [p.pid for p in r.passages]} for r in results], indent=1),
              file=json_out(args))
    return 0


def cmd_eval(args) -> int:
    """Questions of --dataset answered by --system from --index (the index must hold that
    dataset's corpus in order, so gold passage ids line up)."""
    from ._common import _dataset
    from ..metrics import answer_scores, recall_at_k
    ki, enc = _load(args)
    ds = _dataset(args.dataset, args)
    titles = [p.title for p in ds.passages]
    if len(titles) != len(ki) or titles != ki.theme.titles:
        raise SystemExit(f"eval --index: the index holds {len(ki)} passages that are not the "
                         f"{args.dataset} corpus ({len(titles)} passages); build it from that corpus")
    system = _system(args, ki, enc)
    qs = ds.questions[: args.n or len(ds.questions)]
    t0 = time.perf_counter()
    rows = []
    for s in range(0, len(qs), args.batch):
        chunk = qs[s:s + args.batch]
        for q, r in zip(chunk, system.run_batch([q.question for q in chunk])):
            m = answer_scores(r.answer or "", q.answers)
            pids = [p.pid for p in r.passages]
            m[f"R@{args.k}"] = recall_at_k(pids[: args.k], q.gold_pids, args.k)
            m["R@all"] = recall_at_k(pids, q.gold_pids, len(pids))
            rows.append(m)
    dt = time.perf_counter() - t0
    keys = list(rows[0]) if rows else []
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in keys}
    print(f"{args.dataset}: {len(rows)} questions, system {args.system}, index {args.index}, {dt:.1f} s")
    print("".join(f"{k:>10}" for k in keys))
    print("".join(f"{mean[k]:>10.3f}" for k in keys))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dataset": args.dataset, "system": args.system, "n": len(rows),
                       "metrics": mean, "seconds": dt}, f, indent=1)
    return 0


__all__ = ["add_index_parsers", "cmd_build", "cmd_add", "cmd_ask", "cmd_eval"]
