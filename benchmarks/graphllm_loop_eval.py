"""Does the graph token help in the loop? EM/F1 of RAS's GraphLLM variants on held-out
generated-world questions (issue 41 part 5), per question, with paired bootstrap intervals.

Each variant runs the whole RAS loop (dense top-k retrieval, the loop's own triples, the
GraphLLM as planner and answerer: the paper's setting, where the answer comes from the
GraphLLM's answerer role) over the same questions, with the same base model:
- ``a``: prompted, untrained (the run's configuration freshly built: LoRA's B is zero, so the
  base model's outputs; no graph token);
- ``b``: trained with the graph token (a run of ``rasfast graphllm train``);
- ``c``: trained without it (``--no-graph-token``, the paper's "No GraphToken");
- ``d``: ``b`` with the graph token left out at inference;
- ``dense-a`` / ``dense-b``: the reference, dense RAG through the same base model: one
  retrieval with the question (top k), its passages' triples as the context, and the answerer
  of ``a`` (untrained) / ``b`` (trained, with its graph token). Their planner is a constant
  ``[SUFFICIENT]``.

The questions are the held-out part of ``rasfast graphllm data`` (world seed 1001, 2,000
passages: questions none of whose chain entities occur in a training world), in their order,
the first ``--n``. Each run appends one JSON line per question to ``OUT/VARIANT.jsonl`` and
skips the questions already there, so a stopped run resumes; ``--report`` then writes
``OUT/report.md`` / ``report.json`` from the records alone.

Per question: the answer, EM, F1, "contains the gold" (acc), the sub-queries and whether each
retrieved a gold passage of the question (the planner's sub-query quality: the question
itself is the first and is not counted), retrieval rounds, LLM calls and seconds.

    python benchmarks/graphllm_loop_eval.py --run RUN --run-nogt RUN_NOGT \
        --variants b,d --n 300 --out benchmarks/results/graphllm_loop
    python benchmarks/graphllm_loop_eval.py --report --out benchmarks/results/graphllm_loop
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

VARIANTS = {
    "a": "(a) prompted, untrained",
    "b": "(b) trained with the graph token",
    "c": "(c) trained without it (No GraphToken)",
    "d": "(d) (b) with the token removed at inference",
    "dense-a": "dense top-k -> (a)'s answerer (reference)",
    "dense-b": "dense top-k -> (b)'s answerer (reference)",
}
METRICS = ("em", "f1", "acc")
DATASETS = ("world", "musique", "hotpotqa")
DATASET_LABELS = {"musique": "MuSiQue", "hotpotqa": "HotpotQA"}
HELD_OUT = {d: f"{DATASET_LABELS[d]} questions after the first 50 (`rasfast graphllm data` trains on "
               f"1-50; the corpus: the paragraphs of all 100 questions)" for d in DATASET_LABELS}


class ConstantPlanner:
    """Always ``[SUFFICIENT]``: round 0 retrieves with the question, round 1 answers."""

    def plan(self, states):
        return ["[SUFFICIENT]"] * len(states)


DEFAULT_WORLD_SEED = 1001   # the held-out world of `rasfast graphllm data`


def heldout_questions(n: int, start: int = 0, world_seed: int = DEFAULT_WORLD_SEED):
    """(world dataset, n held-out questions from position ``start``) as ``rasfast graphllm
    data`` holds them out (in its order). ``world_seed`` other than 1001: a further held-out
    world, chosen the same way (entity-disjoint from the training worlds), that no training
    or data step has seen: more unseen questions than the data's 400."""
    from rasfast.data.demo import generate_world
    from rasfast.systems.ras.graphllm_data import world_sources
    _train, held = world_sources(heldout_seeds=(world_seed,))
    ds = generate_world(seed=world_seed, n_passages=2000, n_questions=800)
    by_qid = {f"world-s{world_seed}-{q.qid}": q for q in ds.questions}
    qs = [by_qid[c.qid] for c in held if c.qid in by_qid]
    if len(qs) != len(held):
        raise RuntimeError(f"held-out chains do not match world seed {world_seed}'s questions")
    return ds, qs[start:start + n]


