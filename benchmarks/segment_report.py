"""segment_topk_scores (cpu) vs the best torch formulations, in the same run.

    .venv/bin/python benchmarks/segment_report.py [--B 256] [--mean-len 2000] [--D 384] [--n 20]

KiRAG's aligner step: B queries, each with its own ragged list of candidate triples (lengths
uniform in [mean/2, 3*mean/2], or all equal with --equal), inner products + top-n per query.
Two layouts: candidates as indices into a triple embedding table of T rows (the KiRAG case:
triples are embedded once), and candidates as a fresh [M, D] matrix. Peers (torch, 2 threads):

- gather + einsum: rows gathered (table layout), per-candidate dot with q[segment] by
  einsum, scattered into a padded [B, Lmax] matrix, topk;
- padded bmm: candidates gathered into a padded [B, Lmax, D] tensor, bmm with q, topk
  (with equal lengths and the matrix layout: a zero-copy view, no gather);
- full GEMM (table layout): q @ table.T once, then the candidates' scores are gathered;
- per-query loop: rows[s:e] @ q[b] then topk, query by query.

Writes benchmarks/results/segment.md (+ .json) with machine info and the load average.
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from machine import header_markdown, machine_info  # noqa: E402

from rasfast.ops.segment import segment_topk_scores  # noqa: E402


def peers_table(q, table, ids, ptr, n):
    B = q.shape[0]
    lens = ptr[1:] - ptr[:-1]
    Lmax = int(lens.max())
    seg = torch.repeat_interleave(torch.arange(B), lens)
    pos = torch.arange(len(ids)) - ptr[:-1][seg]
    pidx = torch.zeros((B, Lmax), dtype=torch.int64)
    pidx[seg, pos] = ids
    pad = torch.arange(Lmax)[None, :] >= lens[:, None]

    def padded_topk(s):
        S = torch.full((B, Lmax), float("-inf"))
        S[seg, pos] = s
        return torch.topk(S, n, dim=1)

    def gather_einsum():
        return padded_topk(torch.einsum("md,md->m", table[ids], q[seg]))

    def padded_bmm():
        S = torch.bmm(table[pidx], q[:, :, None])[:, :, 0].masked_fill(pad, float("-inf"))
        return torch.topk(S, n, dim=1)

    def full_gemm():
        return padded_topk((q @ table.T)[seg, ids])

    def loop():
        return [torch.topk(table[ids[int(ptr[b]):int(ptr[b + 1])]] @ q[b], n) for b in range(B)]

    return {"gather + einsum + padded topk": gather_einsum, "padded bmm + topk": padded_bmm,
            "full GEMM q @ table.T + gather + topk": full_gemm, "per-query loop (mv + topk)": loop}


def peers_matrix(q, cand, ptr, n, equal):
    B = q.shape[0]
    lens = ptr[1:] - ptr[:-1]
    Lmax = int(lens.max())
    seg = torch.repeat_interleave(torch.arange(B), lens)
    pos = torch.arange(cand.shape[0]) - ptr[:-1][seg]
    rows = torch.zeros((B, Lmax), dtype=torch.int64)
    rows[seg, pos] = torch.arange(cand.shape[0])
    pad = torch.arange(Lmax)[None, :] >= lens[:, None]

    def padded_topk(s):
        S = torch.full((B, Lmax), float("-inf"))
        S[seg, pos] = s
        return torch.topk(S, n, dim=1)

    def einsum():
        return padded_topk(torch.einsum("md,md->m", cand, q[seg]))

    def padded_bmm():
        G = cand.view(B, Lmax, -1) if equal else cand[rows]
        S = torch.bmm(G, q[:, :, None])[:, :, 0].masked_fill(pad, float("-inf"))
        return torch.topk(S, n, dim=1)

    def loop():
        return [torch.topk(cand[int(ptr[b]):int(ptr[b + 1])] @ q[b], n) for b in range(B)]

    name = "bmm on a zero-copy [B, L, D] view + topk" if equal else "padded bmm + topk"
    return {"einsum with q[segment] + padded topk": einsum, name: padded_bmm,
            "per-query loop (mv + topk)": loop}


def run_case(label, ours, peers, reps):
    """Runs are interleaved (rasfast, then every peer, rep after rep) so that load changes on
    the shared machine hit every implementation alike; best and median per implementation."""
    fns = {"rasfast": ours, **peers}
    for f in fns.values():
        f()  # warm-up
    times = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    t_ours = min(times["rasfast"])
    res = {"case": label, "rasfast_cpu_s": t_ours,
           "rasfast_cpu_median_s": float(np.median(times["rasfast"])), "peers": {}}
    for name in peers:
        best = min(times[name])
        res["peers"][name] = {"best_s": best, "median_s": float(np.median(times[name])),
                              "ratio": best / t_ours}
    best = min(res["peers"].items(), key=lambda kv: kv[1]["best_s"])
    res["best_peer"], res["speedup_vs_best"] = best[0], best[1]["best_s"] / t_ours
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--B", type=int, default=256)
    ap.add_argument("--mean-len", type=int, default=2000)
    ap.add_argument("--D", type=int, default=384)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--table", type=int, default=100_000, help="rows of the triple table")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--skip-matrix", action="store_true")
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "segment.md"))
    args = ap.parse_args()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    load_start = os.getloadavg()
    cases = []
    for equal in (False, True):
        L = args.mean_len
        lens = np.full(args.B, L) if equal else rng.integers(L // 2, 3 * L // 2 + 1, size=args.B)
        ptr = torch.zeros(args.B + 1, dtype=torch.int64)
        ptr[1:] = torch.from_numpy(np.cumsum(lens))
        M = int(ptr[-1])
        q = torch.nn.functional.normalize(torch.randn(args.B, args.D), dim=1)
        kind = "equal lengths" if equal else "ragged lengths"
        for dtype in (torch.float32, torch.bfloat16):
            table = torch.nn.functional.normalize(torch.randn(args.table, args.D), dim=1).to(dtype)
            ids = torch.from_numpy(rng.integers(0, args.table, size=M))
            tf = table.float()  # peers compute in float32 (CPU bf16 GEMMs are slower here)
            peers = peers_table(q, tf, ids, ptr, args.n)
            if dtype != torch.float32:
                peers = {f"{k} (float32 copy of the table made outside the timing)": v
                         for k, v in peers.items()}
            cases.append(run_case(
                f"table layout, {kind}, {str(dtype).replace('torch.', '')} table [{args.table:,} x {args.D}]",
                lambda: segment_topk_scores(q, table, ptr, args.n, cand_ids=ids, backend="cpu"),
                peers, args.reps))
            print(json.dumps(cases[-1], indent=1), flush=True)
            del table, tf, peers
        if not args.skip_matrix:
            cand = torch.randn(M, args.D)
            cases.append(run_case(
                f"matrix layout, {kind}, float32 candidates [{M:,} x {args.D}]",
                lambda: segment_topk_scores(q, cand, ptr, args.n, backend="cpu"),
                peers_matrix(q, cand, ptr, args.n, equal), max(2, args.reps // 2)))
            print(json.dumps(cases[-1], indent=1), flush=True)
            del cand
    load_end = os.getloadavg()
    info = machine_info()
    lines = ["# segment_topk_scores: cpu vs torch formulations\n", header_markdown(),
             f"B = {args.B} queries, {args.mean_len} candidates per query on average "
             f"(ragged: uniform in [{args.mean_len // 2}, {3 * args.mean_len // 2}]), D = {args.D}, "
             f"n = {args.n}. Times are the best of {args.reps} interleaved runs after a warm-up "
             "(matrix layout: fewer runs); the ratio is peer time / rasfast time.",
             f"Load average at start {load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f}, "
             f"at end {load_end[0]:.2f} / {load_end[1]:.2f} / {load_end[2]:.2f} on "
             f"{info['cores']} cores" + (" -- the machine was shared and loaded; ratios are "
                                        "more trustworthy than absolute times." if load_start[0] > 1.5
                                        or load_end[0] > 1.5 else "."), ""]
    for c in cases:
        lines += [f"## {c['case']}", "", "| implementation | best (ms) | median (ms) | rasfast is faster by |",
                  "|---|---:|---:|---:|",
                  f"| rasfast cpu | {1e3 * c['rasfast_cpu_s']:.1f} | {1e3 * c['rasfast_cpu_median_s']:.1f} | - |"]
        for name, p in c["peers"].items():
            lines.append(f"| {name} | {1e3 * p['best_s']:.1f} | {1e3 * p['median_s']:.1f} | {p['ratio']:.1f}x |")
        lines += ["", f"Best torch formulation: {c['best_peer']}; rasfast is "
                      f"{c['speedup_vs_best']:.1f}x faster.", ""]
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(
        {"machine": info, "load_start": load_start, "load_end": load_end, "args": vars(args),
         "cases": cases}, indent=2))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
