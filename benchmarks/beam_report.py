"""triple_beam_search on the CPU vs its peers, in one run, with a parity check.

Peers (DESIGN.md s.4 / issue 4): the pure-Python transcription of Algorithm 1 and the
vectorised torch reference. Default sizes are the issue's: a 200,000-triple graph with
power-law entity degrees (benchmarks/beam_graph.py, seeded), D=384, B=256 queries with 50
seeds each, beam width 10, length 2, max_neighbors 100 (gamma = 2 * width = 20).
The pure-Python transcription runs on the first --python-queries queries and its time is
scaled to B (queries are independent, so the per-query time is what matters).

    .venv/bin/python benchmarks/beam_report.py            # writes benchmarks/results/beam.{md,json}
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
from beam_graph import describe, make_problem  # noqa: E402
from machine import header_markdown, machine_info  # noqa: E402

import rasfast  # noqa: E402
from rasfast.reference.beam import beam_search_python  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def timed(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=256)
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--width", type=int, default=10)
    ap.add_argument("--length", type=int, default=2)
    ap.add_argument("--max-neighbors", type=int, default=100)
    ap.add_argument("--python-queries", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5, help="cpu backend repeats (median reported)")
    ap.add_argument("--torch-repeats", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(RESULTS, "beam"))
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    P = make_problem(args.n, args.dim, args.queries, args.seeds, seed=0)
    gen_s = time.perf_counter() - t0
    graph, emb, q, seeds = P["graph"], P["triple_emb"], P["q_emb"], P["seeds"]
    kw = dict(beam_width=args.width, max_len=args.length, max_neighbors=args.max_neighbors)
    gamma = 2.0 * args.width
    print(f"graph: {describe(graph)} (generated in {gen_s:.1f} s)")

    call = lambda be: rasfast.triple_beam_search(graph, emb, q, seeds, backend=be, **kw)  # noqa: E731
    call("cpu")  # warm-up (page in the embeddings)
    cpu, cpu_t = timed(lambda: call("cpu"), args.repeats)
    print(f"cpu: median {statistics.median(cpu_t) * 1e3:.1f} ms over {args.repeats}")
    ref, torch_t = timed(lambda: call("torch"), args.torch_repeats)
    print(f"torch reference: {statistics.median(torch_t):.2f} s")
    same = (np.array_equal(cpu.sequences, ref.sequences) and np.array_equal(cpu.lengths, ref.lengths)
            and np.allclose(cpu.scores[np.isfinite(ref.scores)], ref.scores[np.isfinite(ref.scores)],
                            atol=1e-5))

    indptr_l, indices_l = graph[0].tolist(), graph[1].tolist()  # the transcription's data: lists
    k = min(args.python_queries, args.queries)
    t0 = time.perf_counter()
    py_out = [beam_search_python(indptr_l, indices_l, emb, q[i], seeds[i], args.width, args.length,
                                 gamma, args.max_neighbors) for i in range(k)]
    py_s = time.perf_counter() - t0
    py_scaled = py_s / k * args.queries
    py_same = all(ref.sequences[i, :len(s), :len(s[0]) if s else 0].tolist() == s and
                  np.allclose(ref.scores[i, :len(s)], sc, atol=1e-5)
                  for i, (s, sc) in enumerate(py_out))
    print(f"pure Python: {py_s:.2f} s for {k} queries -> {py_scaled:.1f} s scaled to {args.queries}")

    cpu_med = statistics.median(cpu_t)
    rows = [
        ("rasfast cpu (C++/OpenMP)", cpu_med, 1.0),
        ("torch reference (vectorised per query)", statistics.median(torch_t),
         statistics.median(torch_t) / cpu_med),
        (f"pure-Python transcription ({k} queries, scaled to {args.queries})", py_scaled,
         py_scaled / cpu_med),
    ]
    info = machine_info()
    result = dict(machine=info, sizes=vars(args) | {"gamma": gamma}, graph=describe(graph),
                  cpu_s=cpu_t, torch_s=torch_t, python_s=py_s, python_queries=k,
                  python_scaled_s=py_scaled, speedup_vs_torch=rows[1][2],
                  speedup_vs_python=rows[2][2], cpu_equals_torch=bool(same),
                  python_equals_torch=bool(py_same))
    md = ["# triple_beam_search: cpu backend vs peers", "", header_markdown(),
          f"Sizes: {describe(graph)}; D={args.dim}, B={args.queries} queries x {args.seeds} seeds, "
          f"beam width {args.width}, length {args.length}, max_neighbors {args.max_neighbors}, "
          f"gamma {gamma:g}; float32; rasfast threads {info.get('rasfast_threads')}, "
          f"torch threads {info['torch_threads']}.", "",
          "| implementation | time for B queries | cpu speed-up |", "|---|---:|---:|"]
    md += [f"| {name} | {t * 1e3:.1f} ms | {r:.1f}x |" for name, t, r in rows]
    md += ["", f"cpu median of {args.repeats} runs (all: {', '.join(f'{t * 1e3:.1f}' for t in cpu_t)} ms); "
           f"torch reference {args.torch_repeats} run(s). Parity in the same run: cpu == torch "
           f"reference: {same}; pure-Python == torch reference on its {k} queries: {py_same}.",
           "Ratios are the meaningful numbers on a shared machine; absolute times depend on load."]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    with open(args.out + ".json", "w") as f:
        json.dump(result, f, indent=2)
    print("\n".join(md))
    if not (same and py_same):
        raise SystemExit("parity check failed")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
