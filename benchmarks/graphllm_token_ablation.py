"""Does the graph token help? Held-out loss of RAS's GraphLLM variants (issue 41 part 5, at the
scale of a short CPU run), per sample, with paired bootstrap intervals.

Variants, each with the same base model (SmolLM2-135M-Instruct) and the same held-out samples:
- (a) prompted, untrained: the base model, no graph token, no adapter;
- (b) trained with the graph token (a run of ``rasfast graphllm train``);
- (c) trained without it (``--no-graph-token``: the paper's "No GraphToken"), if given;
- (d) the run of (b) with the graph token left out at inference.

The measure is the target tokens' cross-entropy (planner outputs: ``[SUBQ] q`` /
``[SUFFICIENT]``; answerer outputs: the answer), one forward pass per sample, not EM/F1 of
generated answers: the cheapest measure that every variant shares. Lower is better; the
intervals are of the paired per-sample differences against (b).

    python benchmarks/graphllm_token_ablation.py --run RUN --heldout DATA/heldout.jsonl \
        [--run-nogt RUN_NOGT] [--n 120] --out benchmarks/results/graphllm_ablation
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict
import os
import random
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from machine import header_markdown, machine_info  # noqa: E402

from rasfast.llm.graph_llm_train import GraphBuilder, TrainConfig, build_graph_llm, load_trained  # noqa: E402
from rasfast.llm.training_data import GraphLLMSample  # noqa: E402
from rasfast.qa_eval.tables import paired_bootstrap  # noqa: E402


def read_heldout(path: str, n: int, seed: int):
    """n samples drawn evenly over the sources (world / musique / hotpotqa), with the source."""
    by_src = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                by_src.setdefault(d.get("source") or "?", []).append(d)
    rng = random.Random(seed)
    per = max(1, n // len(by_src))
    out = []
    for src in sorted(by_src):
        rows = by_src[src]
        for d in rng.sample(rows, min(per, len(rows))):
            out.append((src, GraphLLMSample(d["task"], d["question"], d.get("context", []), d.get("graph"),
                                            d.get("target"))))
    return out


@torch.no_grad()
def per_sample_loss(g, samples):
    g.eval()
    return [float(g.loss([s])) for s in samples]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a run of `rasfast graphllm train` (graph token on)")
    ap.add_argument("--run-nogt", default=None, help="a run trained with --no-graph-token")
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--n", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "graphllm_ablation"))
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    t0, load0 = time.time(), os.getloadavg()
    picked = read_heldout(a.heldout, a.n, a.seed)
    srcs = [s for s, _ in picked]
    g, text, cfg = load_trained(a.run)
    build = GraphBuilder(text)
    samples = build.samples([s for _, s in picked])
    losses = {"b": per_sample_loss(g, samples)}
    g.graph_token = False
    losses["d"] = per_sample_loss(g, samples)
    if a.run_nogt:
        gc, _, _ = load_trained(a.run_nogt)
        losses["c"] = per_sample_loss(gc, samples)
        del gc
    # (a): the same configuration, freshly built (LoRA's B starts at zero: the base model's
    # outputs), without the graph token
    gu, _, _ = build_graph_llm(TrainConfig.from_dict({**asdict(cfg), "graph_token": False}))
    losses["a"] = per_sample_loss(gu, samples)
    names = {"a": "(a) prompted, untrained", "b": "(b) trained with the graph token",
             "c": "(c) trained without it (No GraphToken)", "d": "(d) (b) with the token removed at inference"}
    rows = []
    for v in ("a", "b", "c", "d"):
        if v not in losses:
            continue
        row = {"variant": names[v], "mean_loss": sum(losses[v]) / len(losses[v])}
        if v != "b":
            row["minus_b"] = paired_bootstrap(losses[v], losses["b"])
        row["by_source"] = {s: sum(l for l, ss in zip(losses[v], srcs) if ss == s) / srcs.count(s)
                            for s in sorted(set(srcs))}
        rows.append(row)
    res = {"machine": machine_info(), "n": len(samples), "sources": {s: srcs.count(s) for s in sorted(set(srcs))},
           "tasks": {t: sum(s.task == t for s in samples) for t in ("plan", "answer")},
           "runs": {"b": a.run, "c": a.run_nogt}, "rows": rows,
           "per_sample": [{"source": s, "task": x.task, **{v: losses[v][i] for v in losses}}
                          for i, (s, x) in enumerate(zip(srcs, samples))],
           "seconds": time.time() - t0, "load_before": load0, "load_after": os.getloadavg()}
    with open(a.out + ".json", "w") as f:
        json.dump(res, f, indent=1, default=str)
    L = ["# Does the graph token help? Held-out loss of the GraphLLM variants", "", header_markdown(), "",
         f"{len(samples)} held-out samples ({', '.join(f'{k} {v}' for k, v in res['sources'].items())}; "
         f"plan {res['tasks']['plan']}, answer {res['tasks']['answer']}), target-token cross-entropy, one "
         f"forward pass each, {a.threads} thread(s); load average {load0[0]:.1f} before, "
         f"{res['load_after'][0]:.1f} after; {res['seconds']:.0f} s. Difference = variant - (b), paired "
         "bootstrap 95% interval over samples (10,000 resamples).", "",
         "| variant | mean loss | " + " | ".join(res["sources"]) + " | minus (b) [95% CI] |",
         "|---|---:|" + "---:|" * len(res["sources"]) + "---|"]
    for r in rows:
        d = r.get("minus_b")
        ci = "-" if d is None else f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"
        L.append(f"| {r['variant']} | {r['mean_loss']:.3f} | " +
                 " | ".join(f"{r['by_source'][s]:.3f}" for s in res["sources"]) + f" | {ci} |")
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
