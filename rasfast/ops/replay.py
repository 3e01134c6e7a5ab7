"""Replaying a call from a CUDA graph: captured once, then one graph launch a call.

Why: a per-question call of a rasfast op is host-bound on a GPU. The sixth H100 run measured
33-95% of each call as the host's (`benchmarks/results/gpu_roofline.md`): Python, torch's
dispatch and a launch per kernel, for a few hundred microseconds of device work. A CUDA
graph replays every captured kernel with one launch from the host.

The contract of the captured function ``fn()``:
- it takes no arguments: it reads its inputs from tensors the caller keeps alive at fixed
  addresses (static buffers) and copies each call's inputs into before the replay;
- it is free of host synchronisations and host-to-device copies of host data (every rasfast
  op with ``validate="none"`` on device inputs is; the roofline run checks each one's
  replays against fresh eager calls);
- its outputs are overwritten by the next replay: copy them out first.

Two implementations of that contract:
- :class:`CudaGraphs`: ``torch.cuda.CUDAGraph``, after a warm-up on a side stream (torch's
  documented recipe: lazy initialisation and cuBLAS workspaces happen outside the capture);
- :class:`EagerGraphs`: a stand-in with the same contract for machines without a GPU (the
  tests, the CUDA emulator). Its capture runs ``fn`` once and keeps it; its replay runs it
  again and copies the results into the captured outputs. A caller that forgets to copy an
  input into its static buffer, or reads an output after a later replay, sees what it would
  see with a CUDA graph.
"""
from __future__ import annotations

import collections
import threading
from typing import Callable, Tuple, Union

import torch

Outputs = Union[torch.Tensor, Tuple[torch.Tensor, ...]]


def _as_tuple(out: Outputs) -> Tuple[torch.Tensor, ...]:
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out):
        return tuple(out)
    raise TypeError(f"fn: a captured function must return a tensor or a tuple of tensors, "
                    f"got {type(out).__name__}")


class CudaGraphs:
    """Captures with ``torch.cuda.CUDAGraph`` on the current device."""

    def __init__(self, warmup: int = 2):
        self.warmup = warmup

    def capture(self, fn: Callable[[], Outputs]) -> Tuple[object, Tuple[torch.Tensor, ...]]:
        """(graph, outputs): ``graph.replay()`` reruns ``fn``'s kernels, writing ``outputs``."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: another thread's CUDA calls during this capture neither fail it nor
        # are failed by it (ThemeIndex.search is used from many threads)
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            outs = _as_tuple(fn())
        return graph, outs


class _EagerGraph:
    def __init__(self, fn: Callable[[], Outputs], outs: Tuple[torch.Tensor, ...]):
        self._fn, self._outs = fn, outs
        self.replays = 0

    def replay(self) -> None:
        for dst, src in zip(self._outs, _as_tuple(self._fn())):
            if dst.shape != src.shape or dst.dtype != src.dtype:
                raise RuntimeError("replay: the function's outputs changed shape or dtype since "
                                   "capture; a CUDA graph's cannot")
            dst.copy_(src)
        self.replays += 1


class EagerGraphs:
    """The same contract without a GPU: replay reruns ``fn`` into the captured outputs."""

    def __init__(self):
        self.captures = 0

    def capture(self, fn: Callable[[], Outputs]) -> Tuple[object, Tuple[torch.Tensor, ...]]:
        outs = tuple(t.clone() for t in _as_tuple(fn()))
        self.captures += 1
        return _EagerGraph(fn, outs), outs


def copy_into(static: torch.Tensor, src: torch.Tensor) -> None:
    """``static[:len(src)] = src`` without a host sync: a host tensor bound for a GPU goes
    through a pinned staging block (torch's caching host allocator keeps it until the copy
    has run) and a non-blocking transfer; the dtype is converted on the host first."""
    dst = static[:src.shape[0]]
    if src.device.type == "cpu" and static.device.type == "cuda":
        staged = torch.empty(src.shape, dtype=static.dtype, pin_memory=True)
        staged.copy_(src)
        dst.copy_(staged, non_blocking=True)
    else:
        dst.copy_(src)


class StaticUse:
    """One use at a time of a graph's static buffers, across threads and streams: a lock for
    the host's copy-replay-copy sequence, and on CUDA an event the next use's stream waits
    for, so a copy into the buffers on one stream cannot overtake a replay still reading them
    on another. Use: ``with use.on(device): copy in, replay, copy out``."""

    def __init__(self):
        self._lock = threading.Lock()
        self._event = None

    def on(self, device: torch.device):
        return _Use(self, device)


class _Use:
    def __init__(self, owner: StaticUse, device: torch.device):
        self._owner, self._device = owner, device

    def __enter__(self):
        self._owner._lock.acquire()
        ev = self._owner._event
        if ev is not None and self._device.type == "cuda":
            torch.cuda.current_stream(self._device).wait_event(ev)
        return self

    def __exit__(self, *exc):
        try:
            if self._device.type == "cuda" and exc[0] is None:
                ev = torch.cuda.Event()
                ev.record(torch.cuda.current_stream(self._device))
                self._owner._event = ev
        finally:
            self._owner._lock.release()
        return False


class ReplayCache:
    """The captured graphs of one caller, by key, least recently used dropped past
    ``max_graphs``; ``graphs``: :class:`CudaGraphs` (default) or :class:`EagerGraphs`."""

    def __init__(self, max_graphs: int = 8, graphs=None):
        if int(max_graphs) < 1:
            raise ValueError(f"max_graphs: expected >= 1, got {max_graphs}")
        self.max_graphs = int(max_graphs)
        self.graphs = graphs if graphs is not None else CudaGraphs()
        self._entries: "collections.OrderedDict" = collections.OrderedDict()
        self._lock = threading.Lock()
        self.captures = 0

    def eager_stand_in(self) -> bool:
        return isinstance(self.graphs, EagerGraphs)

    def entry(self, key, make: Callable[[], object]):
        """The entry under ``key``, made by ``make()`` when absent (counted in ``captures``)."""
        with self._lock:
            e = self._entries.get(key)
            if e is None:
                e = self._entries[key] = make()
                self.captures += 1
                while len(self._entries) > self.max_graphs:
                    self._entries.popitem(last=False)
            self._entries.move_to_end(key)
            return e

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
