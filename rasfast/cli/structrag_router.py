"""``rasfast structrag router-data``: the StructRAG router's DPO data from a real LLM.

The paper's pipeline (rasfast.systems.structrag.synthesis): the LLM writes a question and its
answer for each set of corpus documents, StructRAG answers every task once per structure type
(the router replaced by that type), a judge (token F1, or ``--llm-judge``) scores the answers,
and every task whose best type beats another gives (question, core content, chosen, rejected)
preference pairs. Document sets are drawn from the corpus at random (``--seed``), not from
the evaluation questions. ``--train-router DIR`` fits an :class:`EmbeddingRouter` on the pairs
and saves it into ``DIR/structrag_router`` (where ``build_system("structrag")`` finds it when
DIR is a knowledge index).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import time

from .errors import positive_int


def add_parser(subparsers) -> None:
    from ._common import DATASETS, _llm_kind, _local_llm_args
    s = subparsers.add_parser("structrag", help="StructRAG tools (router training data)")
    ss = s.add_subparsers(dest="structrag_command", required=True)
    r = ss.add_parser("router-data", help="synthesize the router's preference pairs with an LLM")
    r.add_argument("--dataset", default="musique", choices=[d for d in DATASETS if d != "demo"])
    r.add_argument("--data-root", default=None)
    r.add_argument("--llm", required=True, type=_llm_kind, help="openai|hf|vllm|local|local:PATH.gguf")
    _local_llm_args(r)
    r.add_argument("--base-url", default=None)
    r.add_argument("--model", default=None)
    r.add_argument("--n", type=positive_int, default=8, help="document sets (one task each)")
    r.add_argument("--docs-per-task", type=positive_int, default=3)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--encoder", default="minilm", choices=["minilm", "hashing"],
                   help="StructRAG's and the router's encoder (a router loads only with the "
                        "encoder it was trained with: use the knowledge index's)")
    r.add_argument("--llm-judge", action="store_true", help="an LLM judge instead of token F1")
    r.add_argument("--out", required=True, help="JSONL of the pairs (+ a .summary.json beside it)")
    r.add_argument("--train-router", default=None, metavar="DIR",
                   help="fit an EmbeddingRouter on the pairs and save it into DIR/structrag_router")
    r.set_defaults(func=cmd_router_data)


def _check(args) -> None:
    if args.n < 1:
        raise SystemExit("structrag router-data: --n must be >= 1")
    if args.docs_per_task < 1:
        raise SystemExit("structrag router-data: --docs-per-task must be >= 1")


def cmd_router_data(args) -> int:
    import numpy as np

    from ..data import load_dataset
    from ..encode import make_encoder
    from ..llm.adapters import local_options, make_llm
    from ..systems.structrag.router import ROUTER_DIR, EmbeddingRouter
    from ..systems.structrag.synthesis import synthesize_router_data
    from ..systems.structrag.system import StructRAG

    _check(args)
    ds = load_dataset(args.dataset, args.data_root)
    rng = np.random.default_rng(args.seed)
    picks = rng.choice(len(ds.passages), size=(args.n, min(args.docs_per_task, len(ds.passages))))
    doc_sets = [[ds.passages[int(i)] for i in row] for row in picks]
    llm = make_llm(args.llm, args.model, args.base_url, **local_options(args))
    enc = make_encoder(args.encoder)
    t0 = time.perf_counter()
    pairs, sim, scores = synthesize_router_data(
        llm, doc_sets, lambda router: StructRAG(llm, router=router, encoder=enc),
        judge_llm=llm if args.llm_judge else None)
    secs = time.perf_counter() - t0
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for q, core, chosen, rejected in pairs:
            f.write(json.dumps({"question": q, "core_content": core, "chosen": chosen,
                                "rejected": rejected}) + "\n")
    tasks = [{"question": t.question, "answer": t.answer, "pids": [p.pid for p in t.documents],
              "answers": {k: sim.answers[k][i] for k in sim.answers}, "scores": scores[i]}
             for i, t in enumerate(sim.tasks)]
    summary = {"llm": args.llm, "dataset": args.dataset, "document_sets": args.n,
               "tasks": len(sim.tasks), "pairs": len(pairs), "seconds": secs,
               "judge": "llm" if args.llm_judge else "token_f1", "per_task": tasks}
    out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1, default=str))
    best = {}
    for s in scores:
        top = max(s.values()) if s else 0.0
        for k, v in s.items():
            if top > 0 and v == top:
                best[k] = best.get(k, 0) + 1
    print(f"{len(sim.tasks)} of {args.n} document sets gave a task; {len(pairs)} preference pairs "
          f"in {secs:.0f} s; best structure per task (ties counted for each): "
          + (", ".join(f"{k} {v}" for k, v in sorted(best.items())) or "none scored above 0"))
    if args.train_router:
        if not pairs:
            raise SystemExit("structrag router-data: no preference pairs to train the router on")
        router = EmbeddingRouter(enc)
        losses = router.fit(pairs=pairs)
        d = router.save(pathlib.Path(args.train_router) / ROUTER_DIR)
        print(f"router trained on {len(pairs)} pairs (loss {losses[0]:.3f} -> {losses[-1]:.3f}), saved to {d}")
    return 0
