"""select_k on a GPU: rasfast cuda, triton and torch vs plain torch.topk, parity checked first.

Plain torch.topk leaves the order of ties unspecified, so it is the speed bound, not a
backend; rasfast's "torch" backend is torch.topk plus a tie pass (the contract's order).

For a GPU session (exits with a message when no CUDA device is visible). For every size:
checks both backends against the reference (stable torch.sort on the GPU; indices must
match exactly, ties by lower index), then times them with CUDA events (median of
--rounds after warm-up) and writes benchmarks/results/gpu_select.md and .json.

    .venv/bin/python benchmarks/gpu_select.py [--rounds 20] [--sizes 16x1000000 4x10000000]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import header_markdown, machine_info  # noqa: E402

import rasfast  # noqa: E402
from rasfast.reference.select import select_k as ref_select  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def cuda_time_ms(fn, rounds: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def parity(x: torch.Tensor, k: int, backend: str) -> bool:
    ok = True
    for largest in (False, True):
        want = ref_select(x, k, largest, True)
        _, got = rasfast.select_k(x, k, largest=largest, sorted=True, backend=backend)
        ok &= bool(torch.equal(got, want))
    _, got = rasfast.select_k(x, k, sorted=False, backend=backend)
    ok &= bool(torch.equal(got.sort(1).values, ref_select(x, k, False, False).sort(1).values))
    return ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["16x1000000", "4x10000000", "256x100000"])
    p.add_argument("--ks", type=int, nargs="+", default=[10, 10_000, 250_000])
    p.add_argument("--dtypes", nargs="+", default=["float32", "float16", "bfloat16"])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--out", default=os.path.join(RESULTS, "gpu_select"))
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_select.py: no CUDA device visible; nothing to measure")
        return 0
    info = rasfast.backends()
    backends = [b for b in ("cuda", "triton") if info[b]["available"]] + ["torch"]
    print("backends:", backends, "| cuda:", info["cuda"], flush=True)
    rows = []
    for size in a.sizes:
        B, N = (int(v) for v in size.split("x"))
        for dt in a.dtypes:
            x = torch.randn(B, N, device="cuda").to(getattr(torch, dt))
            ties = torch.randint(-50, 50, (B, N), device="cuda").to(x.dtype)  # heavy ties
            for k in a.ks:
                if k > N:
                    continue
                row = {"B": B, "N": N, "k": k, "dtype": dt, "ms": {}, "parity": {}}
                row["ms"]["torch.topk"] = cuda_time_ms(
                    lambda: torch.topk(x, k, dim=1, largest=False, sorted=True), a.rounds)
                for be in backends:
                    row["parity"][be] = parity(x, k, be) and parity(ties, k, be)
                    row["ms"][be] = cuda_time_ms(lambda: rasfast.select_k(x, k, backend=be), a.rounds)
                rows.append(row)
                print(row, flush=True)
    names = ["torch.topk"] + backends
    md = ["# select_k on the GPU: rasfast cuda / triton / torch (topk + tie pass) vs plain torch.topk", "", header_markdown(),
          f"Median of {a.rounds} runs (CUDA events), ms; sorted=True, smallest k; "
          "parity = exact match with the reference (random and heavily tied inputs).", "",
          "| B | N | dtype | k | " + " | ".join(names) + " | parity |",
          "|---|---|---|---|" + "---|" * len(names) + "---|"]
    for r in rows:
        md.append(f"| {r['B']} | {r['N']:,} | {r['dtype']} | {r['k']:,} | " +
                  " | ".join(f"{r['ms'][n]:.3f}" for n in names) + " | " +
                  ", ".join(f"{b}: {'ok' if v else 'FAIL'}" for b, v in r["parity"].items()) + " |")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    with open(a.out + ".json", "w") as f:
        json.dump({"machine": machine_info(), "rows": rows}, f, indent=2)
    print(f"wrote {a.out}.md and {a.out}.json")
    return 0 if all(all(r["parity"].values()) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
