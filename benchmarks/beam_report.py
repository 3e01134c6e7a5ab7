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
    """(last output, wall seconds per run, process CPU seconds per run -- all threads)."""
    walls, cpus, out = [], [], None
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return out, walls, cpus


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
    cmod = rasfast.dispatch.cpu_module()
    threads = cmod.omp_max_threads()
    call("cpu")  # warm-up (page in the embeddings)
    cpu, cpu_t, cpu_c = timed(lambda: call("cpu"), args.repeats)
    cmod.set_num_threads(1)
    _, cpu1_t, cpu1_c = timed(lambda: call("cpu"), args.repeats)
    cmod.set_num_threads(threads)
    print(f"cpu: median {statistics.median(cpu_t) * 1e3:.1f} ms ({threads} threads), "
          f"{statistics.median(cpu1_t) * 1e3:.1f} ms (1 thread)")
    ref, torch_t, torch_c = timed(lambda: call("torch"), args.torch_repeats)
    print(f"torch reference: {statistics.median(torch_t):.2f} s")
    same = (np.array_equal(cpu.sequences, ref.sequences) and np.array_equal(cpu.lengths, ref.lengths)
            and np.allclose(cpu.scores[np.isfinite(ref.scores)], ref.scores[np.isfinite(ref.scores)],
                            atol=1e-5))

    indptr_l, indices_l = graph[0].tolist(), graph[1].tolist()  # the transcription's data: lists
    k = min(args.python_queries, args.queries)
    py_out, py_t, py_c = timed(lambda: [beam_search_python(
        indptr_l, indices_l, emb, q[i], seeds[i], args.width, args.length, gamma,
        args.max_neighbors) for i in range(k)], 1)
    scale = args.queries / k
    py_wall, py_cpu = py_t[0] * scale, py_c[0] * scale
    py_same = all(ref.sequences[i, :len(s), :len(s[0]) if s else 0].tolist() == s and
                  np.allclose(ref.scores[i, :len(s)], sc, atol=1e-5)
                  for i, (s, sc) in enumerate(py_out))
    print(f"pure Python: {py_t[0]:.2f} s for {k} queries -> {py_wall:.1f} s scaled to {args.queries}")

    med = statistics.median
    base_w, base_c = med(cpu_t), med(cpu_c)
    rows = [
        (f"rasfast cpu (C++/OpenMP, {threads} threads)", base_w, base_c),
        ("rasfast cpu (1 thread)", med(cpu1_t), med(cpu1_c)),
        ("torch reference (vectorised per query)", med(torch_t), med(torch_c)),
        (f"pure-Python transcription ({k} queries, scaled to {args.queries})", py_wall, py_cpu),
    ]
    info = machine_info()
    result = dict(machine=info, sizes=vars(args) | {"gamma": gamma}, graph=describe(graph),
                  cpu_threads=threads, cpu_wall_s=cpu_t, cpu_cpu_s=cpu_c, cpu_1thread_wall_s=cpu1_t,
                  cpu_1thread_cpu_s=cpu1_c, torch_wall_s=torch_t, torch_cpu_s=torch_c,
                  python_wall_s=py_t[0], python_cpu_s=py_c[0], python_queries=k,
                  speedup_wall_vs_torch=med(torch_t) / base_w, speedup_wall_vs_python=py_wall / base_w,
                  speedup_cputime_vs_torch=med(torch_c) / base_c,
                  speedup_cputime_vs_python=py_cpu / base_c,
                  cpu_equals_torch=bool(same), python_equals_torch=bool(py_same))
    md = ["# triple_beam_search: cpu backend vs peers", "", header_markdown(),
          f"Sizes: {describe(graph)}; D={args.dim}, B={args.queries} queries x {args.seeds} seeds, "
          f"beam width {args.width}, length {args.length}, max_neighbors {args.max_neighbors}, "
          f"gamma {gamma:g}; float32; torch threads {info['torch_threads']}. "
          f"Machine load average at start: {os.getloadavg()[0]:.1f}.", "",
          "| implementation | wall time, B queries | speed-up (wall) | CPU time (all threads) "
          "| speed-up (CPU time) |", "|---|---:|---:|---:|---:|"]
    md += [f"| {name} | {w * 1e3:.1f} ms | {w / base_w:.1f}x | {c * 1e3:.1f} ms "
           f"| {c / base_c:.1f}x |" for name, w, c in rows]
    md += ["", f"Speed-up = time / rasfast cpu ({threads} threads). Wall: median of {args.repeats} "
           f"runs for cpu (all: {', '.join(f'{t * 1e3:.1f}' for t in cpu_t)} ms), "
           f"{args.torch_repeats} run(s) for the torch reference. CPU time (process time of all "
           "threads) is the load-independent measure on a shared machine; wall times depend on "
           "load. Parity in the same run: cpu == torch reference: "
           f"{same}; pure-Python == torch reference on its {k} queries: {py_same}."]
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
