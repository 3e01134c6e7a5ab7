"""theme_scoped_search (cpu) vs its peers, all in one run; writes benchmarks/results/theme.md/.json.

Peers (benchmarks/theme_peers.py): faiss IndexFlatL2.search(k=K) + knn_inner_products_by_idx;
torch matmul distances + topk + gather + bmm + topk; the RAS reference approach (faiss scope,
then per query a fresh IndexFlatIP over the gathered K scope vectors). Also reports the
bytes/second of the cpu PPD scan (pass 1 alone) against a numpy memory copy measured in the
same run, and checks every result with the tolerance rule (rasfast.reference.theme_check).

    .venv/bin/python benchmarks/theme_report.py                 # issue sizes (N=1M, ~3 GB RAM)
    .venv/bin/python benchmarks/theme_report.py --n 100000      # quick
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

import numpy as np
import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import rasfast  # noqa: E402
from machine import header_markdown, machine_info  # noqa: E402
from rasfast.reference.theme_check import check_scoped_search  # noqa: E402
from theme_peers import FaissPeer, RasPeer, torch_peer  # noqa: E402


def make_data(n, t, d, b, seed=0):
    """Corpus/query theme vectors: non-negative (sigmoid-like scores), L2-normalised as RAS
    does; embeddings: L2-normalised Gaussian."""
    rng = np.random.default_rng(seed)

    def unit(x):
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x

    c = unit(rng.random((n, t), dtype=np.float32))
    e = unit(rng.standard_normal((n, d), dtype=np.float32))
    q = unit(rng.random((b, t), dtype=np.float32))
    qe = unit(rng.standard_normal((b, d), dtype=np.float32))
    return q, qe, c, e


def timeit(fn, repeats):
    out, times = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, min(times), statistics.median(times)


def copy_bandwidth(nbytes=512 << 20, repeats=5):
    """Bytes moved per second (read + write) by a numpy copy of a large array."""
    a = np.ones(nbytes // 4, dtype=np.float32)
    b = np.empty_like(a)
    _, best, _ = timeit(lambda: np.copyto(b, a), repeats)
    read_only = timeit(lambda: a.sum(), repeats)[1]  # a streaming read, for reference
    return 2 * a.nbytes / best, a.nbytes / read_only


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--t", type=int, default=298)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--b", type=int, default=16)
    ap.add_argument("--K", type=int, default=50_000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ras-repeats", type=int, default=1, help="the RAS approach is slow")
    ap.add_argument("--out", default=str(HERE / "results" / "theme"))
    a = ap.parse_args(argv)
    N, T, D, B, K, k, R = a.n, a.t, a.d, a.b, a.K, a.k, a.repeats

    q, qe, c, e = make_data(N, T, D, B)
    mod = rasfast.dispatch.cpu_module()
    res = {"sizes": dict(N=N, T=T, D=D, B=B, K=K, k=k, dtype="float32"), "machine": machine_info(),
           "simd": mod.theme_simd_level(), "times_s": {}, "median_s": {}}
    tm, md = res["times_s"], res["median_s"]

    cpu_s = res["cpu_seconds"] = {}  # process CPU time (all threads) of the best-timed repeat's kind

    def run(name, fn, repeats=R):
        c0 = time.process_time()
        out, best, med = timeit(fn, repeats)
        cpu_s[name] = (time.process_time() - c0) / repeats
        tm[name], md[name] = best, med
        print(f"{name:34s} best {best * 1e3:9.1f} ms   median {med * 1e3:9.1f} ms", flush=True)
        return out

    # --- bandwidth: pass 1 alone vs a plain memory copy
    copy_bps, read_bps = copy_bandwidth()
    keys = np.empty((B, N), dtype=np.uint32)
    mod.theme_scan_keys(q, c, 0, False, keys)  # first touch of the key matrix, not timed
    # pass 1 under every SIMD variant this CPU runs (forced), then back to the default
    best_simd = mod.theme_simd_level()
    res["scan_by_simd"] = {}
    for v in mod.theme_simd_variants():
        mod.theme_set_simd(v)
        _, t_v, _ = timeit(lambda: mod.theme_scan_keys(q, c, 0, False, keys), R)
        res["scan_by_simd"][v] = c.nbytes / t_v
    mod.theme_set_simd(best_simd)
    run("cpu PPD scan (pass 1 only)", lambda: mod.theme_scan_keys(q, c, 0, False, keys))
    del keys
    scan_bytes = c.nbytes
    res["load_average"] = os.getloadavg()
    res["bandwidth"] = {"numpy_copy_bytes_per_s": copy_bps, "numpy_sum_read_bytes_per_s": read_bps,
                        "ppd_scan_bytes_per_s": scan_bytes / tm["cpu PPD scan (pass 1 only)"],
                        "ppd_bytes": scan_bytes}

    # --- ours
    ours = run("rasfast cpu theme_scoped_search",
               lambda: rasfast.theme_scoped_search(q, qe, c, e, K, k, backend="cpu"))
    run("rasfast cpu theme_scoped_search w=.1",
        lambda: rasfast.theme_scoped_search(q, qe, c, e, K, k, theme_weight=0.1, backend="cpu"))
    run("rasfast cpu theme_scope (sorted K)", lambda: rasfast.theme_scope(q, c, K, backend="cpu"))

    # --- peers (indexes / norms prepared outside the timed calls)
    fp = FaissPeer(c, e)
    peer_faiss = run("faiss L2 search(K) + by_idx IP", lambda: fp(q, qe, K, k))
    cn = (torch.from_numpy(c) ** 2).sum(1)
    peer_torch = run("torch matmul+topk+gather+topk", lambda: torch_peer(q, qe, c, e, K, k, cn))
    ras = RasPeer(fp)
    peer_ras = run("RAS approach (fresh IndexFlatIP)", lambda: ras(q, qe, K, k), a.ras_repeats)

    # --- validity of every result under the tolerance rule (float32 recomputation)
    qt, ct = torch.from_numpy(q), torch.from_numpy(c)
    values = (qt * qt).sum(1, keepdim=True) + cn[None] - 2.0 * (qt @ ct.T)
    dense = torch.from_numpy(qe) @ torch.from_numpy(e).T
    checks = {}
    for name, (ids, sc) in {"rasfast": ours, "faiss": peer_faiss, "torch": peer_torch,
                            "ras": peer_ras}.items():
        try:
            check_scoped_search(torch.as_tensor(ids), torch.as_tensor(sc), qt, None, ct, None, K, k,
                                values=values, dense=dense, tol=1e-4, score_tol=1e-4)
            checks[name] = "valid"
        except AssertionError as err:
            checks[name] = f"INVALID: {err}"
    res["validity"] = checks
    res["identical_ids_vs_faiss"] = float((np.asarray(ours[0]) == np.asarray(peer_faiss[0])).mean())
    best_peer = min(tm["faiss L2 search(K) + by_idx IP"], tm["torch matmul+topk+gather+topk"])
    ours_t = tm["rasfast cpu theme_scoped_search"]
    res["ratios"] = {"best_of_faiss_torch_over_ours": best_peer / ours_t,
                     "ras_over_ours": tm["RAS approach (fresh IndexFlatIP)"] / ours_t}
    write(res, a.out)


def write(res, out):
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=2))
    s, tm, md, bw = res["sizes"], res["times_s"], res["median_s"], res["bandwidth"]
    ours = tm["rasfast cpu theme_scoped_search"]
    lines = ["# theme_scoped_search (cpu) vs peers", "", header_markdown(),
             f"Sizes: N={s['N']:,}, T={s['T']}, D={s['D']}, B={s['B']}, K={s['K']:,}, k={s['k']}, "
             f"{s['dtype']}; cpu SIMD variant: {res['simd']}; times are best of repeats "
             "(median beside), one process, same data.", "",
             f"Load average at the start (1/5/15 min, {res['machine']['cores']} cores): "
             f"{', '.join(f'{x:.1f}' for x in res['load_average'])} -- on a shared machine every "
             "wall time below includes waiting for the CPU; CPU ms is the process CPU time per "
             "call summed over threads.", "",
             "| method | best ms | median ms | CPU ms / call | time / rasfast |",
             "|---|---:|---:|---:|---:|"]
    for name in tm:
        lines.append(f"| {name} | {tm[name] * 1e3:.1f} | {md[name] * 1e3:.1f} | "
                     f"{res['cpu_seconds'][name] * 1e3:.1f} | {tm[name] / ours:.2f} |")
    r = res["ratios"]
    lines += ["", f"- speedup vs best of faiss/torch: **{r['best_of_faiss_torch_over_ours']:.2f}x**; "
              f"vs RAS approach: **{r['ras_over_ours']:.2f}x**",
              f"- PPD scan: {bw['ppd_scan_bytes_per_s'] / 1e9:.2f} GB/s of corpus PPD read "
              f"({bw['ppd_bytes'] / 1e9:.2f} GB) vs numpy copy {bw['numpy_copy_bytes_per_s'] / 1e9:.2f} GB/s "
              f"(read+write) and numpy sum {bw['numpy_sum_read_bytes_per_s'] / 1e9:.2f} GB/s (read); per "
              f"CPU-second the scan processes {bw['ppd_bytes'] / res['cpu_seconds']['cpu PPD scan (pass 1 only)'] / 1e9:.2f} GB "
              "(at B=16 it does 16 x T FMAs per row, so on 2 cores it is compute- as much as memory-bound)",
              "- PPD scan by SIMD variant (forced with theme_set_simd; share of the numpy-sum read "
              "bandwidth): " + ", ".join(
                  f"{v} {bps / 1e9:.2f} GB/s ({100 * bps / bw['numpy_sum_read_bytes_per_s']:.0f}%)"
                  for v, bps in res.get("scan_by_simd", {}).items()),
              f"- validity (tolerance rule, rasfast.reference.theme_check): {res['validity']}",
              f"- ids identical to faiss's: {res['identical_ids_vs_faiss'] * 100:.2f}% of entries", ""]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
