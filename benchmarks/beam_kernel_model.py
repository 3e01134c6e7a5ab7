"""Barrier model of the CUDA triple_beam_search kernel (docs/gpu.md, "Beam search on the
GPU"): block-wide barriers per query, before and after the seventh session's changes, at the
H100 benchmark's shape (benchmarks/gpu_beam.py: 200k triples of the power-law graph, beam
width 10, length 2, max_neighbors 100, 50 seeds).

At this shape the kernel is latency-bound: one block per query, and every bitonic stage
ends with a barrier. So the count of barrier-separated stages is the model of its time,
not bytes (the bytes' floor is printed too). Before: every row's candidates were sorted in the buffer sized for the widest
row (``cap``), and every beam merged its candidates into the running top b with its own
pool sort. Then (seventh session): a row sorts the next power of two of (m_step + its length),
and one pool sort merges a group of beams. Then: when all the beams' rows fit ``cap3``
together, the step scores them at once and sorts them in one bitonic sort by (beam, value),
and one pool sort merges them all. The kernel's sizes come from the built module's
``beam_plan``; the beams' rows are sampled uniformly from the graph (an approximation: the
real beams are the seeds' best-scoring triples).

    RASFAST_CUDA_EMU=1 python benchmarks/beam_kernel_model.py
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def stages(P: int) -> int:
    """Barrier-separated stages of a bitonic sort of P (a power of two) keys."""
    k = int(math.log2(P))
    return k * (k + 1) // 2


def pow2(x: int) -> int:
    return 1 << (int(x) - 1).bit_length()


def barriers(deg, plan, b: int, seeds: int, rng, queries: int = 2000):
    """Mean barriers per query (one expansion step): (before, per-beam sorts sized to the
    row with grouped merges, and the one-sort step where the rows fit ``cap3``)."""
    cap, chunk, ms, group = plan["cap"], plan["chunk"], plan["m_step"], plan["group"]
    cap2, cap3 = plan["cap2"], plan.get("cap3", 0)
    old = grouped = one = 0
    for _ in range(queries):
        rows = deg[rng.integers(0, len(deg), b)]
        seeds_old = 2 + stages(cap)                              # the seeds, one chunk
        seeds_new = 2 + stages(pow2(b + min(seeds, chunk)))
        old += seeds_old
        per_beam = 0
        for d in rows:
            chunks = math.ceil(d / chunk)
            old += 1 + chunks * (2 + stages(cap)) + 2 + stages(pow2(b + ms))
            per_beam += 1 + sum(2 + stages(pow2(ms + min(chunk, d - c * chunk))) for c in range(chunks)) + 1
        per_beam += math.ceil(b / group) * (stages(pow2(b + group * ms)) + 1)
        grouped += seeds_new + per_beam
        total, kept = int(rows.sum()), b + int(np.minimum(rows, ms).sum())
        if cap3 and total <= cap3 and kept <= cap2:   # offsets, scoring, one sort, the pool's sort
            one += seeds_new + 1 + 1 + stages(pow2(max(total, 2))) + 1 + stages(pow2(kept))
        else:
            one += seeds_new + 1 + per_beam
    return old / queries, grouped / queries, one / queries


def main():
    import rasfast
    from beam_graph import power_law_graph
    from rasfast.reference.beam import decay_factors
    n, b, L, max_nb, seeds = 200_000, 10, 2, 100, 50
    indptr, _ = power_law_graph(n, seed=0)
    deg = np.diff(indptr)
    decay = decay_factors(2 * b, int(deg.max()))
    plan = rasfast.dispatch.cuda_module().beam_plan(n=n, D=384, beam_width=b, max_len=L,
                                                    max_neighbors=max_nb, decay_len=len(decay),
                                                    max_deg=int(deg.max()))
    old, grouped, new = barriers(deg, plan, b, seeds, np.random.default_rng(0))
    print(f"graph: {n:,} triples, degree mean {deg.mean():.1f} / median {int(np.median(deg))} / max {deg.max()}")
    print(f"plan: {plan}")
    print(f"barriers per query, one expansion step: before {old:.0f}; rows sorted at their own size, "
          f"grouped merges {grouped:.0f}; and the one-sort step {new:.0f} ({old / new:.2f}x fewer than before)")
    B, D = 1024, 384
    rows = B * (seeds + b * deg.mean())   # rows scored: the seeds, then every beam's whole row
    print(f"bytes: {B} queries score {rows / B:.0f} rows of {D} float32 each: {rows * D * 4 / 1e6:,.0f} MB "
          f"(without L2 reuse of hub rows): {rows * D * 4 / 2977e9 * 1e3:.2f} ms at the H100's measured "
          "2,977 GB/s copy bandwidth")


if __name__ == "__main__":
    main()
