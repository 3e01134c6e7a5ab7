"""``rasfast demo --system structrag`` and ``rasfast ask --system structrag``.

rasfast/cli.py keeps the shared parsers (``--llm/--base-url/--model``, ``--encoder``,
``--retriever``, ``--k``, ``--index``, ...) and hands these commands here when
``--system structrag`` is given. Without ``--llm`` everything runs offline with the
model-free components (cue-word router, triple graph/table structurizers, select_k
extraction, relation-path reasoner).
"""
from __future__ import annotations

import time
from typing import Dict, Optional

from ..systems.structrag.system import triples_by_pid


def _llm(args):
    kind = getattr(args, "llm", None)
    if not kind:
        return None
    if kind == "graph-tiny":
        raise SystemExit("--system structrag: --llm graph-tiny is the RAS GraphLLM; use openai, hf, vllm or local")
    from ..llm.adapters import local_options, make_llm
    return make_llm(kind, getattr(args, "model", None), getattr(args, "base_url", None),
                    getattr(args, "api_key_env", None) or "OPENAI_API_KEY", **local_options(args))


def print_result(r, gold: Optional[str] = None, max_lines: int = 3) -> None:
    print(f"\nQ: {r.question}")
    route = r.structure_type or "-"
    if r.route_fallback:
        route += f" (fallback: router said {r.route_raw[:40]!r})"
    print(f"  route: {route}   documents: {', '.join(p.title or str(p.pid) for p in r.passages[:5])}"
          + (f" (+{len(r.passages) - 5})" if len(r.passages) > 5 else ""))
    for s in r.structures[:4]:
        print(f"  structure [{s.kind}, {len(s.items)} items]: {s.description[:100]}")
    if len(r.structures) > 4:
        print(f"  (+{len(r.structures) - 4} more structures)")
    for q, k in zip(r.subquestions, r.knowledge):
        lines = [ln for ln in k.splitlines() if ln.strip()]
        more = f" (+{len(lines) - max_lines} more lines)" if len(lines) > max_lines else ""
        print(f"  sub-question: {q}\n    knowledge: {' / '.join(ln[:90] for ln in lines[:max_lines]) or '-'}{more}")
    print(f"  answer: {r.answer!r}" + (f"   gold: {gold!r}" if gold is not None else ""))
    if r.error is not None:
        print(f"  error: {r.error.stage}: {r.error.error_type}: {r.error.message[:200]}")
    for e in r.doc_errors:
        print(f"  document skipped: {e.error_type}: {e.message[:160]}")


def build_for_dataset(dataset, args, encoder=None, **opts):
    """StructRAG over a QADataset: the CLI's retriever kind, the dataset's triples; ``opts``
    go to :func:`~rasfast.systems.structrag.from_components`."""
    from ..encode import make_encoder
    from ..systems.ras.system import make_retriever
    from ..systems.structrag.system import from_components
    enc = encoder or make_encoder(args.encoder)
    ret = make_retriever(getattr(args, "retriever", "dense"), dataset.passages, enc, dataset=dataset)
    return from_components(ret, triples_by_pid(dataset), ret.encoder, _llm(args), k=args.k, **opts)


DEMO_KG_HOPS, DEMO_EXTRACT_K = 1, 16


def run_demo(args) -> int:
    """The demo world, StructRAG over it, answers and the per-stage table."""
    from ._common import _dataset, _encoder
    from ..metrics import golden_match
    from ..profile import Trace
    t0 = time.perf_counter()
    world = _dataset("demo", args)
    print(f"demo world (seed {args.seed}): {len(world.passages)} passages, "
          f"{sum(len(t) for t in world.triples)} gold triples, {len(world.questions)} questions")
    # one retrieval per question (StructRAG does not iterate): graph structures also follow the
    # world's knowledge graph one hop from the documents' entities, so a 2-hop chain's second
    # link is in reach; extraction keeps 16 items per sub-question
    sr = build_for_dataset(world, args, _encoder(args), kg_hops=DEMO_KG_HOPS, extract_k=DEMO_EXTRACT_K)
    who = f"rasfast.llm {args.llm}" if getattr(args, "llm", None) else \
        "offline (cue-word router, triple structurizers, select_k extraction, relation-path reasoner)"
    print(f"StructRAG: {who}; {args.k} documents per question, graph/table structures follow the "
          f"knowledge graph {DEMO_KG_HOPS} hop(s) from them, {DEMO_EXTRACT_K} items extracted per sub-question")
    qs = [q for q in world.questions if q.type.startswith("2hop")][: (args.questions + 1) // 2] + \
         [q for q in world.questions if q.type.startswith("3hop")][: args.questions // 2]
    trace = Trace("rasfast demo structrag")
    results = sr.run_batch([q.question for q in qs], trace=trace)
    for q, r in zip(qs, results):
        print_result(r, q.answer)
    correct = sum(golden_match(r.answer or "", q.answers) for q, r in zip(qs, results))
    print(f"\n{int(correct)}/{len(qs)} answered correctly (StructRAG, {who.split(' (')[0]})")
    if sr.stats.get("route_fallback"):
        print(f"router replies naming no structure type: {sr.stats['route_fallback']} (used {sr.default_type!r})")
    print(f"\nper-stage latency, batch of {len(qs)} questions:")
    print(trace.summary())
    path = trace.to_chrome(args.trace)
    print(f"\nChrome trace: {path}; total {time.perf_counter() - t0:.1f} s")
    return 0


def run_ask(args) -> int:
    """``rasfast ask --system structrag "question" ... [--dataset NAME]`` (with ``--index DIR``
    the knowledge index's system registry answers instead: rasfast.cli.index)."""
    import json

    from ._common import _dataset, _encoder, json_out
    sr = build_for_dataset(_dataset(args.dataset, args), args, _encoder(args))
    results = sr.run_batch(args.question)
    for r in results:
        print_result(r)
    if getattr(args, "trace", None):
        print(f"\nChrome trace: {results[0].trace.to_chrome(args.trace)}")
    if getattr(args, "json", False):
        print(json.dumps([{"question": r.question, "answer": r.answer, "structure": r.structure_type,
                           "subquestions": r.subquestions, "knowledge": r.knowledge,
                           "error": None if r.error is None else vars(r.error)} for r in results], indent=1),
              file=json_out(args))
    return 0


__all__ = ["run_demo", "run_ask", "build_for_dataset", "triples_by_pid", "print_result"]
