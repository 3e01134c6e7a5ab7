"""Per-question ThemeIndex searches replayed from CUDA graphs.

A RAS step searches the index with one sub-query: a few hundred microseconds of device work
behind a host path of checks, a dozen launches and their Python (the sixth H100 run: 392 us
of host time in a 1,192 us ``theme_scoped_search``, ``validate="none"``). The shapes of such a
call are fixed (B queries of the index's widths, K, k), so no padding is needed: the search
is captured once per (B, K, k, ranges, theme_weight, backend) and state of the index's
matrices, and a call copies its checked, normalised host queries into the static buffers and
launches the graph.

The captured call is :meth:`ThemeIndex._search_ranges`, the eager path's own (the compiled
kernels per shard and the merge, on the device, no host read). The graph reads the corpus
matrices and what the GEMM path cached per corpus (norms, padded copies) by address: the
entry holds the index view and those cached tensors (``theme_gemm.cached_tensors``), so no
eviction frees memory it reads; a matrix written in place (its version) or replaced (its
pointer) makes a new key.
"""
from __future__ import annotations


import torch

from ..ops import theme_gemm
from ..ops.replay import ReplayCache, StaticUse, copy_into


def _state(t: torch.Tensor):
    return None if t is None else (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t._version)


class _Entry:
    """One captured search: its static query buffers (float32, on the index's device), the
    call that reads them, its graph and outputs, and what the graph reads held alive."""

    def __init__(self, view, shapes, call, graphs):
        dev = view.emb.device
        self.queries = [torch.zeros(sh, dtype=torch.float32, device=dev) for sh in shapes]
        self._call = lambda: call(*self.queries)
        self._view = view  # its matrices stay alive while the graph reads them
        self._graphs = graphs
        self.graph = None
        self.outs = None
        self.kept = ()
        self.use = StaticUse()  # ThemeIndex.search is safe from any number of threads

    def run(self):
        if self.graph is None:
            self.graph, self.outs = self._graphs.capture(self._call)
            self.kept = theme_gemm.cached_tensors()
        self.graph.replay()
        return self.outs


class SearchReplay(ReplayCache):
    """``ThemeIndex`` searches of host queries replayed from a CUDA graph per call shape
    (module doc): :meth:`search` (theme-scoped) and :meth:`dense` (flat). Up to
    ``max_graphs`` are kept, least recently used dropped.

    ``graphs``: :class:`rasfast.ops.replay.CudaGraphs` (default) or
    :class:`~rasfast.ops.replay.EagerGraphs` (the same path without a GPU)."""

    def serves(self, index_device: torch.device, query_device: torch.device, backend: str) -> bool:
        """Host queries, a compiled backend, and a CUDA index (any index for the stand-in)."""
        return (query_device.type == "cpu" and backend != "torch"
                and (index_device.type == "cuda" or self.eager_stand_in()))

    def _replay(self, view, key, queries, call):
        entry = self.entry(key, lambda: _Entry(view, [tuple(q.shape) for q in queries], call, self.graphs))
        with entry.use.on(view.emb.device):
            for static, q in zip(entry.queries, queries):
                copy_into(static, q)
            ids, sc = entry.run()
            return ids.clone(), sc.clone()

    def search(self, view, qp, qe, ranges, K, k, w, be):
        """:meth:`ThemeIndex._search_ranges` replayed: (ids, scores) on the index's device,
        new tensors (not the graph's outputs)."""
        ranges = list(ranges)
        key = ("search", tuple(qp.shape), tuple(qe.shape), tuple(ranges), K, k, w, be, view.metric,
               _state(view.ppd), _state(view.emb))
        return self._replay(view, key, (qp, qe),
                            lambda qp_, qe_: view._search_ranges(qp_, qe_, ranges, K, k, w, be))

    def dense(self, view, qe, k, be):
        """:meth:`ThemeIndex._dense_device` (the flat search) replayed, as :meth:`search`."""
        key = ("dense", tuple(qe.shape), k, be, _state(view.emb))
        return self._replay(view, key, (qe,), lambda qe_: view._dense_device(qe_, k, be))
