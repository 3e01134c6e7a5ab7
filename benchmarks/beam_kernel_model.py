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

The second model is the scoring's dependent global-load round trips on a warp's critical
path, per query, with each query's real first beams (its seeds' best b by cosine, as the
kernel picks them). Before the batched scoring a warp scored its candidates one after
another: the candidate's id (one trip), then its row, 12 float32 per lane at D = 384, which
nvcc's unrolled loop (16, then 8 and 4 at a time: read from the sm_90 SASS) loads in two
trips. Now a warp loads its batch's 32 ids at once (one trip) and scores 32 / lanes rows at
once, 16 bytes per lane per load, ``unroll`` loads in flight per lane. Between the two,
the step's pass over the beams' row offsets: one thread, a trip per beam before; a lane per
beam now. A trip is one DRAM (or L2) latency; the bytes of a query are the same either way.

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


def old_row_trips(D: int) -> int:
    """Trips for one row by a whole warp before: ceil(D / 32) scalar loads per lane in nvcc's
    unrolled loop (16 at a time, then 8, then 4, then one by one)."""
    n = -(-D // 32)
    return n // 16 + (n % 16) // 8 + (n % 8) // 4 + n % 4


def warp_trips(counts_per_warp, D: int, lanes: int, unroll: int, entry_bytes: int = 4, old=False):
    """Critical-path trips of the busiest warp of a phase that spreads ``counts_per_warp``
    candidates over the warps (candidate f to warp f % warps, in batches of 32 per warp)."""
    if old:
        return max(c * (1 + old_row_trips(D)) for c in counts_per_warp)
    per16 = 16 // entry_bytes
    vec_per_lane = -(-(-(-D // per16)) // lanes)       # 16-byte loads per lane per row
    per_round = 32 // lanes
    worst = 0
    for c in counts_per_warp:
        trips = 0
        for b0 in range(0, c, 32):                     # a batch: one trip for its ids
            batch = min(32, c - b0)
            trips += 1 + -(-batch // per_round) * -(-vec_per_lane // unroll)
        worst = max(worst, trips)
    return worst


def spread(total: int, warps: int = 8):
    """Candidates per warp when candidate f goes to warp f % warps."""
    return [len(range(w, total, warps)) for w in range(warps)]


def load_trips(P, deg, b: int, D: int, lanes: int, unroll: int, warps: int = 8):
    """Per query: (before, now) trips on the busiest warp's path: the seeds, the step's
    offsets pass and the step's scoring. ``warps``: the block's now (8, or 32 for the
    1024-thread blocks of a batch of at most one query per SM); before is 8."""
    E, Q = P["triple_emb"], P["q_emb"]
    old, new = [], []
    for i, s in enumerate(P["seeds"]):
        sc = (E[s] @ Q[i]) / np.maximum(np.linalg.norm(E[s], axis=1) * np.linalg.norm(Q[i]), 1e-30)
        beams = s[np.argsort(-sc, kind="stable")[:b]]
        total = int(deg[beams].sum())
        nb = len(beams)  # the step's offsets pass: one thread walked the beams, a trip each;
        #                  now a lane per beam, 32 beams a trip
        old.append(warp_trips(spread(len(s)), D, 32, 0, old=True) + nb + warp_trips(spread(total), D, 32, 0, old=True))
        new.append(warp_trips(spread(len(s), warps), D, lanes, unroll) + -(-nb // 32)
                   + warp_trips(spread(total, warps), D, lanes, unroll))
    return np.array(old), np.array(new)


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
    from beam_graph import make_problem
    P = make_problem(n, D, B, seeds, seed=0)
    unroll = 2  # csrc/beam/beam_search.cu: `#pragma unroll 2` in warp_score_batch
    print(f"load round trips on the busiest warp's path per query (seeds + one step; {B} queries of "
          f"benchmarks/gpu_beam.py, their real first beams), float32 D = {D}:")
    for lanes in (32, 16, 8, 4):
        before, now = load_trips(P, deg, b, D, lanes, unroll)
        if lanes == 32:
            print(f"  before (a warp per candidate, one after another): mean {before.mean():.0f}, "
                  f"max {before.max()}")
        tag = " (the default)" if lanes == plan.get("lanes") else ""
        print(f"  now, {lanes} lanes per candidate{tag}: mean {now.mean():.0f}, max {now.max()} "
              f"({before.mean() / now.mean():.2f}x fewer on the mean, {before.max() / now.max():.2f}x on the max)")
    before, now = load_trips(P, deg, b, D, plan.get("lanes", 8), unroll, warps=32)
    print(f"  now, 1024-thread blocks (chosen when B <= the SM count: a per-question call), 8 lanes: "
          f"mean {now.mean():.0f}, max {now.max()} ({before.mean() / now.mean():.2f}x fewer on the mean "
          f"than before, {before.max() / now.max():.2f}x on the max)")
    rows = B * (seeds + b * deg.mean())   # rows scored: the seeds, then every beam's whole row
    print(f"bytes: {B} queries score {rows / B:.0f} rows of {D} float32 each: {rows * D * 4 / 1e6:,.0f} MB "
          f"(without L2 reuse of hub rows): {rows * D * 4 / 2977e9 * 1e3:.2f} ms at the H100's measured "
          "2,977 GB/s copy bandwidth")


if __name__ == "__main__":
    main()
