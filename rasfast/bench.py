"""Quick timing tables used by ``rasfast bench`` (the pytest-benchmark suites live in benchmarks/)."""
from __future__ import annotations

import time
from typing import Callable, Dict, List

import numpy as np
import torch

from . import dispatch


def _time(fn: Callable[[], object], repeat: int = 3) -> float:
    fn()  # warm-up (JIT, page faults)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def select_table(B: int = 16, N: int = 1_000_000, ks=(10, 10_000, 250_000), repeat: int = 3,
                 seed: int = 0) -> List[Dict[str, object]]:
    """Times select_k on every available backend vs torch.topk and numpy.argpartition."""
    from .ops.select import select_k

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, generator=g)
    xn = x.numpy()
    rows = []
    for k in [k for k in ks if k <= N]:
        row: Dict[str, object] = {"B": B, "N": N, "k": k}
        row["torch.topk"] = _time(lambda: torch.topk(x, k, dim=1, largest=False, sorted=True), repeat)
        row["np.argpartition"] = _time(lambda: np.argpartition(xn, k - 1, axis=1), repeat)
        row["rasfast cpu"] = _time(lambda: select_k(x, k, backend="cpu"), repeat)
        if dispatch.available("cuda"):
            xg = x.cuda()
            row["torch.topk (gpu)"] = _time(lambda: torch.topk(xg, k, dim=1, largest=False), repeat)
            row["rasfast cuda"] = _time(lambda: select_k(xg, k, backend="cuda"), repeat)
            row["rasfast triton"] = _time(lambda: select_k(xg, k, backend="triton"), repeat)
        rows.append(row)
    return rows


def format_table(rows: List[Dict[str, object]]) -> str:
    if not rows:
        return ""
    cols = list(rows[0].keys())
    def fmt(v):
        return f"{v * 1e3:10.2f} ms" if isinstance(v, float) else f"{v!s:>10}"
    lines = ["  ".join(f"{c:>13}" for c in cols)]
    for r in rows:
        lines.append("  ".join(f"{fmt(r.get(c, '-')):>13}" for c in cols))
    return "\n".join(lines)
