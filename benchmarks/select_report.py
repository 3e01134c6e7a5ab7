"""select_k on the CPU vs torch.topk and numpy.argpartition, all measured in one run.

Writes benchmarks/results/select.md and select.json (with machine info). Each round times
every implementation once, interleaved, so a busy machine slows all of them alike; the
table reports the median (and best) over rounds and the speed-up ratios.

    .venv/bin/python benchmarks/select_report.py [--batch 16] [--n 1000000] [--rounds 7]

On a machine shared with other busy processes, OpenMP's default spin-waiting makes every
multi-threaded library here (torch included) erratic; OMP_WAIT_POLICY=passive in the
environment (set before Python starts) gives stable numbers there.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import header_markdown, machine_info  # noqa: E402

import rasfast  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def implementations(x: torch.Tensor, k: int):
    """name -> zero-argument callable; the peers return what they return natively."""
    xn = x.numpy()
    impls = {
        "rasfast cpu (sorted)": lambda: rasfast.select_k(x, k, backend="cpu"),
        "rasfast cpu (unsorted)": lambda: rasfast.select_k(x, k, sorted=False, backend="cpu"),
        "torch.topk (sorted)": lambda: torch.topk(x, k, dim=1, largest=False, sorted=True),
        "np.argpartition (unsorted)": lambda: np.argpartition(xn, k - 1, axis=1),
    }
    return impls


def measure(B: int, N: int, ks, rounds: int, seed: int = 0):
    x = torch.randn(B, N, generator=torch.Generator().manual_seed(seed))
    rows = []
    for k in ks:
        impls = implementations(x, k)
        for fn in impls.values():
            fn()  # warm-up: page faults, thread pools
        times = {name: [] for name in impls}
        for _ in range(rounds):
            for name, fn in impls.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        row = {"B": B, "N": N, "k": k,
               "median_ms": {n: statistics.median(t) * 1e3 for n, t in times.items()},
               "best_ms": {n: min(t) * 1e3 for n, t in times.items()}}
        ours = row["median_ms"]["rasfast cpu (sorted)"]
        row["topk_over_rasfast"] = row["median_ms"]["torch.topk (sorted)"] / ours
        row["argpartition_over_rasfast"] = row["median_ms"]["np.argpartition (unsorted)"] / ours
        rows.append(row)
        print(f"k={k}: " + ", ".join(f"{n} {v:.1f} ms" for n, v in row["median_ms"].items()), flush=True)
    return rows


def load_average() -> str:
    try:
        return "load average (1/5/15 min) at the end of the run: " + \
            " / ".join(f"{v:.1f}" for v in os.getloadavg()) + \
            f"; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}"
    except OSError:
        return "load average unknown"


def to_markdown(rows, rounds: int) -> str:
    names = list(rows[0]["median_ms"])
    out = ["# select_k on the CPU: rasfast vs torch.topk vs numpy.argpartition", "",
           header_markdown(), load_average() + " (a busy machine inflates all times).", "",
           f"float32 input `torch.randn(B, N)`, smallest k per row. Median (best) of {rounds} "
           "interleaved rounds, in ms. rasfast's sorted result is ordered by (value, index) "
           "like torch.topk's; argpartition's is unordered. Ratios: peer median / rasfast "
           "sorted median (> 1: rasfast is faster).", "",
           "| B | N | k | " + " | ".join(names) + " | topk / rasfast | argpartition / rasfast |",
           "|---|---|---|" + "---|" * len(names) + "---|---|"]
    for r in rows:
        cells = [f"{r['median_ms'][n]:.1f} ({r['best_ms'][n]:.1f})" for n in names]
        out.append(f"| {r['B']} | {r['N']:,} | {r['k']:,} | " + " | ".join(cells) +
                   f" | {r['topk_over_rasfast']:.2f}x | {r['argpartition_over_rasfast']:.2f}x |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--ks", type=int, nargs="+", default=[10, 10_000, 250_000])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--out", default=os.path.join(RESULTS, "select"))
    a = p.parse_args(argv)
    rows = measure(a.batch, a.n, a.ks, a.rounds)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out + ".md", "w") as f:
        f.write(to_markdown(rows, a.rounds))
    with open(a.out + ".json", "w") as f:
        json.dump({"machine": machine_info(), "load": load_average(), "rounds": a.rounds,
                   "rows": rows}, f, indent=2)
    print(f"wrote {a.out}.md and {a.out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
