"""``rasfast profile`` (per-stage latency of the loop) and ``rasfast bench`` (quick timing
tables)."""
from __future__ import annotations

import os
import time

from ._common import _progress
from .ask import _ras_for


def _cmd_profile(args) -> int:
    from ..profile import Trace
    ras, ds = _ras_for(args)
    qs = [q.question for q in ds.questions[: args.n]]
    if not qs:
        raise SystemExit("profile: the dataset has no questions")
    if args.warmup:
        ras.run_batch(qs[: min(4, len(qs))])
    trace = Trace(f"rasfast profile {ds.name}")
    t0 = time.perf_counter()
    for s in _progress(range(0, len(qs), args.batch), (len(qs) + args.batch - 1) // args.batch,
                       "profile", args.progress):
        ras.run_batch(qs[s:s + args.batch], trace=trace)
    wall = (time.perf_counter() - t0) * 1e3
    model = trace.model_time()
    print(trace.summary())
    print(f"\n{len(qs)} questions, batch {args.batch}: wall {wall:.1f} ms, encoder/model calls "
          f"{model:.1f} ms, rasfast overhead {wall - model:.1f} ms ({100 * (wall - model) / wall:.1f}%)")
    os.makedirs(args.out, exist_ok=True)
    tr = trace.to_chrome(os.path.join(args.out, f"profile_{ds.name}.json"))
    png = trace.plot(os.path.join(args.out, f"profile_{ds.name}.png"))
    print(f"trace: {tr}\nchart: {png}")
    return 0


def _cmd_bench(args) -> int:
    from ..bench import format_table, select_table

    if args.what == "select":
        ks = tuple(k for k in (10, 10_000, 250_000) if k <= args.n) or (args.n,)
        print(format_table(select_table(B=args.batch, N=args.n, ks=ks)))
    return 0
