"""Seeded synthetic triple graphs with power-law entity degrees, for the beam benchmarks.

Each triple links a head and a tail entity drawn from a Zipf-like law (a few hub entities,
a long tail of rare ones); two triples are neighbours when they share an entity. Like a
real graph build with a hub guard, entities with more than ``max_entity_degree`` triples
add no edges (otherwise one hub alone would give billions of pairs).
"""
from __future__ import annotations

import numpy as np


def power_law_graph(n: int, n_entities: int | None = None, alpha: float = 1.1,
                    max_entity_degree: int = 400, seed: int = 0):
    """CSR ``(indptr int64[n+1], indices int32[nnz])``: sorted rows, no self loops or duplicates."""
    rng = np.random.default_rng(seed)
    n_entities = n_entities or max(1, n // 2)
    w = 1.0 / np.arange(1, n_entities + 1) ** alpha
    ends = rng.choice(n_entities, size=2 * n, p=w / w.sum()).astype(np.int64)
    triple = np.repeat(np.arange(n, dtype=np.int64), 2)
    order = np.argsort(ends, kind="stable")
    ent, tri = ends[order], triple[order]
    # group = one entity's slots; every ordered pair of slots in a group is an edge
    size = np.bincount(ent, minlength=n_entities)
    size[size > max_entity_degree] = 0  # hub guard: such entities add no edges
    keep_slot = size[ent] > 0
    ent, tri = ent[keep_slot], tri[keep_slot]
    start_kept = np.cumsum(size) - size  # offsets among kept slots
    reps = size[ent]
    r = np.repeat(tri, reps)
    first = np.repeat(np.cumsum(reps) - reps, reps)
    j = np.arange(len(r)) - first
    c = tri[np.repeat(start_kept[ent], reps) + j]
    keep = r != c  # no self loops
    key = np.sort(r[keep] * n + c[keep])
    key = key[np.r_[True, key[1:] != key[:-1]]]  # sorted rows, no duplicates (np.unique is slow here)
    r, c = key // n, key % n
    indptr = np.zeros(n + 1, np.int64)
    indptr[1:] = np.cumsum(np.bincount(r, minlength=n))
    return indptr, c.astype(np.int32)


def make_problem(n: int = 200_000, dim: int = 384, queries: int = 256, seeds_per_query: int = 50,
                 seed: int = 0):
    """Graph, float32 triple and query embeddings, and per-query seed arrays (seeded)."""
    rng = np.random.default_rng(seed + 1)
    indptr, indices = power_law_graph(n, seed=seed)
    emb = rng.standard_normal((n, dim), dtype=np.float32)
    q = rng.standard_normal((queries, dim), dtype=np.float32)
    seeds = [rng.choice(n, size=seeds_per_query, replace=False) for _ in range(queries)]
    return dict(graph=(indptr, indices), triple_emb=emb, q_emb=q, seeds=seeds)


def describe(graph) -> str:
    indptr, indices = graph
    deg = np.diff(indptr)
    return (f"{len(deg):,} triples, {len(indices):,} directed edges, neighbours per triple "
            f"mean {deg.mean():.1f} / median {int(np.median(deg))} / max {int(deg.max())}")
