"""Every CPU instruction-set variant of the kernels, timed against each other in one run.

The kernels are compiled for AVX-512, AVX2 and the baseline ISA and pick the best at run time
(the build uses no -march flag); each ``*_set_simd`` forces one. This script times, with
every variant this CPU runs, interleaved (rounds x variants, best of each):

- the theme scan (pass 1 of theme_scoped_search) against a numpy streaming read;
- segment_topk_scores, by-row path, on a cache-resident and a 150 MB table;
- graph_transformer_pool on rasfast demo's batch shape (and on both projection GEMMs,
  oneDNN and BLAS, rasfast.ops.cpu_gemm) against its torch reference.

    .venv/bin/python benchmarks/cpu_simd_report.py            # writes results/cpu_simd.md/.json
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np
import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import rasfast  # noqa: E402
from machine import header_markdown, machine_info  # noqa: E402
from rasfast.ops import cpu_gemm  # noqa: E402


def best(fn, repeats):
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def interleaved(cases, variants, set_variant, rounds, repeats):
    """{(case, variant): best seconds over rounds}; variants alternate inside each round."""
    out = {}
    for _ in range(rounds):
        for name, fn in cases.items():
            for v in variants:
                set_variant(v)
                t = best(fn, repeats)
                out[(name, v)] = min(out.get((name, v), float("inf")), t)
    return out


def theme_section(mod, rounds, repeats):
    rng = np.random.default_rng(0)
    N, T, B = 1_000_000, 298, 16
    c = rng.random((N, T), dtype=np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    q = rng.random((B, T), dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    keys = np.empty((B, N), dtype=np.uint32)
    read = best(lambda: c.sum(), repeats)
    variants = mod.theme_simd_variants()
    top = mod.theme_simd_level()
    try:
        t = interleaved({"scan": lambda: mod.theme_scan_keys(q, c, 0, False, keys)}, variants,
                        mod.theme_set_simd, rounds, repeats)
    finally:
        mod.theme_set_simd(top)
    return {"sizes": f"N={N:,} x T={T} float32 ({c.nbytes / 1e9:.2f} GB), B={B} queries",
            "read_gb_s": c.nbytes / read / 1e9,
            "gb_s": {v: c.nbytes / t[("scan", v)] / 1e9 for v in variants}}


def segment_section(mod, rounds, repeats):
    B, M, D, n = 256, 2000, 384, 20
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, D, generator=g)
    ptr = torch.arange(0, B * M + 1, M)
    cases = {}
    for T in (2_000, 100_000):
        for dt in (torch.float32, torch.bfloat16):
            table = torch.randn(T, D, generator=g).to(dt)
            ids = torch.randint(0, T, (B * M,), generator=g)
            cases[f"table {T:,} x {D} {str(dt).replace('torch.', '')}"] = (
                lambda table=table, ids=ids: rasfast.segment_topk_scores(q, table, ptr, n, cand_ids=ids,
                                                                         backend="cpu"))
    variants = mod.segment_simd_variants()
    top = mod.segment_simd_level()
    try:
        t = interleaved(cases, variants, mod.segment_set_simd, rounds, repeats)
    finally:
        mod.segment_set_simd(top)
    return {"sizes": f"B={B} queries x {M} candidates (table rows by cand_ids), D={D}, n={n}",
            "ms": {c: {v: 1e3 * t[(c, v)] for v in variants} for c in cases}}


def graph_section(mod, rounds, repeats):
    from rasfast.ops.graph_conv import graph_transformer_pool
    from rasfast.ops.graph_conv_params import ConvWeights, NormWeights

    g = torch.Generator().manual_seed(1)
    sizes = [25] * 16 + [20]                   # 17 subgraphs, 420 nodes (the demo's batch)
    ptr = torch.tensor([0] + list(np.cumsum(sizes)), dtype=torch.long)
    src, dst = [], []
    for k, s in enumerate(sizes):
        m = 756 * s // 420
        src.append(torch.randint(0, s, (m,), generator=g) + ptr[k])
        dst.append(torch.randint(0, s, (m,), generator=g) + ptr[k])
    ei = torch.stack([torch.cat(src), torch.cat(dst)])
    preds = torch.randn(28, 384, generator=g)            # 28 distinct predicate embeddings
    ea = preds[torch.randint(0, 28, (ei.shape[1],), generator=g)]
    x = torch.randn(int(ptr[-1]), 384, generator=g)

    def lin(o, i, bias=True):
        return (torch.randn(o, i, generator=g) / i ** 0.5, torch.randn(o, generator=g) * 0.1 if bias else None)

    layers = []
    for li, din in enumerate((384, 256, 256)):
        (wq, bq), (wk, bk), (wv, bv), (ws, bs) = (lin(256, din) for _ in range(4))
        we, _ = lin(256, 384, bias=False)
        w = ConvWeights(w_query=wq, b_query=bq, w_key=wk, b_key=bk, w_value=wv, b_value=bv,
                        w_edge=we, w_skip=ws, b_skip=bs, w_beta=None, heads=4, channels=64,
                        concat=True)
        norm = NormWeights(torch.ones(256), torch.zeros(256)) if li < 2 else None
        layers.append((w, norm, norm is not None))
    run = {be: (lambda be=be: graph_transformer_pool(x, ei, ea, ptr, layers, backend=be))
           for be in ("cpu", "torch")}
    variants = [(s, gm) for s in mod.graph_conv_simd_variants() for gm in ("onednn", "blas")
                if gm == "blas" or cpu_gemm.backend() == "onednn"]
    top = mod.graph_conv_simd_level()

    def setv(v):
        mod.graph_conv_set_simd(v[0])
        cpu_gemm.set_backend(v[1])
    try:
        t = interleaved({"cpu": run["cpu"]}, variants, setv, rounds, repeats)
        t_ref = min(best(run["torch"], repeats) for _ in range(rounds))
    finally:
        mod.graph_conv_set_simd(top)
        cpu_gemm.set_backend(None)
    return {"sizes": f"{len(sizes)} graphs, {int(ptr[-1])} nodes, {ei.shape[1]} edges, 384-d, "
                     "3 layers of 4 heads x 64, edge_dim 384 (28 distinct edge rows)",
            "torch_ms": 1e3 * t_ref,
            "ms": {f"{s} + {gm}": 1e3 * t[("cpu", (s, gm))] for s, gm in variants}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results" / "cpu_simd"))
    a = ap.parse_args(argv)
    mod = rasfast.dispatch.cpu_module()
    load0 = os.getloadavg()
    res = {"machine": machine_info(), "load_start": load0,
           "theme": theme_section(mod, a.rounds, a.repeats),
           "segment": segment_section(mod, a.rounds, a.repeats),
           "graph": graph_section(mod, a.rounds, a.repeats)}
    res["load_end"] = os.getloadavg()
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=2, default=str))
    th, sg, gr = res["theme"], res["segment"], res["graph"]
    lines = ["# CPU kernels under every instruction-set variant", "", header_markdown(),
             f"Best of {a.repeats} calls per round, {a.rounds} interleaved rounds, one process. "
             f"Load average (1/5/15 min) {' '.join(f'{x:.2f}' for x in load0)} at the start, "
             f"{' '.join(f'{x:.2f}' for x in res['load_end'])} at the end.", "",
             f"## Theme scan (pass 1), {th['sizes']}", "",
             f"numpy streaming read (`c.sum()`): {th['read_gb_s']:.2f} GB/s.", "",
             "| variant | GB/s of corpus read | share of the read bandwidth |", "|---|---:|---:|"]
    for v, gbs in th["gb_s"].items():
        lines.append(f"| {v} | {gbs:.2f} | {100 * gbs / th['read_gb_s']:.0f}% |")
    lines += ["", f"## segment_topk_scores, {sg['sizes']}", ""]
    vs = list(next(iter(sg["ms"].values())))
    lines += ["| case | " + " | ".join(f"{v} ms" for v in vs) + f" | {vs[-1]} / {vs[0]} |",
              "|---|" + "---:|" * (len(vs) + 1)]
    for c, row in sg["ms"].items():
        lines.append(f"| {c} | " + " | ".join(f"{row[v]:.1f}" for v in vs) +
                     f" | {row[vs[-1]] / row[vs[0]]:.2f}x |")
    lines += ["", f"## graph_transformer_pool, {gr['sizes']}", "",
              f"torch reference (PyG's TransformerConv in plain torch, MKL GEMMs): {gr['torch_ms']:.2f} ms.", "",
              "| kernels + projection GEMM | ms | torch reference / this |", "|---|---:|---:|"]
    for v, ms in gr["ms"].items():
        lines.append(f"| {v} | {ms:.2f} | {gr['torch_ms'] / ms:.2f}x |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