def dataset_questions(name: str, n: int, start: int):
    """(dataset, its questions start+1 .. start+n): MuSiQue or HotpotQA as `rasfast graphllm
    data` reads them (its training samples come from questions 1-50, so 51-100 are held out)."""
    from rasfast.data.qa import load_dataset
    ds = load_dataset(name)
    return ds, ds.questions[start:start + n]


def question_key(dataset: str, world_seed, qid: str) -> str:
    return f"{world_seed}:{qid}" if dataset == "world" else f"{dataset}:{qid}"


def record_key(rec: dict) -> str:
    """A question's identity across worlds and datasets: records before --world-seed and
    --dataset existed are world seed 1001."""
    return question_key(rec.get("dataset", "world"), rec.get("world_seed", DEFAULT_WORLD_SEED), rec["qid"])


def components(variant: str, run: str, run_nogt: str, cache: Dict):
    """(planner, answerer) of a variant; models are loaded once per process (``cache``)."""
    from rasfast.llm.adapters import GraphLLMAnswerer, GraphLLMPlanner
    from rasfast.llm.graph_llm_train import GraphBuilder, TrainConfig, build_graph_llm, load_trained

    def roles(g, text):
        build = GraphBuilder(text)
        graph_of = lambda state: build([list(map(list, st)) for st in state.step_triples])  # noqa: E731
        return GraphLLMPlanner(g, graph_of=graph_of, max_new_tokens=32), \
            GraphLLMAnswerer(g, graph_of=graph_of, max_new_tokens=16)

    if variant in ("b", "d", "dense-b"):
        if "b" not in cache:
            g, text, cfg = load_trained(run)
            cache["b"] = (g, text, cfg)
        g, text, _ = cache["b"]
        g.graph_token = variant != "d"
        p, a = roles(g, text)
    elif variant == "c":
        g, text, _ = load_trained(run_nogt)
        p, a = roles(g, text)
    elif variant in ("a", "dense-a"):
        if "a" not in cache:
            with open(os.path.join(run, "train_config.json")) as f:
                cfg = TrainConfig.from_dict(json.load(f)["config"])
            g, text, _ = build_graph_llm(TrainConfig.from_dict({**asdict(cfg), "graph_token": False}))
            cache["a"] = (g, text, cfg)
        g, text, _ = cache["a"]
        p, a = roles(g, text)
    else:
        raise ValueError(f"variant: expected one of {', '.join(VARIANTS)}, got {variant!r}")
    if variant.startswith("dense-"):
        p = ConstantPlanner()
    return p, a


def run_variant(variant: str, args, ds, qs, cache: Dict) -> None:
    from rasfast.metrics import answer_scores
    from rasfast.systems.ras.system import build_ras
    path = os.path.join(args.out, f"{variant}.jsonl")
    done = set()
    if os.path.exists(path):
        with open(path) as f:
            done = {record_key(json.loads(line)) for line in f if line.strip()}
    todo = [q for q in qs if question_key(args.dataset, args.world_seed, q.qid) not in done]
    if not todo:
        return
    p, a = components(variant, args.run, args.run_nogt, cache)
    llm_planner = not isinstance(p, ConstantPlanner)
    if "ras" not in cache:
        cache["ras"] = build_ras(ds, encoder="minilm", k=args.k, max_iters=args.max_iters)
    ras = cache["ras"]
    ras.planner, ras.answerer = p, a
    from tqdm import tqdm
    bar = tqdm(total=len(todo), desc=variant, unit="q", file=sys.stderr)
    with open(path, "a") as f:
        for s in range(0, len(todo), args.batch):
            chunk = todo[s:s + args.batch]
            t0 = time.perf_counter()
            res = ras.run_batch([q.question for q in chunk])
            dt = (time.perf_counter() - t0) / len(chunk)
            for q, r in zip(chunk, res):
                gold = set(q.gold_pids)
                steps = [{"subquery": sq, "pids": [x.pid for x in ps],
                          "gold_hit": bool(gold & {x.pid for x in ps})}
                         for sq, ps in zip(r.subqueries, r.step_passages)]
                rec = {"qid": q.qid, "dataset": args.dataset,
                       "world_seed": args.world_seed if args.dataset == "world" else None, "type": q.type, "question": q.question, "gold": list(q.answers),
                       "answer": r.answer, "error": None if r.error is None else str(r.error),
                       **answer_scores(r.answer or "", q.answers),
                       "gold_pids": list(q.gold_pids), "steps": steps,
                       "plans": [[ps.raw, ps.decision] for ps in r.plan_steps],
                       "rounds": len(r.subqueries), "k": args.k, "max_iters": args.max_iters,
                       # planner calls: round 0 and one after each retrieval round but the last
                       # (max_iters stops without one); the answer: one
                       "llm_calls": (sum(ps.decision != "max_iters" for ps in r.plan_steps) if llm_planner
                                     else 0) + 1,
                       "seconds_mean_of_batch": dt}
                f.write(json.dumps(rec) + "\n")
            f.flush()
            bar.update(len(chunk))
    bar.close()


