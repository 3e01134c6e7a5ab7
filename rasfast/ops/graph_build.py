"""The graph-building op of the loops: entity ids per triple -> the triple adjacency (CSR).

A :class:`rasfast.graph.TripleGraph` (GEAR's graph, the beam search's input) is built in two
halves. Strings -> entity ids (validation, normalisation, interning) works on Python strings,
which an operator's schema can take but not return, so it stays outside torch. Entity ids ->
adjacency is :func:`triple_adjacency`, the operator ``torch.ops.rasfast.triple_adjacency``: two
triples are neighbours when they share an entity whose degree (triples mentioning it) is at
most ``max_degree``; rows are sorted, unique, without the triple itself
(rasfast/reference/triple_graph.py states the rules; ``TripleGraph.from_triples`` gives the
same CSR, which tests/test_graph_build_op.py checks).

Its output size (the number of edges) depends on the data: the fake kernel declares it as a
data-dependent size (``ctx.new_dynamic_size()``), so ``torch.compile(fullgraph=True)`` and
``torch.export`` carry the op with an unbacked size. Backends:

- ``cpu``: the C++ builder's adjacency half (csrc/graph/triple_graph_merge_cpu.cpp, merging
  into an empty graph; OpenMP);
- ``torch``: a composition of torch ops (bincount, one sort, repeat_interleave, unique), on
  any device: the CUDA kernel of the operator. It reads the host twice: the id range with the
  edge bound, and ``unique``'s output size (docs/gpu.md lists both).

``auto`` picks ``cpu`` for CPU tensors and ``torch`` for CUDA tensors.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch

from .. import dispatch as _bk
from .._arrays import as_tensor, kind_of, to_kind
from .._threads import follows_width_rule
from .._validate import check_int, check_int_arg, check_rank, check_same_device
from ._library import define, traced

# The default refusal bound of the adjacency: 2**31 entries (16 GiB of int64 indices).
DEFAULT_MAX_EDGES = 2 ** 31
BACKENDS = ("auto", "cpu", "torch")


@follows_width_rule
def triple_adjacency(head, tail, num_entities: int, max_degree: Optional[int] = None,
                     max_edges: int = DEFAULT_MAX_EDGES, backend: str = "auto") -> Tuple[object, object, object]:
    """The triple adjacency of triples given by their entity ids.

    Args:
        head: int32/int64 [n] entity id of each triple's subject, in [0, num_entities).
        tail: int32/int64 [n] entity id of each triple's object.
        num_entities: E, the number of entities (>= every id + 1).
        max_degree: optional hub guard (int >= 0): an entity mentioned by more triples than
            this links none of them.
        max_edges: refuse (ValueError, before allocating the edges) a graph whose adjacency
            could exceed this many entries (bound: sum of d*(d-1) over linking entities).
        backend: "auto" | "cpu" | "torch".

    Returns:
        (indptr int64[n + 1], indices int64[nnz], entity_degree int64[E]); numpy in, numpy
        out. Row i lists the neighbours of triple i, ascending.
    """
    kind = kind_of(head)
    h, t = _args(head, tail)
    E = check_int_arg(num_entities, "num_entities", 0)
    md = -1 if max_degree is None else check_int_arg(max_degree, "max_degree", 0)
    me = check_int_arg(max_edges, "max_edges", 0, 2 ** 62)
    if traced(h, t):
        out = _OP(h, t, E, md, me, backend)
    else:
        out = _triple_adjacency(h, t, E, md, me, backend)
    return tuple(to_kind(x, kind) for x in out)


def _args(head, tail):
    h = as_tensor(head, "head")
    check_int(h, "head")
    check_rank(h, "head", 1, "[n]")
    t = as_tensor(tail, "tail")
    check_int(t, "tail")
    check_rank(t, "tail", 1, "[n]")
    if t.shape[0] != h.shape[0]:
        raise ValueError(f"tail: expected {h.shape[0]} entries (len(head)), got {t.shape[0]}")
    check_same_device(head=h, tail=t)
    return h, t


def _resolve(backend: str, device: torch.device) -> str:
    if backend not in BACKENDS:
        if backend in _bk.BACKENDS:
            raise ValueError(f"backend: triple_adjacency has no {backend!r} kernel; expected one of "
                             f"{', '.join(map(repr, BACKENDS))} ('torch' runs on CUDA tensors)")
        raise ValueError(f"backend: expected one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    if backend == "auto":
        return "cpu" if device.type == "cpu" and _bk._import("rasfast._C")[0] is not None else "torch"
    if backend == "cpu" and device.type != "cpu":
        raise ValueError(f"triple_adjacency: backend 'cpu' needs CPU arrays, got tensors on {device}")
    return backend


def _range_error(lo: int, hi: int, E: int) -> ValueError:
    return ValueError(f"head/tail: entity ids must be in [0, num_entities = {E}), got {lo} .. {hi}")


def _edges_error(max_edges: int, worst: int) -> ValueError:
    return ValueError(f"max_degree: the triple adjacency would exceed max_edges ({max_edges} entries); "
                      f"the most linked entity has degree {worst}: pass max_degree to stop hub "
                      "entities from linking")


def _triple_adjacency(h, t, E, md, max_edges, backend):
    """The kernel of ``torch.ops.rasfast.triple_adjacency`` (and of the eager op)."""
    be = _resolve(backend, h.device)
    h, t = h.long().contiguous(), t.long().contiguous()
    if be == "cpu":
        return _cpu(h, t, E, md, max_edges)
    return _torch(h, t, E, md, max_edges)


def _cpu(h, t, E, md, max_edges):
    hn, tn = h.numpy(), t.numpy()
    if len(hn):
        lo, hi = int(min(hn.min(), tn.min())), int(max(hn.max(), tn.max()))
        if lo < 0 or hi >= E:
            raise _range_error(lo, hi, E)
    z = np.zeros(0, dtype=np.int64)
    try:
        m = _bk.cpu_module().triple_graph_merge(np.zeros(1, dtype=np.int64), z, z, z, z, hn, tn, E, md,
                                                max_edges)
    except ValueError as e:   # the builder's message names max_degree / max_edges already
        raise ValueError(str(e)) from None
    return (torch.from_numpy(m["indptr"]), torch.from_numpy(m["indices"]),
            torch.from_numpy(m["entity_degree"]))


def _torch(h, t, E, md, max_edges):
    """Vectorised: memberships (triple, entity) sorted by entity; each member of a linking
    entity of degree d pairs with the d - 1 others; pairs deduplicated (two triples sharing
    both entities meet twice) and sorted give the CSR. Host reads: one for the id range and
    the edge bound, one for ``unique``'s size (no bincount: on CUDA it reads its max)."""
    n, dev = h.shape[0], h.device
    i = torch.arange(n, device=dev)
    zero = torch.zeros((), dtype=torch.int64, device=dev)
    lo = torch.minimum(h.min(), t.min()) if n else zero
    hi = torch.maximum(h.max(), t.max()) if n else zero
    # memberships: every head, and every tail that differs from its head; the others (and
    # out-of-range ids, refused below) go to a spare bucket E, which links nothing
    me = torch.cat([h, torch.where(t != h, t, E)])
    me = torch.where((me >= 0) & (me < E), me, E)
    mt = torch.cat([i, i])
    deg = torch.zeros(E + 1, dtype=torch.int64, device=dev).scatter_add_(0, me, torch.ones_like(me))
    deg[E] = 0
    link = deg <= md if md >= 0 else torch.ones_like(deg, dtype=torch.bool)
    link[E] = False
    ldeg = torch.where(link, deg, 0)
    bound = (ldeg * (ldeg - 1).clamp_min(0)).sum()
    ok = (lo >= 0) & (hi < E) if n else torch.ones((), dtype=torch.bool, device=dev)
    vals = torch.stack([ok.long(), lo, hi, bound, ldeg.max()]).tolist()   # one host read
    if not vals[0]:
        raise _range_error(vals[1], vals[2], E)
    if vals[3] > max_edges:
        raise _edges_error(max_edges, vals[4])
    total = vals[3]
    indptr = torch.zeros(n + 1, dtype=torch.int64, device=dev)
    if total == 0:
        return indptr, torch.zeros(0, dtype=torch.int64, device=dev), deg[:E]
    order = torch.argsort(me * max(n, 1) + mt)   # by entity, then triple (the spare bucket last)
    me, mt = me[order], mt[order]
    start = torch.cumsum(deg, 0) - deg           # first member of each entity
    pos = torch.arange(me.shape[0], device=dev) - start[me]
    reps = torch.where(link[me], deg[me] - 1, 0)
    src = torch.repeat_interleave(torch.arange(me.shape[0], device=dev), reps, output_size=total)
    first = torch.cumsum(reps, 0) - reps
    k = torch.arange(total, device=dev) - first[src]
    k = k + (k >= pos[src]).long()               # skip the member itself
    partner = mt[start[me[src]] + k]
    key = torch.unique(mt[src] * n + partner)     # sorted; data-dependent size (a host read)
    rows, cols = key // n, key % n
    indptr[1:] = torch.cumsum(torch.zeros(n, dtype=torch.int64, device=dev)
                              .scatter_add_(0, rows, torch.ones_like(rows)), 0)
    return indptr, cols, deg[:E]


# ----------------------------------------------------------------------------- operator
def _op(head, tail, num_entities, max_degree, max_edges, backend):
    h, t = _args(head, tail)
    E = check_int_arg(num_entities, "num_entities", 0)
    md = check_int_arg(max_degree, "max_degree", -1)
    return _triple_adjacency(h, t, E, md, check_int_arg(max_edges, "max_edges", 0, 2 ** 62), backend)


def _fake(head, tail, num_entities, max_degree, max_edges, backend):
    nnz = torch.library.get_ctx().new_dynamic_size()
    return (head.new_empty(head.shape[0] + 1, dtype=torch.int64), head.new_empty(nnz, dtype=torch.int64),
            head.new_empty(num_entities, dtype=torch.int64))


_OP = define("triple_adjacency(Tensor head, Tensor tail, int num_entities, int max_degree, int max_edges, "
             "str backend) -> (Tensor, Tensor, Tensor)", _op, _fake)

__all__ = ["triple_adjacency", "DEFAULT_MAX_EDGES"]
