"""Evaluates the default RAS loop (dense retrieval, dataset triples, heuristic baseline
planner/answerer) on the generated demo world, MuSiQue and HotpotQA (../shared/data).

Metrics: acc (golden match: a gold answer occurs in the prediction, RAS's "Acc"), token F1,
exact match; R@2 / R@5 = recall of gold passages among the top-2 / top-5 of every step's
sub-query (pooled over the loop's steps), R@all = among everything the loop retrieved;
rounds = retrieval steps per question.

A thin wrapper over ``rasfast eval loop``: each (encoder, dataset) pair is one run of

    .venv/bin/rasfast eval loop --dataset NAME --encoder minilm|hashing --k 5 --batch 32 [--n N] \\
        --no-progress --json RUN.json

in this process; this script adds the machine header and gathers the runs into one write-up.

Usage: .venv/bin/python benchmarks/loop_eval.py [--encoder minilm --encoder hashing] [--n N]
Writes benchmarks/results/loop_eval.md and .json.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine import header_markdown, machine_info  # noqa: E402

COLS = ["acc", "f1", "em", "R@2", "R@5", "R@all", "rounds", "errors"]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoder", action="append", choices=["minilm", "hashing"])
    ap.add_argument("--dataset", action="append", choices=["demo", "musique", "hotpotqa"])
    ap.add_argument("--n", type=int, default=None, help="first N questions per dataset (default all)")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results" / "loop_eval"))
    return ap.parse_args(argv)


def commands(args, json_dir) -> list:
    """``(encoder, dataset, argv)`` for each run: the ``rasfast eval loop`` command line of these options."""
    runs = []
    for e in args.encoder or ["minilm", "hashing"]:
        for name in args.dataset or ["demo", "musique", "hotpotqa"]:
            argv = ["eval", "loop", "--dataset", name, "--encoder", e, "--k", str(args.k), "--batch", "32",
                    "--no-progress", "--json", str(pathlib.Path(json_dir) / f"{e}-{name}.json")]
            if args.n:
                argv += ["--n", str(args.n)]
            runs.append((e, name, argv))
    return runs


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("RASFAST_CACHE", str(pathlib.Path(tempfile.gettempdir()) / "rasfast-bench-cache"))
    from rasfast.cli import main as rasfast
    from rasfast.systems.ras import EvalReport

    lines = ["# RAS loop evaluation (heuristic baseline planner/answerer)", "", header_markdown(),
             f"Loop: dense exact retrieval (k={args.k} per sub-query), triples from the dataset "
             f"(demo: gold triples; MuSiQue: its GPT-3.5 OpenIE triples; HotpotQA: the model-free "
             f"sentence-pattern extractor), heuristic planner/answerer, max_iters=5, batches of 32. "
             f"The heuristic components are a BASELINE that needs no model; the demo world is "
             f"generated with a fixed relation vocabulary that they can follow, real questions are not.",
             "", "| dataset | encoder | n | " + " | ".join(COLS) + " | seconds |",
             "|---|---|---:|" + "---:|" * (len(COLS) + 1)]
    payload = {"machine": machine_info(), "k": args.k, "runs": []}
    detail = []
    with tempfile.TemporaryDirectory() as tmp:
        for e, name, cmd in commands(args, tmp):
            try:
                rc = rasfast(cmd)
            except SystemExit as err:   # e.g. a dataset not under ../shared/data (the CLI named it)
                rc = err.code
            out = pathlib.Path(cmd[cmd.index("--json") + 1])
            if rc or not out.exists():
                print(f"{name}: skipped")
                continue
            run = json.loads(out.read_text())
            rep = EvalReport(name, run["n"], run["metrics"], run["by_type"])
            m = rep.metrics
            lines.append(f"| {name} | {run['encoder']} | {rep.n} | " + " | ".join(f"{m[c]:.3f}" for c in COLS)
                         + f" | {run['seconds']:.1f} |")
            payload["runs"].append({k: run[k] for k in ("dataset", "encoder", "n", "metrics", "by_type", "seconds")})
            detail.append((name, run["encoder"], rep))
    for name, ename, rep in detail:
        if rep.by_type:
            lines += ["", f"By question type: {name}, {ename}", "", "```", rep.table(), "```"]
    lines.append("")
    pathlib.Path(args.out + ".md").write_text("\n".join(lines))
    pathlib.Path(args.out + ".json").write_text(json.dumps(payload, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