def read_records(out: str) -> Dict[str, List[dict]]:
    recs = {}
    for v in VARIANTS:
        path = os.path.join(out, f"{v}.jsonl")
        if os.path.exists(path):
            with open(path) as f:
                rows = [json.loads(line) for line in f if line.strip()]
            if rows:   # a variant that has just started has an empty file
                recs[v] = rows
    return recs


def report(out: str) -> str:
    """``report.md`` / ``report.json`` from the records: each variant on the questions it has
    records for; its differences against (b) on the questions both have (paired bootstrap
    intervals), with (b)'s own EM / F1 on those questions beside them."""
    from machine import header_markdown, machine_info
    from rasfast.qa_eval.tables import paired_bootstrap
    recs = read_records(out)
    if not recs:
        raise SystemExit(f"--report: no records under {out}")
    b = {record_key(r): r for r in recs.get("b", [])}
    rows = []
    for v, rr in recs.items():
        subs = [s for r in rr for s in r["steps"][1:]]
        new_gold = []   # per generated sub-query: does its top-k add a gold passage not seen before?
        for r in rr:
            seen, gold = set(), set(r["gold_pids"])
            for i, st in enumerate(r["steps"]):
                if i:
                    new_gold.append(bool((set(st["pids"]) & gold) - seen))
                seen |= set(st["pids"])
        row = {"variant": v, "label": VARIANTS[v], "n": len(rr),
               **{m: sum(r[m] for r in rr) / len(rr) for m in METRICS},
               "rounds": sum(r["rounds"] for r in rr) / len(rr),
               "subqueries_generated": len(subs),
               "subquery_gold_hit": (sum(s["gold_hit"] for s in subs) / len(subs)) if subs else None,
               "subquery_new_gold": (sum(new_gold) / len(new_gold)) if new_gold else None,
               "recall_all": sum(len(set(r["gold_pids"]) & {p for s in r["steps"] for p in s["pids"]})
                                 / len(r["gold_pids"]) for r in rr) / len(rr),
               "llm_calls": sum(r["llm_calls"] for r in rr) / len(rr),
               "seconds": sum(r["seconds_mean_of_batch"] for r in rr) / len(rr),
               "errors": sum(r["error"] is not None for r in rr)}
        both = [r for r in rr if record_key(r) in b]
        if v != "b" and both:
            row["paired_n"] = len(both)
            for m in ("em", "f1"):
                row[f"b_{m}_same"] = sum(b[record_key(r)][m] for r in both) / len(both)
                row[f"{m}_minus_b"] = paired_bootstrap([r[m] for r in both], [b[record_key(r)][m] for r in both])
        rows.append(row)
    ks = sorted({r.get("k", 5) for rr in recs.values() for r in rr})
    seeds = sorted({r.get("world_seed", DEFAULT_WORLD_SEED) for rr in recs.values() for r in rr
                    if r.get("dataset", "world") == "world"})
    datasets = sorted({r.get("dataset", "world") for rr in recs.values() for r in rr})
    res = {"machine": machine_info(), "k": ks, "datasets": datasets, "world_seeds": seeds, "rows": rows}
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)

    def ci(r, m):
        d = r.get(f"{m}_minus_b")
        if d is None:
            return "-"
        return f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] (b: {r[f'b_{m}_same']:.3f}, n {r['paired_n']})"
    parts = [f"held-out generated-world questions (world seed{'s' if len(seeds) > 1 else ''} "
             f"{', '.join(map(str, seeds))}, entity-disjoint from the training worlds, in the order "
             "`rasfast graphllm data` holds them out)"] if seeds else []
    parts += [f"{HELD_OUT[d]}" for d in datasets if d != "world"]
    title = "held-out world questions" if datasets == ["world"] else \
        ", ".join("world" if d == "world" else DATASET_LABELS[d] for d in datasets) + " (held out)"
    L = [f"# Does the graph token help in the loop? GraphLLM variants on {title}", "",
         header_markdown(), "",
         f"{'; '.join(parts)[:1].upper()}{'; '.join(parts)[1:]}: each variant through the whole RAS loop "
         f"(k = {', '.join(map(str, ks))} passages per sub-query, at most 5 rounds). EM / F1 / contains-the-gold of the answer; "
         "sub-queries (hit, new) = the planner's generated sub-queries (after the question itself), the share "
         "whose top-k holds a gold passage, and the share that adds a gold passage no earlier step retrieved; recall = gold passages among all retrieved. Cost: LLM calls "
         "(planner and answerer; the dense rows' constant planner is not one) and seconds per question "
         "(batch means, 1 thread). Differences: variant - (b) on the questions both have, paired bootstrap "
         "95% interval (10,000 resamples), with (b)'s value on those questions. Every number comes from "
         "`python benchmarks/graphllm_loop_eval.py --report`.", "",
         "| variant | n | EM | F1 | contains gold | rounds | sub-queries (hit, new) | recall | LLM calls | s/q | "
         "EM - (b) | F1 - (b) |",
         "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---|"]
    for r in rows:
        hit = "-" if r["subquery_gold_hit"] is None else \
            f"{r['subqueries_generated']} ({r['subquery_gold_hit']:.2f}, {r['subquery_new_gold']:.2f})"
        L.append(f"| {r['label']} | {r['n']} | {r['em']:.3f} | {r['f1']:.3f} | {r['acc']:.3f} | {r['rounds']:.2f} | "
                 f"{hit} | {r['recall_all']:.3f} | {r['llm_calls']:.2f} | {r['seconds']:.2f} | "
                 f"{ci(r, 'em')} | {ci(r, 'f1')} |")
    text = "\n".join(L) + "\n"
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", help="a run of `rasfast graphllm train` (graph token on)")
    ap.add_argument("--run-nogt", help="a run trained with --no-graph-token (variant c)")
    ap.add_argument("--variants", default="b,d", help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--start", type=int, default=0,
                    help="skip the first START held-out questions (a part nobody has looked at)")
    ap.add_argument("--dataset", default="world", choices=DATASETS,
                    help="the generated world's held-out part, or MuSiQue / HotpotQA (use --start 50)")
    ap.add_argument("--world-seed", type=int, default=DEFAULT_WORLD_SEED,
                    help="the held-out world (1001: the data's; another: a further unseen world)")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--max-iters", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "graphllm_loop"))
    ap.add_argument("--report", action="store_true", help="write report.md/json from the records and stop")
    a = ap.parse_args(argv)
    if a.report:
        print(report(a.out))
        return 0
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"--variants: expected names of {', '.join(VARIANTS)}, got {v!r}")
    if a.run is None or ("c" in variants and a.run_nogt is None):
        ap.error("--run (and --run-nogt for variant c) are required")
    import torch
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    if a.dataset == "world":
        ds, qs = heldout_questions(a.n, a.start, a.world_seed)
    else:
        if a.start < 50:
            ap.error("--start: MuSiQue / HotpotQA questions 1-50 are training data; use --start 50")
        ds, qs = dataset_questions(a.dataset, a.n, a.start)
    cache: Dict = {}
    for v in variants:
        run_variant(v, a, ds, qs, cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
