"""Per-question graph encodings replayed from CUDA graphs, one graph per size bucket.

A RAS question's subgraph is small (tens of nodes, a hundred or so edges), and encoding it on
a GPU is host-bound: the sixth H100 run measured 1,165 us of host time in a 1,230 us
``graph_transformer_pool`` call (64 graphs of 30 nodes, ``validate="none"``). Replayed from a
CUDA graph (:mod:`rasfast.ops.replay`) a call costs the host its input copies and one launch.

A CUDA graph has fixed shapes and the questions' graphs do not, so a batch is padded to a
few sizes (powers of two), each captured once:
- edges: E -> Ep = the power of two >= max(E, 64); the added edges are self-loops on
  padding nodes;
- nodes: N -> Np = the power of two >= max(N + ceil((Ep - E) / 16), 32): at least one padding
  node, and at most 16 padding self-loops on each (the layer kernel walks a node's edges
  one after another, so padding never makes a hub);
- graphs: G -> Gp = the power of two >= G + 1; graph G holds every padding node, the graphs
  after it are empty (they pool to zeros).

Padding never reaches a real graph's output: the projections are row by row, a node
attends over its own incoming edges only (a real node has only its real ones), and a graph's
mean covers its own nodes. So the first G rows of the padded call are the unpadded call's,
to the rounding of GEMMs whose row counts differ. Stale rows left in the padding by an
earlier, larger call reach only padding nodes.

Inputs are checked on the host (the captured call runs with ``validate="none"``): node ids in
[0, N), graph_ptr from 0 to N and non-decreasing.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch

from ..ops.graph_conv import graph_transformer_pool
from ..ops.replay import ReplayCache, StaticUse, copy_into

MIN_EDGES = 64
MIN_NODES = 32
PAD_LOOPS = 16  # padding self-loops per padding node, at most


def _pow2(n: int, least: int) -> int:
    n = max(int(n), least)
    return 1 << (n - 1).bit_length()


def bucket_sizes(n: int, e: int, g: int) -> Tuple[int, int, int]:
    """(Np, Ep, Gp): the padded node, edge and graph counts of a batch (see the module doc)."""
    ep = _pow2(e, MIN_EDGES)
    np_ = _pow2(n + max(1, -(-(ep - e) // PAD_LOOPS)), MIN_NODES)
    return np_, ep, _pow2(g + 1, 2)


def _host_index(t, name: str) -> np.ndarray:
    a = t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected an integer array, got {a.dtype}")
    return a.astype(np.int64, copy=False)


def padded_index(edge_index, graph_ptr, n: int, sizes: Tuple[int, int, int]) -> np.ndarray:
    """int64 [2 Ep + Gp + 1]: sources, destinations (padded with self-loops on the padding
    nodes, round robin), then graph_ptr (padded with Np); checked on the host."""
    ei, gp = _host_index(edge_index, "edge_index"), _host_index(graph_ptr, "graph_ptr")
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index: expected shape [2, E], got {tuple(ei.shape)}")
    if gp.ndim != 1 or gp.size < 2:
        raise ValueError(f"graph_ptr: expected shape [G+1] with G >= 1, got {tuple(gp.shape)}")
    e, g = ei.shape[1], gp.size - 1
    if e and (int(ei.min()) < 0 or int(ei.max()) >= n):
        raise ValueError(f"edge_index: node ids must lie in [0, N) with N = {n}; got range "
                         f"[{int(ei.min())}, {int(ei.max())}]")
    if gp[0] != 0 or gp[-1] != n:
        raise ValueError(f"graph_ptr: must start at 0 and end at N = {n}")
    if (np.diff(gp) < 0).any():
        raise ValueError("graph_ptr: must be non-decreasing")
    np_, ep, gp_ = sizes
    out = np.empty(2 * ep + gp_ + 1, np.int64)
    pad = n + np.arange(ep - e, dtype=np.int64) % (np_ - n)
    out[:e], out[e:ep] = ei[0], pad
    out[ep:ep + e], out[ep + e:2 * ep] = ei[1], pad
    out[2 * ep:2 * ep + g + 1] = gp
    out[2 * ep + g + 1:] = np_
    return out


class _Entry:
    """One bucket: its static buffers, its graph, its output."""

    def __init__(self, sizes, specs, x_width: int, ea_width: Optional[int], dtype, device, backend,
                 graphs):
        np_, ep, gp_ = sizes
        self.sizes = sizes
        self.x = torch.zeros(np_, x_width, dtype=dtype, device=device)
        self.ea = None if ea_width is None else torch.zeros(ep, ea_width, dtype=dtype, device=device)
        self.index = torch.zeros(2 * ep + gp_ + 1, dtype=torch.int64, device=device)
        self._call = lambda: graph_transformer_pool(
            self.x, self.index[:2 * ep].view(2, ep), self.ea, self.index[2 * ep:], specs,
            backend=backend, validate="none")
        self._graphs = graphs
        self._specs = specs
        self.graph = None
        self.out = None
        self.kept = ()
        self.use = StaticUse()

    def load(self, x, edge_attr, index: np.ndarray) -> None:
        copy_into(self.x, x)
        if self.ea is not None:
            copy_into(self.ea, edge_attr)
        copy_into(self.index, torch.from_numpy(index))

    def run(self) -> torch.Tensor:
        if self.graph is None:  # the inputs of this first call are loaded: capture on them
            self.graph, (self.out,) = self._graphs.capture(self._call)
            # the graph reads the layer plans made for these weights (packed projections,
            # float32 norm parameters): held here, so no later eviction frees their memory
            self.kept = tuple(tuple(w.__dict__.get("_cuda_plans", {}).values()) for w, _, _ in self._specs)
        self.graph.replay()
        return self.out


class PoolReplay(ReplayCache):
    """``graph_transformer_pool`` of host-indexed batches, replayed from a CUDA graph per
    size bucket (module doc). Up to ``max_graphs`` buckets are kept, least recently used
    dropped; all are dropped when the layer specs change (new weights).

    ``graphs``: :class:`rasfast.ops.replay.CudaGraphs` (default), or
    :class:`~rasfast.ops.replay.EagerGraphs` to run the same padded path without a GPU.
    """

    _specs = None

    def serves(self, device: torch.device) -> bool:
        """CUDA graphs need a CUDA device; the eager stand-in runs anywhere."""
        return device.type == "cuda" or self.eager_stand_in()

    def __call__(self, specs, x: torch.Tensor, edge_index, edge_attr: Optional[torch.Tensor], graph_ptr,
                 dtype: torch.dtype, device: torch.device, backend: str = "auto") -> torch.Tensor:
        """[G, hidden]: the pooled vectors of the batch (a new tensor, not the graph's output)."""
        if specs is not self._specs:  # captured graphs read the old weights' packed copies
            self.clear()
            self._specs = specs
        if x.dim() != 2:
            raise ValueError(f"x: expected [N, F], got shape {tuple(x.shape)}")
        n = x.shape[0]
        sizes = bucket_sizes(n, edge_index.shape[1], len(graph_ptr) - 1)
        index = padded_index(edge_index, graph_ptr, n, sizes)
        if edge_attr is not None and edge_attr.shape[0] != edge_index.shape[1]:
            raise ValueError(f"edge_attr: expected {edge_index.shape[1]} rows (one per edge), "
                             f"got {edge_attr.shape[0]}")
        key = (sizes, x.shape[1], None if edge_attr is None else edge_attr.shape[1], dtype, device, backend)
        entry = self.entry(key, lambda: _Entry(sizes, specs, x.shape[1], key[2], dtype, device, backend,
                                               self.graphs))
        with entry.use.on(device):
            entry.load(x, edge_attr, index)
            return entry.run()[:len(graph_ptr) - 1].clone()
