"""ThemeIndex search: in-memory (fused cpu op) vs streamed from memory-mapped .npy files.

Random corpus (uniform PPDs, Gaussian embeddings) saved with ThemeIndex.save and loaded
with mmap=True. Times, in the same run: in-memory ``search`` (cpu backend, one shard and
per-shard), streamed ``search`` over the memory map (two passes, torch reference formulas,
bounded extra memory), in-memory and streamed ``dense_search``, and save/load. Checks the
streamed ids equal the in-memory ids (allowing rows within float tolerance of the K-th
distance to differ, since the cpu kernel and the torch formulas round differently).

    .venv/bin/python benchmarks/index_streaming.py [--N 200000 --T 298 --D 384 --B 16 --K 10000]
Writes benchmarks/results/index_streaming.md and .json.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import header_markdown, machine_info  # noqa: E402

from rasfast.index import ThemeIndex  # noqa: E402


def _time(fn, repeat=2):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (("N", 200_000), ("T", 298), ("D", 384), ("B", 16), ("K", 10_000),
                          ("k", 10), ("shards", 4)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--out", default=str(HERE / "results" / "index_streaming"))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return _child(a)

    g = torch.Generator().manual_seed(0)
    emb = torch.nn.functional.normalize(torch.randn(a.N, a.D, generator=g), dim=1)
    ppd = torch.rand(a.N, a.T, generator=g)
    q_emb = torch.nn.functional.normalize(torch.randn(a.B, a.D, generator=g), dim=1)
    q_ppd = torch.rand(a.B, a.T, generator=g)
    idx = ThemeIndex.build(emb, ppd, shards=a.shards, dtype=a.dtype, theme_model=None)
    del emb, ppd
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        rows["save"], _ = _time(lambda: idx.save(tmp), 1)
        rows["load (mmap)"], mm = _time(lambda: ThemeIndex.load(tmp, mmap=True), 1)
        for scope in ("global", "per_shard"):
            t_mem, (ids_m, _) = _time(lambda: idx.search(q_ppd, q_emb, a.K, a.k, scope=scope, backend="cpu"))
            rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            t_str, (ids_s, _) = _time(lambda: mm.search(q_ppd, q_emb, a.K, a.k, scope=scope), 1)
            same = float((ids_m == ids_s).all(dim=1).float().mean())
            rows[f"search {scope} in-memory (cpu op)"] = t_mem
            rows[f"search {scope} streamed (mmap)"] = t_str
            rows[f"identical rows {scope}"] = same
        rows["dense_search in-memory (cpu op)"], d_m = _time(lambda: idx.dense_search(q_emb, a.k, backend="cpu"))
        rows["dense_search streamed (mmap)"], d_s = _time(lambda: mm.dense_search(q_emb, a.k, backend="cpu"), 1)
        rows["identical rows dense"] = float((d_m[0] == d_s[0]).all(dim=1).float().mean())
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        child = subprocess.run([sys.executable, __file__, "--child", tmp, "--B", str(a.B),
                                "--K", str(a.K), "--k", str(a.k)], capture_output=True, text=True)
        stream_rss = json.loads(child.stdout.strip().splitlines()[-1])

    res = {"machine": machine_info(), "sizes": vars(a), "seconds": rows, "max_rss_mib": rss,
           "streamed_only_process": stream_rss}
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=2))
    lines = ["# ThemeIndex: in-memory vs streamed (memory-mapped) search", "", header_markdown(), "",
             f"N = {a.N}, T = {a.T}, D = {a.D}, B = {a.B}, K = {a.K}, k = {a.k}, {a.shards} shards, "
             f"storage {a.dtype}; random data. Best of 2 runs for in-memory, 1 for streamed.", "",
             "| what | seconds (or fraction of queries with identical ids) |", "|---|---|"]
    lines += [f"| {name} | {v:.3f} |" for name, v in rows.items()]
    data_mib = a.N * (a.T + a.D) * (4 if a.dtype == "float32" else 2) / 2**20
    lines += ["", f"Peak RSS of this process: {rss:.0f} MiB (it also holds the in-memory index). "
              f"A separate process that only loads the memory map and runs the streamed global "
              f"search: peak RSS {stream_rss['rss_after_import_mib']:.0f} MiB after imports, "
              f"{stream_rss['rss_peak_mib']:.0f} MiB peak (page cache of the mapped files counts "
              f"as RSS once read; the arrays are {data_mib:.0f} MiB on disk).", ""]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


def _child(a):
    """Streamed global search only, in a fresh process, to see its own peak memory."""
    g = torch.Generator().manual_seed(1)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    mm = ThemeIndex.load(a.child, mmap=True, load_theme_model=False)
    q_emb = torch.randn(a.B, mm.dim, generator=g)
    q_ppd = torch.rand(a.B, mm.num_themes, generator=g)
    mm.search(q_ppd, q_emb, a.K, a.k, scope="global")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rss_after_import_mib": before, "rss_peak_mib": peak}))


if __name__ == "__main__":
    main()
