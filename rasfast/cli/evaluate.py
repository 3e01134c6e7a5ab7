"""``rasfast eval``: recall and answer metrics of the loop over a dataset, GEAR on MuSiQue,
KiRAG, a registered system over a knowledge index (``--index``), or ``eval qa``: every
system's answer quality with one LLM reader (rasfast.qa_eval)."""
from __future__ import annotations

import json
import time

from ._common import DATASETS, _dataset, _encoder, _graph_encoder, _llm_components, _llm_extractor


def _cmd_eval(args) -> int:
    if args.what == "qa":   # every system with one LLM reader (rasfast.qa_eval)
        from ..qa_eval import cmd_eval_qa
        return cmd_eval_qa(args)
    if args.dataset == "2wiki":
        args.dataset = "2wikimultihopqa"
    if args.what == "kirag":
        from .kirag import cmd_eval
        return cmd_eval(args, _encoder(args))
    if args.index:
        from .index import cmd_eval
        return cmd_eval(args)
    if args.what == "gear":
        try:
            from ..systems.gear import evaluate_musique
        except ImportError as e:
            raise SystemExit(f"eval gear: rasfast.systems.gear is not available ({e})")
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

