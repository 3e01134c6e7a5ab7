"""TripleGraph build time: C++ builder at 1e6 triples, and vs the pure-Python builder (same run).

Synthetic ASCII triples with Zipf entity frequencies (rasfast.graph.synthetic_triples), plus
the real MuSiQue OpenIE triples when ../shared/data is there. Writes
benchmarks/results/graph_build.md.

    .venv/bin/python benchmarks/graph_build.py [--n 1000000] [--python-n 100000]
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from machine import header_markdown  # noqa: E402

from rasfast.graph import TripleGraph, synthetic_triples  # noqa: E402
from rasfast.reference.triple_graph import build_triple_graph  # noqa: E402


def best_of(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--python-n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "graph_build.md"))
    args = ap.parse_args()

    rows = []
    TripleGraph.from_triples([("a", "p", "b")])  # load the module outside the timings
    n = args.n
    configs = [  # (label, zipf, offset, n_entities, max_degree)
        ("Zipf 1.0, top degree ~2.3k", 1.0, 100, int(0.6 * n), 500),
        ("Zipf 1.0, top degree ~2.3k", 1.0, 100, int(0.6 * n), 100),
        ("Zipf 0.9, top degree ~220", 0.9, 1000, n, None),
    ]
    for label, zipf, offset, n_ent, md in configs:
        triples = synthetic_triples(n, n_ent, zipf=zipf, offset=offset)
        t, g = best_of(lambda: TripleGraph.from_triples(triples, max_degree=md), args.repeats)
        s = g.degree_stats()
        rows.append((f"synthetic {n:,} ({label})", md, s, t, None))
        print(rows[-1][:2], f"{t:.3f} s", s, flush=True)
        del g

    # C++ vs pure-Python builder at a size the Python one finishes quickly
    pn = args.python_n
    triples = synthetic_triples(pn, int(0.6 * pn), zipf=1.0, offset=100)
    t_cpp, g = best_of(lambda: TripleGraph.from_triples(triples, max_degree=100), args.repeats)
    t_py, _ = best_of(lambda: build_triple_graph(triples, max_degree=100), 1)
    rows.append((f"synthetic {pn:,} (Zipf 1.0)", 100, g.degree_stats(), t_cpp, t_py))
    print(rows[-1][:2], f"cpp {t_cpp:.3f} s, python {t_py:.3f} s", flush=True)

    try:
        import rasfast.data as data
        ds = data.load_dataset("musique")
        t, g = best_of(lambda: TripleGraph.from_dataset(ds), args.repeats)
        per_passage = ds.triples
        flat = [t for p in per_passage for t in p]
        t_py, _ = best_of(lambda: build_triple_graph(flat), 1)
        rows.append(("MuSiQue OpenIE (17,419 input)", None, g.degree_stats(), t, t_py))
        print(rows[-1][:2], f"cpp {t:.3f} s, python {t_py:.3f} s", flush=True)
    except FileNotFoundError:
        print("MuSiQue data not found: skipped")

    lines = ["# TripleGraph build time\n", header_markdown(), "",
             "Build = `TripleGraph.from_triples` end to end (validation, normalisation, entity ids,",
             "CSR adjacency, kept-triple list), best of "
             f"{args.repeats}. Python = rasfast/reference/triple_graph.py (one run).", "",
             "| input | max_degree | triples kept | entities | adjacency entries | top entity degree "
             "| hub entities | C++ build (s) | Python build (s) | speed-up |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, md, s, t, t_py in rows:
        py = f"{t_py:.3f}" if t_py else "-"
        sp = f"{t_py / t:.0f}x" if t_py else "-"
        lines.append(f"| {name} | {md if md is not None else 'none'} | {s['triples']:,} | "
                     f"{s['entities']:,} | {s['edges']:,} | {s['entity_degree_max']:,} | "
                     f"{s['hub_entities']:,} | {t:.3f} | {py} | {sp} |")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
